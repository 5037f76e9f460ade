//! `tagma chaos --netns`: faults between hosts. Each replica runs on its own simulated host
//! (a network namespace), the clients on another, and the links between them are cut, made
//! lossy or slow while the counters' load runs with durability on and a contending load
//! records its history.
//!
//! Scenarios (the fault lasts `--down-s`, then every link is healed):
//! - `partition-leader`: the leader is cut from the other replicas; clients still reach it.
//! - `partition-minority`: one follower is cut from every other host (1 | n−1).
//! - `partition-majority-side`: the leader and one follower are cut from the other replicas
//!   (2 | 2 for n = 4: no side holds a quorum; 2 | 1 for n = 3); clients reach both sides.
//! - `asymmetric`: the leader can send but receives nothing; healed, then the leader of that
//!   moment receives but cannot send.
//! - `flapping`: the leader's host link goes down and up, every 0.5 to 2 s (seeded).
//! - `lossy`: every link drops 5 % of packets, duplicates 1 %, and delays each by
//!   30 ms ± 20 ms (so packets overtake each other).
//! - `slow-replica`: a follower's links carry 1 Mbit/s.
//!
//! The report: acknowledged, lost and duplicated increments (from the counters read back),
//! the longest time without any completed operation, how long after each heal operations
//! completed again, the leader changes, whether the replicas' state digests agree, the
//! history's verdict, and the emulator's packet counts.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tagma_cluster::{LocalCluster, digests_equal};
use tagma_core::config::Durability;
use tagma_netns::{LinkFaults, LinkStats, Network, host_addr};

use crate::chaos::{ChaosOptions, Counts, Scenario, account, in_doubt, total, under_load};

/// The port every replica listens on, on its own host.
const REPLICA_PORT: u16 = 7000;
/// The port of every replica's metrics endpoint.
const METRICS_PORT: u16 = 9100;
/// How often the completed operations are sampled (the resolution of `unavailable_ms`).
const SAMPLE: Duration = Duration::from_millis(50);
/// How soon after a heal operations must complete again for the run to pass.
pub const BACK_AFTER_HEAL_MAX_MS: f64 = 3_000.0;

/// What a network scenario found.
#[derive(Clone, Debug, Serialize)]
pub struct NetReport {
    pub scenario: String,
    pub mode: String,
    pub n: usize,
    pub f: usize,
    /// The seed of the emulator's random faults (loss, duplication, delays, flapping).
    pub seed: u64,
    pub fault_s: f64,
    pub acknowledged_ops: u64,
    pub in_doubt_ops: u64,
    pub lost_acknowledged_ops: u64,
    pub duplicated_ops: u64,
    /// The longest time without any completed increment, from the first to the last.
    pub unavailable_ms: f64,
    /// For each heal: how long until an increment completed after it.
    pub back_after_heal_ms: Vec<f64>,
    pub leader_changes: u64,
    pub state_digests_equal: bool,
    pub history: tagma_bench::history::HistoryOutcome,
    /// Packets the link emulator delivered, dropped, duplicated and delayed.
    pub packets: LinkStats,
    /// Completed increments per second, in half-second bins (seconds since the load began).
    pub throughput: Vec<(f64, f64)>,
    /// The faults and heals, at seconds since the load began.
    pub events: Vec<(f64, String)>,
}

impl NetReport {
    pub fn passed(&self) -> bool {
        self.lost_acknowledged_ops == 0
            && self.duplicated_ops == 0
            && self.state_digests_equal
            && self.history.linearizable
            && !self.back_after_heal_ms.is_empty()
            && self
                .back_after_heal_ms
                .iter()
                .all(|&ms| ms <= BACK_AFTER_HEAL_MAX_MS)
    }

