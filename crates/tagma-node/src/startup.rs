//! Start-up: builds a replica (or an unreplicated server) from its configuration — local
//! recovery from its disk, the core with how it starts, the links to its peers — and spawns
//! its threads.

use std::{
    collections::HashMap,
    net::TcpListener,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use crossbeam_channel::bounded;
use tagma_core::{
    Replica, ReplicaParams, Start, ValidConfig,
    config::{Durability, ReplicaInfo},
};
use tagma_crypto::IdentityKey;
use tagma_exec::{Executor, Service};
use tagma_net::NetLimits;
use tagma_storage::{Checkpoints, MemoryCheckpoints, MemoryLog, RecordLog};
use tagma_wire::{ReplicaId, ViewId};
use tracing::info;

use crate::{
    Joining, NodeError, NodeHandle,
    auth::{RequestVerifier, SignaturePool},
    client_link::accept_loop,
    consensus_thread::{Links, consensus_loop},
    execution_thread::execution_loop,
    membership, metrics,
    metrics::Metrics,
    peer_link::{add_link, start_link},
    shared::{Clock, Shared, spawn},
    storage,
};

/// `data_dir`: `None` runs the unreplicated baseline. `join`: the view that added `me`, for a
/// replica the configuration does not list.
pub(crate) fn start_node<S: Service>(
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
    if let Some(first) = params.members.first() {
        // Regency 0's leader until the core installs another regency.
        metrics.leader.store(u64::from(first.0), Ordering::Relaxed);
    }
    // Durability: recover before anything else runs.
    let recovered = match &data_dir {
        Some(dir) if cfg.raw.storage.durability == Durability::Fsync => Some(
            storage::recover_or_quarantine(&cfg, dir, &mut executor, &metrics)?,
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
        stall: match (&data_dir, &recovered) {
            (Some(dir), Some(_)) => storage::FlushStall::new(&cfg.raw.testing, dir),
            _ => storage::FlushStall::none(),
        },
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
    let mut exec_storage = None;
    let mut votes = None;
    let clock = Clock::new();
    if !unreplicated {
        // Where the log and checkpoints live: the disk (recovered above), or memory, where a
        // replica without a disk still serves and fetches state.
        let (start, log, store): (Start, Box<dyn RecordLog>, Arc<dyn Checkpoints>) = match recovered
        {
            Some(rec) => {
                // A replica that was added and has nothing yet fetches everything first.
                let joining = join.is_some() && rec.last.is_none() && rec.checkpoint.is_none();
                let logged_below = rec.last.map_or(0, |c| c.0 + 1);
                let writer = storage::VoteWriter::new(rec.vote_store, &rec.votes, logged_below)
                    .map_err(|reason| NodeError::Recovery {
                        dir: data_dir.clone().unwrap_or_default(),
                        reason,
                    })?;
                votes = Some(std::cell::RefCell::new(writer));
                let start = if joining {
                    Start::Joining
                } else {
                    Start::Recovered(tagma_core::Recovered {
                        resume: rec.last.map(|last| tagma_core::Resume {
                            last,
                            timestamp_ms: executor.last_timestamp_ms(),
                            sessions: executor.sessions(),
                            recent: rec.recent,
                            // Views changed before the crash are in the recovered state.
                            view: executor.members().cloned(),
                        }),
                        checkpoints: rec.checkpoint.into_iter().collect(),
                        votes: rec.votes,
                    })
                };
                (start, rec.log, rec.store)
            }
            None => {
                info!("durability = \"none\": the log and checkpoints are kept in memory");
                let start = if join.is_some() {
                    Start::Joining
                } else {
                    Start::Fresh
                };
                (
                    start,
                    Box::new(MemoryLog::new()),
                    Arc::new(MemoryCheckpoints::new()),
                )
            }
        };
        let (tx, rx) = bounded(lim.execution_queue_max);
        let (ckp_tx, ckp_rx) = bounded(1);
        let (xfer_tx, xfer_rx) = bounded(lim.connection_queue_max);
        let (sh, tx2) = (shared.clone(), tx.clone());
        let links = peer_links.clone();
        threads.push(spawn("storage".into(), me, move || {
            storage::storage_loop(&sh, log, rx, links)
        }));
        let (sh, ckp_store) = (shared.clone(), store.clone());
        threads.push(spawn("checkpoint".into(), me, move || {
            storage::checkpoint_loop(&sh, ckp_store.as_ref(), ckp_rx, tx2)
        }));
        let (sh, xfer_store, links) = (shared.clone(), store.clone(), peer_links.clone());
        let exec_tx3 = exec_tx.clone();
        threads.push(spawn("transfer".into(), me, move || {
            storage::transfer_loop(&sh, xfer_store.as_ref(), xfer_rx, links, exec_tx3)
        }));
        exec_storage = Some(storage::ExecStorage {
            consensus_tx: shared.internal_tx.clone(),
            store,
            checkpoint_tx: ckp_tx,
            index: stagger.0,
            n: stagger.1,
            period: cfg.raw.storage.checkpoint_period,
            last_queued: std::cell::Cell::new(None),
        });
        let core = Replica::new(params, (*shared.key).clone(), start, clock.now_ms());
        let sh = shared.clone();
        threads.push(spawn("consensus".into(), me, move || {
            let links = Links {
                peers: peer_links,
                exec_tx,
                storage_tx: tx,
                votes,
                transfer_tx: xfer_tx,
                awaited_log: std::cell::Cell::new(None),
            };
            consensus_loop(&sh, core, consensus_rx, internal_rx, &links, &clock)
        }));
    }
    let sh = shared.clone();
    threads.push(spawn("execution".into(), me, move || {
        execution_loop(&sh, executor, exec_rx, exec_storage)
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
