//! Connecting to the replicas: the authenticated handshake for each link, and the reader and
//! writer threads of each connection.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::Instant;

use bytes::Bytes;
use tagma_net::{FrameReader, FrameWriter, LocalIdentity, NetError};
use tagma_wire::{Decode, ReplicaId, ReplicaMessage, Role};
use tracing::debug;

use super::Inner;
use super::links::{LINK_COALESCE_BYTES, LINK_QUEUE_MAX, Link, Members};
use crate::locking::lock;

impl Inner {
    /// Connects to every member not connected yet, in parallel: one error (or `None`) per
    /// link, in order.
    pub(super) fn connect_all(self: &Arc<Self>, members: &Members) -> Vec<Option<String>> {
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
                            inner.connect_link(link).err().map(|e| {
                                format!("replica {} at {}: {e}", link.info.id, link.info.addr)
                            })
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Some("connect thread panicked".into())))
                .collect()
        })
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