    pub fn table(&self) -> String {
        let backs: Vec<String> = self
            .back_after_heal_ms
            .iter()
            .map(|ms| format!("{ms:.0}"))
            .collect();
        let p = &self.packets;
        format!(
            "scenario {} ({} n={} f={}, fault {:.1} s, seed {})\n\
             acknowledged_ops       {}\n\
             in_doubt_ops           {}\n\
             lost_acknowledged_ops  {}\n\
             duplicated_ops         {}\n\
             unavailable_ms         {:.0}\n\
             back_after_heal_ms     {} (at most {BACK_AFTER_HEAL_MAX_MS:.0})\n\
             leader_changes         {}\n\
             state_digests_equal    {}\n\
             packets                {} delivered, {} cut, {} lost, {} over a full queue, {} duplicated, {} delayed\n\
             {}{}",
            self.scenario,
            self.mode,
            self.n,
            self.f,
            self.fault_s,
            self.seed,
            self.acknowledged_ops,
            self.in_doubt_ops,
            self.lost_acknowledged_ops,
            self.duplicated_ops,
            self.unavailable_ms,
            backs.join(", "),
            self.leader_changes,
            self.state_digests_equal,
            p.delivered,
            p.dropped_blocked,
            p.dropped_lost,
            p.dropped_queue,
            p.duplicated,
            p.delayed,
            self.history.line(),
            if self.passed() { "PASSED" } else { "FAILED" }
        )
    }

    /// Throughput over time with the faults and heals marked.
    pub fn chart(&self) -> tagma_bench::plot::Chart {
        tagma_bench::plot::Chart::throughput_timeline(
            format!(
                "{} ({} n={}): throughput over time",
                self.scenario, self.mode, self.n
            ),
            self.throughput.clone(),
            self.events.clone(),
        )
    }
}

/// The options of a network scenario beyond [`ChaosOptions`].
#[derive(Clone, Debug)]
pub struct NetOptions {
    pub seed: u64,
}

/// What happened when, during the load.
struct Timeline {
    start: Instant,
    /// (seconds, completed increments so far).
    samples: Mutex<Vec<(f64, u64)>>,
    events: Mutex<Vec<(f64, String)>>,
    heals: Mutex<Vec<f64>>,
}

impl Timeline {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn event(&self, what: impl Into<String>) {
        let at = self.now();
        self.events.lock().expect("events").push((at, what.into()));
    }

    fn healed(&self, net: &Network) {
        net.heal();
        let at = self.now();
        self.heals.lock().expect("heals").push(at);
        self.events
            .lock()
            .expect("events")
            .push((at, "healed".into()));
    }
}

/// Runs `scenario` with each replica and the clients on hosts of their own.
pub fn run(
    exe: &Path,
    scenario: Scenario,
    opts: &ChaosOptions,
    net_opts: &NetOptions,
) -> Result<NetReport> {
    if !scenario.is_network() {
        bail!(
            "--netns runs the network scenarios (partition-leader, partition-minority, \
             partition-majority-side, asymmetric, flapping, lossy, slow-replica), not {}",
            scenario.name()
        );
    }
    opts.check(scenario)?;
    let n = opts.n();
    let client = n;
    let net = Network::create(n + 1, net_opts.seed)?;
    // This thread, and the clients' threads it starts, live on the clients' host.
    net.enter(client)?;
    let mut cluster = LocalCluster::create_with_f(exe, n, opts.mode, Some(opts.f as u32), None)?;
    cluster.netns = (0..n).map(|i| net.netns(i).to_string()).collect();
    cluster.reconfigure(|cfg| {
        cfg.storage.durability = Durability::Fsync;
        cfg.storage.checkpoint_period = 200;
        cfg.storage.log_segment_bytes = 64 << 10;
        cfg.timeouts.request_timeout_ms = 500;
        for (i, r) in cfg.replicas.iter_mut().enumerate() {
            r.addr = format!("{}:{REPLICA_PORT}", host_addr(i));
            r.metrics_addr = Some(format!("{}:{METRICS_PORT}", host_addr(i)));
        }
    })?;
    if let Err(e) = cluster.start_all() {
        cluster.dump_logs();
        return Err(e);
    }
    let ready = Duration::from_secs(30);
    let proxies = crate::chaos::load_clients(&cluster, opts)?;
    let history_path = opts
        .history
        .clone()
        .unwrap_or_else(|| default_history(scenario, opts));
    let history = tagma_bench::history::HistoryRun::connect(&cluster, &history_path)?;
    let timeline = Timeline {
        start: Instant::now(),
        samples: Mutex::new(Vec::new()),
        events: Mutex::new(Vec::new()),
        heals: Mutex::new(Vec::new()),
    };
    let ((), counts) = under_load(&proxies, Some(&history), |counts| {
        sampled(&timeline, counts, || {
            inject(&net, &cluster, scenario, opts, net_opts.seed, &timeline)
        })
    })?;
    let history = history.finish()?;
    let reader = cluster.proxy(ready)?;
    let (lost, duplicated) = account(&reader, &counts)?;
    let states = cluster
        .converged_states(&reader, &cluster.cfg.members(), Duration::from_secs(60))
        .context("after the heal")?;
    let leader_changes = (0..n)
        .map(|i| cluster.metric(i, "tagma_regency") as u64)
        .max()
        .unwrap_or(0);
    let samples = timeline.samples.into_inner().expect("samples");
    let heals = timeline.heals.into_inner().expect("heals");
    Ok(NetReport {
        scenario: scenario.name().into(),
        mode: opts.mode.to_string(),
        n,
        f: opts.f,
        seed: net_opts.seed,
        fault_s: opts.down.as_secs_f64(),
        acknowledged_ops: total(&counts),
        in_doubt_ops: in_doubt(&counts),
        lost_acknowledged_ops: lost,
        duplicated_ops: duplicated,
        unavailable_ms: longest_gap(&samples) * 1e3,
        back_after_heal_ms: heals
            .iter()
            .map(|&h| back_after(&samples, h).map_or(f64::INFINITY, |s| s * 1e3))
            .collect(),
        leader_changes,
        state_digests_equal: digests_equal(&states),
        history,
        packets: net.stats(),
        throughput: throughput(&samples, 0.5),
        events: timeline.events.into_inner().expect("events"),
    })
}

