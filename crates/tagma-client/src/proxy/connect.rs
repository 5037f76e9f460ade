//! Connecting to the replicas: each connection attempt (TCP, then the authenticated
//! handshake) runs on its own thread, so a replica that accepts connections but never
//! answers (a stopped process) holds up neither the proxy's start nor its calls; the reader
//! and writer threads of each connection.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_crypto::IdentityKey;
use tagma_net::{FrameReader, FrameWriter, LocalIdentity, NetError, NetLimits};
use tagma_wire::{Decode, ReplicaId, ReplicaMessage, RequestKind, Role};
use tracing::debug;

use super::Inner;
use super::links::{
    ConnectFailure, ConnectWaiter, LINK_COALESCE_BYTES, LINK_QUEUE_MAX, Link, Members,
};
use crate::error::ClientError;
use crate::locking::lock;

/// How long [`Inner::connect_all`] waits for the other replicas once a reply quorum is
/// connected.
const CONNECT_GRACE: Duration = Duration::from_millis(20);

/// What a connection attempt needs, copied out of the proxy so that the attempt holds no
/// reference to it while it waits on the network.
struct Dialer {
    key: IdentityKey,
    principal: u32,
    limits: NetLimits,
    connect_timeout: Duration,
}

impl Dialer {
    fn dial(&self, link: &Link) -> Result<(FrameReader, FrameWriter), NetError> {
        let me = LocalIdentity {
            role: Role::Client(self.principal),
            key: &self.key,
        };
        tagma_net::connect(
            link.info.addr,
            &me,
            Role::Replica(link.info.id),
            &link.info.public_key,
            self.limits,
            self.connect_timeout,
        )
    }
}

impl Inner {
    /// Connects to every member not connected yet, each on its own thread, and waits until
    /// every attempt ended, or a reply quorum of them is connected (then at most
    /// [`CONNECT_GRACE`] more, so that in a healthy cluster the first requests reach every
    /// replica), or the longest an attempt can take passed. Returns how many are connected
    /// and why the others are not (attempts still running go on in the background, and their
    /// links join when they connect).
    pub(super) fn connect_all(self: &Arc<Self>, members: &Members) -> (usize, Vec<ConnectFailure>) {
        let (tx, rx) = crossbeam_channel::bounded(members.links.len());
        for link in &members.links {
            self.start_connect(link, Some(tx.clone()));
        }
        drop(tx);
        let mut deadline = Instant::now()
            + self.connect_timeout
            + self.limits.handshake_timeout
            + Duration::from_millis(100);
        let mut connected = 0;
        let mut failed: BTreeMap<ReplicaId, ConnectFailure> = BTreeMap::new();
        while connected + failed.len() < members.links.len() {
            match rx.recv_deadline(deadline) {
                Ok((_, Ok(()))) => {
                    connected += 1;
                    if connected == members.ordered_quorum {
                        deadline = deadline.min(Instant::now() + CONNECT_GRACE);
                    }
                }
                Ok((id, Err(failure))) => {
                    failed.insert(id, failure);
                }
                Err(_) => break,
            }
        }
        if connected < members.ordered_quorum {
            for link in &members.links {
                if !link.is_connected() && !failed.contains_key(&link.info.id) {
                    failed.insert(link.info.id, ConnectFailure::pending(&link.info));
                }
            }
        }
        (connected, failed.into_values().collect())
    }

    /// Starts connecting `link` on its own thread, unless it is connected or an attempt
    /// runs; `waiter`, if any, gets the outcome (at once when connected already).
    pub(super) fn start_connect(self: &Arc<Self>, link: &Arc<Link>, waiter: Option<ConnectWaiter>) {
        if link.is_connected() {
            if let Some(w) = waiter {
                let _ = w.send((link.info.id, Ok(())));
            }
            return;
        }
        {
            let mut connecting = lock(&link.connecting);
            if let Some(waiters) = connecting.as_mut() {
                waiters.extend(waiter);
                return;
            }
            *connecting = Some(waiter.into_iter().collect());
        }
        *lock(&link.last_attempt) = Some(Instant::now());
        let dialer = Dialer {
            key: self.key.clone(),
            principal: self.client.principal(),
            limits: self.limits,
            connect_timeout: self.connect_timeout,
        };
        let weak = Arc::downgrade(self);
        let spawned = thread::Builder::new()
            .name(format!("tagma-client-c{}", link.info.id.0))
            .spawn({
                let link = link.clone();
                move || {
                    let result = dialer.dial(&link).and_then(|(reader, writer)| {
                        let Some(inner) = weak.upgrade() else {
                            writer.shutdown();
                            return Err(NetError::Closed);
                        };
                        inner.attach(&link, reader, writer)
                    });
                    finish_attempt(&link, result);
                }
            });
        if let Err(e) = spawned {
            finish_attempt(link, Err(NetError::Io(e)));
        }
    }

