//! What the runtime's threads share: the node-wide state ([`Shared`]), the clock that stamps
//! the core's inputs, and the events that travel on the consensus and execution queues.

use std::{
    collections::HashMap,
    sync::{Arc, atomic::AtomicU64},
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use crossbeam_channel::Sender;
use tagma_core::{Decision, PeerInput, ValidConfig};
use tagma_crypto::IdentityKey;
use tagma_net::NetLimits;
use tagma_wire::{ClientId, ReplicaId, RequestEnvelope, RequestSeq};
use tracing::{debug, warn};

use crate::{
    auth::{RequestVerifier, SignaturePool},
    membership,
    metrics::Metrics,
    storage,
};

/// A client connection's outbound queue.
#[derive(Clone)]
pub(crate) struct ConnHandle {
    pub(crate) id: u64,
    pub(crate) tx: Sender<Bytes>,
}

pub(crate) enum ConsensusEvent {
    Request(RequestEnvelope),
    Peer {
        from: ReplicaId,
        input: PeerInput,
    },
    /// A durable checkpoint was written (offered to replicas that need state).
    Checkpointed(tagma_wire::CheckpointInfo),
    /// The digest of the state after an instance, for the state vote (`Action::DigestState`).
    StateDigest {
        cid: tagma_wire::ConsensusId,
        digest: tagma_wire::Digest,
    },
    /// The storage thread flushed the log while the leader's next proposal waited for it (the
    /// position itself is read from `Shared::durable_below`).
    Durable,
    /// What a log read for a peer did not use of its answer budget (`Input::LogServed`).
    LogServed {
        to: ReplicaId,
        unused: tagma_core::Allowance,
    },
    /// The service's next due time after the execution of `executed_through`
    /// (`Input::ServiceDue`: the leader orders a time-only batch when it passes).
    ServiceDue {
        executed_through: Option<tagma_wire::ConsensusId>,
        due_ms: Option<u64>,
    },
    /// The execution thread's verdict on a fetched state, with what the storage thread must
    /// log for it.
    Installed {
        outcome: tagma_core::transfer::InstallOutcome,
        log: Option<storage::StorageEvent>,
    },
}

pub(crate) enum ExecEvent {
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
    /// The fresh checkpoint a peer the state vote contradicted repairs from (`Action::CheckpointNow`).
    CheckpointNow {
        cid: u64,
    },
    /// The start-up synchronisation's state vote: the state's digest (`Action::DigestState`).
    DigestState {
        cid: u64,
    },
}

/// Wall-clock milliseconds that never go backwards (monotonic clock offset from the wall
/// clock at start).
#[derive(Clone, Copy)]
pub(crate) struct Clock {
    pub(crate) start: Instant,
    pub(crate) base_ms: u64,
}

impl Clock {
    pub(crate) fn new() -> Self {
        let base_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Clock {
            start: Instant::now(),
            base_ms,
        }
    }
    pub(crate) fn now_ms(&self) -> u64 {
        self.base_ms + self.start.elapsed().as_millis() as u64
    }
}

/// What every network thread shares.
pub(crate) struct Shared {
    pub(crate) me: ReplicaId,
    pub(crate) cfg: Arc<ValidConfig>,
    pub(crate) key: Arc<IdentityKey>,
    /// The replicas known (handshakes) and the installed view (answered to joiners).
    pub(crate) roster: membership::SharedRoster,
    pub(crate) limits: NetLimits,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) verifier: Arc<RequestVerifier>,
    pub(crate) sig_pool: Option<SignaturePool>,
    pub(crate) consensus_tx: Sender<ConsensusEvent>,
    /// The replica's own threads' events for the consensus thread (checkpoints written,
    /// installed states): a channel of their own, so that the execution thread never waits
    /// behind peer traffic while the consensus thread waits for it.
    pub(crate) internal_tx: Sender<ConsensusEvent>,
    pub(crate) exec_tx: Sender<ExecEvent>,
    pub(crate) next_conn_id: AtomicU64,
    /// Connections accepted whose handshake has not finished (bounded by `connections_max`).
    pub(crate) handshakes: AtomicU64,
    /// Unreplicated mode (the benchmarks' baseline): ordered requests bypass consensus.
    pub(crate) unreplicated: bool,
    /// Every instance below this one is flushed to the log (0: none yet); only grows.
    pub(crate) durable_below: AtomicU64,
    /// Set by the consensus thread while the leader's proposal waits for the log: the
    /// storage thread then sends `ConsensusEvent::Durable` after its flush.
    pub(crate) wake_on_durable: std::sync::atomic::AtomicBool,
    /// Fault injection for tests (`[testing] stall_file`): the flushes it holds wait.
    pub(crate) stall: crate::storage::FlushStall,
    /// Per peer, wakes its outbound link's writer out of a reconnection pause: sent when
    /// that peer connects to us, since it is then listening again. Links are never removed
    /// (a removal must also drop the writer, whose wait would otherwise end at once).
    pub(crate) reconnect_now: std::sync::Mutex<HashMap<ReplicaId, Sender<()>>>,
}

impl Shared {
    /// Counts a rejection and logs it: loudly the first time per reason, quietly after.
    pub(crate) fn reject(&self, reason: &'static str, detail: impl std::fmt::Display) {
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

/// Renames the calling thread (what `top -H`, `perf` and debuggers show) once it knows what it
/// serves: a connection thread is started before its handshake says whether a client or a
/// peer is on the other end. Linux keeps the first 15 bytes; a failure changes nothing else.
pub(crate) fn name_this_thread(name: &str) {
    let mut bytes: Vec<u8> = name.bytes().filter(|b| *b != 0).take(15).collect();
    bytes.push(0);
    if let Ok(name) = std::ffi::CStr::from_bytes_with_nul(&bytes) {
        let _ = rustix::thread::set_name(name);
    }
}

/// Spawns one of the replica's threads, named, inside the replica's tracing span.
pub(crate) fn spawn(
    name: String,
    me: ReplicaId,
    f: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let _span = tracing::info_span!("replica", id = me.0, thread = %name).entered();
            f()
        })
        .expect("spawn replica thread")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_connection_thread_takes_the_name_of_what_it_serves() {
        let comm = std::thread::spawn(|| {
            super::name_this_thread("peer-in-3-and-more-than-fifteen-bytes");
            let tid = rustix::thread::gettid().as_raw_nonzero();
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap()
        })
        .join()
        .unwrap();
        // Linux keeps 15 bytes of a thread's name.
        assert_eq!(comm.trim_end(), "peer-in-3-and-m");
    }
}
