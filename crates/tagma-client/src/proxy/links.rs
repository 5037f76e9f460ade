//! The replicas a proxy talks to: one [`Link`] per replica (the queue of its connection's
//! writer thread) and the [`Members`] of the view requests go in (links, authenticator,
//! reply quorums).

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use tagma_config::config::ReplicaInfo;
use tagma_crypto::{Authenticator, IdentityKey};
use tagma_net::NetError;
use tagma_wire::{Refusal, ReplicaId, ViewId};

use crate::error::ClientError;
use crate::locking::lock;

/// Frames queued per replica link; beyond it frames are dropped (retransmission resends).
pub(super) const LINK_QUEUE_MAX: usize = 1024;
/// A writer coalesces queued frames into writes of about this many bytes.
pub(super) const LINK_COALESCE_BYTES: usize = 256 << 10;

/// Where the outcome of a connection attempt goes: the replica and whether it connected.
pub(super) type ConnectWaiter = crossbeam_channel::Sender<(ReplicaId, Result<(), ConnectFailure>)>;

/// Why a link did not connect.
#[derive(Clone, Debug)]
pub(super) struct ConnectFailure {
    pub(super) replica: ReplicaId,
    pub(super) addr: SocketAddr,
    pub(super) cause: String,
    /// The replica refused this client's key.
    pub(super) refused_key: bool,
}

impl ConnectFailure {
    pub(super) fn new(info: &ReplicaInfo, error: &NetError) -> Self {
        ConnectFailure {
            replica: info.id,
            addr: info.addr,
            cause: error.to_string(),
            refused_key: matches!(error, NetError::Refused(Refusal::UnknownKey)),
        }
    }

    /// An attempt still in progress (it goes on in the background).
    pub(super) fn pending(info: &ReplicaInfo) -> Self {
        ConnectFailure {
            replica: info.id,
            addr: info.addr,
            cause: "no answer to the handshake yet".into(),
            refused_key: false,
        }
    }
}

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "replica {} at {}: {}",
            self.replica, self.addr, self.cause
        )
    }
}

pub(super) struct Link {
    pub(super) info: ReplicaInfo,
    /// The queue of the current connection's writer thread, tagged with the connection's
    /// generation so that the threads of an older connection cannot tear down a newer one.
    /// Callers never write to a socket themselves: a replica that stops reading fills only
    /// its own queue (frames beyond it are dropped; retransmission covers them).
    pub(super) writer: Mutex<Option<(u64, crossbeam_channel::Sender<Bytes>)>>,
    pub(super) generation: AtomicU64,
    /// One more than the generation of the last connection that carried a request of this
    /// client (0: none): the replica routes the client's replies to the connection its
    /// requests arrive on, so every new connection carries one before requests go to the
    /// leader alone.
    routed: AtomicU64,
    pub(super) last_attempt: Mutex<Option<Instant>>,
    /// `Some` while a connection attempt runs (on its own thread), with who waits for its
    /// outcome; at most one attempt per link at a time.
    pub(super) connecting: Mutex<Option<Vec<ConnectWaiter>>>,
}

impl Link {
    pub(super) fn new(info: ReplicaInfo) -> Arc<Link> {
        Arc::new(Link {
            info,
            writer: Mutex::new(None),
            generation: AtomicU64::new(0),
            routed: AtomicU64::new(0),
            last_attempt: Mutex::new(None),
            connecting: Mutex::new(None),
        })
    }

    /// Whether a connection is up (its writer thread takes frames).
    pub(super) fn is_connected(&self) -> bool {
        lock(&self.writer).is_some()
    }

    /// Queues `frame` without blocking.
    pub(super) fn send(&self, frame: &Bytes) {
        self.send_if(frame, false);
    }

    /// Queues `frame` if the current connection has not carried a request of this client
    /// yet (see `routed`).
    pub(super) fn send_if_unrouted(&self, frame: &Bytes) {
        self.send_if(frame, true);
    }

