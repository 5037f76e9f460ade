//! `tagma chaos`: checks its arguments, runs the chosen failure scenario
//! ([`crate::chaos`], [`crate::tour`] for the reconfiguration tour, [`crate::slow_disk`] for
//! the stalled disks) and prints the verdict.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use tagma_core::Mode;

use crate::chaos::{ChaosOptions, Scenario};

/// `tagma chaos`.
#[derive(clap::Args)]
pub struct ChaosArgs {
    /// How the servers replicate: ordered (every scenario but primary-crash,
    /// lying-executor and racy-service) or eve (execute-verify: primary-crash, with a pair
    /// of real processes; lying-executor and racy-service, in the deterministic BFT
    /// deployment).
    #[arg(long, value_enum, default_value_t = super::demo::ReplicationMode::Ordered)]
    pub mode: super::demo::ReplicationMode,
    /// With --mode eve --scenario primary-crash: the BFT deployment (u = r = 1: three
    /// executor and four verifier processes) instead of a primary-backup pair; the primary
    /// executor is killed, restarted (it fetches the state), then the next primary.
    #[arg(long)]
    pub bft: bool,
    /// With --mode eve --scenario lying-executor: run across real processes (u = r = 2: five
    /// executors, one serving forged state and one lying about tokens and replies, and seven
    /// verifiers) under the checked key-value workload, killing and restarting an executor
    /// so that it fetches the state past the forger.
    #[arg(long)]
    pub processes: bool,
    /// kill-all: SIGKILL every replica under load and restart them all from disk;
    /// lagging-replica: stop one follower for --down-s under load, restart it, time its
    /// catch-up; corrupt-log / corrupt-checkpoint / corrupt-both: damage the log, the newest
    /// checkpoint or both of --damaged replicas while all are stopped; wipe-disk: delete
    /// their data directories while all are stopped; lying-disk: replace their newest
    /// checkpoint by a state never ordered; reconfig-tour: a replica joins, the leader
    /// crashes and restarts, the joiner leaves, with throughput sampled every second
    /// (--after-s between events); slow-disk: the disk of a follower, then of the leader,
    /// stalls for --down-s each under load, then recovers (throughput during and after,
    /// time to catch up). With --mode eve: primary-crash (a pair of real processes; the
    /// primary is killed, later the new one too); lying-executor and racy-service (the
    /// deterministic BFT deployment for --before-s + --down-s + --after-s of virtual time:
    /// lies sent and refused; races manifested, detected, repaired and undetected, for an
    /// injected divergence and for a real race with verification alone, with the extra
    /// protection mode and with the executors' access check).
    #[arg(long, value_enum)]
    pub scenario: Scenario,
    /// The load: counters of the key-value service, or the coordination service's items
    /// put and taken, with operations waiting and leases running across the fault
    /// (kill-all, lagging-replica, corrupt-log, corrupt-checkpoint, corrupt-both, wipe-disk).
    #[arg(long, value_enum, default_value_t = super::demo::DemoService::Kv)]
    pub service: super::demo::DemoService,
    /// Crash-fault-tolerant mode, n = 2f+1 (the default is Byzantine, n = 3f+1).
    #[arg(long)]
    pub cft: bool,
    /// Faults tolerated, 1 to 5: the cluster has 3f+1 replicas (2f+1 with --cft).
    #[arg(long, default_value_t = 1)]
    pub f: usize,
    /// corrupt-*, wipe-disk and lying-disk: how many replicas' disks to damage, from 1 to f
    /// (the last ones; replica 0 keeps its disk).
    #[arg(long, default_value_t = 1)]
    pub damaged: usize,
    /// Concurrent clients, each incrementing its own counter.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Seconds of load before the fault.
    #[arg(long, default_value_t = 2.0)]
    pub before_s: f64,
    /// lagging-replica: seconds the replica stays down; slow-disk: seconds each disk
    /// stalls; the network scenarios: seconds each fault lasts [default: 3; with --netns
    /// 20, and 60 for flapping].
    #[arg(long)]
    pub down_s: Option<f64>,
    /// Seconds of load after recovery [default: 2; with --netns 5].
    #[arg(long)]
    pub after_s: Option<f64>,
    /// Run each replica, and the clients, on a host of its own: a Linux network namespace
    /// (root only), all joined by tagma's link emulator, which the network scenarios
    /// (partition-leader, partition-minority, partition-majority-side, asymmetric,
    /// flapping, lossy, slow-replica) cut, make lossy or slow. The history of a contending
    /// load is always recorded (to --history, or a file in the temporary directory).
    #[arg(long)]
    pub netns: bool,
    /// With --netns: the seed of the emulator's random faults (loss, duplication, delays)
    /// and of the flapping link's timing.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// racy-service: the real race's window between the counter's read and its write, in
    /// microseconds of CPU work. Longer windows make the race show alike on every executor
    /// more often (which no comparison of executions can see).
    #[arg(long, default_value_t = 20)]
    pub race_window_us: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Also run clients that contend on a few shared keys (get, put, append, delete, cas)
    /// through the scenario, write their history to FILE (one JSON object per operation,
    /// the format linearizability checkers read) and check it; the run fails if it is not
    /// linearizable. Scenarios of the ordered mode on the key-value store.
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// reconfig-tour, primary-crash and the network scenarios: draw the throughput timeline
    /// with the events marked into this PNG.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
}