/// Where the history goes when `--history` is not given.
fn default_history(scenario: Scenario, opts: &ChaosOptions) -> PathBuf {
    std::env::temp_dir().join(format!(
        "tagma-chaos-{}-{}-{}.jsonl",
        scenario.name(),
        opts.mode.to_string().to_lowercase(),
        std::process::id()
    ))
}

/// Runs `body` while a thread samples the completed increments every [`SAMPLE`].
fn sampled<T>(timeline: &Timeline, counts: &[Counts], body: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let sample = (timeline.now(), total(counts));
                timeline.samples.lock().expect("samples").push(sample);
                std::thread::sleep(SAMPLE);
            }
        });
        let result = body();
        stop.store(true, Ordering::Relaxed);
        result
    })
}

/// The load before the fault, the fault, the heals, and the load after.
fn inject(
    net: &Network,
    cluster: &LocalCluster,
    scenario: Scenario,
    opts: &ChaosOptions,
    seed: u64,
    t: &Timeline,
) -> Result<()> {
    let n = opts.n();
    let all: Vec<usize> = (0..=n).collect();
    std::thread::sleep(opts.before);
    let leader = cluster.current_leader();
    let follower = if leader == n - 1 { n - 2 } else { n - 1 };
    let replicas_but = |x: &[usize]| -> Vec<usize> { (0..n).filter(|i| !x.contains(i)).collect() };
    match scenario {
        Scenario::PartitionLeader => {
            net.set_between(&[leader], &replicas_but(&[leader]), LinkFaults::cut());
            t.event(format!("leader {leader} cut from the replicas"));
            std::thread::sleep(opts.down);
            t.healed(net);
        }
        Scenario::PartitionMinority => {
            net.set_between(&[follower], &all, LinkFaults::cut());
            t.event(format!("replica {follower} cut from every host"));
            std::thread::sleep(opts.down);
            t.healed(net);
        }
        Scenario::PartitionMajoritySide => {
            let other = (0..n)
                .find(|&i| i != leader && i != follower)
                .expect("n ≥ 3");
            let side = [leader, other];
            net.set_between(&side, &replicas_but(&side), LinkFaults::cut());
            t.event(format!("replicas {leader} and {other} cut from the others"));
            std::thread::sleep(opts.down);
            t.healed(net);
        }
        Scenario::Asymmetric => {
            for &h in all.iter().filter(|&&h| h != leader) {
                net.set_link(h, leader, LinkFaults::cut());
            }
            t.event(format!("leader {leader} receives nothing"));
            std::thread::sleep(opts.down);
            t.healed(net);
            std::thread::sleep(opts.after);
            let leader = cluster.current_leader();
            for &h in all.iter().filter(|&&h| h != leader) {
                net.set_link(leader, h, LinkFaults::cut());
            }
            t.event(format!("leader {leader} sends nothing"));
            std::thread::sleep(opts.down);
            t.healed(net);
        }
        Scenario::Flapping => {
            let mut rng = fastrand::Rng::with_seed(seed);
            let end = Instant::now() + opts.down;
            t.event(format!("replica {leader}'s link flaps"));
            let mut down = false;
            while Instant::now() < end {
                down = !down;
                let faults = if down {
                    LinkFaults::cut()
                } else {
                    LinkFaults::default()
                };
                net.set_between(&[leader], &all, faults);
                let pause = Duration::from_millis(rng.u64(500..=2_000));
                std::thread::sleep(pause.min(end.saturating_duration_since(Instant::now())));
            }
            t.healed(net);
        }
        Scenario::Lossy => {
            net.set_all(LinkFaults {
                loss: 0.05,
                duplicate: 0.01,
                delay: Duration::from_millis(30),
                jitter: Duration::from_millis(20),
                ..LinkFaults::default()
            });
            t.event("every link lossy");
            std::thread::sleep(opts.down);
            t.healed(net);
        }
        Scenario::SlowReplica => {
            let slow = LinkFaults {
                rate_bps: Some(1_000_000),
                ..LinkFaults::default()
            };
            net.set_between(&[follower], &all, slow);
            t.event(format!("replica {follower} at 1 Mbit/s"));
            std::thread::sleep(opts.down);
            t.healed(net);
        }
        other => bail!("{} is not a network scenario", other.name()),
    }
    std::thread::sleep(opts.after);
    Ok(())
}

