//! A deterministic driver of a BFT deployment, for tests and the simulator: `n_E` executors
//! (each an [`ExecutorCore`] and a [`Stage`]) in one thread with virtual time; the
//! verifiers as their agreed order of VERIFYs and complaints over one [`Verification`] (what
//! every correct verifier computes), each of the `n_V` verifiers answering on its own;
//! closed-loop clients sending every request to every executor and accepting a reply once
//! `r + 1` executors sent the same; drawn message delays on FIFO links; and faults: lying
//! executors (wrong tokens, wrong replies, wrong state nodes), lying verifiers (all telling
//! the same lie), executors whose parallel runs diverge as a race would, and crashes.
//!
//! Races can also be real: with a counter window, some clients increment the racy
//! counter ([`COUNTER_KEY`]), whose read-modify-write races on each executor's threads.
//! Such a run depends on the threads' timing, so it is not reproducible; the deployment
//! runs every parallel batch again in order from the same state and counts the races that
//! showed (the two runs' tokens differ), were caught (the verifiers committed another
//! token or rolled the batch back) or committed unseen (the verifiers committed the racy
//! token: the race showed alike on a quorum of executors).
//!
//! It records every committed batch and every accepted reply and checks them: each batch
//! number commits one batch at every correct executor, and the committed batches run in
//! order from the start give the replies the clients accepted and each correct executor's
//! committed state.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_wire::{ClientId, EveBatch, EveMessage, EveRequest, RequestSeq, TreeNode};

use super::{Action, BftConfig, ExecutorCore, Input};
use crate::executor::{Executor, MissedConflicts};
use crate::pb::harness::{COUNTER_KEY, KeyMixer, Kv, run_committed};
use crate::quorum::Resilience;
use crate::stage::{Stage, StageOutput, Work};
use crate::token::outputs_digest;
use crate::token::{Token, TokenProof};
use crate::tree::ObjectTree;
use crate::verify::{Answer, Decision, Protection, Verification, Verify};

/// How an executor behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    Correct,
    /// Sends a wrong token in every VERIFY.
    WrongTokens,
    /// Sends clients wrong replies.
    WrongReplies,
    /// Serves wrong state nodes to executors that fetch from it.
    WrongState,
}

/// How the deployment is set up.
#[derive(Clone, Debug)]
pub struct BftSetup {
    pub resilience: Resilience,
    pub clients: u32,
    pub batch_size_max: usize,
    pub pipeline_max: usize,
    pub progress_ms: u64,
    pub fetch_ms: u64,
    /// The verifiers roll a batch back when it stays undecided this long.
    pub verify_timeout_ms: u64,
    /// A client without an accepted reply sends its request again after this long.
    pub resend_ms: u64,
    /// Messages take 1..=this many ms (the verifiers' agreement as long again).
    pub max_delay_ms: u64,
    /// Each executor's behaviour (missing: correct).
    pub behaviours: Vec<Behaviour>,
    /// Executors whose parallel runs reply differently from every other executor's, as a
    /// race manifesting there would.
    pub racy: Vec<u32>,
    /// Verifiers (the first ones) that answer with a lie, all the same.
    pub lying_verifiers: u32,
    /// The verifiers' extra protection mode.
    pub protection: Option<Protection>,
    /// With a window (spin iterations between the read and the write), the first
    /// `counter_clients` clients increment the racy counter instead of writing keys.
    pub counter_window: Option<u64>,
    pub counter_clients: u32,
    /// What executors do about the conflicts they see in their threads' accesses.
    pub missed_conflicts: MissedConflicts,
    pub seed: u64,
}

impl BftSetup {
    pub fn new(resilience: Resilience) -> BftSetup {
        BftSetup {
            resilience,
            clients: 10,
            batch_size_max: 8,
            pipeline_max: 3,
            progress_ms: 150,
            fetch_ms: 60,
            verify_timeout_ms: 200,
            resend_ms: 250,
            max_delay_ms: 3,
            behaviours: Vec::new(),
            racy: Vec::new(),
            lying_verifiers: 0,
            protection: None,
            counter_window: None,
            counter_clients: 2,
            missed_conflicts: MissedConflicts::Verify,
            seed: 1,
        }
    }
}

