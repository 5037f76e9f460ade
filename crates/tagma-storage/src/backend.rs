//! What a replica's runtime needs from storage, whatever keeps it: [`RecordLog`] (decided
//! instances) and [`Checkpoints`] (the two newest checkpoints, and one being fetched). The
//! files of [`crate::log`] and [`crate::checkpoint`] implement them for `durability =
//! "fsync"`; [`crate::memory`] for `durability = "none"`, so a replica without a disk still
//! serves and fetches state, and one that restarts empty catches up by state transfer.

use std::ops::Range;

use bytes::Bytes;

use crate::{CheckpointStore, Log, StorageError};

/// Decided instances, appended in order (a record is a consensus id and opaque bytes).
pub trait RecordLog: Send {
    /// Appends instance `cid` (the next one, or any after [`RecordLog::reset_after`]). The
    /// payload is handed over: the memory log keeps it as it is, without a copy.
    fn append(&mut self, cid: u64, payload: Bytes) -> Result<(), StorageError>;
    /// Makes everything appended durable (files: one `fdatasync`; memory: nothing to do).
    fn flush(&mut self) -> Result<(), StorageError>;
    /// The oldest instance held.
    fn first_cid(&self) -> Option<u64>;
    /// The newest instance appended.
    fn last_cid(&self) -> Option<u64>;
    /// The records of the instances in `range` that the log holds, in order (the range may
    /// end past the newest). A missing instance inside it is a [`StorageError::Gap`].
    fn read_range(&self, range: Range<u64>) -> Result<Vec<(u64, Vec<u8>)>, StorageError>;
    /// Drops what only serves instances up to `cid` (covered by a checkpoint); returns how
    /// many units (segments, records) went.
    fn release_through(&mut self, cid: u64) -> Result<usize, StorageError>;
    /// Drops every record and continues after `cid` (a state installed beyond the log).
    fn reset_after(&mut self, cid: u64) -> Result<(), StorageError>;
}

/// A replica's checkpoints: the two newest are kept (the newest is offered to replicas that
/// fetch state; the one before it still serves a fetch that started earlier), and one being
/// fetched is stored chunk by chunk until it is validated.
pub trait Checkpoints: Send + Sync {
    /// Stores `state` as the checkpoint of instance `cid`, keeping the previous one and
    /// dropping older ones; returns BLAKE3 of `state`.
    fn write(&self, cid: u64, state: &[u8]) -> Result<[u8; 32], StorageError>;
    /// `len` bytes at `offset` of the state of the checkpoint of `cid`.
    fn read_chunk(&self, cid: u64, offset: u64, len: usize) -> Result<Vec<u8>, StorageError>;
    /// Stores a chunk of a checkpoint being fetched (offset 0 starts a new one).
    fn store_chunk(&self, offset: u64, data: &[u8]) -> Result<(), StorageError>;
    /// The fetched checkpoint's state.
    fn read_incoming(&self) -> Result<Vec<u8>, StorageError>;
    /// Makes the fetched checkpoint (validated: `len` bytes whose BLAKE3 is `digest`) the
    /// checkpoint of `cid`.
    fn promote_incoming(&self, cid: u64, len: usize, digest: &[u8; 32])
    -> Result<(), StorageError>;
    /// Drops the fetched checkpoint (rejected).
    fn remove_incoming(&self);
}

impl RecordLog for Log {
    fn append(&mut self, cid: u64, payload: Bytes) -> Result<(), StorageError> {
        Log::append(self, cid, &payload)
    }
    fn flush(&mut self) -> Result<(), StorageError> {
        Log::flush(self)
    }
    fn first_cid(&self) -> Option<u64> {
        Log::first_cid(self)
    }
    fn last_cid(&self) -> Option<u64> {
        Log::last_cid(self)
    }
    fn read_range(&self, range: Range<u64>) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        let mut records = Vec::new();
        self.replay_range(range, |cid, payload| -> Result<(), StorageError> {
            records.push((cid, payload.to_vec()));
            Ok(())
        })?;
        Ok(records)
    }
    fn release_through(&mut self, cid: u64) -> Result<usize, StorageError> {
        Log::release_through(self, cid)
    }
    fn reset_after(&mut self, cid: u64) -> Result<(), StorageError> {
        Log::reset_after(self, cid)
    }
}

impl Checkpoints for CheckpointStore {
    fn write(&self, cid: u64, state: &[u8]) -> Result<[u8; 32], StorageError> {
        CheckpointStore::write(self, cid, state).map(|(_, digest)| digest)
    }
    fn read_chunk(&self, cid: u64, offset: u64, len: usize) -> Result<Vec<u8>, StorageError> {
        CheckpointStore::read_chunk(self, cid, offset, len)
    }
    fn store_chunk(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        CheckpointStore::store_chunk(self, offset, data)
    }
    fn read_incoming(&self) -> Result<Vec<u8>, StorageError> {
        CheckpointStore::read_incoming(self)
    }
    fn promote_incoming(
        &self,
        cid: u64,
        len: usize,
        digest: &[u8; 32],
    ) -> Result<(), StorageError> {
        CheckpointStore::promote_incoming(self, cid, len, digest).map(|_| ())
    }
    fn remove_incoming(&self) {
        CheckpointStore::remove_incoming(self);
    }
}
