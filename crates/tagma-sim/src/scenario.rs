//! The fault plan a seed draws under the caller's [`SimOptions`]: fault model, cluster size,
//! network quality, partitions, crashes, Byzantine replicas and their behaviours, faulty
//! clients, and the workload's parameters ([`SpaceParams`] for the coordination service).

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;
use tagma_core::Mode;

use crate::options::{SimOptions, SimService};
use crate::rng::Rng;

pub const FAULT_PERIOD_MS_DEFAULT: u64 = 3_000;
pub const LIVENESS_BOUND_MS_DEFAULT: u64 = 30_000;
/// Core request timeout: short so that leader changes happen quickly in virtual time.
pub const REQUEST_TIMEOUT_MS: u64 = 200;
/// How far ahead of a replica's virtual clock a new batch may be timestamped (all replicas
/// share the virtual clock, so only a faulty leader comes near it).
pub const CLOCK_SKEW_MAX_MS: u64 = 5_000;
/// Operations each correct client must complete after the network heals.
pub const LIVENESS_OPS: u64 = 2;

/// A Byzantine behaviour, applied by rewriting the honest core's outgoing actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Behaviour {
    /// Withhold every message and reply.
    Silent,
    /// As leader: different batches to different replicas for the same cid and epoch.
    Equivocate,
    /// As leader: proposals with replayed (already decided) or unauthentic requests, or
    /// undecodable batches.
    InvalidPropose,
    /// WRITE/ACCEPT for a hash nobody proposed (ACCEPTs re-signed with the replica's key).
    WrongHash,
    /// STOPDATA/SYNC with mutated signatures, stale decisions or lying collects.
    ForgedProof,
    /// STOP for ever-higher regencies, alone.
    StopSpam,
    /// Messages whose MAC does not verify (dropped and counted by the receiver).
    BadMac,
    /// Resends earlier messages later.
    Replay,
    /// Adds a large delay to everything it sends.
    Slow,
    /// Answers clients with made-up replies.
    WrongReply,
    /// Offers replicas that fetch state a well-formed but wrong checkpoint (its own state
    /// plus a write nobody ordered, under its correct digest) and serves it.
    LyingState,
    /// Floods its peers with requests that cost answers: position queries and announcements,
    /// decision and log requests for the oldest decisions, state queries and chunk requests.
    AnswerFlood,
    /// As leader: batches timestamped ahead of the agreed time, half of the instances within
    /// the followers' clock-skew bound (accepted: the agreed time jumps ahead, as far as
    /// the bound lets a faulty leader push it) and half beyond it (refused as
    /// `TimestampAhead`, which costs the leader its place).
    SkewedClock,
}

impl Behaviour {
    /// The behaviours drawn together for a Byzantine replica that is not silent (each with
    /// probability 0.35). [`Behaviour::AnswerFlood`] and [`Behaviour::SkewedClock`] are
    /// drawn from streams of their own ([`Scenario::draw`]), so adding them changed no other
    /// draw.
    pub const DRAWN: [Behaviour; 11] = [
        Behaviour::Silent,
        Behaviour::Equivocate,
        Behaviour::InvalidPropose,
        Behaviour::WrongHash,
        Behaviour::ForgedProof,
        Behaviour::StopSpam,
        Behaviour::BadMac,
        Behaviour::Replay,
        Behaviour::Slow,
        Behaviour::WrongReply,
        Behaviour::LyingState,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Behaviour::Silent => "silent",
            Behaviour::Equivocate => "equivocate",
            Behaviour::InvalidPropose => "invalid_propose",
            Behaviour::WrongHash => "wrong_hash",
            Behaviour::ForgedProof => "forged_proof",
            Behaviour::StopSpam => "stop_spam",
            Behaviour::BadMac => "bad_mac",
            Behaviour::Replay => "replay",
            Behaviour::Slow => "slow",
            Behaviour::WrongReply => "wrong_reply",
            Behaviour::LyingState => "lying_state",
            Behaviour::AnswerFlood => "answer_flood",
            Behaviour::SkewedClock => "skewed_clock",
        }
    }
}

impl fmt::Display for Behaviour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a faulty client misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientFault {
    /// Sends each request to one follower only (retransmits to all after a while).
    OneFollower,
    /// Sends different requests under the same sequence number to different replicas.
    Equivocate,
}

/// Network quality.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct NetParams {
    pub delay_min_ms: u64,
    pub delay_max_ms: u64,
    pub drop_p: f64,
    pub duplicate_p: f64,
    /// Messages corrupted in transit (their MAC fails; dropped and counted by the receiver).
    pub corrupt_p: f64,
}

