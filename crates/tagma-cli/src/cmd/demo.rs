//! `tagma demo`: arguments for [`tagma_bench::demo`].

use anyhow::Result;
use tagma_bench::demo::DemoOptions;
use tagma_core::Mode;

/// The service `tagma demo` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoService {
    /// The key-value store under a checked mixed workload.
    Kv,
    /// The coordination service: a contended lock, elections whose leaders die, a barrier,
    /// a work queue drained by many workers while the leader replica is killed, and members
    /// whose leases run out; every result checked.
    Space,
}

/// How the servers replicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplicationMode {
    /// Order, then execute: replicas agree on each batch (BFT or CFT), then execute it.
    Ordered,
    /// Execute, then verify: servers execute each batch in parallel and compare what they
    /// reached (the key-value store only): a primary-backup pair (crash faults), or with
    /// --bft executors whose tokens a verifier cluster decides on.
    Eve,
}

/// `tagma demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// How the servers replicate.
    #[arg(long, value_enum, default_value_t = ReplicationMode::Ordered)]
    pub mode: ReplicationMode,
    /// With --mode eve: execution threads of each server.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// With --mode eve: the BFT deployment (u = r = 1: three executors and four verifiers,
    /// each a process) instead of a primary-backup pair.
    #[arg(long)]
    pub bft: bool,
    /// The replicated service to demonstrate.
    #[arg(long, value_enum, default_value_t = DemoService::Kv)]
    pub service: DemoService,
    /// Number of replicas [default: 4 in Byzantine mode, 3 with --cft]. Byzantine mode
    /// needs at least 4 (3f+1 for f = 1), --cft at least 3 (2f+1).
    #[arg(long)]
    pub replicas: Option<usize>,
    /// Crash-fault-tolerant mode (the default is Byzantine fault tolerance).
    #[arg(long)]
    pub cft: bool,
    /// Concurrent closed-loop clients (with --service space: the clients contending for
    /// the lock [default: 50]).
    #[arg(long)]
    pub clients: Option<usize>,
    /// With --service space: items put in the work queue.
    #[arg(long, default_value_t = 10_000)]
    pub items: usize,
    /// With --service space: workers draining the work queue.
    #[arg(long, default_value_t = 20)]
    pub workers: usize,
    /// Length of the measured run, in seconds.
    #[arg(long, default_value_t = 10)]
    pub duration_s: u64,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Keep the cluster directory (printed) instead of deleting it.
    #[arg(long)]
    pub keep: bool,
    /// SIGKILL the leader replica this many seconds into the run and report
    /// `leader_failover_ms`: the time from the kill to the first completion of a request
    /// issued after it.
    #[arg(long)]
    pub kill_leader_at_s: Option<f64>,
    /// The replicas' request timer in milliseconds (`timeouts.request_timeout_ms`), which
    /// bounds how long a failed leader goes unnoticed.
    #[arg(long)]
    pub request_timeout_ms: Option<u64>,
    /// Also serve the Redis protocol next to the cluster for the demo's duration (the
    /// key-value store): connect redis-cli or any Redis client while the workload runs.
    #[arg(long)]
    pub gateway: bool,
    /// Also run clients that contend on a few shared keys (get, put, append, delete, cas),
    /// write their history to FILE (one JSON object per operation, the format
    /// linearizability checkers read) and check it.
    #[arg(long, value_name = "FILE")]
    pub history: Option<std::path::PathBuf>,
    /// Where the gateway listens (with --gateway).
    #[arg(long, default_value = "127.0.0.1:6379")]
    pub gateway_listen: std::net::SocketAddr,
}

/// `tagma demo`.
pub fn run(args: DemoArgs) -> Result<()> {
    if args.mode == ReplicationMode::Eve {
        return eve(&args);
    }
    if args.bft {
        anyhow::bail!("--bft is a deployment of --mode eve: pass --mode eve --bft");
    }
    let mode = if args.cft { Mode::Cft } else { Mode::Bft };
    if (args.gateway || args.history.is_some()) && args.service != DemoService::Kv {
        anyhow::bail!(
            "--gateway and --history are about the key-value store: leave out --service space"
        );
    }
    if args.service == DemoService::Space {
        let opts = tagma_bench::space_demo::SpaceDemoOptions {
            replicas: args.replicas,
            mode,
            lock_clients: args.clients.unwrap_or(50),
            items: args.items,
            workers: args.workers,
            json: args.json,
            keep: args.keep,
            ..Default::default()
        };
        return tagma_bench::space_demo::run(&super::tagma_exe()?, &opts);
    }
    let opts = DemoOptions {
        replicas: args.replicas,
        mode,
        clients: args.clients.unwrap_or(8),
        duration_s: args.duration_s,
        json: args.json,
        keep: args.keep,
        kill_leader_at_s: args.kill_leader_at_s,
        request_timeout_ms: args.request_timeout_ms,
        gateway: args.gateway.then_some(args.gateway_listen),
        history: args.history.clone(),
    };
    tagma_bench::demo::run(&super::tagma_exe()?, &opts)
}

/// `tagma demo --mode eve`: the key-value store on an execute-verify pair.
fn eve(args: &DemoArgs) -> Result<()> {
    if args.gateway || args.history.is_some() {
        anyhow::bail!("--gateway and --history run with the ordered mode: leave out --mode eve");
    }
    if args.service != DemoService::Kv || args.cft || args.replicas.is_some() {
        anyhow::bail!(
            "--mode eve runs the key-value store on a primary-backup pair (or with --bft on \
             executors and verifiers): leave out --service, --cft and --replicas"
        );
    }
    let opts = tagma_bench::eve_pair::PairRunOptions {
        clients: args.clients.unwrap_or(8),
        before_s: args.duration_s as f64,
        crash: None,
        threads: args.threads,
        takeover_ms: 500,
        bft: args.bft.then_some((1, 1)),
        liars: Vec::new(),
        keep: args.keep,
    };
    if !args.json {
        eprintln!(
            "serving the key-value store on execute-verify {} ({} threads each), {} \
             clients for {} s…",
            if args.bft {
                "executors (u = r = 1: three executors, four verifiers)"
            } else {
                "pair"
            },
            opts.threads,
            opts.clients,
            args.duration_s
        );
    }
    let report = tagma_bench::eve_pair::run(&super::tagma_exe()?, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.table());
    }
    if !report.ok() {
        std::process::exit(1);
    }
    Ok(())
}
