//! `tagma-sim`: the deterministic simulator of tagma (in the manner of TigerBeetle's VOPR).
//!
//! One seed fixes a whole run: the fault plan ([`scenario`]), the simulated network and clock,
//! the clients' workloads and the Byzantine replicas' lies. The real, honest replica cores of
//! `tagma-core` and the real executors run underneath, with the service the options name
//! ([`SimService`]): the key-value store or the coordination service. Invariants are checked
//! after every event (agreement, total order, validity, one reply per request from each
//! correct replica, the coordination service's replies against the agreed time), then at the
//! end (linearizability of every key's client-visible history; jobs taken exactly once and
//! lock grants that never overlap), and after the fault period the network heals and every
//! correct client must finish its operations within a virtual-time bound (liveness).
//!
//! Modules: [`rng`] (the one generator), [`options`] (what the caller fixes),
//! [`scenario`] (the fault plan), [`world`] (event queue, replicas, network, clients,
//! checkers), [`client`] (simulated clients) with their workloads [`kv_client`] and
//! [`space_client`], [`byzantine`] (rewriting a replica's outgoing actions),
//! [`linearizability`] (the per-key Wing–Gong checker), [`space_ledger`] (the coordination
//! service's jobs and lock grants).
//!
//! Entry points: [`run_seed`] for one seed, [`run_seeds`] for a range (what `tagma sim`
//! prints). [`eve_pair`] simulates execute-verify's primary-backup pair instead (`tagma sim
//! --eve`), [`eve_bft`] its BFT deployment (`tagma sim --eve-bft`).

pub mod byzantine;
pub mod client;
pub mod eve_bft;
pub mod eve_pair;
pub mod kv_client;
pub mod linearizability;
pub mod options;
pub mod rng;
pub mod scenario;
mod seed_runs;
pub mod space_client;
pub mod space_ledger;
pub mod world;

use std::collections::BTreeMap;
use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};

use serde::Serialize;

pub use options::{SimOptions, SimService};
pub use scenario::{Behaviour, ClientFault, Scenario};
pub use world::Violation;

/// What one seed did.
#[derive(Clone, Debug, Serialize)]
pub struct SeedReport {
    pub seed: u64,
    pub mode: String,
    pub n: usize,
    pub f: usize,
    /// (replica, behaviours) of the Byzantine replicas.
    pub byzantine: Vec<(u32, Vec<Behaviour>)>,
    pub violations: Vec<Violation>,
    pub liveness_failure: Option<String>,
    pub behaviours_exercised: BTreeMap<String, u64>,
    pub counters: BTreeMap<String, u64>,
    /// The largest values seen, by name (e.g. `answer_bytes_per_peer_period_max`: the most
    /// bytes a correct replica answered one peer with in one period).
    pub maxima: BTreeMap<String, u64>,
    /// BLAKE3 over every event: equal for two runs of the same seed.
    pub trace_hash: String,
    pub events: u64,
    pub virtual_ms: u64,
    pub decided_instances: u64,
    pub ops_completed: u64,
    pub regency_max: u32,
    /// One line per event (only with `SimOptions::trace`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<String>,
}

impl SeedReport {
    pub fn failed(&self) -> bool {
        !self.violations.is_empty() || self.liveness_failure.is_some()
    }

    /// The first thing that went wrong, as `invariant: detail`.
    pub fn first_failure(&self) -> Option<String> {
        if let Some(v) = self.violations.first() {
            return Some(format!("{}: {}", v.invariant, v.detail));
        }
        self.liveness_failure
            .as_ref()
            .map(|l| format!("liveness: {l}"))
    }
}