/// `tagma chaos`.
pub fn run(args: ChaosArgs) -> Result<()> {
    let secs = |what: &str, s: f64| {
        if s.is_finite() && s >= 0.0 {
            Ok(Duration::from_secs_f64(s))
        } else {
            bail!("--{what} must be a number of seconds ≥ 0, got {s}")
        }
    };
    let (down_default, after_default) = match args.scenario {
        Scenario::Flapping => (60.0, 5.0),
        s if s.is_network() => (20.0, 5.0),
        _ => (3.0, 2.0),
    };
    let opts = ChaosOptions {
        mode: if args.cft { Mode::Cft } else { Mode::Bft },
        f: args.f,
        damaged: args.damaged,
        clients: args.clients,
        before: secs("before-s", args.before_s)?,
        down: secs("down-s", args.down_s.unwrap_or(down_default))?,
        after: secs("after-s", args.after_s.unwrap_or(after_default))?,
        history: args.history.clone(),
    };
    if args.netns != args.scenario.is_network() {
        bail!(
            "the network scenarios (partition-leader, partition-minority, \
             partition-majority-side, asymmetric, flapping, lossy, slow-replica) run with \
             --netns, and --netns runs only them: {} {}",
            args.scenario.name(),
            if args.netns {
                "needs no separate hosts — leave out --netns"
            } else {
                "needs separate hosts — pass --netns (as root)"
            }
        );
    }
    if args.netns {
        if args.service != super::demo::DemoService::Kv
            || args.mode != super::demo::ReplicationMode::Ordered
        {
            bail!(
                "--netns runs the key-value store in the ordered mode: leave out --service and --mode"
            );
        }
        opts.check(args.scenario)?;
        if !args.json {
            eprintln!(
                "running {} on {} {} replicas (f = {}), each on a host of its own, with durability = \"fsync\"…",
                args.scenario.name(),
                opts.n(),
                opts.mode,
                opts.f
            );
        }
        let net = crate::chaos_netns::NetOptions { seed: args.seed };
        let report = crate::chaos_netns::run(&super::tagma_exe()?, args.scenario, &opts, &net)?;
        if let Some(path) = &args.plot {
            tagma_bench::plot::draw(&report.chart(), path)?;
            if !args.json {
                eprintln!("wrote {}", path.display());
            }
        }
        return print_verdict(args.json, &report, report.table(), report.passed());
    }
    if args.history.is_some()
        && (args.scenario.is_eve() || args.service != super::demo::DemoService::Kv)
    {
        bail!(
            "--history records a key-value load beside the scenarios of the ordered mode: \
             leave out --mode eve and --service space"
        );
    }
    if (args.mode == super::demo::ReplicationMode::Eve) != args.scenario.is_eve() {
        bail!(
            "primary-crash, lying-executor and racy-service are execute-verify's scenarios, \
             and execute-verify has no other: pass --mode eve with one of them, or leave out \
             --mode eve"
        );
    }
    if matches!(
        args.scenario,
        Scenario::LyingExecutor | Scenario::RacyService
    ) {
        if args.plot.is_some() {
            bail!(
                "--plot draws the primary-crash timeline; {} has no plot",
                args.scenario.name()
            );
        }
        if args.processes {
            if args.scenario == Scenario::RacyService {
                bail!(
                    "racy-service runs in the deterministic deployment only — fix: leave out \
                     --processes"
                );
            }
            return lying_processes(&args, &opts);
        }
        let load_ms = (opts.before + opts.down + opts.after).as_millis() as u64;
        if args.scenario == Scenario::RacyService {
            let report = crate::chaos_eve_race::run(load_ms.max(1_000), args.race_window_us, 1);
            return print_verdict(args.json, &report, report.table(), report.passed());
        }
        let report = crate::chaos_eve::run(load_ms.max(1_000), 1);
        return print_verdict(args.json, &report, report.table(), report.passed());
    }
    if args.bft && args.scenario != Scenario::PrimaryCrash {
        bail!(
            "--bft chooses the deployment of --mode eve --scenario primary-crash (lying-executor \
             and racy-service always run the BFT deployment)"
        );
    }
    if args.scenario == Scenario::PrimaryCrash {
        return primary_crash(&args, &opts);
    }
    opts.check(args.scenario)?;
    let exe = super::tagma_exe()?;
    if !args.json {
        eprintln!(
            "running {} on a local {} cluster of {} replicas (f = {}) with durability = \"fsync\"…",
            args.scenario.name(),
            opts.mode,
            opts.n(),
            opts.f
        );
    }
    if args.scenario == Scenario::ReconfigTour {
        let report = crate::tour::run(&exe, &opts)?;
        if let Some(path) = &args.plot {
            tagma_bench::plot::draw(&report.chart(), path)?;
            if !args.json {
                eprintln!("wrote {}", path.display());
            }
        }
        return print_verdict(args.json, &report, report.table(), report.passed());
    }
    if args.scenario == Scenario::SlowDisk {
        let report = crate::slow_disk::run(&exe, &opts)?;
        return print_verdict(args.json, &report, report.table(), report.passed());
    }
    if args.plot.is_some() {
        bail!(
            "--plot draws the reconfig-tour and primary-crash timelines; the other scenarios have no plot"
        );
    }
    if args.service == super::demo::DemoService::Space {
        let report = crate::chaos_space::run(&exe, args.scenario, &opts)?;
        return print_verdict(args.json, &report, report.table(), report.passed());
    }
    let report = crate::chaos::run(&exe, args.scenario, &opts)?;
    print_verdict(args.json, &report, report.table(), report.passed())
}

