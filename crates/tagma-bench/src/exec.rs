//! `tagma bench exec`: the execution stage alone (the set-ups of Alchieri et al.: Early
//! scheduling in parallel state machine replication), so the figures measure scheduling,
//! not networking. Decided batches of pre-generated operations go straight into
//! a [`tagma_parallel::Scheduler`]; every policy runs the very same operations on a fresh copy
//! of the same initial state, and its final digest is compared with sequential execution's.
//!
//! Services:
//! - `list`: a linked list of integers (100k entries by default). Conflicting
//!   requests are `add`/`remove` (of a value absent/present, alternately, so the length stays
//!   put); the others `get`/`contains` of random indexes and values.
//! - `tuplespace-ts1` / `tuplespace-ts2`: 100k tuples of 1–10 fields of 50-character strings;
//!   conflicting requests are `out` (a fresh tuple) and `inp` (of a template that matches an
//!   existing tuple); the others `rdp` of such a template. TS1 and TS2 are the two
//!   classifications ([`tagma_tuplespace::Classification`]).

use std::time::Instant;

use bytes::Bytes;
use serde::Serialize;
use tagma_parallel::list::{ListOp, ListService};
use tagma_parallel::{Groups, ParallelService, Policy, Scheduler};
use tagma_tuplespace::{Classification, SpaceOp, TupleSpace};

/// The service measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecService {
    List,
    TuplespaceTs1,
    TuplespaceTs2,
}

impl ExecService {
    pub fn name(self) -> &'static str {
        match self {
            ExecService::List => "list",
            ExecService::TuplespaceTs1 => "tuplespace-ts1",
            ExecService::TuplespaceTs2 => "tuplespace-ts2",
        }
    }
}

/// One run's setup.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    pub service: ExecService,
    /// Share of conflicting requests, in percent (0..=100).
    pub conflict_pct: u32,
    pub threads: usize,
    /// Run after sequential execution (which always runs: it is the baseline).
    pub policies: Vec<Policy>,
    /// Requests executed per policy.
    pub requests: usize,
    /// Requests per decided batch.
    pub batch: usize,
    /// Entries of the list, or tuples of the tuple space, before the run.
    pub size: usize,
    pub seed: u64,
    /// Rounds: each runs every policy once, in turn (starting with a different one each
    /// round), on a fresh state; each policy's figure is its median round (the machines are
    /// shared and noisy).
    pub rounds: usize,
}

/// One policy's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ExecReport {
    pub service: String,
    pub conflict_pct: u32,
    pub threads: usize,
    pub policy: String,
    pub requests: usize,
    pub batch: usize,
    pub size: usize,
    pub rounds: usize,
    /// The median round's time.
    pub elapsed_s: f64,
    pub throughput_ops_s: f64,
    /// Throughput over sequential execution's, measured in the same invocation.
    pub speedup_vs_sequential: f64,
    /// The final state equals sequential execution's.
    pub digest_matches_sequential: bool,
}

/// A small deterministic generator (splitmix64): the same seed gives the same workload.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn percent(&mut self, pct: u32) -> bool {
        self.below(100) < u64::from(pct)
    }
}

/// The list's operations: `pct`% add/remove (alternating, so the length stays put).
fn list_ops(rng: &mut Rng, size: usize, requests: usize, pct: u32) -> Vec<Bytes> {
    let size = size as i64;
    let mut added = 0i64;
    (0..requests)
        .map(|i| {
            let op = if rng.percent(pct) {
                added += 1;
                if added % 2 == 1 {
                    ListOp::Add(size + added)
                } else {
                    ListOp::Remove(size + added - 1)
                }
            } else if i % 2 == 0 {
                ListOp::Get(rng.below(size as u64) as i64)
            } else {
                ListOp::Contains(rng.below(size as u64) as i64)
            };
            op.encode()
        })
        .collect()
}