/// One executor.
pub struct Node {
    pub core: ExecutorCore,
    pub stage: Stage<Kv, KeyMixer>,
    pub behaviour: Behaviour,
    /// The batches it executed, by number (what it commits).
    executed: BTreeMap<u64, EveBatch>,
}

enum Event {
    ToExecutor {
        to: u32,
        input: Input,
    },
    /// A VERIFY reaches the verifiers' agreed order.
    Verify(Verify),
    /// A query of a batch's token reaches the verifiers' agreed order (an undecided batch's
    /// decision goes to every executor anyway).
    Query {
        executor: u32,
        seq: u64,
    },
    /// A complaint reaches the verifiers' agreed order.
    Complain {
        executor: u32,
        view: u64,
    },
}

struct Client {
    id: ClientId,
    seq: u64,
    answered: bool,
    sent_ms: u64,
    done: u64,
}

/// What became of a race that showed on an executor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Its batch is not decided yet.
    Pending,
    /// The verifiers committed another token, or rolled the batch back.
    Caught,
    /// The verifiers committed its token.
    Committed,
}

/// An executor's parallel run of a batch whose token differs from the batch's run in order
/// from the same state.
struct Race {
    executor: u32,
    seq: u64,
    token: Token,
    fate: Fate,
}

/// What races did on the correct executors, counted in batches, as the deployment saw
/// them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Races {
    /// Batches that some executor ran in parallel with another token than the batch's run
    /// in order from the same state.
    pub manifested: u64,
    /// Of those, the ones where the verifiers committed none of the racy tokens (they
    /// committed another or rolled the batch back).
    pub detected: u64,
    /// Of those manifested, the ones where the verifiers committed a racy token: the race
    /// showed alike on a quorum of executors.
    pub undetected: u64,
    /// Detected batches whose racy executors have all since committed the batch or a later
    /// one (they reached the committed state again).
    pub repaired: u64,
    /// Batches whose fate is not decided yet.
    pub pending: u64,
}

/// What lies and divergences did, and what the deployment made of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Divergences {
    /// Wrong tokens, replies and state nodes lying executors sent.
    pub lies_sent: u64,
    /// Batches a correct executor executed with a token other than the one committed
    /// (a race manifested, or the primary lied to it).
    pub manifested: u64,
    /// Batches the verifiers rolled back (no token reached the quorum in time).
    pub rollbacks: u64,
    /// Lying replies clients accepted (must stay 0).
    pub lies_accepted: u64,
}

/// The executors, the verifiers, the clients and what was committed and accepted.
pub struct Deployment {
    pub now_ms: u64,
    setup: BftSetup,
    pub nodes: Vec<Option<Node>>,
    verification: Verification,
    events: BTreeMap<(u64, u64), Event>,
    event_no: u64,
    /// The last arrival time on each link, for FIFO order.
    links: BTreeMap<(u32, u32), u64>,
    rng: u64,
    clients: Vec<Client>,
    /// The replies each request got, by executor.
    replies: BTreeMap<(ClientId, RequestSeq), BTreeMap<u32, Bytes>>,
    /// The reply each client accepted.
    accepted: BTreeMap<(ClientId, RequestSeq), Bytes>,
    ledger: BTreeMap<u64, EveBatch>,
    /// Batches each executor executed with a token not yet judged: (executor, seq) → token.
    tokens: BTreeMap<(u32, u64), Token>,
    decided: BTreeMap<u64, Token>,
    /// Where each correct executor diverged: (executor, batch).
    diverged: Vec<(u32, u64)>,
    /// The token of each batch a correct executor runs in parallel, run in order from the
    /// same state: (executor, seq) → token.
    in_order: BTreeMap<(u32, u64), Token>,
    races: Vec<Race>,
    pub divergences: Divergences,
    /// Clients send no new requests (they still resend unanswered ones).
    pub quiet: bool,
    pub violations: Vec<String>,
    pub trace: Option<Vec<String>>,
}

