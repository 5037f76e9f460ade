//! What a request sees while it executes: the batch's working state and the batch's
//! non-deterministic inputs.
//!
//! The requests of a parallel batch share one working state: the tree as it was before the
//! batch, under the writes made since in this batch. A write is visible to every request at
//! once (each object behind its own short lock, like a database's latches, with no
//! isolation between requests). That is what a multi-threaded server does, and why a wrong
//! guess of the mixer can make two executors reach different states: requests that really
//! conflict, run at once, interleave differently on each. The executors then disagree, and
//! the batch is rolled back and run again in order.
//!
//! Writes enter the tree at the end of the batch, whatever order they were made in: the
//! tree's shape depends only on the objects it holds. Objects a request creates get ids
//! derived from the batch, the request's position and a count ([`RequestContext::create`]),
//! never from the order threads ran in.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::batch::NonDeterminism;
use crate::tree::{ObjectId, ObjectTree};

/// Independent locks over the written objects (a power of two).
const SHARDS: usize = 64;

/// The state of a batch under execution: the tree before it and the writes since.
pub(crate) struct WorkingState<'a> {
    base: &'a ObjectTree,
    /// Written objects, each shard behind its lock: `None` is a removal.
    shards: Vec<Mutex<HashMap<ObjectId, Option<Bytes>>>>,
}

impl<'a> WorkingState<'a> {
    pub(crate) fn new(base: &'a ObjectTree) -> Self {
        WorkingState {
            base,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, id: ObjectId) -> MutexGuard<'_, HashMap<ObjectId, Option<Bytes>>> {
        let index = (id.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % SHARDS;
        // A request that panicked leaves its writes whole (each is one insert): the lock's
        // poison carries no meaning here.
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self, id: ObjectId) -> Option<Bytes> {
        match self.shard(id).get(&id) {
            Some(written) => written.clone(),
            None => self.base.get(id).cloned(),
        }
    }

    /// Writes (`Some`) or removes (`None`) object `id`; returns its value before.
    pub(crate) fn set(&self, id: ObjectId, value: Option<Bytes>) -> Option<Bytes> {
        let mut shard = self.shard(id);
        match shard.insert(id, value) {
            Some(before) => before,
            None => self.base.get(id).cloned(),
        }
    }

    /// Applies the batch's writes to `tree` (a copy of the base); returns the objects written
    /// and their bytes.
    pub(crate) fn apply_to(self, tree: &mut ObjectTree) -> (usize, usize) {
        let (mut objects, mut bytes) = (0, 0);
        for shard in self.shards {
            for (id, value) in shard.into_inner().unwrap_or_else(PoisonError::into_inner) {
                objects += 1;
                match value {
                    Some(value) => {
                        bytes += value.len();
                        tree.insert(id, value);
                    }
                    None => {
                        tree.remove(id);
                    }
                }
            }
        }
        (objects, bytes)
    }
}

const CREATED_DOMAIN: &[u8] = b"tagma eve created object\0";
const RANDOM_DOMAIN: &[u8] = b"tagma eve request seed\0";

/// A request's view of the service state and of its batch, handed to
/// [`EveService::execute`](crate::EveService::execute).
pub struct RequestContext<'a> {
    state: &'a WorkingState<'a>,
    nd: NonDeterminism,
    seq: u64,
    position: u32,
    created: u32,
}

impl<'a> RequestContext<'a> {
    pub(crate) fn new(
        state: &'a WorkingState<'a>,
        nd: NonDeterminism,
        seq: u64,
        position: u32,
    ) -> Self {
        RequestContext {
            state,
            nd,
            seq,
            position,
            created: 0,
        }
    }

    /// The value of object `id` now: as the batch left it so far, or as it was before.
    pub fn get(&self, id: ObjectId) -> Option<Bytes> {
        self.state.get(id)
    }

    /// Writes object `id` (creating it if needed); returns its value before.
    pub fn put(&mut self, id: ObjectId, value: Bytes) -> Option<Bytes> {
        self.state.set(id, Some(value))
    }

    /// Removes object `id`; returns its value.
    pub fn remove(&mut self, id: ObjectId) -> Option<Bytes> {
        self.state.set(id, None)
    }

    /// Creates an object holding `value` and returns its id, derived from the batch, this
    /// request's position in it and how many objects it created before: the same on every
    /// executor whatever the threads did.
    pub fn create(&mut self, value: Bytes) -> ObjectId {
        loop {
            let mut h = blake3::Hasher::new();
            h.update(CREATED_DOMAIN);
            h.update(&self.seq.to_le_bytes());
            h.update(&self.position.to_le_bytes());
            h.update(&self.created.to_le_bytes());
            self.created += 1;
            let digest = h.finalize();
            let mut id = [0u8; 8];
            id.copy_from_slice(&digest.as_bytes()[..8]);
            let id = ObjectId(u64::from_le_bytes(id));
            // An id the application chose itself is left alone (2^-64 odds per object).
            if self.state.get(id).is_none() {
                self.state.set(id, Some(value));
                return id;
            }
        }
    }

    /// The batch's time, in milliseconds since the Unix epoch (the primary's clock).
    pub fn timestamp_ms(&self) -> u64 {
        self.nd.timestamp_ms
    }

    /// A seed for this request's random choices: the batch's seed mixed with the request's
    /// position, the same on every executor.
    pub fn random_seed(&self) -> u64 {
        let mut h = blake3::Hasher::new();
        h.update(RANDOM_DOMAIN);
        h.update(&self.nd.seed.to_le_bytes());
        h.update(&self.position.to_le_bytes());
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&h.finalize().as_bytes()[..8]);
        u64::from_le_bytes(seed)
    }

    /// The batch this request belongs to.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// This request's position in its batch.
    pub fn position(&self) -> u32 {
        self.position
    }
}
