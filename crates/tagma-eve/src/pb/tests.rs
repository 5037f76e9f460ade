//! Two primary-backup servers driven in one thread over FIFO links with virtual time,
//! closed-loop clients, crashes and restarts; every committed batch is checked against the
//! other server's and, at the end, against sequential execution of the committed order.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use tagma_wire::{ClientId, EveBatch, EveMessage, EveRequest, RequestSeq};

use super::*;
use crate::executor::{Executor, MissedConflicts, run_in_order};
use crate::mixer::{Access, Mixer};
use crate::service::EveService;
use crate::tree::{ObjectId, ObjectTree};
use crate::{Batch, NonDeterminism, RequestContext};

/// A key-value store on bytes: the first byte names the key, the rest is the value; the
/// reply is the value before. With `diverge`, a request run on an executor's pool thread
/// (in parallel) replies with its server's number instead: executions in parallel differ
/// between the servers, in order they agree.
struct Kv {
    me: u8,
    diverge: bool,
}

impl EveService for Kv {
    type Request = Bytes;

    fn execute(&self, request: &Bytes, ctx: &mut RequestContext<'_>) -> Bytes {
        let key = ObjectId(u64::from(request[0]));
        let before = ctx.put(key, request.slice(1..)).unwrap_or_default();
        let on_pool = (std::thread::current().name()).is_some_and(|n| n.starts_with("eve-exec"));
        if self.diverge && on_pool {
            return Bytes::from(vec![self.me]);
        }
        before
    }
}

struct KeyMixer;

impl Mixer<Bytes> for KeyMixer {
    type Key = u8;
    fn access(&self, request: &Bytes) -> Access<u8> {
        Access {
            reads: Vec::new(),
            writes: vec![request[0]],
        }
    }
}

struct Server {
    core: PbCore,
    stage: Stage<Kv, KeyMixer>,
}

/// Every committed batch, by number, as the first server to commit it did (the others must
/// commit the same).
type Ledger = BTreeMap<u64, EveBatch>;

/// Which message a link loses.
type Lost = fn(&EveMessage) -> bool;

struct World {
    now_ms: u64,
    diverge: bool,
    servers: [Option<Server>; 2],
    /// A paused server takes no input (its messages wait in its link).
    paused: [bool; 2],
    /// The next message to this server that matches is lost.
    lose_next: Option<(usize, Lost)>,
    /// Messages in flight to each server, in order.
    links: [VecDeque<EveMessage>; 2],
    clients: Vec<Client>,
    /// Every reply any server gave, by request.
    replies: BTreeMap<(ClientId, RequestSeq), Bytes>,
    /// The last batch each server executed, by number (what it commits).
    executed: [BTreeMap<u64, EveBatch>; 2],
    ledger: Ledger,
}

struct Client {
    id: ClientId,
    seq: u64,
    answered: bool,
    sent_ms: u64,
    done: u64,
}

fn config(me: u8) -> PbConfig {
    PbConfig {
        batch_size_max: 8,
        pipeline_max: 3,
        heartbeat_ms: 20,
        takeover_ms: 100,
        ..PbConfig::new(me)
    }
}

impl World {
    fn new(diverge: bool, clients: u32) -> World {
        let mut w = World {
            now_ms: 0,
            diverge,
            servers: [None, None],
            paused: [false, false],
            lose_next: None,
            links: [VecDeque::new(), VecDeque::new()],
            clients: (0..clients)
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
            ledger: Ledger::new(),
        };
        w.start(0, false);
        w.start(1, false);
        w
    }

    fn start(&mut self, me: u8, joining: bool) {
        let service = Kv {
            me,
            diverge: self.diverge,
        };
        let executor = Executor::new(service, KeyMixer, 2, ObjectTree::new(), 4_000)
            .unwrap()
            .with_missed_conflicts(MissedConflicts::Verify);
        self.links[usize::from(me)].clear();
        self.executed[usize::from(me)].clear();
        self.servers[usize::from(me)] = Some(Server {
            core: PbCore::new(config(me), self.now_ms, joining),
            stage: Stage::new(executor, 64),
        });
        self.drain(usize::from(me));
    }

    fn crash(&mut self, me: usize) {
        self.servers[me] = None;
        self.links[me].clear();
    }

    fn input(&mut self, me: usize, input: Input) {
        if let Some(server) = self.servers[me].as_mut() {
            server.core.handle(self.now_ms, input);
        }
        self.drain(me);
    }

