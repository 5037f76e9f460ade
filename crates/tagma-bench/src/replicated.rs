//! `tagma bench`: a local cluster of replica processes under closed-loop load from many
//! clients, against an unreplicated server loaded the same way in the same invocation (and,
//! with durability, against the same cluster without it); one configuration, or every
//! configuration of a sweep with its figure.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tagma_cluster::{LaunchOptions, LocalCluster};
use tagma_core::Mode;
use tagma_core::config::Durability;
use tagma_wire::RequestKind;

use crate::measure::{MeasureOptions, Measured, measure, median_run};
use crate::report::{BenchReport, Latency};
use crate::requests::{RequestShape, Workload, generator};
use crate::sweep::{self, RunConfig, Sweep};

/// Everything `tagma bench` takes.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub workload: Workload,
    /// List and tuple space: share of conflicting requests, percent.
    pub conflict_pct: u32,
    /// List entries or tuples of the replicas' initial state.
    pub state_size: usize,
    /// More arguments for every server process (execution threads and policy).
    pub replica_args: Vec<String>,
    /// Request and reply size in bytes.
    pub payload: usize,
    pub cft: bool,
    pub f: u32,
    pub clients: usize,
    pub signed: bool,
    pub signature_threads: Option<usize>,
    /// `batch.fill_wait_ms` of the replicas [default: the configuration's].
    pub fill_wait_ms: Option<u64>,
    pub unordered: bool,
    /// Warm-up and window [default: 2 and 5 s, or 1 and 3 s in a sweep].
    pub warmup_s: Option<f64>,
    pub duration_s: Option<f64>,
    pub sweep: Option<Sweep>,
    /// In the f sweep: also f = 3.
    pub with_f3: bool,
    /// With a sweep: draw its figure into this PNG.
    pub plot: Option<PathBuf>,
    /// With a sweep and a plot: draw from these reports (one JSON object a line) instead.
    pub from_json: Option<PathBuf>,
    pub durability: Durability,
    /// With durability: alternating windows per cluster.
    pub durability_rounds: u32,
    pub no_baseline: bool,
    /// One JSON object per configuration instead of the table.
    pub json: bool,
}

impl BenchOptions {
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

    /// These options with `c`'s configuration.
    fn with_config(&self, c: &RunConfig) -> BenchOptions {
        BenchOptions {
            cft: c.cft,
            f: c.f,
            payload: c.payload,
            clients: c.clients,
            signed: c.signed,
            signature_threads: c.signature_threads,
            ..self.clone()
        }
    }

    fn measure_options(&self) -> MeasureOptions {
        MeasureOptions {
            clients: self.clients,
            warmup: Duration::from_secs_f64(self.warmup_s()),
            duration: Duration::from_secs_f64(self.duration_s()),
            kind: if self.unordered {
                RequestKind::Unordered
            } else {
                RequestKind::Ordered
            },
            quiet: self.json,
        }
    }
}

