//! `tagma demo`: a temporary local cluster of replica processes under the checked mixed
//! key-value workload (optionally with the leader killed mid-run), then a check that every
//! live replica ends with the same state; prints a summary or one JSON object.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use tagma_cluster::workload::{self, WorkloadOptions, WorkloadReport};
use tagma_cluster::{LocalCluster, converged_states, digests_equal};
use tagma_core::Mode;
use tagma_kv::KvOp;
use tagma_wire::{ReplicaId, StateInfo};

/// What `tagma demo` runs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Number of replicas [default: 4 in bft mode, 3 in cft mode].
    pub replicas: Option<usize>,
    pub mode: Mode,
    pub clients: usize,
    pub duration_s: u64,
    pub json: bool,
    /// Keep the cluster directory instead of deleting it.
    pub keep: bool,
    /// Kill the leader this many seconds into the run.
    pub kill_leader_at_s: Option<f64>,
    /// `timeouts.request_timeout_ms` of the replicas, if not the default.
    pub request_timeout_ms: Option<u64>,
    /// Serve the Redis protocol here for the demo's duration.
    pub gateway: Option<std::net::SocketAddr>,
    /// Record a contending load's history here (JSON lines) and check it.
    pub history: Option<std::path::PathBuf>,
}

/// What the run ended with.
struct Outcome {
    report: WorkloadReport,
    states: Vec<StateInfo>,
    equal: bool,
    killed: Option<usize>,
    failover_ms: Option<f64>,
    history: Option<crate::history::HistoryOutcome>,
}

/// Runs the demo with the `tagma` binary `exe` for the replicas; fails if a check fails.
pub fn run(exe: &Path, opts: &DemoOptions) -> Result<()> {
    if opts.clients == 0 {
        bail!("--clients must be at least 1");
    }
    let default_replicas = if opts.mode == Mode::Cft { 3 } else { 4 };
    let launch = tagma_cluster::LaunchOptions {
        replicas: opts.replicas.unwrap_or(default_replicas),
        mode: opts.mode,
        f: None,
        service: None,
        replica_args: Vec::new(),
        unreplicated: false,
    };
    let timeout = opts.request_timeout_ms;
    let mut cluster = LocalCluster::launch_with(exe, &launch, |cfg| {
        if let Some(t) = timeout {
            cfg.timeouts.request_timeout_ms = t;
        }
    })?;
    if !opts.json {
        eprintln!(
            "started {} replicas ({} mode, f = {}) in {}",
            cluster.cfg.n(),
            cluster.cfg.mode,
            cluster.cfg.f,
            cluster.dir.display()
        );
    }
    let gateway = match opts.gateway {
        Some(listen) => {
            let key = tagma_node::cluster_dir::client_key_path(&cluster.dir);
            let setup = crate::gateway::GatewaySetup::new(listen);
            let gateway = crate::gateway::start(&cluster.cfg, &key, &setup)?;
            let addr = gateway.local_addr();
            eprintln!(
                "Redis gateway on {addr} for the demo's {} s: redis-cli -h {} -p {}",
                opts.duration_s,
                addr.ip(),
                addr.port()
            );
            Some(gateway)
        }
        None => None,
    };
    let outcome = drive(&mut cluster, opts)?;
    drop(gateway);
    cluster.stop_all();
    if opts.json {
        println!("{}", json(&cluster, opts, &outcome));
    } else {
        print!("{}", summary(&cluster, opts, &outcome));
    }
    for v in outcome.report.violations.iter().take(5) {
        eprintln!("violation: {v}");
    }
    if opts.keep {
        let kept = cluster.dir.clone();
        std::mem::forget(cluster);
        eprintln!("cluster directory kept at {}", kept.display());
    }
    let linearizable = outcome.history.as_ref().is_none_or(|h| h.linearizable);
    if !outcome.equal || !outcome.report.violations.is_empty() || !linearizable {
        bail!(
            "the run did not check out (digests equal: {}, violations: {}, history \
             linearizable: {linearizable})",
            outcome.equal,
            outcome.report.violations.len()
        );
    }
    Ok(())
}

