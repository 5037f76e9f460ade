//! The state side of an execute-verify server, shared by both deployments: carries out a
//! protocol core's execution and state-transfer work ([`Work`]) on an [`Executor`] and
//! answers with what it did ([`Done`], for the core) or messages for another server.
//!
//! A driver hands the work to [`Stage::apply`] in the order the core asked for it (a
//! production runtime on its execution thread, a simulator inline). Requests reach the
//! service as their payload bytes.

use bytes::Bytes;
use tagma_wire::{Digest, EveBatch, EveMessage, TreeNode, TreePrefix};

use crate::batch::{Batch, NonDeterminism};
use crate::executor::{Execution, Executor, Stable};
use crate::mixer::Mixer;
use crate::service::EveService;
use crate::token::{Token, TokenProof};
use crate::tree::{NodeSummary, ObjectId, Prefix, SyncError, TreeSync};

/// Work a protocol core asks of its stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    /// Execute the next batch, in parallel or in order; `run` tags the outcome.
    Execute {
        run: u32,
        batch: EveBatch,
        sequential: bool,
    },
    /// The oldest executed batch committed with this token; `checked`: another server's
    /// token (or the verifiers' decision) confirmed it, or it ran in order — otherwise it is
    /// one server's parallel run that nothing compared (the stage commits it all the same).
    Commit {
        seq: u64,
        token: Digest,
        checked: bool,
    },
    /// Discard every executed batch not committed.
    Rollback,
    /// Take the committed state as the one served to a fetching server (answered with
    /// [`Done::Snapshot`]).
    TakeSnapshot,
    /// Describe these nodes of the served state (answered with a TREE-NODES message).
    AnswerTreeQuery { seq: u64, prefixes: Vec<TreePrefix> },
    /// Fetch the state whose batch, token, root digest and token proof are these
    /// (TREE-QUERY messages, then [`Done::Installed`] or [`Done::FetchFailed`]); the state
    /// is installed only if the root and the proof give the token.
    Fetch {
        seq: u64,
        token: Digest,
        root: Digest,
        proof: Option<TokenProof>,
    },
    /// Nodes the donor sent, for the fetch under way.
    TreeNodes {
        seq: u64,
        nodes: Vec<(TreePrefix, TreeNode)>,
    },
}

/// What the stage did, for the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// Batch `seq` executed in run `run`.
    Executed {
        run: u32,
        seq: u64,
        token: Digest,
        outputs: Vec<Bytes>,
    },
    /// The committed state is now the one served to a fetching server.
    Snapshot {
        seq: u64,
        token: Digest,
        root: Digest,
        proof: Option<TokenProof>,
    },
    /// The fetched state is installed.
    Installed { seq: u64 },
    /// The fetch failed (the donor's nodes did not match the digests they must have).
    FetchFailed,
}

/// What carrying out work produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StageOutput {
    /// For the core.
    Done(Done),
    /// For the other server (the donor of a fetch, or the server whose query it answers).
    Send(EveMessage),
}

/// A fetch under way: the state offered and the tree fetched so far.
struct Fetching {
    seq: u64,
    token: Token,
    proof: Option<TokenProof>,
    sync: TreeSync,
}

/// The executor of a server, the state it serves a joining server, and its own fetch.
pub struct Stage<S: EveService<Request = Bytes>, M> {
    executor: Executor<S, M>,
    /// Prefixes asked in one TREE-QUERY, at most.
    query_max: usize,
    served: Option<Stable>,
    fetching: Option<Fetching>,
    /// Objects and bytes fetched by the last completed fetch.
    last_fetch: (usize, usize),
    /// Parallel batches whose threads' accesses conflicted (the mixer missed it), and of
    /// those the ones the executor ran again in order.
    conflicts: (u64, u64),
}

