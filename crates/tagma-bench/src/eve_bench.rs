//! `tagma bench eve`: execute-verify replication on the micro-benchmark of Kapritsos et al.
//! ("All about Eve: Execute-Verify Replication for Multi-Core Servers"), against sequential
//! execution measured in the same invocation.
//!
//! Each point runs the same batches twice: once in order on one thread, without mixing or
//! hashing, as an unreplicated sequential server would (the baseline); then on every
//! executor of the mode (two for primary-backup, `u + max(u, r) + 1` for the BFT mode), each
//! mixing the batch and running its parallel batches on its own pool of `threads` threads,
//! and the tokens verified after each batch: committed when a quorum of executors sent the
//! same token (every executor's own for primary-backup, `max(u, r) + 1` for BFT), an
//! executor with another token fetching the committed state, and a batch without agreement
//! rolled back on every executor and run again in order.
//!
//! The executors take turns on this machine's cores, each batch on one executor after the
//! other, so that every executor has the whole machine while it runs, as it would on its
//! own server; the time a batch costs is its slowest executor's (execution, then commit,
//! state transfer or rollback and re-execution), as for executors running side by side on
//! separate servers. Messages between servers are not sent (the pair across processes is
//! `tagma chaos --mode eve`); for primary-backup the report counts the bytes they would
//! take, as encoded on the wire.

use std::time::{Duration, Instant};

use serde::Serialize;
use tagma_eve::services::micro::{
    MicroMixer, MicroRequest, MicroService, MicroWorkload, Work, spin_iterations_per_us,
};
use tagma_eve::{Agreement, Execution, Executor, MissedConflicts, Resilience, agree, run_in_order};
use tagma_eve::{Batch, Token};
use tagma_wire::{ClientId, Digest, Encode, EveBatch, EveMessage, EveRequest, RequestSeq};

/// The work of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkKind {
    /// Spinning on the CPU.
    Cpu,
    /// Blocked, standing for a request that waits on I/O.
    Wait,
}

/// Which execute-verify deployment runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EveMode {
    /// Asynchronous BFT: `u + max(u, r) + 1` executors.
    Bft(Resilience),
    /// Two servers, crash faults: both must agree.
    PrimaryBackup,
}

impl EveMode {
    pub fn name(self) -> &'static str {
        match self {
            EveMode::Bft(_) => "bft",
            EveMode::PrimaryBackup => "primary-backup",
        }
    }

    pub fn executors(self) -> usize {
        match self {
            EveMode::Bft(resilience) => resilience.executors(),
            EveMode::PrimaryBackup => 2,
        }
    }

    /// Matching tokens that commit a batch.
    pub fn token_quorum(self) -> usize {
        match self {
            EveMode::Bft(resilience) => resilience.token_quorum(),
            EveMode::PrimaryBackup => 2,
        }
    }
}

/// A run's set-up.
#[derive(Clone, Debug)]
pub struct EveBenchOptions {
    pub work: WorkKind,
    pub work_us: u64,
    pub object_bytes: usize,
    /// Pairwise conflict probability, percent.
    pub conflict_pct: f64,
    /// Share of conflicting pairs the mixer misses, percent.
    pub false_negative_pct: f64,
    /// One point per thread count.
    pub threads: Vec<usize>,
    pub mode: EveMode,
    /// Requests per point (default: about two seconds of sequential execution).
    pub requests: Option<usize>,
    pub batch_size: usize,
    pub seed: u64,
    /// What executors do about the conflicts the mixer missed.
    pub missed_conflicts: MissedConflicts,
}

