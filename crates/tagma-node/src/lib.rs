//! `tagma-node`: the production runtime that drives the sans-IO core over real TCP.
//!
//! # Threads and queues (SPEC §3, seed 002 Figure 3)
//! ```text
//!  accept ──► handshake ──► client reader (1/conn) ──verify MAC──► consensus_queue ─┐
//!                  │              │ unordered / state query ───────► execution_queue │
//!                  │              └ (signed requests) ─► signature pool ─► consensus_queue
//!                  └──────► peer reader (1/peer) ─decode, hash, verify batch─► consensus_queue
//!  consensus thread: Replica core ── Broadcast/Send ──► peer link queue (1/peer) ─► peer writer
//!                                 └─ Deliver/ResendReply ──► execution_queue
//!  execution thread: Executor<Service> ── replies ──► connection queue (1/conn) ─► conn writer
//! ```
//! Every queue is bounded by a `[limits]` key. A full consensus or execution queue blocks its
//! producer (back-pressure that reaches the client's TCP window); a full connection or peer
//! queue drops the frame and counts it (a slow client must not stall the replica). A replica
//! that misses consensus messages this way falls behind and catches up by decision
//! forwarding (the core asks peers for the decided instances with their proofs); beyond
//! `limits.decisions_kept` instances it needs state transfer, which is future work.

pub mod auth;
pub mod cluster_dir;
mod durability;
mod membership;
pub mod metrics;

pub use membership::discover_view;

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError, bounded};
use tagma_core::config::Durability;
use tagma_core::config::ReplicaInfo;
use tagma_core::{Action, Decision, PeerInput, Replica, ReplicaParams, ValidConfig};
use tagma_crypto::IdentityKey;
use tagma_exec::{Executor, Service};
use tagma_net::{FrameReader, FrameWriter, LocalIdentity, NetError, NetLimits};
use tagma_wire::{
    Batch, ClientId, ClientMessage, ConsensusId, Decode, Encode, PeerMessage, ReplicaId,
    ReplicaMessage, RequestEnvelope, RequestKind, RequestSeq, Role, StateInfo, ViewId,
};
use tracing::{debug, info, info_span, warn};

use crate::auth::{RequestVerifier, SignaturePool};
pub use crate::metrics::Metrics;

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
        "a joining replica fetches its state by state transfer, which needs durable checkpoints — fix: set [storage] durability = \"fsync\""
    )]
    JoinNeedsDurability,
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

/// A client connection's outbound queue.
#[derive(Clone)]
struct ConnHandle {
    id: u64,
    tx: Sender<Bytes>,
}

enum ConsensusEvent {
    Request(RequestEnvelope),
    Peer {
        from: ReplicaId,
        input: PeerInput,
    },
    /// A durable checkpoint was written (offered to replicas that need state).
    Checkpointed(tagma_wire::CheckpointInfo),
    /// The digest of the state after an instance, for the hash vote (`Action::DigestState`).
    StateDigest {
        cid: tagma_wire::ConsensusId,
        digest: tagma_wire::Digest,
    },
    /// The storage thread synced the log while the leader's next proposal waited for it (the
    /// position itself is read from `Shared::durable_below`).
    Durable,
    /// The execution thread's verdict on a fetched state, with what the storage thread must
    /// log for it.
    Installed {
        outcome: tagma_core::transfer::InstallOutcome,
        log: Option<durability::StorageEvent>,
    },
}

enum ExecEvent {
    Route {
        client: ClientId,
        conn: ConnHandle,
    },
    Unroute {
        conn_id: u64,
    },
    Deliver(Decision),
    Resend {
        client: ClientId,
        seq: RequestSeq,
    },
    /// Tell a client whose request named an older view the installed one.
    CurrentView {
        client: ClientId,
        view: tagma_wire::View,
    },
    Unordered {
        request: RequestEnvelope,
        conn: ConnHandle,
    },
    StateQuery {
        nonce: u64,
        conn: ConnHandle,
    },
    /// A client asks for the installed view (the one executed so far).
    ViewQuery {
        conn: ConnHandle,
    },
    /// A client asks for the signed changes since the configured view.
    ViewHistoryQuery {
        conn: ConnHandle,
    },
    /// Unreplicated mode: an authenticated ordered request to execute at once, as a batch
    /// of one, without consensus.
    Execute(RequestEnvelope),
    /// State transfer: validate and install a fetched state.
    Install(tagma_core::transfer::StateToInstall),
    /// The fresh checkpoint a peer the hash vote contradicted repairs from (`Action::CheckpointNow`).
    CheckpointNow {
        cid: u64,
    },
    /// The start-up synchronisation's hash vote: the state's digest (`Action::DigestState`).
    DigestState {
        cid: u64,
    },
}

/// Wall-clock milliseconds that never go backwards (monotonic clock offset from the wall
/// clock at start).
#[derive(Clone, Copy)]
struct Clock {
    start: Instant,
    base_ms: u64,
}

impl Clock {
    fn new() -> Self {
        let base_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Clock {
            start: Instant::now(),
            base_ms,
        }
    }
    fn now_ms(&self) -> u64 {
        self.base_ms + self.start.elapsed().as_millis() as u64
    }
}

/// What every network thread shares.
struct Shared {
    me: ReplicaId,
    cfg: Arc<ValidConfig>,
    key: Arc<IdentityKey>,
    /// The replicas known (handshakes) and the installed view (answered to joiners).
    roster: membership::SharedRoster,
    limits: NetLimits,
    metrics: Arc<Metrics>,
    verifier: Arc<RequestVerifier>,
    sig_pool: Option<SignaturePool>,
    consensus_tx: Sender<ConsensusEvent>,
    /// The replica's own threads' events for the consensus thread (checkpoints written,
    /// installed states): a channel of their own, so that the execution thread never waits
    /// behind peer traffic while the consensus thread waits for it.
    internal_tx: Sender<ConsensusEvent>,
    exec_tx: Sender<ExecEvent>,
    next_conn_id: AtomicU64,
    /// Connections accepted whose handshake has not finished (bounded by `connections_max`).
    handshakes: AtomicU64,
    /// Unreplicated mode (the benchmarks' baseline): ordered requests bypass consensus.
    unreplicated: bool,
    /// Every instance below this one is synced to the log (0: none yet); only grows.
    durable_below: AtomicU64,
    /// Set by the consensus thread while the leader's proposal waits for the log: the
    /// storage thread then sends `ConsensusEvent::Durable` after its sync.
    wake_on_durable: std::sync::atomic::AtomicBool,
    /// Per peer, wakes its outbound link's writer out of a reconnection pause: sent when
    /// that peer connects to us, since it is then listening again. Links are never removed
    /// (a removal must also drop the writer, whose wait would otherwise end at once).
    reconnect_now: std::sync::Mutex<HashMap<ReplicaId, Sender<()>>>,
}

