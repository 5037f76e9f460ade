//! What a request sees while it executes: the batch's working state and its
//! non-deterministic inputs.
//!
//! Objects a request creates get ids derived from the batch, the request's position and a
//! count ([`RequestContext::create`]), never from the order threads ran in.

use bytes::Bytes;

use crate::batch::NonDeterminism;
use crate::tree::ObjectId;
use crate::working::{Accessor, WorkingState};

const CREATED_DOMAIN: &[u8] = b"tagma eve created object\0";
const RANDOM_DOMAIN: &[u8] = b"tagma eve request seed\0";

/// A request's view of the service state and of its batch, handed to
/// [`EveService::execute`](crate::EveService::execute).
pub struct RequestContext<'a> {
    state: &'a WorkingState<'a>,
    nd: NonDeterminism,
    seq: u64,
    by: Accessor,
    created: u32,
}

impl<'a> RequestContext<'a> {
    pub(crate) fn new(
        state: &'a WorkingState<'a>,
        nd: NonDeterminism,
        seq: u64,
        by: Accessor,
    ) -> Self {
        RequestContext {
            state,
            nd,
            seq,
            by,
            created: 0,
        }
    }

    /// The value of object `id` now: as the batch left it so far, or as it was before.
    pub fn get(&self, id: ObjectId) -> Option<Bytes> {
        self.state.get(id, self.by)
    }

    /// Every object as the batch left it so far, in no particular order (sort them for a
    /// deterministic one). These reads are not checked against other requests' writes: the
    /// mixer must declare that a request reading everything conflicts with writers.
    pub fn objects(&self) -> Vec<(ObjectId, Bytes)> {
        self.state.objects()
    }

    /// Writes object `id` (creating it if needed); returns its value before.
    pub fn put(&mut self, id: ObjectId, value: Bytes) -> Option<Bytes> {
        self.state.set(id, Some(value), self.by)
    }

    /// Removes object `id`; returns its value.
    pub fn remove(&mut self, id: ObjectId) -> Option<Bytes> {
        self.state.set(id, None, self.by)
    }

    /// Creates an object holding `value` and returns its id, derived from the batch, this
    /// request's position in it and how many objects it created before: the same on every
    /// executor whatever the threads did.
    pub fn create(&mut self, value: Bytes) -> ObjectId {
        loop {
            let mut h = blake3::Hasher::new();
            h.update(CREATED_DOMAIN);
            h.update(&self.seq.to_le_bytes());
            h.update(&self.by.position.to_le_bytes());
            h.update(&self.created.to_le_bytes());
            self.created += 1;
            let digest = h.finalize();
            let mut id = [0u8; 8];
            id.copy_from_slice(&digest.as_bytes()[..8]);
            let id = ObjectId(u64::from_le_bytes(id));
            // An id the application chose itself is left alone (2^-64 odds per object).
            if self.state.get(id, self.by).is_none() {
                self.state.set(id, Some(value), self.by);
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
        h.update(&self.by.position.to_le_bytes());
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
        self.by.position
    }
}
