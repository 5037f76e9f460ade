//! `tagma chaos --scenario slow-disk`: under the chaos load (every client increments its own
//! counter; every acknowledged increment is accounted for at the end), the disk of one
//! follower, then of the leader, stalls for `--down-s` each (`[testing] stall_file`: every
//! flush of that replica waits — its log, its votes, its checkpoints), then recovers.
//!
//! A replica whose disk stalls falls behind: it holds its consensus work until its disk
//! answers (a leader stops proposing, and the others change leader), while the others serve.
//! Once its disk is back it catches up by decision forwarding or state transfer. The report
//! gives the throughput before, during each stall and after, and how long each stalled
//! replica took to catch up with the others.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use tagma_cluster::{LocalCluster, digests_equal};

use crate::chaos::{
    ChaosOptions, Counts, Scenario, account, in_doubt, total, wait_caught_up, wait_until,
};

/// The stall file's name in a replica's data directory (`[testing] stall_file`).
const STALL_FILE: &str = "stall";

/// What a slow-disk run found.
#[derive(Clone, Debug, Serialize)]
pub struct SlowDiskReport {
    pub scenario: String,
    pub mode: String,
    pub n: usize,
    pub f: usize,
    pub acknowledged_ops: u64,
    /// Increments that failed at the client: applied or not.
    pub in_doubt_ops: u64,
    pub lost_acknowledged_ops: u64,
    pub duplicated_ops: u64,
    pub state_digests_equal: bool,
    /// How long each disk stalled.
    pub stall_s: f64,
    /// Acknowledged operations per second over `--before-s` before the first stall.
    pub ops_per_s_before: f64,
    pub follower_stalled: usize,
    /// While the follower's disk stalled.
    pub ops_per_s_follower_stall: f64,
    /// From the end of its stall until it executed as far as the others (within 2
    /// instances).
    pub follower_catch_up_ms: f64,
    pub leader_stalled: usize,
    /// While the leader's disk stalled (its replacement by a leader change included).
    pub ops_per_s_leader_stall: f64,
    pub leader_catch_up_ms: f64,
    /// Over `--after-s` once both caught up.
    pub ops_per_s_after: f64,
    /// States the stalled replicas installed by state transfer while catching up.
    pub state_transfers: u64,
    /// With `--history`: the recorded history and the checker's verdict.
    pub history: Option<tagma_bench::history::HistoryOutcome>,
}

impl SlowDiskReport {
    /// Whether the run met its guarantees: nothing lost or applied twice, equal states, and
    /// the others served while each disk stalled.
    pub fn passed(&self) -> bool {
        self.lost_acknowledged_ops == 0
            && self.duplicated_ops == 0
            && self.state_digests_equal
            && self.ops_per_s_follower_stall > 0.0
            && self.ops_per_s_leader_stall > 0.0
            && self.history.as_ref().is_none_or(|h| h.linearizable)
    }

    pub fn table(&self) -> String {
        format!(
            "scenario {} ({} n={} f={}), each disk stalled {:.1} s\n\
             ops/s before                 {:.0}\n\
             ops/s follower {} stalled     {:.0}\n\
             follower catch-up ms         {:.0}\n\
             ops/s leader {} stalled       {:.0}\n\
             leader catch-up ms           {:.0}\n\
             ops/s after                  {:.0}\n\
             state_transfers              {}\n\
             acknowledged_ops             {}\n\
             in_doubt_ops                 {}\n\
             lost_acknowledged_ops        {}\n\
             duplicated_ops               {}\n\
             state_digests_equal          {}\n\
             {}{}",
            self.scenario,
            self.mode,
            self.n,
            self.f,
            self.stall_s,
            self.ops_per_s_before,
            self.follower_stalled,
            self.ops_per_s_follower_stall,
            self.follower_catch_up_ms,
            self.leader_stalled,
            self.ops_per_s_leader_stall,
            self.leader_catch_up_ms,
            self.ops_per_s_after,
            self.state_transfers,
            self.acknowledged_ops,
            self.in_doubt_ops,
            self.lost_acknowledged_ops,
            self.duplicated_ops,
            self.state_digests_equal,
            self.history.as_ref().map_or_else(String::new, |h| h.line()),
            if self.passed() { "PASSED" } else { "FAILED" }
        )
    }
}

/// What the stalls measured: (throughput, catch-up ms) of the follower and of the leader,
/// and the throughput before and after.
struct Figures {
    before: f64,
    follower: (usize, f64, f64),
    leader: (usize, f64, f64),
    after: f64,
}