/// Runs one seed. Deterministic: the same seed and options give the same report (and trace
/// hash). A panic in the code under test is caught and reported as a violation.
pub fn run_seed(seed: u64, options: &SimOptions) -> SeedReport {
    let scenario = match Scenario::draw(seed, options) {
        Ok(s) => s,
        Err(e) => return error_report(seed, "options", e),
    };
    let header = (
        scenario.mode.to_string(),
        scenario.n,
        scenario.f,
        scenario.byzantine.clone(),
    );
    let trace = options.trace;
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        world::World::new(scenario, trace).run()
    }));
    let outcome = match outcome {
        Ok(o) => o,
        Err(payload) => {
            let msg = world::panic_message(payload.as_ref());
            let mut report = error_report(seed, "panic", msg);
            (report.mode, report.n, report.f, report.byzantine) = header;
            return report;
        }
    };
    SeedReport {
        seed,
        mode: header.0,
        n: header.1,
        f: header.2,
        byzantine: header.3,
        violations: outcome.violations,
        liveness_failure: outcome.liveness_failure,
        behaviours_exercised: outcome
            .exercised
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        counters: outcome.counters,
        maxima: outcome.maxima,
        trace_hash: outcome.trace_hash.to_hex(),
        events: outcome.events,
        virtual_ms: outcome.virtual_ms,
        decided_instances: outcome.decided_instances,
        ops_completed: outcome.ops_completed,
        regency_max: outcome.regency_max,
        trace: outcome.trace,
    }
}

fn error_report(seed: u64, invariant: &str, detail: String) -> SeedReport {
    SeedReport {
        seed,
        mode: String::new(),
        n: 0,
        f: 0,
        byzantine: Vec::new(),
        violations: vec![Violation {
            invariant: invariant.to_string(),
            detail,
            time_ms: 0,
        }],
        liveness_failure: None,
        behaviours_exercised: BTreeMap::new(),
        counters: BTreeMap::new(),
        maxima: BTreeMap::new(),
        trace_hash: String::new(),
        events: 0,
        virtual_ms: 0,
        decided_instances: 0,
        ops_completed: 0,
        regency_max: 0,
        trace: Vec::new(),
    }
}

/// One failed seed in a summary.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub seed: u64,
    pub first_violation: String,
    pub replay: String,
}

/// What a range of seeds did (the JSON `tagma sim` prints).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub seeds_run: u64,
    pub violations: u64,
    pub liveness_failures: u64,
    pub failures: Vec<Failure>,
    pub behaviours_exercised: BTreeMap<String, u64>,
    pub counters: BTreeMap<String, u64>,
    /// The largest value of each of the seeds' maxima.
    pub maxima: BTreeMap<String, u64>,
    pub events: u64,
    pub ops_completed: u64,
    pub decided_instances: u64,
    /// Seeds per mode and f, e.g. `"bft f=1": 120`.
    pub configurations: BTreeMap<String, u64>,
}

impl Summary {
    pub fn failed(&self) -> bool {
        self.violations > 0 || self.liveness_failures > 0
    }

    pub fn add(&mut self, report: &SeedReport, options: &SimOptions) {
        self.seeds_run += 1;
        self.events += report.events;
        self.ops_completed += report.ops_completed;
        self.decided_instances += report.decided_instances;
        *self
            .configurations
            .entry(format!("{} f={}", report.mode, report.f))
            .or_default() += 1;
        for (k, v) in &report.behaviours_exercised {
            *self.behaviours_exercised.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &report.counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &report.maxima {
            let m = self.maxima.entry(k.clone()).or_default();
            *m = (*m).max(*v);
        }
        if !report.violations.is_empty() {
            self.violations += 1;
        } else if report.liveness_failure.is_some() {
            self.liveness_failures += 1;
        }
        if let Some(first) = report.first_failure() {
            self.failures.push(Failure {
                seed: report.seed,
                first_violation: first,
                replay: Scenario::replay_command(report.seed, options),
            });
        }
    }
}

/// Runs every seed of `seeds` (in order) and summarises.
pub fn run_seeds(seeds: Range<u64>, options: &SimOptions) -> Summary {
    let mut summary = Summary::default();
    for seed in seeds {
        let report = run_seed(seed, options);
        summary.add(&report, options);
    }
    summary
}

/// Parses one line of `regressions.txt`: `SEED [key=value]...` (`#` starts a comment).
pub fn parse_regression_line(line: &str) -> Result<Option<(u64, SimOptions)>, String> {
    let line = line.split('#').next().unwrap_or("").trim();
    if line.is_empty() {
        return Ok(None);
    }
    let mut tokens = line.split_whitespace();
    let seed = tokens
        .next()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| format!("expected a seed at the start of {line:?}"))?;
    Ok(Some((seed, SimOptions::parse_tokens(tokens)?)))
}
