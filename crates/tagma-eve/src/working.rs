//! The working state of a batch under execution: the tree as it was before the batch, under
//! the writes made since, with a record of which requests touched each object.
//!
//! The requests of a parallel batch share it. A write is visible to every request at once
//! (each object behind a short lock, like a database's latches, with no isolation between
//! requests): what a multi-threaded server does, and why a wrong guess of the mixer can make
//! executors reach different states. Writes enter the tree at the end of the batch, whatever
//! order they were made in (the tree's shape depends only on the objects it holds).
//!
//! Each access is stamped with its *epoch* (a parallel batch, or one request run alone) and
//! the request's position. Two requests of one epoch touching the same object, one of them
//! writing, is a conflict the mixer missed: the outcome may depend on how the threads
//! interleaved. The working state notes it, and keeps what each object held before the
//! epoch's first write to it, so the executor can undo the epoch and run it again in order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::tree::{ObjectId, ObjectTree};

/// Independent locks over the touched objects (a power of two).
const SHARDS: usize = 64;

/// Who is accessing: the epoch and the request's position in the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Accessor {
    pub(crate) epoch: u32,
    pub(crate) position: u32,
}

/// An object touched during the batch.
#[derive(Default)]
struct Slot {
    /// What the batch wrote: `None` if nothing yet, `Some(None)` if it removed the object.
    written: Option<Option<Bytes>>,
    /// The epoch of the fields below.
    epoch: u32,
    /// The first request to touch the object in `epoch`.
    first: u32,
    /// Another request touched it too in `epoch`.
    shared: bool,
    /// What `written` held before `epoch`'s first write (`Some` once the epoch wrote).
    undo: Option<Option<Option<Bytes>>>,
}

impl Slot {
    /// Notes an access; returns whether it makes a missed conflict.
    fn touch(&mut self, by: Accessor, write: bool) -> bool {
        if self.epoch != by.epoch {
            self.epoch = by.epoch;
            self.first = by.position;
            self.shared = false;
            self.undo = None;
        } else if self.first != by.position {
            self.shared = true;
        }
        if write && self.undo.is_none() {
            self.undo = Some(self.written.clone());
        }
        self.shared && self.undo.is_some()
    }
}

type Shard = HashMap<ObjectId, Slot>;

pub(crate) struct WorkingState<'a> {
    base: &'a ObjectTree,
    shards: Vec<Mutex<Shard>>,
    /// A missed conflict happened in the current epoch.
    conflict: AtomicBool,
}

impl<'a> WorkingState<'a> {
    pub(crate) fn new(base: &'a ObjectTree) -> Self {
        WorkingState {
            base,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            conflict: AtomicBool::new(false),
        }
    }

    fn shard(&self, id: ObjectId) -> MutexGuard<'_, Shard> {
        let index = (id.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % SHARDS;
        lock(&self.shards[index])
    }

    pub(crate) fn get(&self, id: ObjectId, by: Accessor) -> Option<Bytes> {
        let mut shard = self.shard(id);
        let slot = shard.entry(id).or_default();
        if slot.touch(by, false) {
            self.conflict.store(true, Ordering::Relaxed);
        }
        match &slot.written {
            Some(written) => written.clone(),
            None => self.base.get(id).cloned(),
        }
    }

    /// Writes (`Some`) or removes (`None`) object `id`; returns its value before.
    pub(crate) fn set(&self, id: ObjectId, value: Option<Bytes>, by: Accessor) -> Option<Bytes> {
        let mut shard = self.shard(id);
        let slot = shard.entry(id).or_default();
        if slot.touch(by, true) {
            self.conflict.store(true, Ordering::Relaxed);
        }
        match slot.written.replace(value) {
            Some(before) => before,
            None => self.base.get(id).cloned(),
        }
    }

    /// Every object as the batch left it so far, in no particular order. The accesses are
    /// not stamped: a request that reads everything must be declared to conflict with
    /// writers by its mixer, or is left to verification.
    pub(crate) fn objects(&self) -> Vec<(ObjectId, Bytes)> {
        let mut written: HashMap<ObjectId, Option<Bytes>> = HashMap::new();
        for shard in &self.shards {
            for (id, slot) in lock(shard).iter() {
                if let Some(value) = &slot.written {
                    written.insert(*id, value.clone());
                }
            }
        }
        let mut out: Vec<(ObjectId, Bytes)> = (self.base.iter())
            .filter(|(id, _)| !written.contains_key(id))
            .map(|(id, v)| (id, v.clone()))
            .collect();
        out.extend(written.into_iter().filter_map(|(id, v)| Some((id, v?))));
        out
    }

