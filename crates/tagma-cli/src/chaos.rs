//! `tagma chaos`: failure scenarios on a local multi-process cluster with durability on,
//! under a key-value load whose every acknowledged operation is accounted for.
//!
//! The load: each client increments its own counter (`chaos/<client>`) by one, again and
//! again. An increment the client saw succeed is *acknowledged*; one that failed (timed out
//! while the replicas were down) is *in doubt*: it may or may not have been applied. At the
//! end every counter is read back: a counter below the client's acknowledged count lost
//! acknowledged increments; one above acknowledged + in doubt applied some twice.
//!
//! Scenarios:
//! - `kill-all`: SIGKILL every replica mid-load, restart them all from their disks.
//! - `lagging-replica`: stop one follower for a while under load, restart it, and measure
//!   how long it takes to catch up with the others (local recovery, then state transfer —
//!   the others have released the log it misses — and the decisions since) while they keep
//!   serving.
//! - `corrupt-log` / `corrupt-checkpoint` / `corrupt-both`: stop every replica, damage the
//!   log (a record in the middle), the newest checkpoint, or both, of `--damaged` replicas
//!   (up to f), restart all: each damaged replica must notice, move its state aside, and
//!   fetch what it misses from the others.
//! - `wipe-disk`: stop every replica, delete the data directories (log, checkpoints, votes)
//!   of `--damaged` replicas, restart all: the others recover the service, and the wiped
//!   ones get the state back from them.
//! - `slow-disk` (its own report: `slow_disk`): the disk of a follower, then of the leader,
//!   stalls for a while under load; each falls behind and catches up once its disk is back.
//!
//! The cluster has n = 3f+1 replicas (2f+1 in CFT mode) for `--f` (default 1).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use serde::Serialize;
use tagma_client::Proxy;
use tagma_core::Mode;
use tagma_core::config::Durability;
use tagma_kv::{KvOp, KvReply};

use tagma_cluster::disk::{corrupt_checkpoint, corrupt_log, files, lie_in_checkpoint};
use tagma_cluster::{LaunchOptions, LocalCluster, digests_equal};

/// A chaos scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// SIGKILL every replica under load, restart all from disk.
    KillAll,
    /// Stop one follower under load for a while, restart it, time its catch-up.
    LaggingReplica,
    /// Stop all, corrupt a record in the middle of the log of --damaged replicas (default
    /// one), restart all.
    CorruptLog,
    /// Stop all, corrupt the newest checkpoint of --damaged replicas, restart all.
    CorruptCheckpoint,
    /// Stop all, corrupt both the log and the newest checkpoint of --damaged replicas,
    /// restart all.
    CorruptBoth,
    /// Stop all, delete the data directories of --damaged replicas, restart all.
    WipeDisk,
    /// Stop all, rewrite the newest checkpoint of --damaged replicas with a state that never
    /// existed (one more key) under valid checksums — a lying disk, which only the state vote
    /// after the restart catches — restart all. BFT only.
    LyingDisk,
    /// Kill --damaged replicas alone while the others serve, rewrite their newest checkpoint
    /// with a state that never existed under valid checksums, restart them: their state vote
    /// is inconclusive (the others moved on), and the later state check against the peers'
    /// checkpoints catches the lie and repairs it (or, if they restart further behind than
    /// the peers' logs reach, a fetched state replaces it first). BFT only.
    LoneLyingDisk,
    /// A replica joins, the leader crashes and restarts, the joiner leaves: throughput over
    /// time with the events marked.
    ReconfigTour,
    /// The disk of a follower, then of the leader, stalls for --down-s each under load (every
    /// flush waits), then recovers: throughput during and after, time to catch up.
    SlowDisk,
    /// With --netns: the leader is cut from the other replicas (clients still reach it)
    /// for --down-s, then healed.
    PartitionLeader,
    /// With --netns: a follower is cut from every other host (1 | n−1), then healed.
    PartitionMinority,
    /// With --netns: the leader and one follower are cut from the other replicas (2 | 2
    /// for n = 4, where no side holds a quorum; 2 | 1 for n = 3), then healed.
    PartitionMajoritySide,
    /// With --netns: the leader sends but receives nothing; healed; then the leader of
    /// that moment receives but cannot send; healed.
    Asymmetric,
    /// With --netns: the leader's host link goes down and up every 0.5 to 2 s for --down-s.
    Flapping,
    /// With --netns: every link drops 5% of packets, duplicates 1% and delays each by
    /// 30 ms ± 20 ms (reordering them) for --down-s.
    Lossy,
    /// With --netns: a follower's links carry 1 Mbit/s for --down-s.
    SlowReplica,
    /// With --mode eve: the primary of an execute-verify pair is killed under load (the
    /// backup takes over), restarts after --down-s and fetches the state, then the new
    /// primary is killed too.
    PrimaryCrash,
    /// With --mode eve: in the deterministic BFT deployment (u = r = 2), executors send
    /// wrong tokens, wrong replies and forged state nodes; counts what was sent, refused and
    /// repaired.
    LyingExecutor,
    /// With --mode eve: in the deterministic BFT deployment masking concurrency bugs (u = 1,
    /// r = 0), a race in the service manifests on one executor; counts the divergences
    /// manifested, detected and repaired.
    RacyService,
}