/// The run of an execute-verify crash plan (primary killed, restarted, the next one
/// killed) with the timing of `opts`.
fn crash_run(
    opts: &ChaosOptions,
    threads: usize,
    bft: Option<(usize, usize)>,
    liars: Vec<(usize, String)>,
) -> Result<tagma_bench::eve_pair::PairRunOptions> {
    if opts.clients == 0 {
        bail!("--clients must be at least 1");
    }
    Ok(tagma_bench::eve_pair::PairRunOptions {
        clients: opts.clients,
        before_s: opts.before.as_secs_f64(),
        crash: Some(tagma_bench::eve_pair::CrashTimes {
            down_s: opts.down.as_secs_f64(),
            after_s: opts.after.as_secs_f64(),
        }),
        threads,
        takeover_ms: 500,
        bft,
        liars,
        keep: false,
    })
}

/// `tagma chaos --mode eve --scenario primary-crash`.
fn primary_crash(args: &ChaosArgs, opts: &ChaosOptions) -> Result<()> {
    let run = crash_run(opts, 2, args.bft.then_some((1, 1)), Vec::new())?;
    if !args.json {
        eprintln!(
            "killing the primary of an execute-verify {} under load…",
            if args.bft { "BFT deployment" } else { "pair" }
        );
    }
    let report = tagma_bench::eve_pair::run(&super::tagma_exe()?, &run)?;
    if let Some(path) = &args.plot {
        tagma_bench::plot::draw(&report.chart(), path)?;
        if !args.json {
            eprintln!("wrote {}", path.display());
        }
    }
    print_verdict(args.json, &report, report.table(), report.ok())
}

/// `tagma chaos --mode eve --scenario lying-executor --processes`.
fn lying_processes(args: &ChaosArgs, opts: &ChaosOptions) -> Result<()> {
    // Executor 0, restarted, asks executor 1 for the state first.
    let liars = vec![(1, "state".into()), (4, "tokens,replies".into())];
    let run = crash_run(opts, 1, Some((2, 2)), liars)?;
    if !args.json {
        eprintln!(
            "five executors (two lying) and seven verifiers under load; executor 0 killed, \
             restarted, then executor 1…"
        );
    }
    let report = tagma_bench::eve_pair::run(&super::tagma_exe()?, &run)?;
    let passed = report.ok() && report.forged_states_refused > 0;
    print_verdict(args.json, &report, report.table(), passed)
}

/// Prints a report (one JSON object, or its table) and exits with 1 if it did not pass.
fn print_verdict(
    json: bool,
    report: &impl serde::Serialize,
    table: String,
    passed: bool,
) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        println!("{table}");
    }
    if !passed {
        std::process::exit(1);
    }
    Ok(())
}
