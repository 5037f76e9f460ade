//! The deterministic world: one thread, virtual time in milliseconds, one seeded generator,
//! and an event queue ordered by (time, sequence number). It drives `n` honest
//! [`tagma_core::Replica`] cores (some wrapped in a [`Byzantine`] layer) and their executors,
//! the simulated network and the clients, and checks the invariants after every event.
//!
//! Phases: a **fault period** (lossy, duplicating, reordering, partitioned network; crashes
//! and restarts; Byzantine replicas; faulty clients), then a **liveness phase**: the network
//! heals, crashed replicas restart (at most f replicas stay faulty), and every correct
//! client must complete its pending operation and [`LIVENESS_OPS`] more within the bound.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{self, AssertUnwindSafe};

use bytes::Bytes;
use serde::Serialize;
use tagma_client::{ViewFollower, Voter};
use tagma_core::transfer::{InstallOutcome, StateToInstall};
use tagma_core::view::{Membership, sign_change};
use tagma_core::{
    Action, Input, Mode, PeerInput, Quorums, Recovered, Replica, ReplicaParams, Resume, Start,
};
use tagma_crypto::IdentityKey;
use tagma_exec::{Executor, Service};
use tagma_kv::parallel::ParallelKv;
use tagma_kv::{KvOp, KvReply};
use tagma_wire::{
    Batch, ClientId, Collect, ConsensusId, DecidedInstance, Decode, Digest, Encode, PeerMessage,
    ReplicaId, Reply, Request, RequestAuth, RequestEnvelope, RequestKind, RequestSeq, ViewId,
};

use crate::byzantine::{Byzantine, Exercised, Out};
use crate::client::{
    Attempt, Outstanding, RETRANSMIT_MS, SimClient, THINK_MS_MAX, UNORDERED_TIMEOUT_MS, seen_after,
    to_ret,
};
use crate::linearizability::{self, Entry, LinError};
use crate::rng::Rng;
use crate::scenario::{
    Behaviour, ClientFault, LIVENESS_OPS, NetParams, REQUEST_TIMEOUT_MS, Scenario,
};

/// A run stops (as a liveness failure) after this many events.
pub const EVENTS_MAX: u64 = 500_000;

/// An invariant that did not hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub invariant: String,
    pub detail: String,
    pub time_ms: u64,
}

#[derive(Debug)]
enum Wake {
    Start,
    Retransmit,
    UnorderedTimeout,
}

#[derive(Debug)]
enum Event {
    Peer {
        from: u32,
        to: u32,
        bytes: Bytes,
        bad_mac: bool,
    },
    Request {
        client: usize,
        to: u32,
        envelope: RequestEnvelope,
    },
    Reply {
        client: usize,
        from: u32,
        reply: Reply,
    },
    ReplicaTimer(u32),
    ClientWake {
        client: usize,
        token: u64,
        wake: Wake,
    },
    ByzTick(u32),
    PartitionStart(usize),
    PartitionEnd(usize),
    Crash(u32),
    Restart(u32),
    /// A durable replica's log flush completes: its unsynced log records become durable.
    DiskSync(u32),
    /// A durable replica's vote flush completes: the vote it wrote becomes durable.
    VoteFlush(u32),
    Heal,
    /// The administrator sends (or resends) the scenario's view change.
    Reconfigure,
    /// A correct replica installed the view that adds the dormant replica: it starts.
    StartJoiner(u32),
    /// A replica tells a client that its request named an older view than the installed one.
    ClientView {
        client: usize,
        from: u32,
        view: tagma_wire::View,
    },
}

/// The principal of the administrator's client (not one of the simulated clients).
const ADMIN_PRINCIPAL: u32 = 99;
/// How often the administrator sends its view change before giving up.
const RECONFIG_SENDS_MAX: u32 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Faults,
    Liveness { deadline_ms: u64 },
}

struct Node {
    core: Replica,
    exec: Executor<ParallelKvReplica>,
    crashed: bool,
    /// Earliest `ReplicaTimer` event queued.
    timer_at: Option<u64>,
    byz: Option<Byzantine>,
    regency: u32,
    /// Instances delivered (= the next cid expected).
    delivered: u64,
    /// Requests executed, with the instance that executed them.
    executed: BTreeMap<(ClientId, RequestSeq), u64>,
    /// What the replica was built from (a durable restart builds it again).
    params: ReplicaParams,
    key: IdentityKey,
    /// Durable runs, correct replicas: what survives a crash.
    disk: Option<Disk>,
    /// A checkpoint being fetched by state transfer (memory only: lost on crash).
    incoming: Vec<u8>,
    /// The newest `PersistVote` sequence number (a replica without a disk reports it durable
    /// when asked to flush).
    last_vote_seq: u64,
    /// Byzantine replicas: what their honest core decided, by instance.
    byz_decided: BTreeMap<u64, Digest>,
    /// The replica a join plan adds: outside the initial view, and `dormant` (down, deaf)
    /// until a correct replica installed the view with it.
    joiner: bool,
    dormant: bool,
    /// Its disk lied at its last restart (the newest checkpoint rewritten with a state nobody
    /// ordered, under a valid digest and checksum): one of the f faulty until a state
    /// transfer replaces its state (the state vote's repair, or a later fetch).
    lying_disk: bool,
}

impl Node {
    /// A view without this replica was installed: it takes no more input.
    fn left(&self) -> bool {
        self.core.has_left()
    }
}

/// A correct replica's simulated disk: its newest checkpoint and every decided instance with
/// its proof (the ones before the checkpoint are kept for forwarding to replicas that are
/// behind, as the node keeps the last `decisions_kept`), and its newest votes. As in the node,
/// a decided instance is appended unsynced and a sync completes a few milliseconds later;
/// the instance's replies leave at once (the votes its accepters synced before their ACCEPTs
/// hold it meanwhile), and an ACCEPT waits for the sync of its vote. A crash loses everything
/// in memory (consensus state, regency, pending requests); of the unsynced records, a prefix
/// may survive, ending in a torn one, and an unsynced vote may survive too. In BFT runs it may also damage the
/// disk (a corrupt checkpoint, one flipped byte in a synced record, or a checkpoint that lies
/// under valid checksums), for at most f replicas counting the Byzantine ones. What survives is decided by the real segment reader on the
/// log's real bytes (see [`World::crash_disk`]).
#[derive(Default)]
struct Disk {
    checkpoint: Option<(u64, Bytes)>,
    /// The checkpoint before it, still served to state transfers (as the node keeps two).
    previous: Option<(u64, Bytes)>,
    log: Vec<DecidedInstance>,
    unsynced: Vec<DecidedInstance>,
    /// A checkpoint taken at an unsynced instance: written with the sync that makes that
    /// instance's log record durable, lost with it in a crash (as the node's checkpoint
    /// thread waits for the log). A checkpoint durable before its instance's record would
    /// leave the replica, after a crash of all, ahead of every proof (regression seed 2095).
    pending_checkpoint: Option<(u64, Bytes)>,
    /// The votes flushed, by instance: the newest of every instance not in the log when they
    /// were flushed (as the node's vote records hold them), with the highest regency always.
    votes: BTreeMap<u64, Collect>,
    /// Votes written but not flushed yet (the newest per instance): they become durable (and
    /// an ACCEPT behind them may leave) with the vote flush the core asks for
    /// (`Action::WriteVotes`); a crash before that may or may not leave them on disk.
    unsynced_votes: BTreeMap<u64, Collect>,
    sync_scheduled: bool,
    vote_flush_scheduled: bool,
    damaged: bool,
}

/// Instances between two checkpoints of one replica in durable runs (staggered over the
/// replicas; small, so runs checkpoint, truncate the log and recover from checkpoints).
const CHECKPOINT_PERIOD_PER_REPLICA: u64 = 6;
/// Decisions kept in memory in durable runs: fewer than a checkpoint period, so state
/// transfer is exercised.
const DURABLE_DECISIONS_KEPT: usize = 8;
/// State-transfer chunk size in the simulator: small, so a checkpoint takes several chunks.
const SIM_CHUNK_BYTES: u32 = 512;
/// Chance that a crash damages a durable replica's disk (BFT runs, within the f budget).
const DISK_DAMAGE_P: f64 = 0.2;
/// Chance that a crash leaves part of a durable replica's unsynced log bytes on disk (whole
/// records and a torn one).
const TEAR_P: f64 = 0.5;

/// A simulated replica's executor: the key-value service, judging view changes as the core
/// does.
/// How a join plan's replica `i` is added.
fn joiner_member(i: usize, key: &IdentityKey) -> tagma_wire::ViewMember {
    tagma_wire::ViewMember {
        id: ReplicaId(i as u32),
        addr: format!("sim:{i}"),
        key: key.public(),
    }
}

/// A replica's executor: the key-value store as a parallel service, each decided batch run
/// in an order of its own (a seeded random order that respects the conflicts between
/// requests, as a parallel run could take), so that every seed also checks that parallel
/// execution cannot make correct replicas diverge.
fn new_executor(membership: &Membership, order_seed: u64) -> Executor<ParallelKvReplica> {
    let scheduler = tagma_parallel::Scheduler::new(
        tagma_parallel::Policy::Shuffled { seed: order_seed },
        1,
        tagma_parallel::Groups::default(),
    );
    let service = tagma_parallel::ParallelReplica::new(
        ParallelKv::new(),
        scheduler,
        tagma_parallel::Classify::Service,
    );
    Executor::new(service, ViewId(0), 4, 64).with_membership(membership.clone())
}

type ParallelKvReplica = tagma_parallel::ParallelReplica<ParallelKv>;

/// Replica `r`'s execution-order seed.
fn order_seed(seed: u64, r: usize) -> u64 {
    seed ^ (r as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f)
}

/// How a checkpoint is named in state-transfer offers (as the node names it).
fn checkpoint_info(cid: u64, state: &[u8]) -> tagma_wire::CheckpointInfo {
    tagma_wire::CheckpointInfo {
        cid: ConsensusId(cid),
        len: state.len() as u64,
        digest: tagma_exec::checkpoint_digest(state),
    }
}

/// The outcome of a run, before the report is assembled.
pub struct Outcome {
    pub violations: Vec<Violation>,
    pub liveness_failure: Option<String>,
    pub exercised: Exercised,
    pub counters: BTreeMap<String, u64>,
    pub trace: Vec<String>,
    pub trace_hash: Digest,
    pub events: u64,
    pub virtual_ms: u64,
    pub decided_instances: u64,
    pub ops_completed: u64,
    pub regency_max: u32,
}

