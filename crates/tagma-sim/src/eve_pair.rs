//! Execute-verify's primary-backup pair under seeded faults (`tagma sim --eve`).
//!
//! One seed draws the set-up (clients, link delays, whether parallel executions diverge
//! between the servers so that batches roll back) and a plan of faults, one after the
//! other, each given time to heal: the primary or the backup crashes and restarts empty
//! (fetching the state), a server pauses for longer or shorter than the takeover timeout, a
//! batch or a token is lost. The real protocol core and executors run underneath
//! (`tagma_eve::pb::harness`). Checked: each batch number commits one batch wherever it
//! commits; two replies to one request are equal; the committed batches run in order give
//! every reply the clients got and each server's committed state; and after the faults
//! (liveness) every client gets answers again, and the pair is back to a primary and a
//! backup that follows it.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Serialize;
use tagma_eve::pb::Role;
use tagma_eve::pb::harness::{Pair, PairSetup};
use tagma_wire::EveMessage;

use crate::rng::Rng;
use crate::seed_runs::run_each;

/// The faults a seed can draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    CrashPrimary,
    CrashBackup,
    /// A pause of the primary, longer than the takeover timeout or shorter.
    PausePrimary {
        long: bool,
    },
    LoseBatch,
    LoseToken,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::CrashPrimary => "crash-primary",
            Fault::CrashBackup => "crash-backup",
            Fault::PausePrimary { long: true } => "long-pause",
            Fault::PausePrimary { long: false } => "short-pause",
            Fault::LoseBatch => "lose-batch",
            Fault::LoseToken => "lose-token",
        }
    }
}

/// One seed's run.
#[derive(Clone, Debug, Serialize)]
pub struct EvePairReport {
    pub seed: u64,
    pub clients: u32,
    pub diverge: bool,
    pub delay_max_ms: u64,
    pub faults: Vec<String>,
    pub virtual_ms: u64,
    pub committed_batches: usize,
    /// Batches a server taking over committed from its own parallel run, which nothing
    /// compared (taken as that server left them).
    pub unchecked_commits: usize,
    pub answered: u64,
    pub rollbacks: u64,
    pub takeovers: u64,
    pub joins_served: u64,
    pub violations: Vec<String>,
    pub liveness_failure: Option<String>,
}

/// A range of seeds, summed up.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EvePairSummary {
    pub seeds_run: u64,
    pub violations: u64,
    pub liveness_failures: u64,
    pub faults_exercised: BTreeMap<String, u64>,
    pub rollbacks: u64,
    pub takeovers: u64,
    pub joins_served: u64,
    pub unchecked_commits: u64,
    /// The first failing seeds (at most 20), each with its first problem.
    pub failures: Vec<(u64, String)>,
}

fn primary(pair: &Pair) -> Option<usize> {
    (0..2).find(|&i| pair.is_up(i) && pair.server(i).core.role() == Role::Primary)
}

/// Runs one seed.
pub fn run_seed(seed: u64) -> EvePairReport {
    run(seed, false).0
}

/// Runs one seed, keeping the trace (one line per commit, role change and fault).
pub fn run_seed_traced(seed: u64) -> (EvePairReport, Vec<String>) {
    run(seed, true)
}

