//! A deterministic driver of a primary-backup pair, for tests and the simulator: two
//! servers (each a [`PbCore`] and a [`Stage`]) in one thread with virtual time, FIFO links
//! whose delays the caller draws, closed-loop clients sending every request to both
//! servers, and faults (crash, restart, pause, a lost message). It records every committed
//! batch and every reply and checks them: each batch number commits one batch wherever it
//! commits, two replies to one request are equal, and the committed batches run in order
//! from the start give the replies the clients got and each server's committed state.
//!
//! The service is a small key-value store on bytes ([`Kv`]); with `diverge`, its parallel
//! executions differ between the servers (as a race would), so batches roll back. It also
//! has a counter with a real race ([`COUNTER_KEY`]), which its mixer misses.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use tagma_wire::{ClientId, EveBatch, EveMessage, EveRequest, RequestSeq};

use super::{Action, Input, PbConfig, PbCore};
use crate::executor::{Executor, MissedConflicts, run_in_order};
use crate::mixer::{Access, Mixer};
use crate::service::EveService;
use crate::stage::{Stage, StageOutput, Work};
use crate::tree::{ObjectId, ObjectTree};
use crate::{Batch, NonDeterminism, RequestContext};

/// The key of the racy counter: a request `[COUNTER_KEY, amount, ..]` reads the counter,
/// works for the service's `window`, and writes the count read plus `amount`, with nothing
/// to keep two such requests apart; it replies with the count it wrote. [`KeyMixer`] says
/// it touches nothing, so increments share parallel batches and race on the threads.
pub const COUNTER_KEY: u8 = 0xff;

/// A key-value store on bytes: the first byte names the key, the rest is the value; the
/// reply is the value before. With `diverge`, a request run on an executor's pool thread
/// (in parallel) writes its server's number before the value and replies with that number
/// instead: executions in parallel differ between the servers, in order they agree.
pub struct Kv {
    pub me: u8,
    pub diverge: bool,
    /// The racy counter's window between its read and its write, in spin iterations.
    pub window: u64,
}

impl Kv {
    pub fn new(me: u8, diverge: bool) -> Kv {
        Kv {
            me,
            diverge,
            window: 0,
        }
    }

    fn increment(&self, amount: u8, ctx: &mut RequestContext<'_>) -> Bytes {
        let counter = ObjectId(u64::from(COUNTER_KEY));
        let before = crate::services::racy::count(ctx.get(counter).as_ref());
        std::hint::black_box(crate::services::micro::spin(self.window));
        let after = before.wrapping_add(u64::from(amount));
        let value = Bytes::copy_from_slice(&after.to_le_bytes());
        ctx.put(counter, value.clone());
        value
    }
}

impl EveService for Kv {
    type Request = Bytes;

    fn execute(&self, request: &Bytes, ctx: &mut RequestContext<'_>) -> Bytes {
        let Some(&key) = request.first() else {
            return Bytes::new();
        };
        if key == COUNTER_KEY {
            return self.increment(request.get(1).copied().unwrap_or(1), ctx);
        }
        let on_pool = (std::thread::current().name()).is_some_and(|n| n.starts_with("eve-exec"));
        if self.diverge && on_pool {
            let mut value = vec![self.me];
            value.extend_from_slice(&request[1..]);
            ctx.put(ObjectId(u64::from(key)), Bytes::from(value));
            return Bytes::from(vec![self.me]);
        }
        (ctx.put(ObjectId(u64::from(key)), request.slice(1..))).unwrap_or_default()
    }
}

/// Runs a committed batch in order on [`Kv`] (without divergence) from `tree`: what every
/// check against sequential execution replays.
pub(crate) fn run_committed(tree: &mut ObjectTree, batch: &EveBatch) -> Vec<Bytes> {
    let service = Kv::new(u8::MAX, false);
    run_in_order(
        &service,
        tree,
        &Batch {
            seq: batch.seq,
            nd: NonDeterminism {
                seed: batch.seed,
                timestamp_ms: batch.timestamp_ms,
            },
            requests: batch.requests.iter().map(|r| r.payload.clone()).collect(),
        },
    )
}

/// [`Kv`]'s mixer: a request writes its key; the racy counter's increments it misses.
pub struct KeyMixer;

impl Mixer<Bytes> for KeyMixer {
    type Key = u8;
    fn access(&self, request: &Bytes) -> Access<u8> {
        Access {
            reads: Vec::new(),
            writes: (request.first().copied())
                .filter(|&key| key != COUNTER_KEY)
                .into_iter()
                .collect(),
        }
    }
}

