//! The sealed tuples recently taken from one space (by `inp`, `in`, `inAll` or the take of
//! `replace`), so that their taker can still fetch the replicas' shares and open them: the
//! taken tuple is gone from the space, but its sealed part stays here, readable by the
//! taker's principal only, until `taken_keep_ms` of agreed time has passed.
//!
//! Part of the replicated state (and so of every snapshot and the state digest): every
//! replica takes the same tuples at the same agreed times. Bounded per space by a count
//! (`taken_per_space_max`) and bytes (`taken_bytes_max`); beyond either, the entries that
//! end first are dropped, and their takers can no longer open them.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::limits::{SpaceLimits, TAKEN_OVERHEAD_BYTES};

/// One taken sealed tuple.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Taken {
    /// The principal that took it: the only one its shares are given to.
    pub(crate) taker: u32,
    /// The agreed time at which it is dropped.
    pub(crate) expires_ms: u64,
    pub(crate) sealed: Bytes,
}

impl Taken {
    fn bytes(&self) -> usize {
        self.sealed.len() + TAKEN_OVERHEAD_BYTES
    }
}

/// The taken sealed tuples of one space, by revision, with their ends in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TakenBuffer {
    by_revision: BTreeMap<u64, Taken>,
    /// `(expires_ms, revision)`.
    ends: BTreeSet<(u64, u64)>,
    bytes: usize,
}

impl TakenBuffer {
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_revision.len()
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The taken tuple of `revision`, if it has not ended at `now_ms`.
    pub(crate) fn get(&self, revision: u64, now_ms: u64) -> Option<&Taken> {
        self.by_revision
            .get(&revision)
            .filter(|t| t.expires_ms > now_ms)
    }

    /// Every entry, by revision.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Taken)> {
        self.by_revision.iter().map(|(r, t)| (*r, t))
    }

    /// Keeps the sealed part of the tuple of `revision` that `taker` took at `now_ms`, for
    /// `taken_keep_ms`; drops the entries that end first while the buffer is over its limits.
    pub(crate) fn record(
        &mut self,
        revision: u64,
        taker: u32,
        sealed: Bytes,
        now_ms: u64,
        limits: &SpaceLimits,
    ) {
        let taken = Taken {
            taker,
            expires_ms: now_ms.saturating_add(limits.taken_keep_ms),
            sealed,
        };
        self.insert(revision, taken);
        while self.by_revision.len() > limits.taken_per_space_max
            || self.bytes > limits.taken_bytes_max
        {
            let Some((_, oldest)) = self.ends.pop_first() else {
                break;
            };
            if let Some(dropped) = self.by_revision.remove(&oldest) {
                self.bytes -= dropped.bytes();
            }
        }
    }

    /// Inserts an entry as it is (a snapshot's); false if that puts the buffer over its
    /// limits.
    pub(crate) fn restore(&mut self, revision: u64, taken: Taken, limits: &SpaceLimits) -> bool {
        self.insert(revision, taken);
        self.by_revision.len() <= limits.taken_per_space_max && self.bytes <= limits.taken_bytes_max
    }

    fn insert(&mut self, revision: u64, taken: Taken) {
        if let Some(old) = self.by_revision.remove(&revision) {
            self.ends.remove(&(old.expires_ms, revision));
            self.bytes -= old.bytes();
        }
        self.ends.insert((taken.expires_ms, revision));
        self.bytes += taken.bytes();
        self.by_revision.insert(revision, taken);
    }

    /// Drops the entries that ended at `now_ms` or before.
    pub(crate) fn expire(&mut self, now_ms: u64) {
        while let Some(&(end, revision)) = self.ends.first() {
            if end > now_ms {
                break;
            }
            self.ends.pop_first();
            if let Some(dropped) = self.by_revision.remove(&revision) {
                self.bytes -= dropped.bytes();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(count: usize, bytes: usize) -> SpaceLimits {
        SpaceLimits {
            taken_keep_ms: 100,
            taken_per_space_max: count,
            taken_bytes_max: bytes,
            ..SpaceLimits::default()
        }
    }

    fn sealed(len: usize) -> Bytes {
        Bytes::from(vec![1u8; len])
    }

    #[test]
    fn entries_end_after_the_keep_time_and_the_first_to_end_go_first_when_full() {
        let limits = limits(2, 1 << 20);
        let mut buffer = TakenBuffer::default();
        buffer.record(9, 1, sealed(10), 1_000, &limits);
        buffer.record(3, 2, sealed(10), 1_010, &limits);
        assert_eq!(buffer.get(9, 1_099).map(|t| t.taker), Some(1));
        assert!(buffer.get(9, 1_100).is_none(), "ended at 1100");
        // A third entry drops the one that ends first (revision 9), whatever the revisions.
        buffer.record(5, 3, sealed(10), 1_020, &limits);
        assert_eq!(buffer.len(), 2);
        assert!(buffer.get(9, 1_050).is_none());
        assert_eq!(buffer.get(3, 1_050).map(|t| t.taker), Some(2));
        buffer.expire(1_110);
        assert_eq!(buffer.iter().map(|(r, _)| r).collect::<Vec<_>>(), [5]);
        buffer.expire(1_120);
        assert_eq!(buffer.len(), 0);
        assert_eq!(buffer.bytes(), 0);
    }

    #[test]
    fn the_byte_limit_drops_entries_too_and_restoring_past_it_is_refused() {
        let limits = limits(100, 2 * (100 + TAKEN_OVERHEAD_BYTES));
        let mut buffer = TakenBuffer::default();
        for revision in 1..=3 {
            buffer.record(revision, 1, sealed(100), 1_000 + revision, &limits);
        }
        assert_eq!(buffer.iter().map(|(r, _)| r).collect::<Vec<_>>(), [2, 3]);
        assert!(buffer.bytes() <= limits.taken_bytes_max);
        let mut restored = TakenBuffer::default();
        let entry = |end| Taken {
            taker: 1,
            expires_ms: end,
            sealed: sealed(100),
        };
        assert!(restored.restore(1, entry(5), &limits));
        assert!(restored.restore(2, entry(6), &limits));
        assert!(!restored.restore(3, entry(7), &limits));
    }
}
