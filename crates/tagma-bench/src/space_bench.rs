//! `tagma bench space`: the coordination service's insert throughput and latency as the
//! number of clients grows, with and without durability, in the manner of the insert
//! benchmark of Bessani et al.: "On the Efficiency of Durable State Machine Replication"
//! (tuples of four strings, 1 KB in all, four replicas, batches of up to 1 MiB). For each
//! client count, a durable cluster and one without durability are measured in alternating
//! windows in the same invocation, which gives `ratio_vs_no_durability`. A second part measures the execution
//! stage alone on a mixed workload over many spaces: the same decided batches through the
//! service with one thread and with several, the speedup of running spaces in parallel (and
//! a check that both reach the same state).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde::Serialize;
use tagma_cluster::LocalCluster;
use tagma_core::config::Durability;
use tagma_exec::{Context, LateReply, Service};
use tagma_space::{Field, FieldType, Pattern, SpaceRequest, TypedTemplate, TypedTuple};
use tagma_space_service::SpaceService;
use tagma_wire::{ClientId, RequestKind, RequestSeq};

use crate::measure::{MeasureOptions, Measured, measure, median_run};
use crate::plot::{Chart, Series, draw};
use crate::requests::{RequestShape, Workload, generator};

/// What `tagma bench space` runs.
#[derive(Clone, Debug)]
pub struct SpaceBenchOptions {
    pub clients: Vec<usize>,
    /// Durability settings to report (both: measured alternately, with their ratio).
    pub durability: Vec<Durability>,
    /// Bytes of each inserted tuple's four strings together.
    pub payload: usize,
    pub warmup_s: f64,
    pub duration_s: f64,
    /// Alternating windows per cluster, each figure the median window.
    pub rounds: u32,
    /// The execution stage's part: spaces, requests, threads.
    pub spaces: usize,
    pub exec_requests: usize,
    pub exec_threads: usize,
    pub json: bool,
    pub plot: Option<PathBuf>,
}

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct InsertPoint {
    pub clients: usize,
    pub durability: String,
    pub throughput_ops_s: f64,
    pub latency_mean_ms: f64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub batch_mean: f64,
    pub errors: u64,
    /// CPU seconds of the four replicas per 1,000 inserts.
    pub cpu_s_per_kop: f64,
    /// The leader's mean time per instance, vote flush and log flush (ms; 0 without
    /// durability for the flushes).
    pub instance_ms: f64,
    pub vote_flush_ms: f64,
    pub log_flush_ms: f64,
}

/// Per client count: both points and their ratio.
#[derive(Clone, Debug, Serialize)]
pub struct ClientsRow {
    pub clients: usize,
    pub points: Vec<InsertPoint>,
    /// Durable throughput over throughput without durability (null unless both ran).
    pub ratio_vs_no_durability: Option<f64>,
}