/// One server of the pair.
pub struct Server {
    pub core: PbCore,
    pub stage: Stage<Kv, KeyMixer>,
}

/// Which message a link loses.
pub type Lost = fn(&EveMessage) -> bool;

/// How the pair is set up.
#[derive(Clone, Copy, Debug)]
pub struct PairSetup {
    pub clients: u32,
    pub diverge: bool,
    pub batch_size_max: usize,
    pub pipeline_max: usize,
    pub heartbeat_ms: u64,
    pub takeover_ms: u64,
    /// A client without a reply sends its request again after this long.
    pub resend_ms: u64,
}

impl Default for PairSetup {
    fn default() -> Self {
        PairSetup {
            clients: 12,
            diverge: false,
            batch_size_max: 8,
            pipeline_max: 3,
            heartbeat_ms: 20,
            takeover_ms: 100,
            resend_ms: 150,
        }
    }
}

struct Client {
    id: ClientId,
    seq: u64,
    answered: bool,
    sent_ms: u64,
    done: u64,
}

/// The two servers, their links, the clients and what was committed and answered.
pub struct Pair {
    pub now_ms: u64,
    setup: PairSetup,
    servers: [Option<Server>; 2],
    /// A paused server takes no input (its messages wait in its link).
    pub paused: [bool; 2],
    /// The next message to this server that matches is lost.
    lose_next: Option<(usize, Lost)>,
    /// Messages in flight to each server: when each arrives, in order.
    links: [VecDeque<(u64, EveMessage)>; 2],
    clients: Vec<Client>,
    /// Every reply any server gave, by request.
    replies: BTreeMap<(ClientId, RequestSeq), Bytes>,
    /// The last batch each server executed, by number (what it commits).
    executed: [BTreeMap<u64, EveBatch>; 2],
    /// Every committed batch, by number, as the first server to commit it did.
    ledger: BTreeMap<u64, EveBatch>,
    /// Batches committed from a parallel run nothing compared, and the state each left.
    unchecked: std::collections::BTreeSet<u64>,
    unchecked_states: BTreeMap<u64, ObjectTree>,
    /// What broke a promise.
    pub violations: Vec<String>,
    /// One line per event worth reading (commits, role changes, faults), if kept.
    pub trace: Option<Vec<String>>,
    roles: [Option<(super::Role, u64)>; 2],
}

impl Pair {
    /// Both servers started from the initial state.
    pub fn new(setup: PairSetup) -> Pair {
        let mut pair = Pair {
            now_ms: 0,
            setup,
            servers: [None, None],
            paused: [false, false],
            lose_next: None,
            links: [VecDeque::new(), VecDeque::new()],
            clients: (0..setup.clients)
                .map(|i| Client {
                    id: ClientId::new(1, i),
                    seq: 0,
                    answered: true,
                    sent_ms: 0,
                    done: 0,
                })
                .collect(),
            replies: BTreeMap::new(),
            executed: [BTreeMap::new(), BTreeMap::new()],
            ledger: BTreeMap::new(),
            unchecked: std::collections::BTreeSet::new(),
            unchecked_states: BTreeMap::new(),
            violations: Vec::new(),
            trace: None,
            roles: [None, None],
        };
        pair.start(0, false);
        pair.start(1, false);
        pair
    }

    /// Starts server `me` afresh (`joining`: it fetches the state from the other).
    pub fn start(&mut self, me: u8, joining: bool) {
        let s = self.setup;
        let service = Kv::new(me, s.diverge);
        let executor = Executor::new(service, KeyMixer, 2, ObjectTree::new(), 4_000)
            .expect("two threads")
            .with_missed_conflicts(MissedConflicts::Verify);
        let config = PbConfig {
            batch_size_max: s.batch_size_max,
            pipeline_max: s.pipeline_max,
            heartbeat_ms: s.heartbeat_ms,
            takeover_ms: s.takeover_ms,
            ..PbConfig::new(me)
        };
        let me = usize::from(me);
        self.links[me].clear();
        self.executed[me].clear();
        self.servers[me] = Some(Server {
            core: PbCore::new(config, self.now_ms, joining),
            stage: Stage::new(executor, 64),
        });
        self.drain(me, &mut || 1);
    }