impl Scenario {
    /// Whether the scenario is execute-verify's (`--mode eve`).
    pub fn is_eve(self) -> bool {
        matches!(
            self,
            Scenario::PrimaryCrash | Scenario::LyingExecutor | Scenario::RacyService
        )
    }

    /// Whether the scenario attacks the links between hosts (`--netns`).
    pub fn is_network(self) -> bool {
        matches!(
            self,
            Scenario::PartitionLeader
                | Scenario::PartitionMinority
                | Scenario::PartitionMajoritySide
                | Scenario::Asymmetric
                | Scenario::Flapping
                | Scenario::Lossy
                | Scenario::SlowReplica
        )
    }

    /// Whether the scenario damages the files of `--damaged` replicas.
    pub fn damages_disks(self) -> bool {
        matches!(
            self,
            Scenario::CorruptLog
                | Scenario::CorruptCheckpoint
                | Scenario::CorruptBoth
                | Scenario::WipeDisk
                | Scenario::LyingDisk
                | Scenario::LoneLyingDisk
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Scenario::KillAll => "kill-all",
            Scenario::LaggingReplica => "lagging-replica",
            Scenario::CorruptLog => "corrupt-log",
            Scenario::CorruptCheckpoint => "corrupt-checkpoint",
            Scenario::CorruptBoth => "corrupt-both",
            Scenario::WipeDisk => "wipe-disk",
            Scenario::LyingDisk => "lying-disk",
            Scenario::LoneLyingDisk => "lone-lying-disk",
            Scenario::ReconfigTour => "reconfig-tour",
            Scenario::SlowDisk => "slow-disk",
            Scenario::PartitionLeader => "partition-leader",
            Scenario::PartitionMinority => "partition-minority",
            Scenario::PartitionMajoritySide => "partition-majority-side",
            Scenario::Asymmetric => "asymmetric",
            Scenario::Flapping => "flapping",
            Scenario::Lossy => "lossy",
            Scenario::SlowReplica => "slow-replica",
            Scenario::PrimaryCrash => "primary-crash",
            Scenario::LyingExecutor => "lying-executor",
            Scenario::RacyService => "racy-service",
        }
    }
}

/// Knobs of a run.
#[derive(Clone, Debug)]
pub struct ChaosOptions {
    pub mode: Mode,
    /// Faults tolerated: n = 3f+1 (BFT) or 2f+1 (CFT).
    pub f: usize,
    /// Disk scenarios: how many replicas' files are damaged (1..=f).
    pub damaged: usize,
    pub clients: usize,
    /// Load before the fault.
    pub before: Duration,
    /// How long a lagging replica stays down.
    pub down: Duration,
    /// Load after recovery.
    pub after: Duration,
    /// Record a contending load's history here (JSON lines) and check it.
    pub history: Option<std::path::PathBuf>,
}

/// The largest `--f`: n = 16 replica processes in BFT mode.
pub const F_MAX: usize = 5;

impl ChaosOptions {
    /// The replica count for the mode and f.
    pub fn n(&self) -> usize {
        match self.mode {
            Mode::Bft => 3 * self.f + 1,
            Mode::Cft => 2 * self.f + 1,
        }
    }

