//! `tagma sim`: the deterministic simulator, one seed (replayed, optionally traced) or a
//! range of seeds (summarised).

use std::time::Instant;

use anyhow::{Context, Result, bail};
use tagma_core::Mode;

/// `tagma sim`.
#[derive(clap::Args)]
pub struct SimArgs {
    /// Seeds to run, `A..B` (B excluded).
    #[arg(long, conflicts_with = "seed", required_unless_present = "seed")]
    pub seeds: Option<String>,
    /// Run (replay) one seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Number of replicas [default: 3f+1 (bft) or 2f+1 (cft), f drawn per seed].
    #[arg(long)]
    pub replicas: Option<usize>,
    /// Most Byzantine replicas per seed [default: f].
    #[arg(long)]
    pub byzantine: Option<usize>,
    /// Fault model, bft or cft [default: drawn per seed].
    #[arg(long)]
    pub mode: Option<String>,
    /// Faults tolerated [default: drawn per seed, 1..=3].
    #[arg(long)]
    pub f: Option<usize>,
    /// View changes during the faults: 1 — start each seed with one replica more than f
    /// needs and have the administrator remove one (maybe the leader); 2 — the same, or, in
    /// half the durable seeds, start with one replica dormant and have the administrator add
    /// it (it joins by state transfer), or, in half the others with f ≥ 2, lower f by one. A
    /// forged change is ordered first in half the seeds. `--reconfig` alone means 2.
    #[arg(long, num_args = 0..=1, default_missing_value = "2", value_parser = clap::value_parser!(u8).range(0..=2))]
    pub reconfig: Option<u8>,
    /// Whether the Byzantine replicas that are not silent flood their peers with requests
    /// that cost answers (true or false) [default: drawn per replica].
    #[arg(long)]
    pub flood: Option<bool>,
    /// The service every replica runs, with its clients' workload: kv (the key-value store,
    /// checked for linearizability) or space (the coordination service: a work queue, a lock
    /// with a lease, blocking reads and takes that time out; checked for exactly-once takes,
    /// lock safety in agreed time, and waits answered once).
    #[arg(long, default_value = "kv", value_parser = ["kv", "space"])]
    pub service: String,
    /// Adaptive batching: how long leaders may hold a proposal while its batch fills, in
    /// virtual ms (the `[batch] fill_wait_ms` of a real cluster). 0 proposes at once.
    #[arg(long, default_value_t = 0)]
    pub fill_ms: u64,
    /// Simulate an execute-verify primary-backup pair instead of an ordered cluster: each
    /// seed draws clients, link delays, diverging executions and a plan of crashes, pauses
    /// and lost messages; checked for one batch per number, replies equal to sequential
    /// execution's, and service after the faults.
    #[arg(long, conflicts_with_all = ["replicas", "byzantine", "mode", "f", "reconfig", "flood"])]
    pub eve: bool,
    /// Simulate execute-verify's BFT deployment instead: each seed draws u and r (r = 0
    /// masks concurrency bugs), clients, link delays, and up to u faulty executors (lying
    /// about tokens, replies or state, crashing, or racy), sometimes every executor racy,
    /// and lying verifiers; checked for one batch per number, replies and states equal to
    /// sequential execution's, no lying reply accepted, service after the faults and every
    /// divergence repaired.
    #[arg(long, conflicts_with_all = ["eve", "replicas", "byzantine", "mode", "f", "reconfig", "flood"])]
    pub eve_bft: bool,
    /// Print one line per event (with --seed).
    #[arg(long)]
    pub trace: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `tagma sim`.
pub fn run(args: SimArgs) -> Result<()> {
    if args.eve_bft {
        return eve::<BftSim>(&args);
    }
    if args.eve {
        return eve::<PairSim>(&args);
    }
    let mode = match args.mode.as_deref() {
        None => None,
        Some("bft") => Some(Mode::Bft),
        Some("cft") => Some(Mode::Cft),
        Some(other) => bail!("--mode must be bft or cft, not {other:?}"),
    };
    let service = tagma_sim::SimService::parse(&args.service)
        .map_err(|e| anyhow::anyhow!("--service: {e}"))?;
    let options = tagma_sim::SimOptions {
        mode,
        f: args.f,
        replicas: args.replicas,
        byzantine_max: args.byzantine,
        trace: args.trace,
        reconfig: args.reconfig.unwrap_or(0),
        flood: args.flood,
        service,
        batch_fill_wait_ms: args.fill_ms,
        ..Default::default()
    };
    if let Some(seed) = args.seed {
        let report = tagma_sim::run_seed(seed, &options);
        for line in &report.trace {
            println!("{line}");
        }
        if args.json {
            let mut shown = report.clone();
            shown.trace.clear();
            println!("{}", serde_json::to_string_pretty(&shown)?);
        } else {
            println!(
                "seed {seed}: {} n={} f={} byzantine={:?}: {} events, {} virtual ms, {} instances decided, {} operations completed, trace {}",
                report.mode,
                report.n,
                report.f,
                report.byzantine,
                report.events,
                report.virtual_ms,
                report.decided_instances,
                report.ops_completed,
                report.trace_hash
            );
        }
        if let Some(failure) = report.first_failure() {
            bail!("seed {seed} failed: {failure}");
        }
        return Ok(());
    }
    let seeds = parse_seeds(args.seeds.as_deref().unwrap_or_default())?;
    let (a, b) = (seeds.start, seeds.end);
    let started = Instant::now();
    let summary = tagma_sim::run_seeds(a..b, &options);
    let elapsed_s = started.elapsed().as_secs_f64();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "{} seeds in {elapsed_s:.1} s ({:.1} seeds/s): {} with violations, {} liveness failures",
            summary.seeds_run,
            summary.seeds_run as f64 / elapsed_s.max(1e-9),
            summary.violations,
            summary.liveness_failures
        );
        println!("behaviours exercised: {:?}", summary.behaviours_exercised);
        let counter = |name: &str| summary.counters.get(name).copied().unwrap_or(0);
        let maximum = |name: &str| summary.maxima.get(name).copied().unwrap_or(0);
        println!(
            "answer budget: {} requests refused; most answered to one peer in one period: {} messages, {} bytes",
            counter("answers_refused"),
            maximum("answer_messages_per_peer_period_max"),
            maximum("answer_bytes_per_peer_period_max")
        );
        for f in summary.failures.iter().take(20) {
            let first: String = f.first_violation.chars().take(300).collect();
            println!("  seed {}: {first}\n    replay: {}", f.seed, f.replay);
        }
    }
    if summary.failed() {
        bail!(
            "{} of {} seeds failed",
            summary.failures.len(),
            summary.seeds_run
        );
    }
    Ok(())
}

