//! A closed-loop load driver: `clients` logical clients, each with one request outstanding
//! at a time, carried by a few proxies.
//!
//! A proxy holds a connection and a reader thread per replica, so one proxy per logical
//! client would measure thread scheduling rather than the replicas. Instead each proxy
//! carries up to [`clients_per_proxy`] logical clients: it is created with `outstanding_max`
//! equal to its share, and one driver thread keeps that many requests in flight (it waits
//! for the oldest, then issues the next one).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_client::{ClientError, Proxy};
use tagma_wire::RequestKind;

/// Logical clients one proxy (and one driver thread) carries, up to [`PROXIES_MAX`] proxies.
pub const CLIENTS_PER_PROXY: usize = 32;
/// The most proxies of a run: beyond `PROXIES_MAX × CLIENTS_PER_PROXY` logical clients,
/// each proxy carries more. Every proxy has a reader thread per replica and a maintenance
/// thread; thousands of them on the machine that runs the replicas measure the scheduler,
/// not the replicas (10,000 clients on 313 proxies: about 1,000 inserts/s; on 64: about
/// 9,500, the same as 1,000 clients).
pub const PROXIES_MAX: usize = 64;

/// Logical clients per proxy for a run of `clients`.
pub fn clients_per_proxy(clients: usize) -> usize {
    CLIENTS_PER_PROXY.max(clients.div_ceil(PROXIES_MAX))
}

/// Splits `clients` logical clients over proxies of at most `per_proxy` each (as evenly as
/// possible). Each entry is one proxy's share; the shares add up to `clients`.
pub fn proxy_shares(clients: usize, per_proxy: usize) -> Vec<usize> {
    let per_proxy = per_proxy.max(1);
    let proxies = clients.div_ceil(per_proxy);
    (0..proxies)
        .map(|i| clients / proxies + usize::from(i < clients % proxies))
        .collect()
}

/// How long to drive the load, and with which requests.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// Load before the measurement window (not recorded).
    pub warmup: Duration,
    /// The measurement window.
    pub duration: Duration,
    /// Ordered, or unordered (read-only) requests.
    pub kind: RequestKind,
}

/// What the coordinating thread reports while the load runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    /// About every 100 ms: seconds since the start, requests completed so far.
    Tick { elapsed_s: f64, completed: u64 },
    /// The warm-up is over: the measurement window starts now.
    MeasureStart,
    /// The measurement window ends now (outstanding requests are then drained).
    MeasureEnd,
}

/// The outcome of one load run.
#[derive(Clone, Debug, Default)]
pub struct LoadResult {
    /// Requests that completed inside the measurement window.
    pub completed: u64,
    /// Failed invocations (whole run).
    pub errors: u64,
    /// Length of the measurement window in seconds.
    pub window_s: f64,
    /// Latency of every request completed inside the window, in microseconds, sorted.
    pub latencies_us: Vec<u64>,
}

impl LoadResult {
    /// Client-side throughput over the measurement window.
    pub fn throughput_ops_s(&self) -> f64 {
        self.completed as f64 / self.window_s.max(1e-9)
    }
}

/// The request the driver thread `driver` sends as its `n`-th request.
pub type RequestGen = dyn Fn(usize, u64) -> Bytes + Sync;

/// Drives `drivers` (each a proxy and its share of logical clients) for warm-up plus
/// duration, calling `observe` from the calling thread as the run goes.
pub fn run(
    drivers: &[(Proxy, usize)],
    opts: &LoadOptions,
    request: &RequestGen,
    mut observe: impl FnMut(Phase),
) -> LoadResult {
    let start = Instant::now();
    let window_start = start + opts.warmup;
    let end = window_start + opts.duration;
    let completed = AtomicU64::new(0);
    let errors = AtomicU64::new(0);
    let mut latencies_us = std::thread::scope(|s| {
        let handles: Vec<_> = drivers
            .iter()
            .enumerate()
            .map(|(i, (proxy, share))| {
                let (completed, errors) = (&completed, &errors);
                s.spawn(move || {
                    drive(
                        proxy,
                        *share,
                        opts.kind,
                        |n| request(i, n),
                        (window_start, end),
                        completed,
                        errors,
                    )
                })
            })
            .collect();
        let mut started = false;
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100).min(end - Instant::now()));
            if !started && Instant::now() >= window_start {
                started = true;
                observe(Phase::MeasureStart);
            }
            observe(Phase::Tick {
                elapsed_s: start.elapsed().as_secs_f64(),
                completed: completed.load(Ordering::Relaxed),
            });
        }
        observe(Phase::MeasureEnd);
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("load driver thread panicked"))
            .collect::<Vec<u64>>()
    });
    latencies_us.sort_unstable();
    LoadResult {
        completed: latencies_us.len() as u64,
        errors: errors.load(Ordering::Relaxed),
        window_s: opts.duration.as_secs_f64(),
        latencies_us,
    }
}

/// One driver thread: keeps `share` requests outstanding on `proxy` until `end`, then
/// drains them. Returns the latencies (µs) of the requests completed in `window`.
fn drive(
    proxy: &Proxy,
    share: usize,
    kind: RequestKind,
    request: impl Fn(u64) -> Bytes,
    (window_start, end): (Instant, Instant),
    completed: &AtomicU64,
    errors: &AtomicU64,
) -> Vec<u64> {
    let mut latencies = Vec::new();
    let mut outstanding = VecDeque::with_capacity(share);
    let mut sent = 0u64;
    let mut issue = |outstanding: &mut VecDeque<_>| {
        let at = Instant::now();
        match proxy.invoke_async(request(sent), kind) {
            Ok(reply) => outstanding.push_back((at, reply)),
            Err(_) => {
                errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        sent += 1;
    };
    for _ in 0..share {
        issue(&mut outstanding);
    }
    while let Some((at, reply)) = outstanding.pop_front() {
        let result: Result<Bytes, ClientError> = reply.wait();
        let done = Instant::now();
        match result {
            Ok(_) => {
                completed.fetch_add(1, Ordering::Relaxed);
                if done >= window_start && done < end {
                    latencies.push((done - at).as_micros() as u64);
                }
            }
            Err(_) => {
                errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        if done < end {
            issue(&mut outstanding);
        }
    }
    latencies
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_split_clients_evenly() {
        assert_eq!(proxy_shares(64, 32), vec![32, 32]);
        assert_eq!(proxy_shares(8, 32), vec![8]);
        assert_eq!(proxy_shares(70, 32), vec![24, 23, 23]);
        assert_eq!(proxy_shares(1, 32), vec![1]);
        assert!(proxy_shares(0, 32).is_empty());
        for clients in 1..200 {
            let s = proxy_shares(clients, 32);
            assert_eq!(s.iter().sum::<usize>(), clients);
            assert!(s.iter().all(|&x| (1..=32).contains(&x)));
        }
    }
}
