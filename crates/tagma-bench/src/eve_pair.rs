//! An execute-verify deployment under the checked key-value workload — a primary-backup pair,
//! or with `bft` the executors and verifier cluster of the BFT deployment: `tagma demo
//! --mode eve [--bft]` (the store served in Eve mode) and `tagma chaos --mode eve [--bft]
//! --scenario primary-crash` (the primary killed under load: the takeover timed — the backup
//! taking over, or the verifiers rotating the primary on the executors' complaints; the old
//! primary restarted, fetching the state, then the new primary killed too, so every
//! acknowledged operation must have reached the restarted server).
//!
//! Throughput is sampled every 50 ms for the timeline (Eve's takeover figure).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use serde::Serialize;
use tagma_cluster::eve_bft::{EveBft, log_tails};
use tagma_cluster::eve_pair::EvePair;
use tagma_cluster::workload::{self, FailoverProbe, WorkloadOptions};
use tagma_cluster::{converged_states, digests_equal};
use tagma_kv::{KvOp, KvReply};
use tagma_wire::ReplicaId;

/// The key of the counting client.
const COUNTER: &[u8] = b"eve/counter";

/// What the run does.
#[derive(Clone, Debug)]
pub struct PairRunOptions {
    pub clients: usize,
    /// Seconds of load before the primary is killed (the whole run without a crash).
    pub before_s: f64,
    /// With a crash: seconds until the killed server restarts, then seconds of load before
    /// the other is killed, and after it.
    pub crash: Option<CrashTimes>,
    pub threads: usize,
    /// Primary-backup: the takeover timeout; BFT: the executors' progress timeout, after
    /// which they complain about the view.
    pub takeover_ms: u64,
    /// The BFT deployment tolerating (u, r) instead of a pair.
    pub bft: Option<(usize, usize)>,
    /// BFT: executors that lie, `(id, what)` as `tagma eve serve --lie` takes it.
    pub liars: Vec<(usize, String)>,
    /// Keep the cluster directory (and print it).
    pub keep: bool,
}

/// The processes under test.
enum Servers {
    Pair(Box<EvePair>),
    Bft(Box<EveBft>),
}

impl Servers {
    fn launch(exe: &Path, opts: &PairRunOptions) -> Result<Servers> {
        let (threads, takeover_ms) = (opts.threads, opts.takeover_ms);
        let lies: Vec<(usize, &str)> = (opts.liars.iter())
            .map(|(i, what)| (*i, what.as_str()))
            .collect();
        Ok(match opts.bft {
            None => Servers::Pair(Box::new(EvePair::launch(exe, None, |cfg| {
                cfg.eve.threads = threads;
                cfg.eve.takeover_ms = takeover_ms;
                cfg.eve.heartbeat_ms = (takeover_ms / 10).max(1);
            })?)),
            Some((u, r)) => Servers::Bft(Box::new(EveBft::launch_lying(
                exe,
                None,
                u,
                r,
                &lies,
                |eve| {
                    eve.threads = threads;
                    eve.progress_ms = takeover_ms;
                },
            )?)),
        })
    }

    fn ids(&self) -> Vec<ReplicaId> {
        let n = match self {
            Servers::Pair(_) => 2,
            Servers::Bft(d) => d.dirs.executors.n(),
        };
        (0..n as u32).map(ReplicaId).collect()
    }

    fn proxy(&self, timeout: Duration) -> Result<tagma_client::Proxy> {
        match self {
            Servers::Pair(p) => p.proxy(timeout),
            Servers::Bft(d) => d.proxy(timeout),
        }
    }

    fn kill(&mut self, i: usize) {
        match self {
            Servers::Pair(p) => p.kill(i),
            Servers::Bft(d) => d.kill_executor(i),
        }
    }

    /// Restarts server `i`, which fetches the state from the others.
    fn restart(&mut self, i: usize) -> Result<()> {
        match self {
            Servers::Pair(p) => p.start(i, true),
            Servers::Bft(d) => d.start_executor(i),
        }
    }

    /// Whether restarted server `i` caught up: became the backup, or fetched the state.
    fn rejoined(&self, i: usize) -> bool {
        match self {
            Servers::Pair(p) => p.log(i).contains("now Backup"),
            Servers::Bft(d) => d.log("executor", i).contains("fetched the committed state"),
        }
    }

    /// Fetched states server `i` refused (they did not check out against the decided token).
    fn fetches_refused(&self, i: usize) -> u64 {
        match self {
            Servers::Pair(_) => 0,
            Servers::Bft(d) => d.log("executor", i).matches("did not check out").count() as u64,
        }
    }

