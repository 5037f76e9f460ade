//! `tagma bench soak`: a long run of a local BFT cluster (n = 4, durability on) under a
//! mixed key-value load with faults at a fixed period, sampling every replica's resident
//! memory, open descriptors, threads and disk usage, to show that nothing grows without
//! bound.
//!
//! The faults rotate: a follower killed and restarted at once (local recovery); the leader
//! paused with SIGSTOP for 3 s and resumed (a leader change, the paused process keeping its
//! memory); a follower killed and kept down long enough that the others release the log it
//! misses, then restarted (state transfer). Only one follower is ever restarted, so the
//! other replicas run from the first sample to the last, and their growth is measured over
//! the whole run; the restarted one's since its last start.
//!
//! The load writes a bounded key space (prefilled before the first sample), so the state
//! stops growing once every key exists, and runs unmeasured for a warm-up first: what grows
//! after that is a leak.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use serde::Serialize;
use tagma_client::Proxy;
use tagma_cluster::{LaunchOptions, LocalCluster, digests_equal};
use tagma_core::Mode;
use tagma_core::config::Durability;
use tagma_kv::KvOp;
use tagma_wire::ReplicaId;

use crate::process_sample::ProcessSample;

/// The knobs of a soak run.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    pub minutes: f64,
    /// Seconds between two faults.
    pub fault_every_s: f64,
    /// Seconds between two samples of the replicas.
    pub sample_s: f64,
    pub clients: usize,
    /// Keys of the bounded key space.
    pub keys: usize,
    /// Minutes of load before the first sample and the first fault: allocator caches,
    /// connection buffers and the log and checkpoints reach their working size first, so
    /// that the first quarter measures the steady state, as the last does.
    pub warmup_min: f64,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

/// The most a never-restarted replica's resident memory may grow, first quarter to last.
pub const RSS_GROWTH_MAX_PCT: f64 = 5.0;

/// A fault and when it began.
#[derive(Clone, Debug, Serialize)]
pub struct SoakEvent {
    pub at_s: f64,
    pub what: String,
}

/// One sample of one replica.
#[derive(Clone, Debug, Serialize)]
pub struct SoakSample {
    pub at_s: f64,
    pub replica: usize,
    pub rss_mb: f64,
    pub fds: u64,
    pub threads: u64,
    /// Bytes of its data directory (log segments, checkpoints, votes), in MiB.
    pub disk_mb: f64,
    /// What its allocator reports (from its metrics; 0 when they did not answer): bytes
    /// allocated and not freed, and bytes it keeps resident, in MiB.
    pub heap_allocated_mb: f64,
    pub heap_resident_mb: f64,
}

/// What one replica did over the run.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaSoak {
    pub replica: usize,
    pub restarts: u64,
    /// Measured over the samples since its last start.
    pub samples: usize,
    pub rss_first_quarter_mb: f64,
    pub rss_last_quarter_mb: f64,
    pub rss_growth_pct: f64,
    /// The same for the bytes allocated and not freed: a leak grows both, the allocator's
    /// caches and fragmentation only the resident memory.
    pub heap_first_quarter_mb: f64,
    pub heap_last_quarter_mb: f64,
    pub heap_growth_pct: f64,
    /// Medians of the first and the last quarter.
    pub fds_first: f64,
    pub fds_last: f64,
    pub threads_first: f64,
    pub threads_last: f64,
    pub disk_max_mb: f64,
    pub disk_last_mb: f64,
}

/// What a soak run found.
#[derive(Clone, Debug, Serialize)]
pub struct SoakReport {
    pub minutes: f64,
    pub n: usize,
    pub operations: u64,
    pub failed_operations: u64,
    pub ops_per_s: f64,
    pub faults: Vec<SoakEvent>,
    pub leader_changes: u64,
    pub state_transfers: u64,
    /// The largest growth among the replicas that ran the whole time.
    pub rss_growth_pct: f64,
    /// The largest growth of the descriptor and thread medians among those replicas.
    pub fd_growth: f64,
    pub thread_growth: f64,
    pub state_digests_equal: bool,
    pub replicas: Vec<ReplicaSoak>,
    pub samples: Vec<SoakSample>,
}