/// The longest time between two samples that saw new completions (or since the last one).
fn longest_gap(samples: &[(f64, u64)]) -> f64 {
    let Some(first) = samples.iter().position(|s| s.1 > 0) else {
        return samples.last().map_or(0.0, |s| s.0);
    };
    let mut last_progress = samples[first];
    let mut longest = 0.0f64;
    for &(t, done) in &samples[first + 1..] {
        if done > last_progress.1 {
            longest = longest.max(t - last_progress.0);
            last_progress = (t, done);
        }
    }
    let end = samples.last().map_or(0.0, |s| s.0);
    longest.max(end - last_progress.0)
}

/// Seconds from `heal` until a sample saw an increment completed after it.
fn back_after(samples: &[(f64, u64)], heal: f64) -> Option<f64> {
    let at_heal = samples
        .iter()
        .take_while(|s| s.0 <= heal)
        .last()
        .map_or(0, |s| s.1);
    samples
        .iter()
        .find(|s| s.0 > heal && s.1 > at_heal)
        .map(|s| s.0 - heal)
}

/// Increments per second in bins of `bin` seconds, at each bin's end.
fn throughput(samples: &[(f64, u64)], bin: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut edge = bin;
    let mut before = 0u64;
    let mut last = 0u64;
    for &(t, done) in samples {
        while t >= edge {
            out.push((edge, (last - before) as f64 / bin));
            before = last;
            edge += bin;
        }
        last = done;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_runs_between_two_samples_with_progress() {
        let s = [
            (0.0, 0),
            (0.5, 10),
            (1.0, 20),
            (1.5, 20),
            (2.0, 20),
            (2.5, 30),
            (3.0, 40),
        ];
        assert!((longest_gap(&s) - 1.5).abs() < 1e-9);
        // A stall at the end counts until the last sample.
        let s = [(0.0, 5), (1.0, 10), (2.0, 10), (4.0, 10)];
        assert!((longest_gap(&s) - 3.0).abs() < 1e-9);
    }

    #[test]
    fn service_is_back_at_the_first_progress_after_a_heal() {
        let s = [
            (0.0, 0),
            (1.0, 10),
            (2.0, 10),
            (3.0, 10),
            (3.5, 12),
            (4.0, 20),
        ];
        let back = back_after(&s, 2.2).expect("progress after the heal");
        assert!((back - 1.3).abs() < 1e-9, "{back}");
        assert_eq!(back_after(&s, 4.0), None);
    }

    #[test]
    fn throughput_counts_per_bin() {
        let s = [(0.1, 0), (0.4, 5), (0.6, 10), (0.9, 10), (1.1, 30)];
        assert_eq!(throughput(&s, 0.5), vec![(0.5, 10.0), (1.0, 10.0)]);
    }
}
