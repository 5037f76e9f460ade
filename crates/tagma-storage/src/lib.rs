//! `tagma-storage`: a replica's storage: its log and checkpoints on disk or in memory, and its
//! durable votes.
//!
//! - [`log`]: the decided instances, appended to segmented, preallocated files; every record
//!   carries its consensus id, length and a checksum, so torn and corrupted records are found.
//!   Appends are buffered and forced to disk by one `fdatasync` per [`log::Log::flush`] (group
//!   commit: the caller appends every batch at hand, then flushes once).
//! - [`checkpoint`]: snapshots of the service, numbered by consensus id, written to a
//!   temporary file, flushed, renamed atomically, the directory flushed; only then may the log
//!   prefix they cover be released.
//! - [`votes`]: the replica's newest consensus vote, flushed before the ACCEPT it leads to.
//! - [`backend`]: what the runtime needs from a log and a checkpoint store ([`RecordLog`],
//!   [`Checkpoints`]), implemented by the files above and, for replicas without a disk, by
//!   [`memory`].
//! - [`recover`]: local recovery at start: the newest valid checkpoint, then the log records
//!   after it, in order, each exactly once. A torn tail is cut off; corruption anywhere else, a
//!   corrupt newest checkpoint or a gap between checkpoint and log is reported as a typed
//!   error, so the replica fetches state from the others instead of guessing.
//! - [`checkpoint_due`]: BFT-SMaRt's staggered (sequential) checkpoints: replica `i` of `n`
//!   checkpoints at its own point of each period, so at most one is busy at any moment.
//!
//! Nothing here knows about consensus: a record is a consensus id and opaque bytes (the node
//! stores the decided batch with its proof).

pub mod backend;
pub mod checkpoint;
pub mod conformance;
pub mod log;
pub mod memory;
pub mod votes;

use std::path::{Path, PathBuf};

pub use backend::{Checkpoints, RecordLog};
pub use checkpoint::{Checkpoint, CheckpointStore};
pub use log::{Log, LogOptions, SegmentEnd, encode_record, read_segment};
pub use memory::{MemoryCheckpoints, MemoryLog};
pub use votes::{StoredVote, VoteStore};

/// Why storage could not be used as it is on disk.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "log segment {path} is corrupt at byte {offset}: {reason} — valid records follow, so this is not a torn tail; fix: the replica must fetch state from the others (state transfer)"
    )]
    CorruptLog {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error(
        "checkpoint {path} is corrupt: {reason} — fix: the replica must fetch state from the others (state transfer)"
    )]
    CorruptCheckpoint { path: PathBuf, reason: String },
    #[error(
        "the log does not continue the recovered state: instance {expected} is needed next but the log holds {log_first}; fix: fetch state from the others (state transfer)"
    )]
    Gap { expected: u64, log_first: u64 },
    #[error("append of instance {got}, expected {expected}: instances are logged in order")]
    OutOfOrder { expected: u64, got: u64 },
    #[error("record of {len} bytes is larger than the largest record ({max} bytes)")]
    RecordTooLarge { len: usize, max: usize },
    #[error(
        "the checkpoint being fetched: {reason} (an earlier chunk was not stored) — the fetcher validates it and fetches it again"
    )]
    Incoming { reason: String },
}

impl StorageError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StorageError + '_ {
        move |source| StorageError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Staggered checkpoints (BFT-SMaRt's sequential checkpointing): with
/// `portion = period / n`, the replica at position `index` (0-based) of the `n` members
/// checkpoints after executing instance `cid` when `cid mod period == portion·(index+1) − 1`.
/// With n = 4 and period 400: positions 0..3 checkpoint at 99, 199, 299 and 399 (mod 400), so
/// at most one replica is busy writing a snapshot at any moment. `period` must be at least `n`
/// (the configuration checks it); a smaller one is treated as `n`.
pub fn checkpoint_due(cid: u64, index: usize, n: usize, period: u64) -> bool {
    let n = n.max(1) as u64;
    let period = period.max(n);
    let portion = period / n;
    cid % period == portion * (index as u64 % n + 1) - 1
}

/// Recovers a replica's state from `dir`: the newest valid checkpoint (handed to
/// `install`), then every logged instance after it in order (handed to `apply`), each exactly
/// once. Returns the opened log (positioned after the last valid record, a torn tail cut off)
/// and the last instance recovered (`None`: nothing durable yet).
pub fn recover(
    checkpoints: &CheckpointStore,
    log_options: LogOptions,
    install: impl FnOnce(&Checkpoint) -> Result<(), String>,
    mut apply: impl FnMut(u64, &[u8]) -> Result<(), String>,
) -> Result<(Log, Option<u64>), RecoverError> {
    let checkpoint = checkpoints.load_newest()?;
    let mut log = Log::open(log_options)?;
    let mut last = None;
    if let Some(ckp) = &checkpoint {
        install(ckp).map_err(|reason| RecoverError::Install {
            cid: ckp.cid,
            reason,
        })?;
        last = Some(ckp.cid);
    }
    if let Some(first) = log.first_cid() {
        let expected = last.map_or(0, |c| c + 1);
        if first > expected {
            return Err(StorageError::Gap {
                expected,
                log_first: first,
            }
            .into());
        }
    }
    let from = last.map_or(0, |c| c + 1);
    log.replay_from(from, |cid, payload| -> Result<(), RecoverError> {
        apply(cid, payload).map_err(|reason| RecoverError::Apply { cid, reason })?;
        last = Some(cid);
        Ok(())
    })?;
    if let Some(last) = last {
        log.continue_after(last)?;
    }
    Ok((log, last))
}

/// Why local recovery failed.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("checkpoint of instance {cid} could not be installed: {reason}")]
    Install { cid: u64, reason: String },
    #[error("logged instance {cid} could not be applied: {reason}")]
    Apply { cid: u64, reason: String },
}

/// Forces a directory's entries (created, renamed, removed files) to disk.
pub(crate) fn flush_dir(dir: &Path) -> Result<(), StorageError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StorageError::io(dir))
}

#[cfg(test)]
mod tests;
