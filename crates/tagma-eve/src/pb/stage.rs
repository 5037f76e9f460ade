//! The state side of a primary-backup server: carries out the core's execution and
//! state-transfer actions on an [`Executor`] and answers with inputs for the core or
//! messages for the other server.
//!
//! A driver hands every [`Action`] that is not a message or a reply to
//! [`Stage::apply`], in the order the core emitted them (a production runtime on its
//! execution thread, a simulator inline). Requests reach the service as their payload bytes.

use bytes::Bytes;
use tagma_wire::{Digest, EveBatch, EveMessage, TreeNode, TreePrefix};

use super::core::{Action, Input};
use crate::batch::{Batch, NonDeterminism};
use crate::executor::{Execution, Executor, Stable};
use crate::mixer::Mixer;
use crate::service::EveService;
use crate::token::Token;
use crate::tree::{NodeSummary, ObjectId, Prefix, SyncError, TreeSync};

/// What carrying out an action produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StageOutput {
    /// For the core.
    Input(Input),
    /// For the other server.
    Send(EveMessage),
}

/// A fetch under way: the state offered and the tree fetched so far.
struct Fetching {
    seq: u64,
    token: Token,
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
        }
    }

    pub fn executor(&self) -> &Executor<S, M> {
        &self.executor
    }

    /// Objects and value bytes the last completed fetch brought.
    pub fn last_fetch(&self) -> (usize, usize) {
        self.last_fetch
    }

    /// Carries out `action` (messages and replies are the driver's, and give nothing).
    pub fn apply(&mut self, action: Action) -> Vec<StageOutput> {
        match action {
            Action::Send(_) | Action::Reply { .. } => Vec::new(),
            Action::Execute {
                run,
                batch,
                sequential,
            } => self.execute(run, batch, sequential),
            Action::Commit { seq, token, .. } => {
                // The core commits only what it saw this executor execute with this token.
                self.executor
                    .commit(seq, Token(token.0))
                    .expect("the core commits executed batches in order with their tokens");
                Vec::new()
            }
            Action::Rollback => {
                self.executor.rollback();
                Vec::new()
            }
            Action::TakeSnapshot => {
                let stable = self.executor.stable().clone();
                let root = stable.tree.hash().root;
                let out = StageOutput::Input(Input::Snapshot {
                    seq: stable.seq,
                    token: Digest(stable.token.0),
                    root: Digest(root),
                });
                self.served = Some(stable);
                vec![out]
            }
            Action::AnswerTreeQuery { seq, prefixes } => {
                let nodes = prefixes
                    .into_iter()
                    .map(|p| (p, self.describe(seq, p)))
                    .collect();
                vec![StageOutput::Send(EveMessage::TreeNodes { seq, nodes })]
            }
            Action::Fetch { seq, token, root } => {
                self.executor.rollback();
                let own = self.executor.stable().tree.clone();
                self.fetching = Some(Fetching {
                    seq,
                    token: Token(token.0),
                    sync: TreeSync::new(own, root.0),
                });
                self.continue_fetch()
            }
            Action::TreeNodes { seq, nodes } => self.take_nodes(seq, nodes),
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
            Ok(executed) => vec![StageOutput::Input(Input::Executed {
                run,
                seq: executed.seq,
                token: Digest(executed.token.0),
                outputs: executed.outputs.clone(),
            })],
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
                    tree,
                });
                vec![StageOutput::Input(Input::Installed { seq: fetching.seq })]
            }
            Err(_) => vec![StageOutput::Input(Input::FetchFailed)],
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
            return vec![StageOutput::Input(Input::FetchFailed)];
        }
        self.continue_fetch()
    }
}
