//! Checkpoints: the execution thread takes them at this replica's staggered points (or when the
//! core asks), the checkpoint thread writes them once the log holds their instance.

use std::{sync::atomic::Ordering, time::Duration};

use crossbeam_channel::{Receiver, Sender};
use tagma_exec::{Executor, Service};
use tagma_storage::Checkpoints;
use tagma_wire::{CheckpointInfo, ConsensusId};
use tracing::{debug, info, warn};

use crate::{
    shared::{ConsensusEvent, Shared},
    storage::{CheckpointJob, StorageEvent},
};

/// The checkpoint thread: writes each checkpoint handed to it, tells the core (which offers
/// it to replicas that need state), then lets the storage thread release the log up to the
/// previous checkpoint (the two newest are kept and served).
pub(crate) fn checkpoint_loop(
    sh: &Shared,
    store: &dyn Checkpoints,
    rx: Receiver<CheckpointJob>,
    storage_tx: Sender<StorageEvent>,
) {
    let mut previous: Option<u64> = None;
    while let Ok(job) = rx.recv() {
        let cid = job.cid;
        // A checkpoint must not be on disk before its instance's log record: after a crash of
        // every replica, a replica recovered from it would be ahead of every proof it can
        // give (regression seed 2095). The log normally flushes well
        // before the snapshot is serialised; a log that stopped (its thread reported the
        // error) skips the checkpoint, which is always safe.
        if !wait_for_log(sh, cid) {
            warn!("the log did not reach instance {cid} in time: its checkpoint is skipped");
            continue;
        }
        let serialising = std::time::Instant::now();
        let state = job.state.finish();
        let serialise_ms = serialising.elapsed().as_millis() as u64;
        sh.stall.wait(tagma_core::config::StallFlush::Checkpoints);
        match store.write(cid, &state) {
            Ok(digest) => {
                sh.metrics.checkpoints.fetch_add(1, Ordering::Relaxed);
                info!(
                    instance = cid,
                    bytes = state.len(),
                    taken_ms = job.taken_ms,
                    serialise_ms,
                    write_ms = serialising.elapsed().as_millis() as u64 - serialise_ms,
                    "checkpoint written"
                );
                let info = CheckpointInfo {
                    cid: ConsensusId(cid),
                    len: state.len() as u64,
                    digest: tagma_wire::Digest(digest),
                };
                if sh
                    .internal_tx
                    .send(ConsensusEvent::Checkpointed(info))
                    .is_err()
                {
                    return;
                }
                if let Some(p) = previous
                    && storage_tx.send(StorageEvent::Release { cid: p }).is_err()
                {
                    return;
                }
                previous = Some(cid);
            }
            Err(e) => warn!("cannot write the checkpoint of instance {cid}: {e}"),
        }
    }
}

/// Waits (bounded) until the storage thread has flushed instance `cid`.
pub(crate) fn wait_for_log(sh: &Shared, cid: u64) -> bool {
    const WAIT_MAX: Duration = Duration::from_secs(10);
    let start = std::time::Instant::now();
    loop {
        if sh.durable_below.load(Ordering::SeqCst) > cid {
            return true;
        }
        if start.elapsed() > WAIT_MAX {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The execution thread's side of storage: the checkpoints it takes at this replica's
/// staggered points (or when the core asks), state digests, and installing fetched states.
pub(crate) struct ExecStorage {
    pub checkpoint_tx: Sender<CheckpointJob>,
    /// The consensus thread's internal channel (never full: see `Shared::internal_tx`).
    pub consensus_tx: Sender<ConsensusEvent>,
    /// Where fetched checkpoints are stored (read back at install).
    pub store: std::sync::Arc<dyn Checkpoints>,
    /// This replica's position among the members, the member count and the period.
    pub index: usize,
    pub n: usize,
    pub period: u64,
    /// The instance of the last checkpoint handed to the checkpoint thread: a fresh one asked
    /// for the same instance (`checkpoint_now`) is not taken twice (a second job could land
    /// after a repair replaced that checkpoint, and put the contradicted state back).
    pub last_queued: std::cell::Cell<Option<u64>>,
}

impl ExecStorage {
    /// At this replica's checkpoint point, hands the executor's checkpoint to the checkpoint
    /// thread (skipped, with a warning, while the previous one is still being written).
    pub fn maybe_checkpoint<S: Service>(&self, cid: u64, executor: &Executor<S>) {
        if !tagma_storage::checkpoint_due(cid, self.index, self.n, self.period) {
            return;
        }
        if self.checkpoint_tx.is_full() {
            warn!(
                instance = cid,
                "previous checkpoint still being written: this one is skipped"
            );
            return;
        }
        self.checkpoint(cid, executor);
    }

    /// `Action::DigestState`: the state vote's digest of the state after `cid` (the last
    /// instance executed), streamed into the hash (no copy, nothing written), for the core.
    pub fn digest_state<S: Service>(&self, cid: u64, executor: &Executor<S>) {
        if executor.executed_instances() != cid + 1 {
            // A fetched state installed after the vote started (which ends the vote), or a
            // runtime bug: without the digest the vote ends unaudited at its deadline.
            warn!(
                instance = cid,
                executed = executor.executed_instances(),
                "state digest asked for another instance than the last executed: skipped"
            );
            return;
        }
        let started = std::time::Instant::now();
        let digest = executor.checkpoint_digest();
        info!(
            instance = cid,
            ms = started.elapsed().as_millis() as u64,
            "state hashed for the state vote"
        );
        // An error: the consensus thread has stopped (the replica is stopping).
        let _ = self.consensus_tx.send(ConsensusEvent::StateDigest {
            cid: tagma_wire::ConsensusId(cid),
            digest,
        });
    }

    /// `Action::CheckpointNow`: the fresh checkpoint a peer the state vote contradicted
    /// repairs from, of the state after `cid` or, if this thread executed further meanwhile
    /// (a state installed before the request reached it), after the last instance executed;
    /// whatever the staggered points say. Waits for a checkpoint still being written rather
    /// than skip this one.
    pub fn checkpoint_now<S: Service>(&self, cid: u64, executor: &Executor<S>) {
        let Some(last) = executor.executed_instances().checked_sub(1) else {
            return;
        };
        if last < cid {
            // Cannot happen: the core asks after its last delivery, which this thread
            // executed first. The peer's repair then waits for a staggered checkpoint.
            warn!(
                instance = cid,
                executed = executor.executed_instances(),
                "fresh checkpoint asked for an instance not executed yet: skipped"
            );
            return;
        }
        if self.last_queued.get() == Some(last) {
            // Taken at this replica's staggered point already.
            return;
        }
        self.checkpoint(last, executor);
    }

    pub(crate) fn checkpoint<S: Service>(&self, cid: u64, executor: &Executor<S>) {
        self.last_queued.set(Some(cid));
        let started = std::time::Instant::now();
        let state = executor.checkpoint_deferred();
        let job = CheckpointJob {
            cid,
            state,
            taken_ms: started.elapsed().as_millis() as u64,
        };
        // This thread is the only sender: an error means the checkpoint thread has ended
        // (the replica is stopping). A full queue (only for `checkpoint_now`) waits.
        if self.checkpoint_tx.send(job).is_err() {
            debug!(instance = cid, "checkpoint thread gone: checkpoint dropped");
        }
    }
}