pub struct World {
    sc: Scenario,
    tracing: bool,
    now_ms: u64,
    step: u64,
    next_event_seq: u64,
    queue: BTreeMap<(u64, u64), Event>,
    rng: Rng,
    net: NetParams,
    partitions_active: BTreeSet<usize>,
    nodes: Vec<Node>,
    clients: Vec<SimClient>,
    /// Durable replicas whose disk a crash damaged so far.
    disk_damage_count: usize,
    /// The administrator's key (signs view changes) and the initial view with its rules.
    admin: IdentityKey,
    membership: Membership,
    /// Per client: the view it sends requests in.
    client_views: Vec<ViewFollower>,
    /// Each view a correct replica installed (every other correct one must install the same).
    views: BTreeMap<ViewId, tagma_wire::View>,
    reconfig_sends: u32,
    issued: BTreeSet<Digest>,
    /// Batch hash of each decided instance (first correct replica to deliver it).
    decided: Vec<Digest>,
    histories: BTreeMap<Bytes, Vec<Entry>>,
    phase: Phase,
    violations: Vec<Violation>,
    liveness_failure: Option<String>,
    exercised: Exercised,
    counters: BTreeMap<String, u64>,
    trace: Vec<String>,
    hasher: blake3::Hasher,
}

impl World {
    pub fn new(sc: Scenario, tracing: bool) -> World {
        let mut rng = Rng::new(sc.seed);
        let mut key_rng = rng.fork();
        let n = sc.n;
        let f = sc.f;
        let keys: Vec<IdentityKey> = (0..n)
            .map(|_| IdentityKey::from_seed(key_rng.bytes32()))
            .collect();
        let admin = IdentityKey::from_seed(key_rng.bytes32());
        // A join plan's replica is outside the initial view.
        let joiner = sc.reconfig.as_ref().and_then(|p| p.join);
        let initial: Vec<usize> = (0..n).filter(|i| Some(*i as u32) != joiner).collect();
        let quorums = Quorums::new(sc.mode, initial.len(), f);
        let members: Vec<ReplicaId> = initial.iter().map(|i| ReplicaId(*i as u32)).collect();
        let member_keys = initial
            .iter()
            .map(|i| keys[*i].public())
            .collect::<Vec<_>>();
        let nodes: Vec<Node> = (0..n)
            .map(|i| {
                let params = ReplicaParams {
                    me: ReplicaId(i as u32),
                    members: members.clone(),
                    quorums,
                    view: ViewId(0),
                    batch_size_max: 8,
                    batch_bytes_max: 64 * 1024,
                    request_bytes_max: 1024,
                    client_pending_max: 8,
                    pending_requests_max: 1024,
                    clients_max: 64,
                    future_messages_max: 256,
                    request_timeout_ms: REQUEST_TIMEOUT_MS,
                    seed: sc.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    member_keys: member_keys.clone(),
                    // Durable runs keep few decisions in memory, so replicas that fall behind
                    // (or restart empty) need state transfer; other runs have no checkpoints
                    // and catch up by decision forwarding alone.
                    decisions_kept: if sc.durable {
                        DURABLE_DECISIONS_KEPT
                    } else {
                        100_000
                    },
                    durable: sc.durable && !sc.byzantine.iter().any(|(r, _)| *r == i as u32),
                    state_vote: true,
                    chunk_bytes: SIM_CHUNK_BYTES,
                    state_bytes_max: 1 << 30,
                    member_addrs: initial.iter().map(|i| format!("sim:{i}")).collect(),
                    admin_key: Some(admin.public()),
                };
                let genesis = params.membership();
                let mut params = params;
                let is_joiner = joiner == Some(i as u32);
                if is_joiner {
                    // It starts in the view that adds it (as `tagma replica --join` does).
                    let view = tagma_core::view::apply(
                        &genesis.view,
                        &[tagma_wire::ViewOp::Add(joiner_member(i, &keys[i]))],
                        sc.mode,
                    )
                    .expect("the join applies");
                    params.set_view(&view);
                }
                let byz = sc
                    .byzantine
                    .iter()
                    .find(|(r, _)| *r == i as u32)
                    .map(|(_, b)| Byzantine::new(b, keys[i].clone()));
                let disk = (sc.durable && byz.is_none()).then(Disk::default);
                Node {
                    core: Replica::new(params.clone(), keys[i].clone(), Start::Fresh, 0),
                    params,
                    key: keys[i].clone(),
                    disk,
                    // Every executor starts in the initial view (a joiner's replays history).
                    exec: new_executor(&genesis, order_seed(sc.seed, i)),
                    crashed: is_joiner,
                    timer_at: None,
                    byz,
                    regency: 0,
                    delivered: 0,
                    executed: BTreeMap::new(),
                    incoming: Vec::new(),
                    last_vote_seq: 0,
                    byz_decided: BTreeMap::new(),
                    joiner: is_joiner,
                    dormant: is_joiner,
                    lying_disk: false,
                }
            })
            .collect();
        let mut clients = Vec::new();
        for i in 0..sc.correct_clients {
            let group = i / sc.client_group;
            let keys = (0..sc.keys_per_group)
                .map(|k| Bytes::from(format!("g{group}/k{k}")))
                .collect();
            clients.push(SimClient::new(
                i,
                None,
                keys,
                Bytes::from(format!("g{group}/")),
            ));
        }
        for (j, fault) in sc.faulty_clients.iter().enumerate() {
            let i = sc.correct_clients + j;
            let keys = vec![Bytes::from(format!("faulty{j}/k"))];
            clients.push(SimClient::new(i, Some(*fault), keys, Bytes::from("faulty")));
        }
        let membership = nodes[initial[0]].params.membership();
        let client_views = (0..clients.len())
            .map(|_| ViewFollower::new(sc.mode, &membership.view))
            .collect();
        World {
            admin,
            membership,
            client_views,
            views: BTreeMap::new(),
            reconfig_sends: 0,
            net: sc.net,
            tracing,
            now_ms: 0,
            step: 0,
            next_event_seq: 0,
            queue: BTreeMap::new(),
            rng,
            partitions_active: BTreeSet::new(),
            nodes,
            clients,
            disk_damage_count: 0,
            issued: BTreeSet::new(),
            decided: Vec::new(),
            histories: BTreeMap::new(),
            phase: Phase::Faults,
            violations: Vec::new(),
            liveness_failure: None,
            exercised: Exercised::new(),
            counters: BTreeMap::new(),
            trace: Vec::new(),
            hasher: blake3::Hasher::new(),
            sc,
        }
    }

    fn schedule(&mut self, at_ms: u64, event: Event) {
        debug_assert!(at_ms >= self.now_ms, "event scheduled in the past");
        self.next_event_seq += 1;
        self.queue.insert((at_ms, self.next_event_seq), event);
    }

    fn count(&mut self, name: &str) {
        *self.counters.entry(name.to_string()).or_default() += 1;
    }

    fn violation(&mut self, invariant: &str, detail: String) {
        self.note(b'V', 0, 0, detail.as_bytes(), || {
            format!("VIOLATION {invariant}: {detail}")
        });
        self.violations.push(Violation {
            invariant: invariant.to_string(),
            detail,
            time_ms: self.now_ms,
        });
    }

    /// Feeds one event into the trace hash, and into the trace when enabled.
    fn note(&mut self, tag: u8, a: u64, b: u64, data: &[u8], line: impl FnOnce() -> String) {
        self.hasher.update(&self.now_ms.to_le_bytes());
        self.hasher.update(&[tag]);
        self.hasher.update(&a.to_le_bytes());
        self.hasher.update(&b.to_le_bytes());
        self.hasher.update(&(data.len() as u64).to_le_bytes());
        self.hasher.update(data);
        if self.tracing {
            let line = format!("{:>7}ms #{:<7} {}", self.now_ms, self.step, line());
            self.trace.push(line);
        }
    }

