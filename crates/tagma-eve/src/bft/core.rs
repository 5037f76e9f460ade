//! One executor of the BFT deployment as a sans-IO state machine (see the parent module).
//!
//! The executor keeps a record of every batch after the last committed one that it holds:
//! the batch, and its own token and outputs once executed in the current *run* (a run ends
//! when the executor rolls back or fetches a state; executions of an earlier run are
//! ignored). Records cover the batches `committed + 1 .. next_seq` without a gap; the stage
//! executes them in that order. Requests wait in a queue at every executor (clients send to
//! all), so that whichever executor becomes primary can order them.

use std::collections::{BTreeMap, HashSet, VecDeque};

use bytes::Bytes;
use tagma_wire::{ClientId, Digest, EveBatch, EveMessage, EveRequest, EveSession, RequestSeq};

use crate::pb::sessions::{Admission, Intake, Seen, Sessions};
use crate::quorum::Resilience;
use crate::stage::{Done, Work};
use crate::token::Token;
use crate::verify::{Decision, Verify};

/// Settings of an executor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BftConfig {
    /// This executor: 0..n_E.
    pub me: u32,
    pub resilience: Resilience,
    /// Requests per batch, at most.
    pub batch_size_max: usize,
    /// Batches not yet committed, at most (the primary waits for room).
    pub pipeline_max: usize,
    /// Client requests waiting for a batch, at most (more are dropped: clients retransmit).
    pub queue_max: usize,
    /// Work waiting with nothing committed for this long: complain about the view.
    pub progress_ms: u64,
    /// A fetch whose donor does not answer for this long asks the next executor; a batch
    /// decided but not received for this long makes the executor fetch the state.
    pub fetch_ms: u64,
    /// Batches past the last committed one whose responses are kept, at most.
    pub window: u64,
    /// Batches of a later view kept until the verifiers' rollback into it arrives, at most.
    pub future_max: usize,
    pub replies_per_client: usize,
    pub sessions_max: usize,
}

impl BftConfig {
    pub fn new(me: u32, resilience: Resilience) -> BftConfig {
        BftConfig {
            me,
            resilience,
            batch_size_max: 100,
            pipeline_max: 4,
            queue_max: 10_000,
            progress_ms: 500,
            fetch_ms: 200,
            window: 64,
            future_max: 64,
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
    /// An authenticated message from executor `from`.
    Peer { from: u32, message: EveMessage },
    /// A VERIFY-RESPONSE of verifier `verifier`.
    Response { verifier: u32, decision: Decision },
    /// A decision `r + 1` verifiers sent alike, as a client library that votes on replies
    /// hands it over.
    Decided(Decision),
    /// Time passed.
    Tick,
    /// The stage did what it was asked.
    Stage(Done),
}

/// What the core asks the driver to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send a message to executor `to`.
    Send { to: u32, message: EveMessage },
    /// Send a message to every other executor.
    Broadcast(EveMessage),
    /// Send a VERIFY to the verifiers.
    Verify(Verify),
    /// Tell the verifiers that `view` makes no progress here.
    Complain { view: u64 },
    /// Ask the verifiers which token batch `seq` committed with (the answer comes as a
    /// decision).
    Query { seq: u64 },
    /// Ask the verifiers (without ordering) for the view in force and the last committed
    /// batch; the answer comes back as a rollback into that view and a commit of that batch
    /// ([`Input::Decided`] or [`Input::Response`]). An executor asks when it starts and
    /// while it sees nothing commit, so that one that restarted or fell behind learns where
    /// to fetch the state from, even when no client sends anything.
    Poll,
    /// Work for the stage; the messages it produces go to executor `peer`.
    Work { work: Work, peer: Option<u32> },
    Reply {
        client: ClientId,
        seq: RequestSeq,
        reply: Bytes,
    },
}

/// Counters of an executor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecutorStats {
    pub batches_committed: u64,
    /// Views entered on the verifiers' word (each a rollback).
    pub rollbacks: u64,
    /// Committed states fetched from another executor (its own token differed, or it
    /// missed batches).
    pub fetches: u64,
    /// Fetches that failed (a donor's offer or nodes did not check out) and went on with
    /// another donor.
    pub fetches_failed: u64,
    pub complaints: u64,
    pub requests_dropped: u64,
}