impl NetParams {
    /// The healed network of the liveness phase.
    pub fn healed() -> Self {
        NetParams {
            delay_min_ms: 1,
            delay_max_ms: 10,
            drop_p: 0.0,
            duplicate_p: 0.0,
            corrupt_p: 0.0,
        }
    }
}

/// Replicas in `cut` are isolated from everyone else (peers and clients) in `[start, end)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Partition {
    pub start_ms: u64,
    pub end_ms: u64,
    pub cut: BTreeSet<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Crash {
    pub replica: u32,
    pub start_ms: u64,
    /// `None`: restarted only at the end of the fault period.
    pub end_ms: Option<u64>,
}

/// A view change during the run: at `at_ms` the administrator removes replica `remove`
/// (possibly the leader, possibly a Byzantine one) or, with `join`, adds that replica, which
/// was dormant until then (outside the initial view; a correct, durable one that starts
/// once a correct replica installed the view with it, and fetches its state), or, with
/// `set_f`, lowers f by one (only when the Byzantine replicas fit the lower f; the disk
/// damage and crash budgets use it from the start). With `forged_first`, a change signed by
/// another key is ordered just before it and must be refused.
#[derive(Clone, Debug, Serialize)]
pub struct ReconfigPlan {
    pub at_ms: u64,
    pub remove: u32,
    pub forged_first: bool,
    pub join: Option<u32>,
    pub set_f: Option<u32>,
}

/// Everything a seed decides before the run starts.
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    pub seed: u64,
    #[serde(serialize_with = "ser_mode")]
    pub mode: Mode,
    pub f: usize,
    pub n: usize,
    /// (replica, behaviours), ascending by replica.
    pub byzantine: Vec<(u32, Vec<Behaviour>)>,
    pub correct_clients: usize,
    pub faulty_clients: Vec<ClientFault>,
    /// Correct clients share keys in groups of this size.
    pub client_group: usize,
    pub keys_per_group: usize,
    /// Share of reads sent unordered.
    pub unordered_p: f64,
    pub net: NetParams,
    pub partitions: Vec<Partition>,
    pub crashes: Vec<Crash>,
    /// Durable replicas: correct replicas keep a simulated disk (votes flushed
    /// before ACCEPTs, decided instances logged, staggered checkpoints), and a crash
    /// loses everything else — a restart recovers from the disk and runs the start-up
    /// synchronisation. Without it, restarts keep memory.
    pub durable: bool,
    /// Durable runs only: every correct replica crashes at `.0` and all restart at `.1`.
    pub crash_all: Option<(u64, u64)>,
    /// With [`SimOptions::reconfig`]: the run has one replica more than f needs, and this
    /// view change removes one.
    pub reconfig: Option<ReconfigPlan>,
    pub fault_period_ms: u64,
    pub liveness_bound_ms: u64,
    /// The service the replicas run.
    pub service: SimService,
    /// The coordination service's workload (drawn for every seed, used by space runs).
    pub space: SpaceParams,
    /// How long leaders hold a proposal for its batch to fill (adaptive batching; 0: never).
    pub batch_fill_wait_ms: u64,
}

/// The coordination-service workload of a seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SpaceParams {
    /// The lease of the lock tuple (a few request timeouts).
    pub lock_lease_ms: u64,
    /// The longest timeout of a blocking `rd` or `in` (short, so that some time out).
    pub wait_ms_max: u64,
    /// The lease of a signal tuple (what wakes blocked `rd`s and `in`s).
    pub signal_lease_ms: u64,
}

impl SpaceParams {
    /// Drawn from a stream of its own, so every other draw of a seed is the same for both
    /// services.
    fn draw(seed: u64) -> Self {
        let mut rng = Rng::new(seed ^ 0x5ace_0000_0000_000a);
        SpaceParams {
            lock_lease_ms: rng.range(3, 6) * REQUEST_TIMEOUT_MS,
            wait_ms_max: rng.range(100, 600),
            signal_lease_ms: rng.range(50, 800),
        }
    }
}

fn ser_mode<S: serde::Serializer>(mode: &Mode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&mode.to_string())
}

