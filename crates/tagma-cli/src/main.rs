//! The `tagma` command. Run `tagma --help`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use tagma_bench::report::{self, BenchReport, Latency};
use tagma_bench::sweep::{self, RunConfig, Sweep};
use tagma_bench::{load, micro, micro::EmptyService};
use tagma_cli::chaos;
use tagma_cli::cluster::{LaunchOptions, LocalCluster, converged_states, digests_equal};
use tagma_cli::init::{InitOptions, init_cluster, keygen};
use tagma_cli::workload::{self, WorkloadOptions};
use tagma_client::{ClientOptions, Proxy};
use tagma_core::Mode;
use tagma_core::config::Durability;
use tagma_crypto::IdentityKey;
use tagma_kv::{KvOp, KvReply, KvService};
use tagma_node::cluster_dir::{self, DEFAULT_CLIENT_PRINCIPAL};
use tagma_wire::{ReplicaId, RequestKind};

#[derive(Parser)]
#[command(
    name = "tagma",
    version,
    about = "Byzantine fault-tolerant state machine replication (Mod-SMaRt) — run a replicated key-value service",
    long_about = "tagma replicates a deterministic service over n replicas that keep working while up to f of \
them crash (cft mode, n >= 2f+1) or behave arbitrarily (bft mode, n >= 3f+1).\n\n\
Quick start:\n  tagma demo                          # a local 4-replica cluster under load, checked end to end\n  \
tagma init --replicas 4 --dir c1     # write a cluster directory (config + keys)\n  \
tagma replica --dir c1 --id 0        # run one replica (one per terminal, ids 0..3)\n  \
tagma kv --dir c1 put hello world    # talk to the cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a temporary local cluster, drive a mixed key-value workload, and check that every
    /// replica ends with the same state.
    Demo(DemoArgs),
    /// Run a failure scenario on a temporary local cluster with durability on, under a
    /// counting key-value load, and report whether any acknowledged operation was lost or
    /// applied twice (exit status 1 if so).
    Chaos(ChaosArgs),
    /// Write a ready-to-run local cluster directory: tagma.toml and Ed25519 keys for the
    /// replicas, a client and an administrator.
    Init {
        /// Number of replicas.
        #[arg(long, default_value_t = 4)]
        replicas: usize,
        /// Crash-fault-tolerant mode (n >= 2f+1) instead of Byzantine (n >= 3f+1).
        #[arg(long)]
        cft: bool,
        /// Faults tolerated [default: the largest the replica count allows].
        #[arg(long)]
        f: Option<u32>,
        /// Cluster directory to create.
        #[arg(long)]
        dir: PathBuf,
        /// Replica i listens on BASE+i and serves metrics on BASE+100+i.
        #[arg(long, default_value_t = 7100)]
        base_port: u16,
        /// Address the replicas listen on.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Overwrite an existing tagma.toml.
        #[arg(long)]
        force: bool,
    },
    /// Generate one Ed25519 key pair: writes the secret key file and prints the public key.
    Keygen {
        /// Where to write the secret key.
        #[arg(long)]
        out: PathBuf,
    },
    /// Run one replica of a cluster (until killed, or until a view change removes it).
    Replica {
        #[arg(long)]
        dir: PathBuf,
        /// This replica's id in tagma.toml (or, with --join, the id it was added with).
        #[arg(long)]
        id: u32,
        /// The replicated service: the key-value store, the micro-benchmark's empty
        /// service (replies of the size each request asks for), or the seed's list (executed
        /// in parallel).
        #[arg(long, value_enum, default_value_t = ServiceKind::Kv)]
        service: ServiceKind,
        /// Join a running cluster: HOST:PORT of any replica listed in tagma.toml. The replica
        /// waits until a view that includes it is installed (`tagma view add`), learns it
        /// from the members, fetches the state by state transfer, then takes part. Use it
        /// for restarts of a joined replica too.
        #[arg(long, value_name = "HOST:PORT")]
        join: Option<std::net::SocketAddr>,
        /// The secret key file (default DIR/keys/replica-ID.key).
        #[arg(long)]
        key: Option<PathBuf>,
        /// With --join: how long to wait for the view that adds this replica.
        #[arg(long, default_value_t = 600)]
        join_wait_s: u64,
        /// With --join: serve Prometheus metrics on HOST:PORT (listed replicas take
        /// `metrics_addr` from tagma.toml).
        #[arg(long, value_name = "HOST:PORT")]
        metrics_addr: Option<std::net::SocketAddr>,
        #[command(flatten)]
        exec: ExecArgs,
    },
    /// Run one server WITHOUT replication (until killed): clients connect and authenticate
    /// as to a replica, but requests execute at once, without consensus. The baseline that
    /// `tagma bench` compares against; use a one-replica cft directory with f = 0
    /// (`tagma init --replicas 1 --cft --f 0`).
    Unreplicated {
        #[arg(long)]
        dir: PathBuf,
        /// This server's id in tagma.toml.
        #[arg(long, default_value_t = 0)]
        id: u32,
        #[arg(long, value_enum, default_value_t = ServiceKind::Kv)]
        service: ServiceKind,
        #[command(flatten)]
        exec: ExecArgs,
    },
    /// Measure a local cluster under load from many concurrent clients (throughput,
    /// latency percentiles, CPU and memory per replica) against an unreplicated server run
    /// with the same load in the same invocation.
    Bench(BenchArgs),
    /// Invoke the replicated key-value service.
    Kv {
        #[arg(long)]
        dir: PathBuf,
        /// Client secret key [default: DIR/keys/client.key].
        #[arg(long)]
        key: Option<PathBuf>,
        /// Client principal id of that key.
        #[arg(long, default_value_t = DEFAULT_CLIENT_PRINCIPAL)]
        principal: u32,
        /// Send reads unordered (faster; falls back to ordered if replicas disagree).
        #[arg(long)]
        unordered: bool,
        #[command(subcommand)]
        op: KvCmd,
    },
    /// Show or change the replica set (the view): changes are signed with the administrator's
    /// key, ordered like requests, and installed at the same point by every replica; each
    /// command waits for the outcome and prints the view.
    View {
        #[arg(long)]
        dir: PathBuf,
        /// Administrator secret key [default: DIR/keys/admin.key].
        #[arg(long)]
        admin_key: Option<PathBuf>,
        #[command(subcommand)]
        op: ViewCmd,
    },
    /// Show every replica's execution position and state digest.
    Status {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Run the deterministic simulator: seeded clusters under network faults, crashes and
    /// Byzantine replicas, checked for agreement, order, validity, linearizability and
    /// liveness. `--seeds A..B` runs a range; `--seed S --trace` replays one seed.
    Sim(SimArgs),
}

#[derive(Subcommand)]
enum ViewCmd {
    /// Print the installed view (as f+1 replicas report it).
    Show,
    /// Remove replica ID from the view; it stops ordering once the view is installed.
    Remove {
        #[arg(long)]
        id: u32,
    },
    /// Change the number of faults tolerated (the view must have enough replicas for it).
    SetF { f: u32 },
    /// Add replica ID listening on ADDR with the public key of secret key file KEY.
    Add {
        #[arg(long)]
        id: u32,
        #[arg(long)]
        addr: String,
        #[arg(long)]
        key: PathBuf,
    },
}

