//! The cluster configuration (`tagma.toml`): every key, its documented default, and
//! validation whose errors name the key and the fix.
//!
//! The file is parsed from a string here (no IO); the node and the CLI read the file.
//! [`Config::documented_toml`] renders a complete file with a comment for every key: that is
//! what `tagma init` writes, so the defaults are documented where users look.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use tagma_wire::{PublicKey, ReplicaId};

use crate::quorum::Mode;

/// A configuration problem, with the key at fault and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration key `{key}`: {problem} — fix: {fix}")]
pub struct ConfigError {
    pub key: String,
    pub problem: String,
    pub fix: String,
}

fn err(key: impl Into<String>, problem: impl Into<String>, fix: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub cluster: ClusterSection,
    #[serde(default, rename = "replica")]
    pub replicas: Vec<ReplicaEntry>,
    #[serde(default, rename = "client")]
    pub clients: Vec<ClientEntry>,
    #[serde(default)]
    pub admin: Option<AdminEntry>,
    #[serde(default)]
    pub batch: BatchSection,
    #[serde(default)]
    pub timeouts: TimeoutSection,
    #[serde(default)]
    pub limits: LimitSection,
    #[serde(default)]
    pub storage: StorageSection,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    /// `"bft"` (Byzantine faults, n ≥ 3f+1) or `"cft"` (crash faults only, n ≥ 2f+1).
    pub mode: Mode,
    /// Faulty replicas tolerated.
    pub f: u32,
    /// Require an Ed25519 client signature on every ordered request.
    pub signed_requests: bool,
    /// Accept unordered (read-only) requests. Clients then need ⌊(n+f)/2⌋+1 matching replies
    /// (⌊n/2⌋+1 in CFT) for every request, which keeps unordered reads linearizable.
    pub readonly_requests: bool,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            mode: Mode::Bft,
            f: 1,
            signed_requests: false,
            readonly_requests: true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaEntry {
    pub id: u32,
    /// `host:port` the replica listens on for replicas and clients.
    pub addr: String,
    /// Hex Ed25519 public key.
    pub public_key: String,
    /// Optional `host:port` for the Prometheus metrics endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_addr: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientEntry {
    /// Client principal id (the high 32 bits of its client ids).
    pub id: u32,
    pub public_key: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminEntry {
    pub public_key: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchSection {
    /// Most requests in one consensus instance.
    pub batch_size_max: usize,
    /// Most encoded bytes of one batch.
    pub batch_bytes_max: usize,
}

impl Default for BatchSection {
    fn default() -> Self {
        BatchSection {
            batch_size_max: 1024,
            batch_bytes_max: 256 << 10,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutSection {
    /// Replica request timer: first expiry forwards a pending request, second suspects the
    /// leader.
    pub request_timeout_ms: u64,
    /// Client proxy: retransmit a request not answered within this time.
    pub client_retransmit_ms: u64,
    /// Client proxy: give up on an invocation after this time.
    pub client_invoke_timeout_ms: u64,
    /// TCP connect timeout.
    pub connect_timeout_ms: u64,
    /// Whole authenticated handshake.
    pub handshake_timeout_ms: u64,
    /// Longest delay between reconnection attempts to a peer (the first retries come
    /// sooner: 2 ms, doubling up to this).
    pub reconnect_delay_ms: u64,
}

impl Default for TimeoutSection {
    fn default() -> Self {
        TimeoutSection {
            request_timeout_ms: 1000,
            client_retransmit_ms: 1000,
            client_invoke_timeout_ms: 30_000,
            connect_timeout_ms: 1000,
            handshake_timeout_ms: 2000,
            reconnect_delay_ms: 100,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSection {
    /// Largest frame body on any connection.
    pub frame_bytes_max: usize,
    /// Largest request payload.
    pub request_bytes_max: usize,
    /// Flow control: requests of one client waiting to be ordered; more are dropped.
    pub client_pending_max: usize,
    /// Requests of all clients waiting to be ordered; more are dropped.
    pub pending_requests_max: usize,
    /// Client sessions (per-client sequence state) kept; the least recently active is evicted.
    pub clients_max: usize,
    /// Replies cached per client for retransmissions.
    pub reply_cache_per_client: usize,
    /// Consensus messages for future instances kept until their instance starts.
    pub future_messages_max: usize,
    /// Events waiting for the consensus thread.
    pub consensus_queue_max: usize,
    /// Decided batches and unordered requests waiting for the execution thread.
    pub execution_queue_max: usize,
    /// Frames waiting to be written on one connection.
    pub connection_queue_max: usize,
    /// Connected clients per replica.
    pub connections_max: usize,
    /// Threads that verify client signatures (when `signed_requests`).
    pub signature_threads: usize,
    /// Decided instances kept in memory, with their proofs, for replicas that fell behind.
    pub decisions_kept: usize,
}

impl Default for LimitSection {
    fn default() -> Self {
        LimitSection {
            frame_bytes_max: 8 << 20,
            request_bytes_max: 64 << 10,
            client_pending_max: 1000,
            pending_requests_max: 100_000,
            clients_max: 65_536,
            reply_cache_per_client: 32,
            future_messages_max: 10_000,
            consensus_queue_max: 65_536,
            execution_queue_max: 1024,
            connection_queue_max: 16_384,
            connections_max: 4096,
            signature_threads: 2,
            decisions_kept: 256,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageSection {
    /// Data directory, relative to the cluster directory; replica `i` uses `<data_dir>/replica-<i>`.
    pub data_dir: String,
    /// `none`: state lives in memory only (a replica that restarts rejoins empty and catches
    /// up from the others). `fsync`: every replica forces its votes to disk before it
    /// ACCEPTs, decided batches are logged (in parallel with execution) and checkpoints are
    /// taken, so a reply a client received survives the crash of every replica.
    pub durability: Durability,
    /// Instances between two checkpoints of one replica; replicas checkpoint at staggered
    /// points of the period. At least the number of replicas.
    pub checkpoint_period: u64,
    /// Size each log segment file is preallocated to.
    pub log_segment_bytes: u64,
    /// The largest checkpoint a replica accepts by state transfer (a faulty replica cannot
    /// make it fetch more).
    pub state_bytes_max: u64,
    /// BFT with `durability = "fsync"`: a restarted replica checks its recovered state
    /// against its peers' before ordering (DDS's hash vote; each replica hashes its state
    /// once per restart), and fetches theirs if f+1 contradict it. Catches a disk whose wrong
    /// content passes its checksums.
    pub hash_vote: bool,
}

impl Default for StorageSection {
    fn default() -> Self {
        StorageSection {
            data_dir: "data".into(),
            durability: Durability::None,
            checkpoint_period: 1000,
            log_segment_bytes: 64 << 20,
            state_bytes_max: 16 << 30,
            hash_vote: true,
        }
    }
}

/// Whether decided batches are made durable (`[storage] durability`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    #[default]
    None,
    Fsync,
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Durability::None => "none",
            Durability::Fsync => "fsync",
        })
    }
}

/// A replica as the rest of the system sees it, after validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaInfo {
    pub id: ReplicaId,
    pub addr: SocketAddr,
    pub public_key: PublicKey,
    pub metrics_addr: Option<SocketAddr>,
}

/// A validated configuration: parsed keys and addresses, replicas sorted by id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidConfig {
    pub raw: Config,
    pub mode: Mode,
    pub f: u32,
    /// Sorted by id.
    pub replicas: Vec<ReplicaInfo>,
    /// (principal, key), sorted by principal.
    pub clients: Vec<(u32, PublicKey)>,
    pub admin: Option<PublicKey>,
}

impl ValidConfig {
    pub fn n(&self) -> usize {
        self.replicas.len()
    }
    pub fn replica(&self, id: ReplicaId) -> Option<&ReplicaInfo> {
        self.replicas.iter().find(|r| r.id == id)
    }
    pub fn client_key(&self, principal: u32) -> Option<PublicKey> {
        self.clients
            .iter()
            .find(|(p, _)| *p == principal)
            .map(|(_, k)| *k)
    }
    pub fn members(&self) -> Vec<ReplicaId> {
        self.replicas.iter().map(|r| r.id).collect()
    }
    /// This configuration with `view`'s replica set and f (the configured metrics addresses
    /// kept): how a client reaches members added after the configuration was written.
    /// Members whose address is not IP:PORT are left out.
    pub fn with_view(&self, view: &tagma_wire::View) -> ValidConfig {
        let mut cfg = self.clone();
        cfg.f = view.f;
        cfg.replicas = view
            .members
            .iter()
            .filter_map(|m| {
                Some(ReplicaInfo {
                    id: m.id,
                    addr: m.addr.parse().ok()?,
                    public_key: m.key,
                    metrics_addr: self.replica(m.id).and_then(|r| r.metrics_addr),
                })
            })
            .collect();
        cfg
    }
    /// View 0: the configured replicas, with their addresses and keys, and f.
    pub fn initial_view(&self) -> tagma_wire::View {
        tagma_wire::View {
            id: tagma_wire::ViewId(0),
            f: self.f,
            members: self
                .replicas
                .iter()
                .map(|r| tagma_wire::ViewMember {
                    id: r.id,
                    addr: r.addr.to_string(),
                    key: r.public_key,
                })
                .collect(),
        }
    }
    pub fn quorums(&self) -> crate::quorum::Quorums {
        crate::quorum::Quorums::new(self.mode, self.n(), self.f as usize)
    }
}

/// Bytes a batch needs beyond its requests' payloads and the frame headers; used to check
/// that the limits fit together.
pub const FRAME_OVERHEAD_BYTES: usize = 256;

impl Config {
    /// Parses and validates a `tagma.toml`.
    pub fn from_toml(text: &str) -> Result<ValidConfig, ConfigError> {
        let raw: Config = toml::from_str(text).map_err(|e| {
            let span = e
                .span()
                .map(|s| format!(" (at byte {})", s.start))
                .unwrap_or_default();
            err(
                "<file>",
                format!("{}{span}", e.message()),
                "correct the TOML syntax or key name; `tagma init` writes a documented example",
            )
        })?;
        raw.validate()
    }

    /// Checks every key and derives the [`ValidConfig`].
    pub fn validate(self) -> Result<ValidConfig, ConfigError> {
        let c = &self.cluster;
        let n = self.replicas.len();
        if n == 0 {
            return Err(err(
                "replica",
                "no [[replica]] entries",
                "add one [[replica]] table per replica (id, addr, public_key)",
            ));
        }
        let needed = c.mode.replicas_needed(c.f as usize);
        // f = 0 is allowed: a single server (the benchmarks' unreplicated baseline) or a
        // development cluster that tolerates no fault.
        if n < needed {
            return Err(err(
                "cluster.f",
                format!(
                    "{n} replicas cannot tolerate f = {} in {} mode (needs n ≥ {})",
                    c.f, c.mode, needed
                ),
                format!("add {} [[replica]] entries or lower f", needed - n),
            ));
        }
        let mut ids = BTreeSet::new();
        let mut addrs = BTreeSet::new();
        let mut replicas = Vec::with_capacity(n);
        for (i, r) in self.replicas.iter().enumerate() {
            let key = |k: &str| format!("replica[{i}].{k}");
            if !ids.insert(r.id) {
                return Err(err(
                    key("id"),
                    format!("replica id {} appears twice", r.id),
                    "give every replica a distinct id",
                ));
            }
            let addr: SocketAddr = r.addr.parse().map_err(|_| {
                err(
                    key("addr"),
                    format!("`{}` is not a host:port socket address", r.addr),
                    "write it as e.g. \"127.0.0.1:7100\"",
                )
            })?;
            if !addrs.insert(addr) {
                return Err(err(
                    key("addr"),
                    format!("address {addr} is used twice"),
                    "give every replica its own port",
                ));
            }
            let public_key = parse_key(&key("public_key"), &r.public_key)?;
            let metrics_addr = match &r.metrics_addr {
                None => None,
                Some(m) => Some(m.parse().map_err(|_| {
                    err(
                        key("metrics_addr"),
                        format!("`{m}` is not a host:port socket address"),
                        "write it as e.g. \"127.0.0.1:9100\" or remove the key",
                    )
                })?),
            };
            replicas.push(ReplicaInfo {
                id: ReplicaId(r.id),
                addr,
                public_key,
                metrics_addr,
            });
        }
        replicas.sort_by_key(|r| r.id);
        let mut clients = Vec::with_capacity(self.clients.len());
        let mut principals = BTreeSet::new();
        for (i, cl) in self.clients.iter().enumerate() {
            if !principals.insert(cl.id) {
                return Err(err(
                    format!("client[{i}].id"),
                    format!("client id {} appears twice", cl.id),
                    "give every client key a distinct id",
                ));
            }
            clients.push((
                cl.id,
                parse_key(&format!("client[{i}].public_key"), &cl.public_key)?,
            ));
        }
        clients.sort_by_key(|(p, _)| *p);
        let admin = match &self.admin {
            None => None,
            Some(a) => Some(parse_key("admin.public_key", &a.public_key)?),
        };
        self.check_limits()?;
        // The largest message is a leader change's SYNC: a fresh batch, the last decided batch,
        // and n−f collects of at most 2 written batches each. It must fit in a frame, or the
        // leader change could never complete.
        let sync_bytes = (2 + 2 * (n - c.f as usize)) * self.batch.batch_bytes_max + 64 * 1024;
        if sync_bytes > self.limits.frame_bytes_max {
            return Err(err(
                "limits.frame_bytes_max",
                format!(
                    "a leader change's SYNC can reach {sync_bytes} bytes with {n} replicas and batch_bytes_max = {}, more than frame_bytes_max = {}",
                    self.batch.batch_bytes_max, self.limits.frame_bytes_max
                ),
                format!(
                    "raise frame_bytes_max to at least {sync_bytes} or lower batch.batch_bytes_max"
                ),
            ));
        }
        Ok(ValidConfig {
            mode: c.mode,
            f: c.f,
            replicas,
            clients,
            admin,
            raw: self,
        })
    }

    fn check_limits(&self) -> Result<(), ConfigError> {
        let b = &self.batch;
        let l = &self.limits;
        let t = &self.timeouts;
        let positive: [(&str, u64); 19] = [
            ("batch.batch_size_max", b.batch_size_max as u64),
            ("batch.batch_bytes_max", b.batch_bytes_max as u64),
            ("limits.frame_bytes_max", l.frame_bytes_max as u64),
            ("limits.request_bytes_max", l.request_bytes_max as u64),
            ("limits.client_pending_max", l.client_pending_max as u64),
            ("limits.pending_requests_max", l.pending_requests_max as u64),
            ("limits.clients_max", l.clients_max as u64),
            (
                "limits.reply_cache_per_client",
                l.reply_cache_per_client as u64,
            ),
            ("limits.future_messages_max", l.future_messages_max as u64),
            ("limits.consensus_queue_max", l.consensus_queue_max as u64),
            ("limits.execution_queue_max", l.execution_queue_max as u64),
            ("limits.connection_queue_max", l.connection_queue_max as u64),
            ("limits.connections_max", l.connections_max as u64),
            ("limits.signature_threads", l.signature_threads as u64),
            ("limits.decisions_kept", l.decisions_kept as u64),
            ("timeouts.request_timeout_ms", t.request_timeout_ms),
            ("timeouts.client_retransmit_ms", t.client_retransmit_ms),
            (
                "timeouts.client_invoke_timeout_ms",
                t.client_invoke_timeout_ms,
            ),
            ("timeouts.handshake_timeout_ms", t.handshake_timeout_ms),
        ];
        for (key, v) in positive {
            if v == 0 {
                return Err(err(
                    key,
                    "must be greater than 0",
                    "remove the key to use the default, or set a positive value",
                ));
            }
        }
        let st = &self.storage;
        if st.checkpoint_period < self.replicas.len() as u64 {
            return Err(err(
                "storage.checkpoint_period",
                format!(
                    "{} is less than the {} replicas (each checkpoints at its own point of the period)",
                    st.checkpoint_period,
                    self.replicas.len()
                ),
                "remove the key to use the default (1000), or set at least the number of replicas",
            ));
        }
        if st.state_bytes_max == 0 {
            return Err(err(
                "storage.state_bytes_max",
                "must be greater than 0",
                "remove the key to use the default (16 GiB), or set a positive value",
            ));
        }
        if st.log_segment_bytes < 4096 {
            return Err(err(
                "storage.log_segment_bytes",
                format!(
                    "{} bytes is too small for a log segment",
                    st.log_segment_bytes
                ),
                "remove the key to use the default (64 MiB), or set at least 4096",
            ));
        }
        if t.connect_timeout_ms == 0 {
            return Err(err(
                "timeouts.connect_timeout_ms",
                "must be greater than 0",
                "remove the key to use the default (1000)",
            ));
        }
        if b.batch_bytes_max + FRAME_OVERHEAD_BYTES > l.frame_bytes_max {
            return Err(err(
                "batch.batch_bytes_max",
                format!(
                    "a batch of {} bytes does not fit in a frame of limits.frame_bytes_max = {}",
                    b.batch_bytes_max, l.frame_bytes_max
                ),
                format!(
                    "lower batch_bytes_max or raise frame_bytes_max to at least {}",
                    b.batch_bytes_max + FRAME_OVERHEAD_BYTES
                ),
            ));
        }
        if l.request_bytes_max + FRAME_OVERHEAD_BYTES > b.batch_bytes_max {
            return Err(err(
                "limits.request_bytes_max",
                format!(
                    "a request of {} bytes could never fit in a batch of batch.batch_bytes_max = {}",
                    l.request_bytes_max, b.batch_bytes_max
                ),
                "lower request_bytes_max or raise batch_bytes_max",
            ));
        }
        if l.client_pending_max > l.pending_requests_max {
            return Err(err(
                "limits.client_pending_max",
                format!(
                    "{} is larger than limits.pending_requests_max = {}",
                    l.client_pending_max, l.pending_requests_max
                ),
                "make client_pending_max ≤ pending_requests_max",
            ));
        }
        Ok(())
    }

    /// A complete `tagma.toml` with a comment on every key (written by `tagma init`).
    pub fn documented_toml(&self) -> String {
        let c = &self.cluster;
        let b = &self.batch;
        let t = &self.timeouts;
        let l = &self.limits;
        let d = LimitSection::default();
        let dt = TimeoutSection::default();
        let mut s = String::new();
        s.push_str(
            "# tagma cluster configuration. Every key below shows its default unless noted;\n",
        );
        s.push_str(
            "# a key left out takes its default. Reference: README.md, section Configuration.\n\n",
        );
        s.push_str("[cluster]\n");
        s.push_str(&format!("# \"bft\": tolerate f Byzantine replicas (n >= 3f+1); \"cft\": f crashes (n >= 2f+1). Default \"bft\".\nmode = \"{}\"\n", c.mode));
        s.push_str(&format!(
            "# Faulty replicas tolerated. Default 1.\nf = {}\n",
            c.f
        ));
        s.push_str(&format!("# Require an Ed25519 client signature on every ordered request. Default false.\nsigned_requests = {}\n", c.signed_requests));
        s.push_str(&format!("# Accept unordered (read-only) requests; clients then wait for floor((n+f)/2)+1 matching replies. Default true.\nreadonly_requests = {}\n\n", c.readonly_requests));
        for r in &self.replicas {
            s.push_str("[[replica]]\n");
            s.push_str(&format!(
                "id = {}\naddr = \"{}\"\npublic_key = \"{}\"\n",
                r.id, r.addr, r.public_key
            ));
            if let Some(m) = &r.metrics_addr {
                s.push_str(&format!(
                    "# Prometheus endpoint (GET /metrics). Optional.\nmetrics_addr = \"{m}\"\n"
                ));
            }
            s.push('\n');
        }
        for cl in &self.clients {
            s.push_str(&format!("[[client]]\n# Client principal: its client ids are (id << 32) | instance.\nid = {}\npublic_key = \"{}\"\n\n", cl.id, cl.public_key));
        }
        if let Some(a) = &self.admin {
            s.push_str(&format!("[admin]\n# Administrator key for reconfiguration operations.\npublic_key = \"{}\"\n\n", a.public_key));
        }
        s.push_str("[batch]\n");
        s.push_str(&format!(
            "# Most requests per consensus instance. Default 1024.\nbatch_size_max = {}\n",
            b.batch_size_max
        ));
        s.push_str(&format!(
            "# Most encoded bytes per batch. Default 1048576.\nbatch_bytes_max = {}\n\n",
            b.batch_bytes_max
        ));
        s.push_str("[timeouts]\n");
        s.push_str(&format!("# Replica request timer (first expiry forwards, second suspects the leader). Default {}.\nrequest_timeout_ms = {}\n", dt.request_timeout_ms, t.request_timeout_ms));
        s.push_str(&format!("# Client retransmits an unanswered request after this long. Default {}.\nclient_retransmit_ms = {}\n", dt.client_retransmit_ms, t.client_retransmit_ms));
        s.push_str(&format!("# Client gives up on an invocation after this long. Default {}.\nclient_invoke_timeout_ms = {}\n", dt.client_invoke_timeout_ms, t.client_invoke_timeout_ms));
        s.push_str(&format!(
            "# TCP connect timeout. Default {}.\nconnect_timeout_ms = {}\n",
            dt.connect_timeout_ms, t.connect_timeout_ms
        ));
        s.push_str(&format!(
            "# Authenticated handshake timeout. Default {}.\nhandshake_timeout_ms = {}\n",
            dt.handshake_timeout_ms, t.handshake_timeout_ms
        ));
        s.push_str(&format!(
            "# Longest delay between reconnection attempts to a peer (the first retries come\n# sooner: 2 ms, doubling up to this). Default {}.\nreconnect_delay_ms = {}\n\n",
            dt.reconnect_delay_ms, t.reconnect_delay_ms
        ));
        s.push_str("[limits]\n");
        let lim = [
            (
                "frame_bytes_max",
                "Largest frame body on any connection",
                l.frame_bytes_max,
                d.frame_bytes_max,
            ),
            (
                "request_bytes_max",
                "Largest request payload",
                l.request_bytes_max,
                d.request_bytes_max,
            ),
            (
                "client_pending_max",
                "Flow control: requests of one client waiting to be ordered",
                l.client_pending_max,
                d.client_pending_max,
            ),
            (
                "pending_requests_max",
                "Requests of all clients waiting to be ordered",
                l.pending_requests_max,
                d.pending_requests_max,
            ),
            (
                "clients_max",
                "Client sessions kept (least recently active evicted)",
                l.clients_max,
                d.clients_max,
            ),
            (
                "reply_cache_per_client",
                "Replies cached per client for retransmissions",
                l.reply_cache_per_client,
                d.reply_cache_per_client,
            ),
            (
                "future_messages_max",
                "Consensus messages for future instances kept",
                l.future_messages_max,
                d.future_messages_max,
            ),
            (
                "consensus_queue_max",
                "Events waiting for the consensus thread",
                l.consensus_queue_max,
                d.consensus_queue_max,
            ),
            (
                "execution_queue_max",
                "Batches and reads waiting for the execution thread",
                l.execution_queue_max,
                d.execution_queue_max,
            ),
            (
                "connection_queue_max",
                "Frames waiting to be written on one connection",
                l.connection_queue_max,
                d.connection_queue_max,
            ),
            (
                "connections_max",
                "Client connections per replica",
                l.connections_max,
                d.connections_max,
            ),
            (
                "signature_threads",
                "Threads verifying client signatures",
                l.signature_threads,
                d.signature_threads,
            ),
            (
                "decisions_kept",
                "Decided instances kept in memory for replicas that fell behind",
                l.decisions_kept,
                d.decisions_kept,
            ),
        ];
        for (k, doc, v, def) in lim {
            s.push_str(&format!("# {doc}. Default {def}.\n{k} = {v}\n"));
        }
        s.push_str("\n[storage]\n");
        let st = &self.storage;
        s.push_str(&format!("# Data directory, relative to the cluster directory. Default \"data\".\ndata_dir = \"{}\"\n", st.data_dir));
        s.push_str(&format!("# \"none\": in memory only; \"fsync\": every replica forces its votes to disk before it ACCEPTs,\n# logs decided batches and takes checkpoints (survives the crash of every replica). Default \"none\".\ndurability = \"{}\"\n", st.durability));
        s.push_str(&format!("# Instances between two checkpoints of a replica (staggered across replicas; at least n). Default 1000.\ncheckpoint_period = {}\n", st.checkpoint_period));
        s.push_str(&format!("# Bytes each log segment file is preallocated to. Default 67108864 (64 MiB).\nlog_segment_bytes = {}\n", st.log_segment_bytes));
        s.push_str(&format!("# The largest checkpoint accepted by state transfer. Default 17179869184 (16 GiB).\nstate_bytes_max = {}\n", st.state_bytes_max));
        s.push_str(&format!("# BFT with durability: a restarted replica compares its recovered state with its peers'\n# (its state hashed once per restart) and fetches theirs if f+1 contradict it. Default true.\nhash_vote = {}\n", st.hash_vote));
        s
    }
}

fn parse_key(key: &str, hex: &str) -> Result<PublicKey, ConfigError> {
    tagma_crypto::public_key_from_hex(hex).map_err(|e| {
        err(
            key,
            format!("{e}"),
            "paste the 64-hex-digit key printed by `tagma keygen` (or rerun `tagma init`)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";

    fn replicas(n: u32) -> Vec<ReplicaEntry> {
        (0..n)
            .map(|i| ReplicaEntry {
                id: i,
                addr: format!("127.0.0.1:{}", 7100 + i),
                public_key: KEY.into(),
                metrics_addr: None,
            })
            .collect()
    }

    fn config(n: u32, mode: Mode, f: u32) -> Config {
        Config {
            cluster: ClusterSection {
                mode,
                f,
                ..Default::default()
            },
            replicas: replicas(n),
            clients: vec![ClientEntry {
                id: 1,
                public_key: KEY.into(),
            }],
            admin: None,
            batch: Default::default(),
            timeouts: Default::default(),
            limits: Default::default(),
            storage: Default::default(),
        }
    }

    #[test]
    fn documented_toml_round_trips() {
        let c = config(4, Mode::Bft, 1);
        let v = Config::from_toml(&c.documented_toml()).unwrap();
        assert_eq!(v.raw, c);
        assert_eq!(v.n(), 4);
    }

    #[test]
    fn bft_needs_3f_plus_1() {
        let e = config(3, Mode::Bft, 1).validate().unwrap_err();
        assert_eq!(e.key, "cluster.f");
        assert!(e.to_string().contains("n ≥ 4"), "{e}");
        assert!(config(3, Mode::Cft, 1).validate().is_ok());
        assert!(config(2, Mode::Cft, 1).validate().is_err());
        assert!(config(7, Mode::Bft, 2).validate().is_ok());
        let mut c = config(10, Mode::Bft, 3);
        assert!(
            c.clone().validate().is_ok(),
            "defaults fit a SYNC of 10 replicas"
        );
        c.batch.batch_bytes_max = 1 << 20;
        c.limits.frame_bytes_max = 4 << 20;
        assert_eq!(c.validate().unwrap_err().key, "limits.frame_bytes_max");
        let single = config(1, Mode::Cft, 0).validate().unwrap();
        assert_eq!(single.quorums().reply_quorum(true), 1);
    }

    #[test]
    fn errors_name_key_and_fix() {
        let mut c = config(4, Mode::Bft, 1);
        c.replicas[2].addr = "nowhere".into();
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "replica[2].addr");
        let mut c = config(4, Mode::Bft, 1);
        c.replicas[1].id = 0;
        assert_eq!(c.validate().unwrap_err().key, "replica[1].id");
        let mut c = config(4, Mode::Bft, 1);
        c.limits.frame_bytes_max = 1000;
        assert_eq!(c.validate().unwrap_err().key, "batch.batch_bytes_max");
        let mut c = config(4, Mode::Bft, 1);
        c.replicas[0].public_key = "zz".into();
        assert_eq!(c.validate().unwrap_err().key, "replica[0].public_key");
        let e = Config::from_toml("[cluster]\nbogus = 1\n").unwrap_err();
        assert!(e.problem.contains("bogus"), "{e}");
    }
}