/// An execute-verify simulation: one seed replayed (its report, and its trace if asked), or
/// a range summed up.
trait EveSim {
    /// The flag that chooses it (for the replay line).
    const FLAG: &'static str;
    type Report: serde::Serialize;
    type Summary: serde::Serialize;
    fn one(seed: u64, trace: bool) -> (Self::Report, Vec<String>);
    /// The report in one line.
    fn line(report: &Self::Report) -> String;
    /// The first violation, else the liveness failure.
    fn problem(report: &Self::Report) -> Option<String>;
    fn many(seeds: std::ops::Range<u64>) -> Self::Summary;
    /// The summary in one line (after "N seeds in T s: ").
    fn summary_line(summary: &Self::Summary) -> String;
    fn failures(summary: &Self::Summary) -> &[(u64, String)];
    fn failed(summary: &Self::Summary) -> bool;
}

/// `tagma sim --eve`: the primary-backup pair.
struct PairSim;

impl EveSim for PairSim {
    const FLAG: &'static str = "--eve";
    type Report = tagma_sim::eve_pair::EvePairReport;
    type Summary = tagma_sim::eve_pair::EvePairSummary;

    fn one(seed: u64, _trace: bool) -> (Self::Report, Vec<String>) {
        tagma_sim::eve_pair::run_seed_traced(seed)
    }

    fn line(r: &Self::Report) -> String {
        format!(
            "{} clients, links up to {} ms, diverging: {}, faults {:?}: {} virtual ms, {} batches committed, {} requests answered, {} rollbacks, {} takeovers, {} joins",
            r.clients,
            r.delay_max_ms,
            r.diverge,
            r.faults,
            r.virtual_ms,
            r.committed_batches,
            r.answered,
            r.rollbacks,
            r.takeovers,
            r.joins_served
        )
    }

    fn problem(r: &Self::Report) -> Option<String> {
        r.violations
            .first()
            .or(r.liveness_failure.as_ref())
            .cloned()
    }