    /// Runs the scenario to its end.
    pub fn run(mut self) -> Outcome {
        self.start();
        while let Some(((at_ms, _), event)) = self.queue.pop_first() {
            self.now_ms = at_ms;
            self.step += 1;
            if let Phase::Liveness { deadline_ms } = self.phase
                && at_ms > deadline_ms
            {
                self.fail_liveness("the liveness bound passed");
                break;
            }
            if self.step > EVENTS_MAX {
                self.fail_liveness("the event budget ran out");
                break;
            }
            // A panic in the code under test is a finding: keep the trace and counters.
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| self.handle(event))) {
                self.violation("panic", panic_message(payload.as_ref()));
                break;
            }
            if !self.violations.is_empty() {
                break;
            }
            if matches!(self.phase, Phase::Liveness { .. }) && self.all_correct_done() {
                break;
            }
        }
        if self.queue.is_empty() && self.violations.is_empty() && self.liveness_failure.is_none() {
            self.fail_liveness("no events left");
        }
        self.final_checks();
        self.finish()
    }

    fn start(&mut self) {
        let fault_ms = self.sc.fault_period_ms;
        self.schedule(fault_ms, Event::Heal);
        for (i, p) in self.sc.partitions.clone().into_iter().enumerate() {
            self.schedule(p.start_ms, Event::PartitionStart(i));
            self.schedule(p.end_ms, Event::PartitionEnd(i));
        }
        for c in self.sc.crashes.clone() {
            self.schedule(c.start_ms, Event::Crash(c.replica));
            if let Some(end) = c.end_ms {
                self.schedule(end, Event::Restart(c.replica));
            }
        }
        if let Some((start, end)) = self.sc.crash_all {
            for r in 0..self.nodes.len() {
                if self.nodes[r].byz.is_none() {
                    self.schedule(start, Event::Crash(r as u32));
                    self.schedule(end, Event::Restart(r as u32));
                }
            }
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i]
                .byz
                .as_ref()
                .is_some_and(Byzantine::wants_ticks)
            {
                let at = self.rng.range(50, 300);
                self.schedule(at, Event::ByzTick(i as u32));
            }
        }
        for c in 0..self.clients.len() {
            let at = self.rng.range(0, 20);
            self.wake_client(c, at, Wake::Start);
        }
        if let Some(plan) = &self.sc.reconfig {
            self.schedule(plan.at_ms, Event::Reconfigure);
        }
    }

    // ---- reconfiguration ------------------------------------------------------------------

    /// The administrator's view change (removing the plan's replica), preceded by a forged
    /// one in half the plans, sent to every replica like a client request; resent until a
    /// correct replica installed a view.
    fn send_view_change(&mut self) {
        let Some(plan) = self.sc.reconfig.clone() else {
            return;
        };
        if !self.views.is_empty() || self.reconfig_sends >= RECONFIG_SENDS_MAX {
            return;
        }
        self.reconfig_sends += 1;
        let ops = vec![self.plan_op(&plan)];
        let mut changes = Vec::new();
        if plan.forged_first {
            // Another removal, so a forgery that went through would show in the view.
            let forger = IdentityKey::from_seed([0x66; 32]);
            let other = (plan.remove + 1) % self.nodes.len() as u32;
            let forged = vec![tagma_wire::ViewOp::Remove(ReplicaId(other))];
            changes.push(sign_change(&forger, ViewId(0), forged));
        }
        changes.push(sign_change(&self.admin, ViewId(0), ops));
        let sends = self.reconfig_sends;
        let what = match (plan.join, plan.set_f) {
            (Some(j), _) => format!("add replica {j}"),
            (None, Some(f)) => format!("set f to {f}"),
            (None, None) => format!("remove replica {}", plan.remove),
        };
        self.note(b'V', plan.remove as u64, sends as u64, &[], || {
            format!("administrator asks to {what} (send {sends})")
        });
        for (i, change) in changes.into_iter().enumerate() {
            let envelope = RequestEnvelope {
                request: Request {
                    client: ClientId::new(ADMIN_PRINCIPAL, 1),
                    seq: RequestSeq(i as u64 + 1),
                    kind: RequestKind::Reconfigure,
                    view: ViewId(0),
                    payload: change.to_bytes(),
                },
                auth: RequestAuth::Macs(Vec::new()),
            };
            self.issued
                .insert(tagma_crypto::request_digest(&envelope.request));
            for r in 0..self.nodes.len() as u32 {
                if self.client_link_cut(r) || self.rng.chance(self.net.drop_p) {
                    continue;
                }
                let at = self.now_ms + self.delay();
                self.schedule(
                    at,
                    Event::Request {
                        client: usize::MAX,
                        to: r,
                        envelope: envelope.clone(),
                    },
                );
            }
        }
        let again = self.now_ms + RETRANSMIT_MS;
        self.schedule(again, Event::Reconfigure);
    }

    /// The administrator's operation in `plan`.
    fn plan_op(&self, plan: &crate::scenario::ReconfigPlan) -> tagma_wire::ViewOp {
        match (plan.join, plan.set_f) {
            (Some(j), _) => {
                tagma_wire::ViewOp::Add(joiner_member(j as usize, &self.nodes[j as usize].key))
            }
            (None, Some(f)) => tagma_wire::ViewOp::SetF(f),
            (None, None) => tagma_wire::ViewOp::Remove(ReplicaId(plan.remove)),
        }
    }

    /// The lowest f of the run (a plan may lower it): the fault budgets use it.
    fn f_floor(&self) -> usize {
        let lowered = self.sc.reconfig.as_ref().and_then(|p| p.set_f);
        lowered.map_or(self.sc.f, |f| (f as usize).min(self.sc.f))
    }

    /// A correct replica installed the view that adds dormant replica `j`: it starts, in that
    /// view, and fetches its state (as `tagma replica --join` does once the members accept
    /// it).
    fn start_joiner(&mut self, j: usize) {
        if !self.nodes[j].dormant {
            return;
        }
        self.nodes[j].dormant = false;
        self.nodes[j].crashed = false;
        self.count("joiners_started");
        self.note(b'J', j as u64, 0, &[], || {
            format!("replica {j} starts joining")
        });
        self.start_core(j, Start::Joining);
    }

    /// A replica reports the installed view to client `c`: once one correct replica must be
    /// among those reporting the same newer view (f+1 in BFT, one in CFT), the client moves to
    /// it and retransmits its request there.
    fn on_client_view(&mut self, c: usize, from: u32, view: tagma_wire::View) {
        let Some(view) = self.client_views[c].report(ReplicaId(from), &view) else {
            return;
        };
        self.note(b'v', c as u64, view.id.0 as u64, &[], || {
            format!(
                "client {c} moves to view {} ({} members)",
                view.id,
                view.members.len()
            )
        });
        self.count("client_view_changes");
        let q = self.client_views[c].quorums();
        if let Some(out) = self.clients[c].out.as_mut() {
            out.voter = Voter::new(q.reply_quorum(true), q.n);
            self.send_attempt(c, false);
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Peer {
                from,
                to,
                bytes,
                bad_mac,
            } => self.on_peer(from, to, bytes, bad_mac),
            Event::Request {
                client,
                to,
                envelope,
            } => self.on_request(client, to, envelope),
            Event::Reply {
                client,
                from,
                reply,
            } => self.on_reply(client, from, reply),
            Event::ReplicaTimer(r) => self.on_replica_timer(r as usize),
            Event::ClientWake {
                client,
                token,
                wake,
            } => self.on_client_wake(client, token, wake),
            Event::ByzTick(r) => self.on_byz_tick(r as usize),
            Event::PartitionStart(i) => {
                if self.phase == Phase::Faults {
                    let cut = self.sc.partitions[i].cut.clone();
                    self.note(b'P', i as u64, 1, &[], || {
                        format!("partition {cut:?} cut off")
                    });
                    self.partitions_active.insert(i);
                }
            }
            Event::PartitionEnd(i) => {
                if self.partitions_active.remove(&i) {
                    self.note(b'P', i as u64, 0, &[], || format!("partition {i} healed"));
                }
            }
            Event::Crash(r) => {
                if self.phase == Phase::Faults && !self.nodes[r as usize].crashed {
                    self.note(b'C', r as u64, 1, &[], || format!("replica {r} crashes"));
                    self.nodes[r as usize].crashed = true;
                    self.count("crashes");
                    self.crash_disk(r as usize);
                }
            }
            Event::Restart(r) => self.restart(r as usize),
            Event::DiskSync(r) => self.disk_sync(r as usize),
            Event::VoteFlush(r) => self.vote_flush(r as usize),
            Event::Heal => self.heal(),
            Event::Reconfigure => self.send_view_change(),
            Event::StartJoiner(j) => self.start_joiner(j as usize),
            Event::ClientView { client, from, view } => self.on_client_view(client, from, view),
        }
    }

    // ---- replicas -------------------------------------------------------------------------

    fn restart(&mut self, r: usize) {
        if !self.nodes[r].crashed || self.nodes[r].dormant {
            return;
        }
        self.note(b'C', r as u64, 0, &[], || format!("replica {r} restarts"));
        self.nodes[r].crashed = false;
        self.nodes[r].timer_at = None;
        if self.nodes[r].disk.as_ref().is_some_and(|d| d.damaged) {
            // The checksums caught the damage: the state is set aside and the replica
            // starts empty, fetching what it misses from the others.
            self.note(b'C', r as u64, 3, &[], || {
                format!("replica {r} finds its disk damaged and starts empty")
            });
            self.count("disk_discarded");
            self.nodes[r].disk = Some(Disk::default());
        }
        if self.nodes[r].disk.is_some() {
            let Some(recovered) = self.recover_from_disk(r) else {
                return;
            };
            self.count("durable_restarts");
            let node = &self.nodes[r];
            let empty = node
                .disk
                .as_ref()
                .is_some_and(|d| d.checkpoint.is_none() && d.log.is_empty());
            if node.joiner && empty {
                // A joiner that crashed before it had any state joins again.
                self.count("joiners_restarted_empty");
                self.start_core(r, Start::Joining);
            } else {
                self.start_core(r, Start::Recovered(recovered));
            }
        }
        self.arm_timer(r);
    }

    /// A durable restart: the replica's memory is gone; its executor is rebuilt from its disk
    /// exactly as the node does (checkpoint, log replay), and what the core resumes with is
    /// returned (`None` after a violation).
    fn recover_from_disk(&mut self, r: usize) -> Option<Recovered> {
        let node = &mut self.nodes[r];
        let disk = node.disk.as_ref().expect("a durable replica");
        let mut exec = new_executor(&self.membership, order_seed(self.sc.seed, r));
        if let Some((cid, state)) = &disk.checkpoint
            && let Err(e) = exec.restore(state)
        {
            let msg = format!("replica {r}: its checkpoint of cid {cid} does not restore: {e}");
            self.violation("recovery", msg);
            return None;
        }
        let after = disk.checkpoint.as_ref().map_or(0, |(cid, _)| cid + 1);
        for decided in disk.log.iter().filter(|d| d.cid.0 >= after) {
            let batch = Batch::decode(&decided.batch).expect("a logged batch decodes");
            exec.execute_batch(decided.cid, &batch);
        }
        let next = exec.executed_instances();
        let resume = next.checked_sub(1).map(|last| {
            let kept = node.params.decisions_kept;
            Resume {
                last: ConsensusId(last),
                timestamp_ms: exec.last_timestamp_ms(),
                sessions: exec.sessions(),
                recent: disk.log[disk.log.len().saturating_sub(kept)..].to_vec(),
                // A view change on the disk (checkpointed or replayed) is the one to order in.
                view: exec.members().cloned(),
            }
        });
        debug_assert!(node.delivered >= next, "the disk holds no future");
        // Instances lost with the unsynced tail (or the whole damaged disk) are decided again:
        // forget that they were executed.
        node.delivered = next;
        node.executed.retain(|_, cid| *cid < next);
        let recovered = Recovered {
            resume,
            checkpoints: (disk.previous.iter().chain(&disk.checkpoint))
                .map(|(cid, state)| checkpoint_info(*cid, state))
                .collect(),
            votes: disk.votes.values().cloned().collect(),
        };
        node.exec = exec;
        node.regency = 0;
        node.incoming.clear();
        Some(recovered)
    }

    /// State transfer: validates and installs a fetched state as the node does (digest of
    /// the stored checkpoint, replay, vouchers), checking every replayed decision like a
    /// delivery; then the durable checkpoint of the installed state replaces the log.
    fn install_state(&mut self, r: usize, state: StateToInstall) {
        let bytes = Bytes::from(std::mem::take(&mut self.nodes[r].incoming));
        let target = state.target();
        let node = &mut self.nodes[r];
        let outcome = match node.exec.install_fetched(
            &bytes,
            state.checkpoint.as_ref(),
            &state.log,
            &state.voucher_checkpoints(),
            state.matches_needed,
        ) {
            Ok(_) => InstallOutcome::Installed {
                last: target,
                timestamp_ms: node.exec.last_timestamp_ms(),
                sessions: node.exec.sessions(),
                view: node.exec.members().cloned(),
            },
            Err(reason) => InstallOutcome::Rejected { reason },
        };
        if let InstallOutcome::Installed { .. } = &outcome {
            self.count("state_transfers");
            if std::mem::take(&mut self.nodes[r].lying_disk) {
                // The state its disk lied about is replaced by one f+1 replicas vouched for.
                self.count("lying_disks_replaced");
            }
            if self.nodes[r].joiner {
                self.count("joiner_states_installed");
            }
            self.note(b'T', r as u64, target.0, &[], || {
                format!(
                    "replica {r} installs state up to cid {target} (checkpoint {:?} from replica {}, {} vouchers)",
                    state.checkpoint.map(|c| c.cid.0),
                    state.source,
                    state.vouchers.len()
                )
            });
            // The checkpointed instances are checked as the state's; the replayed ones as
            // deliveries (agreement, validity, exactly once).
            let delivered = self.nodes[r].delivered;
            self.nodes[r].delivered = delivered.max(state.checkpoint.map_or(0, |c| c.cid.0 + 1));
            for decided in state.log.iter().filter(|d| d.cid.0 >= delivered) {
                let batch = Batch::decode(&decided.batch).expect("installed batches decode");
                let hash = tagma_crypto::digest(&decided.batch);
                self.check_delivery(r, decided.cid.0, hash, &batch);
                if !self.violations.is_empty() {
                    return;
                }
            }
            let node = &mut self.nodes[r];
            if let Some(disk) = node.disk.as_mut() {
                let ckp = node.exec.checkpoint();
                let info = checkpoint_info(target.0, &ckp);
                disk.previous = disk.checkpoint.replace((target.0, ckp));
                if state.repair {
                    // The checkpoints it held came from its lying disk.
                    disk.previous = None;
                }
                disk.log.clear();
                disk.unsynced.clear();
                disk.pending_checkpoint = None;
                // As the node: the installed state is the durable checkpoint before the core
                // hears the verdict.
                self.replica_input(r, Input::CheckpointWritten(info));
            }
        } else {
            self.count("state_transfers_rejected");
        }
        let durable = matches!(outcome, InstallOutcome::Installed { .. });
        self.replica_input(r, Input::StateInstalled(outcome));
        if durable {
            // The simulated disk holds the installed state at once.
            self.replica_input(r, Input::LogDurable(target));
        }
    }

    /// Gives replica `r` one input, then carries out every action it produced.
    fn replica_input(&mut self, r: usize, input: Input) {
        let now = self.now_ms;
        if let Err(rejection) = self.nodes[r].core.handle(now, input) {
            self.count(&format!("rejected_{}", rejection.reason()));
            self.note(b'X', r as u64, 0, rejection.reason().as_bytes(), || {
                format!("replica {r} rejects: {rejection:?}")
            });
        }
        self.carry_out_actions(r);
    }

    /// Builds replica `r`'s core anew (a restart or a joiner's start), then carries out what
    /// it asks for at once.
    fn start_core(&mut self, r: usize, start: Start) {
        let node = &mut self.nodes[r];
        node.core = Replica::new(node.params.clone(), node.key.clone(), start, self.now_ms);
        self.carry_out_actions(r);
    }

    /// Carries out every action replica `r` queued, then re-arms its timer.
    fn carry_out_actions(&mut self, r: usize) {
        while let Some(action) = self.nodes[r].core.poll_action() {
            self.carry_out(r, action);
            if !self.violations.is_empty() {
                return;
            }
        }
        if self.nodes[r].lying_disk && self.nodes[r].core.stats().state_votes_confirmed > 0 {
            let msg = format!("replica {r}'s state vote confirmed the state its disk lied about");
            return self.violation("state_vote", msg);
        }
        self.arm_timer(r);
    }

    fn arm_timer(&mut self, r: usize) {
        let node = &self.nodes[r];
        if node.crashed {
            return;
        }
        let Some(deadline) = node.core.next_timeout_ms() else {
            return;
        };
        let at = deadline.max(self.now_ms);
        if node.timer_at.is_none_or(|t| at < t) {
            self.nodes[r].timer_at = Some(at);
            self.schedule(at, Event::ReplicaTimer(r as u32));
        }
    }

    fn on_replica_timer(&mut self, r: usize) {
        if self.nodes[r].crashed {
            return; // frozen; re-armed on restart
        }
        if self.nodes[r].timer_at == Some(self.now_ms) {
            self.nodes[r].timer_at = None;
        }
        let due = self.nodes[r]
            .core
            .next_timeout_ms()
            .is_some_and(|t| t <= self.now_ms);
        if !due {
            self.arm_timer(r);
            return;
        }
        self.note(b'T', r as u64, 0, &[], || format!("replica {r} tick"));
        self.replica_input(r, Input::Tick);
        // A timer that is still due right after its tick would spin at one instant.
        if self.nodes[r]
            .core
            .next_timeout_ms()
            .is_some_and(|t| t <= self.now_ms)
        {
            self.count("core_timer_not_advanced");
            self.nodes[r].timer_at = Some(self.now_ms + 1);
            self.schedule(self.now_ms + 1, Event::ReplicaTimer(r as u32));
        }
    }

    fn carry_out(&mut self, r: usize, action: Action) {
        match action {
            Action::Broadcast(msg) => {
                let dests: Vec<ReplicaId> = (0..self.nodes.len() as u32)
                    .filter(|&d| d as usize != r)
                    .map(ReplicaId)
                    .collect();
                self.send_peer(r, &dests, msg);
            }
            Action::Send { to, msg } => self.send_peer(r, &[to], msg),
            Action::Deliver(decision) => {
                let (cid, hash) = (decision.cid, decision.hash);
                let Some(replies) = self.nodes[r].exec.execute_decided(cid, &decision.batch) else {
                    self.count("deliveries_covered_by_installed_state");
                    return;
                };
                self.note(b'D', r as u64, cid.0, &hash.0, || {
                    format!(
                        "replica {r} delivers cid {cid} epoch {} ({} requests, {hash:?})",
                        decision.epoch,
                        decision.batch.requests.len()
                    )
                });
                if self.nodes[r].byz.is_none() {
                    self.check_delivery(r, cid.0, hash, &decision.batch);
                    if !self.violations.is_empty() {
                        return;
                    }
                } else {
                    if let Some(first) = self.decided.get(cid.0 as usize).filter(|h| **h != hash) {
                        let msg = format!(
                            "Byzantine replica {r}'s core decided {hash:?} for cid {cid} from valid ACCEPTs, the correct replicas {first:?}"
                        );
                        self.violation("agreement", msg);
                        return;
                    }
                    let node = &mut self.nodes[r];
                    node.byz_decided.insert(cid.0, hash);
                    if let Some(byz) = node.byz.as_mut() {
                        byz.on_decided(&decision.batch);
                    }
                }
                let node = &mut self.nodes[r];
                if let Some(byz) = node.byz.as_mut()
                    && byz.has(Behaviour::LyingState)
                {
                    byz.remember_state(cid.0, node.exec.checkpoint());
                }
                let replies = self.log_to_disk(r, cid, decision.logged, replies);
                for reply in replies {
                    self.send_reply(r, reply);
                }
            }
            Action::ResendReply { client, seq } => {
                if let Some(reply) = self.nodes[r].exec.cached_reply(client, seq) {
                    self.send_reply(r, reply);
                } else {
                    self.count("resend_reply_not_cached");
                }
            }
            Action::RegencyInstalled { regency, leader } => {
                self.note(b'R', r as u64, regency.0 as u64, &[], || {
                    format!("replica {r} installs regency {regency} (leader {leader})")
                });
                self.count("regencies_installed");
                let node = &mut self.nodes[r];
                node.regency = node.regency.max(regency.0);
                if let Some(byz) = node.byz.as_mut() {
                    byz.on_regency(regency);
                }
            }
            Action::ViewInstalled { cid, view, member } => {
                self.note(b'V', r as u64, view.id.0 as u64, &[], || {
                    let ids: Vec<u32> = view.members.iter().map(|m| m.id.0).collect();
                    format!(
                        "replica {r} installs view {} after cid {cid}: members {ids:?}, f = {}",
                        view.id, view.f
                    )
                });
                self.count("view_installs");
                if view.f as usize != self.sc.f {
                    self.count("f_changes_installed");
                }
                if self.nodes[r].byz.is_none() {
                    match self.views.get(&view.id) {
                        Some(v) if *v != view => {
                            let msg = format!(
                                "replica {r} installed view {} as {view:?}, another correct replica as {v:?}",
                                view.id
                            );
                            self.violation("view", msg);
                            return;
                        }
                        Some(_) => {}
                        None => {
                            if let Some(j) = view
                                .members
                                .iter()
                                .map(|m| m.id.0 as usize)
                                .find(|j| self.nodes[*j].dormant)
                            {
                                let at = self.now_ms + 1;
                                self.schedule(at, Event::StartJoiner(j as u32));
                            }
                            self.views.insert(view.id, view);
                        }
                    }
                }
                if !member {
                    self.count("replicas_left");
                }
            }
            Action::ReadChunk {
                to,
                cid,
                offset,
                len,
            } => {
                let Some(disk) = self.nodes[r].disk.as_ref() else {
                    return;
                };
                let held = disk
                    .checkpoint
                    .iter()
                    .chain(&disk.previous)
                    .find(|(c, _)| *c == cid.0);
                let Some((_, state)) = held else {
                    // As the node's transfer thread: an empty chunk says it is gone.
                    self.count("chunk_of_dropped_checkpoint");
                    let data = Bytes::new();
                    self.send_peer(r, &[to], PeerMessage::Chunk { cid, offset, data });
                    return;
                };
                let data = state.slice(offset as usize..offset as usize + len as usize);
                self.count("chunks_served");
                self.send_peer(r, &[to], PeerMessage::Chunk { cid, offset, data });
            }
            Action::ReadLog { to, from, count } => {
                let Some(disk) = self.nodes[r].disk.as_ref() else {
                    return;
                };
                let entries: Vec<DecidedInstance> = disk
                    .log
                    .iter()
                    .filter(|d| d.cid >= from && d.cid.0 < from.0 + u64::from(count))
                    .cloned()
                    .collect();
                for d in entries {
                    self.send_peer(r, &[to], PeerMessage::LogEntry(d));
                }
            }
            Action::PersistVote { seq, votes } => {
                self.nodes[r].last_vote_seq = seq;
                if let Some(disk) = self.nodes[r].disk.as_mut() {
                    // Written (a process crash keeps it) with the `WriteVotes` that follows.
                    disk.unsynced_votes.insert(votes.cid.0, votes);
                }
            }
            Action::WriteVotes { flush, .. } => {
                if !flush {
                    return;
                }
                let Some(disk) = self.nodes[r].disk.as_mut() else {
                    // Byzantine replicas keep no disk: their votes are durable at once.
                    let seq = self.nodes[r].last_vote_seq;
                    return self.replica_input(r, Input::VotesDurable { seq });
                };
                if !disk.vote_flush_scheduled {
                    disk.vote_flush_scheduled = true;
                    let at = self.now_ms + self.rng.range(0, 4);
                    self.schedule(at, Event::VoteFlush(r as u32));
                }
            }
            Action::AwaitLogDurable { .. } => {
                // The log's flushes are scheduled as records are written, and each reports
                // `LogDurable`.
                self.count("log_waits");
            }
            Action::SendCurrentView { client, view } => self.send_current_view(r, client, view),
            Action::StoreChunk { offset, data, .. } => {
                let incoming = &mut self.nodes[r].incoming;
                if offset == 0 {
                    incoming.clear();
                }
                debug_assert_eq!(incoming.len() as u64, offset, "chunks are stored in order");
                incoming.extend_from_slice(&data);
            }
            Action::InstallState(state) => self.install_state(r, state),
            Action::DigestState { cid } => {
                // The state vote's digest of the recovered state (computed at once).
                let digest = {
                    let node = &self.nodes[r];
                    debug_assert_eq!(node.delivered, cid.0 + 1, "the last instance delivered");
                    node.exec.checkpoint_digest()
                };
                self.count("state_digests");
                self.replica_input(r, Input::StateDigest { cid, digest });
            }
            Action::CheckpointNow { cid } => {
                // The fresh checkpoint a peer the state vote contradicted repairs from, of the
                // state now, written with the next sync (as the node's checkpoint thread waits
                // for the log).
                let node = &mut self.nodes[r];
                debug_assert!(node.delivered > cid.0, "asked after its delivery");
                let Some(last) = node.delivered.checked_sub(1) else {
                    return;
                };
                let state = node.exec.checkpoint();
                let Some(disk) = node.disk.as_mut() else {
                    return;
                };
                disk.pending_checkpoint = Some((last, state));
                self.count("fresh_checkpoints");
                self.schedule_sync(r);
            }
            Action::StateTransferNeeded {
                next_cid,
                known_decided,
            } => {
                self.count("state_transfer_needed");
                self.note(b'S', r as u64, next_cid.0, &[], || {
                    format!(
                        "replica {r} needs state transfer (next {next_cid}, known {known_decided})"
                    )
                });
            }
        }
    }

    /// Durable runs: the decided instance is appended unsynced (its replies leave at once, as
    /// in the node: the accepters' votes hold the decision until the log does); at the
    /// replica's staggered point, a checkpoint is taken, written with the next sync. Returns
    /// the replies, to send now.
    fn log_to_disk(
        &mut self,
        r: usize,
        cid: ConsensusId,
        decided: Option<DecidedInstance>,
        replies: Vec<Reply>,
    ) -> Vec<Reply> {
        let n = self.nodes.len();
        let node = &mut self.nodes[r];
        let Some(disk) = node.disk.as_mut() else {
            return replies;
        };
        let decided = decided.expect("a durable replica's decisions carry their proof");
        disk.unsynced.push(decided);

        let period = CHECKPOINT_PERIOD_PER_REPLICA * n as u64;
        let checkpoint = tagma_storage::checkpoint_due(cid.0, r, n, period);
        if checkpoint {
            disk.pending_checkpoint = Some((cid.0, node.exec.checkpoint()));
        }
        if checkpoint {
            self.count("checkpoints");
        }
        self.schedule_sync(r);
        replies
    }

    /// A durable replica wrote something unsynced: its next sync comes within 0–3 ms (one
    /// pending at a time; it syncs everything written before it runs).
    fn schedule_sync(&mut self, r: usize) {
        let Some(disk) = self.nodes[r].disk.as_mut() else {
            return;
        };
        if !disk.sync_scheduled {
            disk.sync_scheduled = true;
            let at = self.now_ms + self.rng.range(0, 4);
            self.schedule(at, Event::DiskSync(r as u32));
        }
    }

    /// A sync completes: the unsynced records and vote are durable.
    fn disk_sync(&mut self, r: usize) {
        if self.nodes[r].crashed {
            return;
        }
        let Some(disk) = self.nodes[r].disk.as_mut() else {
            return;
        };
        disk.sync_scheduled = false;
        let synced = std::mem::take(&mut disk.unsynced);
        let last = synced.last().map(|d| d.cid);
        disk.log.extend(synced);
        let checkpoint = disk.pending_checkpoint.take();
        let info = checkpoint
            .as_ref()
            .map(|(cid, state)| checkpoint_info(*cid, state));
        if let Some(checkpoint) = checkpoint {
            disk.previous = disk.checkpoint.replace(checkpoint);
        }
        if let Some(info) = info {
            // Through the input path: during the start-up synchronisation this checkpoint
            // may be the state vote's fresh one, and the core then asks its peers.
            self.replica_input(r, Input::CheckpointWritten(info));
        }
        if let Some(cid) = last {
            self.count("log_syncs");
            self.replica_input(r, Input::LogDurable(cid));
        }
    }

    /// A vote flush completes: the votes written become durable. A record keeps the votes of
    /// the instances not in the log yet, and the highest regency (as the node's records do).
    fn vote_flush(&mut self, r: usize) {
        if self.nodes[r].crashed {
            return;
        }
        let seq = self.nodes[r].last_vote_seq;
        let Some(disk) = self.nodes[r].disk.as_mut() else {
            return;
        };
        disk.vote_flush_scheduled = false;
        let logged_below = disk.log.last().map_or(0, |d| d.cid.0 + 1);
        disk.votes.append(&mut disk.unsynced_votes);
        let newest = disk
            .votes
            .values()
            .max_by_key(|c| (c.regency, c.cid))
            .cloned();
        disk.votes.retain(|cid, _| *cid >= logged_below);
        if let Some(newest) = newest
            && disk.votes.values().all(|c| c.regency < newest.regency)
        {
            disk.votes.insert(newest.cid.0, newest);
        }
        self.count("vote_syncs");
        self.replica_input(r, Input::VotesDurable { seq });
    }

    /// A durable replica crashes: its unsynced records are lost — except that the kernel may have written some of them out already: a
    /// prefix of the unsynced bytes may survive, ending in a torn record. In BFT runs, within
    /// the f budget shared with the Byzantine replicas, the crash may also damage the disk:
    /// all of it (a checkpoint that fails its checksum), one byte of one synced log record, or
    /// the newest checkpoint, rewritten with a state nobody ordered under a valid digest (a
    /// lying disk, which only the state vote can catch).
    /// What survives is what the real segment reader (`tagma_storage::read_segment`) makes of
    /// the resulting bytes: a torn tail is cut off, a bad record followed by good ones is
    /// corruption and sets the whole disk aside.
    fn crash_disk(&mut self, r: usize) {
        let budget = self.f_floor().saturating_sub(self.sc.byzantine.len());
        let damage = self.sc.mode == Mode::Bft
            && self.disk_damage_count < budget
            && self.rng.chance(DISK_DAMAGE_P);
        // Damage is to the whole disk or to one synced record; a torn write hits the unsynced.
        let flip_record = damage && self.rng.chance(0.5);
        let tear = self.rng.chance(TEAR_P);
        let Some(disk) = self.nodes[r].disk.as_ref() else {
            return;
        };
        let survivors = if tear {
            self.rng.below(disk.unsynced.len() as u64 + 1) as usize
        } else {
            0
        };
        let flip = (flip_record && !disk.log.is_empty()).then(|| self.rng.index(disk.log.len()));
        // Half of the whole-disk damage is a lying disk instead (a coin of its own, so that
        // the main stream, and with it every other seed, stays as it was): the newest
        // checkpoint holds a state nobody ordered under a valid digest and checksum, which
        // no check of the disk can catch; the state vote after the restart has to.
        let lie = (damage && !flip_record && self.disk_coin(r))
            .then(|| disk.checkpoint.clone())
            .flatten()
            .and_then(|(cid, truth)| Some((cid, self.with_a_lie(&truth)?)));
        let image = self.disk_image(r, survivors, tear, flip);
        let disk = self.nodes[r].disk.as_mut().expect("checked above");
        let lied = lie.is_some();
        if let Some(lie) = lie {
            disk.checkpoint = Some(lie);
        }
        disk.pending_checkpoint = None;
        disk.sync_scheduled = false;
        disk.vote_flush_scheduled = false;
        // Unflushed votes may have reached the disk anyway: then the restarted replica claims
        // a vote whose ACCEPT it never sent, which must be harmless.
        let vote_survived = tear && !disk.unsynced_votes.is_empty();
        let mut unsynced_votes = std::mem::take(&mut disk.unsynced_votes);
        if tear {
            disk.votes.append(&mut unsynced_votes);
        }
        let first_cid = disk
            .log
            .first()
            .or(disk.unsynced.first())
            .map_or(0, |d| d.cid.0);
        let (records, end) = tagma_storage::read_segment(&image, first_cid, true);
        let mut kept = Vec::with_capacity(records.len());
        for (cid, payload) in records {
            match DecidedInstance::decode(&Bytes::copy_from_slice(payload)) {
                Ok(d) if d.cid.0 == cid => kept.push(d),
                _ => {
                    let msg = format!("replica {r}: logged record {cid} reads back otherwise");
                    return self.violation("disk", msg);
                }
            }
        }
        let corrupt = matches!(end, tagma_storage::SegmentEnd::Corrupt { .. });
        if corrupt && flip.is_none() {
            let msg = format!("replica {r}: a crash's torn tail was judged corrupt: {end:?}");
            return self.violation("disk", msg);
        }
        let synced = disk.log.len();
        let unsynced_lost = disk.unsynced.len().saturating_sub(survivors);
        disk.unsynced.clear();
        disk.log = kept;
        let disk_damaged = damage && !flip_record && !lied;
        let newly_damaged = (disk_damaged || corrupt) && !disk.damaged;
        disk.damaged |= disk_damaged || corrupt;
        let cut_synced = disk.log.len() < synced && !corrupt;
        if unsynced_lost > 0 {
            self.count("unsynced_records_lost");
        }
        if vote_survived {
            self.count("unsynced_votes_survived");
        }
        if survivors > 0 {
            self.count("unsynced_records_survived");
        }
        if matches!(end, tagma_storage::SegmentEnd::Torn { .. }) {
            self.count("torn_tails_cut");
        }
        if corrupt {
            self.count("corrupt_logs_detected");
        }
        if cut_synced {
            // A damaged last record reads as a torn tail: a synced instance is gone.
            self.count("synced_records_cut");
        }
        if lied {
            self.nodes[r].lying_disk = true;
            self.count("lying_disks");
        }
        if flip.is_some() || newly_damaged || lied {
            self.disk_damage_count += 1;
        }
        if newly_damaged {
            self.count("disks_damaged");
        }
    }

    /// An even coin for replica `r`'s crash now, outside the main random stream.
    fn disk_coin(&self, r: usize) -> bool {
        let mut state = self.sc.seed ^ self.step.rotate_left(17) ^ (r as u64).rotate_left(41);
        crate::rng::splitmix64(&mut state) & 1 == 0
    }

    /// The bytes of replica `r`'s log as a crash leaves them: its synced records, the first
    /// `survivors` unsynced ones, with `tear` the beginning of the next one (or of garbage),
    /// and with `flip` one byte of that synced record changed.
    fn disk_image(
        &mut self,
        r: usize,
        survivors: usize,
        tear: bool,
        flip: Option<usize>,
    ) -> Vec<u8> {
        let disk = self.nodes[r].disk.as_ref().expect("a durable replica");
        let mut image = Vec::new();
        let mut flip_at = None;
        for (i, d) in disk
            .log
            .iter()
            .chain(&disk.unsynced[..survivors])
            .enumerate()
        {
            let start = image.len();
            tagma_storage::encode_record(&mut image, d.cid.0, &d.to_bytes());
            if flip == Some(i) {
                flip_at = Some((start, image.len()));
            }
        }
        let partial = disk.unsynced.get(survivors).filter(|_| tear).map(|d| {
            let mut record = Vec::new();
            tagma_storage::encode_record(&mut record, d.cid.0, &d.to_bytes());
            record
        });
        if let Some((start, end)) = flip_at {
            let at = start + self.rng.index(end - start);
            image[at] ^= 1 << self.rng.below(8);
        }
        if let Some(record) = partial {
            let cut = 1 + self.rng.index(record.len() - 1);
            image.extend_from_slice(&record[..cut]);
            if self.rng.chance(0.5) {
                // The torn write left garbage in its last sector.
                let at = image.len() - 1 - self.rng.index(cut.min(512));
                image[at] ^= 0x5a;
            }
        }
        // The preallocated rest of the segment.
        image.resize(image.len() + 64, 0);
        image
    }

    /// After a correct replica first delivered `cid` with `hash`: a Byzantine replica's
    /// (honest) core that decided it otherwise from valid ACCEPTs breaks agreement too.
    fn check_byzantine_decisions(&mut self, cid: u64, hash: Digest) {
        for r in 0..self.nodes.len() {
            if let Some(other) = self.nodes[r].byz_decided.get(&cid).filter(|h| **h != hash) {
                let msg = format!(
                    "Byzantine replica {r}'s core decided {other:?} for cid {cid} from valid ACCEPTs, the correct replicas {hash:?}"
                );
                self.violation("agreement", msg);
            }
        }
    }

    /// Agreement, total order (prefix) and validity, on every delivery of a correct replica.
    fn check_delivery(&mut self, r: usize, cid: u64, hash: Digest, batch: &Batch) {
        let expected = self.nodes[r].delivered;
        if cid != expected {
            self.violation(
                "order",
                format!("replica {r} delivered cid {cid}, expected cid {expected}"),
            );
            return;
        }
        let encoded_hash = tagma_crypto::digest(&batch.to_bytes());
        if encoded_hash != hash {
            self.violation(
                "decision_hash",
                format!("replica {r} cid {cid}: delivered hash {hash:?} is not the batch's hash {encoded_hash:?}"),
            );
            return;
        }
        match self.decided.get(cid as usize) {
            Some(first) if *first != hash => {
                let first = *first;
                self.violation(
                    "agreement",
                    format!("replica {r} delivered {hash:?} for cid {cid}, another correct replica {first:?}"),
                );
                return;
            }
            Some(_) => {}
            None => {
                debug_assert_eq!(self.decided.len() as u64, cid);
                self.decided.push(hash);
                self.check_byzantine_decisions(cid, hash);
            }
        }
        for envelope in &batch.requests {
            let req = &envelope.request;
            if !req.kind.is_ordered() {
                self.violation(
                    "validity",
                    format!(
                        "replica {r} cid {cid}: unordered request {}/{} in a batch",
                        req.client, req.seq
                    ),
                );
                return;
            }
            if !self.issued.contains(&tagma_crypto::request_digest(req)) {
                self.violation(
                    "validity",
                    format!(
                        "replica {r} cid {cid}: request {}/{} was never issued by its client",
                        req.client, req.seq
                    ),
                );
                return;
            }
            if self.nodes[r]
                .executed
                .insert((req.client, req.seq), cid)
                .is_some()
            {
                self.violation(
                    "validity",
                    format!(
                        "replica {r} cid {cid}: request {}/{} executed twice",
                        req.client, req.seq
                    ),
                );
                return;
            }
        }
        self.nodes[r].delivered += 1;
    }

    fn on_peer(&mut self, from: u32, to: u32, bytes: Bytes, bad_mac: bool) {
        let r = to as usize;
        if self.nodes[r].crashed {
            self.count("peer_lost_crashed");
            return;
        }
        if bad_mac {
            self.count("peer_bad_mac_dropped");
            self.note(b'M', from as u64, to as u64, &[], || {
                format!("{from}→{to}: bad MAC, dropped")
            });
            return;
        }
        let msg = match PeerMessage::decode(&bytes) {
            Ok(m) => m,
            Err(e) => {
                self.count("peer_undecodable");
                self.note(b'U', from as u64, to as u64, &[], || {
                    format!("{from}→{to}: undecodable: {e}")
                });
                return;
            }
        };
        self.count(message_counter(&msg));
        self.note(b'p', from as u64, to as u64, &bytes, || {
            format!("{from}→{to}: {}", describe(&msg))
        });
        if let Some(byz) = self.nodes[r].byz.as_mut() {
            byz.on_received(&msg);
        }
        if self.nodes[r]
            .byz
            .as_ref()
            .is_some_and(|b| b.has(Behaviour::LyingState))
        {
            self.lie_about_state(r, from, &msg);
        }
        // The simulated replicas never join (no view exchange to answer).
        let Some(input) = self.network_stage(msg) else {
            return;
        };
        let from = ReplicaId(from);
        self.replica_input(r, Input::Peer { from, input });
    }

    /// The checkpoint `truth` plus a write nobody ordered: well-formed, with the same
    /// instance, sessions and timestamp (what a lying source serves, and a lying disk holds).
    fn with_a_lie(&self, truth: &Bytes) -> Option<Bytes> {
        let mut liar = new_executor(&self.membership, 0);
        liar.restore(truth).ok()?;
        liar.service.execute_ordered(
            &KvOp::Put {
                key: Bytes::from_static(b"lie"),
                value: Bytes::from_static(b"never ordered"),
            }
            .encode(),
            &tagma_exec::Context {
                client: ClientId(0),
                seq: RequestSeq(0),
                cid: None,
                timestamp_ms: 0,
                seed: 0,
            },
        );
        Some(liar.checkpoint())
    }

    /// [`Behaviour::LyingState`]: asked for state, replica `r` prepares a wrong checkpoint —
    /// its own state plus a write nobody ordered, well-formed and under its true digest, at
    /// an instance it has executed — and serves its chunks when asked.
    fn lie_about_state(&mut self, r: usize, from: u32, msg: &PeerMessage) {
        match msg {
            PeerMessage::StateQuery { next } => {
                // The lowest of its past states the asker could use: likely the chosen source.
                let Some((cid, truth)) = self.nodes[r]
                    .byz
                    .as_ref()
                    .and_then(|b| b.state_at_or_after(next.0.saturating_sub(1)))
                else {
                    return;
                };
                let Some(state) = self.with_a_lie(&truth) else {
                    return;
                };
                let info = checkpoint_info(cid, &state);
                if let Some(byz) = self.nodes[r].byz.as_mut() {
                    byz.set_state_lie(info, state);
                }
            }
            PeerMessage::ChunkRequest { cid, offset, len } => {
                let chunk = self.nodes[r]
                    .byz
                    .as_ref()
                    .and_then(|b| b.state_lie_chunk(*cid, *offset, *len));
                if let Some(data) = chunk {
                    let msg = PeerMessage::Chunk {
                        cid: *cid,
                        offset: *offset,
                        data,
                    };
                    self.send_peer(r, &[ReplicaId(from)], msg);
                }
            }
            _ => {}
        }
    }

    fn authentic(&self, r: &RequestEnvelope) -> bool {
        self.issued
            .contains(&tagma_crypto::request_digest(&r.request))
    }

    fn all_authentic(&self, requests: &[RequestEnvelope]) -> bool {
        requests.iter().all(|r| self.authentic(r))
    }

    /// What a replica's network stage hands the core for a decoded peer message: the core's
    /// own conversion, with request authentication decided against the requests the clients
    /// really issued.
    fn network_stage(&self, msg: PeerMessage) -> Option<PeerInput> {
        PeerInput::from_message(msg, |requests| self.all_authentic(requests))
    }

    fn send_peer(&mut self, from: usize, dests: &[ReplicaId], msg: PeerMessage) {
        let outs: Vec<Out> = match self.nodes[from].byz.as_mut() {
            Some(byz) => byz.rewrite(&mut self.rng, &mut self.exercised, dests, msg),
            None => {
                // Honest: encode once for every receiver.
                let bytes = msg.to_bytes();
                for &to in dests {
                    self.transmit_peer(from as u32, to.0, bytes.clone(), 0, false);
                }
                return;
            }
        };
        for out in outs {
            let bytes = out.msg.to_bytes();
            self.transmit_peer(
                from as u32,
                out.to.0,
                bytes,
                out.extra_delay_ms,
                out.bad_mac,
            );
        }
    }

    fn link_cut(&self, a: u32, b: u32) -> bool {
        self.partitions_active.iter().any(|&i| {
            let cut = &self.sc.partitions[i].cut;
            cut.contains(&a) != cut.contains(&b)
        })
    }

    /// Clients live outside every partition.
    fn client_link_cut(&self, replica: u32) -> bool {
        self.partitions_active
            .iter()
            .any(|&i| self.sc.partitions[i].cut.contains(&replica))
    }

    fn delay(&mut self) -> u64 {
        self.rng.range(self.net.delay_min_ms, self.net.delay_max_ms)
    }

    /// The network between replicas: partitions, loss, corruption, delay (hence reordering),
    /// duplication.
    fn transmit_peer(
        &mut self,
        from: u32,
        to: u32,
        bytes: Bytes,
        extra_delay_ms: u64,
        bad_mac: bool,
    ) {
        if from != to && self.link_cut(from, to) {
            self.count("net_partitioned");
            return;
        }
        if self.rng.chance(self.net.drop_p) {
            self.count("net_dropped");
            return;
        }
        let bad_mac = bad_mac || self.rng.chance(self.net.corrupt_p);
        let copies = if self.rng.chance(self.net.duplicate_p) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = self.now_ms + self.delay() + extra_delay_ms;
            self.schedule(
                at,
                Event::Peer {
                    from,
                    to,
                    bytes: bytes.clone(),
                    bad_mac,
                },
            );
        }
    }

    fn on_byz_tick(&mut self, r: usize) {
        let peers: Vec<ReplicaId> = (0..self.nodes.len() as u32)
            .filter(|&d| d as usize != r)
            .map(ReplicaId)
            .collect();
        if let Some(byz) = self.nodes[r].byz.as_mut() {
            let outs = byz.tick(&mut self.rng, &mut self.exercised, &peers);
            for out in outs {
                let bytes = out.msg.to_bytes();
                self.transmit_peer(r as u32, out.to.0, bytes, out.extra_delay_ms, out.bad_mac);
            }
            let at = self.now_ms + self.rng.range(100, 400);
            self.schedule(at, Event::ByzTick(r as u32));
        }
    }

    fn on_request(&mut self, client: usize, to: u32, envelope: RequestEnvelope) {
        let r = to as usize;
        if self.nodes[r].crashed || self.nodes[r].left() {
            // A replica removed from the view stops serving, reads included.
            return;
        }
        let req = &envelope.request;
        self.note(
            b'q',
            client as u64,
            to as u64,
            &tagma_crypto::request_digest(req).0,
            || {
                format!(
                    "client {client} → replica {to}: {:?} seq {}",
                    req.kind, req.seq
                )
            },
        );
        if req.kind == RequestKind::Unordered {
            let reply = self.nodes[r].exec.execute_unordered(
                req.client,
                req.seq,
                &req.payload,
                self.now_ms,
            );
            self.send_reply(r, reply);
            return;
        }
        self.replica_input(r, Input::ClientRequest(envelope));
    }

    /// `Action::SendCurrentView`: replica `r` tells a client the installed view.
    fn send_current_view(&mut self, r: usize, client: ClientId, view: tagma_wire::View) {
        let Some(c) = self.client_index(client) else {
            return; // the administrator's client does not follow views
        };
        if !self.client_link_cut(r as u32) && !self.rng.chance(self.net.drop_p) {
            let at = self.now_ms + self.delay();
            let from = r as u32;
            self.schedule(
                at,
                Event::ClientView {
                    client: c,
                    from,
                    view,
                },
            );
        }
    }

    fn send_reply(&mut self, r: usize, mut reply: Reply) {
        let Some(client) = self.client_index(reply.client) else {
            return;
        };
        if let Some(byz) = self.nodes[r].byz.as_ref() {
            match byz.rewrite_reply(&mut self.rng, &mut self.exercised, reply.payload) {
                Some(p) => reply.payload = p,
                None => return,
            }
        }
        if self.client_link_cut(r as u32) || self.rng.chance(self.net.drop_p) {
            self.count("reply_lost");
            return;
        }
        let at = self.now_ms + self.delay();
        self.schedule(
            at,
            Event::Reply {
                client,
                from: r as u32,
                reply,
            },
        );
    }

    fn client_index(&self, id: ClientId) -> Option<usize> {
        let i = id.principal().checked_sub(100)? as usize;
        (i < self.clients.len() && self.clients[i].id == id).then_some(i)
    }

    // ---- clients --------------------------------------------------------------------------

    fn wake_client(&mut self, c: usize, at_ms: u64, wake: Wake) {
        self.clients[c].token += 1;
        let token = self.clients[c].token;
        self.schedule(
            at_ms,
            Event::ClientWake {
                client: c,
                token,
                wake,
            },
        );
    }

    fn on_client_wake(&mut self, c: usize, token: u64, wake: Wake) {
        if token != self.clients[c].token {
            return;
        }
        match wake {
            Wake::Start => self.start_op(c),
            Wake::Retransmit => {
                self.count("client_retransmissions");
                self.send_attempt(c, false);
            }
            Wake::UnorderedTimeout => self.fall_back_to_ordered(c, "timeout"),
        }
    }

    fn start_op(&mut self, c: usize) {
        let client = &self.clients[c];
        if client.out.is_some() {
            return;
        }
        if matches!(self.phase, Phase::Liveness { .. })
            && (!client.is_correct() || client.liveness_left == Some(0))
        {
            return;
        }
        let unordered_p = self.sc.unordered_p;
        let (op, model, unordered) = self.clients[c].next_op(&mut self.rng, unordered_p);
        let history = match model {
            Some((key, m)) if self.clients[c].is_correct() => {
                let h = self.histories.entry(key.clone()).or_default();
                h.push(Entry {
                    op: m,
                    invoke: self.step,
                    response: None,
                });
                Some((key, h.len() - 1))
            }
            _ => None,
        };
        let client = &mut self.clients[c];
        let attempt = if unordered {
            client.last_useq += 1;
            Attempt::Unordered(RequestSeq(client.last_useq))
        } else {
            client.last_seq += 1;
            Attempt::Ordered(RequestSeq(client.last_seq))
        };
        client.out = Some(Outstanding {
            op,
            history,
            attempt,
            voter: {
                let q = self.client_views[c].quorums();
                Voter::new(q.reply_quorum(true), q.n)
            },
            started_ms: self.now_ms,
        });
        self.send_attempt(c, true);
    }

    fn envelope(&self, c: usize, attempt: &Attempt, payload: Bytes) -> RequestEnvelope {
        let (seq, kind) = match attempt {
            Attempt::Ordered(s) => (*s, RequestKind::Ordered),
            Attempt::Unordered(s) => (*s, RequestKind::Unordered),
        };
        RequestEnvelope {
            request: Request {
                client: self.clients[c].id,
                seq,
                kind,
                view: self.client_views[c].view(),
                payload,
            },
            // Authentication is simulated: the network stage checks the request digest
            // against the requests clients issued.
            auth: RequestAuth::Macs(Vec::new()),
        }
    }

    /// Sends the current attempt (`first`: the first send of this attempt, where a faulty
    /// client misbehaves) and arms the retransmission or unordered timer.
    fn send_attempt(&mut self, c: usize, first: bool) {
        let Some(out) = self.clients[c].out.as_ref() else {
            return;
        };
        let attempt = out.attempt.clone();
        let envelope = self.envelope(c, &attempt, out.op.encode());
        self.issued
            .insert(tagma_crypto::request_digest(&envelope.request));
        let n = self.nodes.len() as u32;
        let mut targets: Vec<(u32, RequestEnvelope)> =
            (0..n).map(|r| (r, envelope.clone())).collect();
        let fault = self.clients[c].fault;
        if first && matches!(attempt, Attempt::Ordered(_)) {
            match fault {
                Some(ClientFault::OneFollower) => {
                    let r = 1 + self.rng.below(n as u64 - 1) as u32;
                    targets.retain(|(t, _)| *t == r);
                    *self.exercised.entry("client_one_follower").or_default() += 1;
                }
                Some(ClientFault::Equivocate) => {
                    let key = self.clients[c].keys[0].clone();
                    let v = self.rng.next_u64() as i64;
                    let alt_op = KvOp::Put {
                        key,
                        value: crate::client::enc(v),
                    };
                    let alt = self.envelope(c, &attempt, alt_op.encode());
                    self.issued
                        .insert(tagma_crypto::request_digest(&alt.request));
                    let mut order: Vec<u32> = (0..n).collect();
                    self.rng.shuffle(&mut order);
                    for &r in &order[..order.len() / 2] {
                        targets[r as usize].1 = alt.clone();
                    }
                    *self.exercised.entry("client_equivocate").or_default() += 1;
                }
                None => {}
            }
        }
        for (r, env) in targets {
            if self.client_link_cut(r) || self.rng.chance(self.net.drop_p) {
                self.count("request_lost");
                continue;
            }
            let at = self.now_ms + self.delay();
            self.schedule(
                at,
                Event::Request {
                    client: c,
                    to: r,
                    envelope: env,
                },
            );
        }
        let (timeout, wake) = match attempt {
            Attempt::Ordered(_) => (RETRANSMIT_MS + self.rng.below(100), Wake::Retransmit),
            Attempt::Unordered(_) => (UNORDERED_TIMEOUT_MS, Wake::UnorderedTimeout),
        };
        self.wake_client(c, self.now_ms + timeout, wake);
    }

    fn on_reply(&mut self, c: usize, from: u32, reply: Reply) {
        self.note(b'r', c as u64, from as u64, &reply.payload, || {
            format!(
                "replica {from} → client {c}: {:?} seq {}",
                reply.kind, reply.seq
            )
        });
        if !self.client_views[c].is_member(ReplicaId(from)) {
            // Not a member of the view this client is in: its reply does not count.
            return;
        }
        let Some(out) = self.clients[c].out.as_mut() else {
            return;
        };
        let matches = match out.attempt {
            Attempt::Ordered(s) => reply.kind == RequestKind::Ordered && reply.seq == s,
            Attempt::Unordered(s) => reply.kind == RequestKind::Unordered && reply.seq == s,
        };
        if !matches {
            return;
        }
        if let Some(payload) = out.voter.add(ReplicaId(from), reply.payload) {
            self.complete(c, payload);
        } else if matches!(out.attempt, Attempt::Unordered(_)) && out.voter.exhausted() {
            self.fall_back_to_ordered(c, "replies disagree");
        }
    }

    fn fall_back_to_ordered(&mut self, c: usize, why: &str) {
        let client = &mut self.clients[c];
        let Some(out) = client.out.as_mut() else {
            return;
        };
        client.last_seq += 1;
        out.attempt = Attempt::Ordered(RequestSeq(client.last_seq));
        let q = self.client_views[c].quorums();
        out.voter = Voter::new(q.reply_quorum(true), q.n);
        self.count("unordered_fallbacks");
        self.note(b'F', c as u64, 0, why.as_bytes(), || {
            format!("client {c}: unordered read falls back to ordered ({why})")
        });
        self.send_attempt(c, false);
    }

    fn complete(&mut self, c: usize, payload: Bytes) {
        let Some(out) = self.clients[c].out.take() else {
            return;
        };
        let elapsed_ms = self.now_ms - out.started_ms;
        self.note(b'K', c as u64, 0, &payload, || {
            format!("client {c} completes {:?} after {elapsed_ms} ms", out.op)
        });
        self.count("ops_completed");
        if let Some((key, idx)) = out.history {
            let op = self.histories[&key][idx].op;
            let result = KvReply::decode(&payload)
                .map_err(|e| format!("undecodable reply: {e}"))
                .and_then(|reply| to_ret(&op, &reply));
            match result {
                Ok(ret) => {
                    self.histories.get_mut(&key).expect("history")[idx].response =
                        Some((self.step, ret));
                    self.clients[c].last_seen.insert(key, seen_after(&op, &ret));
                }
                Err(e) => {
                    self.violation("client_reply", format!("client {c} {:?}: {e}", out.op));
                    return;
                }
            }
        }
        let client = &mut self.clients[c];
        client.completed += 1;
        if let Some(left) = client.liveness_left.as_mut() {
            *left = left.saturating_sub(1);
            if *left == 0 {
                return;
            }
        }
        let at = self.now_ms + self.rng.range(0, THINK_MS_MAX);
        self.wake_client(c, at, Wake::Start);
    }

    // ---- phases and final checks --------------------------------------------------------

    fn heal(&mut self) {
        let deadline_ms = self.now_ms + self.sc.liveness_bound_ms;
        self.phase = Phase::Liveness { deadline_ms };
        self.partitions_active.clear();
        self.net = NetParams::healed();
        // Faults: the Byzantine replicas, the disks damaged (their replicas lost the votes
        // they cast), and the replicas that stay down.
        let mut keep_down = self
            .f_floor()
            .saturating_sub(self.sc.byzantine.len())
            .saturating_sub(self.disk_damage_count);
        for r in 0..self.nodes.len() {
            if !self.nodes[r].crashed {
                continue;
            }
            if keep_down > 0 && self.rng.chance(0.3) {
                keep_down -= 1;
                self.count("stays_crashed");
                self.note(b'C', r as u64, 2, &[], || {
                    format!("replica {r} stays crashed")
                });
            } else {
                self.restart(r);
            }
        }
        for client in &mut self.clients {
            if client.is_correct() {
                client.liveness_left = Some(LIVENESS_OPS + u64::from(client.out.is_some()));
            }
        }
        self.note(b'H', 0, 0, &[], || {
            format!("network heals; liveness phase until {deadline_ms} ms")
        });
    }

    fn all_correct_done(&self) -> bool {
        self.clients
            .iter()
            .filter(|c| c.is_correct())
            .all(|c| c.liveness_left == Some(0) && c.out.is_none())
    }

    fn fail_liveness(&mut self, why: &str) {
        let mut detail = format!("{why} at {} ms;", self.now_ms);
        for c in self.clients.iter().filter(|c| c.is_correct()) {
            if let Some(out) = &c.out {
                detail.push_str(&format!(
                    " client {} waits for {:?} {:?} since {} ms ({} replies);",
                    c.index,
                    out.attempt,
                    out.op,
                    out.started_ms,
                    out.voter.replies()
                ));
            } else if c.liveness_left != Some(0) {
                detail.push_str(&format!(
                    " client {} has {:?} ops left;",
                    c.index, c.liveness_left
                ));
            }
        }
        for (r, node) in self.nodes.iter().enumerate() {
            detail.push_str(&format!(
                " r{r}: next_cid {} regency {}{}{};",
                node.core.next_cid(),
                node.regency,
                if node.crashed { " crashed" } else { "" },
                if node.byz.is_some() { " byzantine" } else { "" }
            ));
        }
        self.note(b'L', 0, 0, detail.as_bytes(), || {
            format!("LIVENESS FAILURE: {detail}")
        });
        self.liveness_failure = Some(detail);
    }

    fn final_checks(&mut self) {
        if !self.violations.is_empty() {
            return;
        }
        let histories = std::mem::take(&mut self.histories);
        for (key, history) in &histories {
            match linearizability::check(history, None) {
                Ok(()) => {}
                Err(LinError::Inconclusive) => self.count("linearizability_inconclusive"),
                Err(LinError::NotLinearizable) => {
                    let key = String::from_utf8_lossy(key).into_owned();
                    self.violation(
                        "linearizability",
                        format!(
                            "key {key}: history of {} operations is not linearizable: {history:?}",
                            history.len()
                        ),
                    );
                    return;
                }
            }
        }
        self.histories = histories;
        // The only view a correct replica may install is the administrator's.
        if let Some(plan) = self.sc.reconfig.clone() {
            let ops = [self.plan_op(&plan)];
            let expected = tagma_core::view::apply(&self.membership.view, &ops, self.sc.mode)
                .expect("the plan's change applies");
            for view in self.views.values() {
                if *view != expected {
                    let msg = format!(
                        "view {} installed is {view:?}, the administrator signed {expected:?}",
                        view.id
                    );
                    self.violation("view", msg);
                    return;
                }
            }
        }
        // Correct replicas at the same execution position hold the same state.
        let mut by_position: BTreeMap<u64, (usize, Digest)> = BTreeMap::new();
        for r in 0..self.nodes.len() {
            if self.nodes[r].byz.is_some() || self.nodes[r].lying_disk {
                continue;
            }
            let pos = self.nodes[r].exec.executed_instances();
            let digest = self.nodes[r].exec.state_digest();
            match by_position.get(&pos) {
                Some(&(other, d)) if d != digest => {
                    self.violation(
                        "state",
                        format!("replicas {other} and {r} executed {pos} instances but hold different states"),
                    );
                    return;
                }
                Some(_) => {}
                None => {
                    by_position.insert(pos, (r, digest));
                }
            }
        }
    }

    fn finish(self) -> Outcome {
        let decided_instances = self.decided.len() as u64;
        let ops_completed = self.clients.iter().map(|c| c.completed).sum();
        let regency_max = self.nodes.iter().map(|n| n.regency).max().unwrap_or(0);
        Outcome {
            violations: self.violations,
            liveness_failure: self.liveness_failure,
            exercised: self.exercised,
            counters: self.counters,
            trace: self.trace,
            trace_hash: Digest(*self.hasher.finalize().as_bytes()),
            events: self.step,
            virtual_ms: self.now_ms,
            decided_instances,
            ops_completed,
            regency_max,
        }
    }
}

