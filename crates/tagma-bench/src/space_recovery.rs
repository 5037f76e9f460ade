//! `tagma bench space-recovery`: how long the coordination service takes to serve again after
//! every replica stopped, by the size of its state, in the manner of the state-management
//! experiment of Bessani et al.: "On the Efficiency of Durable State Machine Replication".
//!
//! For each state size a fresh durable cluster (4 replicas, BFT) is filled with tuples of
//! four strings, and small writes carry every replica past two checkpoints of the full
//! state. Then, three times: every replica is stopped — with all disks intact, with one
//! replica's log damaged (a record in the middle), with one replica's newest checkpoint
//! damaged — and all are started again. Each case reports the time from the start until a
//! new operation completes (`serving_ms`) and until every replica is back at least where it
//! was (`all_recovered_ms`: a damaged replica included, which must notice the damage, set
//! its state aside and fetch what it misses from the others).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tagma_cluster::LocalCluster;
use tagma_core::config::Durability;
use tagma_space::{Field, SpaceClient, TypedTuple};
use tagma_wire::ReplicaId;

use crate::plot::{Chart, Series, draw};
use crate::requests::BENCH_SPACE;
use crate::state_transfer::positions;

/// Concurrent fill clients, and inserts each keeps in flight.
const FILL_CLIENTS: usize = 4;
const FILL_IN_FLIGHT: usize = 64;

#[derive(Clone, Debug)]
pub struct SpaceRecoveryOptions {
    pub state_mb: Vec<u64>,
    /// Bytes of each tuple's four strings together.
    pub tuple_bytes: usize,
    pub checkpoint_period: u64,
    pub json: bool,
    pub plot: Option<PathBuf>,
}

/// One restart of the whole system.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Restart {
    pub serving_ms: f64,
    pub all_recovered_ms: f64,
}

/// One state size.
#[derive(Clone, Debug, Serialize)]
pub struct RecoveryRow {
    pub state_mb: u64,
    /// The size of replica 0's newest checkpoint after the fill (MB).
    pub checkpoint_mb: f64,
    pub tuples: u64,
    pub fill_s: f64,
    pub all_correct: Restart,
    pub log_corrupted: Restart,
    pub state_corrupted: Restart,
    pub state_digests_equal: bool,
}

fn tuple(i: u64, field_bytes: usize) -> TypedTuple {
    TypedTuple(
        (0..4)
            .map(|f| {
                let mut s = format!("{i}/{f}/");
                s.extend(std::iter::repeat_n(
                    'r',
                    field_bytes.saturating_sub(s.len()),
                ));
                Field::Str(s)
            })
            .collect(),
    )
}

fn launch(exe: &Path, opts: &SpaceRecoveryOptions, state_mb: u64) -> Result<LocalCluster> {
    let launch = crate::requests::bench_space_cluster();
    let period = opts.checkpoint_period;
    LocalCluster::launch_with(exe, &launch, |cfg| {
        cfg.storage.durability = Durability::Fsync;
        cfg.storage.checkpoint_period = period;
        cfg.storage.log_segment_bytes = (state_mb << 17).clamp(1 << 20, 8 << 20);
        cfg.storage.state_bytes_max = cfg.storage.state_bytes_max.max((state_mb + 64) << 21);
        cfg.timeouts.request_timeout_ms = 2_000;
    })
}