    /// Makes a fresh connection `link`'s: starts its reader and writer threads, then sends
    /// it the ordered calls in flight. A replica that restarted lost the requests it had not
    /// ordered yet: they go to it again now rather than at their next retransmission (after
    /// a restart of every replica, that would be the first time any replica hears them
    /// again).
    fn attach(
        self: &Arc<Self>,
        link: &Arc<Link>,
        reader: FrameReader,
        writer: FrameWriter,
    ) -> Result<(), NetError> {
        let generation = link.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = crossbeam_channel::bounded::<Bytes>(LINK_QUEUE_MAX);
        *lock(&link.writer) = Some((generation, tx));
        let weak = Arc::downgrade(self);
        let id = link.info.id;
        thread::Builder::new()
            .name(format!("tagma-client-w{}", id.0))
            .spawn({
                let (weak, link) = (weak.clone(), link.clone());
                move || writer_loop(weak, link, generation, rx, writer)
            })
            .map_err(NetError::Io)?;
        let reader_link = link.clone();
        thread::Builder::new()
            .name(format!("tagma-client-r{}", id.0))
            .spawn(move || reader_loop(weak, reader_link, id, generation, reader))
            .map_err(NetError::Io)?;
        // The proxy may have closed, or a view change dropped this link, while it connected:
        // close it rather than keep a connection nobody uses.
        if self.closed.load(Ordering::Relaxed)
            || !self.members().links.iter().any(|l| Arc::ptr_eq(l, link))
        {
            link.close();
            return Err(NetError::Closed);
        }
        let frames: Vec<Bytes> = lock(&self.calls)
            .iter()
            .filter(|(key, _)| key.0 != RequestKind::Unordered)
            .map(|(_, call)| call.frame.clone())
            .collect();
        for frame in &frames {
            link.send(frame);
        }
        Ok(())
    }

    /// The error of a proxy that connected to `connected` replicas, fewer than the `needed`
    /// reply quorum: the replicas do not know its key when any refused it for that (the fix
    /// is the key, not the replicas), otherwise the cluster is unreachable.
    pub(super) fn too_few_connected(
        &self,
        connected: usize,
        needed: usize,
        failures: Vec<ConnectFailure>,
    ) -> ClientError {
        let refused: Vec<String> = failures
            .iter()
            .filter(|f| f.refused_key)
            .map(|f| f.replica.to_string())
            .collect();
        if !refused.is_empty() {
            return ClientError::UnknownKey {
                principal: self.client.principal(),
                key: self.key.public().to_hex(),
                refused_by: refused.join(", "),
            };
        }
        ClientError::Unreachable {
            connected,
            needed,
            details: failures
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// Ends `link`'s connection attempt: its waiters get the outcome.
fn finish_attempt(link: &Link, result: Result<(), NetError>) {
    let result = result.map_err(|e| {
        debug!("connection to replica {} failed: {e}", link.info.id);
        ConnectFailure::new(&link.info, &e)
    });
    let waiters = lock(&link.connecting).take().unwrap_or_default();
    for waiter in waiters {
        let _ = waiter.send((link.info.id, result.clone()));
    }
}

fn reader_loop(
    inner: Weak<Inner>,
    link: Arc<Link>,
    from: ReplicaId,
    generation: u64,
    mut reader: FrameReader,
) {
    loop {
        let frame = reader.read_frame();
        let Some(inner) = inner.upgrade() else { return };
        match frame {
            Ok(frame) => match ReplicaMessage::decode(&frame) {
                Ok(msg) => inner.on_reply(from, msg),
                Err(e) => debug!("malformed reply from replica {from}: {e}"),
            },
            Err(e) => {
                debug!("connection to replica {from} lost: {e}");
                link.drop_connection(generation);
                return;
            }
        }
    }
}

/// Writes the frames queued for one connection, coalescing them; on a write error (or when the
/// queue is dropped) it shuts the socket down and forgets the link.
fn writer_loop(
    inner: Weak<Inner>,
    link: Arc<Link>,
    generation: u64,
    rx: crossbeam_channel::Receiver<Bytes>,
    mut writer: FrameWriter,
) {
    while let Ok(first) = rx.recv() {
        let mut ok = writer.push(&first).is_ok();
        while ok && writer.pending_bytes() < LINK_COALESCE_BYTES {
            match rx.try_recv() {
                Ok(more) => ok = writer.push(&more).is_ok(),
                Err(_) => break,
            }
        }
        if !ok || writer.flush().is_err() {
            break;
        }
    }
    writer.shutdown();
    if inner.upgrade().is_some() {
        link.drop_connection(generation);
    }
}
