//! The primary-backup protocol as a sans-IO state machine (see the parent module).
//!
//! Server `view % 2` is the primary of `view`. The primary keeps a record of every batch
//! not yet both committed and matched by the backup: its batch, its own token and outputs,
//! and the backup's token. It commits a batch when both tokens are in and equal (or when it
//! serves alone), in order, and then releases the replies; it tells the backup with COMMIT.
//! Different tokens start a new *run*: both servers roll back to the committed state and
//! execute the uncommitted batches again, the first in order. Tokens and executions of an
//! earlier run are ignored.
//!
//! The backup executes what the primary sends, returns tokens, commits what the primary
//! says is committed and replies too (a client takes the first reply). Both servers send
//! COMMIT at least every `heartbeat_ms`. A backup that hears nothing from the primary for
//! `takeover_ms` commits every batch it executed and sent its token for (the primary may
//! have committed it with that token; such a commit of a parallel run is reported as
//! unchecked), runs the rest again in order, and becomes the primary of the next view. A
//! primary that hears nothing from the backup for `takeover_ms` serves alone; a server alone
//! runs its batches in order, since nothing would check a parallel run. A token missing for
//! `takeover_ms` while the backup is heard was lost: the primary sends the batch again and
//! the backup answers with its token (a primary never serves alone while its backup is
//! heard, or the backup could later take over without what it committed alone).
//!
//! A (re)starting server, a backup that missed a batch, or a server that hears of a later
//! view joins: JOIN, the primary's STATE-OFFER (the committed state's batch number, token,
//! root digest, the primary's run and the client sessions), an incremental fetch of the
//! tree (TREE-QUERY / TREE-NODES, carried out by the [`Stage`](crate::Stage)), then JOINED;
//! the primary sends it every batch after the offered one, each run as the primary ran it,
//! and for the batches it had already committed, checks the joiner's token against its own
//! before telling it to commit.

use std::collections::{BTreeMap, VecDeque};

use super::sessions::{Admission, Intake, Sessions};
use crate::stage::{Done, Work};
use bytes::Bytes;
use tagma_wire::{ClientId, Digest, EveBatch, EveMessage, EveRequest, EveSession, RequestSeq};

/// Settings of a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PbConfig {
    /// This server: 0 or 1 (0 is the primary of view 0).
    pub me: u8,
    /// Requests per batch, at most.
    pub batch_size_max: usize,
    /// Batches executed or executing and not yet committed, at most.
    pub pipeline_max: usize,
    /// Client requests waiting for a batch, at most (more are dropped: clients retransmit).
    pub queue_max: usize,
    /// Batches committed while a joining server fetches the state, at most (more restart
    /// its join from a newer state).
    pub catch_up_max: usize,
    pub heartbeat_ms: u64,
    /// Silence from the other server after which the backup takes over, or the primary
    /// serves alone.
    pub takeover_ms: u64,
    /// Replies kept per client (as many requests may be in flight), and clients kept.
    pub replies_per_client: usize,
    pub sessions_max: usize,
}

impl PbConfig {
    pub fn new(me: u8) -> PbConfig {
        PbConfig {
            me,
            batch_size_max: 100,
            pipeline_max: 4,
            queue_max: 10_000,
            catch_up_max: 1_000,
            heartbeat_ms: 100,
            takeover_ms: 500,
            replies_per_client: 128,
            sessions_max: 100_000,
        }
    }
}

/// What the driver hands the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// An authenticated client request.
    Request(EveRequest),
    /// A message from the other server.
    Peer(EveMessage),
    /// Time passed.
    Tick,
    /// The stage did what it was asked.
    Stage(Done),
}

/// What the core asks the driver to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send a message to the other server.
    Send(EveMessage),
    /// Reply to a client.
    Reply {
        client: ClientId,
        seq: RequestSeq,
        reply: Bytes,
    },
    /// Work for the stage: executing batches, committing (`checked` says whether the other
    /// server's token confirmed the batch: a backup taking over commits what it executed,
    /// which nothing compared if it ran in parallel), rolling back, serving and fetching the
    /// state.
    Stage(Work),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Primary,
    Backup,
    /// Fetching the state from the other server.
    Joining,
}

/// Counters of a server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PbStats {
    pub batches_committed: u64,
    /// Runs started because the two tokens of a batch differed.
    pub rollbacks: u64,
    pub takeovers: u64,
    /// Joins this server served.
    pub joins_served: u64,
    /// Client requests dropped because the queue was full.
    pub requests_dropped: u64,
    /// Batches committed from a parallel run nothing compared (see [`Action::Stage`]).
    pub unchecked_commits: u64,
}