impl SoakReport {
    pub fn passed(&self) -> bool {
        self.rss_growth_pct <= RSS_GROWTH_MAX_PCT
            && self.fd_growth <= 0.0
            && self.thread_growth <= 0.0
            && self.state_digests_equal
    }

    pub fn table(&self) -> String {
        let mut out = format!(
            "soak: {:.1} min, BFT n={}, {} operations ({:.0}/s, {} failed), {} faults, {} leader changes, {} state transfers\n\
             replica restarts samples  rss first→last MiB  growth   heap first→last MiB  growth   fds first→last  threads first→last  disk max/last MiB\n",
            self.minutes,
            self.n,
            self.operations,
            self.ops_per_s,
            self.failed_operations,
            self.faults.len(),
            self.leader_changes,
            self.state_transfers
        );
        for r in &self.replicas {
            out.push_str(&format!(
                "{:>7} {:>8} {:>7}  {:>7.1} → {:<7.1}  {:>+6.1}%  {:>8.1} → {:<8.1}  {:>+6.1}%  {:>5.0} → {:<5.0}  {:>7.0} → {:<7.0}  {:>7.1} / {:.1}\n",
                r.replica,
                r.restarts,
                r.samples,
                r.rss_first_quarter_mb,
                r.rss_last_quarter_mb,
                r.rss_growth_pct,
                r.heap_first_quarter_mb,
                r.heap_last_quarter_mb,
                r.heap_growth_pct,
                r.fds_first,
                r.fds_last,
                r.threads_first,
                r.threads_last,
                r.disk_max_mb,
                r.disk_last_mb
            ));
        }
        out.push_str(&format!(
            "rss_growth_pct {:.2} (at most {RSS_GROWTH_MAX_PCT}), fd_growth {:+.0}, thread_growth {:+.0}, state_digests_equal {}\n{}",
            self.rss_growth_pct,
            self.fd_growth,
            self.thread_growth,
            self.state_digests_equal,
            if self.passed() { "PASSED" } else { "FAILED" }
        ));
        out
    }

    /// Resident memory of each replica over time, the faults marked.
    pub fn chart(&self) -> crate::plot::Chart {
        let series = self
            .replicas
            .iter()
            .map(|r| crate::plot::Series {
                label: format!("replica {} ({} restarts)", r.replica, r.restarts),
                points: minute_means(self.samples.iter().filter(|s| s.replica == r.replica)),
            })
            .collect();
        // A line per fault would hide the curves: the faults are named in the title, and
        // listed in the report.
        crate::plot::Chart {
            title: format!(
                "Soak ({:.0} min, BFT n={}, {} faults): resident memory, mean per minute",
                self.minutes,
                self.n,
                self.faults.len()
            ),
            x_label: "time (min)".into(),
            y_label: "RSS (MiB)".into(),
            integer_x: false,
            series,
            events: Vec::new(),
        }
    }
}

/// The mean RSS of each whole minute of `samples` (minute, MiB), at the minute's middle.
fn minute_means<'a>(samples: impl Iterator<Item = &'a SoakSample>) -> Vec<(f64, f64)> {
    let mut sums: std::collections::BTreeMap<u64, (f64, u32)> = std::collections::BTreeMap::new();
    for s in samples {
        let e = sums.entry((s.at_s / 60.0) as u64).or_default();
        e.0 += s.rss_mb;
        e.1 += 1;
    }
    sums.into_iter()
        .map(|(m, (sum, k))| (m as f64 + 0.5, sum / f64::from(k)))
        .collect()
}

/// The replica that is restarted: the last one, unless it leads (then the one before).
fn victim(cluster: &LocalCluster, n: usize) -> usize {
    if cluster.current_leader() == n - 1 {
        n - 2
    } else {
        n - 1
    }
}