/// Runs the scenario on a fresh local cluster of `exe` processes.
pub fn run(exe: &std::path::Path, opts: &ChaosOptions) -> Result<SlowDiskReport> {
    opts.check(Scenario::SlowDisk)?;
    let (cluster, n) = crate::chaos::launch_with(exe, opts, |cfg| {
        cfg.testing.stall_file = STALL_FILE.into();
    })?;
    let ready = Duration::from_secs(30);
    let proxies = crate::chaos::load_clients(&cluster, opts)?;
    let history = (opts.history.as_deref())
        .map(|path| tagma_bench::history::HistoryRun::connect(&cluster, path))
        .transpose()?;
    let (figures, counts) = crate::chaos::under_load(&proxies, history.as_ref(), |counts| {
        stalls(&cluster, opts, counts)
    })?;
    let history = history.map(|h| h.finish()).transpose()?;
    let reader = cluster.proxy(ready)?;
    let (lost, duplicated) = account(&reader, &counts)?;
    let states = cluster.converged_states(&reader, &cluster.cfg.members(), ready)?;
    let state_transfers = [figures.follower.0, figures.leader.0]
        .iter()
        .map(|&i| cluster.metric(i, "tagma_state_transfers_total") as u64)
        .sum();
    Ok(SlowDiskReport {
        scenario: Scenario::SlowDisk.name().into(),
        mode: opts.mode.to_string(),
        n,
        f: opts.f,
        acknowledged_ops: total(&counts),
        in_doubt_ops: in_doubt(&counts),
        lost_acknowledged_ops: lost,
        duplicated_ops: duplicated,
        state_digests_equal: digests_equal(&states),
        stall_s: opts.down.as_secs_f64(),
        ops_per_s_before: figures.before,
        follower_stalled: figures.follower.0,
        ops_per_s_follower_stall: figures.follower.1,
        follower_catch_up_ms: figures.follower.2,
        leader_stalled: figures.leader.0,
        ops_per_s_leader_stall: figures.leader.1,
        leader_catch_up_ms: figures.leader.2,
        ops_per_s_after: figures.after,
        state_transfers,
        history,
    })
}

/// Operations per second acknowledged over the next `window` (at least 1 s).
fn rate(counts: &[Counts], window: Duration) -> f64 {
    let (at, started) = (total(counts), Instant::now());
    std::thread::sleep(window.max(Duration::from_secs(1)));
    (total(counts) - at) as f64 / started.elapsed().as_secs_f64()
}

/// Stalls replica `i`'s disk for `down` under the load, then lets it go: returns the
/// throughput during the stall and how long it took to catch up afterwards.
fn stall(
    cluster: &LocalCluster,
    i: usize,
    down: Duration,
    counts: &[Counts],
) -> Result<(f64, f64)> {
    let dir = tagma_node::cluster_dir::data_dir(
        &cluster.dir,
        &cluster.cfg,
        tagma_wire::ReplicaId(i as u32),
    );
    let file = dir.join(STALL_FILE);
    std::fs::write(&file, b"").with_context(|| format!("creating {}", file.display()))?;
    let during = rate(counts, down);
    std::fs::remove_file(&file).with_context(|| format!("removing {}", file.display()))?;
    let released = Instant::now();
    wait_caught_up(cluster, i, Duration::from_secs(120))?;
    Ok((during, released.elapsed().as_secs_f64() * 1000.0))
}

/// The stalls, under the running load: a follower's disk, then the leader's.
fn stalls(cluster: &LocalCluster, opts: &ChaosOptions, counts: &[Counts]) -> Result<Figures> {
    wait_until(
        "the cluster serves requests",
        Duration::from_secs(30),
        || total(counts) > 0,
    )?;
    let before = rate(counts, opts.before);
    let n = cluster.cfg.n();
    let leader = cluster.current_leader();
    let follower = (0..n).rev().find(|&i| i != leader).unwrap_or(n - 1);
    let (follower_ops, follower_ms) = stall(cluster, follower, opts.down, counts)?;
    let leader = cluster.current_leader();
    let (leader_ops, leader_ms) = stall(cluster, leader, opts.down, counts)?;
    let after = rate(counts, opts.after);
    Ok(Figures {
        before,
        follower: (follower, follower_ops, follower_ms),
        leader: (leader, leader_ops, leader_ms),
        after,
    })
}