/// One batch not yet committed here, or (at the primary) not yet matched by the backup.
#[derive(Clone, Debug)]
struct Record {
    batch: EveBatch,
    /// This server's token and outputs, once executed in the current run.
    mine: Option<(Digest, Vec<Bytes>)>,
    /// The other server's token (the primary's record).
    theirs: Option<Digest>,
    committed: bool,
    /// The batch runs in order in the current run (after a rollback, or by a server
    /// serving alone).
    sequential: bool,
}

/// A join this primary is serving.
#[derive(Clone, Debug)]
struct Offer {
    /// The last batch committed when the join came: the state the stage takes.
    at: u64,
    /// The offered state's batch, once the stage took it.
    seq: Option<u64>,
    sessions: Vec<EveSession>,
}

/// The primary-backup protocol of one server.
#[derive(Debug)]
pub struct PbCore {
    cfg: PbConfig,
    view: u64,
    run: u32,
    joining: bool,
    /// The other server takes part (primary: waits for its tokens).
    peer_alive: bool,
    last_heard_ms: u64,
    last_sent_ms: u64,
    /// Last batch committed here.
    committed: u64,
    /// Last batch the backup was told to commit (primary).
    peer_committed: u64,
    /// Next batch number to assign (primary) or to take (backup).
    next_seq: u64,
    last_timestamp_ms: u64,
    records: BTreeMap<u64, Record>,
    /// Requests waiting for a batch, and the keys of those queued or in a record.
    intake: Intake,
    sessions: Sessions,
    offer: Option<Offer>,
    /// Since when the primary waits for the backup's token of its oldest uncommitted batch
    /// it executed itself.
    awaiting_since_ms: Option<u64>,
    actions: VecDeque<Action>,
    stats: PbStats,
}

impl PbCore {
    /// A server starting with the cluster (both from the initial state, view 0), or
    /// `joining` one that fetches the state from the other.
    pub fn new(cfg: PbConfig, now_ms: u64, joining: bool) -> PbCore {
        assert!(cfg.me < 2, "a primary-backup server is 0 or 1");
        let sessions = Sessions::new(cfg.replies_per_client, cfg.sessions_max);
        let mut core = PbCore {
            cfg,
            view: 0,
            run: 0,
            joining,
            peer_alive: !joining,
            last_heard_ms: now_ms,
            last_sent_ms: now_ms,
            committed: 0,
            peer_committed: 0,
            next_seq: 1,
            last_timestamp_ms: 0,
            records: BTreeMap::new(),
            intake: Intake::default(),
            sessions,
            offer: None,
            awaiting_since_ms: None,
            actions: VecDeque::new(),
            stats: PbStats::default(),
        };
        if joining {
            core.send(now_ms, EveMessage::Join { view: 0 });
        }
        core
    }

    pub fn role(&self) -> Role {
        if self.joining {
            Role::Joining
        } else if self.view % 2 == u64::from(self.cfg.me) {
            Role::Primary
        } else {
            Role::Backup
        }
    }

    pub fn view(&self) -> u64 {
        self.view
    }

    /// The last batch committed here.
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Whether the primary waits for the backup's tokens (or the backup follows a primary).
    pub fn peer_alive(&self) -> bool {
        self.peer_alive
    }

    pub fn stats(&self) -> PbStats {
        self.stats
    }