impl Scenario {
    /// Draws the fault plan of `seed` under `options`.
    pub fn draw(seed: u64, options: &SimOptions) -> Result<Scenario, String> {
        let mut rng = Rng::new(seed ^ 0x5ce1_a710_0000_0001);
        let mode = options.mode.unwrap_or(if rng.chance(0.6) {
            Mode::Bft
        } else {
            Mode::Cft
        });
        let drawn_f = match rng.below(10) {
            0..=4 => 1,
            5..=7 => 2,
            _ => 3,
        };
        // With only n fixed, tolerate as many faults as n allows.
        let f = match (options.f, options.replicas) {
            (Some(f), _) => f,
            (None, Some(n)) => match mode {
                Mode::Bft => n.saturating_sub(1) / 3,
                Mode::Cft => n.saturating_sub(1) / 2,
            },
            (None, None) => drawn_f,
        };
        if f == 0 {
            return Err("f must be at least 1".into());
        }
        // A run that removes a replica starts with one more than f needs.
        let spare = usize::from(options.reconfig > 0 && options.replicas.is_none());
        let n = options.replicas.unwrap_or(mode.replicas_needed(f) + spare);
        if n < mode.replicas_needed(f) {
            return Err(format!(
                "{n} replicas cannot tolerate f = {f} in {mode} mode (need {})",
                mode.replicas_needed(f)
            ));
        }
        let fault_period_ms = options.fault_period_ms.unwrap_or(FAULT_PERIOD_MS_DEFAULT);
        let byzantine_cap = match mode {
            Mode::Bft => options.byzantine_max.unwrap_or(f).min(f),
            Mode::Cft => 0,
        };
        let byz_count = if byzantine_cap == 0 {
            0
        } else {
            rng.range(0, byzantine_cap as u64) as usize
        };
        let mut byzantine = Self::draw_byzantine(&mut rng, n, byz_count);
        let mut flood_rng = Rng::new(seed ^ 0xf100_d000_0000_0009);
        let mut skew_rng = Rng::new(seed ^ 0x5c0e_c10c_0000_000b);
        for (_, behaviours) in &mut byzantine {
            let flood = options.flood.unwrap_or_else(|| flood_rng.chance(0.4));
            let skew = skew_rng.chance(0.3);
            if behaviours != &[Behaviour::Silent] {
                if flood {
                    behaviours.push(Behaviour::AnswerFlood);
                }
                if skew {
                    behaviours.push(Behaviour::SkewedClock);
                }
            }
        }
        let net = NetParams {
            delay_min_ms: rng.range(1, 3),
            delay_max_ms: rng.range(5, 60),
            drop_p: if rng.chance(0.7) {
                rng.float(0.0, 0.08)
            } else {
                0.0
            },
            duplicate_p: if rng.chance(0.5) {
                rng.float(0.0, 0.05)
            } else {
                0.0
            },
            corrupt_p: if rng.chance(0.4) {
                rng.float(0.0, 0.03)
            } else {
                0.0
            },
        };
        let partitions = (0..rng.below(4))
            .map(|_| {
                let start_ms = rng.below(fault_period_ms);
                let end_ms = (start_ms + rng.range(100, 1_500)).min(fault_period_ms);
                let size = rng.range(1, (n as u64 - 1).min(f as u64 + 1));
                let mut ids: Vec<u32> = (0..n as u32).collect();
                rng.shuffle(&mut ids);
                Partition {
                    start_ms,
                    end_ms,
                    cut: ids[..size as usize].iter().copied().collect(),
                }
            })
            .collect();
        let crashes = Self::draw_crashes(&mut rng, n, f, &byzantine, fault_period_ms);
        let faulty_clients = (0..rng.below(3))
            .map(|_| {
                if rng.chance(0.5) {
                    ClientFault::OneFollower
                } else {
                    ClientFault::Equivocate
                }
            })
            .collect();
        // Drawn from their own stream, so every earlier draw (and so every seed's scenario
        // before durability existed) stays what it was.
        let mut durable_rng = Rng::new(seed ^ 0xd0ab_1e00_0000_0005);
        let durable = durable_rng.chance(0.5);
        let crash_all = (durable && durable_rng.chance(0.4)).then(|| {
            let start = durable_rng.below(fault_period_ms * 3 / 4);
            (start, start + durable_rng.range(20, 1_000))
        });
        let reconfig = (options.reconfig > 0 && n > mode.replicas_needed(f)).then(|| {
            let mut reconfig_rng = Rng::new(seed ^ 0x7ec0_4f16_0000_0006);
            let mut plan = ReconfigPlan {
                at_ms: reconfig_rng.below(fault_period_ms),
                remove: reconfig_rng.below(n as u64) as u32,
                forged_first: reconfig_rng.chance(0.5),
                join: None,
                set_f: None,
            };
            // Joins need state transfer (durable runs); the joiner is the highest correct id.
            let mut join_rng = Rng::new(seed ^ 0x1017_0000_0000_0007);
            if options.reconfig >= 2 && durable && join_rng.chance(0.5) {
                plan.join = (0..n as u32)
                    .rev()
                    .find(|r| !byzantine.iter().any(|(b, _)| b == r));
            }
            let mut f_rng = Rng::new(seed ^ 0x5e7f_0000_0000_0008);
            if options.reconfig >= 2
                && plan.join.is_none()
                && f >= 2
                && byzantine.len() < f
                && f_rng.chance(0.5)
            {
                plan.set_f = Some(f as u32 - 1);
            }
            plan
        });
        Ok(Scenario {
            seed,
            mode,
            f,
            n,
            byzantine,
            correct_clients: rng.range(2, 6) as usize,
            faulty_clients,
            client_group: rng.range(2, 3) as usize,
            keys_per_group: rng.range(2, 3) as usize,
            unordered_p: rng.float(0.0, 0.5),
            net,
            partitions,
            crashes,
            durable,
            crash_all,
            reconfig,
            fault_period_ms,
            liveness_bound_ms: options
                .liveness_bound_ms
                .unwrap_or(LIVENESS_BOUND_MS_DEFAULT),
            service: options.service,
            space: SpaceParams::draw(seed),
            batch_fill_wait_ms: options.batch_fill_wait_ms,
        })
    }