/// Flips a token, as a liar would.
fn lie(token: Token) -> Token {
    let mut t = token.0;
    t[0] ^= 0xff;
    Token(t)
}

impl Deployment {
    pub fn new(setup: BftSetup) -> Deployment {
        let genesis = Token::genesis(&ObjectTree::new().hash().root);
        let mut verification =
            Verification::new(setup.resilience, genesis, setup.verify_timeout_ms, 256);
        if let Some(p) = setup.protection {
            verification = verification.with_protection(p);
        }
        let mut d = Deployment {
            now_ms: 0,
            rng: setup.seed ^ 0x9e37_79b9_7f4a_7c15,
            nodes: Vec::new(),
            verification,
            events: BTreeMap::new(),
            event_no: 0,
            links: BTreeMap::new(),
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
            accepted: BTreeMap::new(),
            ledger: BTreeMap::new(),
            tokens: BTreeMap::new(),
            decided: BTreeMap::new(),
            diverged: Vec::new(),
            in_order: BTreeMap::new(),
            races: Vec::new(),
            quiet: false,
            divergences: Divergences::default(),
            violations: Vec::new(),
            trace: None,
            setup,
        };
        for me in 0..d.setup.resilience.executors() as u32 {
            let behaviour =
                (d.setup.behaviours.get(me as usize).copied()).unwrap_or(Behaviour::Correct);
            let service = Kv {
                window: d.setup.counter_window.unwrap_or(0),
                ..Kv::new(me as u8, d.setup.racy.contains(&me))
            };
            let executor = Executor::new(service, KeyMixer, 2, ObjectTree::new(), 4_000)
                .expect("two threads")
                .with_missed_conflicts(d.setup.missed_conflicts);
            let cfg = BftConfig {
                batch_size_max: d.setup.batch_size_max,
                pipeline_max: d.setup.pipeline_max,
                progress_ms: d.setup.progress_ms,
                fetch_ms: d.setup.fetch_ms,
                ..BftConfig::new(me, d.setup.resilience)
            };
            d.nodes.push(Some(Node {
                core: ExecutorCore::new(cfg, genesis, 0),
                stage: Stage::new(executor, 64),
                behaviour,
                executed: BTreeMap::new(),
            }));
        }
        d
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = self.trace.as_mut() {
            trace.push(format!("{:>6} ms  {}", self.now_ms, line()));
        }
    }

    fn draw(&mut self, max: u64) -> u64 {
        // SplitMix64: the same delays for the same seed.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        1 + (z ^ (z >> 31)) % max.max(1)
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.event_no += 1;
        self.events.insert((at, self.event_no), event);
    }

    /// Sends over the FIFO link `from → to` (`u32::MAX`: a client or the verifiers).
    fn send(&mut self, from: u32, to: u32, input: Input) {
        let delay = self.draw(self.setup.max_delay_ms);
        let last = self.links.get(&(from, to)).copied().unwrap_or(0);
        let at = (self.now_ms + delay).max(last);
        self.links.insert((from, to), at);
        self.schedule(at, Event::ToExecutor { to, input });
    }

    /// Executor `me` crashes: it takes no input and sends nothing from now on.
    pub fn crash(&mut self, me: u32) {
        self.note(|| format!("executor {me} crashes"));
        self.nodes[me as usize] = None;
    }

    pub fn node(&self, me: u32) -> Option<&Node> {
        self.nodes[me as usize].as_ref()
    }

    fn is_correct(&self, me: u32) -> bool {
        (self.nodes[me as usize].as_ref()).is_some_and(|n| n.behaviour == Behaviour::Correct)
    }