impl Shared {
    /// Counts a rejection and logs it: loudly the first time per reason, quietly after.
    fn reject(&self, reason: &'static str, detail: impl std::fmt::Display) {
        if self.metrics.reject(reason) {
            warn!(
                reason,
                "rejected: {detail} (further `{reason}` rejections are logged at debug)"
            );
        } else {
            debug!(reason, "rejected: {detail}");
        }
    }
}

/// Starts replica `me` serving `service`, keeping its durable state (with
/// `[storage] durability = "fsync"`) in `data_dir`, from which it first recovers. Returns
/// once the listener is bound.
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

/// `data_dir`: `None` runs the unreplicated baseline. `join`: the view that added `me`, for a
/// replica the configuration does not list.
fn start_node<S: Service>(
    cfg: ValidConfig,
    me: ReplicaId,
    key: IdentityKey,
    service: S,
    data_dir: Option<PathBuf>,
    join: Option<Joining>,
) -> Result<NodeHandle, NodeError> {
    let unreplicated = data_dir.is_none();
    let info = match &join {
        None => cfg.replica(me).cloned().ok_or(NodeError::NotAMember(me))?,
        Some(Joining { view, metrics_addr }) => {
            let m = view
                .members
                .iter()
                .find(|m| m.id == me)
                .ok_or(NodeError::NotAMember(me))?;
            ReplicaInfo {
                id: me,
                addr: membership::member_addr(m).ok_or(NodeError::BadAddress(me))?,
                public_key: m.key,
                metrics_addr: *metrics_addr,
            }
        }
    };
    if info.public_key != key.public() {
        return Err(NodeError::KeyMismatch(me));
    }
    // The core's parameters: the configuration's, in the view that added a joining replica.
    let mut params = ReplicaParams::from_config(&cfg, me);
    // The executor starts in the initial view whatever the replica's: it replays (and
    // verifies) history from there or from a checkpoint's view.
    let genesis = params.membership();
    if let Some(Joining { view, .. }) = &join {
        if cfg.raw.storage.durability != Durability::Fsync {
            return Err(NodeError::JoinNeedsDurability);
        }
        params.set_view(view);
    }
    let start_view = (params.view.0, params.members.len(), params.quorums.f);
    // Staggered checkpoints: this replica's place among the members it starts with.
    let stagger = (
        params.members.iter().position(|r| *r == me).unwrap_or(0),
        params.members.len(),
    );
    let cfg = Arc::new(cfg);
    let lim = &cfg.raw.limits;
    let mut executor = Executor::new(
        service,
        ViewId(0),
        lim.reply_cache_per_client,
        lim.clients_max,
    );
    if !unreplicated {
        // The executor judges view changes exactly as the core does (and checkpoints the view).
        executor = executor.with_membership(genesis);
    }
    let metrics = Arc::new(Metrics::default());
    metrics
        .view
        .store(u64::from(params.view.0), Ordering::Relaxed);
    // Durability: recover before anything else runs.
    let recovered = match &data_dir {
        Some(dir) if cfg.raw.storage.durability == Durability::Fsync => Some(
            durability::recover_or_quarantine(&cfg, dir, &mut executor, &metrics)?,
        ),
        _ => None,
    };
    let limits = NetLimits {
        frame_bytes_max: lim.frame_bytes_max,
        handshake_timeout: Duration::from_millis(cfg.raw.timeouts.handshake_timeout_ms),
    };
    metrics
        .recovered_instances
        .store(executor.executed_instances(), Ordering::Relaxed);
    metrics
        .executed_instances
        .store(executor.executed_instances(), Ordering::Relaxed);
    let listener = TcpListener::bind(info.addr).map_err(|source| NodeError::Bind {
        addr: info.addr,
        source,
    })?;
    let local_addr = listener.local_addr().map_err(|source| NodeError::Bind {
        addr: info.addr,
        source,
    })?;
    // Metrics come up after the listener, so a reachable metrics endpoint means the replica
    // accepts connections (the readiness probe of `tagma demo` and the tests).
    if let Some(addr) = info.metrics_addr {
        metrics::serve(addr, me, metrics.clone())
            .map_err(|source| NodeError::Metrics { addr, source })?;
    }
    let verifier = Arc::new(RequestVerifier::new(&cfg, me, &key)?);
    verifier.note_view(&params.membership().view);
    let (consensus_tx, consensus_rx) = bounded(lim.consensus_queue_max);
    // At most one install and a few checkpoints are ever pending.
    let (internal_tx, internal_rx) = bounded(64);
    let (exec_tx, exec_rx) = bounded(lim.execution_queue_max);
    let sig_pool = verifier.signed_requests().then(|| {
        SignaturePool::start(
            verifier.clone(),
            lim.signature_threads,
            lim.consensus_queue_max,
        )
    });
    let key = Arc::new(key);
    let roster = Arc::new(std::sync::RwLock::new(membership::Roster::new(
        &cfg,
        &params.membership().view,
    )));
    let shared = Arc::new(Shared {
        me,
        cfg: cfg.clone(),
        key,
        roster,
        limits,
        metrics: metrics.clone(),
        verifier,
        sig_pool,
        consensus_tx,
        internal_tx,
        exec_tx: exec_tx.clone(),
        next_conn_id: AtomicU64::new(1),
        handshakes: AtomicU64::new(0),
        unreplicated,
        // Everything recovered from the disk is durable (the vote writer drops the restored
        // votes of instances up to it at once).
        durable_below: AtomicU64::new(
            recovered
                .as_ref()
                .and_then(|r| r.last)
                .map_or(0, |c| c.0 + 1),
        ),
        wake_on_durable: std::sync::atomic::AtomicBool::new(false),
        reconnect_now: std::sync::Mutex::new(HashMap::new()),
    });

    let mut threads = Vec::new();
    let peer_links = membership::PeerLinks::default();
    // Unreplicated: no peers to talk to.
    if !unreplicated {
        for m in &params.membership().view.members {
            add_link(&shared, &peer_links, m);
        }
        for peer in &cfg.replicas {
            if !peer_links.contains(peer.id) && peer.id != me {
                start_link(&shared, &peer_links, peer.clone());
            }
        }
    }
    let mut durable_exec = None;
    let mut storage_tx = None;
    let mut votes = None;
    let mut transfer_tx = None;
    let mut core = None;
    let mut joining = false;
    if !unreplicated {
        let mut replica = Replica::new(params, (*shared.key).clone());
        if let Some(rec) = recovered {
            // A replica that was added and has nothing yet fetches everything first.
            joining = join.is_some() && rec.last.is_none() && rec.checkpoint.is_none();
            if let Some(last) = rec.last {
                replica.resume(
                    last,
                    executor.last_timestamp_ms(),
                    &executor.sessions(),
                    rec.recent,
                );
                // Views changed before the crash are in the recovered state.
                if let Some(view) = executor.members() {
                    replica.adopt_view(last, view.clone());
                }
            }
            if let Some(info) = rec.checkpoint {
                replica.note_checkpoint(info);
            }
            let logged_below = rec.last.map_or(0, |c| c.0 + 1);
            let writer = durability::VoteWriter::new(rec.vote_store, &rec.votes, logged_below)
                .map_err(|reason| NodeError::Recovery {
                    dir: data_dir.clone().unwrap_or_default(),
                    reason,
                })?;
            votes = Some(std::cell::RefCell::new(writer));
            replica.restore_votes(rec.votes);
            let (tx, rx) = bounded(lim.execution_queue_max);
            let (ckp_tx, ckp_rx) = bounded(1);
            let (xfer_tx, xfer_rx) = bounded(lim.connection_queue_max);
            let (sh, tx2) = (shared.clone(), tx.clone());
            let links = peer_links.clone();
            threads.push(spawn("storage".into(), me, move || {
                durability::storage_loop(&sh, rec.log, rx, links)
            }));
            let (sh, store) = (shared.clone(), rec.store.clone());
            threads.push(spawn("checkpoint".into(), me, move || {
                durability::checkpoint_loop(&sh, store, ckp_rx, tx2)
            }));
            let (sh, store, links) = (shared.clone(), rec.store.clone(), peer_links.clone());
            let exec_tx3 = exec_tx.clone();
            threads.push(spawn("transfer".into(), me, move || {
                durability::transfer_loop(&sh, store, xfer_rx, links, exec_tx3)
            }));
            transfer_tx = Some(xfer_tx);
            durable_exec = Some(durability::DurableExec {
                consensus_tx: shared.internal_tx.clone(),
                store: rec.store,
                checkpoint_tx: ckp_tx,
                index: stagger.0,
                n: stagger.1,
                period: cfg.raw.storage.checkpoint_period,
                installed_through: None,
                last_queued: std::cell::Cell::new(None),
            });
            storage_tx = Some(tx);
        }
        core = Some(replica);
    }
    if let Some(core) = core {
        let sh = shared.clone();
        threads.push(spawn("consensus".into(), me, move || {
            let links = Links {
                peers: peer_links,
                exec_tx,
                storage_tx,
                votes,
                transfer_tx,
            };
            consensus_loop(&sh, core, consensus_rx, internal_rx, &links, joining)
        }));
    }
    let sh = shared.clone();
    threads.push(spawn("execution".into(), me, move || {
        execution_loop(&sh, executor, exec_rx, durable_exec)
    }));
    let sh = shared.clone();
    threads.push(spawn("accept".into(), me, move || {
        accept_loop(&sh, listener)
    }));
    if unreplicated {
        info!(server = me.0, addr = %local_addr, "unreplicated server started (no consensus)");
    } else {
        info!(replica = me.0, addr = %local_addr, view = start_view.0, n = start_view.1, f = start_view.2, mode = %cfg.mode, "replica started");
    }
    Ok(NodeHandle {
        id: me,
        metrics,
        local_addr,
        threads,
    })
}

