//! Starting a Redis-protocol gateway in front of a cluster (`tagma gateway`, `tagma demo
//! --gateway`, `tagma bench gateway`): its tagma clients, and the replication facts its
//! `INFO` reports (mode, n, f, the view, the leader from the replicas' metrics).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tagma_client::{ClientOptions, Proxy};
use tagma_core::ValidConfig;
use tagma_crypto::IdentityKey;
use tagma_gateway::{Gateway, GatewayOptions, ReplicationInfo};

/// How to run a gateway.
#[derive(Clone, Debug)]
pub struct GatewaySetup {
    pub listen: SocketAddr,
    pub password: Option<String>,
    pub unordered_reads: bool,
    /// tagma clients (one shard each).
    pub clients: usize,
    pub max_connections: usize,
    /// The client principal whose key the gateway holds.
    pub principal: u32,
}

impl GatewaySetup {
    /// Defaults on `listen`.
    pub fn new(listen: SocketAddr) -> GatewaySetup {
        GatewaySetup {
            listen,
            password: None,
            unordered_reads: false,
            clients: 4,
            max_connections: 10_000,
            principal: tagma_node::cluster_dir::DEFAULT_CLIENT_PRINCIPAL,
        }
    }
}

/// Starts a gateway for the cluster `cfg`, with the client key at `key_path`.
pub fn start(cfg: &ValidConfig, key_path: &Path, setup: &GatewaySetup) -> Result<Gateway> {
    let mut proxies = Vec::new();
    for _ in 0..setup.clients.max(1) {
        let key = IdentityKey::read_file(key_path)?;
        let mut options = ClientOptions::new(setup.principal);
        // Each bundle is one request; enough in flight to keep the cluster's batches full.
        options.outstanding_max = 256;
        let proxy = Proxy::connect(cfg, key, options).context("cannot reach the cluster")?;
        proxies.push(Arc::new(proxy));
    }
    let mut options = GatewayOptions::new(setup.listen, cfg.raw.limits.request_bytes_max);
    options.settings.password = setup.password.clone();
    options.settings.unordered_reads = setup.unordered_reads;
    options.connections_max = setup.max_connections;
    let replication = replication_info(cfg, proxies[0].clone());
    Gateway::start(options, proxies, replication)
        .with_context(|| format!("cannot listen on {}", setup.listen))
}

/// The replication section of `INFO`: mode, n and f from the configuration; the view from
/// the replicas (through `viewer`); the leader from their metrics.
fn replication_info(cfg: &ValidConfig, viewer: Arc<Proxy>) -> ReplicationInfo {
    let metrics: Vec<_> = cfg.replicas.iter().map(|r| r.metrics_addr).collect();
    let (mode, n, f) = (cfg.mode.to_string(), cfg.replicas.len(), cfg.f);
    Arc::new(move || {
        let mut lines = vec![
            ("tagma_mode".to_owned(), mode.clone()),
            ("tagma_replicas".to_owned(), n.to_string()),
            ("tagma_f".to_owned(), f.to_string()),
        ];
        if let Ok(view) = viewer.current_view(Duration::from_secs(1)) {
            lines.push(("tagma_view".to_owned(), view.id.0.to_string()));
            lines.push((
                "tagma_view_members".to_owned(),
                view.members.len().to_string(),
            ));
            lines.push(("tagma_view_f".to_owned(), view.f.to_string()));
        }
        let wait = Duration::from_millis(300);
        let leader = (metrics.iter().flatten()).find_map(|addr| {
            let text = tagma_node::metrics::scrape_within(*addr, wait, wait).ok()?;
            tagma_node::metrics::value(&text, "tagma_leader")
        });
        if let Some(leader) = leader {
            lines.push(("tagma_leader".to_owned(), (leader as u64).to_string()));
        }
        lines
    })
}