/// Runs the workload on `cluster` (killing the leader when asked) and collects the live
/// replicas' final states.
fn drive(cluster: &mut LocalCluster, opts: &DemoOptions) -> Result<Outcome> {
    let ready_timeout = Duration::from_secs(20);
    let mut proxies = Vec::with_capacity(opts.clients);
    for _ in 0..opts.clients {
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
    let workload_opts = WorkloadOptions {
        duration: Duration::from_secs(opts.duration_s),
        failover: Some(probe.clone()),
        ..Default::default()
    };
    let mut killed: Option<usize> = None;
    let progress = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let bar = if opts.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(opts.duration_s)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} s  {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let history = (opts.history.as_deref())
        .map(|path| crate::history::HistoryRun::connect(cluster, path))
        .transpose()?;
    let history_stop = AtomicBool::new(false);
    let started = Instant::now();
    let report = std::thread::scope(|s| {
        let worker = s.spawn(|| workload::run(proxies, &workload_opts, &progress, &stop));
        if let Some(history) = &history {
            history.spawn(s, &history_stop);
        }
        while !worker.is_finished() {
            std::thread::sleep(Duration::from_millis(20));
            let secs = started.elapsed().as_secs_f64();
            if killed.is_none() && opts.kill_leader_at_s.is_some_and(|t| secs >= t) {
                let leader = cluster.current_leader();
                probe.fault();
                cluster.kill(leader);
                killed = Some(leader);
                bar.println(format!(
                    "killed the leader (replica {leader}) at {secs:.1} s"
                ));
            }
            bar.set_position((secs as u64).min(opts.duration_s));
            let done = progress.load(Ordering::Relaxed);
            bar.set_message(format!(
                "{done} ops, {:.0} ops/s",
                done as f64 / secs.max(1e-3)
            ));
        }
        history_stop.store(true, Ordering::Relaxed);
        worker.join().expect("workload panicked")
    });
    bar.finish_and_clear();
    let history = history.map(|h| h.finish()).transpose()?;
    let live: Vec<ReplicaId> = cluster
        .cfg
        .members()
        .into_iter()
        .filter(|r| Some(r.0 as usize) != killed)
        .collect();
    let failover_ms = killed.and(probe.failover_ms());
    let (states, equal) = match converged_states(&checker, &live, Duration::from_secs(20)) {
        Ok(s) => {
            let eq = digests_equal(&s);
            (s, eq)
        }
        Err(e) => {
            eprintln!("warning: {e}");
            (Vec::new(), false)
        }
    };
    Ok(Outcome {
        history,
        report,
        states,
        equal,
        killed,
        failover_ms,
    })
}

/// The run as one JSON object.
fn json(cluster: &LocalCluster, opts: &DemoOptions, o: &Outcome) -> serde_json::Value {
    let report = &o.report;
    serde_json::json!({
        "replicas": cluster.cfg.n(),
        "f": cluster.cfg.f,
        "mode": cluster.cfg.mode.to_string(),
        "clients": opts.clients,
        "duration_s": report.elapsed.as_secs_f64(),
        "completed_ops": report.completed,
        "failed_ops": report.errors,
        "throughput_ops_s": (report.throughput_ops_s() * 10.0).round() / 10.0,
        "latency_ms": {
            "p50": report.percentile_ms(50.0),
            "p90": report.percentile_ms(90.0),
            "p99": report.percentile_ms(99.0),
        },
        "linearizability_violations": report.violations.len(),
        "executed_instances": o.states.first().map(|s| s.executed_instances),
        "state_digest": o.states.first().map(|s| s.state_digest.to_hex()),
        "state_digests_equal": o.equal,
        "killed_leader": o.killed,
        "leader_failover_ms": o.failover_ms.map(|ms| (ms * 10.0).round() / 10.0),
        "request_timeout_ms": cluster.cfg.raw.timeouts.request_timeout_ms,
        "history": o.history,
    })
}

/// The run as the human summary.
fn summary(cluster: &LocalCluster, opts: &DemoOptions, o: &Outcome) -> String {
    use std::fmt::Write;
    let report = &o.report;
    let (p50, p90, p99) = (
        report.percentile_ms(50.0),
        report.percentile_ms(90.0),
        report.percentile_ms(99.0),
    );
    let mut s = String::new();
    let _ = writeln!(
        s,
        "tagma demo: {} replicas, {} mode, f = {}, {} clients, {:.1} s",
        cluster.cfg.n(),
        cluster.cfg.mode,
        cluster.cfg.f,
        opts.clients,
        report.elapsed.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "  completed ops      {} ({} failed)",
        report.completed, report.errors
    );
    let _ = writeln!(
        s,
        "  throughput         {:.0} ops/s",
        report.throughput_ops_s()
    );
    let _ = writeln!(
        s,
        "  latency            p50 {p50:.2} ms   p90 {p90:.2} ms   p99 {p99:.2} ms"
    );
    let _ = writeln!(s, "  model violations   {}", report.violations.len());
    for st in &o.states {
        let _ = writeln!(
            s,
            "  replica {}          {} instances, {} requests, digest {}",
            st.replica,
            st.executed_instances,
            st.executed_requests,
            &st.state_digest.to_hex()[..16]
        );
    }
    if let Some(h) = &o.history {
        let _ = writeln!(s, "  history            {}", h.summary());
    }
    let _ = writeln!(
        s,
        "  state digests      {}",
        if o.equal {
            "equal on every replica"
        } else {
            "DIFFER"
        }
    );
    if let Some(leader) = o.killed {
        let _ = match o.failover_ms {
            Some(ms) => writeln!(
                s,
                "  leader failover    {ms:.0} ms (replica {leader} killed; request timer {} ms)",
                cluster.cfg.raw.timeouts.request_timeout_ms
            ),
            None => writeln!(
                s,
                "  leader failover    none: no request completed after the kill"
            ),
        };
    }
    s
}