fn spawn(name: String, me: ReplicaId, f: impl FnOnce() + Send + 'static) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let _span = info_span!("replica", id = me.0, thread = %name).entered();
            f()
        })
        .expect("spawn replica thread")
}

/// Accepts connections. Handshakes in progress are bounded (unauthenticated peers cannot
/// exhaust threads); failures to accept or to start a thread back off instead of spinning.
fn accept_loop(sh: &Arc<Shared>, listener: TcpListener) {
    let pause = || thread::sleep(Duration::from_millis(10));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                sh.reject("accept_failed", format_args!("accept failed: {e}"));
                pause();
                continue;
            }
        };
        let limit = sh.cfg.raw.limits.connections_max as u64;
        if sh.handshakes.fetch_add(1, Ordering::Relaxed) >= limit {
            sh.handshakes.fetch_sub(1, Ordering::Relaxed);
            sh.reject(
                "too_many_handshakes",
                format_args!("{limit} handshakes in progress"),
            );
            continue;
        }
        let sh2 = sh.clone();
        let me = sh.me;
        let started = thread::Builder::new().name("conn".into()).spawn(move || {
            let _span = info_span!("replica", id = me.0, thread = "conn").entered();
            serve_connection(&sh2, stream)
        });
        if let Err(e) = started {
            sh.handshakes.fetch_sub(1, Ordering::Relaxed);
            sh.reject(
                "thread_spawn_failed",
                format_args!("cannot start a connection thread: {e}"),
            );
            pause();
        }
    }
}

/// Runs the handshake, then serves the connection as a peer or a client.
fn serve_connection(sh: &Arc<Shared>, stream: TcpStream) {
    let peer_addr = stream.peer_addr().ok();
    let me = LocalIdentity {
        role: Role::Replica(sh.me),
        key: &sh.key,
    };
    let directory = membership::Directory {
        cfg: &sh.cfg,
        roster: &sh.roster,
    };
    let handshake = tagma_net::accept(stream, &me, &directory, sh.limits);
    sh.handshakes.fetch_sub(1, Ordering::Relaxed);
    let (role, reader, writer) = match handshake {
        Ok(x) => x,
        Err(e) => {
            sh.reject(
                e.reason(),
                format_args!("handshake from {peer_addr:?}: {e}"),
            );
            return;
        }
    };
    match role {
        Role::Replica(from) => peer_reader(sh, from, reader, writer),
        Role::Client(principal) => client_connection(sh, principal, reader, writer),
    }
}