    /// Refuses what the scenario cannot run with, naming the fix.
    pub fn check(&self, scenario: Scenario) -> Result<()> {
        if !(1..=F_MAX).contains(&self.f) {
            bail!(
                "--f {} is outside 1..={F_MAX} (f = 0 tolerates no fault to inject; f = {F_MAX} \
                 already starts {} replica processes)",
                self.f,
                3 * F_MAX + 1
            );
        }
        if self.clients == 0 {
            bail!("--clients must be at least 1");
        }
        if matches!(scenario, Scenario::LyingDisk | Scenario::LoneLyingDisk)
            && self.mode == Mode::Cft
        {
            bail!(
                "a disk whose wrong content passes its checksums is a Byzantine fault, which \
                 crash-tolerant replicas do not audit: run {} without --cft",
                scenario.name()
            );
        }
        if scenario.damages_disks() && !(1..=self.f).contains(&self.damaged) {
            bail!(
                "--damaged {} is outside 1..=f ({}): a damaged disk counts as one of the f \
                 faults the system tolerates; raise --f",
                self.damaged,
                self.f
            );
        }
        if !scenario.damages_disks() && self.damaged != 1 {
            bail!(
                "--damaged applies to corrupt-log, corrupt-checkpoint, corrupt-both and wipe-disk, not {}",
                scenario.name()
            );
        }
        if scenario == Scenario::ReconfigTour && self.f != 1 {
            bail!("the reconfig-tour scenario runs with f = 1 only (drop --f)");
        }
        Ok(())
    }

    /// The replicas whose disks `scenario` damages: for a disk scenario the last `damaged`
    /// ones (the leader of regency 0, replica 0, keeps its disk), otherwise none.
    pub fn damaged_replicas(&self, scenario: Scenario) -> std::ops::Range<usize> {
        let damaged = if scenario.damages_disks() {
            self.damaged
        } else {
            0
        };
        self.n() - damaged..self.n()
    }
}

/// What a run found.
#[derive(Clone, Debug, Serialize)]
pub struct ChaosReport {
    pub scenario: String,
    pub mode: String,
    pub n: usize,
    pub f: usize,
    /// Disk scenarios: the replicas whose files were damaged or deleted.
    pub damaged_replicas: Vec<usize>,
    pub acknowledged_ops: u64,
    /// Increments that failed at the client (replicas down): applied or not.
    pub in_doubt_ops: u64,
    pub lost_acknowledged_ops: u64,
    pub duplicated_ops: u64,
    /// kill-all: from the restart until the service completed an operation again;
    /// lagging-replica: from the restart until the replica caught up with the others.
    pub recovery_ms: f64,
    pub state_digests_equal: bool,
    /// corrupt-*: whether every damaged replica noticed and discarded its state (`None`
    /// for the other scenarios, which damage no file).
    pub damaged_state_discarded: Option<bool>,
    /// lying-disk: whether every damaged replica's recovered state was contradicted by the
    /// state vote and replaced (`None` for the other scenarios).
    pub repaired_by_state_vote: Option<bool>,
    /// lone-lying-disk: for each damaged replica, what replaced its lying state after its
    /// state vote left it unconfirmed: `state-check` (f+1 peers' checkpoints contradicted it
    /// and it fetched theirs), `catch-up` (it fell behind what the peers' logs keep and a
    /// fetched state, vouched for by f+1 replicas, replaced it before the check decided), or
    /// `none` (`None` for the other scenarios).
    pub lie_removed_by: Option<Vec<LieRemoval>>,
    /// States the restarted (lagging or damaged) replicas installed by state transfer, and
    /// how long the last one took (the longest over the damaged replicas).
    pub state_transfers: u64,
    pub state_transfer_ms: f64,
    /// With `--history`: the recorded history and the checker's verdict.
    pub history: Option<tagma_bench::history::HistoryOutcome>,
}

/// What replaced a lying state that the state vote after a restart left unconfirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LieRemoval {
    /// f+1 peers' checkpoints contradicted it; the replica fetched theirs.
    StateCheck,
    /// The replica fell behind what its peers' logs keep; a fetched state (vouched for by
    /// f+1 replicas) replaced the lie before the check decided.
    CatchUp,
    /// Nothing did.
    None,
}