    /// Carries out every action of server `me`.
    fn drain(&mut self, me: usize) {
        loop {
            let Some(server) = self.servers[me].as_mut() else {
                return;
            };
            let Some(action) = server.core.poll_action() else {
                return;
            };
            match &action {
                Action::Send(m) => self.transmit(1 - me, m.clone()),
                Action::Reply { client, seq, reply } => self.reply(*client, *seq, reply.clone()),
                Action::Execute { batch, .. } => {
                    self.executed[me].insert(batch.seq, batch.clone());
                }
                Action::Commit { seq, .. } => {
                    let batch = self.executed[me][seq].clone();
                    match self.ledger.get(seq) {
                        Some(b) => assert_eq!(b, &batch, "batch {seq} committed two ways"),
                        None => {
                            self.ledger.insert(*seq, batch);
                        }
                    }
                }
                _ => {}
            }
            let server = self.servers[me].as_mut().expect("checked above");
            for out in server.stage.apply(action) {
                match out {
                    StageOutput::Input(input) => server.core.handle(self.now_ms, input),
                    StageOutput::Send(m) => {
                        if let Some((to, lost)) = self.lose_next
                            && to == 1 - me
                            && lost(&m)
                        {
                            self.lose_next = None;
                            continue;
                        }
                        self.links[1 - me].push_back(m);
                    }
                }
            }
        }
    }

