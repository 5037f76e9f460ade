//! The cluster configuration (`tagma.toml`): every key, its documented default, and
//! validation whose errors name the key, where it is in the file (line, column) and the fix.
//!
//! The file is parsed from a string here (no IO); the node and the CLI read the file.
//! [`Config::documented_toml`] renders a complete file with a comment for every key: that is
//! what `tagma init` writes, so the defaults are documented where users look.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use tagma_wire::{PublicKey, ReplicaId};

use crate::position::{self, Position};
use crate::quorum::Mode;

pub use crate::eve::EveSection;

/// A configuration problem, with the key at fault (dotted: `cluster.f`, `replica[2].addr`),
/// where it is in the file when it is there, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {problem} — fix: {fix}", subject(.key, .position))]
pub struct ConfigError {
    /// Empty for a syntax error before the first key.
    pub key: String,
    pub problem: String,
    pub fix: String,
    /// Where the key (or, for a key left out, its table) is in the text that was parsed.
    pub position: Option<Position>,
}

/// `configuration key `cluster.f` (line 3, column 5)`, each part when known.
fn subject(key: &str, position: &Option<Position>) -> String {
    let mut s = if key.is_empty() {
        "configuration".to_string()
    } else {
        format!("configuration key `{key}`")
    };
    if let Some(p) = position {
        s.push_str(&format!(" (line {}, column {})", p.line, p.column));
    }
    s
}

