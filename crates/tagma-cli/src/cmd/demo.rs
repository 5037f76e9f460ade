//! `tagma demo`: arguments for [`tagma_bench::demo`].

use anyhow::Result;
use tagma_bench::demo::DemoOptions;
use tagma_core::Mode;

/// `tagma demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Number of replicas [default: 4 in Byzantine mode, 3 with --cft]. Byzantine mode
    /// needs at least 4 (3f+1 for f = 1), --cft at least 3 (2f+1).
    #[arg(long)]
    pub replicas: Option<usize>,
    /// Crash-fault-tolerant mode (the default is Byzantine fault tolerance).
    #[arg(long)]
    pub cft: bool,
    /// Concurrent closed-loop clients.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
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
}

/// `tagma demo`.
pub fn run(args: DemoArgs) -> Result<()> {
    let opts = DemoOptions {
        replicas: args.replicas,
        mode: if args.cft { Mode::Cft } else { Mode::Bft },
        clients: args.clients,
        duration_s: args.duration_s,
        json: args.json,
        keep: args.keep,
        kill_leader_at_s: args.kill_leader_at_s,
        request_timeout_ms: args.request_timeout_ms,
    };
    tagma_bench::demo::run(&super::tagma_exe()?, &opts)
}
