//! Replica metrics: lock-free counters on the hot path, rendered in the Prometheus text
//! format by a tiny HTTP endpoint (`GET /metrics`) when `metrics_addr` is configured.
//!
//! Rejections are counted per typed reason (`tagma_rejections_total{reason="bad_mac"}`) and
//! logged once per reason at `warn`, every later occurrence at `debug`, so a hostile peer
//! cannot flood the log.

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tagma_wire::ReplicaId;

/// Counters shared by every thread of a replica.
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests_received: AtomicU64,
    pub unordered_executed: AtomicU64,
    pub decided_instances: AtomicU64,
    pub executed_requests: AtomicU64,
    pub replies_sent: AtomicU64,
    pub replies_resent: AtomicU64,
    pub replies_dropped: AtomicU64,
    pub peer_messages_dropped: AtomicU64,
    pub client_connections: AtomicU64,
    pub peer_connections: AtomicU64,
    /// Installed regency and its leader (gauges).
    pub regency: AtomicU64,
    pub leader: AtomicU64,
    /// Installed view id (gauge).
    pub view: AtomicU64,
    /// 1 once a view without this replica was installed (gauge).
    pub left_view: AtomicU64,
    /// Durability: log flushes (group commits), records logged, checkpoints written, and the
    /// instances recovered from disk at start.
    pub log_flushes: AtomicU64,
    /// Vote records written and flushed: before an ACCEPT or an installed regency's STOPDATA
    /// (both wait for it), or an unflushed one once the consensus thread is idle.
    pub vote_flushes: AtomicU64,
    /// Time spent writing and flushing those votes, and writing out and flushing the log (µs):
    /// with the counts, the mean latency each adds (the ACCEPT waits for the first, the
    /// leader's next proposal for the second).
    pub vote_flush_us: AtomicU64,
    pub log_flush_us: AtomicU64,
    pub log_records: AtomicU64,
    pub checkpoints: AtomicU64,
    pub recovered_instances: AtomicU64,
    /// 1 when this replica found its durable state damaged at start and discarded it.
    pub state_discarded: AtomicU64,
    /// State transfer: states installed, chunk bytes served and fetched, and the duration of
    /// the last install (validation and replay, ms).
    pub state_transfers: AtomicU64,
    /// States installed because the state vote after a restart contradicted the recovered
    /// one (a disk that returned wrong content under valid checksums).
    pub state_repaired: AtomicU64,
    pub state_bytes_served: AtomicU64,
    pub state_bytes_fetched: AtomicU64,
    pub state_install_ms: AtomicU64,
    pub state_transfer_ms: AtomicU64,
    /// Instances executed (the next instance to execute), whatever brought the state there.
    pub executed_instances: AtomicU64,
    /// Peers' requests answered in part or not at all for their answer budget
    /// (`CoreStats::answers_refused`).
    pub answers_refused: AtomicU64,
    /// 1 while this replica's state is unconfirmed (`CoreStats::state_unconfirmed`): the
    /// state vote after its restart was inconclusive and its peers' checkpoints have not yet
    /// confirmed or contradicted it.
    pub state_unconfirmed: AtomicU64,
    /// Later state checks that confirmed, or contradicted (and repaired), the state.
    pub state_checks_confirmed: AtomicU64,
    pub state_checks_contradicted: AtomicU64,
    /// Time-only batches this replica proposed as leader, and the times it suspected the
    /// leader because the agreed time stood still past the service's due time.
    pub time_batches_proposed: AtomicU64,
    pub due_suspicions: AtomicU64,
    /// Proposals held as leader for their batches to fill: ended by enough requests, or
    /// by `batch.fill_wait_ms`.
    pub batch_holds_filled: AtomicU64,
    pub batch_holds_expired: AtomicU64,
    rejections: Mutex<BTreeMap<&'static str, u64>>,
}

/// A gauge of the process itself (the allocator's heap, say): its name, help and value.
pub type ProcessGauge = (&'static str, &'static str, u64);

/// Reads the process gauges when metrics are rendered; set once by the program, which knows
/// its allocator (see [`set_process_gauges`]).
static PROCESS_GAUGES: std::sync::OnceLock<fn() -> Vec<ProcessGauge>> = std::sync::OnceLock::new();