/// Inserts `tuples` tuples through pipelined clients; returns the seconds it took.
fn fill(cluster: &LocalCluster, tuples: u64, field_bytes: usize, json: bool) -> Result<f64> {
    let ready = Duration::from_secs(60);
    let clients = (0..FILL_CLIENTS)
        .map(|_| Ok(SpaceClient::new(cluster.proxy(ready)?)))
        .collect::<Result<Vec<_>>>()?;
    let bar = crate::report::fill_bar(tuples, json);
    let next = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = clients
            .iter()
            .map(|client| {
                let (next, bar) = (&next, &bar);
                s.spawn(move || -> Result<()> {
                    let mut in_flight = std::collections::VecDeque::new();
                    loop {
                        while in_flight.len() < FILL_IN_FLIGHT {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= tuples {
                                break;
                            }
                            in_flight.push_back(client.out(
                                BENCH_SPACE,
                                tuple(i, field_bytes),
                                None,
                            ));
                        }
                        let Some(oldest) = in_flight.pop_front() else {
                            return Ok(());
                        };
                        oldest.wait().context("filling the space")?;
                        bar.inc(1);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("fill thread")?;
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    Ok(started.elapsed().as_secs_f64())
}

/// Stops every replica (damaging replica 1's log or checkpoint first, if asked), starts
/// them all, and times serving and full recovery.
fn restart_all(
    cluster: &mut LocalCluster,
    probe: &SpaceClient,
    damage: Option<fn(&Path) -> Result<()>>,
    subdir: &str,
) -> Result<Restart> {
    let position = positions(cluster).into_iter().max().unwrap_or(0);
    cluster.stop_all();
    if let Some(damage) = damage {
        let dir = tagma_node::cluster_dir::data_dir(&cluster.dir, &cluster.cfg, ReplicaId(1));
        damage(&dir.join(subdir))?;
    }
    let started = Instant::now();
    cluster.start_all()?;
    probe
        .out(BENCH_SPACE, tuple(u64::MAX, 8), None)
        .wait()
        .context("the restarted cluster did not serve")?;
    let serving_ms = started.elapsed().as_secs_f64() * 1000.0;
    while !positions(cluster).iter().all(|p| *p >= position) {
        if started.elapsed() > Duration::from_secs(900) {
            bail!("the replicas did not all recover within 900 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Restart {
        serving_ms,
        all_recovered_ms: started.elapsed().as_secs_f64() * 1000.0,
    })
}

fn checkpoint_mb(cluster: &LocalCluster) -> f64 {
    let dir = tagma_node::cluster_dir::data_dir(&cluster.dir, &cluster.cfg, ReplicaId(0))
        .join("checkpoints");
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "ckp"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .max()
        .unwrap_or(0) as f64
        / 1e6
}

/// One state size.
fn row(exe: &Path, opts: &SpaceRecoveryOptions, state_mb: u64) -> Result<RecoveryRow> {
    let mut cluster = launch(exe, opts, state_mb)?;
    let probe = SpaceClient::new(cluster.proxy(Duration::from_secs(60))?);
    let field_bytes = opts.tuple_bytes.div_ceil(4).max(16);
    let tuples = (state_mb << 20) / (field_bytes as u64 * 4);
    let fill_s = fill(&cluster, tuples, field_bytes, opts.json)?;
    // Small inserts until every replica has checkpointed the full state twice.
    let checkpoints = |c: &LocalCluster| -> Vec<f64> {
        (0..4)
            .map(|i| c.metric(i, "tagma_checkpoints_total"))
            .collect()
    };
    let before = checkpoints(&cluster);
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut k = 0;
    while checkpoints(&cluster)
        .iter()
        .zip(&before)
        .any(|(now, then)| *now < then + 2.0)
    {
        if Instant::now() > deadline {
            bail!("the replicas did not checkpoint after the fill");
        }
        let pending: Vec<_> = (0..50)
            .map(|j| probe.out(BENCH_SPACE, tuple(u64::MAX - 1 - (k * 50 + j), 8), None))
            .collect();
        for p in pending {
            p.wait()?;
        }
        k += 1;
    }
    let checkpoint_mb = checkpoint_mb(&cluster);
    if !opts.json {
        eprintln!(
            "{state_mb} MB: {tuples} tuples in {fill_s:.1} s, checkpoint {checkpoint_mb:.0} MB; restarting every replica"
        );
    }
    let all_correct = restart_all(&mut cluster, &probe, None, "")?;
    let log_corrupted = restart_all(
        &mut cluster,
        &probe,
        Some(tagma_cluster::disk::corrupt_log),
        "log",
    )?;
    let state_corrupted = restart_all(
        &mut cluster,
        &probe,
        Some(tagma_cluster::disk::corrupt_checkpoint),
        "checkpoints",
    )?;
    let states = cluster.converged_states(
        probe.proxy(),
        &cluster.cfg.members(),
        Duration::from_secs(120),
    )?;
    Ok(RecoveryRow {
        state_mb,
        checkpoint_mb,
        tuples,
        fill_s,
        all_correct,
        log_corrupted,
        state_corrupted,
        state_digests_equal: tagma_cluster::digests_equal(&states),
    })
}

/// Runs every state size; draws the times if asked.
pub fn run(exe: &Path, opts: &SpaceRecoveryOptions) -> Result<Vec<RecoveryRow>> {
    if opts.state_mb.is_empty() {
        bail!("--state-mb takes sizes in MB, e.g. 0,50,100");
    }
    let mut rows = Vec::new();
    for &mb in &opts.state_mb {
        let row = row(exe, opts, mb)?;
        if !opts.json {
            eprintln!(
                "{mb} MB: serving after {:.0} / {:.0} / {:.0} ms, all recovered after {:.0} / {:.0} / {:.0} ms (all correct / log corrupted / state corrupted)",
                row.all_correct.serving_ms,
                row.log_corrupted.serving_ms,
                row.state_corrupted.serving_ms,
                row.all_correct.all_recovered_ms,
                row.log_corrupted.all_recovered_ms,
                row.state_corrupted.all_recovered_ms,
            );
        }
        rows.push(row);
    }
    if let Some(path) = &opts.plot {
        draw(&chart(&rows), path)?;
    }
    Ok(rows)
}

fn chart(rows: &[RecoveryRow]) -> Chart {
    let line = |label: &str, pick: fn(&RecoveryRow) -> f64| Series {
        label: label.into(),
        points: rows.iter().map(|r| (r.state_mb as f64, pick(r))).collect(),
    };
    Chart {
        title: "Coordination service: every replica restarted".into(),
        x_label: "state (MB)".into(),
        y_label: "seconds until all replicas recovered".into(),
        integer_x: false,
        series: vec![
            line("all states correct", |r| {
                r.all_correct.all_recovered_ms / 1000.0
            }),
            line("one log corrupted", |r| {
                r.log_corrupted.all_recovered_ms / 1000.0
            }),
            line("one state corrupted", |r| {
                r.state_corrupted.all_recovered_ms / 1000.0
            }),
        ],
        events: Vec::new(),
    }
}

/// A human table of the rows.
pub fn table(rows: &[RecoveryRow]) -> String {
    let mut out = format!(
        "{:>8} {:>10} {:>22} {:>22} {:>22}\n",
        "state MB", "ckpt MB", "all correct s", "log corrupted s", "state corrupted s"
    );
    let cell = |r: &Restart| {
        format!(
            "{:.2} (serving {:.2})",
            r.all_recovered_ms / 1000.0,
            r.serving_ms / 1000.0
        )
    };
    for r in rows {
        out.push_str(&format!(
            "{:>8} {:>10.0} {:>22} {:>22} {:>22}\n",
            r.state_mb,
            r.checkpoint_mb,
            cell(&r.all_correct),
            cell(&r.log_corrupted),
            cell(&r.state_corrupted),
        ));
    }
    out
}