/// Runs the soak on a fresh cluster of `exe` processes.
pub fn run(exe: &Path, opts: &SoakOptions) -> Result<SoakReport> {
    if !(opts.minutes > 0.0 && opts.minutes.is_finite()) {
        bail!("--minutes must be a positive number, got {}", opts.minutes);
    }
    if !(opts.sample_s >= 0.5 && opts.fault_every_s >= FAULT_S_MAX) {
        bail!(
            "--sample-s must be at least 0.5 and --fault-every-s at least {FAULT_S_MAX} (a \
             fault takes up to that long), got {} and {}",
            opts.sample_s,
            opts.fault_every_s
        );
    }
    if !(opts.warmup_min >= 0.0 && opts.warmup_min.is_finite()) {
        bail!(
            "--warmup-min must be a number of minutes ≥ 0, got {}",
            opts.warmup_min
        );
    }
    if opts.clients == 0 || opts.keys == 0 {
        bail!("--clients and --keys must be at least 1");
    }
    let n = 4;
    let launch = LaunchOptions {
        replicas: n,
        mode: Mode::Bft,
        f: Some(1),
        service: None,
        // Freed pages go back to the kernel at once, so that a replica's resident memory
        // follows its heap: kept for reuse, they move it by several MiB from minute to
        // minute, more than the growth the soak looks for.
        replica_args: vec!["--freed-pages-ms".into(), "0".into()],
        unreplicated: false,
    };
    let mut cluster = LocalCluster::launch_with(exe, &launch, |cfg| {
        cfg.storage.durability = Durability::Fsync;
        cfg.storage.checkpoint_period = 200;
        cfg.storage.log_segment_bytes = 64 << 10;
        cfg.timeouts.request_timeout_ms = 500;
    })?;
    let ready = Duration::from_secs(30);
    let proxies: Vec<Proxy> = (0..opts.clients)
        .map(|_| cluster.proxy(ready))
        .collect::<Result<_>>()?;
    prefill(&proxies, opts.keys)?;
    warm_up(&proxies, opts);
    let duration = Duration::from_secs_f64(opts.minutes * 60.0);
    let start = Instant::now();
    let samples = Mutex::new(Vec::new());
    let faults = Mutex::new(Vec::new());
    let restarts = Mutex::new(vec![(0u64, 0.0f64); n]);
    // A restarted process counts its state transfers from zero: what the killed one counted
    // is added here.
    let transfers_before_kills = Mutex::new(0u64);
    let (ok, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    let stop = AtomicBool::new(false);
    let bar = progress(opts.progress, duration);
    let data_dirs: Vec<std::path::PathBuf> = cluster
        .cfg
        .replicas
        .iter()
        .map(|r| tagma_node::cluster_dir::data_dir(&cluster.dir, &cluster.cfg, r.id))
        .collect();
    let metrics_addrs: Vec<Option<std::net::SocketAddr>> = cluster
        .cfg
        .replicas
        .iter()
        .map(|r| r.metrics_addr)
        .collect();
    let pids = Mutex::new(vec![None; n]);
    std::thread::scope(|s| -> Result<()> {
        for (c, proxy) in proxies.iter().enumerate() {
            let (ok, failed, stop) = (&ok, &failed, &stop);
            s.spawn(move || mixed_load(proxy, c, opts.keys, ok, failed, stop));
        }
        let refresh = |cluster: &LocalCluster| {
            *pids.lock().expect("pids") = (0..n).map(|i| cluster.pid(i)).collect();
        };
        refresh(&cluster);
        let (samples, pids, stop, data_dirs, metrics_addrs) =
            (&samples, &pids, &stop, &data_dirs, &metrics_addrs);
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let at_s = start.elapsed().as_secs_f64();
                let now: Vec<Option<u32>> = pids.lock().expect("pids").clone();
                let mut taken = Vec::new();
                for (replica, pid) in now.iter().enumerate() {
                    let Some(p) = pid.and_then(ProcessSample::read) else {
                        continue;
                    };
                    let metrics = scrape(metrics_addrs[replica]);
                    taken.push(SoakSample {
                        at_s,
                        replica,
                        rss_mb: p.rss_mb,
                        fds: p.fds,
                        threads: p.threads,
                        disk_mb: dir_bytes(&data_dirs[replica]) as f64 / (1 << 20) as f64,
                        heap_allocated_mb: heap_mb(
                            metrics.as_deref(),
                            "tagma_heap_allocated_bytes",
                        ),
                        heap_resident_mb: heap_mb(metrics.as_deref(), "tagma_heap_resident_bytes"),
                    });
                }
                samples.lock().expect("samples").extend(taken);
                sleep_unless(stop, Duration::from_secs_f64(opts.sample_s));
            }
        });
        let result = (|| -> Result<()> {
            let mut k = 0u64;
            loop {
                let next = start + Duration::from_secs_f64(opts.fault_every_s * (k + 1) as f64);
                while Instant::now() < next {
                    bar.set_position(start.elapsed().as_secs().min(duration.as_secs()));
                    std::thread::sleep(Duration::from_millis(200));
                }
                // A fault must end before the run does.
                if next + fault_length(k) > start + duration {
                    break;
                }
                let at_s = start.elapsed().as_secs_f64();
                let what = inject(
                    &mut cluster,
                    k,
                    n,
                    &restarts,
                    &transfers_before_kills,
                    start,
                )?;
                bar.set_message(what.clone());
                faults
                    .lock()
                    .expect("faults")
                    .push(SoakEvent { at_s, what });
                refresh(&cluster);
                k += 1;
            }
            while start.elapsed() < duration {
                bar.set_position(start.elapsed().as_secs().min(duration.as_secs()));
                std::thread::sleep(Duration::from_millis(200));
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        result
    })?;
    bar.finish_and_clear();
    let elapsed = start.elapsed().as_secs_f64();
    let members: Vec<ReplicaId> = cluster.cfg.members();
    let states = cluster.converged_states(&proxies[0], &members, Duration::from_secs(60))?;
    let leader_changes = (0..n)
        .map(|i| cluster.metric(i, "tagma_regency") as u64)
        .max()
        .unwrap_or(0);
    let state_transfers = (0..n)
        .map(|i| cluster.metric(i, "tagma_state_transfers_total") as u64)
        .sum::<u64>()
        + transfers_before_kills.into_inner().expect("transfers");
    let samples = samples.into_inner().expect("samples");
    let restarts = restarts.into_inner().expect("restarts");
    let replicas: Vec<ReplicaSoak> = (0..n)
        .map(|i| summarize(i, restarts[i], &samples))
        .collect();
    let steady: Vec<&ReplicaSoak> = replicas.iter().filter(|r| r.restarts == 0).collect();
    let worst =
        |f: &dyn Fn(&ReplicaSoak) -> f64| steady.iter().map(|r| f(r)).fold(f64::MIN, f64::max);
    let operations = ok.load(Ordering::Relaxed);
    Ok(SoakReport {
        minutes: elapsed / 60.0,
        n,
        operations,
        failed_operations: failed.load(Ordering::Relaxed),
        ops_per_s: operations as f64 / elapsed,
        faults: faults.into_inner().expect("faults"),
        leader_changes,
        state_transfers,
        rss_growth_pct: worst(&|r| r.rss_growth_pct),
        fd_growth: worst(&|r| r.fds_last - r.fds_first),
        thread_growth: worst(&|r| r.threads_last - r.threads_first),
        state_digests_equal: digests_equal(&states),
        replicas,
        samples,
    })
}

/// The longest a fault takes (the follower kept down for a state transfer, and its
/// restart).
pub const FAULT_S_MAX: f64 = 25.0;

/// How long the `k`-th fault of the rotation may take.
fn fault_length(k: u64) -> Duration {
    match k % 3 {
        2 => Duration::from_secs_f64(FAULT_S_MAX),
        _ => Duration::from_secs(5),
    }
}

/// The `k`-th fault of the rotation; returns what it did.
fn inject(
    cluster: &mut LocalCluster,
    k: u64,
    n: usize,
    restarts: &Mutex<Vec<(u64, f64)>>,
    transfers_before_kills: &Mutex<u64>,
    start: Instant,
) -> Result<String> {
    // Kills the restarted follower, keeps it down for `down`, starts it again.
    let mut bounce = |down: Duration| -> Result<usize> {
        let v = victim(cluster, n);
        *transfers_before_kills.lock().expect("transfers") +=
            cluster.metric(v, "tagma_state_transfers_total") as u64;
        cluster.kill(v);
        std::thread::sleep(down);
        cluster.start(v)?;
        cluster.wait_ready(v, Duration::from_secs(30))?;
        let mut r = restarts.lock().expect("restarts");
        r[v].0 += 1;
        r[v].1 = start.elapsed().as_secs_f64();
        Ok(v)
    };
    match k % 3 {
        0 => {
            let v = bounce(Duration::from_secs(1))?;
            Ok(format!("replica {v} killed and restarted"))
        }
        1 => {
            let leader = cluster.current_leader();
            let pid = cluster
                .pid(leader)
                .with_context(|| format!("leader {leader} is not running"))?;
            signal(pid, rustix::process::Signal::STOP)?;
            std::thread::sleep(Duration::from_secs(3));
            signal(pid, rustix::process::Signal::CONT)?;
            Ok(format!("leader {leader} paused 3 s"))
        }
        _ => {
            let v = bounce(Duration::from_secs(20))?;
            Ok(format!("replica {v} down 20 s"))
        }
    }
}

fn signal(pid: u32, sig: rustix::process::Signal) -> Result<()> {
    let pid = rustix::process::Pid::from_raw(pid as i32).context("pid 0")?;
    rustix::process::kill_process(pid, sig).with_context(|| format!("signal {sig:?} to {pid:?}"))
}

/// Runs the load for `opts.warmup_min` minutes, unmeasured.
fn warm_up(proxies: &[Proxy], opts: &SoakOptions) {
    let warmup = Duration::from_secs_f64(opts.warmup_min * 60.0);
    if warmup.is_zero() {
        return;
    }
    let bar = progress(opts.progress, warmup);
    bar.set_message("warming up");
    let (ok, failed, stop) = (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
    std::thread::scope(|s| {
        for (c, proxy) in proxies.iter().enumerate() {
            let (ok, failed, stop) = (&ok, &failed, &stop);
            s.spawn(move || mixed_load(proxy, c, opts.keys, ok, failed, stop));
        }
        let start = Instant::now();
        while start.elapsed() < warmup {
            bar.set_position(start.elapsed().as_secs().min(warmup.as_secs()));
            std::thread::sleep(Duration::from_millis(200));
        }
        stop.store(true, Ordering::Relaxed);
    });
    bar.finish_and_clear();
}

/// Writes every key of the key space once.
fn prefill(proxies: &[Proxy], keys: usize) -> Result<()> {
    std::thread::scope(|s| {
        let handles: Vec<_> = proxies
            .iter()
            .enumerate()
            .map(|(c, p)| {
                s.spawn(move || -> Result<()> {
                    for k in (c..keys).step_by(proxies.len()) {
                        p.invoke_ordered(put(k, 100 + k % 900))
                            .with_context(|| format!("prefilling key {k}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("prefill thread"))
    })
}

fn key(k: usize) -> Bytes {
    Bytes::from(format!("soak/{k}").into_bytes())
}

fn put(k: usize, bytes: usize) -> Bytes {
    KvOp::Put {
        key: key(k),
        value: Bytes::from(vec![(k % 251) as u8; bytes]),
    }
    .encode()
}

/// Puts (100 to 1,000 bytes), reads and increments over the key space until `stop`.
fn mixed_load(
    proxy: &Proxy,
    client: usize,
    keys: usize,
    ok: &AtomicU64,
    failed: &AtomicU64,
    stop: &AtomicBool,
) {
    let mut rng = fastrand::Rng::with_seed(client as u64);
    while !stop.load(Ordering::Relaxed) {
        let k = rng.usize(0..keys);
        let op = match rng.u8(0..10) {
            0..5 => put(k, rng.usize(100..=1_000)),
            5..9 => KvOp::Get { key: key(k) }.encode(),
            _ => KvOp::Incr {
                key: Bytes::from(format!("soak/counter/{client}").into_bytes()),
                delta: 1,
            }
            .encode(),
        };
        match proxy.invoke_ordered(op) {
            Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
            Err(_) => failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// Sleeps `d`, waking early when `stop` is set.
fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50).min(end - Instant::now()));
    }
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Replica `i`'s figures over its samples since its last start.
fn summarize(i: usize, (restarts, last_start): (u64, f64), all: &[SoakSample]) -> ReplicaSoak {
    let mine: Vec<&SoakSample> = all
        .iter()
        .filter(|s| s.replica == i && s.at_s >= last_start)
        .collect();
    let quarter = (mine.len() / 4).max(1);
    let first = &mine[..quarter.min(mine.len())];
    let last = &mine[mine.len().saturating_sub(quarter)..];
    let mean = |xs: &[&SoakSample], f: fn(&SoakSample) -> f64| {
        xs.iter().map(|s| f(s)).sum::<f64>() / xs.len().max(1) as f64
    };
    let median = |xs: &[&SoakSample], f: fn(&SoakSample) -> f64| {
        let mut v: Vec<f64> = xs.iter().map(|s| f(s)).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let rss_first = mean(first, |s| s.rss_mb);
    let rss_last = mean(last, |s| s.rss_mb);
    let heap_first = mean(first, |s| s.heap_allocated_mb);
    let heap_last = mean(last, |s| s.heap_allocated_mb);
    ReplicaSoak {
        replica: i,
        restarts,
        samples: mine.len(),
        rss_first_quarter_mb: rss_first,
        rss_last_quarter_mb: rss_last,
        rss_growth_pct: growth_pct(rss_first, rss_last),
        heap_first_quarter_mb: heap_first,
        heap_last_quarter_mb: heap_last,
        heap_growth_pct: growth_pct(heap_first, heap_last),
        fds_first: median(first, |s| s.fds as f64),
        fds_last: median(last, |s| s.fds as f64),
        threads_first: median(first, |s| s.threads as f64),
        threads_last: median(last, |s| s.threads as f64),
        disk_max_mb: mine.iter().map(|s| s.disk_mb).fold(0.0, f64::max),
        disk_last_mb: mine.last().map_or(0.0, |s| s.disk_mb),
    }
}

/// From `first` to `last`, in percent of `first` (0 without a first).
fn growth_pct(first: f64, last: f64) -> f64 {
    if first > 0.0 {
        (last - first) / first * 100.0
    } else {
        0.0
    }
}

/// A replica's metrics text, once per sample (`None` when they do not answer).
fn scrape(metrics_addr: Option<std::net::SocketAddr>) -> Option<String> {
    let secs = Duration::from_secs(1);
    tagma_node::metrics::scrape_within(metrics_addr?, secs, secs).ok()
}

/// One of the heap gauges in a scraped text, in MiB (0 when absent).
fn heap_mb(metrics: Option<&str>, name: &str) -> f64 {
    metrics
        .and_then(|text| tagma_node::metrics::value(text, name))
        .map_or(0.0, |bytes| bytes / (1 << 20) as f64)
}

fn progress(show: bool, duration: Duration) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(duration.as_secs());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} soak [{bar:30}] {pos}/{len} s  {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: f64, replica: usize, rss_mb: f64, fds: u64) -> SoakSample {
        SoakSample {
            at_s,
            replica,
            rss_mb,
            fds,
            threads: 20,
            disk_mb: 1.0,
            heap_allocated_mb: rss_mb / 2.0,
            heap_resident_mb: rss_mb,
        }
    }

    #[test]
    fn the_chart_draws_a_mean_per_minute() {
        let samples = [
            sample(10.0, 0, 60.0, 30),
            sample(50.0, 0, 70.0, 30),
            sample(70.0, 0, 80.0, 30),
        ];
        assert_eq!(minute_means(samples.iter()), vec![(0.5, 65.0), (1.5, 80.0)]);
    }

    #[test]
    fn growth_compares_the_first_and_last_quarters_since_the_last_start() {
        let mut all: Vec<SoakSample> = (0..8)
            .map(|k| sample(k as f64, 0, 100.0 + k as f64, 30))
            .collect();
        // Replica 1 restarted at 4 s: its earlier, larger samples do not count.
        all.extend((0..8).map(|k| sample(k as f64, 1, if k < 4 { 500.0 } else { 50.0 }, 30)));
        let r0 = summarize(0, (0, 0.0), &all);
        assert_eq!(r0.samples, 8);
        // Quarters of two: (100+101)/2 and (106+107)/2.
        assert!((r0.rss_growth_pct - 6.0 / 100.5 * 100.0).abs() < 1e-9);
        assert!((r0.heap_growth_pct - 3.0 / 50.25 * 100.0).abs() < 1e-9);
        let r1 = summarize(1, (1, 4.0), &all);
        assert_eq!(r1.samples, 4);
        assert_eq!(r1.rss_growth_pct, 0.0);
        assert_eq!(r1.fds_last - r1.fds_first, 0.0);
    }
}