    fn send_if(&self, frame: &Bytes, only_unrouted: bool) {
        let mut guard = lock(&self.writer);
        let Some((generation, tx)) = guard.as_ref() else {
            return;
        };
        let mark = generation + 1;
        if only_unrouted && self.routed.load(Ordering::Relaxed) == mark {
            return;
        }
        match tx.try_send(frame.clone()) {
            Ok(()) => self.routed.store(mark, Ordering::Relaxed),
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => *guard = None,
            Err(crossbeam_channel::TrySendError::Full(_)) => {}
        }
    }

    /// Forgets connection `generation` if it is still the current one.
    pub(super) fn drop_connection(&self, generation: u64) {
        let mut guard = lock(&self.writer);
        if guard.as_ref().is_some_and(|(g, _)| *g == generation) {
            *guard = None;
        }
    }

    /// Closes the connection (its writer thread ends and shuts the socket down).
    pub(super) fn close(&self) {
        drop(lock(&self.writer).take());
    }
}

/// The replicas of the view requests go in: a link to each, the request authenticator for
/// them (one MAC per member, ascending id) and the reply quorums. Replaced as a whole when
/// the client moves to a view with other members or another f.
pub(super) struct Members {
    pub(super) view: ViewId,
    pub(super) links: Vec<Arc<Link>>,
    pub(super) auth: Authenticator,
    pub(super) ordered_quorum: usize,
    pub(super) unordered_quorum: usize,
    /// Members whose reports of a new leader the proxy believes (f + 1 in BFT, one in CFT).
    pub(super) hint_quorum: usize,
}

impl Members {
    pub(super) fn contains(&self, id: ReplicaId) -> bool {
        self.links.iter().any(|l| l.info.id == id)
    }
}

/// The [`Members`] of `view` for a client with `key` (needing `reply_quorum` matching
/// replies to an ordered request, if given, else the cluster's quorum); links of `old` to the same replica
/// (same address and key) are kept, with their connections. Members whose address is not
/// IP:PORT cannot be reached (they still count in the quorums).
pub(super) fn members_of(
    key: &IdentityKey,
    mode: tagma_config::Mode,
    readonly: bool,
    reply_quorum: Option<usize>,
    view: &tagma_wire::View,
    old: Option<&Members>,
) -> Result<Members, ClientError> {
    let keys: Vec<_> = view.members.iter().map(|m| m.key).collect();
    let auth = Authenticator::new(key, &keys).map_err(|e| ClientError::Key(e.to_string()))?;
    let links = view
        .members
        .iter()
        .filter_map(|m| {
            let addr = m.addr.parse().ok()?;
            let same = |l: &&Arc<Link>| {
                l.info.id == m.id && l.info.addr == addr && l.info.public_key == m.key
            };
            Some(match old.and_then(|o| o.links.iter().find(same)) {
                Some(link) => link.clone(),
                None => Link::new(ReplicaInfo {
                    id: m.id,
                    addr,
                    public_key: m.key,
                    metrics_addr: None,
                }),
            })
        })
        .collect();
    let q = tagma_config::Quorums::new(mode, view.members.len(), view.f as usize);
    Ok(Members {
        view: view.id,
        links,
        auth,
        ordered_quorum: reply_quorum.unwrap_or(q.reply_quorum(readonly)),
        unordered_quorum: q.unordered_reply_quorum(),
        hint_quorum: match mode {
            tagma_config::Mode::Bft => view.f as usize + 1,
            tagma_config::Mode::Cft => 1,
        },
    })
}

pub(super) fn send_all(members: &Members, frame: &Bytes) {
    for link in &members.links {
        link.send(frame);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Members `ids` of view 0 at unreachable addresses, believing `hint_quorum` reports.
    pub(in crate::proxy) fn members_with(ids: &[u32], hint_quorum: usize) -> Members {
        let links = (ids.iter())
            .map(|&id| {
                Link::new(ReplicaInfo {
                    id: ReplicaId(id),
                    addr: "127.0.0.1:9".parse().expect("address"),
                    public_key: tagma_wire::PublicKey([id as u8; 32]),
                    metrics_addr: None,
                })
            })
            .collect();
        Members {
            view: ViewId(0),
            links,
            auth: Authenticator { keys: Vec::new() },
            ordered_quorum: hint_quorum,
            unordered_quorum: hint_quorum,
            hint_quorum,
        }
    }
}