/// The execution stage on the mixed workload.
#[derive(Clone, Debug, Serialize)]
pub struct ExecPart {
    pub spaces: usize,
    pub requests: usize,
    pub threads: usize,
    pub sequential_ops_s: f64,
    pub parallel_ops_s: f64,
    pub speedup_vs_sequential: f64,
    pub same_state: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct SpaceBenchReport {
    pub replicas: usize,
    pub payload_bytes: usize,
    pub rows: Vec<ClientsRow>,
    /// The largest throughput measured with durability, and at how many clients.
    pub durable_peak_ops_s: Option<f64>,
    pub execution: ExecPart,
}

fn launch(exe: &Path, durability: Durability) -> Result<LocalCluster> {
    let launch = crate::requests::bench_space_cluster();
    LocalCluster::launch_with(exe, &launch, |cfg| {
        cfg.storage.durability = durability;
        // Batches of up to 1 MiB (some 480 inserts of 1 KB; the default 256 KiB holds 224):
        // fewer instances, so fewer flushes and rounds per insert. A leader change's SYNC
        // can then carry 8 MiB and some with 4 replicas, so frames may be 12 MiB.
        cfg.batch.batch_bytes_max = BATCH_BYTES_MAX;
        cfg.limits.frame_bytes_max = cfg.limits.frame_bytes_max.max(12 << 20);
    })
}

fn point(clients: usize, durability: Durability, m: &Measured) -> InsertPoint {
    let lat = &m.load.latencies_us;
    let mean = if lat.is_empty() {
        0.0
    } else {
        lat.iter().sum::<u64>() as f64 / lat.len() as f64 / 1000.0
    };
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |v| *v as f64 / 1000.0)
    };
    InsertPoint {
        clients,
        durability: durability.to_string(),
        throughput_ops_s: m.server_ops_s,
        latency_mean_ms: mean,
        latency_p50_ms: pct(0.5),
        latency_p99_ms: pct(0.99),
        batch_mean: m.batch_mean,
        errors: m.load.errors,
        cpu_s_per_kop: m.cpu_s_per_kop(),
        instance_ms: m.instance_ms,
        vote_flush_ms: m.vote_flush_ms,
        log_flush_ms: m.log_flush_ms,
    }
}