/// Counter name for received peer messages of `msg`'s kind.
fn message_counter(msg: &PeerMessage) -> &'static str {
    match msg {
        PeerMessage::Propose(_) => "received_propose",
        PeerMessage::Write(_) => "received_write",
        PeerMessage::Accept(_) => "received_accept",
        PeerMessage::Forward(_) => "received_forward",
        PeerMessage::Stop(_) => "received_stop",
        PeerMessage::StopData(_) => "received_stopdata",
        PeerMessage::Sync(_) => "received_sync",
        PeerMessage::DecisionRequest { .. } => "received_decision_request",
        PeerMessage::Decision(_) => "received_decision",
        PeerMessage::Position { .. } => "received_position",
        PeerMessage::StateQuery { .. } => "received_state_query",
        PeerMessage::StateOffer { .. } => "received_state_offer",
        PeerMessage::ChunkRequest { .. } => "received_chunk_request",
        PeerMessage::Chunk { .. } => "received_chunk",
        PeerMessage::LogRequest { .. } => "received_log_request",
        PeerMessage::LogEntry(_) => "received_log_entry",
        PeerMessage::ViewQuery => "received_view_query",
        PeerMessage::ViewInfo(_) => "received_view_info",
        PeerMessage::StateVote { .. } => "received_state_vote",
    }
}