/// Reads consensus messages from peer `from`; decodes, hashes and authenticates batches here,
/// off the consensus thread.
fn peer_reader(
    sh: &Arc<Shared>,
    from: ReplicaId,
    mut reader: FrameReader,
    mut writer: FrameWriter,
) {
    sh.metrics.peer_connections.fetch_add(1, Ordering::Relaxed);
    debug!(peer = from.0, "peer connected");
    // It listens again if it restarted: our link to it need not wait out its pause.
    if let Some(wake) = sh
        .reconnect_now
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&from)
    {
        let _ = wake.try_send(());
    }
    let threads = sh.cfg.raw.limits.signature_threads;
    loop {
        let frame = match reader.read_frame() {
            Ok(f) => f,
            Err(NetError::Closed) => break,
            Err(e) => {
                sh.reject(e.reason(), format_args!("frame from replica {from}: {e}"));
                break;
            }
        };
        let msg = match PeerMessage::decode(&frame) {
            Ok(m) => m,
            Err(e) => {
                sh.reject(
                    "malformed_message",
                    format_args!("from replica {from}: {e}"),
                );
                continue;
            }
        };
        if matches!(msg, PeerMessage::ViewQuery) {
            // A joining replica asks which view is installed: answered on its connection with
            // the administrator's signed history, which it replays itself.
            let history = sh
                .roster
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .history()
                .to_vec();
            let answer = PeerMessage::ViewInfo(history).to_bytes();
            if writer.push(&answer).and_then(|()| writer.flush()).is_err() {
                break;
            }
            continue;
        }
        // Decode and hash batches, authenticate requests, here — off the consensus thread.
        let Some(input) = PeerInput::from_message(msg, |requests| {
            match sh.verifier.verify_all(requests, threads) {
                Ok(()) => true,
                Err(e) => {
                    sh.reject(
                        e.reason(),
                        format_args!("request relayed by replica {from}: {e}"),
                    );
                    false
                }
            }
        }) else {
            // A view answer on an inbound connection: only joiners' own connections get one.
            sh.reject(
                "unexpected_message",
                format_args!("a view answer from replica {from}"),
            );
            continue;
        };
        if let PeerInput::UndecodablePropose { cid, .. } = &input {
            sh.reject(
                "malformed_batch",
                format_args!("PROPOSE {cid} from replica {from}"),
            );
        }
        if sh
            .consensus_tx
            .send(ConsensusEvent::Peer { from, input })
            .is_err()
        {
            break;
        }
    }
    writer.shutdown();
    sh.metrics.peer_connections.fetch_sub(1, Ordering::Relaxed);
}

/// Starts the link to member `m` unless there is one (or it is this replica).
fn add_link(sh: &Arc<Shared>, links: &membership::PeerLinks, m: &tagma_wire::ViewMember) {
    if m.id == sh.me || links.contains(m.id) {
        return;
    }
    let Some(addr) = membership::member_addr(m) else {
        warn!(
            replica = m.id.0,
            addr = %m.addr,
            "a member's address is not IP:PORT: no link to it"
        );
        return;
    };
    start_link(
        sh,
        links,
        ReplicaInfo {
            id: m.id,
            addr,
            public_key: m.key,
            metrics_addr: None,
        },
    );
}

/// A queue and a writer thread for `peer`.
fn start_link(sh: &Arc<Shared>, links: &membership::PeerLinks, peer: ReplicaInfo) {
    let (tx, rx) = bounded::<Bytes>(sh.cfg.raw.limits.connection_queue_max);
    links.insert(peer.id, tx);
    let (wake_tx, wake_rx) = bounded::<()>(1);
    sh.reconnect_now
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(peer.id, wake_tx);
    let sh2 = sh.clone();
    // Links live as long as the replica; their threads are not joined.
    spawn(format!("peer-out-{}", peer.id), sh.me, move || {
        peer_writer(&sh2, &peer, rx, wake_rx)
    });
}

/// Keeps an outbound connection to `peer` and writes the frames queued for it, coalescing
/// everything queued into one write.
fn peer_writer(sh: &Arc<Shared>, peer: &ReplicaInfo, rx: Receiver<Bytes>, wake: Receiver<()>) {
    let me = LocalIdentity {
        role: Role::Replica(sh.me),
        key: &sh.key,
    };
    let t = &sh.cfg.raw.timeouts;
    let mut failures = 0u64;
    loop {
        let conn = tagma_net::connect(
            peer.addr,
            &me,
            Role::Replica(peer.id),
            &peer.public_key,
            sh.limits,
            Duration::from_millis(t.connect_timeout_ms),
        );
        let (_reader, mut writer) = match conn {
            Ok(c) => c,
            Err(e) => {
                failures += 1;
                if failures == 1 || failures.is_multiple_of(100) {
                    debug!(
                        peer = peer.id.0,
                        "cannot connect to replica {} at {}: {e} (retrying)", peer.id, peer.addr
                    );
                }
                if matches!(
                    e,
                    NetError::UnknownKey { .. }
                        | NetError::WrongPeer { .. }
                        | NetError::BadSignature
                ) {
                    sh.reject(
                        e.reason(),
                        format_args!("replica {} at {}: {e}", peer.id, peer.addr),
                    );
                }
                // The pause ends early when the peer connects to us (it is back).
                let _ = wake.recv_timeout(reconnect_backoff(failures, t.reconnect_delay_ms));
                continue;
            }
        };
        info!(peer = peer.id.0, "connected to replica {}", peer.id);
        failures = 0;
        // A wake-up sent while connected (the peer reconnected its own link) is stale.
        while wake.try_recv().is_ok() {}
        if write_loop(&rx, &mut writer, &sh.metrics).is_err() {
            return; // queue closed: the replica is shutting down
        }
        debug!(peer = peer.id.0, "connection to replica {} lost", peer.id);
    }
}

/// The pause after the `failures`-th failed attempt in a row to connect to a peer: 2 ms
/// after the first, doubling up to `max_ms` (`timeouts.reconnect_delay_ms`). A peer that
/// restarts (a crash, or every replica after a power cut) is listening again a few ms
/// later: the short first pauses reconnect to it almost at once, instead of up to a whole
/// `max_ms` later, and a peer that stays down costs one attempt per `max_ms`.
fn reconnect_backoff(failures: u64, max_ms: u64) -> Duration {
    const FIRST_MS: u64 = 2;
    let doublings = failures.saturating_sub(1).min(40) as u32;
    Duration::from_millis((FIRST_MS << doublings).min(max_ms))
}

/// Drains `rx` into `writer` until the connection fails (`Ok`) or the queue closes (`Err`).
/// A frame over `frame_bytes_max` cannot be sent: it is dropped and counted.
fn write_loop(rx: &Receiver<Bytes>, writer: &mut FrameWriter, metrics: &Metrics) -> Result<(), ()> {
    let push = |writer: &mut FrameWriter, frame: &Bytes| {
        if writer.push(frame).is_err() && metrics.reject("outgoing_frame_too_large") {
            warn!(
                bytes = frame.len(),
                "dropped an outgoing frame over frame_bytes_max"
            );
        }
    };
    loop {
        let first = rx.recv().map_err(|_| ())?;
        push(writer, &first);
        while writer.pending_bytes() < WRITE_COALESCE_BYTES {
            match rx.try_recv() {
                Ok(more) => push(writer, &more),
                Err(_) => break,
            }
        }
        if writer.flush().is_err() {
            writer.shutdown();
            return Ok(());
        }
    }
}