pub(crate) fn err(
    key: impl Into<String>,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> ConfigError {
    ConfigError {
        key: key.into(),
        problem: problem.into(),
        fix: fix.into(),
        position: None,
    }
}

/// Refuses the first key whose value is 0.
pub(crate) fn check_positive(keys: &[(&str, u64)]) -> Result<(), ConfigError> {
    match keys.iter().find(|(_, v)| *v == 0) {
        Some((key, _)) => Err(err(
            *key,
            "must be greater than 0",
            "remove the key to use the default, or set a positive value",
        )),
        None => Ok(()),
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
    #[serde(default)]
    pub testing: TestingSection,
    #[serde(default)]
    pub eve: crate::eve::EveSection,
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
    /// Adaptive batching: how long a leader may hold its next batch, while requests arrive,
    /// until 7/8 as many wait as the last decided batch held (0: propose at once).
    pub fill_wait_ms: u64,
}

impl Default for BatchSection {
    fn default() -> Self {
        BatchSection {
            batch_size_max: 1024,
            batch_bytes_max: 256 << 10,
            fill_wait_ms: 2,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutSection {
    /// Replica request timer: first expiry forwards a pending request, second suspects the
    /// leader.
    pub request_timeout_ms: u64,
    /// How far ahead of a replica's clock a leader's new batch may be timestamped: a later
    /// one is refused and the leader suspected. It bounds how early a faulty leader can make
    /// leases and waits run out (the agreed time is at most this far ahead of a correct
    /// replica's clock); the replicas' clocks must agree to well within it.
    pub clock_skew_max_ms: u64,
    /// Client proxy: retransmit a request not answered within this time, to every replica
    /// (an ordered request first goes to the replica the client believes leads, and to every
    /// replica sooner when that one is slow to answer: see `tagma-client`'s `proxy::leader`).
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
            clock_skew_max_ms: 5000,
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
    /// Bytes of requests kept after their check on the client's connection, so that a
    /// PROPOSE relaying one is accepted by comparison instead of a second check (0: none).
    pub verified_requests_bytes: usize,
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
            verified_requests_bytes: 4 << 20,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageSection {
    /// Data directory, relative to the cluster directory; replica `i` uses `<data_dir>/replica-<i>`.
    pub data_dir: String,
    /// `none`: state lives in memory only, the log and checkpoints too (a replica that
    /// restarts rejoins empty and gets the state from the others' memory). `fsync`: every replica forces its votes to disk before it
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
    /// against its peers' before ordering (DDS's state vote; each replica hashes its state
    /// once per restart), and fetches theirs if f+1 contradict it. Catches a disk whose wrong
    /// content passes its checksums.
    #[serde(alias = "hash_vote")]
    pub state_vote: bool,
}

impl Default for StorageSection {
    fn default() -> Self {
        StorageSection {
            data_dir: "data".into(),
            durability: Durability::None,
            checkpoint_period: 1000,
            log_segment_bytes: 64 << 20,
            state_bytes_max: 16 << 30,
            state_vote: true,
        }
    }
}

/// Fault injection for testing (`[testing]`): a disk that stalls, on one replica at a time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TestingSection {
    /// While a file of this name exists in a replica's data directory, that replica's
    /// flushes named in `stall_flushes` wait until it is gone: its disk stalls (`tagma chaos
    /// --scenario slow-disk`). Empty: never.
    pub stall_file: String,
    /// The flushes the stall file holds.
    pub stall_flushes: Vec<StallFlush>,
}

impl Default for TestingSection {
    fn default() -> Self {
        TestingSection {
            stall_file: String::new(),
            stall_flushes: vec![StallFlush::Log, StallFlush::Votes, StallFlush::Checkpoints],
        }
    }
}

/// A kind of flush the stall file of `[testing]` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StallFlush {
    /// The log's group commit (storage thread).
    Log,
    /// This replica's vote records (consensus thread; an ACCEPT waits for them).
    Votes,
    /// Checkpoint writes (checkpoint thread).
    Checkpoints,
}

impl std::fmt::Display for StallFlush {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StallFlush::Log => "log",
            StallFlush::Votes => "votes",
            StallFlush::Checkpoints => "checkpoints",
        })
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

/// A durable replica decides at most this many instances that are not in its log yet. Beyond
/// it, it holds the instance in progress: it casts no vote on it, decides nothing, and keeps
/// what it receives for it (bounded, in the buffers for later instances) until its log
/// catches up. The others decide without it meanwhile; it then goes on from what it kept and
/// catches up on the rest by decision forwarding or state transfer. This bounds everything a
/// stalled disk leaves waiting in the runtime (the log's queue, the votes kept until their
/// instance is logged); `limits.execution_queue_max`, which also bounds the log's queue, must
/// hold twice as many.
pub const LOG_LAG_MAX: u64 = 32;

impl Config {
    /// Parses and validates a `tagma.toml`. Every error names its key and, where the key
    /// is in `text`, its line and column.
    pub fn from_toml(text: &str) -> Result<ValidConfig, ConfigError> {
        let raw: Config = toml::from_str(text).map_err(|e| {
            let offset = e.span().map(|s| s.start);
            ConfigError {
                key: offset
                    .and_then(|o| position::key_at(text, o))
                    .unwrap_or_default(),
                problem: e.message().trim_end().to_string(),
                fix: "correct the syntax, the value's type or the key's name (`tagma init` writes every key with its type and default)".into(),
                position: offset.map(|o| Position::of_offset(text, o)),
            }
        })?;
        raw.validate().map_err(|mut e| {
            e.position = position::offset_of(text, &e.key).map(|o| Position::of_offset(text, o));
            e
        })
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
        // ACCEPT signatures do not name their signer: a key shared by two replicas would let
        // one replica's signature count twice in a decision proof.
        let mut keys: BTreeMap<PublicKey, u32> = BTreeMap::new();
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
            if let Some(first) = keys.insert(public_key, r.id) {
                return Err(err(
                    key("public_key"),
                    format!("replicas {first} and {} have the same public key", r.id),
                    "give every replica its own key pair (`tagma keygen`), or rerun `tagma init`",
                ));
            }
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
        self.eve.check()?;
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
        let positive: [(&str, u64); 20] = [
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
            ("timeouts.clock_skew_max_ms", t.clock_skew_max_ms),
            ("timeouts.client_retransmit_ms", t.client_retransmit_ms),
            (
                "timeouts.client_invoke_timeout_ms",
                t.client_invoke_timeout_ms,
            ),
            ("timeouts.handshake_timeout_ms", t.handshake_timeout_ms),
        ];
        check_positive(&positive)?;
        if (l.execution_queue_max as u64) < 2 * LOG_LAG_MAX {
            return Err(err(
                "limits.execution_queue_max",
                format!(
                    "{} is too small: the log's queue, which it also bounds, must hold the {LOG_LAG_MAX} instances a durable replica may decide beyond its log, twice over",
                    l.execution_queue_max
                ),
                format!("set it to {} or more (default 1024)", 2 * LOG_LAG_MAX),
            ));
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
        let stall = &self.testing.stall_file;
        if stall.contains(['/', '\\']) || stall == "." || stall == ".." {
            return Err(err(
                "testing.stall_file",
                format!("{stall:?} is not a file name"),
                "name a file (no directory): it is looked for in each replica's data directory",
            ));
        }
        if t.connect_timeout_ms == 0 {
            return Err(err(
                "timeouts.connect_timeout_ms",
                "must be greater than 0",
                "remove the key to use the default (1000)",
            ));
        }
        if b.fill_wait_ms.saturating_mul(10) > t.request_timeout_ms {
            return Err(err(
                "batch.fill_wait_ms",
                format!(
                    "{} ms is more than a tenth of timeouts.request_timeout_ms = {}: a leader holding batches that long would look slow to its followers",
                    b.fill_wait_ms, t.request_timeout_ms
                ),
                "remove the key to use the default (2), set 0 to propose at once, or raise request_timeout_ms",
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

    fn replica_key(i: u32) -> String {
        tagma_crypto::IdentityKey::from_seed([i as u8 + 1; 32])
            .public()
            .to_hex()
    }

    fn replicas(n: u32) -> Vec<ReplicaEntry> {
        (0..n)
            .map(|i| ReplicaEntry {
                id: i,
                addr: format!("127.0.0.1:{}", 7100 + i),
                public_key: replica_key(i),
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
            testing: Default::default(),
            eve: Default::default(),
        }
    }

    #[test]
    fn documented_toml_round_trips() {
        let c = config(4, Mode::Bft, 1);
        let v = Config::from_toml(&c.documented_toml()).unwrap();
        assert_eq!(v.raw, c);
        assert_eq!(v.n(), 4);
        // The fault injection of a test cluster reaches its replicas the same way.
        let mut stalling = config(4, Mode::Bft, 1);
        stalling.testing = TestingSection {
            stall_file: "stall".into(),
            stall_flushes: vec![StallFlush::Log],
        };
        let v = Config::from_toml(&stalling.documented_toml()).unwrap();
        assert_eq!(v.raw, stalling);
        stalling.testing.stall_file = "../stall".into();
        let e = stalling.validate().unwrap_err();
        assert_eq!(e.key, "testing.stall_file", "{e}");
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

    /// A stalled disk leaves up to `LOG_LAG_MAX` decisions in the log's queue, which
    /// `execution_queue_max` bounds: a smaller queue is refused, naming the fix.
    #[test]
    fn the_execution_queue_holds_what_a_stalled_log_leaves_waiting() {
        let mut c = config(4, Mode::Bft, 1);
        c.limits.execution_queue_max = 40;
        let e = c.clone().validate().unwrap_err();
        assert_eq!(e.key, "limits.execution_queue_max");
        assert!(e.to_string().contains("set it to 64 or more"), "{e}");
        c.limits.execution_queue_max = 64;
        assert!(c.validate().is_ok());
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

    #[test]
    fn a_batch_fill_wait_beyond_a_tenth_of_the_request_timeout_is_refused() {
        let mut c = config(4, Mode::Bft, 1);
        assert_eq!(c.batch.fill_wait_ms, 2, "the documented default");
        c.batch.fill_wait_ms = 100;
        assert!(c.clone().validate().is_ok(), "a tenth of 1000 ms");
        c.batch.fill_wait_ms = 101;
        let e = c.clone().validate().unwrap_err();
        assert_eq!(e.key, "batch.fill_wait_ms");
        assert!(e.fix.contains("set 0"), "{e}");
        c.timeouts.request_timeout_ms = 2000;
        assert!(c.validate().is_ok());
        let text = edited(|t| t.replace("fill_wait_ms = 2\n", "fill_wait_ms = 0\n"));
        assert_eq!(Config::from_toml(&text).unwrap().raw.batch.fill_wait_ms, 0);
    }

    /// The documented file of a 4-replica cluster with `edit` applied to its text.
    fn edited(edit: impl FnOnce(String) -> String) -> String {
        edit(config(4, Mode::Bft, 1).documented_toml())
    }

    fn line_of(text: &str, needle: &str) -> usize {
        text[..text.find(needle).unwrap()].matches('\n').count() + 1
    }

    #[test]
    fn type_and_syntax_errors_name_the_key_line_and_column() {
        // A value of the wrong type.
        let text = edited(|t| t.replace("\nf = 1\n", "\nf = \"one\"\n"));
        let e = Config::from_toml(&text).unwrap_err();
        assert_eq!(e.key, "cluster.f");
        let line = line_of(&text, "f = \"one\"");
        assert_eq!(e.position, Some(Position { line, column: 5 }));
        let shown = e.to_string();
        assert!(
            shown.starts_with(&format!(
                "configuration key `cluster.f` (line {line}, column 5): invalid type"
            )),
            "{shown}"
        );
        assert!(
            !shown.contains("<file>") && !shown.contains("byte"),
            "{shown}"
        );
        // A syntax error: a value missing.
        let text = edited(|t| t.replace("request_timeout_ms = 1000", "request_timeout_ms ="));
        let e = Config::from_toml(&text).unwrap_err();
        assert_eq!(e.key, "timeouts.request_timeout_ms");
        assert_eq!(
            e.position.map(|p| p.line),
            Some(line_of(&text, "request_timeout_ms ="))
        );
        // A key no table has, in the second replica's table.
        let text = edited(|t| t.replacen("id = 1\n", "id = 1\nport = 7\n", 1));
        let e = Config::from_toml(&text).unwrap_err();
        assert_eq!(e.key, "replica[1].port");
        assert!(e.problem.contains("unknown field `port`"), "{e}");
        assert_eq!(
            e.position,
            Some(Position {
                line: line_of(&text, "port = 7"),
                column: 1
            })
        );
    }

    #[test]
    fn validation_errors_name_the_line_of_their_key() {
        let text = edited(|t| t.replace("127.0.0.1:7102", "nowhere"));
        let e = Config::from_toml(&text).unwrap_err();
        assert_eq!(e.key, "replica[2].addr");
        assert_eq!(
            e.position,
            Some(Position {
                line: line_of(&text, "addr = \"nowhere\""),
                column: 1
            })
        );
        // Built without a text: no position.
        let mut c = config(4, Mode::Bft, 1);
        c.replicas[2].addr = "nowhere".into();
        assert_eq!(c.validate().unwrap_err().position, None);
    }

    #[test]
    fn two_replicas_with_one_key_are_refused_naming_both() {
        let mut c = config(4, Mode::Bft, 1);
        c.replicas[2].public_key = c.replicas[0].public_key.clone();
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "replica[2].public_key");
        assert!(e.problem.contains("replicas 0 and 2"), "{e}");
        assert!(e.fix.contains("tagma keygen"), "{e}");
        // The same from a file, with the line of the second key.
        let text = config(4, Mode::Bft, 1)
            .documented_toml()
            .replace(&replica_key(2), &replica_key(0));
        let e = Config::from_toml(&text).unwrap_err();
        assert_eq!(e.key, "replica[2].public_key");
        let second = text.match_indices(&replica_key(0)).nth(1).unwrap().0;
        let line = text[..second].matches('\n').count() + 1;
        assert_eq!(e.position.map(|p| p.line), Some(line));
    }
}
