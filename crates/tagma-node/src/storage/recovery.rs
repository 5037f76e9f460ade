//! Local recovery at start: the newest valid checkpoint and the log after it rebuild the
//! executor; a damaged data directory is set aside and the replica starts empty.

use std::{
    collections::VecDeque,
    path::{Path, PathBuf},
    sync::{Arc, atomic::Ordering},
};

use bytes::Bytes;
use tagma_core::ValidConfig;
use tagma_exec::{Executor, Service};
use tagma_storage::{CheckpointStore, Checkpoints, LogOptions, RecordLog, VoteStore};
use tagma_wire::{Batch, CheckpointInfo, ConsensusId, DecidedInstance, Decode};
use tracing::{error, info};

use crate::{Metrics, NodeError, storage::votes::decode_votes};

/// What recovery found on disk.
pub(crate) struct Recovered {
    pub log: Box<dyn RecordLog>,
    pub store: Arc<dyn Checkpoints>,
    /// The last instance recovered (`None`: nothing durable yet).
    pub last: Option<ConsensusId>,
    /// The newest logged decisions, oldest first (at most `decisions_kept`).
    pub recent: Vec<DecidedInstance>,
    /// The checkpoint recovered from, as offered to replicas that need state.
    pub checkpoint: Option<CheckpointInfo>,
    /// The votes this replica cast before it stopped, newest first, and their store.
    pub votes: Vec<tagma_wire::Collect>,
    pub vote_store: VoteStore,
}

/// The replica's storage directories under its data directory.
pub(crate) fn paths(data_dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    (
        data_dir.join("checkpoints"),
        data_dir.join("log"),
        data_dir.join("votes"),
    )
}

/// Why local recovery failed.
pub(crate) enum Failure {
    /// The disk could not be read or written: the replica must not start.
    Io(String),
    /// What is on disk is damaged (a corrupt checkpoint or record, a gap, something that
    /// does not decode or install).
    Damaged(String),
}

impl From<&tagma_storage::StorageError> for Failure {
    fn from(e: &tagma_storage::StorageError) -> Self {
        match e {
            tagma_storage::StorageError::Io { .. } => Failure::Io(e.to_string()),
            _ => Failure::Damaged(e.to_string()),
        }
    }
}

/// Local recovery, and what to do when the disk's state is damaged: the damaged directory is
/// moved aside (kept for inspection, never deleted) and the replica starts empty; the start-up
/// synchronisation and decision forwarding then bring it what it misses from the others,
/// whose decisions carry proofs, instead of guessing from a damaged disk. (Until state
/// transfer exists, this works while the others still keep every decision it misses:
/// `limits.decisions_kept`.) A disk that cannot be read at all stops the replica.
pub(crate) fn recover_or_quarantine<S: Service>(
    cfg: &ValidConfig,
    data_dir: &Path,
    executor: &mut Executor<S>,
    metrics: &Metrics,
) -> Result<Recovered, NodeError> {
    let fail = |reason: String| NodeError::Recovery {
        dir: data_dir.to_path_buf(),
        reason,
    };
    let empty = executor.checkpoint();
    match recover(cfg, data_dir, executor) {
        Ok(r) => return Ok(r),
        Err(Failure::Io(reason)) => return Err(fail(reason)),
        Err(Failure::Damaged(reason)) => {
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            let mut aside = data_dir.as_os_str().to_owned();
            aside.push(format!(".damaged-{stamp}"));
            let aside = PathBuf::from(aside);
            std::fs::rename(data_dir, &aside)
                .and_then(|()| std::fs::create_dir_all(data_dir))
                .map_err(|e| fail(format!("{reason}; moving it aside failed: {e}")))?;
            error!(
                moved_to = %aside.display(),
                "the durable state is damaged ({reason}): moved aside; starting empty and fetching the state from the other replicas"
            );
            metrics.state_discarded.store(1, Ordering::Relaxed);
            executor
                .restore(&empty)
                .map_err(|e| fail(format!("cannot reset the executor: {e}")))?;
        }
    }
    recover(cfg, data_dir, executor).map_err(|f| match f {
        Failure::Io(reason) | Failure::Damaged(reason) => fail(reason),
    })
}