    fn input(&mut self, me: u32, input: Input) {
        let Some(node) = self.nodes[me as usize].as_mut() else {
            return;
        };
        node.core.handle(self.now_ms, input);
        self.drain(me);
    }

    /// Carries out every action of executor `me`.
    fn drain(&mut self, me: u32) {
        let n = self.setup.resilience.executors() as u32;
        loop {
            let Some(node) = self.nodes[me as usize].as_mut() else {
                return;
            };
            let behaviour = node.behaviour;
            let Some(action) = node.core.poll_action() else {
                return;
            };
            match action {
                Action::Send { to, message } => {
                    self.send(me, to, Input::Peer { from: me, message })
                }
                Action::Broadcast(message) => {
                    for to in (0..n).filter(|&to| to != me) {
                        let message = message.clone();
                        self.send(me, to, Input::Peer { from: me, message });
                    }
                }
                Action::Verify(mut verify) => {
                    self.tokens.insert((me, verify.seq), verify.token);
                    if let Some(in_order) = self.in_order.remove(&(me, verify.seq))
                        && in_order != verify.token
                    {
                        self.note(|| {
                            format!("a race shows on executor {me} at batch {}", verify.seq)
                        });
                        self.races.push(Race {
                            executor: me,
                            seq: verify.seq,
                            token: verify.token,
                            fate: Fate::Pending,
                        });
                    }
                    if behaviour == Behaviour::WrongTokens {
                        verify.token = lie(verify.token);
                        self.divergences.lies_sent += 1;
                    }
                    let delay = self.draw(self.setup.max_delay_ms) * 2;
                    self.schedule(self.now_ms + delay, Event::Verify(verify));
                }
                Action::Query { seq } => {
                    let delay = self.draw(self.setup.max_delay_ms) * 2;
                    self.schedule(self.now_ms + delay, Event::Query { executor: me, seq });
                }
                Action::Poll => {
                    let (last, token) = self.verification.last_committed();
                    let view = self.verification.view();
                    self.respond(
                        Decision::Rollback {
                            seq: last + 1,
                            view,
                        },
                        &[me],
                    );
                    self.respond(Decision::Commit { seq: last, token }, &[me]);
                }
                Action::Complain { view } => {
                    self.note(|| format!("executor {me} complains about view {view}"));
                    let delay = self.draw(self.setup.max_delay_ms) * 2;
                    self.schedule(self.now_ms + delay, Event::Complain { executor: me, view });
                }
                Action::Reply { client, seq, reply } => {
                    let reply = if behaviour == Behaviour::WrongReplies {
                        self.divergences.lies_sent += 1;
                        Bytes::from_static(b"a lie")
                    } else {
                        reply
                    };
                    self.reply(me, client, seq, reply);
                }
                Action::Work { work, peer } => self.work(me, work, peer, behaviour),
            }
        }
    }

    fn work(&mut self, me: u32, work: Work, peer: Option<u32>, behaviour: Behaviour) {
        match &work {
            Work::Execute {
                batch, sequential, ..
            } => {
                let node = self.nodes[me as usize].as_mut().expect("running");
                node.executed.insert(batch.seq, batch.clone());
                let executor = node.stage.executor();
                if !sequential
                    && behaviour == Behaviour::Correct
                    && batch.seq == executor.next_seq()
                {
                    let mut tree = executor.state().clone();
                    let previous = executor.last_token();
                    let outputs = run_committed(&mut tree, batch);
                    let proof = TokenProof {
                        outputs: outputs_digest(&outputs),
                        previous,
                    };
                    let token = Token::of(batch.seq, &tree.hash().root, Some(&proof));
                    self.in_order.insert((me, batch.seq), token);
                }
            }
            Work::Commit { seq, .. } => {
                let seq = *seq;
                self.note(|| format!("executor {me} commits batch {seq}"));
                self.record_commit(me, seq);
            }
            Work::Fetch { seq, .. } => {
                let seq = *seq;
                self.note(|| format!("executor {me} fetches the state of batch {seq}"));
            }
            _ => {}
        }
        let node = self.nodes[me as usize].as_mut().expect("running");
        for out in node.stage.apply(work) {
            match out {
                StageOutput::Done(done) => {
                    let node = self.nodes[me as usize].as_mut().expect("running");
                    node.core.handle(self.now_ms, Input::Stage(done));
                }
                StageOutput::Send(mut message) => {
                    let Some(to) = peer else { continue };
                    if behaviour == Behaviour::WrongState
                        && let EveMessage::TreeNodes { nodes, .. } = &mut message
                    {
                        for (_, node) in nodes.iter_mut() {
                            if let TreeNode::Leaf { value, .. } = node {
                                *value = Bytes::from_static(b"a forged value");
                                self.divergences.lies_sent += 1;
                            }
                        }
                    }
                    self.send(me, to, Input::Peer { from: me, message });
                }
            }
        }
    }

