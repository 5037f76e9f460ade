//! The mixed key-value workload of `tagma demo` and the multi-process tests.
//!
//! Each logical client runs closed-loop (one request at a time) over its own keys and checks
//! every reply against a sequential model of those keys: since only it writes them, any
//! deviation is a linearizability violation and is reported. A shared counter, incremented by
//! everyone, must look strictly increasing to each client.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_client::{ClientError, Proxy};
use tagma_kv::{KvOp, KvReply};

#[derive(Clone, Debug)]
pub struct WorkloadOptions {
    /// Stop after this long…
    pub duration: Duration,
    /// …or after this many operations per client, whichever comes first.
    pub ops_per_client: Option<u64>,
    /// Send half of the reads unordered.
    pub unordered_reads: bool,
    pub keys_per_client: usize,
    /// Measures failover: the first completion of a request issued after a fault.
    pub failover: Option<std::sync::Arc<FailoverProbe>>,
}

/// Records when a fault was injected and when the first request issued after it completed.
#[derive(Debug, Default)]
pub struct FailoverProbe {
    fault_at: Mutex<Option<Instant>>,
    first_completion: Mutex<Option<Instant>>,
}

impl FailoverProbe {
    /// Marks the moment of the fault.
    pub fn fault(&self) {
        *self.fault_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    fn completed(&self, started: Instant, now: Instant) {
        let fault = *self.fault_at.lock().unwrap_or_else(|e| e.into_inner());
        if fault.is_some_and(|f| started >= f) {
            self.first_completion
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(now);
        }
    }

    /// Milliseconds from the fault to the first completion of a request issued after it.
    pub fn failover_ms(&self) -> Option<f64> {
        let fault = (*self.fault_at.lock().unwrap_or_else(|e| e.into_inner()))?;
        let done = (*self
            .first_completion
            .lock()
            .unwrap_or_else(|e| e.into_inner()))?;
        Some(done.duration_since(fault).as_secs_f64() * 1000.0)
    }
}

impl Default for WorkloadOptions {
    fn default() -> Self {
        WorkloadOptions {
            duration: Duration::from_secs(10),
            ops_per_client: None,
            unordered_reads: true,
            keys_per_client: 16,
            failover: None,
        }
    }
}

/// What the workload observed.
#[derive(Clone, Debug, Default)]
pub struct WorkloadReport {
    pub completed: u64,
    pub errors: u64,
    /// Human descriptions of results that contradict the sequential model.
    pub violations: Vec<String>,
    pub latencies_us: Vec<u64>,
    pub elapsed: Duration,
    pub first_error: Option<String>,
}

impl WorkloadReport {
    pub fn throughput_ops_s(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Latency percentile in milliseconds (`p` in 0..=100).
    pub fn percentile_ms(&self, p: f64) -> f64 {
        percentile_us(&self.latencies_us, p) as f64 / 1000.0
    }
}

/// The `p`th percentile of unsorted samples (nearest rank).
pub fn percentile_us(samples: &[u64], p: f64) -> u64 {
    if samples.is_empty() {
        return 0;
    }
    let mut v = samples.to_vec();
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: cheap, and the workload need not be cryptographic.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs one closed-loop client per proxy until the deadline, `stop`, or the op budget.
/// `progress` counts completed operations across clients.
pub fn run(
    proxies: Vec<Proxy>,
    opts: &WorkloadOptions,
    progress: &AtomicU64,
    stop: &AtomicBool,
) -> WorkloadReport {
    let start = Instant::now();
    let deadline = start + opts.duration;
    let reports: Vec<WorkloadReport> = std::thread::scope(|s| {
        let handles: Vec<_> = proxies
            .iter()
            .enumerate()
            .map(|(i, p)| s.spawn(move || client_loop(i, p, opts, deadline, progress, stop)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("workload client panicked"))
            .collect()
    });
    let mut total = WorkloadReport {
        elapsed: start.elapsed(),
        ..Default::default()
    };
    for r in reports {
        total.completed += r.completed;
        total.errors += r.errors;
        total.violations.extend(r.violations);
        total.latencies_us.extend(r.latencies_us);
        if total.first_error.is_none() {
            total.first_error = r.first_error;
        }
    }
    total
}

struct Client<'a> {
    proxy: &'a Proxy,
    failover: Option<&'a FailoverProbe>,
    model: BTreeMap<Bytes, Bytes>,
    report: WorkloadReport,
    shared_seen: i64,
}

impl Client<'_> {
    fn call(&mut self, op: &KvOp, unordered: bool) -> Result<KvReply, ClientError> {
        let started = Instant::now();
        let payload = op.encode();
        let result = if unordered {
            self.proxy.invoke_unordered(payload)
        } else {
            self.proxy.invoke_ordered(payload)
        };
        match result {
            Ok(bytes) => {
                // Unordered reads complete without a leader: only ordered requests measure
                // failover.
                if let Some(probe) = self.failover.filter(|_| !unordered) {
                    probe.completed(started, Instant::now());
                }
                self.report
                    .latencies_us
                    .push(started.elapsed().as_micros() as u64);
                self.report.completed += 1;
                KvReply::decode(&bytes).map_err(|e| {
                    self.report
                        .violations
                        .push(format!("undecodable reply to {op:?}: {e}"));
                    ClientError::Closed
                })
            }
            Err(e) => {
                self.report.errors += 1;
                if self.report.first_error.is_none() {
                    self.report.first_error = Some(e.to_string());
                }
                Err(e)
            }
        }
    }

    fn check(&mut self, op: &KvOp, got: KvReply, expected: KvReply) {
        if got != expected {
            self.report
                .violations
                .push(format!("{op:?}: got {got:?}, expected {expected:?}"));
        }
    }

    /// After a failed write the model may be stale: re-read the key with an ordered get.
    fn resync(&mut self, key: &Bytes) -> bool {
        match self.call(&KvOp::Get { key: key.clone() }, false) {
            Ok(KvReply::Get { value }) => {
                match value {
                    Some(v) => self.model.insert(key.clone(), v),
                    None => self.model.remove(key),
                };
                true
            }
            _ => false,
        }
    }
}

fn client_loop(
    index: usize,
    proxy: &Proxy,
    opts: &WorkloadOptions,
    deadline: Instant,
    progress: &AtomicU64,
    stop: &AtomicBool,
) -> WorkloadReport {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((index as u64 + 1) * 0x1000_0001));
    let id = proxy.client_id().0;
    let prefix = format!("c{id:016x}/");
    let keys: Vec<Bytes> = (0..opts.keys_per_client.max(1))
        .map(|j| Bytes::from(format!("{prefix}k{j:02}")))
        .collect();
    let counter = Bytes::from(format!("{prefix}ctr"));
    let shared = Bytes::from_static(b"shared/ctr");
    let mut c = Client {
        proxy,
        failover: opts.failover.as_deref(),
        model: BTreeMap::new(),
        report: WorkloadReport::default(),
        shared_seen: 0,
    };
    let mut ops = 0u64;
    while Instant::now() < deadline
        && !stop.load(Ordering::Relaxed)
        && opts.ops_per_client.is_none_or(|m| ops < m)
    {
        ops += 1;
        let key = keys[rng.below(keys.len() as u64) as usize].clone();
        let roll = rng.below(100);
        let (op, unordered) = match roll {
            0..35 => (
                KvOp::Put {
                    key: key.clone(),
                    value: Bytes::from(format!("v{}", rng.next() % 1_000_000)),
                },
                false,
            ),
            35..55 => (
                KvOp::Get { key: key.clone() },
                opts.unordered_reads && rng.below(2) == 0,
            ),
            55..65 => (KvOp::Delete { key: key.clone() }, false),
            65..75 => {
                let expected = if rng.below(10) < 7 {
                    c.model.get(&key).cloned()
                } else {
                    Some(Bytes::from_static(b"nope"))
                };
                (
                    KvOp::Cas {
                        key: key.clone(),
                        expected,
                        new: Bytes::from(format!("cas{}", rng.next() % 1000)),
                    },
                    false,
                )
            }
            75..85 => (
                KvOp::Incr {
                    key: counter.clone(),
                    delta: 1 + rng.below(5) as i64,
                },
                false,
            ),
            85..95 => (
                KvOp::Incr {
                    key: shared.clone(),
                    delta: 1,
                },
                false,
            ),
            _ => (
                KvOp::Scan {
                    prefix: Bytes::from(prefix.clone()),
                    limit: 100,
                },
                opts.unordered_reads && rng.below(2) == 0,
            ),
        };
        let reply = match c.call(&op, unordered) {
            Ok(r) => r,
            Err(_) => {
                let touched = match &op {
                    KvOp::Incr { key, .. } if *key == shared => None,
                    KvOp::Incr { key, .. }
                    | KvOp::Put { key, .. }
                    | KvOp::Delete { key, .. }
                    | KvOp::Cas { key, .. } => Some(key.clone()),
                    _ => None,
                };
                if let Some(k) = touched
                    && !c.resync(&k)
                {
                    break;
                }
                continue;
            }
        };
        progress.fetch_add(1, Ordering::Relaxed);
        let expected = match &op {
            KvOp::Put { key, value } => KvReply::Put {
                previous: c.model.insert(key.clone(), value.clone()),
            },
            KvOp::Get { key } => KvReply::Get {
                value: c.model.get(key).cloned(),
            },
            KvOp::Delete { key } => KvReply::Delete {
                previous: c.model.remove(key),
            },
            KvOp::Cas { key, expected, new } => {
                let current = c.model.get(key).cloned();
                if current == *expected {
                    c.model.insert(key.clone(), new.clone());
                    KvReply::Cas {
                        applied: true,
                        current: Some(new.clone()),
                    }
                } else {
                    KvReply::Cas {
                        applied: false,
                        current,
                    }
                }
            }
            KvOp::Incr { key, delta } if *key == shared => {
                if let KvReply::Incr { value } = reply {
                    if value <= c.shared_seen {
                        c.report.violations.push(format!(
                            "shared counter went from {} to {value}",
                            c.shared_seen
                        ));
                    }
                    c.shared_seen = value;
                    continue;
                }
                KvReply::Incr {
                    value: c.shared_seen + delta,
                }
            }
            KvOp::Incr { key, delta } => {
                let old = c
                    .model
                    .get(key)
                    .map(|v| i64::from_le_bytes(v[..8].try_into().expect("8-byte counter")))
                    .unwrap_or(0);
                let new = old + delta;
                c.model
                    .insert(key.clone(), Bytes::copy_from_slice(&new.to_le_bytes()));
                KvReply::Incr { value: new }
            }
            KvOp::Scan { limit, .. } => KvReply::Scan {
                pairs: c
                    .model
                    .iter()
                    .take(*limit as usize)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
            KvOp::Redis(_) => unreachable!("the workload sends no Redis commands"),
        };
        c.check(&op, reply, expected);
    }
    c.report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile_us(&v, 50.0), 50);
        assert_eq!(percentile_us(&v, 99.0), 99);
        assert_eq!(percentile_us(&v, 100.0), 100);
        assert_eq!(percentile_us(&[], 50.0), 0);
        assert_eq!(percentile_us(&[7], 99.9), 7);
    }
}