#[derive(Subcommand)]
enum KvCmd {
    Put {
        key: String,
        value: String,
    },
    Get {
        key: String,
    },
    Delete {
        key: String,
    },
    /// Set KEY to NEW if its value is EXPECTED (or absent, with --absent).
    Cas {
        key: String,
        #[arg(required_unless_present = "absent")]
        expected: Option<String>,
        new: String,
        #[arg(long)]
        absent: bool,
    },
    /// Add DELTA to the 64-bit counter at KEY.
    Incr {
        key: String,
        #[arg(allow_hyphen_values = true)]
        delta: i64,
    },
    /// List keys starting with PREFIX.
    Scan {
        prefix: String,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

#[derive(clap::Args)]
struct SimArgs {
    /// Seeds to run, `A..B` (B excluded).
    #[arg(long, conflicts_with = "seed", required_unless_present = "seed")]
    seeds: Option<String>,
    /// Run (replay) one seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Number of replicas [default: 3f+1 (bft) or 2f+1 (cft), f drawn per seed].
    #[arg(long)]
    replicas: Option<usize>,
    /// Most Byzantine replicas per seed [default: f].
    #[arg(long)]
    byzantine: Option<usize>,
    /// Fault model, bft or cft [default: drawn per seed].
    #[arg(long)]
    mode: Option<String>,
    /// Faults tolerated [default: drawn per seed, 1..=3].
    #[arg(long)]
    f: Option<usize>,
    /// View changes during the faults: 1 — start each seed with one replica more than f
    /// needs and have the administrator remove one (maybe the leader); 2 — the same, or, in
    /// half the durable seeds, start with one replica dormant and have the administrator add
    /// it (it joins by state transfer), or, in half the others with f ≥ 2, lower f by one. A
    /// forged change is ordered first in half the seeds. `--reconfig` alone means 2.
    #[arg(long, num_args = 0..=1, default_missing_value = "2", value_parser = clap::value_parser!(u8).range(0..=2))]
    reconfig: Option<u8>,
    /// Print one line per event (with --seed).
    #[arg(long)]
    trace: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The service a replica or unreplicated server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ServiceKind {
    Kv,
    Micro,
    /// The seed's linked list of integers, executed in parallel (--exec-threads,
    /// --exec-policy).
    List,
    /// The tuple space, out/inp conflicting with everything (the seed's TS1).
    TuplespaceTs1,
    /// The tuple space, one conflict class per arity (the seed's TS2).
    TuplespaceTs2,
}

impl ServiceKind {
    fn name(self) -> &'static str {
        match self {
            ServiceKind::Kv => "kv",
            ServiceKind::Micro => "micro",
            ServiceKind::List => "list",
            ServiceKind::TuplespaceTs1 => "tuplespace-ts1",
            ServiceKind::TuplespaceTs2 => "tuplespace-ts2",
        }
    }
}

/// How a replica executes decided batches (the list service runs in parallel).
#[derive(clap::Args, Clone, Debug)]
struct ExecArgs {
    /// Worker threads executing each decided batch (list service).
    #[arg(long, default_value_t = 1)]
    exec_threads: usize,
    /// The scheduler of those workers: the seed's barrier scheduler, or the
    /// dependency-graph one.
    #[arg(long, value_enum, default_value_t = PolicyArg::Graph)]
    exec_policy: PolicyArg,
    /// Entries of the list's initial list, or tuples of the tuple space's initial state
    /// (the seed: 100k; the same pseudo-random tuples on every replica).
    #[arg(long, default_value_t = 100_000)]
    state_size: usize,
    /// What says which requests conflict: the service's classifier, or the group each
    /// client names (`Proxy::invoke_parallel`, the seed's model).
    #[arg(long, value_enum, default_value_t = ClassifyArg::Service)]
    exec_classify: ClassifyArg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ClassifyArg {
    Service,
    Groups,
}

impl ExecArgs {
    /// The same settings as replica arguments.
    fn to_args(&self) -> Vec<String> {
        vec![
            "--exec-threads".into(),
            self.exec_threads.to_string(),
            "--exec-policy".into(),
            self.exec_policy.name().into(),
            "--state-size".into(),
            self.state_size.to_string(),
            "--exec-classify".into(),
            match self.exec_classify {
                ClassifyArg::Service => "service",
                ClassifyArg::Groups => "groups",
            }
            .into(),
        ]
    }

    fn parallel<P: tagma_parallel::ParallelState>(
        &self,
        state: P,
    ) -> tagma_parallel::ParallelReplica<P> {
        tagma_parallel::ParallelReplica::new(
            state,
            tagma_parallel::Scheduler::new(
                self.exec_policy.policy(),
                self.exec_threads.max(1),
                tagma_parallel::Groups::default(),
            ),
            match self.exec_classify {
                ClassifyArg::Service => tagma_parallel::Classify::Service,
                ClassifyArg::Groups => tagma_parallel::Classify::Groups,
            },
        )
    }
}

/// How a server process starts.
enum StartAs {
    Replica(PathBuf),
    Unreplicated,
    Joining(PathBuf, tagma_node::Joining),
}

fn start_as<S: tagma_exec::Service>(
    cfg: tagma_core::ValidConfig,
    id: ReplicaId,
    key: IdentityKey,
    service: S,
    how: StartAs,
) -> Result<tagma_node::NodeHandle, tagma_node::NodeError> {
    match how {
        StartAs::Replica(dir) => tagma_node::start(cfg, id, key, service, dir),
        StartAs::Unreplicated => tagma_node::start_unreplicated(cfg, id, key, service),
        StartAs::Joining(dir, joining) => {
            tagma_node::start_joining(cfg, id, key, service, dir, joining)
        }
    }
}

/// Starts `kind` as `how`.
fn start_service(
    kind: ServiceKind,
    exec: &ExecArgs,
    cfg: tagma_core::ValidConfig,
    id: ReplicaId,
    key: IdentityKey,
    how: StartAs,
) -> Result<tagma_node::NodeHandle> {
    Ok(match kind {
        ServiceKind::Kv => start_as(cfg, id, key, KvService::new(), how)?,
        ServiceKind::Micro => start_as(cfg, id, key, EmptyService::new(), how)?,
        ServiceKind::List => {
            let list = tagma_parallel::list::ListService::with_entries(exec.state_size as i64);
            start_as(cfg, id, key, exec.parallel(list), how)?
        }
        ServiceKind::TuplespaceTs1 | ServiceKind::TuplespaceTs2 => {
            let class = if kind == ServiceKind::TuplespaceTs1 {
                tagma_tuplespace::Classification::Ts1
            } else {
                tagma_tuplespace::Classification::Ts2
            };
            let initial =
                tagma_bench::exec::initial_tuples(exec.state_size, tagma_bench::exec::TUPLES_SEED);
            let space = tagma_bench::exec::tuple_space(class, &initial);
            start_as(cfg, id, key, exec.parallel(space), how)?
        }
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ExecServiceArg {
    List,
    TuplespaceTs1,
    TuplespaceTs2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ExecSweepArg {
    /// 0, 5, 10, 25, 50, 75, 100 % conflicting requests at --threads.
    Conflict,
    /// 1, 2, 4, 8 (and 16 with enough cores) threads at --conflict-pct.
    Threads,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PolicyArg {
    Sequential,
    Barrier,
    Graph,
}

impl PolicyArg {
    fn policy(self) -> tagma_parallel::Policy {
        match self {
            PolicyArg::Sequential => tagma_parallel::Policy::Sequential,
            PolicyArg::Barrier => tagma_parallel::Policy::Barrier,
            PolicyArg::Graph => tagma_parallel::Policy::Graph,
        }
    }

    fn name(self) -> &'static str {
        self.policy().name()
    }
}

#[derive(Subcommand, Clone)]
enum BenchWhat {
    /// Measure the execution stage alone (seed 000): decided batches of pre-generated
    /// operations through the sequential, barrier (the seed's) and dependency-graph
    /// schedulers, each on a fresh copy of the same state; reports throughput and speedup
    /// over sequential execution measured in the same invocation, and checks that every
    /// policy reaches sequential execution's state.
    Exec {
        /// list: the seed's linked list of integers; tuplespace-ts1/-ts2: 1-10-field tuples
        /// with the seed's two classifications.
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
        /// List entries, or tuples, before the run (the seed: 100k; a short-request list:
        /// 10k).
        #[arg(long, default_value_t = 100_000)]
        size: usize,
        /// Rounds (every policy once each, in turn, on a fresh state); each figure is the
        /// policy's median round.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Run every step of a sweep (seed 000's figures) instead of one configuration.
        #[arg(long, value_enum)]
        sweep: Option<ExecSweepArg>,
        /// With --sweep: draw the speedup over sequential execution per policy into this PNG.
        #[arg(long, value_name = "FILE.png", requires = "sweep")]
        plot: Option<PathBuf>,
        /// One JSON object per policy instead of the table.
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
}

#[derive(clap::Args, Clone)]
struct BenchArgs {
    #[command(subcommand)]
    what: Option<BenchWhat>,
    /// `micro`: the paper's empty service (replies of the requested size); `kv`: puts (or,
    /// with --unordered, gets) on the key-value service; `list`: the seed's list, executed
    /// in parallel (--exec-threads, --exec-policy), --conflict-pct of add/remove among
    /// get/contains.
    #[arg(long, value_enum, default_value_t = ServiceKind::Micro, alias = "service")]
    workload: ServiceKind,
    /// With --workload list or tuplespace-*: share of conflicting requests (add/remove,
    /// out/inp), percent.
    #[arg(long, default_value_t = 0)]
    conflict_pct: u32,
    #[command(flatten)]
    exec: ExecArgs,
    /// Request and reply size in bytes (the paper's 0, 100, 1024, 4096).
    #[arg(long, default_value_t = 0)]
    payload: usize,
    /// Crash-fault-tolerant mode, n = 2f+1 (the default is Byzantine, n = 3f+1).
    #[arg(long)]
    cft: bool,
    /// Faults tolerated.
    #[arg(long, default_value_t = 1)]
    f: u32,
    /// Concurrent closed-loop logical clients (carried by one proxy per 32).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Clients sign every request (Ed25519) instead of MAC authenticators.
    #[arg(long)]
    signed: bool,
    /// Threads that verify client signatures in each replica (`limits.signature_threads`)
    /// [default: the configuration's, 2].
    #[arg(long)]
    signature_threads: Option<usize>,
    /// Send read-only requests without ordering.
    #[arg(long)]
    unordered: bool,
    /// Load before each measurement window [default: 2, or 1 with --sweep].
    #[arg(long)]
    warmup_s: Option<f64>,
    /// Length of each measurement window [default: 5, or 3 with --sweep].
    #[arg(long)]
    duration_s: Option<f64>,
    /// Run the configurations of one of the paper's figures, one report each: `latency`
    /// (Figure 4: payloads 0/100/1024/4096 × 8/32/128 clients), `f` (Figure 5: f = 1, 2,
    /// bft and cft) or `sigthreads` (Figure 6: --signed, signature threads 1/2/4).
    #[arg(long, value_enum)]
    sweep: Option<SweepKind>,
    /// With --sweep f: also run f = 3 (n = 10 bft replicas; slow on a small machine).
    #[arg(long, requires = "sweep")]
    with_f3: bool,
    /// With --sweep: draw the figure into this PNG file.
    #[arg(long, requires = "sweep", value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// With --sweep and --plot: draw the figure from the reports in this file (the output
    /// of an earlier --json sweep, one object a line) instead of running anything.
    #[arg(long, requires = "plot", value_name = "FILE.jsonl")]
    from_json: Option<PathBuf>,
    /// `fsync`: each replica syncs its votes before its ACCEPTs and logs every decided batch,
    /// synced in groups while it executes (`[storage] durability`); the report then also measures the same configuration without
    /// durability, in the same invocation, and prints `ratio_vs_no_durability`.
    #[arg(long, value_enum, default_value_t = DurabilityArg::None)]
    durability: DurabilityArg,
    /// With --durability fsync: measurement windows of each configuration, alternating
    /// between the durable cluster and the one without durability (both kept running), so
    /// that a noisy machine drifts over both alike; the report takes each one's median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    durability_rounds: u32,
    /// Skip the unreplicated baseline (its figures are then 0 and `unreplicated_run` false).
    #[arg(long)]
    no_baseline: bool,
    /// Print one JSON object per configuration instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::ValueEnum, Clone, Copy)]
enum SweepKind {
    /// Figure 4: latency vs throughput per payload.
    Latency,
    /// Figure 5: throughput vs f, bft and cft.
    F,
    /// Figure 6: throughput vs signature-verification threads.
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

impl BenchArgs {
    fn warmup_s(&self) -> f64 {
        self.warmup_s.unwrap_or(if self.sweep.is_some() {
            sweep::SWEEP_WARMUP_S
        } else {
            2.0
        })
    }

    fn duration_s(&self) -> f64 {
        self.duration_s.unwrap_or(if self.sweep.is_some() {
            sweep::SWEEP_DURATION_S
        } else {
            5.0
        })
    }

    fn run_config(&self) -> RunConfig {
        RunConfig {
            cft: self.cft,
            f: self.f,
            payload: self.payload,
            clients: self.clients,
            signed: self.signed,
            signature_threads: self.signature_threads,
        }
    }

    /// These arguments with `c`'s configuration.
    fn with_config(&self, c: &RunConfig) -> BenchArgs {
        BenchArgs {
            cft: c.cft,
            f: c.f,
            payload: c.payload,
            clients: c.clients,
            signed: c.signed,
            signature_threads: c.signature_threads,
            ..self.clone()
        }
    }
}

#[derive(clap::Args)]
struct ChaosArgs {
    /// kill-all: SIGKILL every replica under load and restart them all from disk;
    /// lagging-replica: stop one follower for --down-s under load, restart it, time its
    /// catch-up; corrupt-log / corrupt-checkpoint / corrupt-both: damage the log, the newest
    /// checkpoint or both of --damaged replicas while all are stopped; wipe-disk: delete
    /// their data directories while all are stopped; reconfig-tour: a replica joins, the
    /// leader crashes and restarts, the joiner leaves, with throughput sampled every second
    /// (--after-s between events).
    #[arg(long, value_enum)]
    scenario: chaos::Scenario,
    /// Crash-fault-tolerant mode, n = 2f+1 (the default is Byzantine, n = 3f+1).
    #[arg(long)]
    cft: bool,
    /// Faults tolerated, 1 to 5: the cluster has 3f+1 replicas (2f+1 with --cft).
    #[arg(long, default_value_t = 1)]
    f: usize,
    /// corrupt-* and wipe-disk: how many replicas' disks to damage, from 1 to f (the last
    /// ones; replica 0 keeps its disk).
    #[arg(long, default_value_t = 1)]
    damaged: usize,
    /// Concurrent clients, each incrementing its own counter.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Seconds of load before the fault.
    #[arg(long, default_value_t = 2.0)]
    before_s: f64,
    /// lagging-replica: seconds the replica stays down.
    #[arg(long, default_value_t = 3.0)]
    down_s: f64,
    /// Seconds of load after recovery.
    #[arg(long, default_value_t = 2.0)]
    after_s: f64,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// reconfig-tour: draw the throughput timeline with the events marked into this PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Number of replicas [default: 4 in bft mode, 3 with --cft].
    #[arg(long)]
    replicas: Option<usize>,
    /// Crash-fault-tolerant mode (the default is Byzantine fault tolerance).
    #[arg(long)]
    cft: bool,
    /// Concurrent closed-loop clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Length of the measured run.
    #[arg(long, default_value_t = 10)]
    duration_s: u64,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    json: bool,
    /// Keep the cluster directory (printed) instead of deleting it.
    #[arg(long)]
    keep: bool,
    /// SIGKILL the leader replica this many seconds into the run and report
    /// `leader_failover_ms`: the time from the kill to the first completion of a request
    /// issued after it.
    #[arg(long)]
    kill_leader_at_s: Option<f64>,
    /// Override `timeouts.request_timeout_ms` (the replicas' request timer, which bounds
    /// leader-failure detection).
    #[arg(long)]
    request_timeout_ms: Option<u64>,
}

fn main() {
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Cmd::Replica { .. } | Cmd::Unreplicated { .. }) {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Cmd::Demo(args) => demo(args),
        Cmd::Chaos(args) => chaos_cmd(args),
        Cmd::Sim(args) => sim(args),
        Cmd::Init {
            replicas,
            cft,
            f,
            dir,
            base_port,
            host,
            force,
        } => {
            let mode = if cft { Mode::Cft } else { Mode::Bft };
            let cfg = init_cluster(
                &dir,
                &InitOptions {
                    replicas,
                    mode,
                    f,
                    base_port: Some(base_port),
                    host,
                    force,
                },
            )?;
            println!(
                "wrote {} ({} replicas, f = {}, {} mode) and keys in {}",
                cluster_dir::config_path(&dir).display(),
                cfg.n(),
                cfg.f,
                cfg.mode,
                dir.join("keys").display()
            );
            println!(
                "start each replica with: tagma replica --dir {} --id <0..{}>",
                dir.display(),
                cfg.n() - 1
            );
            Ok(())
        }
        Cmd::Keygen { out } => {
            let public = keygen(&out)?;
            println!("{public}");
            eprintln!(
                "secret key written to {0}; the public key above goes into tagma.toml before the cluster first starts, or, for a replica joining a running cluster, pass the file to `tagma view add --key {0}` and `tagma replica --join HOST:PORT --key {0}`",
                out.display()
            );
            Ok(())
        }
        Cmd::Replica {
            dir,
            id,
            service,
            join: Some(contact),
            key,
            join_wait_s,
            metrics_addr,
            exec,
        } => join(
            &dir,
            ReplicaId(id),
            service,
            &exec,
            JoinArgs {
                contact,
                key,
                wait: Duration::from_secs(join_wait_s),
                metrics_addr,
            },
        ),
        Cmd::Replica {
            dir,
            id,
            service,
            exec,
            ..
        } => serve(&dir, ReplicaId(id), service, &exec, false),
        Cmd::Unreplicated {
            dir,
            id,
            service,
            exec,
        } => serve(&dir, ReplicaId(id), service, &exec, true),
        Cmd::Bench(args) => bench(args),
        Cmd::Kv {
            dir,
            key,
            principal,
            unordered,
            op,
        } => kv(dir, key, principal, unordered, op),
        Cmd::View { dir, admin_key, op } => view(dir, admin_key, op),
        Cmd::Status { dir } => {
            let cfg = cluster_dir::load_config(&dir)?;
            let key = IdentityKey::read_file(&cluster_dir::client_key_path(&dir))?;
            let proxy = Proxy::connect(
                &cfg,
                key.clone(),
                ClientOptions::new(DEFAULT_CLIENT_PRINCIPAL),
            )?;
            // The installed view's members, added ones included.
            let proxy = match proxy.current_view(Duration::from_secs(2)) {
                Ok(view) if view.id.0 > 0 => {
                    drop(proxy);
                    Proxy::connect(
                        &cfg.with_view(&view),
                        key,
                        ClientOptions::new(DEFAULT_CLIENT_PRINCIPAL),
                    )?
                }
                _ => proxy,
            };
            for (id, state) in proxy.query_states(Duration::from_secs(2)) {
                match state {
                    Some(s) => println!(
                        "replica {id}: executed {} instances / {} requests, state digest {}",
                        s.executed_instances,
                        s.executed_requests,
                        s.state_digest.to_hex()
                    ),
                    None => println!("replica {id}: no answer"),
                }
            }
            Ok(())
        }
    }
}

/// `tagma replica` and `tagma unreplicated`: serve until killed.
fn serve(
    dir: &std::path::Path,
    id: ReplicaId,
    service: ServiceKind,
    exec: &ExecArgs,
    unreplicated: bool,
) -> Result<()> {
    let cfg = cluster_dir::load_config(dir)?;
    cluster_dir::check_member(dir, &cfg, id)?;
    // A removed replica serves lagging peers for as long as start-up synchronisation waits
    // for positions (5 request timeouts), then exits.
    let grace = Duration::from_millis(cfg.raw.timeouts.request_timeout_ms.saturating_mul(5));
    let key = IdentityKey::read_file(&cluster_dir::replica_key_path(dir, id))?;
    let data_dir = cluster_dir::data_dir(dir, &cfg, id);
    std::fs::create_dir_all(&data_dir).context("cannot create the data directory")?;
    let how = if unreplicated {
        StartAs::Unreplicated
    } else {
        StartAs::Replica(data_dir)
    };
    let node = start_service(service, exec, cfg, id, key, how)?;
    if unreplicated {
        node.join();
    } else {
        node.run_until_left(grace);
        eprintln!("replica {id} is not a member of the installed view: exited");
    }
    Ok(())
}

struct JoinArgs {
    contact: std::net::SocketAddr,
    key: Option<PathBuf>,
    wait: Duration,
    metrics_addr: Option<std::net::SocketAddr>,
}

/// `tagma replica --join`: waits for the view that adds `id`, then runs it until it leaves.
fn join(
    dir: &std::path::Path,
    id: ReplicaId,
    service: ServiceKind,
    exec: &ExecArgs,
    args: JoinArgs,
) -> Result<()> {
    let cfg = cluster_dir::load_config(dir)?;
    let key_path = args
        .key
        .unwrap_or_else(|| cluster_dir::replica_key_path(dir, id));
    let key = IdentityKey::read_file(&key_path)?;
    let grace = Duration::from_millis(cfg.raw.timeouts.request_timeout_ms.saturating_mul(5));
    let data_dir = cluster_dir::data_dir(dir, &cfg, id);
    std::fs::create_dir_all(&data_dir).context("cannot create the data directory")?;
    let view = tagma_node::discover_view(&cfg, id, &key, args.contact, args.wait)?;
    let joining = tagma_node::Joining {
        view,
        metrics_addr: args.metrics_addr,
    };
    let node = start_service(
        service,
        exec,
        cfg,
        id,
        key,
        StartAs::Joining(data_dir, joining),
    )?;
    node.run_until_left(grace);
    eprintln!("replica {id} is not a member of the installed view: exited");
    Ok(())
}

/// `tagma bench exec`.
fn exec_bench(
    opts: tagma_bench::exec::ExecOptions,
    sweep: Option<tagma_bench::exec::ExecSweep>,
    plot: Option<&std::path::Path>,
    json: bool,
) -> Result<()> {
    if opts.conflict_pct > 100 {
        bail!("--conflict-pct must be 0..=100, got {}", opts.conflict_pct);
    }
    if opts.threads == 0 || opts.requests == 0 || opts.batch == 0 || opts.size == 0 {
        bail!("--threads, --requests, --batch and --size must be at least 1");
    }
    let reports = match sweep {
        None => tagma_bench::exec::run(&opts),
        Some(s) => {
            let reports = tagma_bench::exec::sweep(&opts, s, |step| {
                if !json {
                    eprintln!("{step}");
                }
            });
            if let Some(path) = plot {
                tagma_bench::plot::draw(&tagma_bench::exec::chart(&reports, s), path)?;
                if !json {
                    eprintln!("wrote {}", path.display());
                }
            }
            reports
        }
    };
    if json {
        for r in &reports {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print!("{}", tagma_bench::exec::table(&reports));
    }
    if let Some(r) = reports.iter().find(|r| !r.digest_matches_sequential) {
        bail!(
            "policy {} ended in another state than sequential execution",
            r.policy
        );
    }
    Ok(())
}

/// What one measured run (replicated or unreplicated) produced.
#[derive(Default)]
struct Measured {
    load: load::LoadResult,
    /// Requests the leader executed (ordered and unordered) per second in the window.
    server_ops_s: f64,
    /// CPU seconds of every server process together over the window.
    cpu_s: f64,
    rss_mb_max: f64,
    /// Requests per consensus instance at the leader in the window.
    batch_mean: f64,
    /// Mean time per instance at the leader in the window, and the leader's mean vote sync
    /// and log sync in it (ms; 0 when none happened).
    instance_ms: f64,
    vote_sync_ms: f64,
    log_sync_ms: f64,
}

impl Measured {
    fn cpu_s_per_kop(&self) -> f64 {
        let kops = self.server_ops_s * self.load.window_s / 1000.0;
        if kops > 0.0 { self.cpu_s / kops } else { 0.0 }
    }
}

/// `tagma bench`: one configuration, or with `--sweep` each configuration of a figure (and
/// with `--plot` the figure).
fn bench(args: BenchArgs) -> Result<()> {
    if let Some(BenchWhat::Exec {
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
    }) = args.what.clone()
    {
        return exec_bench(
            tagma_bench::exec::ExecOptions {
                service: match service {
                    ExecServiceArg::List => tagma_bench::exec::ExecService::List,
                    ExecServiceArg::TuplespaceTs1 => tagma_bench::exec::ExecService::TuplespaceTs1,
                    ExecServiceArg::TuplespaceTs2 => tagma_bench::exec::ExecService::TuplespaceTs2,
                },
                conflict_pct,
                threads,
                policies: if policy.is_empty() {
                    vec![
                        tagma_parallel::Policy::Barrier,
                        tagma_parallel::Policy::Graph,
                    ]
                } else {
                    policy
                        .into_iter()
                        .map(|p| match p {
                            PolicyArg::Sequential => tagma_parallel::Policy::Sequential,
                            PolicyArg::Barrier => tagma_parallel::Policy::Barrier,
                            PolicyArg::Graph => tagma_parallel::Policy::Graph,
                        })
                        .collect()
                },
                requests,
                batch,
                size,
                seed: 0x7a6d_a000,
                rounds,
            },
            sweep.map(|s| match s {
                ExecSweepArg::Conflict => tagma_bench::exec::ExecSweep::Conflict,
                ExecSweepArg::Threads => tagma_bench::exec::ExecSweep::Threads,
            }),
            plot.as_deref(),
            json,
        );
    }
    if let Some(BenchWhat::StateTransfer {
        state_mb,
        checkpoint_period,
        json,
    }) = args.what
    {
        let exe = std::env::current_exe().context("cannot find the tagma executable")?;
        let opts = tagma_cli::transfer_bench::TransferOptions {
            state_mb,
            checkpoint_period,
            json,
        };
        let report = tagma_cli::transfer_bench::run(&exe, &opts)?;
        if json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            println!("{}", report.table());
        }
        if !report.state_digests_equal {
            bail!("the replicas' state digests differ after the transfer");
        }
        return Ok(());
    }
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    if args.duration_s() <= 0.0 || args.warmup_s() < 0.0 {
        bail!("--duration-s must be positive and --warmup-s not negative");
    }
    if args.signature_threads == Some(0) {
        bail!("--signature-threads must be at least 1");
    }
    let sweep = args.sweep.map(SweepKind::sweep);
    if let (Some(sweep), Some(path), Some(from)) = (sweep, &args.plot, &args.from_json) {
        let text = std::fs::read_to_string(from)
            .with_context(|| format!("cannot read {}", from.display()))?;
        let reports = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<Result<Vec<BenchReport>, _>>()
            .with_context(|| format!("{} is not one report a line", from.display()))?;
        return Ok(tagma_bench::plot::draw(&sweep.chart(&reports), path)?);
    }
    let exe = std::env::current_exe().context("cannot find the tagma executable")?;
    let configs = match sweep {
        None => vec![args.run_config()],
        Some(s) => s.configs(args.run_config(), args.with_f3),
    };
    let mut reports = Vec::with_capacity(configs.len());
    let mut idle = 0;
    for (i, config) in configs.iter().enumerate() {
        if sweep.is_some() && !args.json {
            eprintln!("[{}/{}] {}", i + 1, configs.len(), config.describe());
        }
        let (report, completed) = bench_one(&exe, &args.with_config(config))?;
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            println!("{}", report.table());
            if sweep.is_some() {
                println!();
            }
        }
        if !completed {
            idle += 1;
        }
        reports.push(report);
    }
    if let (Some(sweep), Some(path)) = (sweep, &args.plot) {
        tagma_bench::plot::draw(&sweep.chart(&reports), path)?;
        if !args.json {
            eprintln!("wrote {}", path.display());
        }
    }
    if idle > 0 {
        bail!(
            "no request completed in a measurement window of {idle} configuration(s) (see the \
             servers' logs above)"
        );
    }
    Ok(())
}

/// One configuration: the replicated run, then the unreplicated baseline. The flag is
/// false when a run completed no request in its window.
fn bench_one(exe: &std::path::Path, args: &BenchArgs) -> Result<(BenchReport, bool)> {
    let (mode, replicas) = if args.cft {
        (Mode::Cft, 2 * args.f as usize + 1)
    } else {
        (Mode::Bft, 3 * args.f as usize + 1)
    };
    let signed = args.signed;
    let threads = args.signature_threads;
    let durability = args.durability.config();
    let edit_with = move |durability: Durability| {
        move |cfg: &mut tagma_core::Config| {
            cfg.cluster.signed_requests = signed;
            if let Some(t) = threads {
                cfg.limits.signature_threads = t;
            }
            cfg.storage.durability = durability;
        }
    };
    let edit = edit_with(durability);
    let mut opts = LaunchOptions {
        replicas,
        mode,
        f: Some(args.f),
        service: Some(args.workload.name().into()),
        replica_args: args.exec.to_args(),
        unreplicated: false,
    };
    let label = format!("{mode} n={replicas}");
    let cluster = LocalCluster::launch_with(exe, &opts, edit)?;
    let signature_threads = cluster.cfg.raw.limits.signature_threads;
    // With durability: the same configuration without it, for `ratio_vs_no_durability`,
    // measured in windows alternating with the durable cluster's (both stay up; the idle
    // one costs next to nothing), each side's median window reported.
    let (replicated, volatile) = if durability == Durability::Fsync {
        let plain = LocalCluster::launch_with(exe, &opts, edit_with(Durability::None))?;
        let (mut durable_runs, mut plain_runs) = (Vec::new(), Vec::new());
        for round in 1..=args.durability_rounds {
            let of = args.durability_rounds;
            durable_runs.push(measure(&cluster, args, &format!("fsync {round}/{of}"))?);
            plain_runs.push(measure(&plain, args, &format!("no fsync {round}/{of}"))?);
        }
        if durable_runs.iter().any(|m| m.load.completed == 0) {
            cluster.dump_logs();
        }
        if plain_runs.iter().any(|m| m.load.completed == 0) {
            plain.dump_logs();
        }
        if !args.json {
            let ratios: Vec<String> = durable_runs
                .iter()
                .zip(&plain_runs)
                .map(|(d, p)| format!("{:.3}", d.server_ops_s / p.server_ops_s.max(1e-9)))
                .collect();
            eprintln!("durability ratio per round: {}", ratios.join(", "));
        }
        (median_run(durable_runs), Some(median_run(plain_runs)))
    } else {
        let replicated = measure(&cluster, args, &label)?;
        if replicated.load.completed == 0 {
            cluster.dump_logs();
        }
        (replicated, None)
    };
    drop(cluster);
    // The baseline: the same service, client library, network stack and authentication,
    // one server process, no ordering.
    let baseline = if args.no_baseline {
        None
    } else {
        opts.replicas = 1;
        opts.mode = Mode::Cft;
        opts.f = Some(0);
        opts.unreplicated = true;
        let server = LocalCluster::launch_with(exe, &opts, edit)?;
        let baseline = measure(&server, args, "unreplicated")?;
        if baseline.load.completed == 0 {
            server.dump_logs();
        }
        Some(baseline)
    };
    let completed = replicated.load.completed > 0
        && baseline.as_ref().is_none_or(|b| b.load.completed > 0)
        && volatile.as_ref().is_none_or(|v| v.load.completed > 0);
    let no_durability_ops_s = volatile.as_ref().map_or(0.0, |v| v.server_ops_s);
    let ratio_vs_no_durability = if no_durability_ops_s > 0.0 {
        replicated.server_ops_s / no_durability_ops_s
    } else {
        0.0
    };
    let unreplicated_run = baseline.is_some();
    let baseline = baseline.unwrap_or_default();
    let ratio = if baseline.server_ops_s > 0.0 {
        replicated.server_ops_s / baseline.server_ops_s
    } else {
        0.0
    };
    let report = BenchReport {
        mode: mode.to_string(),
        n: replicas,
        f: args.f,
        workload: args.workload.name().into(),
        ordered: !args.unordered,
        signed,
        signature_threads,
        request_bytes: args.payload,
        reply_bytes: args.payload,
        clients: args.clients,
        duration_s: args.duration_s(),
        throughput_ops_s: replicated.server_ops_s,
        client_throughput_ops_s: replicated.load.throughput_ops_s(),
        unreplicated_run,
        unreplicated_ops_s: baseline.server_ops_s,
        unreplicated_client_ops_s: baseline.load.throughput_ops_s(),
        ratio_vs_unreplicated: ratio,
        latency_ms: Latency::from_sorted_us(&replicated.load.latencies_us),
        unreplicated_latency_ms: Latency::from_sorted_us(&baseline.load.latencies_us),
        replica_rss_mb_max: replicated.rss_mb_max,
        cpu_s_per_kop: replicated.cpu_s_per_kop(),
        batch_mean: replicated.batch_mean,
        unreplicated_rss_mb: baseline.rss_mb_max,
        unreplicated_cpu_s_per_kop: baseline.cpu_s_per_kop(),
        durability: durability.to_string(),
        no_durability_ops_s,
        ratio_vs_no_durability,
        instance_ms: if volatile.is_some() {
            replicated.instance_ms
        } else {
            0.0
        },
        no_durability_instance_ms: volatile.as_ref().map_or(0.0, |v| v.instance_ms),
        vote_sync_ms_mean: replicated.vote_sync_ms,
        log_sync_ms_mean: replicated.log_sync_ms,
        errors: replicated.load.errors
            + baseline.load.errors
            + volatile.as_ref().map_or(0, |v| v.load.errors),
    };
    Ok((report, completed))
}

/// `--durability`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DurabilityArg {
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

/// The request driver `driver` sends as its `n`-th.
fn bench_request(args: &BenchArgs) -> Box<load::RequestGen> {
    let payload = args.payload;
    match args.workload {
        ServiceKind::Micro => {
            let request = micro::encode_request(payload, payload);
            Box::new(move |_, _| request.clone())
        }
        ServiceKind::TuplespaceTs1 | ServiceKind::TuplespaceTs2 => {
            let pct = args.conflict_pct;
            let initial = tagma_bench::exec::initial_tuples(
                args.exec.state_size,
                tagma_bench::exec::TUPLES_SEED,
            );
            Box::new(move |driver, n| tagma_bench::exec::space_op(&initial, pct, driver, n))
        }
        ServiceKind::List => {
            let (pct, size) = (u64::from(args.conflict_pct), args.exec.state_size as u64);
            Box::new(move |driver, n| {
                use tagma_parallel::list::ListOp;
                // A hash of (driver, n): which requests conflict, and what they touch.
                let h = tagma_crypto::digest(&[driver.to_le_bytes(), n.to_le_bytes()].concat());
                let h = u64::from_le_bytes(h.0[..8].try_into().expect("8 bytes"));
                // Values outside the initial list, one per (driver, pair of requests).
                let mine = (size + ((driver as u64) << 32) + n / 2) as i64;
                let op = if h % 100 < pct {
                    if n % 2 == 0 {
                        ListOp::Add(mine)
                    } else {
                        ListOp::Remove(mine)
                    }
                } else if (h >> 8) % 2 == 0 {
                    ListOp::Get(((h >> 16) % size.max(1)) as i64)
                } else {
                    ListOp::Contains(((h >> 16) % size.max(1)) as i64)
                };
                op.encode()
            })
        }
        ServiceKind::Kv => {
            let value = Bytes::from(vec![0u8; payload]);
            let read = args.unordered;
            Box::new(move |driver, n| {
                let key = Bytes::from(format!("bench/{driver}/{}", n % 256).into_bytes());
                let op = if read {
                    KvOp::Get { key }
                } else {
                    KvOp::Put {
                        key,
                        value: value.clone(),
                    }
                };
                op.encode()
            })
        }
    }
}

/// Drives `cluster` with the benchmark's load and samples the servers around the window.
/// The window with the median throughput (the higher middle one of an even count).
fn median_run(mut runs: Vec<Measured>) -> Measured {
    runs.sort_by(|a, b| a.server_ops_s.total_cmp(&b.server_ops_s));
    let middle = runs.len() / 2;
    runs.swap_remove(middle)
}

fn measure(cluster: &LocalCluster, args: &BenchArgs, label: &str) -> Result<Measured> {
    let ready = Duration::from_secs(20);
    let mut drivers = Vec::new();
    for share in load::proxy_shares(args.clients, load::CLIENTS_PER_PROXY) {
        let mut options = ClientOptions::new(DEFAULT_CLIENT_PRINCIPAL);
        options.outstanding_max = share;
        drivers.push((cluster.proxy_with(options, ready)?, share));
    }
    let request = bench_request(args);
    // The servers are ready when they order a request.
    drivers[0]
        .0
        .invoke_ordered(request(0, u64::MAX))
        .with_context(|| format!("{label}: the first request did not complete"))?;
    let leader = current_leader(cluster);
    let leader_addr = cluster.cfg.replicas[leader]
        .metrics_addr
        .context("the leader has no metrics_addr")?;
    let pids: Vec<u32> = (0..cluster.cfg.n())
        .filter_map(|i| cluster.pid(i))
        .collect();
    let sample = || -> Sample {
        let text = tagma_node::metrics::scrape(leader_addr).unwrap_or_default();
        let value = |m| tagma_node::metrics::value(&text, m).unwrap_or(0.0);
        Sample {
            ops: value("tagma_executed_requests_total") + value("tagma_unordered_executed_total"),
            cpu_s: pids.iter().filter_map(|&p| report::process_cpu_s(p)).sum(),
            instances: value("tagma_decided_instances_total"),
            vote_syncs: value("tagma_vote_syncs_total"),
            vote_sync_us: value("tagma_vote_sync_microseconds_total"),
            log_syncs: value("tagma_log_syncs_total"),
            log_sync_us: value("tagma_log_sync_microseconds_total"),
        }
    };
    let opts = load::LoadOptions {
        warmup: Duration::from_secs_f64(args.warmup_s()),
        duration: Duration::from_secs_f64(args.duration_s()),
        kind: if args.unordered {
            RequestKind::Unordered
        } else {
            RequestKind::Ordered
        },
    };
    let (warmup_s, total_s) = (args.warmup_s(), args.warmup_s() + args.duration_s());
    let bar = if args.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new((total_s * 10.0) as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>14} [{bar:30}] {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    let (mut start, mut end) = (Sample::default(), Sample::default());
    let result = load::run(&drivers, &opts, &*request, |phase| match phase {
        load::Phase::MeasureStart => start = sample(),
        load::Phase::MeasureEnd => end = sample(),
        load::Phase::Tick {
            elapsed_s,
            completed,
        } => {
            bar.set_position((elapsed_s * 10.0) as u64);
            let phase = if elapsed_s < warmup_s {
                "warm-up"
            } else {
                "measuring"
            };
            bar.set_message(format!(
                "{phase} {elapsed_s:.0}/{total_s:.0} s, {:.0} ops/s",
                completed as f64 / elapsed_s.max(1e-3)
            ));
        }
    });
    bar.finish_and_clear();
    let rss_mb_max = pids
        .iter()
        .filter_map(|&p| report::process_peak_rss_mb(p))
        .fold(0.0, f64::max);
    let instances = end.instances - start.instances;
    Ok(Measured {
        server_ops_s: (end.ops - start.ops) / result.window_s.max(1e-9),
        cpu_s: end.cpu_s - start.cpu_s,
        rss_mb_max,
        batch_mean: per_event(end.ops - start.ops, instances),
        instance_ms: per_event(result.window_s * 1e3, instances),
        vote_sync_ms: per_event(
            end.vote_sync_us - start.vote_sync_us,
            end.vote_syncs - start.vote_syncs,
        ) / 1e3,
        log_sync_ms: per_event(
            end.log_sync_us - start.log_sync_us,
            end.log_syncs - start.log_syncs,
        ) / 1e3,
        load: result,
    })
}

/// What [`measure`] reads at the start and the end of its window: the leader's counters
/// and the CPU seconds of every server process.
#[derive(Clone, Copy, Default)]
struct Sample {
    ops: f64,
    cpu_s: f64,
    instances: f64,
    vote_syncs: f64,
    vote_sync_us: f64,
    log_syncs: f64,
    log_sync_us: f64,
}

/// `total` spread over `count` events (0 when there were none: no instance decided, e.g.
/// unordered reads, or no sync).
fn per_event(total: f64, count: f64) -> f64 {
    if count > 0.0 { total / count } else { 0.0 }
}

/// `tagma view`: prints the installed view, or orders a signed change and prints its outcome.
fn view(dir: PathBuf, admin_key: Option<PathBuf>, op: ViewCmd) -> Result<()> {
    use tagma_wire::{ReconfigureOutcome, ViewOp};
    let cfg = cluster_dir::load_config(&dir)?;
    let client_key = IdentityKey::read_file(&cluster_dir::client_key_path(&dir))?;
    let proxy = Proxy::connect(
        &cfg,
        client_key,
        ClientOptions::new(DEFAULT_CLIENT_PRINCIPAL),
    )?;
    let installed = proxy
        .current_view(Duration::from_secs(5))
        .context("cannot learn the installed view from the replicas")?;
    let ops = match op {
        ViewCmd::Show => {
            print_view(&installed);
            return Ok(());
        }
        ViewCmd::Remove { id } => vec![ViewOp::Remove(ReplicaId(id))],
        ViewCmd::SetF { f } => vec![ViewOp::SetF(f)],
        ViewCmd::Add { id, addr, key } => {
            addr.parse::<std::net::SocketAddr>()
                .with_context(|| format!("--addr {addr:?} is not IP:PORT"))?;
            let key = IdentityKey::read_file(&key)?.public();
            vec![ViewOp::Add(tagma_wire::ViewMember {
                id: ReplicaId(id),
                addr,
                key,
            })]
        }
    };
    let admin_path = admin_key.unwrap_or_else(|| cluster_dir::admin_key_path(&dir));
    let admin = IdentityKey::read_file(&admin_path)
        .with_context(|| format!("cannot read the administrator key {}", admin_path.display()))?;
    let change = tagma_core::view::sign_change(&admin, installed.id, ops);
    match proxy.reconfigure(&change)? {
        ReconfigureOutcome::Installed(view) => {
            print_view(&view);
            Ok(())
        }
        ReconfigureOutcome::Refused(reason) => bail!("the replicas refused the change: {reason}"),
    }
}

fn print_view(view: &tagma_wire::View) {
    println!(
        "view {} (f = {}, {} members)",
        view.id,
        view.f,
        view.members.len()
    );
    for m in &view.members {
        println!("  replica {} at {} key {}", m.id, m.addr, m.key.to_hex());
    }
}

fn kv(
    dir: PathBuf,
    key: Option<PathBuf>,
    principal: u32,
    unordered: bool,
    op: KvCmd,
) -> Result<()> {
    let cfg = cluster_dir::load_config(&dir)?;
    let key = IdentityKey::read_file(&key.unwrap_or_else(|| cluster_dir::client_key_path(&dir)))?;
    let proxy = Proxy::connect(&cfg, key, ClientOptions::new(principal))?;
    let b = |s: String| Bytes::from(s.into_bytes());
    let op = match op {
        KvCmd::Put { key, value } => KvOp::Put {
            key: b(key),
            value: b(value),
        },
        KvCmd::Get { key } => KvOp::Get { key: b(key) },
        KvCmd::Delete { key } => KvOp::Delete { key: b(key) },
        KvCmd::Cas {
            key,
            expected,
            new,
            absent,
        } => KvOp::Cas {
            key: b(key),
            expected: if absent { None } else { expected.map(b) },
            new: b(new),
        },
        KvCmd::Incr { key, delta } => KvOp::Incr { key: b(key), delta },
        KvCmd::Scan { prefix, limit } => KvOp::Scan {
            prefix: b(prefix),
            limit,
        },
    };
    let reply = if unordered && op.is_read_only() {
        proxy.invoke_unordered(op.encode())?
    } else {
        proxy.invoke_ordered(op.encode())?
    };
    let show = |v: &Option<Bytes>| {
        v.as_ref()
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_else(|| "(absent)".into())
    };
    match KvReply::decode(&reply).context("undecodable reply")? {
        KvReply::Put { previous } => println!("ok (previous: {})", show(&previous)),
        KvReply::Get { value } => println!("{}", show(&value)),
        KvReply::Delete { previous } => println!("deleted (previous: {})", show(&previous)),
        KvReply::Cas { applied, current } => println!(
            "{} (current: {})",
            if applied { "applied" } else { "not applied" },
            show(&current)
        ),
        KvReply::Incr { value } => println!("{value}"),
        KvReply::Scan { pairs } => {
            for (k, v) in pairs {
                println!(
                    "{}\t{}",
                    String::from_utf8_lossy(&k),
                    String::from_utf8_lossy(&v)
                );
            }
        }
        KvReply::Error { message } => bail!("service error: {message}"),
    }
    Ok(())
}

fn chaos_cmd(args: ChaosArgs) -> Result<()> {
    let secs = |what: &str, s: f64| {
        if s.is_finite() && s >= 0.0 {
            Ok(Duration::from_secs_f64(s))
        } else {
            bail!("--{what} must be a number of seconds ≥ 0, got {s}")
        }
    };
    let opts = chaos::ChaosOptions {
        mode: if args.cft { Mode::Cft } else { Mode::Bft },
        f: args.f,
        damaged: args.damaged,
        clients: args.clients,
        before: secs("before-s", args.before_s)?,
        down: secs("down-s", args.down_s)?,
        after: secs("after-s", args.after_s)?,
    };
    opts.check(args.scenario)?;
    let exe = std::env::current_exe().context("cannot find the tagma executable")?;
    if !args.json {
        eprintln!(
            "running {} on a local {} cluster of {} replicas (f = {}) with durability = \"fsync\"…",
            args.scenario.name(),
            opts.mode,
            opts.n(),
            opts.f
        );
    }
    if args.scenario == chaos::Scenario::ReconfigTour {
        let report = tagma_cli::tour::run(&exe, &opts)?;
        if let Some(path) = &args.plot {
            tagma_bench::plot::draw(&report.chart(), path)?;
            if !args.json {
                eprintln!("wrote {}", path.display());
            }
        }
        return print_verdict(args.json, &report, report.table(), report.passed());
    }
    if args.plot.is_some() {
        bail!("--plot draws the reconfig-tour timeline; the other scenarios have no plot");
    }
    let report = chaos::run(&exe, args.scenario, &opts)?;
    print_verdict(args.json, &report, report.table(), report.passed())
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

fn demo(args: DemoArgs) -> Result<()> {
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    let mode = if args.cft { Mode::Cft } else { Mode::Bft };
    let exe = std::env::current_exe().context("cannot find the tagma executable")?;
    let replicas = args.replicas.unwrap_or(if args.cft { 3 } else { 4 });
    let timeout = args.request_timeout_ms;
    let mut cluster = LocalCluster::launch(&exe, replicas, mode, |cfg| {
        if let Some(t) = timeout {
            cfg.timeouts.request_timeout_ms = t;
        }
    })?;
    if !args.json {
        eprintln!(
            "started {} replicas ({} mode, f = {}) in {}",
            cluster.cfg.n(),
            cluster.cfg.mode,
            cluster.cfg.f,
            cluster.dir.display()
        );
    }
    let ready_timeout = Duration::from_secs(20);
    let mut proxies = Vec::with_capacity(args.clients);
    for _ in 0..args.clients {
        proxies.push(cluster.proxy(ready_timeout)?);
    }
    // One ordered no-op first: the cluster is ready when it orders a request.
    proxies[0]
        .invoke_ordered(
            KvOp::Get {
                key: Bytes::from_static(b"demo/ready"),
            }
            .encode(),
        )
        .context("the cluster did not order a first request")?;
    let checker = cluster.proxy(ready_timeout)?;
    let probe = std::sync::Arc::new(workload::FailoverProbe::default());
    let opts = WorkloadOptions {
        duration: Duration::from_secs(args.duration_s),
        failover: Some(probe.clone()),
        ..Default::default()
    };
    let mut killed: Option<usize> = None;
    let progress = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let bar = if args.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(args.duration_s)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} s  {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let started = Instant::now();
    let report = std::thread::scope(|s| {
        let worker = s.spawn(|| workload::run(proxies, &opts, &progress, &stop));
        while !worker.is_finished() {
            std::thread::sleep(Duration::from_millis(20));
            let secs = started.elapsed().as_secs_f64();
            if killed.is_none() && args.kill_leader_at_s.is_some_and(|t| secs >= t) {
                let leader = current_leader(&cluster);
                probe.fault();
                cluster.kill(leader);
                killed = Some(leader);
                bar.println(format!(
                    "killed the leader (replica {leader}) at {secs:.1} s"
                ));
            }
            bar.set_position((secs as u64).min(args.duration_s));
            let done = progress.load(Ordering::Relaxed);
            bar.set_message(format!(
                "{done} ops, {:.0} ops/s",
                done as f64 / secs.max(1e-3)
            ));
        }
        worker.join().expect("workload panicked")
    });
    bar.finish_and_clear();
    let live: Vec<ReplicaId> = cluster
        .cfg
        .members()
        .into_iter()
        .filter(|r| Some(r.0 as usize) != killed)
        .collect();
    let failover_ms = killed.and(probe.failover_ms());
    let states = converged_states(&checker, &live, Duration::from_secs(20));
    let (states, equal) = match states {
        Ok(s) => {
            let eq = digests_equal(&s);
            (s, eq)
        }
        Err(e) => {
            eprintln!("warning: {e}");
            (Vec::new(), false)
        }
    };
    drop(checker);
    cluster.stop_all();
    let (p50, p90, p99) = (
        report.percentile_ms(50.0),
        report.percentile_ms(90.0),
        report.percentile_ms(99.0),
    );
    if args.json {
        let out = serde_json::json!({
            "replicas": cluster.cfg.n(),
            "f": cluster.cfg.f,
            "mode": cluster.cfg.mode.to_string(),
            "clients": args.clients,
            "duration_s": report.elapsed.as_secs_f64(),
            "completed_ops": report.completed,
            "failed_ops": report.errors,
            "throughput_ops_s": (report.throughput_ops_s() * 10.0).round() / 10.0,
            "latency_ms": { "p50": p50, "p90": p90, "p99": p99 },
            "linearizability_violations": report.violations.len(),
            "executed_instances": states.first().map(|s| s.executed_instances),
            "state_digest": states.first().map(|s| s.state_digest.to_hex()),
            "state_digests_equal": equal,
            "killed_leader": killed,
            "leader_failover_ms": failover_ms.map(|ms| (ms * 10.0).round() / 10.0),
            "request_timeout_ms": cluster.cfg.raw.timeouts.request_timeout_ms,
        });
        println!("{out}");
    } else {
        println!(
            "tagma demo: {} replicas, {} mode, f = {}, {} clients, {:.1} s",
            cluster.cfg.n(),
            cluster.cfg.mode,
            cluster.cfg.f,
            args.clients,
            report.elapsed.as_secs_f64()
        );
        println!(
            "  completed ops      {} ({} failed)",
            report.completed, report.errors
        );
        println!(
            "  throughput         {:.0} ops/s",
            report.throughput_ops_s()
        );
        println!("  latency            p50 {p50:.2} ms   p90 {p90:.2} ms   p99 {p99:.2} ms");
        println!("  model violations   {}", report.violations.len());
        for s in &states {
            println!(
                "  replica {}          {} instances, {} requests, digest {}",
                s.replica,
                s.executed_instances,
                s.executed_requests,
                &s.state_digest.to_hex()[..16]
            );
        }
        println!(
            "  state digests      {}",
            if equal {
                "equal on every replica"
            } else {
                "DIFFER"
            }
        );
        if let Some(leader) = killed {
            match failover_ms {
                Some(ms) => println!(
                    "  leader failover    {ms:.0} ms (replica {leader} killed; request timer {} ms)",
                    cluster.cfg.raw.timeouts.request_timeout_ms
                ),
                None => println!("  leader failover    none: no request completed after the kill"),
            }
        }
    }
    for v in report.violations.iter().take(5) {
        eprintln!("violation: {v}");
    }
    if args.keep {
        let kept = cluster.dir.clone();
        std::mem::forget(cluster);
        eprintln!("cluster directory kept at {}", kept.display());
    }
    if !equal || !report.violations.is_empty() {
        bail!(
            "the run did not check out (digests equal: {equal}, violations: {})",
            report.violations.len()
        );
    }
    Ok(())
}

/// The current leader, as the replicas' metrics report it (the first live replica that
/// answers).
fn current_leader(cluster: &LocalCluster) -> usize {
    for r in &cluster.cfg.replicas {
        let Some(addr) = r.metrics_addr else { continue };
        let leader = tagma_node::metrics::scrape(addr)
            .ok()
            .and_then(|text| tagma_node::metrics::value(&text, "tagma_leader"));
        if let Some(l) = leader {
            return l as usize;
        }
    }
    0
}

/// `tagma sim`: one seed (replay, optionally traced) or a range (summary).
fn sim(args: SimArgs) -> Result<()> {
    let mode = match args.mode.as_deref() {
        None => None,
        Some("bft") => Some(Mode::Bft),
        Some("cft") => Some(Mode::Cft),
        Some(other) => bail!("--mode must be bft or cft, not {other:?}"),
    };
    let options = tagma_sim::SimOptions {
        mode,
        f: args.f,
        replicas: args.replicas,
        byzantine_max: args.byzantine,
        trace: args.trace,
        reconfig: args.reconfig.unwrap_or(0),
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
    let range = args.seeds.as_deref().unwrap_or_default();
    let (a, b) = range
        .split_once("..")
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .filter(|(a, b)| a < b)
        .with_context(|| format!("--seeds must look like 0..1000, not {range:?}"))?;
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