fn field(rng: &mut Rng) -> Bytes {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let s: Vec<u8> = (0..50)
        .map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize])
        .collect();
    Bytes::from(s)
}

fn tuple(rng: &mut Rng) -> Vec<Bytes> {
    let arity = 1 + rng.below(10) as usize;
    (0..arity).map(|_| field(rng)).collect()
}

/// The tuple space's initial tuples and operations: `pct`% out/inp (alternating), the rest
/// rdp; templates name the first field of a tuple of the initial state (so they match one,
/// somewhere in its arity's list) and leave the others open.
fn space_ops(rng: &mut Rng, initial: &[Vec<Bytes>], requests: usize, pct: u32) -> Vec<Bytes> {
    let mut outs = 0u64;
    (0..requests)
        .map(|_| {
            space_choice(rng, initial, pct, || {
                outs += 1;
                outs % 2 == 1
            })
            .encode()
        })
        .collect()
}

/// One operation: with probability `pct` %, an out of a fresh tuple (when `out_turn` says
/// so) or an inp, otherwise an rdp; templates name the first field of a random tuple of
/// `initial`.
fn space_choice(
    rng: &mut Rng,
    initial: &[Vec<Bytes>],
    pct: u32,
    out_turn: impl FnOnce() -> bool,
) -> SpaceOp {
    let target = &initial[rng.below(initial.len() as u64) as usize];
    let template: Vec<Option<Bytes>> = target
        .iter()
        .enumerate()
        .map(|(i, f)| (i == 0).then(|| f.clone()))
        .collect();
    if rng.percent(pct) {
        if out_turn() {
            SpaceOp::Out(tuple(rng))
        } else {
            SpaceOp::Inp(template)
        }
    } else {
        SpaceOp::Rdp(template)
    }
}

/// The same tuples with every field a slice of one buffer: each policy's fresh tuple space
/// shares the field bytes (zero-copy), so all of them scan the same memory layout (separate
/// allocations per run made the scans' speed vary from run to run).
fn compact(tuples: Vec<Vec<Bytes>>) -> Vec<Vec<Bytes>> {
    let total = tuples.iter().flatten().map(Bytes::len).sum();
    let mut arena = bytes::BytesMut::with_capacity(total);
    for f in tuples.iter().flatten() {
        arena.extend_from_slice(f);
    }
    let arena = arena.freeze();
    let mut at = 0;
    tuples
        .iter()
        .map(|t| {
            t.iter()
                .map(|f| {
                    let slice = arena.slice(at..at + f.len());
                    at += f.len();
                    slice
                })
                .collect()
        })
        .collect()
}

/// The seed of the replicated tuple space's initial tuples (`tagma replica --service
/// tuplespace-*` and its benchmark clients regenerate the same ones).
pub const TUPLES_SEED: u64 = 0x7a6d_5ace;

/// The initial tuple space: `size` tuples of 1–10 fields of 50 characters, drawn from
/// `seed` (replicas and clients regenerate the same ones).
pub fn initial_tuples(size: usize, seed: u64) -> Vec<Vec<Bytes>> {
    let mut rng = Rng(seed);
    compact((0..size).map(|_| tuple(&mut rng)).collect())
}

/// A tuple space holding `initial`, classified as `class`.
pub fn tuple_space(class: Classification, initial: &[Vec<Bytes>]) -> TupleSpace {
    let ts = TupleSpace::new(class);
    for t in initial {
        ts.apply(&SpaceOp::Out(t.clone()));
    }
    ts
}

/// The `n`-th operation of a tuple-space client `driver` (end-to-end benchmarks): `pct`% out
/// (a fresh tuple) or inp, the rest rdp, of templates naming the first field of a tuple of
/// `initial`.
pub fn space_op(initial: &[Vec<Bytes>], pct: u32, driver: usize, n: u64) -> Bytes {
    let mut rng = Rng(((driver as u64) << 40) ^ n);
    space_choice(&mut rng, initial, pct, || n.is_multiple_of(2)).encode()
}