    fn draw_byzantine(rng: &mut Rng, n: usize, count: usize) -> Vec<(u32, Vec<Behaviour>)> {
        let mut ids: Vec<u32> = (0..n as u32).collect();
        rng.shuffle(&mut ids);
        // The first leader is replica 0: make it Byzantine half of the time.
        if count > 0
            && rng.chance(0.5)
            && let Some(pos) = ids.iter().position(|&r| r == 0)
        {
            ids.swap(0, pos);
        }
        let mut chosen: Vec<(u32, Vec<Behaviour>)> = ids[..count]
            .iter()
            .map(|&r| {
                let mut behaviours: Vec<Behaviour> = if rng.chance(0.15) {
                    vec![Behaviour::Silent]
                } else {
                    Behaviour::DRAWN[1..]
                        .iter()
                        .copied()
                        .filter(|_| rng.chance(0.35))
                        .collect()
                };
                if behaviours.is_empty() {
                    behaviours.push(Behaviour::DRAWN[1 + rng.index(Behaviour::DRAWN.len() - 1)]);
                }
                (r, behaviours)
            })
            .collect();
        chosen.sort();
        chosen
    }

    fn draw_crashes(
        rng: &mut Rng,
        n: usize,
        f: usize,
        byzantine: &[(u32, Vec<Behaviour>)],
        fault_period_ms: u64,
    ) -> Vec<Crash> {
        // Mostly at most f faulty at once (so the run makes progress), sometimes one more
        // (safety must hold regardless).
        let budget = f.saturating_sub(byzantine.len()) + usize::from(rng.chance(0.15));
        let mut candidates: Vec<u32> = (0..n as u32)
            .filter(|r| !byzantine.iter().any(|(b, _)| b == r))
            .collect();
        rng.shuffle(&mut candidates);
        let mut crashes = Vec::new();
        for replica in candidates.into_iter().take(budget) {
            if !rng.chance(0.6) {
                continue;
            }
            let start_ms = rng.below(fault_period_ms);
            let end_ms = if rng.chance(0.7) {
                Some((start_ms + rng.range(50, 1_500)).min(fault_period_ms))
            } else {
                None
            };
            crashes.push(Crash {
                replica,
                start_ms,
                end_ms,
            });
        }
        crashes
    }

    /// The command that replays this seed with these options.
    pub fn replay_command(seed: u64, options: &SimOptions) -> String {
        let mut cmd = format!("tagma sim --seed {seed}");
        if let Some(n) = options.replicas {
            cmd.push_str(&format!(" --replicas {n}"));
        }
        if let Some(b) = options.byzantine_max {
            cmd.push_str(&format!(" --byzantine {b}"));
        }
        if let Some(m) = options.mode {
            cmd.push_str(&format!(" --mode {m}"));
        }
        if let Some(f) = options.f {
            cmd.push_str(&format!(" --f {f}"));
        }
        if options.reconfig > 0 {
            cmd.push_str(&format!(" --reconfig {}", options.reconfig));
        }
        if let Some(flood) = options.flood {
            cmd.push_str(&format!(" --flood {flood}"));
        }
        if options.service != SimService::Kv {
            cmd.push_str(&format!(" --service {}", options.service));
        }
        cmd.push_str(" --trace");
        cmd
    }

    pub fn is_byzantine(&self, replica: u32) -> bool {
        self.byzantine.iter().any(|(r, _)| *r == replica)
    }
}