impl<S, M> Stage<S, M>
where
    S: EveService<Request = Bytes>,
    M: Mixer<Bytes> + Sync,
{
    pub fn new(executor: Executor<S, M>, query_max: usize) -> Self {
        Stage {
            executor,
            query_max: query_max.max(1),
            served: None,
            fetching: None,
            last_fetch: (0, 0),
            conflicts: (0, 0),
        }
    }

    pub fn executor(&self) -> &Executor<S, M> {
        &self.executor
    }

    /// Objects and value bytes the last completed fetch brought.
    pub fn last_fetch(&self) -> (usize, usize) {
        self.last_fetch
    }

    /// Parallel batches whose threads' accesses conflicted (conflicts the mixer missed), and
    /// of those the ones run again in order before the token, since the start.
    pub fn missed_conflicts(&self) -> (u64, u64) {
        self.conflicts
    }

    /// Carries out `work`.
    pub fn apply(&mut self, work: Work) -> Vec<StageOutput> {
        match work {
            Work::Execute {
                run,
                batch,
                sequential,
            } => self.execute(run, batch, sequential),
            Work::Commit { seq, token, .. } => {
                // The core commits only what it saw this executor execute with this token.
                self.executor
                    .commit(seq, Token(token.0))
                    .expect("the core commits executed batches in order with their tokens");
                Vec::new()
            }
            Work::Rollback => {
                self.executor.rollback();
                Vec::new()
            }
            Work::TakeSnapshot => {
                let stable = self.executor.stable().clone();
                let root = stable.tree.hash().root;
                let out = StageOutput::Done(Done::Snapshot {
                    seq: stable.seq,
                    token: Digest(stable.token.0),
                    root: Digest(root),
                    proof: stable.proof,
                });
                self.served = Some(stable);
                vec![out]
            }
            Work::AnswerTreeQuery { seq, prefixes } => {
                let nodes = prefixes
                    .into_iter()
                    .map(|p| (p, self.describe(seq, p)))
                    .collect();
                vec![StageOutput::Send(EveMessage::TreeNodes { seq, nodes })]
            }
            Work::Fetch {
                seq,
                token,
                root,
                proof,
            } => {
                self.executor.rollback();
                if Token::of(seq, &root.0, proof.as_ref()) != Token(token.0) {
                    // The offer's root and proof do not give its token.
                    return vec![StageOutput::Done(Done::FetchFailed)];
                }
                let own = self.executor.stable().tree.clone();
                self.fetching = Some(Fetching {
                    seq,
                    proof,
                    token: Token(token.0),
                    sync: TreeSync::new(own, root.0),
                });
                self.continue_fetch()
            }
            Work::TreeNodes { seq, nodes } => self.take_nodes(seq, nodes),
        }
    }

    fn execute(&mut self, run: u32, batch: EveBatch, sequential: bool) -> Vec<StageOutput> {
        let batch = Batch {
            seq: batch.seq,
            nd: NonDeterminism {
                seed: batch.seed,
                timestamp_ms: batch.timestamp_ms,
            },
            requests: batch.requests.into_iter().map(|r| r.payload).collect(),
        };
        let execution = if sequential {
            Execution::Sequential
        } else {
            Execution::Parallel
        };
        match self.executor.execute(&batch, execution) {
            Ok(executed) => {
                self.conflicts.0 += executed.missed_conflicts as u64;
                self.conflicts.1 += executed.reruns as u64;
                vec![StageOutput::Done(Done::Executed {
                    run,
                    seq: executed.seq,
                    token: Digest(executed.token.0),
                    outputs: executed.outputs.clone(),
                })]
            }
            // A batch of a run rolled back since, or already replaced by a fetched state:
            // the core ignores its outcome anyway.
            Err(_) => Vec::new(),
        }
    }

    fn describe(&self, seq: u64, prefix: TreePrefix) -> TreeNode {
        let (Some(served), Some(prefix)) = (&self.served, Prefix::new(prefix.depth, prefix.bits))
        else {
            return TreeNode::Absent;
        };
        if served.seq != seq {
            return TreeNode::Absent;
        }
        match served.tree.summary(prefix) {
            None => TreeNode::Absent,
            Some(NodeSummary::Empty) => TreeNode::Empty,
            Some(NodeSummary::Leaf { id, value }) => TreeNode::Leaf { id: id.0, value },
            Some(NodeSummary::Branch { children }) => TreeNode::Branch {
                children: children.into_iter().map(|(s, d)| (s, Digest(d))).collect(),
            },
        }
    }

    fn continue_fetch(&mut self) -> Vec<StageOutput> {
        let Some(fetching) = self.fetching.as_ref() else {
            return Vec::new();
        };
        if !fetching.sync.is_done() {
            let prefixes = (fetching.sync.wanted().take(self.query_max))
                .map(|p| TreePrefix {
                    depth: p.depth(),
                    bits: p.bits(),
                })
                .collect();
            return vec![StageOutput::Send(EveMessage::TreeQuery {
                seq: fetching.seq,
                prefixes,
            })];
        }
        let fetching = self.fetching.take().expect("checked above");
        let (_, objects, bytes) = fetching.sync.fetched();
        match fetching.sync.finish() {
            Ok(tree) => {
                self.last_fetch = (objects, bytes);
                self.executor.adopt(Stable {
                    seq: fetching.seq,
                    token: fetching.token,
                    proof: fetching.proof,
                    tree,
                });
                vec![StageOutput::Done(Done::Installed { seq: fetching.seq })]
            }
            Err(_) => vec![StageOutput::Done(Done::FetchFailed)],
        }
    }

    fn take_nodes(&mut self, seq: u64, nodes: Vec<(TreePrefix, TreeNode)>) -> Vec<StageOutput> {
        let Some(fetching) = self.fetching.as_mut() else {
            return Vec::new();
        };
        if fetching.seq != seq {
            return Vec::new();
        }
        let mut failed = false;
        for (prefix, node) in nodes {
            let Some(prefix) = Prefix::new(prefix.depth, prefix.bits) else {
                failed = true;
                break;
            };
            let summary = match node {
                // The donor moved on or lost the state: start again.
                TreeNode::Absent => {
                    failed = true;
                    break;
                }
                TreeNode::Empty => NodeSummary::Empty,
                TreeNode::Leaf { id, value } => NodeSummary::Leaf {
                    id: ObjectId(id),
                    value,
                },
                TreeNode::Branch { children } => NodeSummary::Branch {
                    children: children.into_iter().map(|(s, d)| (s, d.0)).collect(),
                },
            };
            match fetching.sync.receive(prefix, summary) {
                Ok(()) | Err(SyncError::NotWanted(_)) => {}
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            self.fetching = None;
            return vec![StageOutput::Done(Done::FetchFailed)];
        }
        self.continue_fetch()
    }
}