/// One-line summary of a peer message for the trace.
fn describe(msg: &PeerMessage) -> String {
    match msg {
        PeerMessage::Propose(p) => format!(
            "PROPOSE cid {} epoch {} {:?}",
            p.cid,
            p.epoch,
            tagma_crypto::digest(&p.batch)
        ),
        PeerMessage::Write(v) => format!("WRITE cid {} epoch {} {:?}", v.cid, v.epoch, v.hash),
        PeerMessage::Accept(a) => format!(
            "ACCEPT cid {} epoch {} {:?}",
            a.vote.cid, a.vote.epoch, a.vote.hash
        ),
        PeerMessage::Forward(r) => format!("FORWARD {}/{}", r.request.client, r.request.seq),
        PeerMessage::Stop(s) => {
            format!("STOP regency {} ({} requests)", s.regency, s.requests.len())
        }
        PeerMessage::StopData(s) => format!(
            "STOPDATA regency {} last_decided {:?} collect cid {}",
            s.regency,
            s.last_decided.as_ref().map(|d| d.cid.0),
            s.collect.collect.cid
        ),
        PeerMessage::Sync(s) => format!(
            "SYNC regency {} last_decided {:?} {} collects, proposal {} bytes",
            s.regency,
            s.last_decided.as_ref().map(|d| d.cid.0),
            s.collects.len(),
            s.proposal.len()
        ),
        PeerMessage::DecisionRequest { cid } => format!("DECISION_REQUEST cid {cid}"),
        PeerMessage::Decision(d) => format!("DECISION cid {}", d.cid),
        PeerMessage::Position { next, reply } => format!("POSITION next {next} reply {reply}"),
        PeerMessage::StateQuery { next } => format!("STATE_QUERY next {next}"),
        PeerMessage::StateOffer { checkpoint, next } => format!(
            "STATE_OFFER checkpoint {:?} next {next}",
            checkpoint.map(|c| (c.cid.0, c.len, c.digest))
        ),
        PeerMessage::ChunkRequest { cid, offset, len } => {
            format!("CHUNK_REQUEST cid {cid} offset {offset} len {len}")
        }
        PeerMessage::Chunk { cid, offset, data } => {
            format!("CHUNK cid {cid} offset {offset} len {}", data.len())
        }
        PeerMessage::LogRequest { from, count } => {
            format!("LOG_REQUEST from {from} count {count}")
        }
        PeerMessage::LogEntry(d) => format!("LOG_ENTRY cid {}", d.cid),
        PeerMessage::ViewQuery => "VIEW_QUERY".into(),
        PeerMessage::ViewInfo(h) => format!("VIEW_INFO {} changes", h.len()),
        PeerMessage::StateVote { cid, digest } => format!("STATE_VOTE cid {cid} digest {digest:?}"),
    }
}

/// The message of a caught panic.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}