    /// Notes a line in the trace, if kept.
    pub fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = self.trace.as_mut() {
            trace.push(format!("{:>6} ms  {}", self.now_ms, line()));
        }
    }

    /// Server `me` stops: its state and the messages to it are gone.
    pub fn crash(&mut self, me: usize) {
        self.note(|| format!("server {me} crashes"));
        self.servers[me] = None;
        self.links[me].clear();
    }

    pub fn is_up(&self, me: usize) -> bool {
        self.servers[me].is_some()
    }

    pub fn server(&self, me: usize) -> &Server {
        self.servers[me].as_ref().expect("the server runs")
    }

    /// The next message to server `to` that matches `lost` is lost.
    pub fn lose_next(&mut self, to: usize, lost: Lost) {
        self.lose_next = Some((to, lost));
    }

    /// Whether the message set to be lost still waits to be.
    pub fn losing(&self) -> bool {
        self.lose_next.is_some()
    }

    fn transmit(&mut self, to: usize, m: EveMessage, delay_ms: u64) {
        if let Some((lost_to, lost)) = self.lose_next
            && lost_to == to
            && lost(&m)
        {
            self.lose_next = None;
            return;
        }
        // FIFO: never before the message ahead of it.
        let after = self.links[to].back().map_or(0, |(at, _)| *at);
        self.links[to].push_back(((self.now_ms + delay_ms).max(after), m));
    }

    fn input(&mut self, me: usize, input: Input, delay: &mut dyn FnMut() -> u64) {
        if let Some(server) = self.servers[me].as_mut() {
            server.core.handle(self.now_ms, input);
        }
        self.drain(me, delay);
    }

    /// Carries out every action of server `me`.
    fn drain(&mut self, me: usize, delay: &mut dyn FnMut() -> u64) {
        loop {
            let Some(server) = self.servers[me].as_mut() else {
                return;
            };
            let Some(action) = server.core.poll_action() else {
                return;
            };
            match &action {
                Action::Send(m) => {
                    match m {
                        EveMessage::StateOffer { seq, view, .. } => {
                            let (seq, view) = (*seq, *view);
                            self.note(|| {
                                format!("server {me} offers its state at batch {seq} (view {view})")
                            });
                        }
                        EveMessage::Joined { seq, .. } => {
                            let seq = *seq;
                            self.note(|| format!("server {me} joined at batch {seq}"));
                        }
                        EveMessage::Rollback { seq, run, .. } => {
                            let (seq, run) = (*seq, *run);
                            self.note(|| {
                                format!("server {me} rolls back from batch {seq} (run {run})")
                            });
                        }
                        _ => {}
                    }
                    self.transmit(1 - me, m.clone(), delay());
                }
                Action::Reply { client, seq, reply } => self.reply(*client, *seq, reply.clone()),
                Action::Stage(Work::Execute { batch, .. }) => {
                    self.executed[me].insert(batch.seq, batch.clone());
                }
                Action::Stage(Work::Commit { seq, checked, .. }) => {
                    let (seq, checked) = (*seq, *checked);
                    self.note(|| format!("server {me} commits batch {seq} (checked: {checked})"));
                    self.record_commit(me, seq);
                    if !checked {
                        self.unchecked.insert(seq);
                    }
                }
                _ => {}
            }
            let Action::Stage(work) = action else {
                continue;
            };
            let unchecked_commit = match &work {
                Work::Commit { seq, checked, .. } => (!checked).then_some(*seq),
                _ => None,
            };
            let server = self.servers[me].as_mut().expect("checked above");
            let outputs = server.stage.apply(work);
            if let Some(seq) = unchecked_commit {
                // What one server's unchecked parallel run left: the checks go on from it.
                let tree = server.stage.executor().stable().tree.clone();
                self.unchecked_states.entry(seq).or_insert(tree);
            }
            for out in outputs {
                match out {
                    StageOutput::Done(done) => {
                        let server = self.servers[me].as_mut().expect("checked above");
                        server.core.handle(self.now_ms, Input::Stage(done));
                    }
                    StageOutput::Send(m) => self.transmit(1 - me, m, delay()),
                }
            }
        }
    }

    fn record_commit(&mut self, me: usize, seq: u64) {
        let Some(batch) = self.executed[me].get(&seq).cloned() else {
            self.violations.push(format!(
                "server {me} committed batch {seq} it never executed"
            ));
            return;
        };
        match self.ledger.get(&seq) {
            Some(b) if *b != batch => self
                .violations
                .push(format!("batch {seq} committed as two different batches")),
            Some(_) => {}
            None => {
                self.ledger.insert(seq, batch);
            }
        }
    }

    fn reply(&mut self, client: ClientId, seq: RequestSeq, reply: Bytes) {
        if let Some(before) = self.replies.get(&(client, seq))
            && *before != reply
        {
            self.violations.push(format!(
                "two different replies to request {} of client {}",
                seq.0, client.0
            ));
        }
        self.replies.insert((client, seq), reply);
        if let Some(c) = self.clients.iter_mut().find(|c| c.id == client)
            && c.seq == seq.0
            && !c.answered
        {
            c.answered = true;
            c.done += 1;
        }
    }

    fn request(c: &Client) -> EveRequest {
        let key = (c.id.0 as u8).wrapping_mul(7).wrapping_add(c.seq as u8) % 32;
        let mut payload = vec![key];
        payload.extend_from_slice(format!("{}:{}", c.id.0, c.seq).as_bytes());
        EveRequest {
            client: c.id,
            seq: RequestSeq(c.seq),
            payload: Bytes::from(payload),
        }
    }

    /// One millisecond: clients send (new requests, or again after `resend_ms`), the
    /// messages due arrive, timers fire. `delay` draws each message's delay in ms.
    pub fn step(&mut self, delay: &mut dyn FnMut() -> u64) {
        self.now_ms += 1;
        for i in 0..self.clients.len() {
            let c = &self.clients[i];
            let resend = !c.answered && self.now_ms - c.sent_ms >= self.setup.resend_ms;
            if !(c.answered || resend) {
                continue;
            }
            if c.answered {
                self.clients[i].seq += 1;
                self.clients[i].answered = false;
            }
            self.clients[i].sent_ms = self.now_ms;
            let request = Self::request(&self.clients[i]);
            for me in 0..2 {
                if !self.paused[me] {
                    self.input(me, Input::Request(request.clone()), delay);
                }
            }
        }
        for me in 0..2 {
            if self.paused[me] {
                continue;
            }
            while self.links[me]
                .front()
                .is_some_and(|(at, _)| *at <= self.now_ms)
            {
                let (_, m) = self.links[me].pop_front().expect("checked");
                self.input(me, Input::Peer(m), delay);
            }
            let due = (self.servers[me].as_ref())
                .is_some_and(|s| s.core.next_timeout_ms() <= self.now_ms);
            if due {
                self.input(me, Input::Tick, delay);
            }
        }
        for me in 0..2 {
            let now = (self.servers[me].as_ref()).map(|s| (s.core.role(), s.core.view()));
            if now != self.roles[me] {
                self.roles[me] = now;
                self.note(|| format!("server {me} is now {now:?} (role, view)"));
            }
        }
    }

    /// `ms` steps with every message taking one millisecond.
    pub fn run(&mut self, ms: u64) {
        for _ in 0..ms {
            self.step(&mut || 1);
        }
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.clients.iter().map(|c| c.done).sum()
    }

    /// Requests answered per client.
    pub fn answered_per_client(&self) -> Vec<u64> {
        self.clients.iter().map(|c| c.done).collect()
    }

    /// Batches committed by some server.
    pub fn committed_batches(&self) -> usize {
        self.ledger.len()
    }

    /// Batches committed from a parallel run nothing compared.
    pub fn unchecked_commits(&self) -> usize {
        self.unchecked.len()
    }

    /// The committed batches, run in order from the start, give the replies the clients got
    /// and the state every running server committed; returns what does not hold. A batch
    /// committed from one server's unchecked parallel run (a backup taking over) is taken as
    /// that server left it: its replies are not compared, and the run in order goes on from
    /// its state.
    pub fn check_against_sequential(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut tree = ObjectTree::new();
        let mut states = BTreeMap::new();
        for (expected, (seq, batch)) in (1..).zip(&self.ledger) {
            if *seq != expected {
                problems.push(format!(
                    "committed batches skip from {} to {seq}",
                    expected - 1
                ));
                return problems;
            }
            let outputs = run_committed(&mut tree, batch);
            if let Some(state) = self.unchecked_states.get(seq) {
                tree = state.clone();
                states.insert(*seq, tree.clone());
                continue;
            }
            for (request, output) in batch.requests.iter().zip(outputs) {
                if let Some(reply) = self.replies.get(&(request.client, request.seq))
                    && *reply != output
                {
                    problems.push(format!(
                        "batch {seq}: request {} of client {} was answered otherwise than in order",
                        request.seq.0, request.client.0
                    ));
                }
            }
            states.insert(*seq, tree.clone());
        }
        for (me, server) in self.servers.iter().enumerate() {
            let Some(server) = server else { continue };
            let stable = server.stage.executor().stable();
            if stable.seq > 0 && states.get(&stable.seq) != Some(&stable.tree) {
                problems.push(format!(
                    "server {me}'s committed state at batch {} is not sequential execution's",
                    stable.seq
                ));
            }
        }
        problems
    }
}