fn run(seed: u64, traced: bool) -> (EvePairReport, Vec<String>) {
    let mut rng = Rng::new(seed);
    let setup = PairSetup {
        clients: rng.range(2, 16) as u32,
        diverge: rng.chance(0.3),
        heartbeat_ms: 20,
        takeover_ms: rng.range(80, 200),
        ..PairSetup::default()
    };
    let delay_max_ms = rng.range(1, 15);
    let mut delays = rng.fork();
    let mut delay = move || delays.range(1, delay_max_ms);
    let mut pair = Pair::new(setup);
    if traced {
        pair.trace = Some(Vec::new());
    }
    let heal_ms = 4 * setup.takeover_ms + 200;
    let mut faults = Vec::new();
    pair.run(100);
    for _ in 0..rng.range(1, 3) {
        let fault = match rng.below(6) {
            0 => Fault::CrashPrimary,
            1 => Fault::CrashBackup,
            2 => Fault::PausePrimary { long: true },
            3 => Fault::PausePrimary { long: false },
            4 => Fault::LoseBatch,
            _ => Fault::LoseToken,
        };
        let Some(p) = primary(&pair) else { break };
        faults.push(fault);
        pair.note(|| format!("fault: {}", fault.name()));
        match fault {
            Fault::CrashPrimary | Fault::CrashBackup => {
                let victim = if fault == Fault::CrashPrimary {
                    p
                } else {
                    1 - p
                };
                pair.crash(victim);
                for _ in 0..rng.range(setup.takeover_ms / 2, 3 * setup.takeover_ms) {
                    pair.step(&mut delay);
                }
                pair.start(victim as u8, true);
            }
            Fault::PausePrimary { long } => {
                let ms = if long {
                    rng.range(setup.takeover_ms + 50, 3 * setup.takeover_ms)
                } else {
                    rng.range(1, setup.takeover_ms / 2)
                };
                pair.paused[p] = true;
                for _ in 0..ms {
                    pair.step(&mut delay);
                }
                pair.paused[p] = false;
            }
            Fault::LoseBatch => {
                pair.lose_next(1 - p, |m| matches!(m, EveMessage::ExecuteBatch { .. }))
            }
            Fault::LoseToken => pair.lose_next(p, |m| matches!(m, EveMessage::Token { .. })),
        }
        for _ in 0..heal_ms {
            pair.step(&mut delay);
        }
    }
    // Quiet: every client must get answers again.
    let before = pair.answered_per_client();
    for _ in 0..heal_ms {
        pair.step(&mut delay);
    }
    let after = pair.answered_per_client();
    let mut liveness_failure = (before.iter().zip(&after))
        .position(|(b, a)| a <= b)
        .map(|c| format!("client {c} got no answer in the {heal_ms} ms after the faults"));
    let roles: Vec<Option<Role>> = (0..2)
        .map(|i| pair.is_up(i).then(|| pair.server(i).core.role()))
        .collect();
    let settled = roles.contains(&Some(Role::Primary))
        && roles.contains(&Some(Role::Backup))
        && (0..2).all(|i| pair.is_up(i) && pair.server(i).core.peer_alive());
    if liveness_failure.is_none() && !settled {
        liveness_failure = Some(format!(
            "after the faults the servers are {roles:?}, not a primary and its backup"
        ));
    }
    let mut violations = pair.violations.clone();
    violations.extend(pair.check_against_sequential());
    let stats: Vec<_> = (0..2).map(|i| pair.server(i).core.stats()).collect();
    let report = EvePairReport {
        seed,
        clients: setup.clients,
        diverge: setup.diverge,
        delay_max_ms,
        faults: faults.iter().map(|f| f.name().to_string()).collect(),
        virtual_ms: pair.now_ms,
        committed_batches: pair.committed_batches(),
        unchecked_commits: pair.unchecked_commits(),
        answered: pair.answered(),
        rollbacks: stats.iter().map(|s| s.rollbacks).sum(),
        takeovers: stats.iter().map(|s| s.takeovers).sum(),
        joins_served: stats.iter().map(|s| s.joins_served).sum(),
        violations,
        liveness_failure,
    };
    (report, pair.trace.take().unwrap_or_default())
}

/// Runs every seed of `seeds`.
pub fn run_seeds(seeds: Range<u64>) -> EvePairSummary {
    let mut summary = EvePairSummary::default();
    let problems = |r: &EvePairReport| (r.violations.first().cloned(), r.liveness_failure.clone());
    let tally = run_each(seeds, run_seed, problems, |r| {
        for f in &r.faults {
            *summary.faults_exercised.entry(f.clone()).or_default() += 1;
        }
        summary.rollbacks += r.rollbacks;
        summary.takeovers += r.takeovers;
        summary.joins_served += r.joins_served;
        summary.unchecked_commits += r.unchecked_commits as u64;
    });
    summary.seeds_run = tally.seeds_run;
    summary.violations = tally.violations;
    summary.liveness_failures = tally.liveness_failures;
    summary.failures = tally.failures;
    summary
}