impl LieRemoval {
    pub fn name(self) -> &'static str {
        match self {
            LieRemoval::StateCheck => "state-check",
            LieRemoval::CatchUp => "catch-up",
            LieRemoval::None => "none",
        }
    }
}

impl ChaosReport {
    /// Whether the run met its guarantees.
    pub fn passed(&self) -> bool {
        self.lost_acknowledged_ops == 0
            && self.duplicated_ops == 0
            && self.state_digests_equal
            && self.damaged_state_discarded != Some(false)
            && self.repaired_by_state_vote != Some(false)
            && self
                .lie_removed_by
                .as_ref()
                .is_none_or(|all| all.iter().all(|r| *r != LieRemoval::None))
            && self.history.as_ref().is_none_or(|h| h.linearizable)
    }

    pub fn table(&self) -> String {
        format!(
            "scenario {} ({} n={} f={}, damaged replicas {:?})\n\
             acknowledged_ops       {}\n\
             in_doubt_ops           {}\n\
             lost_acknowledged_ops  {}\n\
             duplicated_ops         {}\n\
             recovery_ms            {:.0}\n\
             state_digests_equal    {}\n\
             damaged_state_discarded {}\n\
             repaired_by_state_vote  {}\n\
             lie_removed_by         {}\n\
             state_transfers        {} ({:.0} ms)\n\
             {}{}",
            self.scenario,
            self.mode,
            self.n,
            self.f,
            self.damaged_replicas,
            self.acknowledged_ops,
            self.in_doubt_ops,
            self.lost_acknowledged_ops,
            self.duplicated_ops,
            self.recovery_ms,
            self.state_digests_equal,
            self.damaged_state_discarded
                .map_or_else(|| "—".to_string(), |d| d.to_string()),
            self.repaired_by_state_vote
                .map_or_else(|| "—".to_string(), |d| d.to_string()),
            self.lie_removed_by.as_ref().map_or_else(
                || "—".to_string(),
                |all| all.iter().map(|r| r.name()).collect::<Vec<_>>().join(", ")
            ),
            self.state_transfers,
            self.state_transfer_ms,
            self.history.as_ref().map_or_else(String::new, |h| h.line()),
            if self.passed() { "PASSED" } else { "FAILED" }
        )
    }
}

/// Per client: acknowledged and in-doubt increments.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) acknowledged: AtomicU64,
    pub(crate) in_doubt: AtomicU64,
}

fn counter_key(client: usize) -> Bytes {
    Bytes::from(format!("chaos/{client}").into_bytes())
}