/// A fresh service in its initial state.
enum Fresh {
    List(usize),
    Space(Classification, Vec<Vec<Bytes>>),
}

/// Runs every policy (sequential first) on the same operations; one report per policy.
pub fn run(opts: &ExecOptions) -> Vec<ExecReport> {
    let mut rng = Rng(opts.seed);
    let (fresh, ops) = match opts.service {
        ExecService::List => (
            Fresh::List(opts.size),
            list_ops(&mut rng, opts.size, opts.requests, opts.conflict_pct),
        ),
        ExecService::TuplespaceTs1 | ExecService::TuplespaceTs2 => {
            let initial = initial_tuples(opts.size, rng.next());
            let ops = space_ops(&mut rng, &initial, opts.requests, opts.conflict_pct);
            let class = if opts.service == ExecService::TuplespaceTs1 {
                Classification::Ts1
            } else {
                Classification::Ts2
            };
            (Fresh::Space(class, initial), ops)
        }
    };
    let mut policies = vec![Policy::Sequential];
    policies.extend(opts.policies.iter().filter(|p| **p != Policy::Sequential));
    let threads_of = |policy: Policy| {
        if policy == Policy::Sequential {
            1
        } else {
            opts.threads
        }
    };
    // Times per policy, rounds interleaved so that a slow spell of the machine hits all.
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); policies.len()];
    let mut digests: Vec<[u8; 32]> = vec![[0; 32]; policies.len()];
    for round in 0..opts.rounds.max(1) {
        // Each round starts with another policy: whatever the order favours, all share it.
        for step in 0..policies.len() {
            let i = (round + step) % policies.len();
            let policy = &policies[i];
            let scheduler = Scheduler::new(*policy, threads_of(*policy), Groups::default());
            let (elapsed_s, digest) = match &fresh {
                Fresh::List(n) => measure(
                    &ListService::with_entries(*n as i64),
                    &scheduler,
                    &ops,
                    opts.batch,
                ),
                Fresh::Space(class, initial) => {
                    measure(&tuple_space(*class, initial), &scheduler, &ops, opts.batch)
                }
            };
            times[i].push(elapsed_s);
            digests[i] = digest;
        }
    }
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let mut reports: Vec<ExecReport> = Vec::new();
    let mut baseline: Option<(f64, [u8; 32])> = None;
    for (i, policy) in policies.iter().copied().enumerate() {
        let threads = threads_of(policy);
        let elapsed_s = median(&mut times[i]);
        let digest = digests[i];
        let throughput = ops.len() as f64 / elapsed_s.max(1e-9);
        let (base_ops, base_digest) = *baseline.get_or_insert((throughput, digest));
        reports.push(ExecReport {
            rounds: opts.rounds.max(1),
            service: opts.service.name().into(),
            conflict_pct: opts.conflict_pct,
            threads,
            policy: policy.name().into(),
            requests: ops.len(),
            batch: opts.batch,
            size: opts.size,
            elapsed_s,
            throughput_ops_s: throughput,
            speedup_vs_sequential: throughput / base_ops,
            digest_matches_sequential: digest == base_digest,
        });
    }
    reports
}

/// Classifies and runs `ops` in batches of `batch`; the time taken and the final digest.
fn measure<S: ParallelService>(
    service: &S,
    scheduler: &Scheduler,
    ops: &[Bytes],
    batch: usize,
) -> (f64, [u8; 32]) {
    let started = Instant::now();
    for chunk in ops.chunks(batch.max(1)) {
        let tasks = tagma_parallel::classify(service, chunk);
        scheduler.run(service, &tasks);
    }
    (started.elapsed().as_secs_f64(), service.digest())
}

