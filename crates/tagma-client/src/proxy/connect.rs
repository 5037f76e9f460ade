//! Connecting to the replicas: the authenticated handshake for each link, and the reader and
//! writer threads of each connection.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::Instant;

use bytes::Bytes;
use tagma_net::{FrameReader, FrameWriter, LocalIdentity, NetError};
use tagma_wire::{Decode, Refusal, ReplicaId, ReplicaMessage, Role};
use tracing::debug;

use super::Inner;
use super::links::{LINK_COALESCE_BYTES, LINK_QUEUE_MAX, Link, Members};
use crate::error::ClientError;
use crate::locking::lock;

/// Why a link did not connect.
pub(super) struct ConnectFailure {
    replica: ReplicaId,
    addr: SocketAddr,
    error: NetError,
}

impl ConnectFailure {
    /// The replica refused this client's key.
    fn refused_key(&self) -> bool {
        matches!(self.error, NetError::Refused(Refusal::UnknownKey))
    }
}

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "replica {} at {}: {}",
            self.replica, self.addr, self.error
        )
    }
}

impl Inner {
    /// Connects to every member not connected yet, in parallel: one failure (or `None`) per
    /// link, in order.
    pub(super) fn connect_all(self: &Arc<Self>, members: &Members) -> Vec<Option<ConnectFailure>> {
        thread::scope(|s| {
            let handles: Vec<_> = members
                .links
                .iter()
                .map(|link| {
                    s.spawn({
                        let inner = self.clone();
                        move || {
                            if lock(&link.writer).is_some() {
                                return None;
                            }
                            inner.connect_link(link).err().map(|error| ConnectFailure {
                                replica: link.info.id,
                                addr: link.info.addr,
                                error,
                            })
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .zip(&members.links)
                .map(|(h, link)| {
                    h.join().unwrap_or_else(|_| {
                        Some(ConnectFailure {
                            replica: link.info.id,
                            addr: link.info.addr,
                            error: NetError::Io(std::io::Error::other("connect thread panicked")),
                        })
                    })
                })
                .collect()
        })
    }

    /// The error of a proxy that connected to `connected` replicas, fewer than the `needed`
    /// reply quorum: the replicas do not know its key when any refused it for that (the fix
    /// is the key, not the replicas), otherwise the cluster is unreachable.
    pub(super) fn too_few_connected(
        &self,
        connected: usize,
        needed: usize,
        failures: Vec<Option<ConnectFailure>>,
    ) -> ClientError {
        let failures: Vec<ConnectFailure> = failures.into_iter().flatten().collect();
        let refused: Vec<String> = failures
            .iter()
            .filter(|f| f.refused_key())
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

    pub(super) fn connect_link(self: &Arc<Self>, link: &Arc<Link>) -> Result<(), NetError> {
        *lock(&link.last_attempt) = Some(Instant::now());
        let principal = self.client.principal();
        let me = LocalIdentity {
            role: Role::Client(principal),
            key: &self.key,
        };
        let (reader, writer) = tagma_net::connect(
            link.info.addr,
            &me,
            Role::Replica(link.info.id),
            &link.info.public_key,
            self.limits,
            self.connect_timeout,
        )?;
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
        // A view change may have dropped this link while it connected (`maintain` works on a
        // snapshot): close it rather than keep a connection nobody uses.
        if !self.members().links.iter().any(|l| Arc::ptr_eq(l, link)) {
            link.close();
        }
        Ok(())
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
