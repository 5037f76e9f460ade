//! One measurement window on a running local cluster: closed-loop load through a few
//! proxies, with the leader's counters and every server process's CPU and memory sampled at
//! the start and the end of the window.

use std::time::Duration;

use anyhow::{Context, Result};
use tagma_client::ClientOptions;
use tagma_cluster::LocalCluster;
use tagma_node::cluster_dir::DEFAULT_CLIENT_PRINCIPAL;
use tagma_wire::RequestKind;

use crate::{load, report};

/// How to load the cluster.
#[derive(Clone, Copy, Debug)]
pub struct MeasureOptions {
    /// Concurrent closed-loop logical clients.
    pub clients: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub kind: RequestKind,
    /// No progress bar.
    pub quiet: bool,
}

/// What one measured run (replicated or unreplicated) produced.
#[derive(Default)]
pub struct Measured {
    pub load: load::LoadResult,
    /// Requests the leader executed (ordered and unordered) per second in the window.
    pub server_ops_s: f64,
    /// CPU seconds of every server process together over the window.
    pub cpu_s: f64,
    pub rss_mb_max: f64,
    /// Requests per consensus instance at the leader in the window.
    pub batch_mean: f64,
    /// Mean time per instance at the leader in the window, and the leader's mean vote flush
    /// and log flush in it (ms; 0 when none happened).
    pub instance_ms: f64,
    pub vote_flush_ms: f64,
    pub log_flush_ms: f64,
}

impl Measured {
    /// CPU seconds of the servers per 1000 requests executed.
    pub fn cpu_s_per_kop(&self) -> f64 {
        let kops = self.server_ops_s * self.load.window_s / 1000.0;
        if kops > 0.0 { self.cpu_s / kops } else { 0.0 }
    }
}

/// The window with the median throughput (the higher middle one of an even count).
pub fn median_run(mut runs: Vec<Measured>) -> Measured {
    runs.sort_by(|a, b| a.server_ops_s.total_cmp(&b.server_ops_s));
    let middle = runs.len() / 2;
    runs.swap_remove(middle)
}

/// What [`measure`] reads at the start and the end of its window: the leader's counters
/// and the CPU seconds of every server process.
#[derive(Clone, Copy, Default)]
struct Sample {
    ops: f64,
    cpu_s: f64,
    instances: f64,
    vote_flushes: f64,
    vote_flush_us: f64,
    log_flushes: f64,
    log_flush_us: f64,
}

/// `total` spread over `count` events (0 when there were none: no instance decided, e.g.
/// unordered reads, or no flush).
fn per_event(total: f64, count: f64) -> f64 {
    if count > 0.0 { total / count } else { 0.0 }
}

/// Drives `cluster` with `request`'s load and samples the servers around the window;
/// `label` names the run in the progress bar and in errors.
pub fn measure(
    cluster: &LocalCluster,
    opts: &MeasureOptions,
    request: &load::RequestGen,
    label: &str,
) -> Result<Measured> {
    let ready = Duration::from_secs(20);
    let mut drivers = Vec::new();
    for share in load::proxy_shares(opts.clients, load::clients_per_proxy(opts.clients)) {
        let mut options = ClientOptions::new(DEFAULT_CLIENT_PRINCIPAL);
        options.outstanding_max = share;
        drivers.push((cluster.proxy_with(options, ready)?, share));
    }
    // The servers are ready when they order a request.
    drivers[0]
        .0
        .invoke_ordered(request(0, u64::MAX))
        .with_context(|| format!("{label}: the first request did not complete"))?;
    let leader = cluster.current_leader();
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
            vote_flushes: value("tagma_vote_flushes_total"),
            vote_flush_us: value("tagma_vote_flush_microseconds_total"),
            log_flushes: value("tagma_log_flushes_total"),
            log_flush_us: value("tagma_log_flush_microseconds_total"),
        }
    };
    let load_opts = load::LoadOptions {
        warmup: opts.warmup,
        duration: opts.duration,
        kind: opts.kind,
    };
    let warmup_s = opts.warmup.as_secs_f64();
    let total_s = warmup_s + opts.duration.as_secs_f64();
    let bar = if opts.quiet {
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
    let result = load::run(&drivers, &load_opts, request, |phase| match phase {
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
        vote_flush_ms: per_event(
            end.vote_flush_us - start.vote_flush_us,
            end.vote_flushes - start.vote_flushes,
        ) / 1e3,
        log_flush_ms: per_event(
            end.log_flush_us - start.log_flush_us,
            end.log_flushes - start.log_flushes,
        ) / 1e3,
        load: result,
    })
}