    /// Whether a missed conflict happened since the last call (which clears it).
    pub(crate) fn take_conflict(&self) -> bool {
        self.conflict.swap(false, Ordering::Relaxed)
    }

    /// Undoes every write of `epoch`.
    pub(crate) fn undo(&self, epoch: u32) {
        for shard in &self.shards {
            for slot in lock(shard).values_mut() {
                if slot.epoch == epoch
                    && let Some(before) = slot.undo.take()
                {
                    slot.written = before;
                }
            }
        }
    }

    /// Applies the batch's writes to `tree` (a copy of the base); returns the objects written
    /// and their bytes.
    pub(crate) fn apply_to(self, tree: &mut ObjectTree) -> (usize, usize) {
        let (mut objects, mut bytes) = (0, 0);
        for shard in self.shards {
            let shard = shard.into_inner().unwrap_or_else(PoisonError::into_inner);
            for (id, slot) in shard {
                match slot.written {
                    None => {}
                    Some(Some(value)) => {
                        objects += 1;
                        bytes += value.len();
                        tree.insert(id, value);
                    }
                    Some(None) => {
                        objects += 1;
                        tree.remove(id);
                    }
                }
            }
        }
        (objects, bytes)
    }
}

/// A request that panicked leaves each slot whole (every change to one is a few plain
/// assignments): the lock's poison carries no meaning here.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(epoch: u32, position: u32) -> Accessor {
        Accessor { epoch, position }
    }

    #[test]
    fn two_requests_of_an_epoch_touching_an_object_one_writing_is_a_missed_conflict() {
        let mut base = ObjectTree::new();
        base.insert(ObjectId(1), Bytes::from_static(b"one"));
        let w = WorkingState::new(&base);
        // Reads alone, and one request's own reads and writes, conflict with nothing.
        w.get(ObjectId(1), by(1, 0));
        w.get(ObjectId(1), by(1, 1));
        w.set(ObjectId(2), Some(Bytes::from_static(b"x")), by(1, 2));
        w.get(ObjectId(2), by(1, 2));
        assert!(!w.take_conflict());
        // A write to what another request of the epoch read.
        w.set(ObjectId(1), Some(Bytes::from_static(b"uno")), by(1, 3));
        assert!(w.take_conflict());
        assert!(!w.take_conflict(), "taking it clears it");
        // A later epoch starts afresh.
        w.get(ObjectId(1), by(2, 4));
        assert!(!w.take_conflict());
        // A read of what another request of the epoch wrote.
        w.set(ObjectId(3), Some(Bytes::from_static(b"y")), by(3, 5));
        w.get(ObjectId(3), by(3, 6));
        assert!(w.take_conflict());
    }

    #[test]
    fn undoing_an_epoch_restores_what_the_batch_held_before_it() {
        let mut base = ObjectTree::new();
        base.insert(ObjectId(1), Bytes::from_static(b"base"));
        let w = WorkingState::new(&base);
        w.set(ObjectId(1), Some(Bytes::from_static(b"epoch1")), by(1, 0));
        w.set(ObjectId(1), Some(Bytes::from_static(b"epoch2a")), by(2, 1));
        w.set(ObjectId(1), Some(Bytes::from_static(b"epoch2b")), by(2, 2));
        w.set(ObjectId(2), Some(Bytes::from_static(b"new")), by(2, 1));
        w.set(ObjectId(3), None, by(2, 1));
        w.undo(2);
        assert_eq!(w.get(ObjectId(1), by(3, 0)).unwrap(), "epoch1");
        assert_eq!(w.get(ObjectId(2), by(3, 0)), None);
        let mut tree = base.clone();
        assert_eq!(w.apply_to(&mut tree), (1, 6));
        assert_eq!(tree.get(ObjectId(1)).unwrap(), "epoch1");
    }
}
