//! The lease index of one space: its leased tuples ordered by `(lease end, revision)`, so
//! the agreed time's advance finds what expired in O(expired), never by scanning the space.

use std::collections::BTreeSet;

/// `(lease end ms, revision)` of every leased tuple of a space.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LeaseIndex {
    by_end: BTreeSet<(u64, u64)>,
}

impl LeaseIndex {
    pub(crate) fn insert(&mut self, expires_ms: u64, revision: u64) {
        self.by_end.insert((expires_ms, revision));
    }

    pub(crate) fn remove(&mut self, expires_ms: u64, revision: u64) {
        self.by_end.remove(&(expires_ms, revision));
    }

    /// The earliest lease end.
    pub(crate) fn earliest(&self) -> Option<u64> {
        self.by_end.first().map(|(end, _)| *end)
    }

    /// Removes and returns the revisions whose lease ended at `now_ms` or before, earliest
    /// end first (ties by revision).
    pub(crate) fn take_expired(&mut self, now_ms: u64) -> Vec<u64> {
        let mut expired = Vec::new();
        while let Some(&(end, revision)) = self.by_end.first() {
            if end > now_ms {
                break;
            }
            self.by_end.pop_first();
            expired.push(revision);
        }
        expired
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_end.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_leases_leave_in_end_then_revision_order_and_later_ones_stay() {
        let mut index = LeaseIndex::default();
        index.insert(300, 1);
        index.insert(100, 7);
        index.insert(100, 2);
        index.insert(200, 5);
        assert_eq!(index.earliest(), Some(100));
        assert_eq!(index.take_expired(99), Vec::<u64>::new());
        assert_eq!(index.take_expired(200), vec![2, 7, 5]);
        assert_eq!(index.earliest(), Some(300));
        index.remove(300, 1);
        assert_eq!(index.earliest(), None);
        assert_eq!(index.len(), 0);
    }
}
