//! The deterministic world: one thread, virtual time in milliseconds, one seeded generator,
//! and an event queue ordered by (time, sequence number). It drives `n` honest
//! [`tagma_core::Replica`] cores (some wrapped in a [`Byzantine`] layer) and their executors,
//! the simulated network and the clients, and checks the invariants after every event.
//!
//! Phases: a **fault period** (lossy, duplicating, reordering, partitioned network; crashes
//! and restarts; Byzantine replicas; faulty clients), then a **liveness phase**: the network
//! heals, crashed replicas restart (at most f replicas stay faulty), and every correct
//! client must complete its pending operation and [`LIVENESS_OPS`] more within the bound.
//!
//! Modules: `build` (the world a scenario starts from), `replicas` (driving the cores),
//! `executor` (a replica's service), `service_due` (the service's due times, for time-only
//! batches), `network`, `describe` (peer messages named), `disk`, `crash`, `reconfig`,
//! `clients`, `checks` (agreement, order, validity, end-of-run checks), `space_checks` (the
//! coordination service's workload), `answers` (the answer budget).

mod answers;
mod build;
mod checks;
mod clients;
mod crash;
mod describe;
mod disk;
mod executor;
mod network;
mod reconfig;
mod replicas;
mod service_due;
mod space_checks;

use std::{
    collections::{BTreeMap, BTreeSet},
    panic::{self, AssertUnwindSafe},
};

use bytes::Bytes;
use serde::Serialize;
use tagma_client::ViewFollower;
use tagma_core::{Replica, ReplicaParams, view::Membership};
use tagma_crypto::IdentityKey;
use tagma_wire::{ClientId, Digest, Reply, RequestEnvelope, RequestSeq, ViewId};

use crate::{
    byzantine::{Byzantine, Exercised},
    client::SimClient,
    linearizability::Entry,
    rng::Rng,
    scenario::{LIVENESS_OPS, NetParams, Scenario},
    world::{disk::Disk, executor::SimExecutor, service_due::DueReport, space_checks::SpaceRecord},
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
    /// A scenario's crash of a replica: at once, or (`at_point`, durable runs) at its first
    /// crash point within [`crash::CRASH_POINT_WAIT_MS`].
    Crash {
        replica: u32,
        at_point: bool,
    },
    /// A crash armed for a crash point that none came to: it happens now.
    CrashPointMissed(u32),
    Restart(u32),
    /// A durable replica's log flush completes: its unflushed log records become durable.
    LogFlush {
        replica: u32,
        incarnation: u32,
    },
    /// A durable replica's vote flush completes: the vote it wrote becomes durable.
    VoteFlush {
        replica: u32,
        incarnation: u32,
    },
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Faults,
    Liveness { deadline_ms: u64 },
}

struct Node {
    core: Replica,
    exec: Box<dyn SimExecutor>,
    /// What the core last heard of the service's next due time.
    due: DueReport,
    /// Every reply this replica's execution gave in this life, with the instance that gave
    /// it: a second one to the same request breaks exactly-once answers.
    replied: BTreeMap<(ClientId, RequestSeq), u64>,
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
    /// The newest `PersistVote` sequence number of this incarnation (a vote flush reports it
    /// durable).
    last_vote_seq: u64,
    /// Crashes so far: a flush scheduled before a crash must not complete in the next life.
    incarnation: u32,
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
    /// A crash waits for this replica's next crash point ([`World::crash_at_points`]).
    crash_point_armed: bool,
}

impl Node {
    /// A view without this replica was installed: it takes no more input.
    fn left(&self) -> bool {
        self.core.has_left()
    }
}

/// Replica `r`'s execution-order seed.
fn order_seed(seed: u64, r: usize) -> u64 {
    seed ^ (r as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f)
}