#[derive(Clone, Debug)]
struct Record {
    batch: EveBatch,
    sequential: bool,
    /// Token and outputs, once executed in the current run.
    mine: Option<(Token, Vec<Bytes>)>,
}

/// A fetch of the committed state under way.
#[derive(Clone, Debug)]
struct Fetch {
    donor: u32,
    since_ms: u64,
    /// The offer being fetched: its batch, decided token and sessions.
    offered: Option<(u64, Token, Vec<EveSession>)>,
    /// An offer of a batch whose decided token this executor does not know yet: it asked
    /// the verifiers.
    unchecked: Option<Offer>,
}

/// A STATE-OFFER as it came.
#[derive(Clone, Debug)]
struct Offer {
    seq: u64,
    token: Digest,
    root: Digest,
    proof: Option<tagma_wire::EveTokenProof>,
    sessions: Vec<EveSession>,
}

/// The protocol of one executor.
#[derive(Debug)]
pub struct ExecutorCore {
    cfg: BftConfig,
    view: u64,
    run: u32,
    committed: u64,
    committed_token: Token,
    next_seq: u64,
    records: BTreeMap<u64, Record>,
    /// Requests waiting for a batch, and the keys of those queued or in a record.
    intake: Intake,
    sessions: Sessions,
    /// Responses of the batches not yet decided, by batch and verifier.
    responses: BTreeMap<u64, BTreeMap<u32, Decision>>,
    /// Decided tokens of the batches after the last committed one.
    decided: BTreeMap<u64, Token>,
    /// Batches of later views, from their primaries.
    future: VecDeque<(u32, EveMessage)>,
    fetch: Option<Fetch>,
    /// The next donor to ask (an offset from this executor).
    donor_turn: u32,
    /// Executors waiting for a state offer.
    askers: Vec<u32>,
    /// The next batch proposed runs in order (the first of a view).
    first_in_view: bool,
    /// The latest view of a batch that came early, which the verifiers were asked about.
    asked_view: u64,
    last_progress_ms: u64,
    last_complaint_ms: u64,
    /// Since when a decided batch is missing here.
    missing_since_ms: Option<u64>,
    last_timestamp_ms: u64,
    actions: VecDeque<Action>,
    stats: ExecutorStats,
}

impl ExecutorCore {
    /// An executor starting from the initial state, whose token is `genesis`, in view 0.
    pub fn new(cfg: BftConfig, genesis: Token, now_ms: u64) -> ExecutorCore {
        assert!(
            (cfg.me as usize) < cfg.resilience.executors(),
            "an executor is numbered below n_E"
        );
        let sessions = Sessions::new(cfg.replies_per_client, cfg.sessions_max);
        let mut core = ExecutorCore {
            cfg,
            view: 0,
            run: 0,
            committed: 0,
            committed_token: genesis,
            next_seq: 1,
            records: BTreeMap::new(),
            intake: Intake::default(),
            sessions,
            responses: BTreeMap::new(),
            decided: BTreeMap::new(),
            future: VecDeque::new(),
            fetch: None,
            donor_turn: 1,
            askers: Vec::new(),
            first_in_view: false,
            asked_view: 0,
            last_progress_ms: now_ms,
            last_complaint_ms: now_ms,
            missing_since_ms: None,
            last_timestamp_ms: 0,
            actions: VecDeque::new(),
            stats: ExecutorStats::default(),
        };
        core.actions.push_back(Action::Poll);
        core
    }

    pub fn view(&self) -> u64 {
        self.view
    }

    /// The primary of the current view.
    pub fn primary(&self) -> u32 {
        self.primary_of(self.view)
    }

    fn primary_of(&self, view: u64) -> u32 {
        (view % self.cfg.resilience.executors() as u64) as u32
    }