/// The reports as a table.
pub fn table(reports: &[ExecReport]) -> String {
    let mut s = String::from(
        "service          conflict% threads policy      ops/s     speedup  same state\n",
    );
    for r in reports {
        s.push_str(&format!(
            "{:<16} {:>9} {:>7} {:<10} {:>9.0} {:>8.2}x  {}\n",
            r.service,
            r.conflict_pct,
            r.threads,
            r.policy,
            r.throughput_ops_s,
            r.speedup_vs_sequential,
            r.digest_matches_sequential
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_reaches_the_sequential_state_on_every_service() {
        for service in [
            ExecService::List,
            ExecService::TuplespaceTs1,
            ExecService::TuplespaceTs2,
        ] {
            for pct in [0, 50, 100] {
                let reports = run(&ExecOptions {
                    service,
                    conflict_pct: pct,
                    threads: 2,
                    policies: vec![Policy::Barrier, Policy::Graph],
                    requests: 300,
                    batch: 50,
                    size: 500,
                    seed: 7,
                    rounds: 2,
                });
                assert_eq!(reports.len(), 3);
                assert_eq!(reports[0].policy, "sequential");
                assert!(
                    reports.iter().all(|r| r.digest_matches_sequential),
                    "{service:?} {pct}%: {reports:?}"
                );
            }
        }
    }

    #[test]
    fn a_sweep_runs_every_step_and_draws_one_line_per_parallel_policy() {
        let opts = ExecOptions {
            service: ExecService::List,
            conflict_pct: 0,
            threads: 2,
            policies: vec![Policy::Barrier, Policy::Graph],
            requests: 60,
            batch: 20,
            size: 100,
            seed: 3,
            rounds: 1,
        };
        let mut steps = 0;
        let reports = sweep(&opts, ExecSweep::Conflict, |_| steps += 1);
        assert_eq!(steps, CONFLICT_STEPS.len());
        assert_eq!(reports.len(), 3 * CONFLICT_STEPS.len());
        let c = chart(&reports, ExecSweep::Conflict);
        assert_eq!(c.series.len(), 3);
        assert_eq!(c.series[2].label, "graph");
        assert_eq!(c.series[2].points.len(), CONFLICT_STEPS.len());
        let dir = std::env::temp_dir().join(format!("tagma-exec-{}.png", std::process::id()));
        crate::plot::draw(&c, &dir).unwrap();
        assert!(std::fs::read(&dir).unwrap().starts_with(b"\x89PNG"));
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn workloads_are_deterministic_and_follow_the_conflict_share() {
        let a = list_ops(&mut Rng(1), 100, 1000, 25);
        assert_eq!(a, list_ops(&mut Rng(1), 100, 1000, 25));
        let writes = a
            .iter()
            .filter(|op| ListOp::decode(op).is_some_and(ListOp::writes))
            .count();
        assert!((200..300).contains(&writes), "{writes}");
    }
}

/// What a sweep varies (throughput against the share of conflicting
/// requests, and against the number of threads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecSweep {
    /// 0, 5, 10, 25, 50, 75, 100 % conflicting, at the options' thread count.
    Conflict,
    /// 1, 2, 4, 8 threads (and 16 where the machine has them), at the options' conflict
    /// share.
    Threads,
}

/// The conflict shares of a conflict sweep.
pub const CONFLICT_STEPS: [u32; 7] = [0, 5, 10, 25, 50, 75, 100];

/// Runs every configuration of `sweep` (each with its own sequential baseline).
pub fn sweep(
    opts: &ExecOptions,
    sweep: ExecSweep,
    mut progress: impl FnMut(&str),
) -> Vec<ExecReport> {
    let configs: Vec<ExecOptions> = match sweep {
        ExecSweep::Conflict => CONFLICT_STEPS
            .iter()
            .map(|&pct| ExecOptions {
                conflict_pct: pct,
                ..opts.clone()
            })
            .collect(),
        ExecSweep::Threads => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            [1, 2, 4, 8, 16]
                .into_iter()
                .filter(|t| *t <= cores.max(8))
                .map(|threads| ExecOptions {
                    threads,
                    ..opts.clone()
                })
                .collect()
        }
    };
    let mut out = Vec::new();
    for (i, c) in configs.iter().enumerate() {
        progress(&format!(
            "[{}/{}] {} {}% conflicting, {} threads",
            i + 1,
            configs.len(),
            c.service.name(),
            c.conflict_pct,
            c.threads
        ));
        out.extend(run(c));
    }
    out
}

/// The chart of a sweep: speedup over sequential execution per policy (sequential is the
/// line at 1).
pub fn chart(reports: &[ExecReport], sweep: ExecSweep) -> crate::plot::Chart {
    let mut policies: Vec<String> = Vec::new();
    for r in reports {
        if !policies.contains(&r.policy) {
            policies.push(r.policy.clone());
        }
    }
    let first = reports.first();
    let (service, threads, pct) = first.map_or((String::new(), 0, 0), |r| {
        (r.service.clone(), r.threads, r.conflict_pct)
    });
    let x = |r: &ExecReport| match sweep {
        ExecSweep::Conflict => f64::from(r.conflict_pct),
        ExecSweep::Threads => r.threads as f64,
    };
    let series = policies
        .iter()
        .map(|p| crate::plot::Series {
            label: p.clone(),
            points: reports
                .iter()
                .filter(|r| &r.policy == p)
                .map(|r| {
                    // Sequential runs on one thread whatever the sweep: draw it at every x.
                    let x = if r.policy == "sequential" && sweep == ExecSweep::Threads {
                        0.0
                    } else {
                        x(r)
                    };
                    (x, r.speedup_vs_sequential)
                })
                .filter(|(x, _)| *x > 0.0 || sweep == ExecSweep::Conflict)
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let size = first.map_or(0, |r| r.size);
    crate::plot::Chart {
        title: match sweep {
            ExecSweep::Conflict => {
                let threads = reports.iter().map(|r| r.threads).max().unwrap_or(threads);
                format!("{service} ({size}): speedup over sequential, {threads} threads")
            }
            ExecSweep::Threads => {
                format!("{service} ({size}): speedup over sequential, {pct}% conflicting")
            }
        },
        x_label: match sweep {
            ExecSweep::Conflict => "conflicting requests (%)".into(),
            ExecSweep::Threads => "worker threads".into(),
        },
        y_label: "throughput / sequential throughput".into(),
        integer_x: sweep == ExecSweep::Threads,
        series,
        events: Vec::new(),
    }
}

/// `tagma bench exec`: checks the options, runs one configuration or every step of `sweep`
/// (drawing its figure into `plot`), and prints the reports (JSON objects or the table);
/// fails when a policy ends in another state than sequential execution.
pub fn run_command(
    opts: &ExecOptions,
    sweep: Option<ExecSweep>,
    plot: Option<&std::path::Path>,
    json: bool,
) -> anyhow::Result<()> {
    if opts.conflict_pct > 100 {
        anyhow::bail!("--conflict-pct must be 0..=100, got {}", opts.conflict_pct);
    }
    if opts.threads == 0 || opts.requests == 0 || opts.batch == 0 || opts.size == 0 {
        anyhow::bail!("--threads, --requests, --batch and --size must be at least 1");
    }
    let reports = match sweep {
        None => run(opts),
        Some(s) => {
            let reports = self::sweep(opts, s, |step| {
                if !json {
                    eprintln!("{step}");
                }
            });
            if let Some(path) = plot {
                crate::plot::draw(&chart(&reports, s), path)?;
                if !json {
                    eprintln!("wrote {}", path.display());
                }
            }
            reports
        }
    };
    if json {
        for r in &reports {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print!("{}", table(&reports));
    }
    if let Some(r) = reports.iter().find(|r| !r.digest_matches_sequential) {
        anyhow::bail!(
            "policy {} ended in another state than sequential execution",
            r.policy
        );
    }
    Ok(())
}