    fn record_commit(&mut self, me: u32, seq: u64) {
        if !self.is_correct(me) {
            return;
        }
        let Some(batch) = (self.nodes[me as usize].as_ref()).and_then(|n| n.executed.get(&seq))
        else {
            self.violations.push(format!(
                "executor {me} committed batch {seq} it never executed"
            ));
            return;
        };
        match self.ledger.get(&seq) {
            Some(b) if b != batch => self
                .violations
                .push(format!("batch {seq} committed as two different batches")),
            Some(_) => {}
            None => {
                self.ledger.insert(seq, batch.clone());
            }
        }
    }

    fn reply(&mut self, me: u32, client: ClientId, seq: RequestSeq, reply: Bytes) {
        let quorum = self.setup.resilience.response_quorum();
        let got = self.replies.entry((client, seq)).or_default();
        got.insert(me, reply.clone());
        let matching = got.values().filter(|r| **r == reply).count();
        if matching < quorum || self.accepted.contains_key(&(client, seq)) {
            return;
        }
        if reply.as_ref() == b"a lie" {
            self.divergences.lies_accepted += 1;
        }
        self.accepted.insert((client, seq), reply);
        if let Some(c) = self.clients.iter_mut().find(|c| c.id == client)
            && c.seq == seq.0
            && !c.answered
        {
            c.answered = true;
            c.done += 1;
        }
    }

    /// The verifiers' answer to a decision: each verifier sends it (a lying one, its lie)
    /// to `to`.
    fn respond(&mut self, decision: Decision, to: &[u32]) {
        if let Decision::Commit { seq, token } = decision {
            self.decided.insert(seq, token);
            self.judge(seq, token);
        }
        for verifier in 0..self.setup.resilience.verifiers() as u32 {
            let told = if verifier < self.setup.lying_verifiers {
                match decision {
                    Decision::Commit { seq, token } => Decision::Commit {
                        seq,
                        token: lie(token),
                    },
                    Decision::Rollback { seq, view } => Decision::Rollback {
                        seq,
                        view: view + 1,
                    },
                }
            } else {
                decision
            };
            for &executor in to {
                self.send(
                    u32::MAX - 1,
                    executor,
                    Input::Response {
                        verifier,
                        decision: told,
                    },
                );
            }
        }
    }

    /// Batch `seq` committed with `token`: a correct executor that ran it with another
    /// token diverged.
    fn judge(&mut self, seq: u64, token: Token) {
        let judged: Vec<(u32, Token)> = (self.tokens.range((0, seq)..))
            .filter(|((_, s), _)| *s == seq)
            .map(|((e, _), t)| (*e, *t))
            .collect();
        for race in &mut self.races {
            if race.fate == Fate::Pending && race.seq == seq {
                race.fate = if race.token == token {
                    Fate::Committed
                } else {
                    Fate::Caught
                };
            }
        }
        for (executor, mine) in judged {
            self.tokens.remove(&(executor, seq));
            if mine != token && self.is_correct(executor) {
                self.divergences.manifested += 1;
                self.diverged.push((executor, seq));
                self.note(|| format!("executor {executor} diverged at batch {seq}"));
            }
        }
    }