/// Runs `tagma bench` with the `tagma` binary `exe` for the servers: prints one report per
/// configuration (a JSON object or a table) and draws the sweep's figure if asked.
pub fn run(exe: &Path, opts: &BenchOptions) -> Result<()> {
    if opts.clients == 0 {
        bail!("--clients must be at least 1");
    }
    if opts.duration_s() <= 0.0 || opts.warmup_s() < 0.0 {
        bail!("--duration-s must be positive and --warmup-s not negative");
    }
    if opts.signature_threads == Some(0) {
        bail!("--signature-threads must be at least 1");
    }
    let sweep = opts.sweep;
    if let (Some(sweep), Some(path), Some(from)) = (sweep, &opts.plot, &opts.from_json) {
        let text = std::fs::read_to_string(from)
            .with_context(|| format!("cannot read {}", from.display()))?;
        let reports = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<Result<Vec<BenchReport>, _>>()
            .with_context(|| format!("{} is not one report a line", from.display()))?;
        return Ok(crate::plot::draw(&sweep.chart(&reports), path)?);
    }
    let configs = match sweep {
        None => vec![opts.run_config()],
        Some(s) => s.configs(opts.run_config(), opts.with_f3),
    };
    let mut reports = Vec::with_capacity(configs.len());
    let mut idle = 0;
    for (i, config) in configs.iter().enumerate() {
        if sweep.is_some() && !opts.json {
            eprintln!("[{}/{}] {}", i + 1, configs.len(), config.describe());
        }
        let (report, completed) = bench_one(exe, &opts.with_config(config))?;
        if opts.json {
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
    if let (Some(sweep), Some(path)) = (sweep, &opts.plot) {
        crate::plot::draw(&sweep.chart(&reports), path)?;
        if !opts.json {
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
fn bench_one(exe: &Path, opts: &BenchOptions) -> Result<(BenchReport, bool)> {
    let (mode, replicas) = if opts.cft {
        (Mode::Cft, 2 * opts.f as usize + 1)
    } else {
        (Mode::Bft, 3 * opts.f as usize + 1)
    };
    let signed = opts.signed;
    let threads = opts.signature_threads;
    let durability = opts.durability;
    let fill_wait_ms = opts.fill_wait_ms;
    let edit_with = move |durability: Durability| {
        move |cfg: &mut tagma_core::Config| {
            cfg.cluster.signed_requests = signed;
            if let Some(ms) = fill_wait_ms {
                cfg.batch.fill_wait_ms = ms;
            }
            if let Some(t) = threads {
                cfg.limits.signature_threads = t;
            }
            cfg.storage.durability = durability;
        }
    };
    let edit = edit_with(durability);
    let mut launch = LaunchOptions {
        replicas,
        mode,
        f: Some(opts.f),
        service: Some(opts.workload.name().into()),
        replica_args: [opts.replica_args.clone(), opts.workload.replica_args()].concat(),
        unreplicated: false,
    };
    let request = generator(&RequestShape {
        workload: opts.workload,
        payload: opts.payload,
        conflict_pct: opts.conflict_pct,
        state_size: opts.state_size,
        reads: opts.unordered,
    });
    let window = opts.measure_options();
    let run = |cluster: &LocalCluster, label: &str| measure(cluster, &window, &*request, label);
    let label = format!("{mode} n={replicas}");
    let cluster = LocalCluster::launch_with(exe, &launch, edit)?;
    let signature_threads = cluster.cfg.raw.limits.signature_threads;
    let batch_fill_wait_ms = cluster.cfg.raw.batch.fill_wait_ms;
    // With durability: the same configuration without it, for `ratio_vs_no_durability`,
    // measured in windows alternating with the durable cluster's (both stay up; the idle
    // one costs next to nothing), each side's median window reported.
    let (replicated, volatile) = if durability == Durability::Fsync {
        let plain = LocalCluster::launch_with(exe, &launch, edit_with(Durability::None))?;
        let (mut durable_runs, mut plain_runs) = (Vec::new(), Vec::new());
        for round in 1..=opts.durability_rounds {
            let of = opts.durability_rounds;
            durable_runs.push(run(&cluster, &format!("fsync {round}/{of}"))?);
            plain_runs.push(run(&plain, &format!("no fsync {round}/{of}"))?);
        }
        if durable_runs.iter().any(|m| m.load.completed == 0) {
            cluster.dump_logs();
        }
        if plain_runs.iter().any(|m| m.load.completed == 0) {
            plain.dump_logs();
        }
        if !opts.json {
            let ratios: Vec<String> = durable_runs
                .iter()
                .zip(&plain_runs)
                .map(|(d, p)| format!("{:.3}", d.server_ops_s / p.server_ops_s.max(1e-9)))
                .collect();
            eprintln!("durability ratio per round: {}", ratios.join(", "));
        }
        (median_run(durable_runs), Some(median_run(plain_runs)))
    } else {
        let replicated = run(&cluster, &label)?;
        if replicated.load.completed == 0 {
            cluster.dump_logs();
        }
        (replicated, None)
    };
    drop(cluster);
    // The baseline: the same service, client library, network stack and authentication,
    // one server process, no ordering.
    let baseline = if opts.no_baseline {
        None
    } else {
        launch.replicas = 1;
        launch.mode = Mode::Cft;
        launch.f = Some(0);
        launch.unreplicated = true;
        let server = LocalCluster::launch_with(exe, &launch, edit)?;
        let baseline = run(&server, "unreplicated")?;
        if baseline.load.completed == 0 {
            server.dump_logs();
        }
        Some(baseline)
    };
    let completed = replicated.load.completed > 0
        && baseline.as_ref().is_none_or(|b| b.load.completed > 0)
        && volatile.as_ref().is_none_or(|v| v.load.completed > 0);
    let report = report(
        opts,
        (mode, replicas, signature_threads, batch_fill_wait_ms),
        &replicated,
        volatile.as_ref(),
        baseline.as_ref(),
    );
    Ok((report, completed))
}

/// The report of one configuration: `replicated`, and beside it the same cluster without
/// durability (`volatile`, when measured) and the unreplicated `baseline` (when run).
fn report(
    opts: &BenchOptions,
    (mode, replicas, signature_threads, batch_fill_wait_ms): (Mode, usize, usize, u64),
    replicated: &Measured,
    volatile: Option<&Measured>,
    baseline: Option<&Measured>,
) -> BenchReport {
    let no_durability_ops_s = volatile.map(|v| v.server_ops_s);
    let ratio_vs_no_durability = no_durability_ops_s
        .filter(|ops| *ops > 0.0)
        .map(|ops| replicated.server_ops_s / ops);
    let unreplicated_run = baseline.is_some();
    let none = Measured::default();
    let baseline = baseline.unwrap_or(&none);
    let ratio = if baseline.server_ops_s > 0.0 {
        replicated.server_ops_s / baseline.server_ops_s
    } else {
        0.0
    };
    BenchReport {
        mode: mode.to_string(),
        n: replicas,
        f: opts.f,
        workload: opts.workload.name().into(),
        ordered: !opts.unordered,
        signed: opts.signed,
        signature_threads,
        batch_fill_wait_ms,
        request_bytes: opts.payload,
        reply_bytes: opts.payload,
        clients: opts.clients,
        duration_s: opts.duration_s(),
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
        durability: opts.durability.to_string(),
        no_durability_ops_s,
        ratio_vs_no_durability,
        instance_ms: volatile.map(|_| replicated.instance_ms),
        no_durability_instance_ms: volatile.map(|v| v.instance_ms),
        vote_flush_ms_mean: replicated.vote_flush_ms,
        log_flush_ms_mean: replicated.log_flush_ms,
        errors: replicated.load.errors
            + baseline.load.errors
            + volatile.map_or(0, |v| v.load.errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> BenchOptions {
        BenchOptions {
            workload: Workload::Micro,
            conflict_pct: 0,
            state_size: 0,
            replica_args: Vec::new(),
            payload: 0,
            cft: false,
            f: 1,
            clients: 1,
            signed: false,
            signature_threads: None,
            fill_wait_ms: None,
            unordered: false,
            warmup_s: None,
            duration_s: None,
            sweep: None,
            with_f3: false,
            plot: None,
            from_json: None,
            durability: Durability::None,
            durability_rounds: 1,
            no_baseline: true,
            json: true,
        }
    }

    fn measured(server_ops_s: f64) -> Measured {
        Measured {
            server_ops_s,
            instance_ms: 2.0,
            ..Default::default()
        }
    }

    #[test]
    fn the_durability_figures_are_null_when_not_measured() {
        let plain = report(
            &options(),
            (Mode::Bft, 4, 2, 2),
            &measured(1000.0),
            None,
            None,
        );
        let json = serde_json::to_value(&plain).unwrap();
        for key in [
            "ratio_vs_no_durability",
            "no_durability_ops_s",
            "instance_ms",
            "no_durability_instance_ms",
        ] {
            assert!(json[key].is_null(), "{key} in {json}");
        }
        let durable = report(
            &options(),
            (Mode::Bft, 4, 2, 2),
            &measured(800.0),
            Some(&measured(1000.0)),
            None,
        );
        let json = serde_json::to_value(&durable).unwrap();
        assert_eq!(json["ratio_vs_no_durability"], 0.8, "{json}");
        assert_eq!(json["no_durability_ops_s"], 1000.0, "{json}");
    }
}
