//! Seed-range simulation (CI) of the key-value store, of the coordination service and of
//! execute-verify's primary-backup pair and BFT deployment, determinism, and the regression
//! seeds.
//!
//! `TAGMA_SIM_SEEDS=N` changes how many seeds the key-value range test runs (default
//! [`CI_SEEDS`]), `TAGMA_SIM_SPACE_SEEDS=N` the coordination service's (default
//! [`CI_SPACE_SEEDS`]), `TAGMA_SIM_EVE_SEEDS=N` the execute-verify pair's (default
//! [`CI_EVE_SEEDS`]), `TAGMA_SIM_EVE_BFT_SEEDS=N` the BFT deployment's (default
//! [`CI_EVE_BFT_SEEDS`]); `TAGMA_SIM_START=S` where they start.

use std::time::Instant;

use tagma_core::Mode;
use tagma_sim::{SeedReport, SimOptions, SimService, Summary, parse_regression_line, run_seed};

/// Seeds the CI range test runs: spread evenly over BFT/CFT × f = 1..=3.
const CI_SEEDS: u64 = 1_000;
/// Seeds of the coordination service the CI range test runs (the same configurations).
const CI_SPACE_SEEDS: u64 = 180;

/// Seeds of execute-verify's primary-backup pair the CI range test runs (seeds 7, 16, 22
/// and 29 among them: each found a bug; 171, 241 and 660 run besides).
const CI_EVE_SEEDS: u64 = 120;
/// Execute-verify BFT seeds the CI range test runs.
const CI_EVE_BFT_SEEDS: u64 = 60;

/// The configuration seed `seed` runs under in the range test.
fn ci_options(seed: u64) -> SimOptions {
    let (mode, f) = [
        (Mode::Bft, 1),
        (Mode::Cft, 1),
        (Mode::Bft, 2),
        (Mode::Cft, 2),
        (Mode::Bft, 3),
        (Mode::Cft, 3),
    ][(seed % 6) as usize];
    SimOptions {
        mode: Some(mode),
        f: Some(f),
        // A third of the seeds change the view during the faults: they start with a spare
        // replica and remove one, or (durable seeds, half of the time) add a dormant one, or
        // (f ≥ 2, half of the others) lower f.
        reconfig: if (seed / 6).is_multiple_of(3) { 2 } else { 0 },
        // Another third have leaders hold proposals for their batches to fill.
        batch_fill_wait_ms: if (seed / 6) % 3 == 1 { 2 } else { 0 },
        ..SimOptions::default()
    }
}

