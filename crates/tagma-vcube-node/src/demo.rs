//! The multi-process demo's coordinator: it writes a plan and one key per process into a
//! fresh directory, starts the host processes (`tagma crdt host`), waits for their reports
//! and judges the run from them alone — convergence (equal CRDT digests and delivered
//! counters at every running subscriber), causal order (each delivery checked against the
//! publisher's delivered counters when it published), deliveries twice, latency (publish
//! to delivery, one machine's clock) and bytes.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tagma_crypto::IdentityKey;

use crate::error::HostError;
use crate::host::{HostReport, TopicState};

/// When an operation was published and what its publisher had delivered then.
type Sent<'a> = (u64, &'a [(u32, u64)]);
use crate::plan::Plan;

/// How the demo runs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub nodes: u32,
    pub processes: usize,
    pub topics: u32,
    pub publishers_per_topic: u32,
    pub ops_per_s: f64,
    pub duration_ms: u64,
    pub drain_ms: u64,
    pub value_bytes: usize,
    pub seed: u64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            nodes: 64,
            processes: 4,
            topics: 4,
            publishers_per_topic: 4,
            ops_per_s: 5.0,
            duration_ms: 8_000,
            drain_ms: 6_000,
            value_bytes: 256,
            seed: 1,
        }
    }
}

/// The demo's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct DemoReport {
    pub nodes: u32,
    pub processes: usize,
    pub topics: u32,
    pub operations: u64,
    pub deliveries: u64,
    pub convergent: bool,
    pub divergence: Vec<String>,
    pub causal_violations: u64,
    pub double_deliveries: u64,
    pub latency_ms_mean: f64,
    pub latency_ms_p99: f64,
    /// Bytes of every message the nodes sent, and how many.
    pub message_bytes: u64,
    pub messages: u64,
    /// Bytes that crossed between processes.
    pub bytes_between_processes: u64,
    pub stopped_node: u32,
    pub joined_node: u32,
    /// A node that subscribed mid-run, and the topic.
    pub subscribed_mid_run: Option<(u32, u32)>,
    pub snapshots_installed: u64,
    pub wall_s: f64,
}

impl DemoReport {
    pub fn passed(&self) -> bool {
        self.convergent
            && self.causal_violations == 0
            && self.double_deliveries == 0
            && self.operations > 0
    }
}

fn free_port() -> Result<SocketAddr, HostError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| HostError::Listen {
        addr: "127.0.0.1:0".into(),
        error: e.to_string(),
    })?;
    l.local_addr().map_err(|e| HostError::Listen {
        addr: "127.0.0.1:0".into(),
        error: e.to_string(),
    })
}

fn io(path: &Path, e: impl std::fmt::Display) -> HostError {
    HostError::Io {
        path: path.display().to_string(),
        error: e.to_string(),
    }
}

/// Draws the plan and writes it with the processes' keys into `dir`.
fn write_plan(dir: &Path, o: &DemoOptions) -> Result<Plan, HostError> {
    if o.nodes < 4 || o.processes == 0 || o.processes as u32 > o.nodes || o.topics == 0 {
        return Err(HostError::Plan(
            "the demo needs at least 4 nodes, 1 to nodes processes and a topic".into(),
        ));
    }
    let mut rng = o.seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut draw = |n: u32| {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((rng >> 33) % u64::from(n)) as u32
    };
    let per = o.nodes as usize / o.processes;
    let mut ranges = Vec::new();
    for p in 0..o.processes {
        let a = (p * per) as u32;
        let b = if p + 1 == o.processes {
            o.nodes
        } else {
            ((p + 1) * per) as u32
        };
        ranges.push((a, b));
    }
    let mut keys = Vec::new();
    let mut addrs = Vec::new();
    for p in 0..o.processes {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| HostError::Plan(format!("no randomness: {e}")))?;
        let path = dir.join(format!("process-{p}.key"));
        std::fs::write(&path, hex::encode(seed)).map_err(|e| io(&path, e))?;
        keys.push(hex::encode(IdentityKey::from_seed(seed).public().0));
        addrs.push(free_port()?);
    }
    // Topic 0 at every node, the others at about half of them.
    let mut subscribers = Vec::new();
    let mut publishers = Vec::new();
    for t in 0..o.topics {
        let members: Vec<u32> = (0..o.nodes)
            .filter(|&n| t == 0 || draw(2) == 0 || n == 0)
            .collect();
        let mut pubs = Vec::new();
        while pubs.len() < (o.publishers_per_topic as usize).min(members.len()) {
            let n = members[draw(members.len() as u32) as usize];
            if !pubs.contains(&n) {
                pubs.push(n);
            }
        }
        subscribers.push(members);
        publishers.push(pubs);
    }
    // A relay of topic 0 stops mid-run; the last node starts late. Neither publishes.
    let stopped = (1..o.nodes)
        .find(|n| publishers.iter().all(|p| !p.contains(n)))
        .unwrap_or(1);
    let joined = (0..o.nodes)
        .rev()
        .find(|n| *n != stopped && publishers.iter().all(|p| !p.contains(n)))
        .unwrap_or(o.nodes - 1);
    let warmup_ms = 1_500;
    // A node that neither publishes, stops nor starts late subscribes to topic 1 mid-run.
    let subscribe = subscribers.get(1).and_then(|members| {
        (0..o.nodes)
            .find(|n| {
                !members.contains(n)
                    && ![stopped, joined].contains(n)
                    && publishers.iter().all(|p| !p.contains(n))
            })
            .map(|n| (n, 1, warmup_ms + o.duration_ms / 2))
    });
    let epoch_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
        + 1_000;
    let plan = Plan {
        nodes: o.nodes,
        ranges,
        addrs,
        keys,
        subscribers,
        publishers,
        ops_per_s: o.ops_per_s,
        warmup_ms,
        duration_ms: o.duration_ms,
        drain_ms: o.drain_ms,
        value_bytes: o.value_bytes,
        stop: Some((stopped, warmup_ms + o.duration_ms * 2 / 5)),
        join: Some((joined, warmup_ms + o.duration_ms * 3 / 10)),
        subscribe,
        epoch_ms,
        seed: o.seed,
    };
    plan.check()?;
    let path = dir.join("plan.json");
    let text = serde_json::to_string_pretty(&plan).map_err(|e| HostError::Plan(e.to_string()))?;
    std::fs::write(&path, text).map_err(|e| io(&path, e))?;
    Ok(plan)
}