/// Names the function whose gauges every replica's metrics carry besides its counters; the
/// first call wins.
pub fn set_process_gauges(read: fn() -> Vec<ProcessGauge>) {
    let _ = PROCESS_GAUGES.set(read);
}

impl Metrics {
    /// Counts a rejection; returns true the first time this reason is seen (log it loudly).
    pub fn reject(&self, reason: &'static str) -> bool {
        let mut map = self.rejections.lock().unwrap_or_else(|e| e.into_inner());
        let count = map.entry(reason).or_insert(0);
        *count += 1;
        *count == 1
    }

    pub fn rejections(&self, reason: &str) -> u64 {
        let map = self.rejections.lock().unwrap_or_else(|e| e.into_inner());
        map.get(reason).copied().unwrap_or(0)
    }

    /// The Prometheus text exposition.
    pub fn render(&self, replica: ReplicaId) -> String {
        let mut s = String::new();
        let r = replica.0;
        let counters: [(&str, &str, &AtomicU64); 37] = [
            (
                "tagma_requests_received_total",
                "Client requests received",
                &self.requests_received,
            ),
            (
                "tagma_unordered_executed_total",
                "Unordered requests executed",
                &self.unordered_executed,
            ),
            (
                "tagma_decided_instances_total",
                "Consensus instances decided",
                &self.decided_instances,
            ),
            (
                "tagma_executed_requests_total",
                "Ordered requests executed",
                &self.executed_requests,
            ),
            (
                "tagma_replies_sent_total",
                "Replies sent to clients",
                &self.replies_sent,
            ),
            (
                "tagma_replies_resent_total",
                "Cached replies resent for retransmitted requests",
                &self.replies_resent,
            ),
            (
                "tagma_replies_dropped_total",
                "Replies dropped (client gone or its queue full)",
                &self.replies_dropped,
            ),
            (
                "tagma_peer_messages_dropped_total",
                "Consensus messages dropped (peer queue full)",
                &self.peer_messages_dropped,
            ),
            (
                "tagma_client_connections",
                "Open client connections",
                &self.client_connections,
            ),
            (
                "tagma_peer_connections",
                "Open inbound replica connections",
                &self.peer_connections,
            ),
            (
                "tagma_regency",
                "Installed regency (leader changes so far)",
                &self.regency,
            ),
            (
                "tagma_leader",
                "Replica id of the current leader",
                &self.leader,
            ),
            (
                "tagma_view",
                "Installed view id (view changes so far)",
                &self.view,
            ),
            (
                "tagma_left_view",
                "1 once a view without this replica was installed",
                &self.left_view,
            ),
            (
                "tagma_log_flushes_total",
                "Log flushes (one fdatasync per group of decided batches)",
                &self.log_flushes,
            ),
            (
                "tagma_vote_flushes_total",
                "Vote records flushed to disk (before an ACCEPT or a regency's STOPDATA, or once idle)",
                &self.vote_flushes,
            ),
            (
                "tagma_vote_flush_microseconds_total",
                "Time spent writing and flushing those vote records, µs (divide by tagma_vote_flushes_total for the mean)",
                &self.vote_flush_us,
            ),
            (
                "tagma_log_flush_microseconds_total",
                "Time spent writing out and flushing the log, µs (divide by tagma_log_flushes_total for the mean)",
                &self.log_flush_us,
            ),
            (
                "tagma_log_records_total",
                "Decided instances logged",
                &self.log_records,
            ),
            (
                "tagma_checkpoints_total",
                "Checkpoints written",
                &self.checkpoints,
            ),
            (
                "tagma_recovered_instances",
                "Instances recovered from the local checkpoint and log at start",
                &self.recovered_instances,
            ),
            (
                "tagma_state_discarded",
                "1 when the durable state was found damaged at start and moved aside",
                &self.state_discarded,
            ),
            (
                "tagma_state_transfers_total",
                "States installed by state transfer",
                &self.state_transfers,
            ),
            (
                "tagma_state_repaired_total",
                "Recovered states the state vote after a restart contradicted, replaced by state transfer",
                &self.state_repaired,
            ),
            (
                "tagma_state_bytes_served_total",
                "Checkpoint bytes sent to replicas fetching state",
                &self.state_bytes_served,
            ),
            (
                "tagma_state_bytes_fetched_total",
                "Checkpoint bytes received by state transfer",
                &self.state_bytes_fetched,
            ),
            (
                "tagma_state_install_ms",
                "Duration of the last state install (validation and replay), ms",
                &self.state_install_ms,
            ),
            (
                "tagma_state_transfer_ms",
                "Duration of the last state transfer, from detecting the lag to the state installed, ms",
                &self.state_transfer_ms,
            ),
            (
                "tagma_executed_instances",
                "Consensus instances executed: the position of the replica's state",
                &self.executed_instances,
            ),
            (
                "tagma_answers_refused_total",
                "Peers' requests (positions, decisions, log runs, state offers, chunks) answered in part or not at all because the peer's answer budget for the period was spent",
                &self.answers_refused,
            ),
            (
                "tagma_state_unconfirmed",
                "1 while the state is unconfirmed: the state vote after a restart was inconclusive and f+1 peers' checkpoints have not yet confirmed or contradicted it",
                &self.state_unconfirmed,
            ),
            (
                "tagma_state_checks_confirmed_total",
                "Later state checks that f+1 peers' checkpoints confirmed",
                &self.state_checks_confirmed,
            ),
            (
                "tagma_state_checks_contradicted_total",
                "Later state checks that f+1 peers' checkpoints contradicted (the state was then fetched from them)",
                &self.state_checks_contradicted,
            ),
            (
                "tagma_time_batches_proposed_total",
                "Time-only batches proposed as leader (no requests waiting, the service's due time reached)",
                &self.time_batches_proposed,
            ),
            (
                "tagma_due_suspicions_total",
                "Times this replica suspected the leader because the agreed time stood still past the service's due time",
                &self.due_suspicions,
            ),
            (
                "tagma_batch_holds_filled_total",
                "Proposals held as leader until enough requests arrived to fill the batch (adaptive batching)",
                &self.batch_holds_filled,
            ),
            (
                "tagma_batch_holds_expired_total",
                "Proposals held as leader for the batch to fill that went at batch.fill_wait_ms with what had arrived",
                &self.batch_holds_expired,
            ),
        ];
        for (name, help, v) in counters {
            let kind = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            s.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{replica=\"{r}\"}} {}\n",
                v.load(Ordering::Relaxed)
            ));
        }
        for (name, help, v) in PROCESS_GAUGES.get().map(|read| read()).unwrap_or_default() {
            s.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{replica=\"{r}\"}} {v}\n"
            ));
        }
        s.push_str("# HELP tagma_rejections_total Inputs rejected, by typed reason\n# TYPE tagma_rejections_total counter\n");
        let map = self.rejections.lock().unwrap_or_else(|e| e.into_inner());
        for (reason, v) in map.iter() {
            s.push_str(&format!(
                "tagma_rejections_total{{replica=\"{r}\",reason=\"{reason}\"}} {v}\n"
            ));
        }
        s
    }
}

