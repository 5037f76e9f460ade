//! State transfer's IO: the transfer thread reads chunks of this replica's checkpoints for peers
//! and stores incoming chunks; the execution thread validates and installs a fetched state and
//! makes it durable.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use tagma_core::transfer::{InstallOutcome, StateToInstall};
use tagma_exec::{Executor, Service};
use tagma_storage::{Checkpoints, RecordLog};
use tagma_wire::{ConsensusId, DecidedInstance, Encode, PeerMessage};
use tracing::{info, warn};

use crate::{
    peer_link::send_peer,
    shared::{ConsensusEvent, ExecEvent, Shared},
    storage::{StorageEvent, TransferJob, checkpoint_thread::ExecStorage},
};

/// The transfer thread: serves chunks of this replica's checkpoints to peers, and stores the
/// chunks of a checkpoint this replica fetches.
pub(crate) fn transfer_loop(
    sh: &Shared,
    store: &dyn Checkpoints,
    rx: Receiver<TransferJob>,
    peers: crate::membership::PeerLinks,
    exec_tx: Sender<ExecEvent>,
) {
    while let Ok(job) = rx.recv() {
        match job {
            TransferJob::ReadChunk {
                to,
                cid,
                offset,
                len,
            } => {
                let Some(tx) = peers.get(to) else {
                    continue;
                };
                match store.read_chunk(cid, offset, len as usize) {
                    Ok(data) => {
                        sh.metrics
                            .state_bytes_served
                            .fetch_add(u64::from(len), Ordering::Relaxed);
                        let msg = PeerMessage::Chunk {
                            cid: ConsensusId(cid),
                            offset,
                            data: Bytes::from(data),
                        };
                        send_peer(sh, &tx, msg.to_bytes());
                    }
                    // Replaced by newer checkpoints meanwhile: an empty chunk tells the
                    // fetcher, which asks for fresh offers at once.
                    Err(e) => {
                        warn!("cannot read a chunk of checkpoint {cid}: {e}");
                        let msg = PeerMessage::Chunk {
                            cid: ConsensusId(cid),
                            offset,
                            data: Bytes::new(),
                        };
                        send_peer(sh, &tx, msg.to_bytes());
                    }
                }
            }
            TransferJob::StoreChunk { offset, data } => {
                sh.metrics
                    .state_bytes_fetched
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                if let Err(e) = store.store_chunk(offset, &data) {
                    // The install's digest check then fails and another attempt starts.
                    warn!("cannot store a fetched chunk: {e}");
                }
            }
            TransferJob::Install(state) => {
                if exec_tx.send(ExecEvent::Install(state)).is_err() {
                    return;
                }
            }
        }
    }
}

impl ExecStorage {
    /// Validates and installs a fetched state (see `tagma_core::transfer`): the stored
    /// checkpoint must have the source's digest; it is installed and the proven decisions
    /// after it replayed, comparing the state's digest at each voucher's instance; with fewer
    /// than `matches_needed` matches everything is rolled back. Once accepted, the fetched
    /// file becomes the durable checkpoint, and the decisions after it are returned for the
    /// log (the consensus thread hands them to the storage thread before any later
    /// instance). `Err`: the state is installed but could not be made durable (fatal).
    pub fn install<S: Service>(
        &mut self,
        executor: &mut Executor<S>,
        state: &StateToInstall,
    ) -> Result<(InstallOutcome, Option<StorageEvent>), String> {
        let rejected =
            |reason: String| Ok((InstallOutcome::Rejected { reason }, None::<StorageEvent>));
        let target = state.target();
        // Checked before the fetched bytes are read (install_fetched checks it again).
        if let Err(reason) = executor.can_install_through(target) {
            return rejected(reason);
        }
        let started = std::time::Instant::now();
        // A joining replica's replay from the state it holds fetched no checkpoint.
        let bytes = match state.checkpoint {
            None => Bytes::new(),
            Some(_) => match self.store.read_incoming() {
                Ok(b) => Bytes::from(b),
                Err(e) => return rejected(format!("cannot read the fetched checkpoint: {e}")),
            },
        };
        let read_ms = started.elapsed().as_millis();
        match executor.install_fetched(
            &bytes,
            state.checkpoint.as_ref(),
            &state.log,
            &state.voucher_checkpoints(),
            state.matches_needed,
        ) {
            Ok(matched) => info!(
                source = %state.source,
                matched,
                needed = state.matches_needed,
                "fetched state validated"
            ),
            Err(reason) => {
                self.store.remove_incoming();
                return rejected(format!("state from replica {}: {reason}", state.source));
            }
        }
        let validated_ms = started.elapsed().as_millis();
        // Durable before the core goes on: the fetched checkpoint (already on disk: it only
        // gets its header and checksum), then the decisions after it in the log.
        if let Some(checkpoint) = state.checkpoint {
            if let Err(e) =
                self.store
                    .promote_incoming(checkpoint.cid.0, bytes.len(), &checkpoint.digest.0)
            {
                return Err(format!("cannot store the installed checkpoint: {e}"));
            }
            if self
                .consensus_tx
                .send(ConsensusEvent::Checkpointed(checkpoint))
                .is_err()
            {
                return Err("the consensus thread stopped".into());
            }
        }
        info!(
            read_ms,
            validate_ms = validated_ms - read_ms,
            store_ms = started.elapsed().as_millis() - validated_ms,
            "fetched state installed"
        );
        // The instances after the checkpoint become durable with the storage thread's flush
        // (its `Durable` event).
        let event = StorageEvent::Installed {
            checkpoint: state.checkpoint.map(|c| c.cid.0),
            entries: state.log.clone(),
            repair: state.repair,
        };
        let outcome = InstallOutcome::Installed {
            last: target,
            timestamp_ms: executor.last_timestamp_ms(),
            sessions: executor.sessions(),
            view: executor.members().cloned(),
        };
        Ok((outcome, Some(event)))
    }
}

/// Logs the decisions of a state installed by state transfer: those after what the log
/// already holds; if the log does not reach the installed checkpoint, or the state repairs
/// one the state vote contradicted, it restarts after it (without a checkpoint — a replay
/// from the initial state — the log continues).
pub(crate) fn log_installed(
    log: &mut dyn RecordLog,
    checkpoint: Option<u64>,
    entries: &[DecidedInstance],
    repair: bool,
) -> Result<(), tagma_storage::StorageError> {
    let from = match (log.last_cid(), checkpoint) {
        (Some(last), Some(c)) if last >= c && !repair => last + 1,
        (last, None) => last.map_or(0, |l| l + 1),
        (_, Some(c)) => {
            log.reset_after(c)?;
            c + 1
        }
    };
    for d in entries.iter().filter(|d| d.cid.0 >= from) {
        log.append(d.cid.0, d.to_bytes())?;
    }
    log.flush()
}