/// Runs the demo with host processes started as `exe crdt host --dir DIR --index I`.
pub fn run(exe: &Path, o: &DemoOptions) -> Result<DemoReport, HostError> {
    let started = Instant::now();
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let dir: PathBuf =
        std::env::temp_dir().join(format!("tagma-crdt-demo-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    let result = run_in(exe, o, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result.map(|mut r| {
        r.wall_s = started.elapsed().as_secs_f64();
        r
    })
}

fn run_in(exe: &Path, o: &DemoOptions, dir: &Path) -> Result<DemoReport, HostError> {
    let plan = write_plan(dir, o)?;
    let mut children: Vec<Child> = Vec::new();
    for p in 0..o.processes {
        let child = Command::new(exe)
            .args(["crdt", "host", "--dir"])
            .arg(dir)
            .args(["--index", &p.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| HostError::Host {
                index: p,
                why: format!("cannot start {}: {e}", exe.display()),
            })?;
        children.push(child);
    }
    let deadline = Instant::now()
        + Duration::from_millis(plan.warmup_ms + o.duration_ms + o.drain_ms + 30_000);
    let mut failure = None;
    for (p, child) in children.iter_mut().enumerate() {
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => break,
                Ok(Some(status)) => {
                    failure.get_or_insert(HostError::Host {
                        index: p,
                        why: format!("exited with {status}"),
                    });
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    failure.get_or_insert(HostError::Host {
                        index: p,
                        why: "did not finish in time".into(),
                    });
                    break;
                }
            }
        }
    }
    if let Some(e) = failure {
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        return Err(e);
    }
    let mut reports = Vec::new();
    for p in 0..o.processes {
        let path = dir.join(format!("report-{p}.json"));
        let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
        let report: HostReport = serde_json::from_str(&text).map_err(|e| HostError::Host {
            index: p,
            why: e.to_string(),
        })?;
        reports.push(report);
    }
    Ok(judge(&plan, &reports))
}