/// One point.
#[derive(Clone, Debug, Serialize)]
pub struct EveBenchReport {
    pub mode: String,
    pub executors: usize,
    pub work: String,
    pub work_us: u64,
    pub object_bytes: usize,
    pub conflict_pct: f64,
    pub false_negative_pct: f64,
    pub threads: usize,
    /// This machine's cores: CPU-bound work speeds up by at most this much.
    pub cores: usize,
    pub requests: usize,
    pub batch_size: usize,
    pub sequential_ops_per_s: f64,
    pub ops_per_s: f64,
    pub speedup_vs_sequential: f64,
    /// Parallel batches per batch, as the first executor mixed them.
    pub parallel_batches_per_batch: f64,
    /// What executors do about conflicts the mixer missed: `rerun` (the parallel batch
    /// again in order, before the token) or `verify` (left to the comparison of tokens).
    pub missed_conflicts_policy: String,
    /// Parallel batches with a conflict the mixer missed (two requests touched an object,
    /// one writing), as the first executor saw them.
    pub missed_conflicts: u64,
    /// Parallel batches the first executor undid and ran again in order for one.
    pub reruns: u64,
    /// Batches without agreement, rolled back and run again in order.
    pub rollbacks: u64,
    /// Parallel batches run per rollback or rerun (0: none).
    pub parallel_batches_per_rollback: f64,
    /// Executors that fetched the committed state after a batch (their token was outvoted).
    pub state_transfers: u64,
    /// Every executor ended in the same state.
    pub state_digests_equal: bool,
    /// That state is the sequential run's (false only if a missed conflict ran the same
    /// way on enough executors to be committed: a multi-threaded server's outcome).
    pub equals_sequential: bool,
    /// Primary-backup: bytes the two servers exchange per request (EXECUTE-BATCH, the
    /// backup's token, COMMIT, as encoded on the wire).
    pub bytes_per_request: Option<f64>,
    /// Primary-backup: bytes per request a state-shipping primary-backup (Remus-style: the
    /// primary alone executes and ships every object a batch changed, the backup
    /// acknowledges) would send for the same run.
    pub state_shipping_bytes_per_request: Option<f64>,
    /// With `--work cpu`: the spin loop's speed that turns `work_us` into iterations.
    pub spin_iterations_per_us: Option<f64>,
}

/// The requests a point runs by default: about two seconds of sequential execution.
fn default_requests(opts: &EveBenchOptions) -> usize {
    // A short sleep lasts its time plus the timer's slack (about 60 µs on Linux).
    let per_request_us = match opts.work {
        WorkKind::Cpu => opts.work_us.max(1),
        WorkKind::Wait => opts.work_us + 60,
    };
    let requests = (2_000_000 / per_request_us) as usize;
    let batch = opts.batch_size.max(1);
    requests.clamp(4 * batch, 50_000).div_ceil(batch) * batch
}

