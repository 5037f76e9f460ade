//! The storage thread: appends decided instances to the log with one flush per group (group
//! commit), publishes the flushed position, serves runs of logged decisions to peers, and drops
//! the log segments a checkpoint covers.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use tagma_core::Allowance;
use tagma_storage::RecordLog;
use tagma_wire::{DecidedInstance, Decode, Encode, PeerMessage};
use tracing::{error, warn};

use crate::{
    peer_link::send_peer,
    shared::{ConsensusEvent, Shared},
    storage::{StorageEvent, transfer_thread::log_installed},
};

/// The storage thread: appends every record queued, flushes once, tells the execution thread.
/// A checkpoint releases the log up to `keep` instances before it (kept for forwarding).
pub(crate) fn storage_loop(
    sh: &Shared,
    mut log: Box<dyn RecordLog>,
    rx: Receiver<StorageEvent>,
    peers: crate::membership::PeerLinks,
) {
    let keep = sh.cfg.raw.limits.decisions_kept as u64;
    let metrics = &sh.metrics;
    // Instances up to this one are covered by a state installed by state transfer.
    let mut covered: Option<u64> = None;
    // Bounds one group: the replies of its first batch wait for all of it.
    const GROUP_MAX: usize = 1024;
    while let Ok(first) = rx.recv() {
        let mut last = None;
        let mut release = None;
        for event in std::iter::once(first).chain(rx.try_iter().take(GROUP_MAX)) {
            match event {
                StorageEvent::Append { cid, decided } => {
                    if covered.is_some_and(|c| cid <= c) {
                        continue;
                    }
                    if let Err(e) = log.append(cid, decided.to_bytes()) {
                        error!("cannot log instance {cid}: {e}; this replica stops replying");
                        return;
                    }
                    metrics.log_records.fetch_add(1, Ordering::Relaxed);
                    last = Some(cid);
                }
                StorageEvent::Release { cid } => release = release.max(Some(cid)),
                StorageEvent::ReadLog {
                    to,
                    from,
                    count,
                    bytes_max,
                } => {
                    let sent = match peers.get(to) {
                        Some(tx) => serve_log(sh, log.as_ref(), &tx, from, count, bytes_max),
                        None => Allowance::default(),
                    };
                    // What the read did not use goes back to the peer's answer budget. Never
                    // into more than half the internal channel, which the threads that block
                    // on it need; dropped otherwise (the core then counts all of it as spent).
                    let unused = Allowance {
                        messages: u64::from(count).saturating_sub(sent.messages),
                        bytes: bytes_max.saturating_sub(sent.bytes),
                    };
                    let room = sh.internal_tx.capacity().unwrap_or(0) / 2;
                    if sh.internal_tx.len() < room {
                        let _ = sh
                            .internal_tx
                            .try_send(ConsensusEvent::LogServed { to, unused });
                    }
                }
                StorageEvent::Installed {
                    checkpoint,
                    entries,
                    repair,
                } => {
                    // A log that restarts after the checkpoint holds nothing past it until its
                    // flush: the published position goes back to the checkpoint (durable
                    // already) first, so the core is told of nothing the reset dropped.
                    if let Some(c) = checkpoint
                        && (repair || log.last_cid().is_none_or(|l| l < c))
                    {
                        sh.durable_below.store(c + 1, Ordering::SeqCst);
                    }
                    if let Err(e) = log_installed(log.as_mut(), checkpoint, &entries, repair) {
                        error!(
                            "cannot log the decisions of an installed state: {e}; this replica stops replying"
                        );
                        return;
                    }
                    let through = entries.last().map(|d| d.cid.0).or(checkpoint);
                    covered = covered.max(through);
                    last = last.max(through);
                }
            }
        }
        if let Some(cid) = last {
            let flushing = std::time::Instant::now();
            sh.stall.wait(tagma_core::config::StallFlush::Log);
            if let Err(e) = log.flush() {
                error!("cannot flush the log: {e}; this replica stops replying");
                return;
            }
            let us = flushing.elapsed().as_micros() as u64;
            metrics.log_flushes.fetch_add(1, Ordering::Relaxed);
            metrics.log_flush_us.fetch_add(us, Ordering::Relaxed);
            // Published first (a full execution queue must not hold the leader's next
            // proposal), and never backwards: an installed state's `through` can be below
            // instances flushed before it.
            sh.durable_below.fetch_max(cid + 1, Ordering::SeqCst);
            // The internal channel is only full when the consensus thread has events to
            // handle, after each of which it looks at `durable_below` again.
            if sh.wake_on_durable.swap(false, Ordering::SeqCst) {
                let _ = sh.internal_tx.try_send(ConsensusEvent::Durable);
            }
        }
        if let Some(cid) = release
            && let Err(e) = log.release_through(cid.saturating_sub(keep))
        {
            warn!("cannot release the log up to checkpoint {cid}: {e}");
        }
    }
}

/// Sends `to` the logged decisions `from ..` (at most `count`), stopping at the first the
/// log does not hold and before the first that would take the messages past `bytes_max`;
/// returns what it sent.
pub(crate) fn serve_log(
    sh: &Shared,
    log: &dyn RecordLog,
    tx: &Sender<Bytes>,
    from: u64,
    count: u32,
    bytes_max: u64,
) -> Allowance {
    let mut sent = Allowance::default();
    let first = log.first_cid().unwrap_or(u64::MAX);
    let last = log.last_cid().unwrap_or(0);
    if from < first || from > last {
        return sent;
    }
    let end = from.saturating_add(u64::from(count)).min(last + 1);
    let records = match log.read_range(from..end) {
        Ok(records) => records,
        Err(e) => {
            warn!("cannot read the log for a replica fetching state: {e}");
            return sent;
        }
    };
    for (_, payload) in records {
        if let Ok(d) = DecidedInstance::decode(&Bytes::from(payload)) {
            let msg = PeerMessage::LogEntry(d).to_bytes();
            if sent.bytes + msg.len() as u64 > bytes_max {
                break;
            }
            sent.messages += 1;
            sent.bytes += msg.len() as u64;
            send_peer(sh, tx, msg);
        }
    }
    sent
}