    /// Batches from `seq` on are run again: the races pending there are caught.
    fn rolled_back(&mut self, seq: u64) {
        for race in &mut self.races {
            if race.fate == Fate::Pending && race.seq >= seq {
                race.fate = Fate::Caught;
            }
        }
    }

    fn order(&mut self, event: Event) {
        let all: Vec<u32> = (0..self.setup.resilience.executors() as u32).collect();
        let decisions = match event {
            Event::Verify(verify) => {
                let (answer, decisions) = self.verification.verify(verify, self.now_ms);
                if let Answer::Now(decision) = answer {
                    self.respond(decision, &[verify.executor]);
                }
                decisions
            }
            Event::Complain { executor, view } => {
                let (answer, decisions) = self.verification.complain(executor, view);
                if decisions.is_empty() {
                    self.respond(answer, &[executor]);
                }
                decisions
            }
            Event::Query { executor, seq } => {
                if let Answer::Now(decision) = self.verification.query(seq) {
                    self.respond(decision, &[executor]);
                }
                Vec::new()
            }
            Event::ToExecutor { .. } => unreachable!("not for the verifiers"),
        };
        for decision in decisions {
            if let Decision::Rollback { seq, view } = decision {
                self.divergences.rollbacks += 1;
                // Tokens of the rolled-back run are not judged: every executor runs again.
                self.tokens.retain(|(_, s), _| *s < seq);
                self.rolled_back(seq);
                self.note(|| format!("the verifiers roll batch {seq} back into view {view}"));
            }
            self.respond(decision, &all);
        }
    }

    fn request(&self, c: &Client) -> EveRequest {
        let key = (c.id.0 as u8).wrapping_mul(7).wrapping_add(c.seq as u8) % 32;
        let instance = c.id.0 as u32;
        let mut payload =
            if self.setup.counter_window.is_some() && instance < self.setup.counter_clients {
                vec![COUNTER_KEY, 1 + key]
            } else {
                vec![key]
            };
        payload.extend_from_slice(format!("{}:{}", c.id.0, c.seq).as_bytes());
        EveRequest {
            client: c.id,
            seq: RequestSeq(c.seq),
            payload: Bytes::from(payload),
        }
    }

    /// One millisecond: clients send, the events due happen, timers fire.
    pub fn step(&mut self) {
        self.now_ms += 1;
        let n = self.setup.resilience.executors() as u32;
        for i in 0..self.clients.len() {
            let c = &self.clients[i];
            let resend = !c.answered && self.now_ms - c.sent_ms >= self.setup.resend_ms;
            if !(c.answered || resend) || (c.answered && self.quiet) {
                continue;
            }
            if c.answered {
                self.clients[i].seq += 1;
                self.clients[i].answered = false;
            }
            self.clients[i].sent_ms = self.now_ms;
            let request = self.request(&self.clients[i]);
            for to in 0..n {
                self.send(u32::MAX, to, Input::Request(request.clone()));
            }
        }
        while let Some(entry) = self.events.first_entry() {
            if entry.key().0 > self.now_ms {
                break;
            }
            match entry.remove() {
                Event::ToExecutor { to, input } => self.input(to, input),
                event => self.order(event),
            }
        }
        let decisions = self.verification.advance_time(self.now_ms);
        let all: Vec<u32> = (0..n).collect();
        for decision in decisions {
            self.divergences.rollbacks += 1;
            if let Decision::Rollback { seq, .. } = decision {
                self.tokens.retain(|(_, s), _| *s < seq);
                self.rolled_back(seq);
            }
            self.note(|| format!("the verifiers time out: {decision:?}"));
            self.respond(decision, &all);
        }
        for me in 0..n {
            let due = (self.nodes[me as usize].as_ref())
                .is_some_and(|node| node.core.next_timeout_ms() <= self.now_ms);
            if due {
                self.input(me, Input::Tick);
            }
        }
    }