/// Runs every point.
pub fn run(
    opts: &EveBenchOptions,
    mut progress: impl FnMut(&EveBenchReport),
) -> anyhow::Result<Vec<EveBenchReport>> {
    let spin = (opts.work == WorkKind::Cpu).then(spin_iterations_per_us);
    let work = match spin {
        Some(per_us) => Work::cpu_for(opts.work_us, per_us),
        None => Work::Wait {
            micros: opts.work_us,
        },
    };
    let service = MicroService {
        work,
        object_bytes: opts.object_bytes,
    };
    let workload = MicroWorkload {
        requests: opts.requests.unwrap_or_else(|| default_requests(opts)),
        batch_size: opts.batch_size,
        conflict_pct: opts.conflict_pct,
        false_negative_pct: opts.false_negative_pct,
        seed: opts.seed,
    };
    let batches = workload.batches();
    let initial = service.initial_state(workload.objects());
    let mut reports = Vec::new();
    for &threads in &opts.threads {
        // The baseline, right before the point, on the same machine state.
        let mut sequential = initial.clone();
        let start = Instant::now();
        for batch in &batches {
            run_in_order(&service, &mut sequential, batch);
        }
        let sequential_s = start.elapsed().as_secs_f64();

        let mut executors = (0..opts.mode.executors())
            .map(|_| {
                Executor::new(service.clone(), MicroMixer, threads, initial.clone(), 1)
                    .map(|e| e.with_missed_conflicts(opts.missed_conflicts))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let quorum = opts.mode.token_quorum();
        let (mut elapsed, mut rollbacks, mut transfers, mut parallel_batches) =
            (Duration::ZERO, 0u64, 0u64, 0usize);
        let (mut missed, mut reruns) = (0u64, 0u64);
        let (mut eve_bytes, mut shipping_bytes) = (0usize, 0usize);
        for batch in &batches {
            let mut slowest = Duration::ZERO;
            let mut tokens = Vec::with_capacity(executors.len());
            for (i, executor) in executors.iter_mut().enumerate() {
                let start = Instant::now();
                let executed = executor.execute(batch, Execution::Parallel)?;
                slowest = slowest.max(start.elapsed());
                tokens.push(executed.token);
                if i == 0 {
                    parallel_batches += executed.parallel_batches;
                    missed += executed.missed_conflicts as u64;
                    reruns += executed.reruns as u64;
                    eve_bytes += wire_bytes(batch, executed.token);
                    shipping_bytes += state_shipping_bytes(executed);
                }
            }
            let mut agreement = agree(&tokens, quorum);
            if agreement == Agreement::Diverged {
                rollbacks += 1;
                tokens.clear();
                for executor in &mut executors {
                    let start = Instant::now();
                    executor.rollback();
                    let executed = executor.execute(batch, Execution::Sequential)?;
                    slowest = slowest.max(start.elapsed());
                    tokens.push(executed.token);
                }
                agreement = agree(&tokens, quorum);
            }
            let Agreement::Agreed { token, .. } = agreement else {
                anyhow::bail!(
                    "batch {}: the executors disagree even after running it in order",
                    batch.seq
                );
            };
            let donor = tokens
                .iter()
                .position(|t| *t == token)
                .expect("an agreed token was sent");
            executors[donor].commit(batch.seq, token)?;
            let committed = executors[donor].stable().clone();
            for (i, executor) in executors.iter_mut().enumerate() {
                if i == donor {
                    continue;
                }
                let start = Instant::now();
                if tokens[i] == token {
                    executor.commit(batch.seq, token)?;
                } else {
                    transfers += 1;
                    executor.adopt(committed.clone());
                }
                slowest = slowest.max(start.elapsed());
            }
            elapsed += slowest;
        }
        let root = executors[0].stable().tree.hash().root;
        let report = EveBenchReport {
            mode: opts.mode.name().into(),
            executors: executors.len(),
            work: match opts.work {
                WorkKind::Cpu => "cpu",
                WorkKind::Wait => "wait",
            }
            .into(),
            work_us: opts.work_us,
            object_bytes: opts.object_bytes,
            conflict_pct: opts.conflict_pct,
            false_negative_pct: opts.false_negative_pct,
            threads,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            requests: workload.requests,
            batch_size: opts.batch_size,
            sequential_ops_per_s: workload.requests as f64 / sequential_s,
            ops_per_s: workload.requests as f64 / elapsed.as_secs_f64(),
            speedup_vs_sequential: sequential_s / elapsed.as_secs_f64(),
            parallel_batches_per_batch: parallel_batches as f64 / batches.len() as f64,
            missed_conflicts_policy: match opts.missed_conflicts {
                MissedConflicts::Rerun => "rerun",
                MissedConflicts::Verify => "verify",
            }
            .into(),
            missed_conflicts: missed,
            reruns,
            rollbacks,
            parallel_batches_per_rollback: if rollbacks + reruns == 0 {
                0.0
            } else {
                parallel_batches as f64 / (rollbacks + reruns) as f64
            },
            state_transfers: transfers,
            state_digests_equal: executors
                .iter()
                .all(|e| e.stable().tree.hash().root == root),
            equals_sequential: sequential.hash().root == root,
            bytes_per_request: (opts.mode == EveMode::PrimaryBackup)
                .then(|| eve_bytes as f64 / workload.requests as f64),
            state_shipping_bytes_per_request: (opts.mode == EveMode::PrimaryBackup)
                .then(|| shipping_bytes as f64 / workload.requests as f64),
            spin_iterations_per_us: spin,
        };
        progress(&report);
        reports.push(report);
    }
    Ok(reports)
}

/// What a primary-backup pair sends for one batch: EXECUTE-BATCH, the backup's TOKEN and
/// the primary's COMMIT, as encoded on the wire.
fn wire_bytes(batch: &Batch<MicroRequest>, token: Token) -> usize {
    let execute = EveMessage::ExecuteBatch {
        view: 0,
        run: 0,
        committed: batch.seq - 1,
        sequential: false,
        batch: EveBatch {
            seq: batch.seq,
            seed: batch.nd.seed,
            timestamp_ms: batch.nd.timestamp_ms,
            requests: (batch.requests.iter())
                .map(|r| EveRequest {
                    client: ClientId(r.id),
                    seq: RequestSeq(1),
                    payload: r.encode(),
                })
                .collect(),
        },
    };
    let reply = EveMessage::Token {
        view: 0,
        run: 0,
        seq: batch.seq,
        token: Digest(token.0),
    };
    let commit = EveMessage::Commit {
        view: 0,
        committed: batch.seq,
    };
    execute.encoded_len() + reply.encoded_len() + commit.encoded_len()
}

/// What a state-shipping primary-backup sends for one batch: a checkpoint of every object
/// the batch wrote (its id, length and value, after a header: version, tag, batch number,
/// count) and the backup's acknowledgment (version, tag, batch number).
fn state_shipping_bytes(executed: &tagma_eve::Executed) -> usize {
    (2 + 8 + 4) + executed.objects_written * (8 + 4) + executed.bytes_written + (2 + 8)
}

/// The human table.
pub fn table(reports: &[EveBenchReport]) -> String {
    let mut out = String::new();
    if let Some(r) = reports.first() {
        out.push_str(&format!(
            "eve {} ({} executors), {} {} µs per request, {} B objects, {}% conflicts, {}% \
             missed, {} requests in batches of {}\n",
            r.mode,
            r.executors,
            r.work,
            r.work_us,
            r.object_bytes,
            r.conflict_pct,
            r.false_negative_pct,
            r.requests,
            r.batch_size
        ));
    }
    out.push_str(&format!(
        "{:>8} {:>12} {:>12} {:>8} {:>10} {:>7} {:>7} {:>10} {:>10} {:>6}\n",
        "threads",
        "sequential/s",
        "eve/s",
        "speedup",
        "par/batch",
        "missed",
        "reruns",
        "rollbacks",
        "transfers",
        "equal"
    ));
    for r in reports {
        out.push_str(&format!(
            "{:>8} {:>12.0} {:>12.0} {:>7.2}x {:>10.2} {:>7} {:>7} {:>10} {:>10} {:>6}\n",
            r.threads,
            r.sequential_ops_per_s,
            r.ops_per_s,
            r.speedup_vs_sequential,
            r.parallel_batches_per_batch,
            r.missed_conflicts,
            r.reruns,
            r.rollbacks,
            r.state_transfers,
            r.state_digests_equal
        ));
    }
    if let Some(r) = reports.first()
        && let (Some(eve), Some(shipping)) =
            (r.bytes_per_request, r.state_shipping_bytes_per_request)
    {
        out.push_str(&format!(
            "bytes between the servers per request: {eve:.1} (shipping the changed objects \
             instead: {shipping:.1}, {:.0}x more)\n",
            shipping / eve.max(1e-9)
        ));
    }
    out
}

/// The chart: speedup over sequential execution by threads.
pub fn chart(reports: &[EveBenchReport]) -> crate::plot::Chart {
    let title = reports.first().map_or_else(String::new, |r| {
        format!(
            "eve {}: {} {} µs, {} B objects, {}% conflicts, {}% missed",
            r.mode, r.work, r.work_us, r.object_bytes, r.conflict_pct, r.false_negative_pct
        )
    });
    crate::plot::Chart {
        title,
        x_label: "execution threads per executor".into(),
        y_label: "throughput / sequential throughput".into(),
        integer_x: true,
        series: vec![crate::plot::Series {
            label: "eve".into(),
            points: reports
                .iter()
                .map(|r| (r.threads as f64, r.speedup_vs_sequential))
                .collect(),
        }],
        events: Vec::new(),
    }
}

/// `tagma bench eve`: checks the options, runs the points, prints them (JSON objects or the
/// table), draws the chart; fails if the executors end in different states.
pub fn run_command(
    opts: &EveBenchOptions,
    plot: Option<&std::path::Path>,
    json: bool,
) -> anyhow::Result<()> {
    if !(0.0..=100.0).contains(&opts.conflict_pct)
        || !(0.0..=100.0).contains(&opts.false_negative_pct)
    {
        anyhow::bail!("--conflict-pct and --false-negative-pct must be within 0..=100");
    }
    if opts.threads.is_empty() || opts.threads.contains(&0) {
        anyhow::bail!("--threads needs one or more thread counts, each at least 1");
    }
    if opts.batch_size == 0 || opts.requests == Some(0) {
        anyhow::bail!("--batch-size and --requests must be at least 1");
    }
    let reports = run(opts, |r| {
        if !json {
            eprintln!(
                "{} threads: {:.2}x sequential, {} reruns, {} rollbacks",
                r.threads, r.speedup_vs_sequential, r.reruns, r.rollbacks
            );
        }
    })?;
    if let Some(path) = plot {
        crate::plot::draw(&chart(&reports), path)?;
        if !json {
            eprintln!("wrote {}", path.display());
        }
    }
    if json {
        for r in &reports {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print!("{}", table(&reports));
    }
    if let Some(r) = reports.iter().find(|r| !r.state_digests_equal) {
        anyhow::bail!(
            "at {} threads the executors ended in different states",
            r.threads
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(mode: EveMode, conflict_pct: f64, false_negative_pct: f64) -> EveBenchOptions {
        EveBenchOptions {
            work: WorkKind::Wait,
            work_us: 200,
            object_bytes: 1024,
            conflict_pct,
            false_negative_pct,
            threads: vec![1, 4],
            mode,
            requests: Some(400),
            batch_size: 50,
            seed: 3,
            missed_conflicts: MissedConflicts::Verify,
        }
    }

    #[test]
    fn without_conflicts_threads_speed_up_waiting_requests_and_nothing_rolls_back() {
        let reports = run(&options(EveMode::PrimaryBackup, 0.0, 0.0), |_| {}).unwrap();
        let four = &reports[1];
        assert_eq!((four.threads, four.executors), (4, 2));
        assert_eq!(four.rollbacks, 0);
        assert_eq!(four.parallel_batches_per_batch, 1.0);
        assert!(four.state_digests_equal && four.equals_sequential);
        // 50 requests of 17 bytes each in a batch, 1 KiB objects: verifying ships far less
        // than the changed objects.
        let eve = four.bytes_per_request.unwrap();
        let shipping = four.state_shipping_bytes_per_request.unwrap();
        assert!(eve > 37.0 && eve < 60.0, "{eve} bytes per request");
        assert!(shipping > 1024.0, "{shipping} bytes per request");
        let table = table(&reports);
        let header = table.lines().nth(1).unwrap().split_whitespace().count();
        let row = table.lines().nth(2).unwrap().split_whitespace().count();
        assert_eq!(header, row, "{table}");
        // The ratio itself is the benchmark's to measure (this machine is shared): here only
        // that it is measured.
        assert!(
            four.speedup_vs_sequential.is_finite() && four.speedup_vs_sequential > 0.0,
            "4 threads waiting: {:.2}x",
            four.speedup_vs_sequential
        );
    }

    #[test]
    fn missed_conflicts_left_to_verification_roll_back_and_every_executor_ends_alike() {
        let bft = EveMode::Bft(Resilience::new(1, 1).unwrap());
        // Every conflict missed, 2 objects: races on every batch.
        let reports = run(&options(bft, 50.0, 100.0), |_| {}).unwrap();
        let four = &reports[1];
        assert_eq!(four.executors, 3);
        assert_eq!(four.missed_conflicts, 8, "every batch");
        assert_eq!(four.reruns, 0);
        assert!(
            four.rollbacks + four.state_transfers > 0,
            "no divergence on {four:?}"
        );
        assert!(four.state_digests_equal);
    }

    #[test]
    fn missed_conflicts_run_again_in_order_reach_sequential_executions_state() {
        let bft = EveMode::Bft(Resilience::new(1, 1).unwrap());
        let mut opts = options(bft, 50.0, 100.0);
        opts.missed_conflicts = MissedConflicts::Rerun;
        let reports = run(&opts, |_| {}).unwrap();
        let four = &reports[1];
        assert_eq!((four.missed_conflicts, four.reruns), (8, 8));
        assert_eq!((four.rollbacks, four.state_transfers), (0, 0));
        assert!(four.state_digests_equal && four.equals_sequential);
    }
}