/// Local recovery: the newest valid checkpoint into `executor`, then the logged instances
/// after it, executed in order (their replies are cached, not sent).
pub(crate) fn recover<S: Service>(
    cfg: &ValidConfig,
    data_dir: &Path,
    executor: &mut Executor<S>,
) -> Result<Recovered, Failure> {
    let started = std::time::Instant::now();
    let (ckp_dir, log_dir, votes_dir) = paths(data_dir);
    let store = CheckpointStore::open(ckp_dir).map_err(|e| Failure::from(&e))?;
    // A torn vote file holds nothing (it is the write a crash interrupted); only an
    // unreadable disk fails here.
    let (vote_store, stored) = VoteStore::open(votes_dir).map_err(|e| Failure::from(&e))?;
    let mut votes = Vec::new();
    for v in stored {
        // The record's checksum held: bytes that do not decode are damage, not a torn write.
        let collects = decode_votes(&v.payload).ok_or_else(|| {
            Failure::Damaged(format!(
                "the vote record of instance {} does not decode",
                v.cid
            ))
        })?;
        votes.extend(collects);
    }
    let options = LogOptions {
        dir: log_dir,
        segment_bytes: cfg.raw.storage.log_segment_bytes,
    };
    let kept = cfg.raw.limits.decisions_kept;
    let mut recent: VecDeque<DecidedInstance> = VecDeque::new();
    let mut checkpoint_cid = None;
    let mut checkpoint = None;
    // When the checkpoint was read and checked (before it is decoded into the executor).
    let mut restored_ms = None;
    // Both steps of recovery change the executor, one after the other.
    let executor = std::cell::RefCell::new(executor);
    let (log, last) = tagma_storage::recover(
        &store,
        options,
        |ckp| {
            checkpoint_cid = Some(ckp.cid);
            checkpoint = Some(CheckpointInfo {
                cid: ConsensusId(ckp.cid),
                len: ckp.state.len() as u64,
                digest: tagma_wire::Digest(ckp.digest),
            });
            let mut executor = executor.borrow_mut();
            restored_ms = Some(started.elapsed().as_millis() as u64);
            executor.restore(&ckp.state).map_err(|e| e.to_string())?;
            if executor.executed_instances() != ckp.cid + 1 {
                return Err(format!(
                    "the checkpoint's executor state is at instance {}, its file says {}",
                    executor.executed_instances(),
                    ckp.cid + 1
                ));
            }
            Ok(())
        },
        |cid, payload| {
            let decided = DecidedInstance::decode(&Bytes::copy_from_slice(payload))
                .map_err(|e| format!("record does not decode: {e}"))?;
            if decided.cid.0 != cid {
                return Err(format!("record holds instance {}", decided.cid));
            }
            let batch =
                Batch::decode(&decided.batch).map_err(|e| format!("batch does not decode: {e}"))?;
            executor.borrow_mut().execute_batch(decided.cid, &batch);
            recent.push_back(decided);
            if recent.len() > kept {
                recent.pop_front();
            }
            Ok(())
        },
    )
    .map_err(|e| match &e {
        tagma_storage::RecoverError::Storage(s) => Failure::from(s),
        other => Failure::Damaged(other.to_string()),
    })?;
    let executor = executor.into_inner();
    // The replayed decisions are in `recent`; the log also keeps up to `decisions_kept` that
    // the checkpoint covers: read those too (only those), so this replica can prove its
    // position to replicas that are behind, after any restart.
    if let (Some(ckp), Some(last)) = (checkpoint_cid, last)
        && recent.len() < kept
    {
        let first = (last + 1).saturating_sub(kept as u64);
        let first = first.max(log.first_cid().unwrap_or(first));
        let mut older = VecDeque::new();
        let mut undecodable = None;
        log.replay_range(
            first..ckp + 1,
            |cid, payload| -> Result<(), tagma_storage::StorageError> {
                match DecidedInstance::decode(&Bytes::copy_from_slice(payload)) {
                    Ok(decided) => older.push_back(decided),
                    Err(e) => undecodable = Some(format!("record {cid} does not decode: {e}")),
                }
                Ok(())
            },
        )
        .map_err(|e| Failure::from(&e))?;
        if let Some(reason) = undecodable {
            return Err(Failure::Damaged(reason));
        }
        older.extend(recent);
        while older.len() > kept {
            older.pop_front();
        }
        recent = older;
    }
    if let Some(last) = last {
        info!(
            last_instance = last,
            executed_requests = executor.executed_requests(),
            checkpoint_read_ms = restored_ms,
            ms = started.elapsed().as_millis() as u64,
            "recovered from the local checkpoint and log"
        );
    }
    Ok(Recovered {
        log: Box::new(log),
        store: Arc::new(store),
        last: last.map(ConsensusId),
        recent: recent.into(),
        checkpoint,
        votes,
        vote_store,
    })
}