/// Runs `tagma bench space` with the `tagma` binary `exe` for the replicas.
pub fn run(exe: &Path, opts: &SpaceBenchOptions) -> Result<SpaceBenchReport> {
    if opts.clients.is_empty() || opts.clients.contains(&0) {
        bail!("--clients takes client counts of at least 1, e.g. 100,1000,10000");
    }
    if opts.durability.is_empty() {
        bail!("--durability takes none, fsync or both");
    }
    let request = generator(&RequestShape {
        workload: Workload::Space,
        payload: opts.payload,
        conflict_pct: 0,
        state_size: 0,
        reads: false,
    });
    let mut rows = Vec::new();
    for &clients in &opts.clients {
        let window = MeasureOptions {
            clients,
            warmup: Duration::from_secs_f64(opts.warmup_s),
            duration: Duration::from_secs_f64(opts.duration_s),
            kind: RequestKind::Ordered,
            quiet: opts.json,
        };
        let clusters = opts
            .durability
            .iter()
            .map(|d| Ok((*d, launch(exe, *d)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut runs: Vec<Vec<Measured>> = clusters.iter().map(|_| Vec::new()).collect();
        for round in 1..=opts.rounds {
            for (i, (d, cluster)) in clusters.iter().enumerate() {
                let label = format!("{clients} clients, durability {d}, {round}/{}", opts.rounds);
                runs[i].push(measure(cluster, &window, &*request, &label)?);
            }
        }
        // Every insert must have been applied (a full space would answer with an error,
        // which the load counts as completed): the space holds at least every insert the
        // windows counted.
        for ((d, cluster), runs) in clusters.iter().zip(&runs) {
            let counted: u64 = runs.iter().map(|m| m.load.completed).sum();
            let client = tagma_space::SpaceClient::new(cluster.proxy(Duration::from_secs(30))?);
            let held = client
                .list()
                .wait()?
                .into_iter()
                .find(|s| s.name == crate::requests::BENCH_SPACE)
                .map_or(0, |s| u64::from(s.tuples));
            if held < counted {
                bail!(
                    "durability {d}, {clients} clients: the space holds {held} tuples but {counted} inserts were counted: inserts were refused"
                );
            }
        }
        let points: Vec<InsertPoint> = clusters
            .iter()
            .zip(runs)
            .map(|((d, _), runs)| point(clients, *d, &median_run(runs)))
            .collect();
        let ops = |d: Durability| {
            points
                .iter()
                .find(|p| p.durability == d.to_string())
                .map(|p| p.throughput_ops_s)
        };
        let ratio = match (ops(Durability::Fsync), ops(Durability::None)) {
            (Some(durable), Some(plain)) if plain > 0.0 => Some(durable / plain),
            _ => None,
        };
        if !opts.json {
            for p in &points {
                eprintln!(
                    "{clients} clients, durability {}: {:.0} ops/s, latency mean {:.1} ms, p50 {:.1}, p99 {:.1}; batches of {:.0}, {:.2} ms per instance (vote flush {:.2}, log flush {:.2}), replica CPU {:.3} s per 1,000 inserts",
                    p.durability,
                    p.throughput_ops_s,
                    p.latency_mean_ms,
                    p.latency_p50_ms,
                    p.latency_p99_ms,
                    p.batch_mean,
                    p.instance_ms,
                    p.vote_flush_ms,
                    p.log_flush_ms,
                    p.cpu_s_per_kop
                );
            }
        }
        rows.push(ClientsRow {
            clients,
            points,
            ratio_vs_no_durability: ratio,
        });
    }
    let durable_peak_ops_s = rows
        .iter()
        .flat_map(|r| &r.points)
        .filter(|p| p.durability == Durability::Fsync.to_string())
        .map(|p| p.throughput_ops_s)
        .reduce(f64::max);
    let execution = exec_part(opts.spaces, opts.exec_requests, opts.exec_threads)?;
    let report = SpaceBenchReport {
        replicas: 4,
        payload_bytes: opts.payload,
        rows,
        durable_peak_ops_s,
        execution,
    };
    if let Some(path) = &opts.plot {
        draw(&chart(&report), path)?;
    }
    Ok(report)
}

/// Throughput per client count, one line per durability setting.
fn chart(report: &SpaceBenchReport) -> Chart {
    let mut series: Vec<Series> = Vec::new();
    for row in &report.rows {
        for p in &row.points {
            let label = format!("durability {}", p.durability);
            match series.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push((p.clients as f64, p.throughput_ops_s)),
                None => series.push(Series {
                    label,
                    points: vec![(p.clients as f64, p.throughput_ops_s)],
                }),
            }
        }
    }
    Chart {
        title: format!(
            "Coordination service: inserts of {} B tuples, 4 replicas",
            report.payload_bytes
        ),
        x_label: "clients".into(),
        y_label: "inserts/s".into(),
        integer_x: false,
        series,
        events: Vec::new(),
    }
}

/// A human table of the report.
pub fn table(report: &SpaceBenchReport) -> String {
    let mut out = format!(
        "{:>8} {:>10} {:>12} {:>10} {:>10} {:>10} {:>8}\n",
        "clients", "durability", "inserts/s", "mean ms", "p50 ms", "p99 ms", "ratio"
    );
    for row in &report.rows {
        for p in &row.points {
            out.push_str(&format!(
                "{:>8} {:>10} {:>12.0} {:>10.1} {:>10.1} {:>10.1} {:>8}\n",
                p.clients,
                p.durability,
                p.throughput_ops_s,
                p.latency_mean_ms,
                p.latency_p50_ms,
                p.latency_p99_ms,
                row.ratio_vs_no_durability
                    .map_or("-".into(), |r| format!("{r:.3}")),
            ));
        }
    }
    let e = &report.execution;
    out.push_str(&format!(
        "execution stage, mixed out/rdp/inp/cas over {} spaces: {:.0} ops/s with 1 thread, {:.0} with {} ({:.2}x), same state: {}\n",
        e.spaces, e.sequential_ops_s, e.parallel_ops_s, e.threads, e.speedup_vs_sequential, e.same_state
    ));
    out
}

/// The insert clusters' `batch_bytes_max`.
pub const BATCH_BYTES_MAX: usize = 1 << 20;

/// Requests per decided batch in the execution part.
const EXEC_BATCH: usize = 1024;

/// The mixed workload's `i`-th request: out, rdp, inp or cas on one of `spaces` spaces,
/// chosen by a splitmix of `i` (the same sequence every run).
fn mixed_request(i: u64, spaces: usize) -> SpaceRequest {
    let mut z = i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^= z >> 31;
    let space = format!("s{}", z % spaces as u64);
    let key = Field::Int(((z >> 16) % 64) as i64);
    let value = Field::Str(format!("{:0>200}", z >> 8));
    let template = TypedTemplate(vec![
        Pattern::Is(Field::Str("k".into())),
        Pattern::Is(key.clone()),
        Pattern::AnyOf(FieldType::Str),
    ]);
    let tuple = TypedTuple(vec![Field::Str("k".into()), key, value]);
    match (z >> 40) % 4 {
        0 => SpaceRequest::Out {
            space,
            tuple,
            lease_ms: None,
            sealed: None,
        },
        1 => SpaceRequest::Rdp { space, template },
        2 => SpaceRequest::Inp { space, template },
        _ => SpaceRequest::Cas {
            space,
            template,
            tuple,
            lease_ms: None,
            sealed: None,
        },
    }
}

/// Runs `requests` mixed requests through a service of `threads` threads; returns ops/s
/// and the final digest.
fn exec_run(spaces: usize, requests: usize, threads: usize) -> Result<(f64, tagma_wire::Digest)> {
    let mut service = SpaceService::default().with_threads(threads)?;
    for s in 0..spaces {
        service = service.with_space(&format!("s{s}"), tagma_space::Policy::default(), 1)?;
    }
    let batches: Vec<Vec<(bytes::Bytes, Context)>> = (0..requests)
        .collect::<Vec<_>>()
        .chunks(EXEC_BATCH)
        .enumerate()
        .map(|(b, chunk)| {
            chunk
                .iter()
                .map(|&i| {
                    let ctx = Context {
                        client: ClientId::new(1, (i % 64) as u32),
                        seq: RequestSeq(i as u64 + 1),
                        cid: Some(tagma_wire::ConsensusId(b as u64)),
                        timestamp_ms: 1_000 + b as u64,
                        seed: i as u64,
                    };
                    (mixed_request(i as u64, spaces).encode(), ctx)
                })
                .collect()
        })
        .collect();
    let started = Instant::now();
    let mut late: Vec<LateReply> = Vec::new();
    for (b, batch) in batches.iter().enumerate() {
        service.advance_time(1_000 + b as u64, &mut late);
        service.execute_ordered_run(batch, &mut late);
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok((requests as f64 / elapsed.max(1e-9), service.state_digest()))
}

/// The execution part: the median of 3 runs each, sequential and parallel, alternating.
fn exec_part(spaces: usize, requests: usize, threads: usize) -> Result<ExecPart> {
    if spaces == 0 || requests == 0 || threads == 0 {
        bail!("--spaces, --exec-requests and --exec-threads must be at least 1");
    }
    let (mut seq, mut par) = (Vec::new(), Vec::new());
    let mut same_state = true;
    for _ in 0..3 {
        let (s, ds) = exec_run(spaces, requests, 1)?;
        let (p, dp) = exec_run(spaces, requests, threads)?;
        same_state &= ds == dp;
        seq.push(s);
        par.push(p);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (s, p) = (median(&mut seq), median(&mut par));
    Ok(ExecPart {
        spaces,
        requests,
        threads,
        sequential_ops_s: s,
        parallel_ops_s: p,
        speedup_vs_sequential: p / s.max(1e-9),
        same_state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_execution_part_reaches_the_same_state_with_one_thread_or_several() {
        let part = exec_part(8, 2_000, 2).unwrap();
        assert!(part.same_state);
        assert!(part.sequential_ops_s > 0.0 && part.parallel_ops_s > 0.0);
        // The mixed workload really mixes: every operation kind occurs.
        let kinds: std::collections::BTreeSet<&str> =
            (0..400).map(|i| mixed_request(i, 8).op_name()).collect();
        assert_eq!(kinds.len(), 4, "{kinds:?}");
    }
}