fn client_connection(
    sh: &Arc<Shared>,
    principal: u32,
    mut reader: FrameReader,
    mut writer: FrameWriter,
) {
    let open = sh
        .metrics
        .client_connections
        .fetch_add(1, Ordering::Relaxed)
        + 1;
    if open as usize > sh.cfg.raw.limits.connections_max {
        sh.metrics
            .client_connections
            .fetch_sub(1, Ordering::Relaxed);
        sh.reject(
            "too_many_connections",
            format_args!("client principal {principal}: {open} connections open"),
        );
        writer.shutdown();
        return;
    }
    let id = sh.next_conn_id.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = bounded::<Bytes>(sh.cfg.raw.limits.connection_queue_max);
    let conn = ConnHandle { id, tx };
    let me = sh.me;
    let metrics = sh.metrics.clone();
    let writer_thread = spawn(format!("client-out-{id}"), me, move || {
        let _ = write_loop(&rx, &mut writer, &metrics);
        writer.shutdown();
    });
    debug!(conn = id, principal, "client connected");
    let mut routed: HashSet<ClientId> = HashSet::new();
    let reason = loop {
        let frame = match reader.read_frame() {
            Ok(f) => f,
            Err(NetError::Closed) => break None,
            Err(e) => break Some(e),
        };
        let msg = match ClientMessage::decode(&frame) {
            Ok(m) => m,
            Err(e) => {
                sh.reject(
                    "malformed_message",
                    format_args!("from client principal {principal}: {e}"),
                );
                continue;
            }
        };
        match msg {
            ClientMessage::Request(request) => {
                sh.metrics.requests_received.fetch_add(1, Ordering::Relaxed);
                let client = request.request.client;
                if client.principal() != principal {
                    sh.reject("principal_mismatch", format_args!("connection of principal {principal} sent a request as client {client:?}"));
                    continue;
                }
                if !routed.contains(&client) {
                    if routed.len() >= CLIENTS_PER_CONNECTION_MAX {
                        sh.reject(
                            "too_many_clients",
                            format_args!("connection {id} carries {} clients", routed.len()),
                        );
                        continue;
                    }
                    routed.insert(client);
                    if sh
                        .exec_tx
                        .send(ExecEvent::Route {
                            client,
                            conn: conn.clone(),
                        })
                        .is_err()
                    {
                        break None;
                    }
                }
                if !accept_request(sh, request, &conn) {
                    break None;
                }
            }
            ClientMessage::StateQuery { nonce } => {
                if sh
                    .exec_tx
                    .send(ExecEvent::StateQuery {
                        nonce,
                        conn: conn.clone(),
                    })
                    .is_err()
                {
                    break None;
                }
            }
            ClientMessage::ViewQuery => {
                if sh
                    .exec_tx
                    .send(ExecEvent::ViewQuery { conn: conn.clone() })
                    .is_err()
                {
                    break None;
                }
            }
            ClientMessage::ViewHistoryQuery => {
                if sh
                    .exec_tx
                    .send(ExecEvent::ViewHistoryQuery { conn: conn.clone() })
                    .is_err()
                {
                    break None;
                }
            }
        }
    };
    if let Some(e) = reason {
        if e.is_disconnect() {
            // A client that exits resets its connections: normal, so counted but quiet.
            sh.metrics.reject(e.reason());
            debug!(
                reason = e.reason(),
                "client principal {principal} (connection {id}): {e}; connection closed"
            );
        } else {
            sh.reject(
                e.reason(),
                format_args!(
                    "client principal {principal} (connection {id}): {e}; connection closed"
                ),
            );
        }
    }
    let _ = sh.exec_tx.send(ExecEvent::Unroute { conn_id: id });
    drop(conn);
    let _ = writer_thread.join();
    sh.metrics
        .client_connections
        .fetch_sub(1, Ordering::Relaxed);
}

/// Authenticates a client request and hands it on. Returns false when the replica is
/// shutting down.
fn accept_request(sh: &Arc<Shared>, request: RequestEnvelope, conn: &ConnHandle) -> bool {
    let max = sh.cfg.raw.limits.request_bytes_max;
    if request.request.payload.len() > max {
        sh.reject(
            "request_too_large",
            format_args!(
                "{} bytes > request_bytes_max {max}",
                request.request.payload.len()
            ),
        );
        return true;
    }
    if request.request.kind == RequestKind::Reconfigure && sh.unreplicated {
        sh.reject(
            "reconfigure_unreplicated",
            "a view change sent to the unreplicated server, which has no view",
        );
        return true;
    }
    if request.request.kind.is_ordered() && !sh.unreplicated {
        let installed = sh
            .roster
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .view()
            .clone();
        if request.request.view < installed.id {
            // A request of an older view (its authenticator names that view's members): tell
            // the client the installed view — public, so no authentication is needed first.
            let _ = conn
                .tx
                .try_send(ReplicaMessage::CurrentView(installed).to_bytes());
            sh.metrics.reject("older_view");
            return true;
        }
    }
    match request.request.kind {
        RequestKind::Unordered => {
            if !sh.cfg.raw.cluster.readonly_requests {
                sh.reject(
                    "unordered_disabled",
                    "unordered request while readonly_requests = false",
                );
                return true;
            }
            // Unordered requests are answered only to this connection; the channel MAC
            // authenticates them, so only the principal check above applies.
            sh.exec_tx
                .send(ExecEvent::Unordered {
                    request,
                    conn: conn.clone(),
                })
                .is_ok()
        }
        // The unreplicated server executes requests in arrival order, so it verifies on the
        // connection's own thread (keeping each client's order; connections still verify in
        // parallel); a replica hands signatures to the pool, whose reordering the core undoes.
        RequestKind::Ordered | RequestKind::Reconfigure => {
            match sh.sig_pool.as_ref().filter(|_| !sh.unreplicated) {
                Some(pool) => {
                    let sh2 = sh.clone();
                    pool.submit(move |verifier| match verifier.verify(&request) {
                        Ok(()) => {
                            let _ = order(&sh2, request);
                        }
                        Err(e) => sh2.reject(
                            e.reason(),
                            format_args!(
                                "request {:?}/{}: {e}",
                                request.request.client, request.request.seq
                            ),
                        ),
                    });
                    true
                }
                None => match sh.verifier.verify(&request) {
                    Ok(()) => order(sh, request),
                    Err(e) => {
                        sh.reject(
                            e.reason(),
                            format_args!(
                                "request {:?}/{}: {e}",
                                request.request.client, request.request.seq
                            ),
                        );
                        true
                    }
                },
            }
        }
    }
}

/// Hands an authenticated ordered request to the consensus thread (or, unreplicated, straight
/// to the execution thread). False when the replica is shutting down.
fn order(sh: &Shared, request: RequestEnvelope) -> bool {
    if sh.unreplicated {
        sh.exec_tx.send(ExecEvent::Execute(request)).is_ok()
    } else {
        sh.consensus_tx
            .send(ConsensusEvent::Request(request))
            .is_ok()
    }
}

