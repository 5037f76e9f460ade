//! Storage in memory, for `durability = "none"`: the same [`RecordLog`] and [`Checkpoints`]
//! as the files, lost when the process ends. A replica without a disk keeps its two newest
//! checkpoints and the decisions since the older one here, so it serves state transfer to
//! the others and fetches its own state after a restart like a durable replica with a wiped
//! disk.

use std::{
    collections::{BTreeMap, VecDeque},
    ops::Range,
    sync::{Arc, Mutex, PoisonError},
};

use bytes::Bytes;

use crate::{RecordLog, StorageError, backend::Checkpoints};

/// Decided instances in memory, bounded by what checkpoints release (see [`RecordLog`]).
#[derive(Debug, Default)]
pub struct MemoryLog {
    /// The payloads as appended (shared, not copied).
    records: BTreeMap<u64, Bytes>,
    /// The next instance to append (`None`: anything may come first).
    next: Option<u64>,
}

impl MemoryLog {
    pub fn new() -> Self {
        Self::default()
    }
}

impl RecordLog for MemoryLog {
    fn append(&mut self, cid: u64, payload: Bytes) -> Result<(), StorageError> {
        if let Some(expected) = self.next
            && cid != expected
        {
            return Err(StorageError::OutOfOrder { expected, got: cid });
        }
        self.records.insert(cid, payload);
        self.next = Some(cid + 1);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StorageError> {
        Ok(())
    }
    fn first_cid(&self) -> Option<u64> {
        self.records.keys().next().copied()
    }
    fn last_cid(&self) -> Option<u64> {
        self.next.map(|n| n - 1)
    }
    fn read_range(&self, range: Range<u64>) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        let mut records = Vec::new();
        if range.is_empty() {
            return Ok(records);
        }
        for (expected, (cid, payload)) in (range.start..).zip(self.records.range(range)) {
            if *cid != expected {
                return Err(StorageError::Gap {
                    expected,
                    log_first: *cid,
                });
            }
            records.push((*cid, payload.to_vec()));
        }
        Ok(records)
    }
    fn release_through(&mut self, cid: u64) -> Result<usize, StorageError> {
        let kept = self.records.split_off(&cid.saturating_add(1));
        let released = std::mem::replace(&mut self.records, kept).len();
        Ok(released)
    }
    fn reset_after(&mut self, cid: u64) -> Result<(), StorageError> {
        self.records.clear();
        self.next = Some(cid + 1);
        Ok(())
    }
}

/// Checkpoints in memory (see [`Checkpoints`]); clones share the same store, as the
/// checkpoint and transfer threads share the checkpoint directory.
#[derive(Clone, Debug, Default)]
pub struct MemoryCheckpoints(Arc<Mutex<Held>>);

#[derive(Debug, Default)]
struct Held {
    /// The two newest, oldest first.
    kept: VecDeque<(u64, Arc<Vec<u8>>)>,
    incoming: Vec<u8>,
}

impl MemoryCheckpoints {
    pub fn new() -> Self {
        Self::default()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// As the files keep them (`CheckpointStore::write`): the new one, the newest before it,
    /// and any newer one (a fetched checkpoint promoted below this replica's own).
    fn keep(&self, cid: u64, state: Vec<u8>) {
        let mut held = self.held();
        let previous = held.kept.iter().map(|(c, _)| *c).filter(|c| *c < cid).max();
        held.kept.retain(|(c, _)| *c > cid || Some(*c) == previous);
        held.kept.push_back((cid, Arc::new(state)));
        held.kept.make_contiguous().sort_by_key(|(c, _)| *c);
        debug_assert!(
            held.kept
                .iter()
                .zip(held.kept.iter().skip(1))
                .all(|(a, b)| a.0 < b.0)
        );
    }

    fn missing(cid: u64) -> StorageError {
        StorageError::Io {
            path: format!("memory checkpoint {cid}").into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }
    }
}

impl Checkpoints for MemoryCheckpoints {
    fn write(&self, cid: u64, state: &[u8]) -> Result<[u8; 32], StorageError> {
        let digest = *blake3::hash(state).as_bytes();
        self.keep(cid, state.to_vec());
        Ok(digest)
    }
    fn read_chunk(&self, cid: u64, offset: u64, len: usize) -> Result<Vec<u8>, StorageError> {
        let held = self.held();
        let (_, state) = held
            .kept
            .iter()
            .find(|(c, _)| *c == cid)
            .ok_or_else(|| Self::missing(cid))?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.saturating_add(len);
        state
            .get(start..end)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| Self::missing(cid))
    }
    fn store_chunk(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        let mut held = self.held();
        if offset == 0 {
            held.incoming.clear();
        }
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        if start > held.incoming.len() {
            return Err(StorageError::Incoming {
                reason: format!(
                    "a chunk at {offset} past the {} bytes stored",
                    held.incoming.len()
                ),
            });
        }
        let end = start.saturating_add(data.len());
        if held.incoming.len() < end {
            held.incoming.resize(end, 0);
        }
        held.incoming[start..end].copy_from_slice(data);
        Ok(())
    }
    fn read_incoming(&self) -> Result<Vec<u8>, StorageError> {
        Ok(self.held().incoming.clone())
    }
    fn promote_incoming(
        &self,
        cid: u64,
        len: usize,
        digest: &[u8; 32],
    ) -> Result<(), StorageError> {
        let mut state = std::mem::take(&mut self.held().incoming);
        state.truncate(len);
        if state.len() != len || blake3::hash(&state).as_bytes() != digest {
            return Err(StorageError::Incoming {
                reason: format!("{} bytes stored are not the {len} validated", state.len()),
            });
        }
        self.keep(cid, state);
        Ok(())
    }
    fn remove_incoming(&self) {
        self.held().incoming = Vec::new();
    }
}