/// The outcome of a run, before the report is assembled.
pub struct Outcome {
    pub violations: Vec<Violation>,
    pub liveness_failure: Option<String>,
    pub exercised: Exercised,
    pub counters: BTreeMap<String, u64>,
    /// The largest values seen, by name (e.g. the most answer bytes one peer got in a period).
    pub maxima: BTreeMap<String, u64>,
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
    /// Coordination-service runs: what the checks of its workload keep.
    space: SpaceRecord,
    phase: Phase,
    violations: Vec<Violation>,
    liveness_failure: Option<String>,
    exercised: Exercised,
    counters: BTreeMap<String, u64>,
    maxima: BTreeMap<String, u64>,
    /// What each correct replica answered each peer in the current period.
    answers: BTreeMap<(u32, u32), answers::AnswerWindow>,
    trace: Vec<String>,
    hasher: blake3::Hasher,
}

/// The message of a caught panic.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

impl World {
    fn schedule(&mut self, at_ms: u64, event: Event) {
        debug_assert!(at_ms >= self.now_ms, "event scheduled in the past");
        self.next_event_seq += 1;
        self.queue.insert((at_ms, self.next_event_seq), event);
    }

    fn count(&mut self, name: &str) {
        self.count_by(name, 1);
    }

    fn count_by(&mut self, name: &str, n: u64) {
        *self.counters.entry(name.to_string()).or_default() += n;
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
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| {
                self.handle(event);
                self.crash_at_points();
            })) {
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
            let at_point = self.sc.durable && self.rng.chance(crash::CRASH_POINT_P);
            self.schedule(
                c.start_ms,
                Event::Crash {
                    replica: c.replica,
                    at_point,
                },
            );
            if let Some(end) = c.end_ms {
                self.schedule(end, Event::Restart(c.replica));
            }
        }
        if let Some((start, end)) = self.sc.crash_all {
            for r in 0..self.nodes.len() {
                if self.nodes[r].byz.is_none() {
                    let replica = r as u32;
                    let at_point = false;
                    self.schedule(start, Event::Crash { replica, at_point });
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
            Event::Crash { replica, at_point } => self.on_crash(replica as usize, at_point),
            Event::CrashPointMissed(r) => {
                if self.phase == Phase::Faults && self.nodes[r as usize].crash_point_armed {
                    self.count("crash_points_missed");
                    self.crash(r as usize);
                }
            }
            Event::Restart(r) => self.restart(r as usize),
            // A flush scheduled before a crash died with the process.
            Event::LogFlush {
                replica,
                incarnation,
            } if incarnation == self.nodes[replica as usize].incarnation => {
                self.log_flush(replica as usize)
            }
            Event::VoteFlush {
                replica,
                incarnation,
            } if incarnation == self.nodes[replica as usize].incarnation => {
                self.vote_flush(replica as usize)
            }
            Event::LogFlush { .. } | Event::VoteFlush { .. } => {
                self.count("flushes_of_a_past_life")
            }
            Event::Heal => self.heal(),
            Event::Reconfigure => self.send_view_change(),
            Event::StartJoiner(j) => self.start_joiner(j as usize),
            Event::ClientView { client, from, view } => self.on_client_view(client, from, view),
        }
    }

    fn heal(&mut self) {
        let deadline_ms = self.now_ms + self.sc.liveness_bound_ms;
        self.phase = Phase::Liveness { deadline_ms };
        self.partitions_active.clear();
        self.net = NetParams::healed();
        // Crashes belong to the faults: one still waiting for a crash point does not happen.
        for node in &mut self.nodes {
            node.crash_point_armed = false;
        }
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

    fn finish(self) -> Outcome {
        let decided_instances = self.decided.len() as u64;
        let ops_completed = self.clients.iter().map(|c| c.completed).sum();
        let regency_max = self.nodes.iter().map(|n| n.regency).max().unwrap_or(0);
        Outcome {
            violations: self.violations,
            liveness_failure: self.liveness_failure,
            exercised: self.exercised,
            counters: self.counters,
            maxima: self.maxima,
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
