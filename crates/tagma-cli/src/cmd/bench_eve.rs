//! `tagma bench eve`: arguments of the execute-verify micro-benchmark.

use std::path::PathBuf;

use anyhow::Result;
use tagma_bench::eve_bench::{EveBenchOptions, EveMode, WorkKind};
use tagma_eve::{MissedConflicts, Resilience};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkArg {
    /// Spin on the CPU (speedup bounded by this machine's cores).
    Cpu,
    /// Block the thread, as a request waiting on a database or a disk would.
    Wait,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EveModeArg {
    /// Asynchronous BFT: u + max(u, r) + 1 executors, max(u, r) + 1 matching tokens commit.
    Bft,
    /// Two servers tolerating a crash: both tokens must match.
    PrimaryBackup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MissedConflictsArg {
    /// An executor that sees two requests of a parallel batch touch one object (one
    /// writing) undoes the parallel batch and runs it again in order, before its token.
    Rerun,
    /// Left to the comparison of tokens, as Eve does (a rollback when executors' threads
    /// interleaved differently).
    Verify,
}

#[derive(clap::Args, Clone, Debug)]
pub struct EveArgs {
    /// Work per request, in microseconds.
    #[arg(long, default_value_t = 1000)]
    pub work_us: u64,
    /// How a request works: on the CPU, or blocked waiting.
    #[arg(long, value_enum, default_value_t = WorkArg::Cpu)]
    pub work: WorkArg,
    /// Size of each object a request updates, in bytes (at least 16 are kept).
    #[arg(long, default_value_t = 1024)]
    pub object_bytes: usize,
    /// Probability that two requests conflict, percent (the state holds 100 / C objects;
    /// 0: a batch's requests touch distinct objects).
    #[arg(long, default_value_t = 0.0)]
    pub conflict_pct: f64,
    /// Share of conflicting pairs the mixer misses, percent.
    #[arg(long, default_value_t = 0.0)]
    pub false_negative_pct: f64,
    /// Execution threads per executor, one point each.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// The deployment verified.
    #[arg(long, value_enum, default_value_t = EveModeArg::Bft)]
    pub mode: EveModeArg,
    /// BFT mode: faulty replicas tolerated for liveness.
    #[arg(long, default_value_t = 1)]
    pub u: usize,
    /// BFT mode: lying replicas tolerated for safety (0: masking concurrency bugs).
    #[arg(long, default_value_t = 1)]
    pub r: usize,
    /// Requests per point [default: about two seconds of sequential execution].
    #[arg(long)]
    pub requests: Option<usize>,
    /// Requests per batch.
    #[arg(long, default_value_t = 100)]
    pub batch_size: usize,
    /// Seed of the workload (objects drawn, conflicts missed).
    #[arg(long, default_value_t = 0x0e7e_5eed)]
    pub seed: u64,
    /// What executors do about conflicts the mixer missed.
    #[arg(long, value_enum, default_value_t = MissedConflictsArg::Rerun)]
    pub missed_conflicts: MissedConflictsArg,
    /// Draw the speedup over sequential execution by threads into this PNG.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// One JSON object per point instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `tagma bench eve`.
pub fn run(args: EveArgs) -> Result<()> {
    let mode = match args.mode {
        EveModeArg::Bft => EveMode::Bft(Resilience::new(args.u, args.r).map_err(|e| {
            anyhow::anyhow!("{e}: pass --u 1 or more (--u 1 --r 1 runs three executors)")
        })?),
        EveModeArg::PrimaryBackup => EveMode::PrimaryBackup,
    };
    let opts = EveBenchOptions {
        work: match args.work {
            WorkArg::Cpu => WorkKind::Cpu,
            WorkArg::Wait => WorkKind::Wait,
        },
        work_us: args.work_us,
        object_bytes: args.object_bytes,
        conflict_pct: args.conflict_pct,
        false_negative_pct: args.false_negative_pct,
        threads: args.threads,
        mode,
        requests: args.requests,
        batch_size: args.batch_size,
        seed: args.seed,
        missed_conflicts: match args.missed_conflicts {
            MissedConflictsArg::Rerun => MissedConflicts::Rerun,
            MissedConflictsArg::Verify => MissedConflicts::Verify,
        },
    };
    tagma_bench::eve_bench::run_command(&opts, args.plot.as_deref(), args.json)
}