    fn keep(&mut self) -> std::path::PathBuf {
        match self {
            Servers::Pair(p) => p.keep(),
            Servers::Bft(d) => d.keep(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct CrashTimes {
    pub down_s: f64,
    pub after_s: f64,
}

/// One sample of the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub ops_per_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PairReport {
    /// "primary-backup", or "bft" with its u and r.
    pub deployment: String,
    pub clients: usize,
    pub threads: usize,
    pub completed_ops: u64,
    pub failed_ops: u64,
    pub throughput_ops_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Results a client got for its own keys that contradict the sequential model.
    pub violations: Vec<String>,
    /// A counter incremented by one more client throughout: increments acknowledged, in
    /// doubt (the call failed), acknowledged but missing from the final count, and counted
    /// more often than sent.
    pub acknowledged_ops: u64,
    pub in_doubt_ops: u64,
    pub lost_acknowledged_ops: u64,
    pub duplicated_ops: u64,
    /// Both servers reached the same state (after the run, with both running).
    pub state_digests_equal: bool,
    /// From the primary's kill to the first completion of a request issued after it.
    pub takeover_ms: Option<f64>,
    pub takeover_timeout_ms: u64,
    /// The killed server restarted, fetched the state and became the backup (BFT: fetched
    /// the committed state and went on executing).
    pub restarted_caught_up: bool,
    /// The server that took over was killed in turn, leaving the restarted one alone.
    pub second_crash: bool,
    /// BFT: the executors that lie, and what about.
    pub liars: Vec<String>,
    /// BFT: fetched states the restarted executor refused (a liar's forged nodes).
    pub forged_states_refused: u64,
    /// (seconds into the run, what happened).
    pub events: Vec<(f64, String)>,
    pub timeline: Vec<Sample>,
}

impl PairReport {
    /// Whether the run kept every promise: no violation, every fault survived.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
            && self.failed_ops == 0
            && self.lost_acknowledged_ops == 0
            && self.duplicated_ops == 0
            && self.state_digests_equal
            && (self.events.is_empty() || (self.takeover_ms.is_some() && self.restarted_caught_up))
    }

    pub fn table(&self) -> String {
        let mut out = format!(
            "execute-verify {}, {} threads per server, {} clients\n\
             {} operations ({} failed), {:.0} ops/s, p50 {:.2} ms, p99 {:.2} ms\n",
            self.deployment,
            self.threads,
            self.clients,
            self.completed_ops,
            self.failed_ops,
            self.throughput_ops_s,
            self.p50_ms,
            self.p99_ms
        );
        for (t, e) in &self.events {
            out.push_str(&format!("  {t:6.2} s  {e}\n"));
        }
        if let Some(ms) = self.takeover_ms {
            out.push_str(&format!(
                "takeover: {ms:.0} ms (takeover timeout {} ms)\n",
                self.takeover_timeout_ms
            ));
        }
        if !self.events.is_empty() {
            out.push_str(&format!(
                "restarted server fetched the state and followed: {}\n",
                self.restarted_caught_up
            ));
        }
        for liar in &self.liars {
            out.push_str(&format!("{liar}\n"));
        }
        if !self.liars.is_empty() {
            out.push_str(&format!(
                "forged states the restarted executor refused: {}\n",
                self.forged_states_refused
            ));
        }
        out.push_str(&format!(
            "checked results contradicting the sequential model: {}\n\
             counter: {} increments acknowledged, {} in doubt, {} lost, {} counted twice\n\
             state digests equal: {}\n",
            self.violations.len(),
            self.acknowledged_ops,
            self.in_doubt_ops,
            self.lost_acknowledged_ops,
            self.duplicated_ops,
            self.state_digests_equal
        ));
        for v in self.violations.iter().take(5) {
            out.push_str(&format!("  {v}\n"));
        }
        out
    }

    /// The timeline chart, with the events marked.
    pub fn chart(&self) -> crate::plot::Chart {
        crate::plot::Chart {
            title: format!(
                "execute-verify {}: a primary crash and its takeover",
                self.deployment
            ),
            x_label: "seconds".into(),
            y_label: "completed operations per second".into(),
            integer_x: false,
            series: vec![crate::plot::Series {
                label: "throughput".into(),
                points: self.timeline.iter().map(|s| (s.t_s, s.ops_per_s)).collect(),
            }],
            events: self.events.clone(),
        }
    }
}

/// Launches a pair in a temporary directory, runs the workload (with the crashes), and
/// reports.
pub fn run(exe: &Path, opts: &PairRunOptions) -> Result<PairReport> {
    let (threads, takeover_ms) = (opts.threads, opts.takeover_ms);
    let mut pair = Servers::launch(exe, opts)?;
    let ready = Duration::from_secs(20);
    let proxies = (0..opts.clients)
        .map(|_| pair.proxy(ready))
        .collect::<Result<Vec<_>>>()?;
    proxies[0]
        .invoke_ordered(
            KvOp::Get {
                key: Bytes::from_static(b"demo/ready"),
            }
            .encode(),
        )
        .context("the pair did not answer a first request")?;
    let total_s = opts.before_s + opts.crash.map_or(0.0, |c| c.down_s + 2.0 * c.after_s);
    let probe = Arc::new(FailoverProbe::default());
    let workload_opts = WorkloadOptions {
        duration: Duration::from_secs_f64(total_s),
        unordered_reads: false,
        failover: Some(probe.clone()),
        ..Default::default()
    };
    let progress = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let counter = pair.proxy(ready)?;
    let (acknowledged, in_doubt) = (AtomicU64::new(0), AtomicU64::new(0));
    let started = Instant::now();
    let mut events = Vec::new();
    let mut timeline = Vec::new();
    let mut rejoined = false;
    let mut forged_refused = 0;
    let mut second_crash = false;
    let report = std::thread::scope(|s| -> Result<_> {
        let worker = s.spawn(|| workload::run(proxies, &workload_opts, &progress, &stop));
        let counting = s.spawn(|| {
            let op = KvOp::Incr {
                key: Bytes::from_static(COUNTER),
                delta: 1,
            }
            .encode();
            // Until the checked workload is over.
            while !stop.load(Ordering::Relaxed) {
                match counter.invoke_ordered(op.clone()) {
                    Ok(_) => acknowledged.fetch_add(1, Ordering::Relaxed),
                    Err(_) => in_doubt.fetch_add(1, Ordering::Relaxed),
                };
            }
        });
        let mut plan: Vec<(f64, u8)> = match opts.crash {
            None => Vec::new(),
            Some(c) => vec![
                (opts.before_s, 0),
                (opts.before_s + c.down_s, 1),
                (opts.before_s + c.down_s + c.after_s, 2),
            ],
        };
        plan.reverse();
        let (mut last_t, mut last_done) = (0.0, 0u64);
        while !worker.is_finished() {
            std::thread::sleep(Duration::from_millis(50));
            let t = started.elapsed().as_secs_f64();
            let done = progress.load(Ordering::Relaxed);
            timeline.push(Sample {
                t_s: t,
                ops_per_s: (done - last_done) as f64 / (t - last_t).max(1e-3),
            });
            (last_t, last_done) = (t, done);
            if plan.last().is_some_and(|(at, _)| t >= *at) {
                let (_, step) = plan.pop().expect("checked");
                match step {
                    0 => {
                        probe.fault();
                        pair.kill(0);
                        events.push((t, "primary (server 0) killed".to_string()));
                    }
                    1 => {
                        pair.restart(0)?;
                        events.push((t, "server 0 restarted, fetching the state".to_string()));
                    }
                    _ => {
                        rejoined = pair.rejoined(0);
                        forged_refused = pair.fetches_refused(0);
                        pair.kill(1);
                        second_crash = true;
                        events.push((t, "server 1 (primary since) killed".to_string()));
                    }
                }
            }
        }
        let report = worker.join().expect("the workload panicked");
        stop.store(true, Ordering::Relaxed);
        counting.join().expect("the counting client panicked");
        Ok(report)
    })?;
    // Both servers running again, the state they agree on holds every acknowledged
    // increment once.
    if second_crash {
        pair.restart(1)?;
    }
    let reader = pair.proxy(ready)?;
    let states = match converged_states(&reader, &pair.ids(), ready) {
        Ok(states) => states,
        Err(e) => {
            // The servers' logs tell why: keep them, and show their last lines.
            let logs = pair.keep().join("logs");
            let tails = log_tails(&logs, 12, |_| true);
            anyhow::bail!(
                "{e:#} (the servers' logs are kept in {}){tails}",
                logs.display()
            );
        }
    };
    let reply = reader.invoke_ordered(
        KvOp::Get {
            key: Bytes::from_static(COUNTER),
        }
        .encode(),
    )?;
    let count = match KvReply::decode(&reply) {
        Ok(KvReply::Get { value: Some(v) }) if v.len() == 8 => {
            u64::try_from(i64::from_le_bytes(v[..].try_into().expect("8 bytes"))).unwrap_or(0)
        }
        Ok(KvReply::Get { value: None }) => 0,
        other => anyhow::bail!("reading the counter: {other:?}"),
    };
    let (acknowledged, in_doubt) = (acknowledged.into_inner(), in_doubt.into_inner());
    let failover = probe.failover_ms();
    if opts.keep {
        eprintln!("cluster directory kept: {}", pair.keep().display());
    }
    Ok(PairReport {
        deployment: match opts.bft {
            None => "primary-backup".to_string(),
            Some((u, r)) => format!("bft (u = {u}, r = {r})"),
        },
        clients: opts.clients,
        threads,
        completed_ops: report.completed,
        failed_ops: report.errors,
        throughput_ops_s: report.throughput_ops_s(),
        p50_ms: report.percentile_ms(50.0),
        p99_ms: report.percentile_ms(99.0),
        violations: report.violations.clone(),
        acknowledged_ops: acknowledged,
        in_doubt_ops: in_doubt,
        lost_acknowledged_ops: acknowledged.saturating_sub(count),
        duplicated_ops: count.saturating_sub(acknowledged + in_doubt),
        state_digests_equal: digests_equal(&states),
        takeover_ms: opts.crash.and(failover),
        takeover_timeout_ms: takeover_ms,
        restarted_caught_up: rejoined,
        second_crash,
        liars: (opts.liars.iter())
            .map(|(i, what)| format!("executor {i} lies: {what}"))
            .collect(),
        forged_states_refused: forged_refused,
        events,
        timeline,
    })
}
