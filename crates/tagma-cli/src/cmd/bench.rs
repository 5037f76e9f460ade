//! `tagma bench` and its subcommands: arguments for [`tagma_bench`]'s benchmarks.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use tagma_bench::replicated::BenchOptions;
use tagma_bench::sweep::Sweep;
use tagma_core::config::Durability;

use super::service::{ExecArgs, PolicyArg, ServiceKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecServiceArg {
    List,
    TuplespaceTs1,
    TuplespaceTs2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecSweepArg {
    /// 0, 5, 10, 25, 50, 75, 100 % conflicting requests at --threads.
    Conflict,
    /// 1, 2, 4, 8 (and 16 with enough cores) threads at --conflict-pct.
    Threads,
}

#[derive(clap::Subcommand, Clone)]
pub enum BenchWhat {
    /// Measure the execution stage alone: decided batches of pre-generated operations
    /// through the sequential, barrier and dependency-graph schedulers, each on a fresh
    /// copy of the same state; reports throughput and speedup over sequential execution
    /// measured in the same invocation, and checks that every policy reaches sequential
    /// execution's state.
    Exec {
        /// list: a linked list of integers; tuplespace-ts1/-ts2: tuples of 1-10 fields,
        /// out/inp conflicting with everything (ts1) or within their tuple size (ts2).
        #[arg(long, value_enum, default_value_t = ExecServiceArg::List)]
        service: ExecServiceArg,
        /// Share of conflicting requests (list: add/remove; tuple space: out/inp), percent.
        #[arg(long, default_value_t = 0)]
        conflict_pct: u32,
        /// Worker threads of the parallel policies.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Policies to run besides sequential (repeatable) [default: barrier and graph].
        #[arg(long, value_enum)]
        policy: Vec<PolicyArg>,
        /// Requests per policy.
        #[arg(long, default_value_t = 4000)]
        requests: usize,
        /// Requests per decided batch.
        #[arg(long, default_value_t = 200)]
        batch: usize,
        /// List entries, or tuples, before the run (10k makes short list requests).
        #[arg(long, default_value_t = 100_000)]
        size: usize,
        /// Rounds (every policy once each, in turn, on a fresh state); each figure is the
        /// policy's median round.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Run every step of a sweep instead of one configuration.
        #[arg(long, value_enum)]
        sweep: Option<ExecSweepArg>,
        /// With --sweep: draw the speedup over sequential execution per policy into this PNG.
        #[arg(long, value_name = "FILE.png", requires = "sweep")]
        plot: Option<PathBuf>,
        /// One JSON object per policy instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Measure execute-verify replication (Eve) on its micro-benchmark: each request works
    /// for --work-us and updates one object; every executor of the mode mixes each batch
    /// into parallel batches run on --threads threads, tokens are verified after each
    /// batch (a batch without agreement is rolled back and run again in order); reports
    /// throughput and speedup over sequential execution measured in the same invocation,
    /// parallel batches per batch, rollbacks, and whether the executors' states are equal.
    Eve(super::bench_eve::EveArgs),
    /// redis-benchmark, unmodified, against `tagma gateway` in front of a local BFT cluster
    /// (n = 4) and against a real redis-server started beside it: SET and GET at each
    /// pipeline depth, with `ratio_vs_redis` (needs redis-server and redis-benchmark).
    Gateway {
        /// Concurrent connections of redis-benchmark.
        #[arg(long, default_value_t = 50)]
        connections: usize,
        /// Pipeline depths, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,16")]
        pipelines: Vec<usize>,
        /// Requests of each test at depth 1 (a depth of P runs P times as many).
        #[arg(long, default_value_t = 20_000)]
        requests: usize,
        /// Bytes of each SET value.
        #[arg(long, default_value_t = 100)]
        value_bytes: usize,
        /// One JSON object on stdout instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// A long run that shows nothing grows: a local BFT cluster (n = 4, durability on)
    /// under a mixed key-value load (puts of 100-1,000 bytes, gets, increments over a
    /// bounded key space), with a fault every --fault-every-s (in turn: a follower killed
    /// and restarted, the leader paused 3 s for a leader change, a follower down 20 s so
    /// that it needs a state transfer), sampling every replica's resident memory, open
    /// descriptors, threads and data directory after a warm-up; reports `rss_growth_pct`
    /// (first quarter to last, replicas never restarted) and the descriptor and thread
    /// growth.
    Soak {
        /// Length of the run, in minutes.
        #[arg(long, default_value_t = 10.0)]
        minutes: f64,
        /// Seconds between two faults (at least 25).
        #[arg(long, default_value_t = 60.0)]
        fault_every_s: f64,
        /// Seconds between two samples of the replicas.
        #[arg(long, default_value_t = 5.0)]
        sample_s: f64,
        /// Concurrent clients.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Keys the load writes (all written once before the first sample).
        #[arg(long, default_value_t = 10_000)]
        keys: usize,
        /// Minutes of unmeasured load before the first sample and fault (caches and buffers
        /// reach their working size), on top of --minutes.
        #[arg(long, default_value_t = 10.0)]
        warmup_min: f64,
        /// Draw every replica's resident memory over time, the faults marked, into this PNG.
        #[arg(long, value_name = "FILE.png")]
        plot: Option<PathBuf>,
        /// One JSON object on stdout instead of the table (with every sample).
        #[arg(long)]
        json: bool,
    },
    /// Time how long a wiped replica takes to get a large state back by state transfer
    /// (a local BFT cluster, n = 4, durability on, clients writing meanwhile): reports the
    /// time and MB/s from its restart until it caught up.
    StateTransfer {
        /// Size of the key-value state to fill the cluster with, in MB.
        #[arg(long, default_value_t = 50)]
        state_mb: u64,
        /// Instances between two checkpoints of a replica (the others must have checkpointed
        /// the full state twice before the wipe).
        #[arg(long, default_value_t = 400)]
        checkpoint_period: u64,
        /// One JSON object on stdout instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The coordination service's inserts (tuples of four strings, --payload bytes in all,
    /// 4 replicas) for each client count, with and without durability measured alternately
    /// (their ratio per client count), throughput and mean/p50/p99 latency; then the
    /// execution stage alone on mixed out/rdp/inp/cas over many spaces, one thread against
    /// several.
    Space {
        /// Client counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
        clients: Vec<usize>,
        /// Durability settings, comma-separated (both: alternating windows, and the ratio).
        #[arg(long, value_enum, value_delimiter = ',', default_value = "none,fsync")]
        durability: Vec<DurabilityArg>,
        /// Bytes of each tuple's four strings together.
        #[arg(long, default_value_t = 1024)]
        payload: usize,
        /// Load before each measured window, in seconds.
        #[arg(long, default_value_t = 2.0)]
        warmup_s: f64,
        /// Each measured window, in seconds.
        #[arg(long, default_value_t = 5.0)]
        duration_s: f64,
        /// Alternating windows per cluster; each figure is the median window.
        #[arg(long, default_value_t = 1)]
        rounds: u32,
        /// The execution part: spaces of the mixed workload.
        #[arg(long, default_value_t = 16)]
        spaces: usize,
        /// The execution part: requests per run, in decided batches of 1,024 (the default
        /// batch_size_max).
        #[arg(long, default_value_t = 200_000)]
        exec_requests: usize,
        /// The execution part: threads of the parallel run.
        #[arg(long, default_value_t = 2)]
        exec_threads: usize,
        /// One JSON object on stdout instead of the table.
        #[arg(long)]
        json: bool,
        /// Draw inserts/s per client count into this PNG.
        #[arg(long, value_name = "FILE.png")]
        plot: Option<PathBuf>,
    },
    /// The coordination service back after every replica stopped: for each state size, a
    /// durable 4-replica cluster filled with tuples, then every replica restarted with all
    /// disks intact, with one replica's log damaged, and with one replica's newest
    /// checkpoint damaged; reports the time until a new operation completes and until every
    /// replica has recovered.
    SpaceRecovery {
        /// State sizes in MB, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "0,50,100")]
        state_mb: Vec<u64>,
        /// Bytes of each tuple's four strings together.
        #[arg(long, default_value_t = 1024)]
        tuple_bytes: usize,
        /// Instances between two checkpoints of a replica.
        #[arg(long, default_value_t = 1000)]
        checkpoint_period: u64,
        /// One JSON object per state size instead of the table.
        #[arg(long)]
        json: bool,
        /// Draw the recovery times per state size into this PNG.
        #[arg(long, value_name = "FILE.png")]
        plot: Option<PathBuf>,
    },
}

/// `tagma bench`.
#[derive(clap::Args, Clone)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: Option<BenchWhat>,
    /// `micro`: empty requests with replies of --payload bytes; `kv`: puts (or, with
    /// --unordered, gets) on the key-value service; `list`: a linked list executed in
    /// parallel (--exec-threads, --exec-policy), --conflict-pct of add/remove among
    /// get/contains; `tuplespace-*`: the tuple space, --conflict-pct of out/inp; `space`:
    /// the coordination service, inserts of tuples of four strings (--payload bytes), with
    /// --space-bytes-max and --space-tuples-max raised to 8 GiB and 100 million tuples unless
    /// given (see also `tagma bench space`).
    #[arg(long, value_enum, default_value_t = ServiceKind::Micro, alias = "service")]
    pub workload: ServiceKind,
    /// With --workload list or tuplespace-*: share of conflicting requests (add/remove,
    /// out/inp), percent.
    #[arg(long, default_value_t = 0)]
    pub conflict_pct: u32,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Request and reply size in bytes (e.g. 0, 100, 1024, 4096).
    #[arg(long, default_value_t = 0)]
    pub payload: usize,
    /// Crash-fault-tolerant mode, n = 2f+1 (the default is Byzantine, n = 3f+1).
    #[arg(long)]
    pub cft: bool,
    /// Faults tolerated.
    #[arg(long, default_value_t = 1)]
    pub f: u32,
    /// Concurrent closed-loop logical clients (carried by one proxy per 32).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Clients sign every request (Ed25519) instead of MAC authenticators.
    #[arg(long)]
    pub signed: bool,
    /// Threads that verify client signatures in each replica (`limits.signature_threads`)
    /// [default: the configuration's, 2].
    #[arg(long)]
    pub signature_threads: Option<usize>,
    /// How long the leader may hold its next batch while requests arrive to fill it
    /// (`batch.fill_wait_ms`; 0 proposes at once, as soon as the previous instance decided)
    /// [default: the configuration's, 2].
    #[arg(long)]
    pub fill_wait_ms: Option<u64>,
    /// Send read-only requests without ordering.
    #[arg(long)]
    pub unordered: bool,
    /// Seconds of load before each measurement window [default: 2, or 1 with --sweep].
    #[arg(long)]
    pub warmup_s: Option<f64>,
    /// Seconds of each measurement window [default: 5, or 3 with --sweep].
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Run a series of configurations, one report each: `latency` (payloads
    /// 0/100/1024/4096 × 8/32/128 clients: latency against throughput), `f` (f = 1, 2,
    /// bft and cft: throughput against f) or `sigthreads` (--signed with 1/2/4 signature
    /// threads: throughput against threads).
    #[arg(long, value_enum)]
    pub sweep: Option<SweepKind>,
    /// With --sweep f: also run f = 3 (n = 10 bft replicas; slow on a small machine).
    #[arg(long, requires = "sweep")]
    pub with_f3: bool,
    /// With --sweep: draw the series into this PNG file.
    #[arg(long, requires = "sweep", value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// With --sweep and --plot: draw the series from the reports in this file (the output
    /// of an earlier --json sweep, one object a line) instead of running anything.
    #[arg(long, requires = "plot", value_name = "FILE.jsonl")]
    pub from_json: Option<PathBuf>,
    /// `fsync`: each replica flushes its votes before its ACCEPTs and logs every decided
    /// batch, flushed in groups while it executes (`[storage] durability`); the report then
    /// also measures the same configuration without durability, in the same invocation,
    /// and gives `ratio_vs_no_durability`.
    #[arg(long, value_enum, default_value_t = DurabilityArg::None)]
    pub durability: DurabilityArg,
    /// With --durability fsync: measurement windows of each configuration, alternating
    /// between the durable cluster and the one without durability (both kept running), so
    /// that a noisy machine drifts over both alike; the report takes each one's median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub durability_rounds: u32,
    /// Skip the unreplicated baseline (its figures are then 0 and `unreplicated_run` false).
    #[arg(long)]
    pub no_baseline: bool,
    /// Print one JSON object per configuration instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::ValueEnum, Clone, Copy)]
pub enum SweepKind {
    /// Latency against throughput, one line per payload.
    Latency,
    /// Throughput against f, bft and cft.
    F,
    /// Throughput against signature-verification threads.
    Sigthreads,
}

impl SweepKind {
    fn sweep(self) -> Sweep {
        match self {
            SweepKind::Latency => Sweep::Latency,
            SweepKind::F => Sweep::F,
            SweepKind::Sigthreads => Sweep::SignatureThreads,
        }
    }
}

/// `--durability`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilityArg {
    None,
    Fsync,
}

impl DurabilityArg {
    fn config(self) -> Durability {
        match self {
            DurabilityArg::None => Durability::None,
            DurabilityArg::Fsync => Durability::Fsync,
        }
    }
}

/// `tagma bench exec`.
fn exec(what: BenchWhat) -> Result<()> {
    let BenchWhat::Exec {
        service,
        conflict_pct,
        threads,
        policy,
        requests,
        batch,
        size,
        rounds,
        sweep,
        plot,
        json,
    } = what
    else {
        bail!("not `tagma bench exec`");
    };
    use tagma_bench::exec::{ExecOptions, ExecService, ExecSweep};
    let opts = ExecOptions {
        service: match service {
            ExecServiceArg::List => ExecService::List,
            ExecServiceArg::TuplespaceTs1 => ExecService::TuplespaceTs1,
            ExecServiceArg::TuplespaceTs2 => ExecService::TuplespaceTs2,
        },
        conflict_pct,
        threads,
        policies: if policy.is_empty() {
            vec![
                tagma_parallel::Policy::Barrier,
                tagma_parallel::Policy::Graph,
            ]
        } else {
            policy.into_iter().map(PolicyArg::policy).collect()
        },
        requests,
        batch,
        size,
        seed: 0x7a6d_a000,
        rounds,
    };
    let sweep = sweep.map(|s| match s {
        ExecSweepArg::Conflict => ExecSweep::Conflict,
        ExecSweepArg::Threads => ExecSweep::Threads,
    });
    tagma_bench::exec::run_command(&opts, sweep, plot.as_deref(), json)
}

/// `tagma bench state-transfer`.
fn state_transfer(state_mb: u64, checkpoint_period: u64, json: bool) -> Result<()> {
    let opts = tagma_bench::state_transfer::TransferOptions {
        state_mb,
        checkpoint_period,
        json,
    };
    let report = tagma_bench::state_transfer::run(&super::tagma_exe()?, &opts)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.table());
    }
    if !report.state_digests_equal {
        bail!("the replicas' state digests differ after the transfer");
    }
    Ok(())
}

/// `tagma bench`: one configuration, or with `--sweep` each configuration of a series (and
/// with `--plot` its chart); or one of the subcommands.
pub fn run(args: BenchArgs) -> Result<()> {
    match args.what.clone() {
        Some(what @ BenchWhat::Exec { .. }) => return exec(what),
        Some(BenchWhat::Eve(eve)) => return super::bench_eve::run(eve),
        Some(BenchWhat::Gateway {
            connections,
            pipelines,
            requests,
            value_bytes,
            json,
        }) => {
            let opts = tagma_bench::gateway_bench::GatewayBenchOptions {
                connections,
                pipelines,
                requests,
                value_bytes,
            };
            let report = tagma_bench::gateway_bench::run(&super::tagma_exe()?, &opts)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", tagma_bench::gateway_bench::table(&report));
            }
            return Ok(());
        }
        Some(BenchWhat::StateTransfer {
            state_mb,
            checkpoint_period,
            json,
        }) => return state_transfer(state_mb, checkpoint_period, json),
        Some(BenchWhat::Soak {
            minutes,
            fault_every_s,
            sample_s,
            clients,
            keys,
            warmup_min,
            plot,
            json,
        }) => {
            let opts = tagma_bench::soak::SoakOptions {
                minutes,
                fault_every_s,
                sample_s,
                clients,
                keys,
                warmup_min,
                progress: !json,
            };
            let report = tagma_bench::soak::run(&super::tagma_exe()?, &opts)?;
            if let Some(path) = &plot {
                tagma_bench::plot::draw(&report.chart(), path)?;
                if !json {
                    eprintln!("wrote {}", path.display());
                }
            }
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.table());
            }
            if !report.passed() {
                std::process::exit(1);
            }
            return Ok(());
        }
        Some(BenchWhat::Space {
            clients,
            durability,
            payload,
            warmup_s,
            duration_s,
            rounds,
            spaces,
            exec_requests,
            exec_threads,
            json,
            plot,
        }) => {
            let opts = tagma_bench::space_bench::SpaceBenchOptions {
                clients,
                durability: durability.iter().map(|d| d.config()).collect(),
                payload,
                warmup_s,
                duration_s,
                rounds,
                spaces,
                exec_requests,
                exec_threads,
                json,
                plot,
            };
            let report = tagma_bench::space_bench::run(&super::tagma_exe()?, &opts)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", tagma_bench::space_bench::table(&report));
            }
            return Ok(());
        }
        Some(BenchWhat::SpaceRecovery {
            state_mb,
            tuple_bytes,
            checkpoint_period,
            json,
            plot,
        }) => {
            let opts = tagma_bench::space_recovery::SpaceRecoveryOptions {
                state_mb,
                tuple_bytes,
                checkpoint_period,
                json,
                plot,
            };
            let rows = tagma_bench::space_recovery::run(&super::tagma_exe()?, &opts)?;
            if json {
                for row in &rows {
                    println!("{}", serde_json::to_string(row)?);
                }
            } else {
                print!("{}", tagma_bench::space_recovery::table(&rows));
            }
            if rows.iter().any(|r| !r.state_digests_equal) {
                anyhow::bail!("the replicas' states differ after recovery");
            }
            return Ok(());
        }
        None => {}
    }
    let mut exec = args.exec.clone();
    let defaults = tagma_space_service::SpaceLimits::default();
    if args.workload == ServiceKind::Space {
        if exec.space_bytes_max == defaults.space_bytes_max {
            exec.space_bytes_max = tagma_bench::requests::BENCH_SPACE_BYTES_MAX;
        }
        if exec.space_tuples_max == defaults.tuples_per_space_max {
            exec.space_tuples_max = tagma_bench::requests::BENCH_SPACE_TUPLES_MAX;
        }
    }
    let opts = BenchOptions {
        workload: args.workload.workload().with_context(|| {
            "eve-verifier has no benchmark workload — fix: measure execute-verify with `tagma bench eve`"
        })?,
        conflict_pct: args.conflict_pct,
        state_size: args.exec.state_size,
        replica_args: exec.to_args(),
        payload: args.payload,
        cft: args.cft,
        f: args.f,
        clients: args.clients,
        signed: args.signed,
        signature_threads: args.signature_threads,
        fill_wait_ms: args.fill_wait_ms,
        unordered: args.unordered,
        warmup_s: args.warmup_s,
        duration_s: args.duration_s,
        sweep: args.sweep.map(SweepKind::sweep),
        with_f3: args.with_f3,
        plot: args.plot,
        from_json: args.from_json,
        durability: args.durability.config(),
        durability_rounds: args.durability_rounds,
        no_baseline: args.no_baseline,
        json: args.json,
    };
    tagma_bench::replicated::run(&super::tagma_exe()?, &opts)
}