/// Connections the metrics endpoint serves at once; a new one beyond this closes the
/// oldest still open, so idle connections cannot lock scrapers out.
pub const METRICS_CONNECTIONS_MAX: usize = 32;
/// How long the endpoint waits for a connection's request.
const METRICS_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The connections being served, oldest first, each with a handle that can shut it down.
#[derive(Default)]
struct Open {
    next_id: u64,
    conns: std::collections::VecDeque<(u64, TcpStream)>,
}

/// Serves `GET /metrics` on `addr` from background threads: one accepts, and each
/// connection is answered on a thread of its own, at most [`METRICS_CONNECTIONS_MAX`] at
/// once (a new connection beyond that shuts the oldest down) and each for at most
/// `METRICS_READ_TIMEOUT` of waiting for its request.
pub fn serve(
    addr: SocketAddr,
    replica: ReplicaId,
    metrics: std::sync::Arc<Metrics>,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr)?;
    let open = std::sync::Arc::new(Mutex::new(Open::default()));
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Ok(handle) = stream.try_clone() else {
                    continue;
                };
                let id = {
                    let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
                    while open.conns.len() >= METRICS_CONNECTIONS_MAX {
                        if let Some((_, oldest)) = open.conns.pop_front() {
                            let _ = oldest.shutdown(std::net::Shutdown::Both);
                        }
                    }
                    open.next_id += 1;
                    let id = open.next_id;
                    open.conns.push_back((id, handle));
                    id
                };
                let (metrics, open) = (metrics.clone(), open.clone());
                let answer = move || {
                    answer(stream, replica, &metrics);
                    let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
                    open.conns.retain(|(other, _)| *other != id);
                };
                // A connection that gets no thread is dropped (closed).
                let _ = std::thread::Builder::new()
                    .name("metrics-conn".into())
                    .stack_size(64 << 10)
                    .spawn(answer);
            }
        })?;
    Ok(())
}