    pub fn run(&mut self, ms: u64) {
        for _ in 0..ms {
            self.step();
        }
    }

    /// Requests answered (accepted by their clients) so far.
    pub fn answered(&self) -> u64 {
        self.clients.iter().map(|c| c.done).sum()
    }

    pub fn answered_per_client(&self) -> Vec<u64> {
        self.clients.iter().map(|c| c.done).collect()
    }

    pub fn committed_batches(&self) -> usize {
        self.ledger.len()
    }

    /// Divergences repaired: the correct executor that diverged at a batch has since
    /// committed it or a later one (it fetched the committed state, which the checks
    /// compare with sequential execution's).
    pub fn repaired(&self) -> u64 {
        (self.diverged.iter())
            .filter(|(executor, seq)| {
                (self.nodes[*executor as usize].as_ref())
                    .is_some_and(|n| n.core.committed() >= *seq)
            })
            .count() as u64
    }

    /// What races did on the correct executors, by batch.
    pub fn races(&self) -> Races {
        let mut by_batch: BTreeMap<u64, Vec<&Race>> = BTreeMap::new();
        for race in &self.races {
            by_batch.entry(race.seq).or_default().push(race);
        }
        let mut races = Races::default();
        for (seq, raced) in by_batch {
            races.manifested += 1;
            if raced.iter().any(|r| r.fate == Fate::Committed) {
                races.undetected += 1;
            } else if raced.iter().any(|r| r.fate == Fate::Pending) {
                races.pending += 1;
            } else {
                races.detected += 1;
                let repaired = raced.iter().all(|r| {
                    (self.nodes[r.executor as usize].as_ref())
                        .is_some_and(|n| n.core.committed() >= seq)
                });
                races.repaired += u64::from(repaired);
            }
        }
        races
    }

    /// The committed batches, run in order from the start, give the replies the clients
    /// accepted and the state every correct executor committed; returns what does not hold.
    pub fn check_against_sequential(&self) -> Vec<String> {
        let mut problems = self.violations.clone();
        let mut tree = ObjectTree::new();
        let mut states = BTreeMap::new();
        let mut outputs_of = BTreeMap::new();
        for (expected, (seq, batch)) in (1..).zip(&self.ledger) {
            if *seq != expected {
                problems.push(format!(
                    "committed batches skip from {} to {seq}",
                    expected - 1
                ));
                return problems;
            }
            let outputs = run_committed(&mut tree, batch);
            for (request, output) in batch.requests.iter().zip(outputs) {
                outputs_of
                    .entry((request.client, request.seq))
                    .or_insert(output);
            }
            states.insert(*seq, tree.clone());
        }
        for (key, reply) in &self.accepted {
            match outputs_of.get(key) {
                Some(output) if output == reply => {}
                Some(_) => problems.push(format!(
                    "request {} of client {} was accepted with a reply other than in order",
                    key.1.0, key.0.0
                )),
                None => problems.push(format!(
                    "request {} of client {} was accepted but never committed",
                    key.1.0, key.0.0
                )),
            }
        }
        for me in 0..self.nodes.len() as u32 {
            if !self.is_correct(me) {
                continue;
            }
            let stable = self.nodes[me as usize]
                .as_ref()
                .expect("correct")
                .stage
                .executor()
                .stable();
            if stable.seq > 0 && states.get(&stable.seq) != Some(&stable.tree) {
                problems.push(format!(
                    "executor {me}'s committed state at batch {} is not sequential execution's",
                    stable.seq
                ));
            }
        }
        if self.divergences.lies_accepted > 0 {
            problems.push(format!(
                "clients accepted {} lying replies",
                self.divergences.lies_accepted
            ));
        }
        problems
    }
}