/// Increments `client`'s counter until `stop`.
pub(crate) fn increment_loop(proxy: &Proxy, client: usize, counts: &Counts, stop: &AtomicBool) {
    let op = KvOp::Incr {
        key: counter_key(client),
        delta: 1,
    }
    .encode();
    while !stop.load(Ordering::Relaxed) {
        match proxy.invoke_ordered(op.clone()) {
            Ok(_) => counts.acknowledged.fetch_add(1, Ordering::Relaxed),
            Err(_) => counts.in_doubt.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// The clients of the load, one per `--clients`.
pub(crate) fn load_clients(cluster: &LocalCluster, opts: &ChaosOptions) -> Result<Vec<Proxy>> {
    let ready = Duration::from_secs(30);
    (0..opts.clients).map(|_| cluster.proxy(ready)).collect()
}

/// Runs `fault` while each of `proxies` increments its own counter in a loop (and the
/// clients of `history`, if any, record theirs); returns what `fault` returned and what each
/// client counted.
pub(crate) fn under_load<T>(
    proxies: &[Proxy],
    history: Option<&tagma_bench::history::HistoryRun>,
    fault: impl FnOnce(&[Counts]) -> Result<T>,
) -> Result<(T, Vec<Counts>)> {
    let counts: Vec<Counts> = proxies.iter().map(|_| Counts::default()).collect();
    let stop = AtomicBool::new(false);
    let result = std::thread::scope(|s| -> Result<T> {
        for (i, proxy) in proxies.iter().enumerate() {
            let (counts, stop) = (&counts[i], &stop);
            s.spawn(move || increment_loop(proxy, i, counts, stop));
        }
        if let Some(history) = history {
            history.spawn(s, &stop);
        }
        let result = fault(&counts);
        stop.store(true, Ordering::Relaxed);
        result
    })?;
    Ok((result, counts))
}

pub(crate) fn total(counts: &[Counts]) -> u64 {
    counts
        .iter()
        .map(|c| c.acknowledged.load(Ordering::Relaxed))
        .sum()
}

pub(crate) fn wait_until(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() >= deadline {
            bail!("timed out waiting until {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Runs `scenario` on a fresh local cluster of `exe` processes.
pub fn run(exe: &Path, scenario: Scenario, opts: &ChaosOptions) -> Result<ChaosReport> {
    if matches!(scenario, Scenario::ReconfigTour | Scenario::SlowDisk) || scenario.is_network() {
        bail!(
            "the {} scenario has a report of its own (tour::run, slow_disk::run, \
             chaos_netns::run), not a chaos report",
            scenario.name()
        );
    }
    opts.check(scenario)?;
    let (mut cluster, n) = launch(exe, opts)?;
    let ready = Duration::from_secs(30);
    let proxies = load_clients(&cluster, opts)?;
    let history = (opts.history.as_deref())
        .map(|path| tagma_bench::history::HistoryRun::connect(&cluster, path))
        .transpose()?;
    let (recovery_ms, counts) = under_load(&proxies, history.as_ref(), |counts| {
        fault(&mut cluster, scenario, opts, counts)
    })?;
    let history = history.map(|h| h.finish()).transpose()?;
    let reader = cluster.proxy(ready)?;
    let (lost, duplicated) = account(&reader, &counts)?;
    let states = cluster.converged_states(&reader, &cluster.cfg.members(), ready)?;
    // The replicas that were restarted with less than they had: the lagging one, or the
    // damaged ones.
    let damaged: Vec<usize> = opts.damaged_replicas(scenario).collect();
    let watched = if damaged.is_empty() {
        vec![n - 1]
    } else {
        damaged.clone()
    };
    let corrupted = matches!(
        scenario,
        Scenario::CorruptLog | Scenario::CorruptCheckpoint | Scenario::CorruptBoth
    );
    let damaged_state_discarded = corrupted.then(|| {
        watched
            .iter()
            .all(|&i| cluster.metric(i, "tagma_state_discarded") > 0.0)
    });
    let repaired_by_state_vote = (scenario == Scenario::LyingDisk).then(|| {
        watched
            .iter()
            .all(|&i| cluster.metric(i, "tagma_state_repaired_total") > 0.0)
    });
    let lie_removed_by = (scenario == Scenario::LoneLyingDisk).then(|| {
        watched
            .iter()
            .map(|&i| lie_removal(&cluster, i).unwrap_or(LieRemoval::None))
            .collect()
    });
    let state_transfers = watched
        .iter()
        .map(|&i| cluster.metric(i, "tagma_state_transfers_total") as u64)
        .sum();
    let state_transfer_ms = watched
        .iter()
        .map(|&i| cluster.metric(i, "tagma_state_transfer_ms"))
        .fold(0.0, f64::max);
    Ok(ChaosReport {
        scenario: scenario.name().into(),
        mode: opts.mode.to_string(),
        n,
        f: opts.f,
        damaged_replicas: damaged,
        acknowledged_ops: total(&counts),
        in_doubt_ops: in_doubt(&counts),
        lost_acknowledged_ops: lost,
        duplicated_ops: duplicated,
        recovery_ms,
        state_digests_equal: digests_equal(&states),
        damaged_state_discarded,
        repaired_by_state_vote,
        lie_removed_by,
        state_transfers,
        state_transfer_ms,
        history,
    })
}

pub(crate) fn in_doubt(counts: &[Counts]) -> u64 {
    counts
        .iter()
        .map(|c| c.in_doubt.load(Ordering::Relaxed))
        .sum()
}

/// Reads every client's counter back: (acknowledged increments lost, increments applied
/// more than once).
pub(crate) fn account(reader: &Proxy, counts: &[Counts]) -> Result<(u64, u64)> {
    let (mut lost, mut duplicated) = (0u64, 0u64);
    for (i, c) in counts.iter().enumerate() {
        let reply = reader
            .invoke_ordered(
                KvOp::Get {
                    key: counter_key(i),
                }
                .encode(),
            )
            .with_context(|| format!("reading counter {i}"))?;
        let value = match KvReply::decode(&reply) {
            Ok(KvReply::Get { value: Some(v) }) if v.len() == 8 => {
                i64::from_le_bytes(v[..].try_into().expect("8 bytes")) as u64
            }
            Ok(KvReply::Get { value: None }) => 0,
            other => bail!("unexpected reply reading counter {i}: {other:?}"),
        };
        let acked = c.acknowledged.load(Ordering::Relaxed);
        let doubt = c.in_doubt.load(Ordering::Relaxed);
        lost += acked.saturating_sub(value);
        duplicated += value.saturating_sub(acked + doubt);
    }
    Ok((lost, duplicated))
}

/// The scenarios' cluster: [`ChaosOptions::n`] replicas tolerating `opts.f` faults, with
/// `durability = "fsync"` and a 500 ms request timeout, started. Returns it and n.
pub(crate) fn launch(exe: &Path, opts: &ChaosOptions) -> Result<(LocalCluster, usize)> {
    launch_with(exe, opts, |_| {})
}

/// [`launch`], with `edit` applied to the configuration last.
pub(crate) fn launch_with(
    exe: &Path,
    opts: &ChaosOptions,
    edit: impl Fn(&mut tagma_core::Config),
) -> Result<(LocalCluster, usize)> {
    launch_serving(exe, opts, None, Vec::new(), edit)
}

/// [`launch_with`] for the replicated service `service` (`None`: the key-value store), each
/// replica given `replica_args` too.
pub(crate) fn launch_serving(
    exe: &Path,
    opts: &ChaosOptions,
    service: Option<&str>,
    replica_args: Vec<String>,
    edit: impl Fn(&mut tagma_core::Config),
) -> Result<(LocalCluster, usize)> {
    let n = opts.n();
    let launch = LaunchOptions {
        replicas: n,
        mode: opts.mode,
        f: Some(opts.f as u32),
        service: service.map(str::to_owned),
        replica_args,
        unreplicated: false,
    };
    let cluster = LocalCluster::launch_with(exe, &launch, |cfg| {
        cfg.storage.durability = Durability::Fsync;
        cfg.storage.checkpoint_period = 200;
        // Small segments: the log a checkpoint covers is really released, so a replica that
        // was down long enough needs state transfer (a checkpoint and the log after it).
        cfg.storage.log_segment_bytes = 64 << 10;
        cfg.timeouts.request_timeout_ms = 500;
        edit(cfg);
    })?;
    Ok((cluster, n))
}

/// Waits (at most `timeout`) until replica `lagging` has executed as far as every other
/// member, within 2 instances.
pub(crate) fn wait_caught_up(
    cluster: &LocalCluster,
    lagging: usize,
    timeout: Duration,
) -> Result<()> {
    let probe = cluster.proxy(Duration::from_secs(30))?;
    let members = cluster.cfg.n();
    let position = |states: &[(tagma_wire::ReplicaId, Option<tagma_wire::StateInfo>)], i: usize| {
        states
            .iter()
            .find(|(id, _)| id.0 as usize == i)
            .and_then(|(_, s)| s.as_ref())
            .map(|s| s.executed_instances)
    };
    wait_until(&format!("replica {lagging} catches up"), timeout, || {
        let states = probe.query_states(Duration::from_secs(1));
        let others = (0..members)
            .filter(|&i| i != lagging)
            .filter_map(|i| position(&states, i))
            .min();
        matches!((position(&states, lagging), others), (Some(l), Some(o)) if l + 2 >= o)
    })
}

/// Injects the scenario's fault under the running load; returns the recovery time. If the
/// cluster does not recover, the replicas' warnings and last log lines go to standard error
/// with the failure (the cluster's directory is temporary).
pub(crate) fn fault(
    cluster: &mut LocalCluster,
    scenario: Scenario,
    opts: &ChaosOptions,
    counts: &[Counts],
) -> Result<f64> {
    let result = inject(cluster, scenario, opts, counts);
    if result.is_err() {
        cluster.dump_logs();
    }
    result
}

fn inject(
    cluster: &mut LocalCluster,
    scenario: Scenario,
    opts: &ChaosOptions,
    counts: &[Counts],
) -> Result<f64> {
    let ready = Duration::from_secs(30);
    wait_until("the cluster serves requests", ready, || total(counts) > 0)?;
    std::thread::sleep(opts.before);
    let n = cluster.cfg.n();
    let recovery_ms = match scenario {
        Scenario::LaggingReplica => {
            let lagging = n - 1;
            cluster.kill(lagging);
            std::thread::sleep(opts.down);
            let restarted = Instant::now();
            cluster.start(lagging)?;
            cluster.wait_ready(lagging, ready)?;
            wait_caught_up(cluster, lagging, Duration::from_secs(120))?;
            restarted.elapsed().as_secs_f64() * 1000.0
        }
        Scenario::ReconfigTour
        | Scenario::SlowDisk
        | Scenario::PrimaryCrash
        | Scenario::LyingExecutor
        | Scenario::RacyService
        | Scenario::PartitionLeader
        | Scenario::PartitionMinority
        | Scenario::PartitionMajoritySide
        | Scenario::Asymmetric
        | Scenario::Flapping
        | Scenario::Lossy
        | Scenario::SlowReplica => {
            unreachable!("refused by run")
        }
        Scenario::LoneLyingDisk => {
            let lying: Vec<usize> = opts.damaged_replicas(scenario).collect();
            for &i in &lying {
                let dir = tagma_node::cluster_dir::data_dir(
                    &cluster.dir,
                    &cluster.cfg,
                    tagma_wire::ReplicaId(i as u32),
                );
                wait_until(
                    "the replica to damage writes its first checkpoint",
                    Duration::from_secs(60),
                    || files(&dir.join("checkpoints"), "ckp").is_ok_and(|f| !f.is_empty()),
                )?;
                cluster.kill(i);
                lie_in_checkpoint(&dir.join("checkpoints"))?;
            }
            let restarted = Instant::now();
            for &i in &lying {
                cluster.start(i)?;
            }
            for &i in &lying {
                cluster.wait_ready(i, ready)?;
                wait_until(
                    "the restarted replica's state check to find and repair the lie",
                    Duration::from_secs(120),
                    || lie_removal(cluster, i).is_some(),
                )
                .with_context(|| state_check_metrics(cluster, i))?;
                wait_caught_up(cluster, i, Duration::from_secs(120))?;
            }
            restarted.elapsed().as_secs_f64() * 1000.0
        }
        Scenario::KillAll
        | Scenario::CorruptLog
        | Scenario::CorruptCheckpoint
        | Scenario::CorruptBoth
        | Scenario::WipeDisk
        | Scenario::LyingDisk => {
            let dirs: Vec<std::path::PathBuf> = opts
                .damaged_replicas(scenario)
                .map(|i| {
                    tagma_node::cluster_dir::data_dir(
                        &cluster.dir,
                        &cluster.cfg,
                        tagma_wire::ReplicaId(i as u32),
                    )
                })
                .collect();
            if matches!(
                scenario,
                Scenario::CorruptCheckpoint | Scenario::CorruptBoth | Scenario::LyingDisk
            ) {
                // A slow machine may not have reached the replicas' first checkpoint points
                // after `--before-s`: the load goes on until they have.
                wait_until(
                    "the replicas to damage write their first checkpoint",
                    Duration::from_secs(60),
                    || {
                        dirs.iter().all(|dir| {
                            files(&dir.join("checkpoints"), "ckp").is_ok_and(|f| !f.is_empty())
                        })
                    },
                )?;
            }
            cluster.stop_all();
            for dir in &dirs {
                match scenario {
                    Scenario::CorruptLog => corrupt_log(&dir.join("log"))?,
                    Scenario::CorruptCheckpoint => corrupt_checkpoint(&dir.join("checkpoints"))?,
                    Scenario::CorruptBoth => {
                        corrupt_log(&dir.join("log"))?;
                        corrupt_checkpoint(&dir.join("checkpoints"))?;
                    }
                    Scenario::WipeDisk => std::fs::remove_dir_all(dir)
                        .with_context(|| format!("deleting {}", dir.display()))?,
                    Scenario::LyingDisk => lie_in_checkpoint(&dir.join("checkpoints"))?,
                    _ => {}
                }
            }
            let restarted = Instant::now();
            cluster.start_all()?;
            let at = total(counts);
            wait_until("the restarted cluster serves again", ready, || {
                total(counts) > at
            })?;
            restarted.elapsed().as_secs_f64() * 1000.0
        }
    };
    std::thread::sleep(opts.after);
    Ok(recovery_ms)
}

/// Replica `i`'s state check and state transfer metrics, for an error.
fn state_check_metrics(cluster: &LocalCluster, i: usize) -> String {
    let names = [
        "tagma_state_unconfirmed",
        "tagma_state_checks_contradicted_total",
        "tagma_state_checks_confirmed_total",
        "tagma_state_repaired_total",
        "tagma_state_transfers_total",
        "tagma_executed_instances",
    ];
    let values: Vec<String> = names
        .iter()
        .map(|m| format!("{m} {}", cluster.metric(i, m)))
        .collect();
    format!("replica {i}: {}", values.join(", "))
}

/// What replaced replica `i`'s lying state, once its state is no longer unconfirmed and
/// nothing confirmed the lie.
fn lie_removal(cluster: &LocalCluster, i: usize) -> Option<LieRemoval> {
    let metric = |name| cluster.metric(i, name);
    if metric("tagma_state_unconfirmed") != 0.0
        || metric("tagma_state_checks_confirmed_total") > 0.0
    {
        return None;
    }
    if metric("tagma_state_checks_contradicted_total") > 0.0 {
        (metric("tagma_state_repaired_total") > 0.0).then_some(LieRemoval::StateCheck)
    } else {
        (metric("tagma_state_transfers_total") > 0.0).then_some(LieRemoval::CatchUp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(mode: Mode, f: usize, damaged: usize) -> ChaosOptions {
        ChaosOptions {
            history: None,
            mode,
            f,
            damaged,
            clients: 8,
            before: Duration::ZERO,
            down: Duration::ZERO,
            after: Duration::ZERO,
        }
    }

    #[test]
    fn options_are_checked_against_the_scenario() {
        use Scenario::*;
        assert_eq!(opts(Mode::Bft, 2, 1).n(), 7);
        assert_eq!(opts(Mode::Cft, 2, 1).n(), 5);
        assert_eq!(
            opts(Mode::Bft, 2, 2).damaged_replicas(Scenario::WipeDisk),
            5..7
        );
        assert!(
            opts(Mode::Bft, 2, 2)
                .damaged_replicas(Scenario::KillAll)
                .is_empty()
        );
        for (mode, f, damaged, scenario) in [
            (Mode::Bft, 1, 1, KillAll),
            (Mode::Cft, 2, 2, WipeDisk),
            (Mode::Bft, F_MAX, F_MAX, CorruptBoth),
            (Mode::Bft, 1, 1, ReconfigTour),
            (Mode::Cft, 2, 1, SlowDisk),
        ] {
            opts(mode, f, damaged).check(scenario).unwrap();
        }
        for (f, damaged, scenario, says) in [
            (0, 1, KillAll, "--f 0"),
            (F_MAX + 1, 1, KillAll, "--f 6"),
            (usize::MAX, 1, KillAll, "outside"),
            (1, 0, CorruptLog, "--damaged 0"),
            (1, 2, CorruptCheckpoint, "raise --f"),
            (2, 2, LaggingReplica, "--damaged applies"),
            (2, 1, ReconfigTour, "f = 1 only"),
        ] {
            let err = opts(Mode::Bft, f, damaged).check(scenario).unwrap_err();
            assert!(err.to_string().contains(says), "{err}");
        }
        let err = opts(Mode::Cft, 1, 1).check(LyingDisk).unwrap_err();
        assert!(err.to_string().contains("without --cft"), "{err}");
        opts(Mode::Bft, 2, 2).check(LyingDisk).unwrap();
        let mut zero_clients = opts(Mode::Bft, 1, 1);
        zero_clients.clients = 0;
        assert!(zero_clients.check(KillAll).is_err());
    }
}