    fn work(&mut self, work: Work) {
        self.actions.push_back(Action::Stage(work));
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When the core next needs a [`Input::Tick`].
    pub fn next_timeout_ms(&self) -> u64 {
        (self.last_sent_ms + self.cfg.heartbeat_ms).min(self.last_heard_ms + self.cfg.takeover_ms)
    }

    pub fn handle(&mut self, now_ms: u64, input: Input) {
        match input {
            Input::Request(request) => self.on_request(now_ms, request),
            Input::Peer(message) => self.on_peer(now_ms, message),
            Input::Tick => self.on_tick(now_ms),
            Input::Stage(Done::Executed {
                run,
                seq,
                token,
                outputs,
            }) => self.on_executed(now_ms, run, seq, token, outputs),
            Input::Stage(Done::Snapshot {
                seq,
                token,
                root,
                proof,
            }) => self.on_snapshot(now_ms, seq, token, root, proof),
            Input::Stage(Done::Installed { seq }) => self.on_installed(now_ms, seq),
            Input::Stage(Done::FetchFailed) => {
                if self.joining {
                    self.send(now_ms, EveMessage::Join { view: self.view });
                }
            }
        }
        self.check_invariants();
    }

    fn check_invariants(&self) {
        debug_assert!(self.committed < self.next_seq);
        debug_assert!(
            self.records.keys().all(|&s| s < self.next_seq),
            "a record beyond the next batch"
        );
        debug_assert!(
            (self.records.iter()).all(|(&s, r)| r.committed == (s <= self.committed)),
            "records are committed exactly up to `committed`"
        );
        debug_assert!(self.intake.queue.len() <= self.cfg.queue_max);
    }

    fn send(&mut self, now_ms: u64, message: EveMessage) {
        self.last_sent_ms = now_ms;
        self.actions.push_back(Action::Send(message));
    }

    // --------------------------------------------------------------------------------------
    // Client requests and batches
    // --------------------------------------------------------------------------------------

    fn on_request(&mut self, now_ms: u64, request: EveRequest) {
        let (client, seq) = (request.client, request.seq);
        match (self.intake).admit(&self.sessions, self.cfg.queue_max, request) {
            Admission::Reply(reply) => self.actions.push_back(Action::Reply { client, seq, reply }),
            Admission::Known => {}
            Admission::Dropped => self.stats.requests_dropped += 1,
            Admission::Queued => self.propose(now_ms),
        }
    }

    /// Primary: turns queued requests into batches while the pipeline has room.
    fn propose(&mut self, now_ms: u64) {
        if self.role() != Role::Primary {
            return;
        }
        while !self.intake.queue.is_empty() && self.uncommitted() < self.cfg.pipeline_max {
            let take = self.intake.queue.len().min(self.cfg.batch_size_max);
            let requests: Vec<EveRequest> = self.intake.queue.drain(..take).collect();
            let seq = self.next_seq;
            self.next_seq += 1;
            self.last_timestamp_ms = self.last_timestamp_ms.max(now_ms);
            let batch = EveBatch {
                seq,
                seed: batch_seed(self.view, seq, now_ms),
                timestamp_ms: self.last_timestamp_ms,
                requests,
            };
            // Alone, nothing would check a parallel run: batches run in order.
            let sequential = !self.peer_alive;
            self.records.insert(
                seq,
                Record {
                    batch: batch.clone(),
                    mine: None,
                    theirs: None,
                    committed: false,
                    sequential,
                },
            );
            self.work(Work::Execute {
                run: self.run,
                batch: batch.clone(),
                sequential,
            });
            if self.peer_alive {
                let committed = self.peer_committed;
                self.send_batch(now_ms, batch, sequential, committed);
            }
        }
    }

    /// Sends `batch` to the backup in the current view and run, saying that every batch up
    /// to `committed` is committed.
    pub(super) fn send_batch(
        &mut self,
        now_ms: u64,
        batch: EveBatch,
        sequential: bool,
        committed: u64,
    ) {
        let message = EveMessage::ExecuteBatch {
            view: self.view,
            run: self.run,
            committed,
            sequential,
            batch,
        };
        self.send(now_ms, message);
    }

    fn uncommitted(&self) -> usize {
        self.records.values().filter(|r| !r.committed).count()
    }

    fn on_executed(&mut self, now_ms: u64, run: u32, seq: u64, token: Digest, outputs: Vec<Bytes>) {
        if run != self.run {
            return;
        }
        let Some(record) = self.records.get_mut(&seq) else {
            return;
        };
        if record.mine.is_some() {
            return;
        }
        record.mine = Some((token, outputs));
        match self.role() {
            Role::Primary => self.settle(now_ms),
            Role::Backup => {
                let view = self.view;
                self.send(
                    now_ms,
                    EveMessage::Token {
                        view,
                        run,
                        seq,
                        token,
                    },
                );
                self.commit_up_to(self.peer_committed);
            }
            Role::Joining => {}
        }
    }

    /// Commits the record of `seq` (the next one) with this server's token and replies.
    fn commit_record(&mut self, seq: u64, checked: bool) {
        debug_assert_eq!(seq, self.committed + 1, "batches commit in order");
        let record = self.records.get_mut(&seq).expect("a record to commit");
        let (token, outputs) = record.mine.clone().expect("committed once executed");
        let checked = checked || record.sequential;
        record.committed = true;
        self.committed = seq;
        self.stats.batches_committed += 1;
        if !checked {
            self.stats.unchecked_commits += 1;
        }
        self.actions.push_back(Action::Stage(Work::Commit {
            seq,
            token,
            checked,
        }));
        for (request, reply) in record.batch.requests.iter().zip(outputs) {
            self.intake.pending.remove(&(request.client, request.seq));
            self.sessions
                .record(request.client, request.seq, reply.clone(), seq);
            self.actions.push_back(Action::Reply {
                client: request.client,
                seq: request.seq,
                reply,
            });
        }
    }

    /// Primary: commits, acknowledges or rolls back what the tokens in hand decide.
    fn settle(&mut self, now_ms: u64) {
        let mut told = self.peer_committed;
        let seqs: Vec<u64> = self.records.keys().copied().collect();
        for seq in seqs {
            let record = &self.records[&seq];
            let Some((mine, _)) = record.mine.clone() else {
                break;
            };
            if !self.peer_alive {
                if !record.committed {
                    self.commit_record(seq, false);
                }
                continue;
            }
            let Some(theirs) = record.theirs else {
                break;
            };
            if mine != theirs {
                if record.committed {
                    // The backup executed a batch committed here otherwise: it fetches the
                    // state again.
                    self.offer_state(now_ms);
                } else {
                    // The backup commits what matched before it rolls back (FIFO): its
                    // rollback keeps only committed batches.
                    self.tell_committed(now_ms, told);
                    self.roll_back(now_ms, seq);
                }
                return;
            }
            if !record.committed {
                self.commit_record(seq, true);
            }
            told = seq;
        }
        self.tell_committed(now_ms, told);
        self.forget_settled();
        let waiting = (self.records.values().find(|r| !r.committed))
            .is_some_and(|r| r.mine.is_some() && r.theirs.is_none());
        self.awaiting_since_ms = match (waiting, self.awaiting_since_ms) {
            (true, Some(since)) => Some(since),
            (true, None) => Some(now_ms),
            (false, _) => None,
        };
        self.propose(now_ms);
    }

    /// Primary: tells the backup that every batch up to `told` committed, if that is news.
    fn tell_committed(&mut self, now_ms: u64, told: u64) {
        if told > self.peer_committed {
            self.peer_committed = told;
            let view = self.view;
            self.send(
                now_ms,
                EveMessage::Commit {
                    view,
                    committed: told,
                },
            );
        }
    }

    /// Drops the records no one needs: committed here and at the backup (or with no backup
    /// to catch up).
    fn forget_settled(&mut self) {
        let keep_from = match (self.role(), self.peer_alive, &self.offer) {
            (Role::Primary, true, _) => self.peer_committed.min(self.committed),
            (Role::Primary, false, Some(offer)) => offer.at,
            _ => self.committed,
        };
        self.records = self.records.split_off(&(keep_from + 1));
    }

    /// Primary: the tokens of `seq` differed; a new run executes every uncommitted batch
    /// again, `seq` in order.
    fn roll_back(&mut self, now_ms: u64, seq: u64) {
        self.stats.rollbacks += 1;
        self.run += 1;
        let (view, run) = (self.view, self.run);
        self.work(Work::Rollback);
        self.send(now_ms, EveMessage::Rollback { view, run, seq });
        self.execute_again(seq, false);
    }

    /// Executes every uncommitted record again in the current run, the first in order.
    /// Executes every record from `first` again in the current run: `first` in order, the
    /// others too if `all_in_order`.
    fn execute_again(&mut self, first: u64, all_in_order: bool) {
        for (&seq, record) in self.records.range_mut(first..) {
            record.mine = None;
            record.theirs = None;
            record.sequential = all_in_order || seq == first;
            self.actions.push_back(Action::Stage(Work::Execute {
                run: self.run,
                batch: record.batch.clone(),
                sequential: record.sequential,
            }));
        }
    }

    /// This server goes on alone (the other is gone): what it executed in parallel and no
    /// one compared runs again in order in a new run. With `keep_executed` (a backup taking
    /// over), the batches it executed and sent its token for commit as they are first: the
    /// old primary may have committed them with that token.
    pub(super) fn go_alone(&mut self, now_ms: u64, keep_executed: bool) {
        self.peer_alive = false;
        if keep_executed {
            self.settle(now_ms);
        }
        let unchecked = (self.records.iter())
            .find(|(_, r)| !r.committed && !r.sequential)
            .map(|(seq, _)| *seq);
        if let Some(first) = unchecked {
            let first = first.min(self.committed + 1);
            self.run += 1;
            self.work(Work::Rollback);
            self.execute_again(first, true);
        }
        self.settle(now_ms);
    }

    /// Backup: commits every executed record up to `upto`, in order.
    fn commit_up_to(&mut self, upto: u64) {
        while self.committed < upto {
            let next = self.committed + 1;
            match self.records.get(&next) {
                // On the primary's word: it compared the tokens.
                Some(r) if r.mine.is_some() => self.commit_record(next, true),
                _ => break,
            }
        }
        self.forget_settled();
    }
}

/// The primary's random seed for a batch: a digest of the view, the batch number and the
/// time, so that it differs from batch to batch and every executor uses the same.
pub(crate) fn batch_seed(view: u64, seq: u64, now_ms: u64) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"tagma eve batch seed\0");
    h.update(&view.to_le_bytes());
    h.update(&seq.to_le_bytes());
    h.update(&now_ms.to_le_bytes());
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(seed)
}

mod join;
mod peer;
mod time;