    fn reply(&mut self, client: ClientId, seq: RequestSeq, reply: Bytes) {
        if let Some(before) = self.replies.get(&(client, seq)) {
            assert_eq!(before, &reply, "two replies to one request differ");
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

    fn request(&self, c: &Client) -> EveRequest {
        let key = (c.id.0 as u8).wrapping_mul(7).wrapping_add(c.seq as u8) % 32;
        let mut payload = vec![key];
        payload.extend_from_slice(format!("{}:{}", c.id.0, c.seq).as_bytes());
        EveRequest {
            client: c.id,
            seq: RequestSeq(c.seq),
            payload: Bytes::from(payload),
        }
    }

    /// One millisecond: clients send, one message crosses each link, timers fire.
    fn step(&mut self) {
        self.now_ms += 1;
        for i in 0..self.clients.len() {
            let c = &self.clients[i];
            let resend = !c.answered && self.now_ms - c.sent_ms >= 150;
            if !(c.answered || resend) {
                continue;
            }
            if c.answered {
                self.clients[i].seq += 1;
                self.clients[i].answered = false;
            }
            self.clients[i].sent_ms = self.now_ms;
            let request = self.request(&self.clients[i]);
            for me in 0..2 {
                if !self.paused[me] {
                    self.input(me, Input::Request(request.clone()));
                }
            }
        }
        let paused = self.paused;
        for me in (0..2).filter(|&me| !paused[me]) {
            for _ in 0..4 {
                if let Some(m) = self.links[me].pop_front() {
                    self.input(me, Input::Peer(m));
                }
            }
            let due = (self.servers[me].as_ref())
                .is_some_and(|s| s.core.next_timeout_ms() <= self.now_ms);
            if due {
                self.input(me, Input::Tick);
            }
        }
    }

    fn run(&mut self, ms: u64) {
        for _ in 0..ms {
            self.step();
        }
    }

    fn answered(&self) -> u64 {
        self.clients.iter().map(|c| c.done).sum()
    }

    fn server(&self, me: usize) -> &Server {
        self.servers[me].as_ref().expect("the server runs")
    }

    /// The committed batches, run in order from the start, give the replies the clients got
    /// and the state every running server committed.
    fn check_against_sequential(&self) {
        let service = Kv {
            me: 9,
            diverge: false,
        };
        let mut tree = ObjectTree::new();
        let mut states = BTreeMap::new();
        for (expected, (seq, batch)) in (1..).zip(&self.ledger) {
            assert_eq!(*seq, expected, "committed batches leave no gap");
            let outputs = run_in_order(
                &service,
                &mut tree,
                &Batch {
                    seq: batch.seq,
                    nd: NonDeterminism {
                        seed: batch.seed,
                        timestamp_ms: batch.timestamp_ms,
                    },
                    requests: batch.requests.iter().map(|r| r.payload.clone()).collect(),
                },
            );
            for (request, output) in batch.requests.iter().zip(outputs) {
                if let Some(reply) = self.replies.get(&(request.client, request.seq)) {
                    assert_eq!(reply, &output, "batch {seq}: a reply is not sequential's");
                }
            }
            states.insert(*seq, tree.clone());
        }
        for server in self.servers.iter().flatten() {
            let stable = server.stage.executor().stable();
            if stable.seq > 0 {
                assert!(
                    stable.tree == states[&stable.seq],
                    "a server's committed state"
                );
            }
        }
    }
}

#[test]
fn both_servers_commit_the_same_batches_and_every_request_is_answered() {
    let mut w = World::new(false, 12);
    w.run(400);
    assert!(w.answered() > 300, "{} answered", w.answered());
    assert_eq!(w.server(0).core.role(), Role::Primary);
    assert_eq!(w.server(1).core.role(), Role::Backup);
    let stats = w.server(0).core.stats();
    assert_eq!((stats.rollbacks, stats.takeovers), (0, 0));
    assert!(w.server(1).core.committed() + 3 >= w.server(0).core.committed());
    w.check_against_sequential();
}

#[test]
fn different_tokens_roll_both_back_and_the_batch_runs_again_in_order() {
    let mut w = World::new(true, 12);
    w.run(400);
    let stats = w.server(0).core.stats();
    assert!(stats.rollbacks > 5, "{stats:?}");
    assert!(w.answered() > 100, "{} answered", w.answered());
    w.check_against_sequential();
}

#[test]
fn the_backup_takes_over_a_crashed_primary_and_the_primary_rejoins_by_fetching_the_state() {
    let mut w = World::new(false, 12);
    w.run(200);
    let before = w.answered();
    w.crash(0);
    w.run(30);
    let stalled = w.answered();
    w.run(200);
    assert_eq!(w.server(1).core.role(), Role::Primary);
    assert_eq!(w.server(1).core.stats().takeovers, 1);
    assert!(
        w.answered() > stalled + 50,
        "serving again after the takeover"
    );
    assert!(stalled >= before);
    // The old primary comes back empty and fetches the state.
    w.start(0, true);
    w.run(300);
    assert_eq!(w.server(0).core.role(), Role::Backup);
    assert!(w.server(0).core.peer_alive() && w.server(1).core.peer_alive());
    let (objects, _) = w.server(0).stage.last_fetch();
    assert!(objects > 0 && objects <= 32, "{objects} objects fetched");
    assert!(w.server(0).core.committed() + 3 >= w.server(1).core.committed());
    w.check_against_sequential();
}

#[test]
fn a_primary_serves_alone_while_the_backup_is_down_and_catches_it_up_after() {
    let mut w = World::new(false, 12);
    w.run(150);
    w.crash(1);
    w.run(200);
    assert!(!w.server(0).core.peer_alive());
    let alone = w.server(0).core.committed();
    w.start(1, true);
    w.run(300);
    assert_eq!(w.server(1).core.role(), Role::Backup);
    assert!(w.server(0).core.peer_alive());
    assert!(w.server(1).core.committed() > alone);
    assert_eq!(w.server(0).core.stats().joins_served, 1);
    w.check_against_sequential();
}

#[test]
fn a_paused_primary_that_learns_of_a_later_view_steps_down_and_fetches_the_state() {
    let mut w = World::new(false, 8);
    w.run(100);
    // The primary stops taking input for longer than the takeover timeout.
    w.paused[0] = true;
    w.run(200);
    assert_eq!(w.server(1).core.role(), Role::Primary);
    w.paused[0] = false;
    w.run(400);
    assert_eq!(w.server(0).core.role(), Role::Backup);
    assert_eq!(w.server(0).core.view(), w.server(1).core.view());
    assert!(w.server(1).core.peer_alive());
    assert!(w.server(0).core.committed() + 3 >= w.server(1).core.committed());
    w.check_against_sequential();
}

impl World {
    fn transmit(&mut self, to: usize, m: EveMessage) {
        if let Some((lost_to, lost)) = self.lose_next
            && lost_to == to
            && lost(&m)
        {
            self.lose_next = None;
            return;
        }
        self.links[to].push_back(m);
    }

    /// Runs until the next message to server `to` that matches `lost` is lost.
    fn lose(&mut self, to: usize, lost: Lost) {
        self.lose_next = Some((to, lost));
        for _ in 0..1_000 {
            if self.lose_next.is_none() {
                return;
            }
            self.step();
        }
        panic!("no such message was sent");
    }
}

#[test]
fn a_backup_that_misses_a_batch_fetches_the_state_and_follows_again() {
    let mut w = World::new(false, 12);
    w.run(100);
    w.lose(1, |m| matches!(m, EveMessage::ExecuteBatch { .. }));
    w.run(400);
    assert_eq!(w.server(0).core.stats().joins_served, 1);
    assert_eq!(w.server(1).core.role(), Role::Backup);
    assert!(w.server(0).core.peer_alive());
    assert!(w.server(1).core.committed() + 3 >= w.server(0).core.committed());
    w.check_against_sequential();
}

#[test]
fn a_primary_whose_token_went_missing_serves_alone_then_brings_the_backup_back() {
    let mut w = World::new(false, 12);
    w.run(100);
    w.lose(0, |m| matches!(m, EveMessage::Token { .. }));
    w.run(600);
    assert_eq!(w.server(0).core.stats().joins_served, 1);
    assert_eq!(w.server(0).core.role(), Role::Primary);
    assert_eq!(w.server(1).core.role(), Role::Backup);
    assert!(w.server(0).core.peer_alive());
    assert!(w.server(1).core.committed() + 3 >= w.server(0).core.committed());
    w.check_against_sequential();
}
