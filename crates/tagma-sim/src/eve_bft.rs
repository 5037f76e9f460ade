//! Execute-verify's BFT deployment under seeded faults (`tagma sim --eve-bft`).
//!
//! One seed draws the resilience (`u` of 1 or 2, `r` of 0 to 2: with `r = 0` the deployment
//! masks concurrency bugs), clients, link delays, and up to `u` faulty executors, each
//! lying (wrong tokens, wrong replies or forged state nodes; at most `r` of them), crashing
//! during the run, or racy (its parallel runs diverge from everyone's, as a race would);
//! sometimes every executor is racy, so that only runs in order agree and batches roll
//! back; up to `r` verifiers telling one lie; and, with `r = 0`, sometimes the verifiers'
//! extra protection mode. The real executor core, stage and
//! verifiers' decision run underneath (`tagma_eve::bft::harness`). Checked: each batch
//! number commits one batch at every correct executor; the committed batches run in order
//! give every reply the clients accepted and each correct executor's committed state; no
//! lying reply is accepted; and after the faults (liveness) every client gets answers and
//! every divergence of a correct executor is repaired.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Serialize;
use tagma_eve::Resilience;
use tagma_eve::bft::harness::{Behaviour, BftSetup, Deployment};

use crate::rng::Rng;
use crate::seed_runs::run_each;

/// One seed's run.
#[derive(Clone, Debug, Serialize)]
pub struct EveBftReport {
    pub seed: u64,
    pub u: usize,
    pub r: usize,
    pub executors: usize,
    pub clients: u32,
    pub delay_max_ms: u64,
    pub faults: Vec<String>,
    pub virtual_ms: u64,
    pub committed_batches: usize,
    pub answered: u64,
    pub lies_sent: u64,
    pub manifested: u64,
    pub repaired: u64,
    pub rollbacks: u64,
    pub fetches: u64,
    pub violations: Vec<String>,
    pub liveness_failure: Option<String>,
}

/// A range of seeds, summed up.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EveBftSummary {
    pub seeds_run: u64,
    pub violations: u64,
    pub liveness_failures: u64,
    pub faults_exercised: BTreeMap<String, u64>,
    pub lies_sent: u64,
    pub manifested: u64,
    pub repaired: u64,
    pub rollbacks: u64,
    pub fetches: u64,
    /// (seed, first problem), at most 20.
    pub failures: Vec<(u64, String)>,
}

/// Runs one seed.
pub fn run_seed(seed: u64) -> EveBftReport {
    run_seed_traced(seed, false).0
}

/// Runs one seed, keeping its trace if asked.
pub fn run_seed_traced(seed: u64, trace: bool) -> (EveBftReport, Vec<String>) {
    let mut rng = Rng::new(seed ^ 0xe7e_bf7);
    let u = 1 + rng.below(2) as usize;
    let r = rng.below(3) as usize;
    let resilience = Resilience::new(u, r).expect("u ≥ 1");
    let n = resilience.executors() as u32;
    let mut setup = BftSetup::new(resilience);
    setup.seed = seed;
    setup.clients = rng.range(3, 12) as u32;
    setup.max_delay_ms = rng.range(1, 8);
    setup.behaviours = vec![Behaviour::Correct; n as usize];
    let mut faults = Vec::new();
    let mut crash = None;
    if rng.chance(0.15) {
        setup.racy = (0..n).collect();
        faults.push("all-racy".to_string());
    } else {
        let mut victims: Vec<u32> = (0..n).collect();
        let mut liars = 0;
        for _ in 0..rng.below(u as u64 + 1) {
            let victim = victims.remove(rng.below(victims.len() as u64) as usize);
            // At most r executors lie: the deployment is safe against no more.
            let kinds: &[&str] = if liars < r {
                &[
                    "wrong-tokens",
                    "wrong-replies",
                    "wrong-state",
                    "crash",
                    "racy",
                ]
            } else {
                &["crash", "racy"]
            };
            let kind = kinds[rng.below(kinds.len() as u64) as usize];
            if kind.starts_with("wrong") {
                liars += 1;
            }
            match kind {
                "wrong-tokens" => setup.behaviours[victim as usize] = Behaviour::WrongTokens,
                "wrong-replies" => setup.behaviours[victim as usize] = Behaviour::WrongReplies,
                "wrong-state" => setup.behaviours[victim as usize] = Behaviour::WrongState,
                "crash" if crash.is_none() => crash = Some(victim),
                _ => setup.racy.push(victim),
            }
            faults.push(kind.to_string());
        }
    }
    if r == 0 && rng.chance(0.5) {
        setup.protection = Some(tagma_eve::verify::Protection {
            after_batches: rng.range(1, 10),
            wait_ms: rng.range(5, 40),
        });
        faults.push("extra-protection".to_string());
    }
    if r > 0 && rng.chance(0.3) {
        setup.lying_verifiers = 1 + rng.below(r as u64) as u32;
        faults.push("lying-verifiers".to_string());
    }
    let crash_at = rng.range(100, 1_500);
    let (clients, delay_max_ms) = (setup.clients, setup.max_delay_ms);
    let mut d = Deployment::new(setup);
    if trace {
        d.trace = Some(Vec::new());
    }
    d.run(crash_at);
    if let Some(victim) = crash {
        d.crash(victim);
    }
    d.run(2_000 - crash_at);
    // Liveness: every client gets answers after the faults; then, without new requests,
    // every divergence is repaired.
    let before = d.answered_per_client();
    d.run(1_500);
    let after = d.answered_per_client();
    let mut liveness_failure = (before.iter().zip(&after))
        .position(|(b, a)| a <= b)
        .map(|c| format!("client {c} got no answer in the 1500 ms after the faults"));
    d.quiet = true;
    d.run(1_500);
    let (manifested, repaired) = (d.divergences.manifested, d.repaired());
    if liveness_failure.is_none() && repaired != manifested {
        liveness_failure = Some(format!(
            "{repaired} of {manifested} divergences repaired at the end"
        ));
    }
    let fetches = (0..n)
        .filter_map(|e| d.node(e))
        .map(|node| node.core.stats().fetches)
        .sum();
    let report = EveBftReport {
        seed,
        u,
        r,
        executors: n as usize,
        clients,
        delay_max_ms,
        faults,
        virtual_ms: d.now_ms,
        committed_batches: d.committed_batches(),
        answered: d.answered(),
        lies_sent: d.divergences.lies_sent,
        manifested,
        repaired,
        rollbacks: d.divergences.rollbacks,
        fetches,
        violations: d.check_against_sequential(),
        liveness_failure,
    };
    (report, d.trace.take().unwrap_or_default())
}

/// Runs every seed of `seeds`.
pub fn run_seeds(seeds: Range<u64>) -> EveBftSummary {
    let mut summary = EveBftSummary::default();
    let problems = |r: &EveBftReport| (r.violations.first().cloned(), r.liveness_failure.clone());
    let tally = run_each(seeds, run_seed, problems, |r| {
        for f in &r.faults {
            *summary.faults_exercised.entry(f.clone()).or_default() += 1;
        }
        summary.lies_sent += r.lies_sent;
        summary.manifested += r.manifested;
        summary.repaired += r.repaired;
        summary.rollbacks += r.rollbacks;
        summary.fetches += r.fetches;
    });
    summary.seeds_run = tally.seeds_run;
    summary.violations = tally.violations;
    summary.liveness_failures = tally.liveness_failures;
    summary.failures = tally.failures;
    summary
}