/// Reads one request from `stream` and answers it.
fn answer(mut stream: TcpStream, replica: ReplicaId, metrics: &Metrics) {
    let _ = stream.set_read_timeout(Some(METRICS_READ_TIMEOUT));
    let mut buf = [0u8; 1024];
    let n = stream.read(&mut buf).unwrap_or(0);
    if n == 0 {
        return;
    }
    let ok = buf[..n].starts_with(b"GET /metrics");
    let (status, body) = if ok {
        ("200 OK", metrics.render(replica))
    } else {
        ("404 Not Found", "try GET /metrics\n".to_string())
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Fetches a replica's metrics text (used by tests and the CLI).
pub fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    scrape_within(addr, Duration::from_secs(2), Duration::from_secs(5))
}

/// [`scrape`], waiting at most `connect` for the connection and `read` for each read (a
/// stopped process's socket accepts connections but never answers).
pub fn scrape_within(
    addr: SocketAddr,
    connect: Duration,
    read: Duration,
) -> std::io::Result<String> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, connect)?;
    stream.set_read_timeout(Some(read))?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: tagma\r\n\r\n")?;
    let mut out = String::new();
    stream.read_to_string(&mut out)?;
    Ok(out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

/// The value of metric `name` (the first sample, whatever its labels) in a scraped text.
pub fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Reads `tagma_rejections_total{..reason="R"}` out of a scraped text.
pub fn rejection_count(text: &str, reason: &str) -> u64 {
    let needle = format!("reason=\"{reason}\"}} ");
    text.lines()
        .filter(|l| l.starts_with("tagma_rejections_total") && l.contains(&needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 500 idle connections (opened, never sending a request) must not keep a scraper
    /// out: `GET /metrics` still answers at once.
    #[test]
    fn idle_connections_do_not_block_the_endpoint() {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let metrics = std::sync::Arc::new(Metrics::default());
        metrics.requests_received.fetch_add(7, Ordering::Relaxed);
        serve(addr, ReplicaId(3), metrics).unwrap();
        let idle: Vec<std::net::TcpStream> = (0..500)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let started = std::time::Instant::now();
        let text = scrape(addr).unwrap();
        let took = started.elapsed();
        assert_eq!(value(&text, "tagma_requests_received_total"), Some(7.0));
        assert!(
            took < Duration::from_millis(1500),
            "GET /metrics took {took:?} behind {} idle connections",
            idle.len()
        );
    }

    #[test]
    fn rejections_are_counted_and_rendered() {
        let m = Metrics::default();
        assert!(m.reject("bad_mac"));
        assert!(!m.reject("bad_mac"));
        m.requests_received.fetch_add(3, Ordering::Relaxed);
        let text = m.render(ReplicaId(2));
        assert!(
            text.contains("tagma_requests_received_total{replica=\"2\"} 3"),
            "{text}"
        );
        assert_eq!(rejection_count(&text, "bad_mac"), 2);
        assert_eq!(rejection_count(&text, "unknown_key"), 0);
        assert_eq!(value(&text, "tagma_requests_received_total"), Some(3.0));
        assert_eq!(
            value(&text, "tagma_requests_received"),
            None,
            "whole names only"
        );
        assert_eq!(value(&text, "tagma_regency"), Some(0.0));
        assert_eq!(value(&text, "tagma_nonexistent"), None);
    }

    #[test]
    fn the_process_gauges_are_rendered_with_the_counters() {
        set_process_gauges(|| vec![("tagma_heap_allocated_bytes", "Heap", 4096)]);
        let text = Metrics::default().render(ReplicaId(1));
        assert!(
            text.contains("# TYPE tagma_heap_allocated_bytes gauge\ntagma_heap_allocated_bytes{replica=\"1\"} 4096\n"),
            "{text}"
        );
    }
}