    fn many(seeds: std::ops::Range<u64>) -> Self::Summary {
        tagma_sim::eve_pair::run_seeds(seeds)
    }

    fn summary_line(s: &Self::Summary) -> String {
        format!(
            "{} with violations, {} liveness failures; {} rollbacks, {} takeovers, {} joins, {} unchecked commits; faults {:?}",
            s.violations,
            s.liveness_failures,
            s.rollbacks,
            s.takeovers,
            s.joins_served,
            s.unchecked_commits,
            s.faults_exercised
        )
    }

    fn failures(s: &Self::Summary) -> &[(u64, String)] {
        &s.failures
    }

    fn failed(s: &Self::Summary) -> bool {
        s.violations + s.liveness_failures > 0
    }
}

/// `tagma sim --eve-bft`: the BFT deployment.
struct BftSim;

impl EveSim for BftSim {
    const FLAG: &'static str = "--eve-bft";
    type Report = tagma_sim::eve_bft::EveBftReport;
    type Summary = tagma_sim::eve_bft::EveBftSummary;

    fn one(seed: u64, trace: bool) -> (Self::Report, Vec<String>) {
        tagma_sim::eve_bft::run_seed_traced(seed, trace)
    }

    fn line(r: &Self::Report) -> String {
        format!(
            "u = {}, r = {} ({} executors), {} clients, links up to {} ms, faults {:?}: {} virtual ms, {} batches committed, {} requests answered, {} lies sent, {} divergences manifested, {} repaired, {} rollbacks, {} fetches",
            r.u,
            r.r,
            r.executors,
            r.clients,
            r.delay_max_ms,
            r.faults,
            r.virtual_ms,
            r.committed_batches,
            r.answered,
            r.lies_sent,
            r.manifested,
            r.repaired,
            r.rollbacks,
            r.fetches
        )
    }

    fn problem(r: &Self::Report) -> Option<String> {
        r.violations
            .first()
            .or(r.liveness_failure.as_ref())
            .cloned()
    }

    fn many(seeds: std::ops::Range<u64>) -> Self::Summary {
        tagma_sim::eve_bft::run_seeds(seeds)
    }

    fn summary_line(s: &Self::Summary) -> String {
        format!(
            "{} with violations, {} liveness failures; {} lies sent, {} divergences manifested, {} repaired, {} rollbacks, {} fetches; faults {:?}",
            s.violations,
            s.liveness_failures,
            s.lies_sent,
            s.manifested,
            s.repaired,
            s.rollbacks,
            s.fetches,
            s.faults_exercised
        )
    }

    fn failures(s: &Self::Summary) -> &[(u64, String)] {
        &s.failures
    }

    fn failed(s: &Self::Summary) -> bool {
        s.violations + s.liveness_failures > 0
    }
}

/// `tagma sim --eve` or `--eve-bft`: one seed replayed, or a range summed up.
fn eve<S: EveSim>(args: &SimArgs) -> Result<()> {
    if let Some(seed) = args.seed {
        let (report, trace) = S::one(seed, args.trace);
        if args.trace {
            for line in &trace {
                println!("{line}");
            }
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!("seed {seed}: {}", S::line(&report));
        }
        if let Some(problem) = S::problem(&report) {
            bail!("seed {seed} failed: {problem}");
        }
        return Ok(());
    }
    let seeds = parse_seeds(args.seeds.as_deref().unwrap_or_default())?;
    let started = Instant::now();
    let summary = S::many(seeds.clone());
    let elapsed_s = started.elapsed().as_secs_f64();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "{} seeds in {elapsed_s:.1} s: {}",
            seeds.end - seeds.start,
            S::summary_line(&summary)
        );
        for (seed, problem) in S::failures(&summary) {
            println!(
                "  seed {seed}: {problem}\n    replay: tagma sim {} --seed {seed}",
                S::FLAG
            );
        }
    }
    if S::failed(&summary) {
        bail!("execute-verify seeds failed");
    }
    Ok(())
}

/// `--seeds A..B` (B excluded, A < B).
fn parse_seeds(range: &str) -> Result<std::ops::Range<u64>> {
    let (a, b) = range
        .split_once("..")
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .filter(|(a, b)| a < b)
        .with_context(|| format!("--seeds must look like 0..1000, not {range:?}"))?;
    Ok(a..b)
}
