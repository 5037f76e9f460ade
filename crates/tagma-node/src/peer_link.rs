//! Links between replicas: a peer's reader (decode, batch hash, request authentication, hand-off
//! to the consensus queue) and, per peer, a writer thread that keeps the outbound connection and
//! coalesces queued frames.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use tagma_core::{PeerInput, config::ReplicaInfo};
use tagma_net::{FrameReader, FrameWriter, LocalIdentity, NetError};
use tagma_wire::{Decode, Encode, PeerMessage, ReplicaId, Role};
use tracing::{debug, info, warn};

use crate::{
    WRITE_COALESCE_BYTES, membership,
    metrics::Metrics,
    shared::{ConsensusEvent, Shared, spawn},
};

/// Reads consensus messages from peer `from`; decodes, hashes and authenticates batches here,
/// off the consensus thread.
pub(crate) fn peer_reader(
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
pub(crate) fn add_link(
    sh: &Arc<Shared>,
    links: &membership::PeerLinks,
    m: &tagma_wire::ViewMember,
) {
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
pub(crate) fn start_link(sh: &Arc<Shared>, links: &membership::PeerLinks, peer: ReplicaInfo) {
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
pub(crate) fn peer_writer(
    sh: &Arc<Shared>,
    peer: &ReplicaInfo,
    rx: Receiver<Bytes>,
    wake: Receiver<()>,
) {
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
pub(crate) fn reconnect_backoff(failures: u64, max_ms: u64) -> Duration {
    const FIRST_MS: u64 = 2;
    let doublings = failures.saturating_sub(1).min(40) as u32;
    Duration::from_millis((FIRST_MS << doublings).min(max_ms))
}

/// Drains `rx` into `writer` until the connection fails (`Ok`) or the queue closes (`Err`).
/// A frame over `frame_bytes_max` cannot be sent: it is dropped and counted.
pub(crate) fn write_loop(
    rx: &Receiver<Bytes>,
    writer: &mut FrameWriter,
    metrics: &Metrics,
) -> Result<(), ()> {
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

pub(crate) fn send_peer(sh: &Shared, tx: &Sender<Bytes>, body: Bytes) {
    if let Err(TrySendError::Full(_)) = tx.try_send(body) {
        sh.metrics
            .peer_messages_dropped
            .fetch_add(1, Ordering::Relaxed);
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
