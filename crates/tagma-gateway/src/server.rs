//! The gateway process's server: accepts connections (up to `connections_max`), gives each a
//! thread and a shard (connection id modulo the shards), counts what happens, and answers
//! `INFO` from its counters and the cluster's replication facts.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tagma_client::Proxy;
use tagma_resp::{Limits, Reply};

use crate::session::Settings;
use crate::shard::Shard;

/// The Redis version the gateway announces (`INFO`, `HELLO`): the command set it follows.
pub const REDIS_VERSION: &str = "7.2.0";

/// The gateway's settings.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    pub listen: SocketAddr,
    pub settings: Settings,
    /// Most connections at once; one more is told so and closed.
    pub connections_max: usize,
    /// Most commands of one connection awaiting replies.
    pub pipeline_max: usize,
    /// Most entries in one bundle (one ordered request).
    pub bundle_max: usize,
    /// Most entries waiting for each shard's batcher.
    pub queue_max: usize,
    /// The cluster's `limits.request_bytes_max`: no bundle is larger.
    pub request_bytes_max: usize,
    pub limits: Limits,
    /// The most unparsed bytes a connection may hold (one command).
    pub query_buffer_max: usize,
}

impl GatewayOptions {
    /// Defaults around `listen`, for a cluster whose requests take at most
    /// `request_bytes_max` bytes.
    pub fn new(listen: SocketAddr, request_bytes_max: usize) -> GatewayOptions {
        let bulk_max = request_bytes_max.min(64 << 20);
        GatewayOptions {
            listen,
            settings: Settings::default(),
            connections_max: 10_000,
            pipeline_max: 1_024,
            bundle_max: 256,
            queue_max: 8_192,
            request_bytes_max,
            limits: Limits {
                bulk_max,
                ..Limits::default()
            },
            query_buffer_max: bulk_max + (1 << 20),
        }
    }
}

/// The `INFO` lines of the replication section: the cluster as the gateway sees it.
pub type ReplicationInfo = Arc<dyn Fn() -> Vec<(String, String)> + Send + Sync>;

/// What every connection thread reads.
pub struct Shared {
    pub options: GatewayOptions,
    pub stopping: AtomicBool,
    pub commands: AtomicU64,
    connected: AtomicUsize,
    accepted: AtomicU64,
    refused: AtomicU64,
    started: Instant,
    replication: ReplicationInfo,
    port: u16,
}

impl Shared {
    /// The `INFO` text of `sections` (empty, `default` or `all`: every section).
    pub fn info(&self, sections: &[String]) -> String {
        let all = sections.is_empty()
            || sections
                .iter()
                .any(|s| s == "all" || s == "default" || s == "everything");
        let wants = |name: &str| all || sections.iter().any(|s| s == name);
        let mut text = String::new();
        let mut section = |title: &str, lines: Vec<(String, String)>| {
            text.push_str(&format!("# {title}\r\n"));
            for (k, v) in lines {
                text.push_str(&format!("{k}:{v}\r\n"));
            }
            text.push_str("\r\n");
        };
        let kv = |k: &str, v: String| (k.to_owned(), v);
        if wants("server") {
            section(
                "Server",
                vec![
                    kv("redis_version", REDIS_VERSION.to_owned()),
                    kv("tagma_version", env!("CARGO_PKG_VERSION").to_owned()),
                    kv("redis_mode", "standalone".to_owned()),
                    kv("process_id", std::process::id().to_string()),
                    kv("tcp_port", self.port.to_string()),
                    kv(
                        "uptime_in_seconds",
                        self.started.elapsed().as_secs().to_string(),
                    ),
                ],
            );
        }
        if wants("clients") {
            section(
                "Clients",
                vec![
                    kv(
                        "connected_clients",
                        self.connected.load(Ordering::Relaxed).to_string(),
                    ),
                    kv("maxclients", self.options.connections_max.to_string()),
                ],
            );
        }
        if wants("stats") {
            section(
                "Stats",
                vec![
                    kv(
                        "total_connections_received",
                        self.accepted.load(Ordering::Relaxed).to_string(),
                    ),
                    kv(
                        "total_commands_processed",
                        self.commands.load(Ordering::Relaxed).to_string(),
                    ),
                    kv(
                        "rejected_connections",
                        self.refused.load(Ordering::Relaxed).to_string(),
                    ),
                ],
            );
        }
        if wants("replication") {
            let reads = if self.options.settings.unordered_reads {
                "unordered (faster, possibly stale)"
            } else {
                "ordered (linearizable)"
            };
            let mut lines = vec![
                kv("role", "master".to_owned()),
                kv("connected_slaves", "0".to_owned()),
            ];
            lines.extend((self.replication)());
            lines.push(kv("tagma_reads", reads.to_owned()));
            section("Replication", lines);
        }
        text
    }
}

/// A running gateway.
pub struct Gateway {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// Stack of a connection thread: it parses and copies, nothing deep.
const CONNECTION_STACK: usize = 256 << 10;

impl Gateway {
    /// Listens on `options.listen` and serves through `proxies` (one shard each).
    pub fn start(
        options: GatewayOptions,
        proxies: Vec<Arc<Proxy>>,
        replication: ReplicationInfo,
    ) -> std::io::Result<Gateway> {
        assert!(!proxies.is_empty(), "a gateway needs at least one proxy");
        let listener = TcpListener::bind(options.listen)?;
        let addr = listener.local_addr()?;
        let shards: Vec<Arc<Shard>> = (proxies.into_iter().enumerate())
            .map(|(i, proxy)| {
                Shard::start(
                    i,
                    proxy,
                    options.bundle_max,
                    options.request_bytes_max,
                    options.queue_max,
                )
                .map(Arc::new)
            })
            .collect::<std::io::Result<_>>()?;
        let shared = Arc::new(Shared {
            options,
            stopping: AtomicBool::new(false),
            commands: AtomicU64::new(0),
            connected: AtomicUsize::new(0),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            started: Instant::now(),
            replication,
            port: addr.port(),
        });
        let accepting = shared.clone();
        thread::Builder::new()
            .name("gw-accept".to_owned())
            .spawn(move || accept(&listener, &accepting, &shards))?;
        Ok(Gateway { addr, shared })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting; open connections close within a second.
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>, shards: &[Arc<Shard>]) {
    let mut next_id: u64 = 0;
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut stream) = stream else { continue };
        if shared.connected.load(Ordering::Relaxed) >= shared.options.connections_max {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            use std::io::Write;
            let _ = stream.write_all(&Reply::error("ERR max number of clients reached").to_bytes());
            continue;
        }
        next_id += 1;
        let id = next_id;
        shared.connected.fetch_add(1, Ordering::Relaxed);
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        let shard = shards[(id as usize) % shards.len()].clone();
        let serving = shared.clone();
        let spawned = thread::Builder::new()
            .name(format!("gw-conn-{id}"))
            .stack_size(CONNECTION_STACK)
            .spawn(move || {
                crate::connection::serve(stream, &serving, &shard, id);
                serving.connected.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            shared.connected.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!("no thread for connection {id}: refused");
        }
    }
}