    fn is_primary(&self) -> bool {
        self.primary() == self.cfg.me
    }

    /// The last batch committed here.
    pub fn committed(&self) -> u64 {
        self.committed
    }

    pub fn is_fetching(&self) -> bool {
        self.fetch.is_some()
    }

    pub fn stats(&self) -> ExecutorStats {
        self.stats
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When the core next needs a [`Input::Tick`].
    pub fn next_timeout_ms(&self) -> u64 {
        let mut at = self.last_progress_ms.max(self.last_complaint_ms) + self.cfg.progress_ms;
        if let Some(f) = &self.fetch {
            at = at.min(f.since_ms + self.cfg.fetch_ms);
        }
        if let Some(since) = self.missing_since_ms {
            at = at.min(since + self.cfg.fetch_ms);
        }
        at
    }

    pub fn handle(&mut self, now_ms: u64, input: Input) {
        match input {
            Input::Request(request) => self.on_request(now_ms, request),
            Input::Peer { from, message } => self.on_peer(now_ms, from, message),
            Input::Response { verifier, decision } => self.on_response(now_ms, verifier, decision),
            Input::Decided(decision) => {
                if self.is_news(&decision) {
                    self.on_decision(now_ms, decision);
                }
            }
            Input::Tick => self.on_tick(now_ms),
            Input::Stage(Done::Executed {
                run,
                seq,
                token,
                outputs,
            }) => self.on_executed(now_ms, run, seq, Token(token.0), outputs),
            Input::Stage(Done::Snapshot {
                seq,
                token,
                root,
                proof,
            }) => self.on_snapshot(seq, token, root, proof),
            Input::Stage(Done::Installed { seq }) => self.on_installed(now_ms, seq),
            Input::Stage(Done::FetchFailed) => self.next_donor(now_ms, true),
        }
        self.check_invariants();
    }

    fn check_invariants(&self) {
        debug_assert!(self.committed < self.next_seq);
        debug_assert!(
            (self.records.keys().copied()).eq(self.committed + 1..self.next_seq),
            "records cover the batches after the committed one without a gap"
        );
        debug_assert!(self.intake.queue.len() <= self.cfg.queue_max);
        debug_assert!(self.decided.keys().all(|&s| s > self.committed));
    }

    fn work(&mut self, work: Work, peer: Option<u32>) {
        self.actions.push_back(Action::Work { work, peer });
    }

    // --------------------------------------------------------------------------------------
    // Requests and batches
    // --------------------------------------------------------------------------------------

    fn on_request(&mut self, now_ms: u64, request: EveRequest) {
        let idle = self.intake.queue.is_empty() && self.records.is_empty();
        let (client, seq) = (request.client, request.seq);
        match (self.intake).admit(&self.sessions, self.cfg.queue_max, request) {
            Admission::Reply(reply) => self.actions.push_back(Action::Reply { client, seq, reply }),
            Admission::Known => {}
            Admission::Dropped => self.stats.requests_dropped += 1,
            Admission::Queued => {
                if idle {
                    // Work starts waiting now.
                    self.last_progress_ms = now_ms;
                }
                self.propose(now_ms);
            }
        }
    }

    /// Primary: turns queued requests into batches while the pipeline has room.
    fn propose(&mut self, now_ms: u64) {
        if !self.is_primary() || self.fetch.is_some() {
            return;
        }
        while !self.intake.queue.is_empty() && self.records.len() < self.cfg.pipeline_max {
            let mut requests = Vec::new();
            while requests.len() < self.cfg.batch_size_max {
                let Some(request) = self.intake.queue.pop_front() else {
                    break;
                };
                if matches!(self.sessions.check(request.client, request.seq), Seen::New) {
                    requests.push(request);
                } else {
                    self.intake.pending.remove(&(request.client, request.seq));
                }
            }
            if requests.is_empty() {
                break;
            }
            let seq = self.next_seq;
            self.last_timestamp_ms = self.last_timestamp_ms.max(now_ms);
            let batch = EveBatch {
                seq,
                seed: crate::pb::core::batch_seed(self.view, seq, now_ms),
                timestamp_ms: self.last_timestamp_ms,
                requests,
            };
            let sequential = std::mem::take(&mut self.first_in_view);
            self.actions
                .push_back(Action::Broadcast(EveMessage::ExecuteBatch {
                    view: self.view,
                    run: 0,
                    committed: self.committed,
                    sequential,
                    batch: batch.clone(),
                }));
            self.take_batch(batch, sequential);
        }
    }

    /// Records the next batch and executes it (unless a fetch is under way: it runs after).
    fn take_batch(&mut self, batch: EveBatch, sequential: bool) {
        debug_assert_eq!(batch.seq, self.next_seq);
        self.next_seq += 1;
        let seq = batch.seq;
        self.records.insert(
            seq,
            Record {
                batch: batch.clone(),
                sequential,
                mine: None,
            },
        );
        if self.fetch.is_none() {
            let run = self.run;
            self.work(
                Work::Execute {
                    run,
                    batch,
                    sequential,
                },
                None,
            );
        }
    }

    fn on_batch(&mut self, from: u32, view: u64, sequential: bool, batch: EveBatch) {
        if from != self.primary_of(view) || from == self.cfg.me {
            return;
        }
        if view > self.view {
            if self.future.len() >= self.cfg.future_max {
                self.future.pop_front();
            }
            let message = EveMessage::ExecuteBatch {
                view,
                run: 0,
                committed: 0,
                sequential,
                batch,
            };
            self.future.push_back((from, message));
            self.heard_of_view(view);
            return;
        }
        if batch.requests.len() > self.cfg.batch_size_max {
            // Beyond the configured bound: no correct primary sends it. Nothing is executed
            // or verified, so the view makes no progress and the executors complain.
            return;
        }
        if view < self.view || batch.seq != self.next_seq {
            // An old view's batch, one seen already, or one after a gap (a decision for the
            // batches missed makes this executor fetch the state).
            return;
        }
        let keys: HashSet<(ClientId, RequestSeq)> =
            (batch.requests.iter()).map(|r| (r.client, r.seq)).collect();
        self.intake
            .queue
            .retain(|r| !keys.contains(&(r.client, r.seq)));
        self.intake.pending.extend(keys);
        self.take_batch(batch, sequential);
    }

    /// Another executor says it is in `view`: if that is later than this executor's, ask
    /// the verifiers which view is in force (a complaint about this one is answered with
    /// it), once per view — the word of one executor proves nothing.
    fn heard_of_view(&mut self, view: u64) {
        if view > self.view && view > self.asked_view {
            self.asked_view = view;
            self.actions.push_back(Action::Complain { view: self.view });
        }
    }

    fn on_executed(&mut self, now_ms: u64, run: u32, seq: u64, token: Token, outputs: Vec<Bytes>) {
        if run != self.run || self.fetch.is_some() {
            return;
        }
        let previous = if seq == self.committed + 1 {
            self.committed_token
        } else {
            match self.records.get(&(seq - 1)).and_then(|r| r.mine.as_ref()) {
                Some((token, _)) => *token,
                None => return,
            }
        };
        let Some(record) = self.records.get_mut(&seq) else {
            return;
        };
        if record.mine.is_some() {
            return;
        }
        record.mine = Some((token, outputs));
        self.actions.push_back(Action::Verify(Verify {
            executor: self.cfg.me,
            view: self.view,
            seq,
            token,
            previous,
        }));
        self.advance(now_ms);
    }

    // --------------------------------------------------------------------------------------
    // The verifiers' decisions
    // --------------------------------------------------------------------------------------

    fn on_response(&mut self, now_ms: u64, verifier: u32, decision: Decision) {
        if verifier as usize >= self.cfg.resilience.verifiers() {
            return;
        }
        let seq = match decision {
            Decision::Commit { seq, .. } | Decision::Rollback { seq, .. } => seq,
        };
        // Far-ahead responses count only for an executor that is behind anyway (it needs
        // the newest decided token to fetch the state).
        let behind = self.fetch.is_some() || self.missing_since_ms.is_some();
        if seq > self.committed + self.cfg.window && !behind {
            return;
        }
        if !self.is_news(&decision) {
            return;
        }
        let votes = self.responses.entry(seq).or_default();
        votes.insert(verifier, decision);
        let matching = votes.values().filter(|d| **d == decision).count();
        while self.responses.len() as u64 > self.cfg.window {
            self.responses.pop_first();
        }
        if matching < self.cfg.resilience.response_quorum() {
            return;
        }
        self.on_decision(now_ms, decision);
    }

    /// Whether a decision tells this executor something it does not know.
    fn is_news(&self, decision: &Decision) -> bool {
        match *decision {
            Decision::Commit { seq, .. } => {
                seq > self.committed && !self.decided.contains_key(&seq)
            }
            Decision::Rollback { view, .. } => view > self.view,
        }
    }

    /// Acts on a decision of the verifiers.
    fn on_decision(&mut self, now_ms: u64, decision: Decision) {
        match decision {
            Decision::Commit { seq, token } => {
                self.responses.remove(&seq);
                self.decided.insert(seq, token);
                while self.decided.len() as u64 > self.cfg.window {
                    // Far behind: only the newest decisions matter (it fetches the state).
                    self.decided.pop_first();
                }
                self.check_offer(now_ms);
                self.advance(now_ms);
            }
            Decision::Rollback { seq, view } if view > self.view => {
                self.enter_view(now_ms, view, seq)
            }
            Decision::Rollback { .. } => {}
        }
    }

    /// Commits what the decisions in hand allow, or fetches the state when a decided batch
    /// differs from this executor's execution.
    fn advance(&mut self, now_ms: u64) {
        if self.fetch.is_some() {
            return;
        }
        // A token covers every batch before it: the newest decided batch this executor
        // executed with the decided token commits every batch up to it.
        let mine = |records: &BTreeMap<u64, Record>, seq: u64| {
            (records.get(&seq)).and_then(|r| r.mine.as_ref().map(|(t, _)| *t))
        };
        let matched = (self.decided.iter().rev())
            .find(|(seq, token)| mine(&self.records, **seq) == Some(**token))
            .map(|(seq, _)| *seq);
        if let Some(upto) = matched {
            for seq in self.committed + 1..=upto {
                self.commit_record(now_ms, seq);
            }
            self.decided = self.decided.split_off(&(upto + 1));
            self.responses = self.responses.split_off(&(upto + 1));
        }
        let diverged = (self.decided.iter())
            .any(|(seq, token)| mine(&self.records, *seq).is_some_and(|t| t != *token));
        let missing = (self.decided.keys()).any(|seq| !self.records.contains_key(seq));
        if diverged {
            self.start_fetch(now_ms);
        } else if missing {
            self.missing_since_ms.get_or_insert(now_ms);
        } else {
            self.missing_since_ms = None;
        }
        self.propose(now_ms);
    }

    /// Commits the record of `seq` (the next one) and replies.
    fn commit_record(&mut self, now_ms: u64, seq: u64) {
        debug_assert_eq!(seq, self.committed + 1, "batches commit in order");
        let record = self.records.remove(&seq).expect("a record to commit");
        let (token, outputs) = record.mine.expect("committed once executed");
        self.work(
            Work::Commit {
                seq,
                token: Digest(token.0),
                checked: true,
            },
            None,
        );
        self.committed = seq;
        self.committed_token = token;
        self.last_progress_ms = now_ms;
        self.stats.batches_committed += 1;
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

    /// The verifiers rolled batch `seq` back into `view`: everything executed after the
    /// last committed batch is discarded; the new primary sends the batches again.
    fn enter_view(&mut self, now_ms: u64, view: u64, seq: u64) {
        self.view = view;
        self.run += 1;
        self.stats.rollbacks += 1;
        self.first_in_view = true;
        self.last_progress_ms = now_ms;
        self.last_complaint_ms = now_ms;
        self.work(Work::Rollback, None);
        self.requeue_records();
        self.responses.retain(|&s, _| s < seq);
        // Executors that have not heard of the view yet ask the verifiers.
        self.actions
            .push_back(Action::Broadcast(EveMessage::Commit {
                view,
                committed: self.committed,
            }));
        if let Some(fetch) = self.fetch.as_mut() {
            // A fetch under way goes on; the batches of the view run after it.
            fetch.since_ms = now_ms;
        }
        let future = std::mem::take(&mut self.future);
        for (from, message) in future {
            if let EveMessage::ExecuteBatch {
                view,
                sequential,
                batch,
                ..
            } = message
            {
                self.on_batch(from, view, sequential, batch);
            }
        }
        self.advance(now_ms);
    }

    /// Puts the requests of every record back at the head of the queue, in order, and
    /// drops the records.
    fn requeue_records(&mut self) {
        let records = std::mem::take(&mut self.records);
        for record in records.into_values().rev() {
            for request in record.batch.requests.into_iter().rev() {
                if self.intake.queue.len() < self.cfg.queue_max {
                    self.intake.queue.push_front(request);
                } else {
                    self.intake.pending.remove(&(request.client, request.seq));
                }
            }
        }
        self.next_seq = self.committed + 1;
    }

    // --------------------------------------------------------------------------------------
    // Messages between executors: batches and state transfer
    // --------------------------------------------------------------------------------------

    fn on_peer(&mut self, now_ms: u64, from: u32, message: EveMessage) {
        if from as usize >= self.cfg.resilience.executors() || from == self.cfg.me {
            return;
        }
        match message {
            EveMessage::ExecuteBatch {
                view,
                sequential,
                batch,
                ..
            } => {
                self.on_batch(from, view, sequential, batch);
                self.advance(now_ms);
            }
            EveMessage::Join { .. } if self.fetch.is_none() => {
                if !self.askers.contains(&from) {
                    self.askers.push(from);
                }
                self.work(Work::TakeSnapshot, None);
            }
            EveMessage::StateOffer {
                seq,
                token,
                root,
                proof,
                sessions,
                ..
            } => {
                let offer = Offer {
                    seq,
                    token,
                    root,
                    proof,
                    sessions,
                };
                self.on_offer(now_ms, from, offer);
            }
            EveMessage::TreeQuery { seq, prefixes } => {
                self.work(Work::AnswerTreeQuery { seq, prefixes }, Some(from));
            }
            EveMessage::TreeNodes { seq, nodes } => {
                let donor = self.fetch.as_ref().map(|f| f.donor);
                if donor == Some(from) {
                    self.work(Work::TreeNodes { seq, nodes }, Some(from));
                }
            }
            EveMessage::Commit { view, .. } => self.heard_of_view(view),
            _ => {}
        }
    }

    // --------------------------------------------------------------------------------------
    // Time
    // --------------------------------------------------------------------------------------

    fn on_tick(&mut self, now_ms: u64) {
        if let Some(fetch) = &self.fetch
            && now_ms.saturating_sub(fetch.since_ms) >= self.cfg.fetch_ms
        {
            self.next_donor(now_ms, false);
        }
        if let Some(since) = self.missing_since_ms
            && now_ms.saturating_sub(since) >= self.cfg.fetch_ms
        {
            self.start_fetch(now_ms);
        }
        let waiting = !self.intake.queue.is_empty() || !self.records.is_empty();
        let quiet = now_ms.saturating_sub(self.last_progress_ms.max(self.last_complaint_ms));
        if waiting && quiet >= self.cfg.progress_ms {
            self.last_complaint_ms = now_ms;
            self.stats.complaints += 1;
            let view = self.view;
            self.actions.push_back(Action::Complain { view });
        } else if !waiting && quiet >= self.cfg.progress_ms {
            self.last_complaint_ms = now_ms;
            self.actions.push_back(Action::Poll);
        }
    }
}

mod fetch;