/// Where the consensus thread sends what its actions ask for.
struct Links {
    peers: membership::PeerLinks,
    exec_tx: Sender<ExecEvent>,
    /// Durable replicas only.
    storage_tx: Option<Sender<durability::StorageEvent>>,
    /// Durable replicas: this thread writes its votes itself.
    votes: Option<std::cell::RefCell<durability::VoteWriter>>,
    transfer_tx: Option<Sender<durability::TransferJob>>,
}

fn consensus_loop(
    sh: &Arc<Shared>,
    mut core: Replica,
    rx: Receiver<ConsensusEvent>,
    internal_rx: Receiver<ConsensusEvent>,
    links: &Links,
    joining: bool,
) {
    let clock = Clock::new();
    const IDLE_WAKE_MS: u64 = 100;
    const VOTE_IDLE_SYNC_MS: u64 = 10;
    if joining {
        core.start_joining(clock.now_ms());
        if !carry_out_actions(sh, &mut core, links) {
            return;
        }
    } else if links.storage_tx.is_some() {
        // Durable replicas synchronise with the others before ordering (SPEC §5).
        core.start_recovery(clock.now_ms());
        if !carry_out_actions(sh, &mut core, links) {
            return;
        }
    }
    loop {
        // A WRITE's votes are written unsynced; they are synced when the wait for the next
        // event times out (after `VOTE_IDLE_SYNC_MS`, or sooner if a core timer is due). Not
        // as soon as the queue is empty: under load the next event is usually the WRITEs
        // completing the quorum, whose ACCEPT syncs a record covering them anyway, and a sync
        // in between delayed them (measured: two vote syncs per instance, now one).
        let unsynced = links.votes.as_ref().is_some_and(|v| v.borrow().unsynced());
        let now = clock.now_ms();
        let wait_ms = core
            .next_timeout_ms()
            .map(|t| t.saturating_sub(now))
            .unwrap_or(IDLE_WAKE_MS)
            .min(if unsynced {
                VOTE_IDLE_SYNC_MS
            } else {
                IDLE_WAKE_MS
            });
        let event = crossbeam_channel::select! {
            recv(internal_rx) -> e => e.map_err(|_| RecvTimeoutError::Disconnected),
            recv(rx) -> e => e.map_err(|_| RecvTimeoutError::Disconnected),
            default(Duration::from_millis(wait_ms)) => Err(RecvTimeoutError::Timeout),
        };
        if matches!(event, Err(RecvTimeoutError::Timeout))
            && unsynced
            && !sync_votes(sh, &mut core, links)
        {
            return;
        }
        let result = match event {
            Ok(ConsensusEvent::Request(request)) => {
                let client = request.request.client;
                let result = core.handle_client_request(clock.now_ms(), request);
                if let Err(tagma_core::Rejection::WrongView { view }) = &result
                    && *view < core.view_id()
                {
                    // A request of an older view: tell its client the installed one.
                    let view = core.view();
                    if links
                        .exec_tx
                        .send(ExecEvent::CurrentView { client, view })
                        .is_err()
                    {
                        return;
                    }
                }
                result
            }
            Ok(ConsensusEvent::Peer { from, input }) => {
                core.handle_peer(clock.now_ms(), from, input)
            }
            Ok(ConsensusEvent::Checkpointed(info)) => {
                core.note_checkpoint(info);
                Ok(())
            }
            Ok(ConsensusEvent::StateDigest { cid, digest }) => {
                core.note_state_digest(cid, digest);
                Ok(())
            }
            // Handled below, after every event.
            Ok(ConsensusEvent::Durable) => Ok(()),
            Ok(ConsensusEvent::Installed { outcome, log }) => {
                // The installed state's decisions go to the log before any later instance's
                // (sent from here, in order with the appends, never from execution).
                if let (Some(event), Some(tx)) = (log, links.storage_tx.as_ref())
                    && tx.send(event).is_err()
                {
                    return;
                }
                if core.is_fetching_state()
                    && matches!(
                        outcome,
                        tagma_core::transfer::InstallOutcome::Installed { .. }
                    )
                    && let Some(ms) = core.state_transfer_elapsed_ms(clock.now_ms())
                {
                    sh.metrics.state_transfer_ms.store(ms, Ordering::Relaxed);
                }
                core.state_installed(clock.now_ms(), outcome);
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => Ok(()),
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if let Err(rejection) = result {
            // Stale messages are the normal tail of every instance: count, don't log.
            if matches!(rejection, tagma_core::Rejection::Stale { .. }) {
                sh.metrics.reject(rejection.reason());
            } else {
                sh.reject(rejection.reason(), format_args!("{rejection:?}"));
            }
        }
        if !carry_out_actions(sh, &mut core, links) {
            return;
        }
        if !feed_durable(sh, &mut core, links) {
            return;
        }
        // Timers are checked after every event, not only when the queue is idle: a steady
        // stream of messages must not starve the request timers (leader failure detection).
        let now = clock.now_ms();
        if core.next_timeout_ms().is_some_and(|t| t <= now) {
            core.handle_tick(now);
            if !carry_out_actions(sh, &mut core, links) || !feed_durable(sh, &mut core, links) {
                return;
            }
        }
    }
}

/// Storage back-pressure ([`Replica::awaits_durable`]): while the leader's next proposal
/// waits for its log, tell the storage thread to wake this thread after its next sync. The
/// flag is raised before the position is read, and the storage thread publishes the position
/// before it looks at the flag, so no sync goes unnoticed.
fn feed_durable(sh: &Arc<Shared>, core: &mut Replica, links: &Links) -> bool {
    while let Some(waited) = core.awaits_durable() {
        sh.wake_on_durable.store(true, Ordering::SeqCst);
        let below = sh.durable_below.load(Ordering::SeqCst);
        if below <= waited.0 {
            return true;
        }
        sh.wake_on_durable.store(false, Ordering::SeqCst);
        core.note_durable(tagma_wire::ConsensusId(below - 1));
        if !carry_out_actions(sh, core, links) {
            return false;
        }
    }
    true
}

/// Carries out the core's actions in order, then writes the votes they persist (synced if
/// an ACCEPT or an installed regency waits for them, and then carries out what that
/// releases); false when the replica is shutting down or cannot write its votes.
fn carry_out_actions(sh: &Arc<Shared>, core: &mut Replica, links: &Links) -> bool {
    loop {
        if !carry_out_round(sh, core, links) {
            return false;
        }
        let sync = core.awaits_vote().is_some();
        match write_votes(sh, core, links, sync) {
            Some(true) => {}
            Some(false) => return true,
            None => return false,
        }
    }
}

/// Syncs this replica's newest vote record (a WRITE's, written unsynced) and carries out
/// what that releases; false when it cannot.
fn sync_votes(sh: &Arc<Shared>, core: &mut Replica, links: &Links) -> bool {
    match write_votes(sh, core, links, true) {
        Some(true) => carry_out_actions(sh, core, links),
        Some(false) => true,
        None => false,
    }
}

/// Writes the votes collected (`VoteWriter::flush`) and tells the core what became durable:
/// `Some(true)` if a record was synced, `None` if the votes cannot be written.
fn write_votes(sh: &Arc<Shared>, core: &mut Replica, links: &Links, sync: bool) -> Option<bool> {
    let Some(votes) = &links.votes else {
        return Some(false);
    };
    let flushed = votes.borrow_mut().flush(sh, sync, core.next_cid().0);
    match flushed {
        Ok(Some(seq)) => {
            core.note_votes_durable(seq);
            Some(true)
        }
        Ok(None) => Some(false),
        Err(e) => {
            tracing::error!("{e}; this replica stops");
            None
        }
    }
}

/// Carries out the core's actions queued now, in order (votes are only collected).
fn carry_out_round(sh: &Arc<Shared>, core: &mut Replica, links: &Links) -> bool {
    let (peers, exec_tx) = (&links.peers, &links.exec_tx);
    let storage_tx = links.storage_tx.as_ref();
    while let Some(action) = core.poll_action() {
        match action {
            Action::Broadcast(msg) => {
                let body = msg.to_bytes();
                peers.for_each(|tx| send_peer(sh, tx, body.clone()));
            }
            Action::Send { to, msg } => {
                if let Some(tx) = peers.get(to) {
                    send_peer(sh, &tx, msg.to_bytes());
                }
            }
            Action::Deliver(mut decision) => {
                sh.metrics.decided_instances.fetch_add(1, Ordering::Relaxed);
                // Parallel logging: the storage thread logs the instance (with its proof)
                // while the execution thread executes it.
                if let Some(tx) = storage_tx {
                    let Some(decided) = decision.logged.take() else {
                        unreachable!("a durable replica's decisions carry their proof");
                    };
                    let event = durability::StorageEvent::Append {
                        cid: decision.cid.0,
                        decided,
                    };
                    if tx.send(event).is_err() {
                        return false;
                    }
                }
                if exec_tx.send(ExecEvent::Deliver(decision)).is_err() {
                    return false;
                }
            }
            Action::PersistVote { seq, votes } => {
                let Some(writer) = &links.votes else {
                    unreachable!("only durable replicas persist votes");
                };
                writer.borrow_mut().add(seq, &votes);
            }
            Action::ResendReply { client, seq } => {
                if exec_tx.send(ExecEvent::Resend { client, seq }).is_err() {
                    return false;
                }
            }
            Action::RegencyInstalled { regency, leader } => {
                sh.metrics
                    .regency
                    .store(u64::from(regency.0), Ordering::Relaxed);
                sh.metrics
                    .leader
                    .store(u64::from(leader.0), Ordering::Relaxed);
                info!(
                    regency = regency.0,
                    leader = leader.0,
                    "leader change: new regency installed"
                );
            }
            Action::ViewInstalled { cid, view, member } => {
                sh.metrics
                    .view
                    .store(u64::from(view.id.0), Ordering::Relaxed);
                info!(
                    cid = cid.0,
                    view = view.id.0,
                    n = view.members.len(),
                    f = view.f,
                    member,
                    "view installed"
                );
                if !member {
                    info!("this replica is not a member of the new view: it stops ordering");
                    sh.metrics.left_view.store(1, Ordering::Relaxed);
                }
                // Added members become known (their handshakes are accepted) and get links.
                sh.roster
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .install(&view);
                sh.verifier.note_view(&view);
                for m in &view.members {
                    add_link(sh, peers, m);
                }
            }
            Action::StateTransferNeeded {
                next_cid,
                known_decided,
            } => {
                if links.transfer_tx.is_none() {
                    warn!(
                        next = next_cid.0,
                        decided_elsewhere = known_decided.0,
                        "too far behind for decision forwarding, and state transfer needs durable checkpoints: set [storage] durability = \"fsync\" (or raise limits.decisions_kept)"
                    );
                }
            }
            Action::ReadChunk {
                to,
                cid,
                offset,
                len,
            } => {
                if let Some(tx) = &links.transfer_tx {
                    // Dropped when the transfer thread is busy: the fetcher asks again.
                    let _ = tx.try_send(durability::TransferJob::ReadChunk {
                        to,
                        cid: cid.0,
                        offset,
                        len,
                    });
                }
            }
            Action::ReadLog { to, from, count } => {
                if let Some(tx) = storage_tx {
                    let _ = tx.try_send(durability::StorageEvent::ReadLog {
                        to,
                        from: from.0,
                        count,
                    });
                }
            }
            Action::StoreChunk { offset, data, .. } => {
                if let Some(tx) = &links.transfer_tx
                    && tx
                        .send(durability::TransferJob::StoreChunk { offset, data })
                        .is_err()
                {
                    return false;
                }
            }
            Action::CheckpointNow { cid } => {
                if exec_tx
                    .send(ExecEvent::CheckpointNow { cid: cid.0 })
                    .is_err()
                {
                    return false;
                }
            }
            Action::DigestState { cid } => {
                if exec_tx.send(ExecEvent::DigestState { cid: cid.0 }).is_err() {
                    return false;
                }
            }
            Action::InstallState(state) => {
                // Through the transfer thread, after the chunks it is still writing.
                if let Some(tx) = &links.transfer_tx
                    && tx.send(durability::TransferJob::Install(state)).is_err()
                {
                    return false;
                }
            }
        }
    }
    true
}

fn send_peer(sh: &Shared, tx: &Sender<Bytes>, body: Bytes) {
    if let Err(TrySendError::Full(_)) = tx.try_send(body) {
        sh.metrics
            .peer_messages_dropped
            .fetch_add(1, Ordering::Relaxed);
    }
}

fn execution_loop<S: Service>(
    sh: &Arc<Shared>,
    mut executor: Executor<S>,
    rx: Receiver<ExecEvent>,
    mut durable: Option<durability::DurableExec>,
) {
    let clock = Clock::new();
    let mut routes: HashMap<ClientId, ConnHandle> = HashMap::new();
    // Unreplicated mode: the last sequence number executed per client (drops retransmissions).
    let mut last_executed: HashMap<ClientId, RequestSeq> = HashMap::new();
    let send = |conn: &ConnHandle, msg: ReplicaMessage| {
        let counter = match conn.tx.try_send(msg.to_bytes()) {
            Ok(()) => &sh.metrics.replies_sent,
            Err(_) => &sh.metrics.replies_dropped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    };
    let send_replies = |routes: &HashMap<ClientId, ConnHandle>, replies: Vec<tagma_wire::Reply>| {
        sh.metrics
            .executed_requests
            .fetch_add(replies.len() as u64, Ordering::Relaxed);
        for reply in replies {
            match routes.get(&reply.client) {
                Some(conn) => send(conn, ReplicaMessage::Reply(reply)),
                None => {
                    // The client is connected elsewhere or gone; it will retransmit.
                    sh.metrics.replies_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    };
    // The signed view history joining replicas are answered with follows the executed view.
    let mut published_view = None;
    let publish = |executor: &Executor<S>, published: &mut Option<tagma_wire::ViewId>| {
        let current = executor.members().map(|v| v.id);
        if current != *published {
            sh.roster
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .set_history(executor.view_history().to_vec());
            *published = current;
        }
    };
    loop {
        // Before every event, and at least every 100 ms when idle: a change executed by the
        // last event before a pause is published too.
        publish(&executor, &mut published_view);
        let event = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match event {
            ExecEvent::Route { client, conn } => {
                // Connection ids only grow: a late route from an older connection of the same
                // client must not replace the newer one.
                if routes.get(&client).is_none_or(|c| c.id <= conn.id) {
                    routes.insert(client, conn);
                }
            }
            ExecEvent::Unroute { conn_id } => routes.retain(|_, c| c.id != conn_id),
            ExecEvent::Deliver(decision) => {
                let cid = decision.cid.0;
                if durable
                    .as_ref()
                    .is_some_and(|d| d.installed_through.is_some_and(|t| cid <= t))
                {
                    // Decided while this replica fetched state; the state covers it.
                    continue;
                }
                let replies = executor.execute_batch(decision.cid, &decision.batch);
                sh.metrics
                    .executed_instances
                    .store(executor.executed_instances(), Ordering::Relaxed);
                // Durable replicas: the replies leave at once. The decision is on the disks of
                // the replicas that accepted it (each synced its vote before its ACCEPT), so
                // a crash of every replica decides this instance again with the same value;
                // the storage thread logs it meanwhile (parallel logging).
                if let Some(d) = durable.as_ref() {
                    d.maybe_checkpoint(cid, &executor);
                }
                send_replies(&routes, replies);
            }
            ExecEvent::CheckpointNow { cid } => {
                if let Some(d) = durable.as_ref() {
                    d.checkpoint_now(cid, &executor);
                }
            }
            ExecEvent::DigestState { cid } => {
                if let Some(d) = durable.as_ref() {
                    d.digest_state(cid, &executor);
                }
            }
            ExecEvent::Install(state) => {
                let Some(d) = durable.as_mut() else {
                    continue;
                };
                let started = Instant::now();
                let (outcome, log) = match d.install(&mut executor, &state) {
                    Ok(done) => done,
                    Err(fatal) => {
                        // The executor may hold a state that is not durable: stop rather
                        // than answer from it.
                        tracing::error!("{fatal}; this replica stops");
                        return;
                    }
                };
                sh.metrics
                    .executed_instances
                    .store(executor.executed_instances(), Ordering::Relaxed);
                if let tagma_core::transfer::InstallOutcome::Installed { .. } = &outcome {
                    sh.metrics.state_transfers.fetch_add(1, Ordering::Relaxed);
                    if state.repair {
                        sh.metrics.state_repaired.fetch_add(1, Ordering::Relaxed);
                    }
                    sh.metrics
                        .state_install_ms
                        .store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
                if sh
                    .internal_tx
                    .send(ConsensusEvent::Installed { outcome, log })
                    .is_err()
                {
                    return;
                }
            }
            ExecEvent::Execute(request) => {
                let (client, seq) = (request.request.client, request.request.seq);
                if last_executed.get(&client).is_some_and(|last| seq <= *last) {
                    // A retransmission: answer from the cache, never execute twice.
                    if let (Some(reply), Some(conn)) =
                        (executor.cached_reply(client, seq), routes.get(&client))
                    {
                        sh.metrics.replies_resent.fetch_add(1, Ordering::Relaxed);
                        send(conn, ReplicaMessage::Reply(reply));
                    }
                    continue;
                }
                last_executed.insert(client, seq);
                let cid = ConsensusId(executor.executed_instances());
                let batch = Batch {
                    timestamp_ms: clock.now_ms(),
                    seed: cid.0,
                    requests: vec![request],
                };
                let replies = executor.execute_batch(cid, &batch);
                sh.metrics.decided_instances.fetch_add(1, Ordering::Relaxed);
                send_replies(&routes, replies);
            }
            ExecEvent::CurrentView { client, view } => {
                if let Some(conn) = routes.get(&client) {
                    send(conn, ReplicaMessage::CurrentView(view));
                }
            }
            ExecEvent::Resend { client, seq } => {
                sh.metrics.reject("replayed_request");
                if let (Some(reply), Some(conn)) =
                    (executor.cached_reply(client, seq), routes.get(&client))
                {
                    sh.metrics.replies_resent.fetch_add(1, Ordering::Relaxed);
                    send(conn, ReplicaMessage::Reply(reply));
                }
            }
            ExecEvent::Unordered { request, conn } => {
                let r = &request.request;
                let reply = executor.execute_unordered(r.client, r.seq, &r.payload, clock.now_ms());
                sh.metrics
                    .unordered_executed
                    .fetch_add(1, Ordering::Relaxed);
                send(&conn, ReplicaMessage::Reply(reply));
            }
            ExecEvent::StateQuery { nonce, conn } => {
                let info = StateInfo {
                    nonce,
                    replica: sh.me,
                    executed_instances: executor.executed_instances(),
                    executed_requests: executor.executed_requests(),
                    state_digest: executor.state_digest(),
                };
                send(&conn, ReplicaMessage::StateInfo(info));
            }
            ExecEvent::ViewQuery { conn } => {
                // The unreplicated server has no view to report.
                if let Some(view) = executor.members() {
                    send(&conn, ReplicaMessage::CurrentView(view.clone()));
                }
            }
            ExecEvent::ViewHistoryQuery { conn } => {
                if executor.members().is_some() {
                    let history = executor.view_history().to_vec();
                    send(&conn, ReplicaMessage::ViewHistory(history));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_pauses_start_short_and_double_up_to_the_configured_delay() {
        let pauses: Vec<u64> = (1..=9)
            .map(|n| reconnect_backoff(n, 100).as_millis() as u64)
            .collect();
        assert_eq!(pauses, [2, 4, 8, 16, 32, 64, 100, 100, 100]);
        // No overflow after any number of failures; a delay below 2 ms is kept.
        assert_eq!(reconnect_backoff(u64::MAX, 100), Duration::from_millis(100));
        assert_eq!(reconnect_backoff(1, 1), Duration::from_millis(1));
    }
}