/// [`ci_options`] with every replica running the coordination service.
fn ci_space_options(seed: u64) -> SimOptions {
    SimOptions {
        service: SimService::Space,
        ..ci_options(seed)
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn describe(summary: &Summary) -> String {
    let mut out = format!(
        "{} seeds: {} with violations, {} liveness failures; exercised {:?}\n",
        summary.seeds_run,
        summary.violations,
        summary.liveness_failures,
        summary.behaviours_exercised
    );
    for f in summary.failures.iter().take(25) {
        let first: String = f.first_violation.chars().take(400).collect();
        out.push_str(&format!(
            "  seed {}: {first}\n    replay: {}\n",
            f.seed, f.replay
        ));
    }
    out
}

#[test]
#[allow(clippy::disallowed_methods)] // wall-clock only to print seeds per second
fn seed_range_holds_every_invariant() {
    let start = env_u64("TAGMA_SIM_START", 0);
    let count = env_u64("TAGMA_SIM_SEEDS", CI_SEEDS);
    let began = Instant::now();
    let mut summary = Summary::default();
    for seed in start..start + count {
        let options = ci_options(seed);
        let report = run_seed(seed, &options);
        summary.add(&report, &options);
    }
    let elapsed_s = began.elapsed().as_secs_f64();
    eprintln!(
        "{} seeds in {elapsed_s:.1} s ({:.1} seeds/s), {} events, {} operations, {} instances; configurations {:?}",
        summary.seeds_run,
        summary.seeds_run as f64 / elapsed_s,
        summary.events,
        summary.ops_completed,
        summary.decided_instances,
        summary.configurations
    );
    eprintln!("{}", describe(&summary));
    assert!(!summary.failed(), "{}", describe(&summary));
    if count >= CI_SEEDS {
        // The range exercises durable restarts (every replica at once included), recovery
        // from checkpoints and state transfer, not only restarts that keep memory; and disk
        // faults at record level: torn tails cut off, unflushed records that survive a crash,
        // corrupt records detected, a damaged last record cut off; and view changes that
        // remove a replica or add one (which fetches its state), with clients following them;
        // and Byzantine replicas flooding their peers with requests that the answer budget
        // refuses, and leaders timestamping batches beyond the clock-skew bound, refused.
        for counter in [
            "durable_restarts",
            "checkpoints",
            "received_position",
            "state_transfers",
            "chunks_served",
            "torn_tails_cut",
            "unflushed_records_survived",
            "corrupt_logs_detected",
            "flushed_records_cut",
            "view_installs",
            "replicas_left",
            "client_view_changes",
            "joiners_started",
            "joiner_states_installed",
            "f_changes_installed",
            "answers_refused",
            "proposals_timestamped_ahead",
        ] {
            let seen = summary.counters.get(counter).copied().unwrap_or(0);
            assert!(seen > 0, "no {counter} in {count} seeds");
        }
    }
}

#[test]
#[allow(clippy::disallowed_methods)] // wall-clock only to print seeds per second
fn space_seed_range_holds_every_invariant() {
    let start = env_u64("TAGMA_SIM_START", 0);
    let count = env_u64("TAGMA_SIM_SPACE_SEEDS", CI_SPACE_SEEDS);
    let began = Instant::now();
    let mut summary = Summary::default();
    for seed in start..start + count {
        let options = ci_space_options(seed);
        let report = run_seed(seed, &options);
        summary.add(&report, &options);
    }
    let elapsed_s = began.elapsed().as_secs_f64();
    eprintln!(
        "{} coordination-service seeds in {elapsed_s:.1} s, {} operations, {} instances; counters {:?}",
        summary.seeds_run, summary.ops_completed, summary.decided_instances, summary.counters
    );
    assert!(!summary.failed(), "{}", describe(&summary));
    if count >= CI_SPACE_SEEDS {
        // The range takes and leaves jobs, grants, renews, releases and loses the lock, wakes
        // waits with a later insert and times others out (time-only batches among them), and
        // does so across durable restarts, state transfers and view changes.
        for counter in [
            "space_jobs_taken",
            "space_jobs_left",
            "space_queue_empty",
            "space_lock_grants",
            "space_lock_busy",
            "space_lock_renewals",
            "space_lock_releases",
            "space_lock_leases_lost",
            "space_waits_woken",
            "space_waits_timed_out",
            "time_only_batches_decided",
            "durable_restarts",
            "state_transfers",
            "view_installs",
        ] {
            let seen = summary.counters.get(counter).copied().unwrap_or(0);
            assert!(
                seen > 0,
                "no {counter} in {count} coordination-service seeds"
            );
        }
    }
}

#[test]
fn eve_pair_seed_range_holds_every_invariant() {
    let start = env_u64("TAGMA_SIM_START", 0);
    let count = env_u64("TAGMA_SIM_EVE_SEEDS", CI_EVE_SEEDS);
    let summary = tagma_sim::eve_pair::run_seeds(start..start + count);
    eprintln!("execute-verify pair: {summary:?}");
    assert_eq!(
        summary.violations + summary.liveness_failures,
        0,
        "{summary:?}"
    );
    if count >= CI_EVE_SEEDS {
        // The range crashes, pauses and loses messages of both kinds, rolls batches back,
        // takes over and joins.
        assert_eq!(summary.faults_exercised.len(), 6, "{summary:?}");
        assert!(summary.rollbacks > 0 && summary.takeovers > 0 && summary.joins_served > 0);
    }
    // Seeds beyond the range that found bugs (a backup's rollback that dropped a batch
    // committed just before it).
    for seed in [171, 241, 660] {
        let summary = tagma_sim::eve_pair::run_seeds(seed..seed + 1);
        assert_eq!(
            summary.violations + summary.liveness_failures,
            0,
            "{summary:?}"
        );
    }
    // A seed replays alike.
    let again = tagma_sim::eve_pair::run_seed_traced(start + 16).1;
    assert_eq!(tagma_sim::eve_pair::run_seed_traced(start + 16).1, again);
}

#[test]
fn eve_bft_seed_range_holds_every_invariant() {
    let start = env_u64("TAGMA_SIM_START", 0);
    let count = env_u64("TAGMA_SIM_EVE_BFT_SEEDS", CI_EVE_BFT_SEEDS);
    let summary = tagma_sim::eve_bft::run_seeds(start..start + count);
    eprintln!("execute-verify BFT: {summary:?}");
    assert_eq!(
        summary.violations + summary.liveness_failures,
        0,
        "{summary:?}"
    );
    if count >= CI_EVE_BFT_SEEDS {
        // The range lies in every way, crashes, races and rolls back, and repairs what
        // manifested.
        assert!(summary.faults_exercised.len() >= 6, "{summary:?}");
        assert!(summary.lies_sent > 0 && summary.rollbacks > 0 && summary.fetches > 0);
        assert_eq!(summary.repaired, summary.manifested);
        assert!(summary.manifested > 0);
    }
    // A seed replays alike.
    let again = tagma_sim::eve_bft::run_seed_traced(start + 3, true).1;
    assert_eq!(
        tagma_sim::eve_bft::run_seed_traced(start + 3, true).1,
        again
    );
}

#[test]
fn same_seed_same_trace() {
    let runs = (0..12).map(|s| (s, ci_options(s)));
    let space_runs = (0..6).map(|s| (s, ci_space_options(s)));
    for (seed, options) in runs.chain(space_runs) {
        let a = run_seed(seed, &options);
        let b = run_seed(seed, &options);
        assert_eq!(
            a.trace_hash, b.trace_hash,
            "seed {seed} is not deterministic"
        );
        assert_eq!(a.events, b.events);
        // Tracing only observes: the traced run is the same run.
        let traced = run_seed(
            seed,
            &SimOptions {
                trace: true,
                ..options.clone()
            },
        );
        assert_eq!(
            a.trace_hash, traced.trace_hash,
            "seed {seed}: tracing changed the run"
        );
        assert!(!traced.trace.is_empty());
    }
}

#[test]
fn different_seeds_differ() {
    let a = run_seed(1, &ci_options(0));
    let b = run_seed(7, &ci_options(0));
    assert_ne!(a.trace_hash, b.trace_hash);
}

#[test]
fn regression_seeds() {
    let text = include_str!("../regressions.txt");
    let mut failed: Vec<(String, SeedReport)> = Vec::new();
    for line in text.lines() {
        let Some((seed, options)) = parse_regression_line(line).expect("regressions.txt line")
        else {
            continue;
        };
        let report = run_seed(seed, &options);
        if report.failed() {
            failed.push((line.to_string(), report));
        }
    }
    let listing: Vec<String> = failed
        .iter()
        .map(|(line, r)| {
            let first: String = r
                .first_failure()
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect();
            format!("{line}\n    {first}")
        })
        .collect();
    assert!(
        failed.is_empty(),
        "regression seeds failed:\n{}",
        listing.join("\n")
    );
}

#[test]
fn regression_lines_parse_and_round_trip() {
    let (seed, options) =
        parse_regression_line("  42 mode=cft f=2 replicas=5 byzantine=0 flood=0 # why")
            .unwrap()
            .unwrap();
    assert_eq!(seed, 42);
    assert_eq!(options.mode, Some(Mode::Cft));
    assert_eq!(options.flood, Some(false));
    assert_eq!(
        (options.f, options.replicas, options.byzantine_max),
        (Some(2), Some(5), Some(0))
    );
    let line = format!("{seed} {}", options.tokens().join(" "));
    assert_eq!(parse_regression_line(&line).unwrap(), Some((seed, options)));
    assert_eq!(parse_regression_line("# only a comment").unwrap(), None);
    assert!(parse_regression_line("x mode=bft").is_err());
    assert!(parse_regression_line("1 colour=red").is_err());
    assert!(parse_regression_line("1 flood=2").is_err());
    let (_, space) = parse_regression_line("7 service=space reconfig=2")
        .unwrap()
        .unwrap();
    assert_eq!((space.service, space.reconfig), (SimService::Space, 2));
    assert_eq!(space.tokens(), ["reconfig=2", "service=space"]);
    assert!(parse_regression_line("1 service=queue").is_err());
    let (_, fill) = parse_regression_line("9 fill=2").unwrap().unwrap();
    assert_eq!(fill.batch_fill_wait_ms, 2);
    assert_eq!(fill.tokens(), ["fill=2"]);
    assert!(parse_regression_line("1 fill=soon").is_err());
}
