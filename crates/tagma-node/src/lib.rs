//! `tagma-node`: the production runtime that drives the sans-IO core over real TCP.
//!
//! # Threads and queues
//! ```text
//!  accept ──► handshake ──► client reader (1/conn) ──verify MAC──► consensus_queue ─┐
//!                  │              │ unordered / state query ───────► execution_queue │
//!                  │              └ (signed requests) ─► signature pool ─► consensus_queue
//!                  └──────► peer reader (1/peer) ─decode, hash, verify batch─► consensus_queue
//!  consensus thread: Replica core ── Broadcast/Send ──► peer link queue (1/peer) ─► peer writer
//!                                 ├─ Deliver/ResendReply ──► execution_queue
//!                                 └─ Append ──► storage thread; (durable) vote records itself
//!  execution thread: Executor<Service> ── replies ──► connection queue (1/conn) ─► conn writer
//! ```
//! Every queue is bounded by a `[limits]` key. A full consensus or execution queue blocks its
//! producer (back-pressure that reaches the client's TCP window); a full connection or peer
//! queue drops the frame and counts it (a slow client must not stall the replica). A replica
//! that misses consensus messages this way falls behind and catches up by decision
//! forwarding (the core asks peers for the decided instances with their proofs), or, beyond
//! `limits.decisions_kept` instances, by state transfer.
//!
//! # Modules
//! - `startup.rs`: local recovery, the core, the links, the threads;
//! - `client_link.rs`, `peer_link.rs`: connections to clients and to the other replicas;
//! - `consensus_thread.rs`, `execution_thread.rs`: the pipeline around the core and the
//!   service; `shared.rs`: what they share and the events on their queues;
//!   `verified.rs`: requests authenticated on client connections, recognised again when a
//!   PROPOSE relays them;
//! - `storage/`: the log, checkpoint and transfer threads (on disk, or in memory without
//!   durability), local recovery, vote records;
//! - `membership.rs`: the replicas known and the installed view; `auth.rs`: request
//!   authentication; `metrics.rs`: the Prometheus endpoint; `cluster_dir.rs`: the cluster
//!   directory's layout.

pub mod auth;
mod client_link;
pub mod cluster_dir;
mod consensus_thread;
mod execution_thread;
mod membership;
pub mod metrics;
mod peer_link;
mod shared;
mod startup;
mod storage;
mod verified;

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, atomic::Ordering},
    thread,
    time::Duration,
};

pub use membership::discover_view;
use tagma_core::ValidConfig;
use tagma_crypto::IdentityKey;
use tagma_exec::Service;
use tagma_wire::ReplicaId;
use tracing::info;

pub use crate::metrics::Metrics;
use crate::startup::start_node;

/// Logical clients one connection may carry (bounds the per-connection routing state).
pub const CLIENTS_PER_CONNECTION_MAX: usize = 4096;
/// A writer coalesces queued frames into one write of at most this many bytes.
const WRITE_COALESCE_BYTES: usize = 256 << 10;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(
        "cannot listen on {addr}: {source} — fix: stop whatever uses that port or change `addr` in tagma.toml"
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot serve metrics on {addr}: {source} — fix: change or remove `metrics_addr`")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("replica {0} is not in the configuration")]
    NotAMember(ReplicaId),
    #[error(
        "the contact {0} is not a replica of tagma.toml — fix: give `--join` the address of a replica listed there"
    )]
    UnknownContact(SocketAddr),
    #[error(
        "no view includes replica {me} after {waited_s} s — fix: add it with `tagma view --dir DIR add --id {me} --addr HOST:PORT --key FILE`, then start it again"
    )]
    NotAdded { me: ReplicaId, waited_s: u64 },
    #[error(
        "a joining replica checks the view against the administrator's signatures, and tagma.toml names no administrator — fix: set [admin] public_key"
    )]
    JoinNeedsAdmin,
    #[error("the view that adds replica {0} gives it no usable address (it must be IP:PORT)")]
    BadAddress(ReplicaId),
    #[error("key error: {0}")]
    Key(#[from] tagma_crypto::CryptoError),
    #[error(
        "this replica's key does not match the public key configured for replica {0} — fix: use keys/replica-{0}.key from the same `tagma init`"
    )]
    KeyMismatch(ReplicaId),
    #[error(
        "cannot recover the durable state in {dir}: {reason} — fix: move that directory away; the replica then starts empty and catches up from the others (decision forwarding, within limits.decisions_kept instances)"
    )]
    Recovery { dir: PathBuf, reason: String },
}

/// A running replica.
pub struct NodeHandle {
    pub id: ReplicaId,
    pub metrics: Arc<Metrics>,
    pub local_addr: SocketAddr,
    threads: Vec<thread::JoinHandle<()>>,
}

impl NodeHandle {
    /// Blocks until the replica stops (it runs until the process is killed).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }

    /// Blocks while this replica is a member; once a view without it is installed, goes on
    /// serving for `grace` (peers that lag may still need the decisions it holds, the one that
    /// removed it included) and returns, for the process to exit.
    pub fn run_until_left(self, grace: Duration) {
        while self.metrics.left_view.load(Ordering::Relaxed) == 0 {
            thread::sleep(Duration::from_millis(50));
        }
        info!(
            grace_ms = grace.as_millis() as u64,
            "removed from the view: serving lagging peers for a grace period, then exiting"
        );
        thread::sleep(grace);
    }
}

/// Starts replica `me` serving `service`. With `[storage] durability = "fsync"` it keeps its
/// state in `data_dir`, from which it first recovers; without, in memory. Returns once the
/// listener is bound.
pub fn start<S: Service>(
    cfg: ValidConfig,
    me: ReplicaId,
    key: IdentityKey,
    service: S,
    data_dir: PathBuf,
) -> Result<NodeHandle, NodeError> {
    start_node(cfg, me, key, service, Some(data_dir), None)
}

/// A replica the configuration does not list, which a view change added.
#[derive(Clone, Debug)]
pub struct Joining {
    /// The view that includes it (found by [`discover_view`]).
    pub view: tagma_wire::View,
    /// Where to serve its metrics (the configuration has no entry for it).
    pub metrics_addr: Option<SocketAddr>,
}

/// Starts replica `me`, which a view change added to the cluster (see [`Joining`]). With
/// no durable state in `data_dir` it fetches the state by state transfer before taking part;
/// with some (a restart after it joined), it recovers as any replica does.
pub fn start_joining<S: Service>(
    cfg: ValidConfig,
    me: ReplicaId,
    key: IdentityKey,
    service: S,
    data_dir: PathBuf,
    joining: Joining,
) -> Result<NodeHandle, NodeError> {
    start_node(cfg, me, key, service, Some(data_dir), Some(joining))
}

/// Starts server `me` of `cfg` serving `service` **without replication**: the benchmarks'
/// baseline. Clients connect, authenticate and send requests exactly as to a replica (same
/// handshake, frame MACs, request authentication and execution thread), but every ordered
/// request is executed as soon as it is authenticated, as a batch of one with the next
/// consensus id; no consensus thread runs and no peer is contacted. Meant for a
/// configuration with one server (`mode = "cft"`, `f = 0`), where clients need one reply.
pub fn start_unreplicated<S: Service>(
    cfg: ValidConfig,
    me: ReplicaId,
    key: IdentityKey,
    service: S,
) -> Result<NodeHandle, NodeError> {
    start_node(cfg, me, key, service, None, None)
}