/// Judges a run from the hosts' reports.
pub fn judge(plan: &Plan, reports: &[HostReport]) -> DemoReport {
    let published: HashMap<(u32, u32, u64), Sent<'_>> = (reports.iter().flat_map(|r| &r.published))
        .map(|p| {
            (
                (p.topic, p.source, p.counter),
                (p.at_us, p.clock.as_slice()),
            )
        })
        .collect();
    let mut violations = 0;
    let mut doubles = 0;
    let mut latencies: Vec<u64> = Vec::new();
    let mut snapshots = 0;
    for node in reports.iter().flat_map(|r| &r.nodes) {
        let mut clocks: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
        for (topic, covered) in &node.snapshots {
            snapshots += 1;
            let c = clocks.entry(*topic).or_default();
            for &(s, n) in covered {
                let e = c.entry(s).or_insert(0);
                *e = (*e).max(n);
            }
        }
        for &(topic, source, counter, at_us) in &node.deliveries {
            let clock = clocks.entry(topic).or_default();
            let have = clock.get(&source).copied().unwrap_or(0);
            if have >= counter {
                doubles += 1;
                continue;
            }
            if source != node.id {
                match published.get(&(topic, source, counter)) {
                    Some((sent_us, needs)) => {
                        let in_order = have + 1 == counter
                            && needs.iter().all(|&(s, n)| {
                                s == source || clock.get(&s).copied().unwrap_or(0) >= n
                            });
                        if !in_order {
                            violations += 1;
                        }
                        latencies.push(at_us.saturating_sub(*sent_us));
                    }
                    None => violations += 1,
                }
            }
            clock.insert(source, counter);
        }
    }
    let mut divergence = Vec::new();
    for (t, members) in plan.final_subscribers().iter().enumerate() {
        let alive: Vec<(u32, &TopicState)> = (reports.iter().flat_map(|r| &r.nodes))
            .filter(|n| n.alive && members.contains(&n.id))
            .filter_map(|n| {
                (n.topics.iter())
                    .find(|s| s.topic == t as u32)
                    .map(|s| (n.id, s))
            })
            .collect();
        let differ = alive
            .iter()
            .filter(|a| a.1.digest != alive[0].1.digest || a.1.delivered != alive[0].1.delivered)
            .count();
        let missing = (members.iter())
            .filter(|m| Some(**m) != plan.stop.map(|s| s.0))
            .filter(|m| !alive.iter().any(|a| a.0 == **m))
            .count();
        if differ > 0 || missing > 0 {
            divergence.push(format!(
                "topic {t}: {differ} of {} running subscribers differ from the first, {missing} did not report it",
                alive.len()
            ));
        }
    }
    latencies.sort_unstable();
    let mean = if latencies.is_empty() {
        0.0
    } else {
        latencies.iter().sum::<u64>() as f64 / latencies.len() as f64 / 1_000.0
    };
    let p99 = latencies
        .get((latencies.len() * 99 / 100).min(latencies.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0) as f64
        / 1_000.0;
    DemoReport {
        nodes: plan.nodes,
        processes: plan.ranges.len(),
        topics: plan.subscribers.len() as u32,
        operations: published.len() as u64,
        deliveries: latencies.len() as u64,
        convergent: divergence.is_empty(),
        divergence,
        causal_violations: violations,
        double_deliveries: doubles,
        latency_ms_mean: mean,
        latency_ms_p99: p99,
        message_bytes: reports.iter().map(|r| r.message_bytes).sum(),
        messages: reports.iter().map(|r| r.messages).sum(),
        bytes_between_processes: reports.iter().map(|r| r.bytes_sent).sum(),
        stopped_node: plan.stop.map_or(0, |s| s.0),
        joined_node: plan.join.map_or(0, |j| j.0),
        subscribed_mid_run: plan.subscribe.map(|(n, t, _)| (n, t)),
        snapshots_installed: snapshots,
        wall_s: 0.0,
    }
}

impl DemoReport {
    pub fn table(&self) -> String {
        let rows = [
            (
                "nodes / processes",
                format!("{} / {}", self.nodes, self.processes),
            ),
            ("topics", self.topics.to_string()),
            ("operations published", self.operations.to_string()),
            ("deliveries", self.deliveries.to_string()),
            ("convergent", self.convergent.to_string()),
            ("causal violations", self.causal_violations.to_string()),
            ("double deliveries", self.double_deliveries.to_string()),
            (
                "latency mean / p99 (ms)",
                format!("{:.1} / {:.1}", self.latency_ms_mean, self.latency_ms_p99),
            ),
            (
                "messages (bytes)",
                format!("{} ({})", self.messages, self.message_bytes),
            ),
            (
                "bytes between processes",
                self.bytes_between_processes.to_string(),
            ),
            ("stopped mid-run", format!("node {}", self.stopped_node)),
            (
                "joined late",
                format!(
                    "node {} ({} snapshots)",
                    self.joined_node, self.snapshots_installed
                ),
            ),
            (
                "subscribed mid-run",
                match self.subscribed_mid_run {
                    Some((n, t)) => format!("node {n} to topic {t}"),
                    None => "none".into(),
                },
            ),
            ("wall time (s)", format!("{:.1}", self.wall_s)),
        ];
        let mut out = String::from("VCube-Sync over TCP on 127.0.0.1\n");
        for (k, v) in rows {
            out.push_str(&format!("  {k:<26} {v}\n"));
        }
        for d in &self.divergence {
            out.push_str(&format!("  {d}\n"));
        }
        out.push_str(if self.passed() { "PASS" } else { "FAIL" });
        out
    }
}
