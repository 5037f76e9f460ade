//! The tuples of one space, keyed by revision — the order of insertion, so the first match
//! is the oldest — each with its owner (the principal that inserted it), lease end and (in a
//! protected space) sealed original, and the lease index that expires them.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_space::{Stored, TypedTemplate, TypedTuple};

use crate::leases::LeaseIndex;
use crate::limits::TUPLE_OVERHEAD_BYTES;

/// A tuple as one space holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) tuple: TypedTuple,
    /// The principal that inserted it.
    pub(crate) owner: u32,
    pub(crate) lease_expires_ms: Option<u64>,
    /// The original tuple sealed among the replicas (a protected space's tuples).
    pub(crate) sealed: Option<Bytes>,
}

impl Entry {
    /// Whether the tuple's lease has not ended at `now_ms`.
    pub(crate) fn live(&self, now_ms: u64) -> bool {
        self.lease_expires_ms.is_none_or(|end| end > now_ms)
    }

    /// The bytes it counts against the space's budget.
    pub(crate) fn bytes(&self) -> usize {
        entry_bytes(&self.tuple, self.sealed.as_ref())
    }

    pub(crate) fn stored(&self, revision: u64) -> Stored {
        Stored {
            tuple: self.tuple.clone(),
            revision,
            lease_expires_ms: self.lease_expires_ms,
            sealed: self.sealed.clone(),
        }
    }
}

/// The bytes a stored `tuple` with its `sealed` part counts against its space's budget.
pub(crate) fn entry_bytes(tuple: &TypedTuple, sealed: Option<&Bytes>) -> usize {
    tuple.encoded_len() + sealed.map_or(0, Bytes::len) + TUPLE_OVERHEAD_BYTES
}

/// One space's tuples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Store {
    tuples: BTreeMap<u64, Entry>,
    leases: LeaseIndex,
    bytes: usize,
}

impl Store {
    pub(crate) fn len(&self) -> usize {
        self.tuples.len()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn get(&self, revision: u64) -> Option<&Entry> {
        self.tuples.get(&revision)
    }

    /// Every tuple, oldest first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, &Entry)> {
        self.tuples.iter().map(|(r, e)| (*r, e))
    }

    /// Stores `entry` under `revision`, which must be above every revision stored.
    pub(crate) fn insert(&mut self, revision: u64, entry: Entry) {
        debug_assert!(
            self.tuples
                .last_key_value()
                .is_none_or(|(r, _)| *r < revision)
        );
        if let Some(end) = entry.lease_expires_ms {
            self.leases.insert(end, revision);
        }
        self.bytes += entry.bytes();
        self.tuples.insert(revision, entry);
    }

    pub(crate) fn remove(&mut self, revision: u64) -> Option<Entry> {
        let entry = self.tuples.remove(&revision)?;
        if let Some(end) = entry.lease_expires_ms {
            self.leases.remove(end, revision);
        }
        self.bytes -= entry.bytes();
        Some(entry)
    }

    /// Sets the lease end of a stored tuple.
    pub(crate) fn set_lease(&mut self, revision: u64, expires_ms: u64) {
        if let Some(entry) = self.tuples.get_mut(&revision) {
            if let Some(end) = entry.lease_expires_ms {
                self.leases.remove(end, revision);
            }
            entry.lease_expires_ms = Some(expires_ms);
            self.leases.insert(expires_ms, revision);
        }
    }

    /// Revisions of the live tuples matching `template` that `admit` lets through, oldest
    /// first.
    pub(crate) fn matching<'a>(
        &'a self,
        template: &'a TypedTemplate,
        now_ms: u64,
        admit: impl Fn(&Entry) -> bool + 'a,
    ) -> impl Iterator<Item = u64> + 'a {
        self.tuples
            .iter()
            .filter(move |(_, e)| e.live(now_ms) && template.matches(&e.tuple) && admit(e))
            .map(|(r, _)| *r)
    }

    /// Removes the tuples whose lease ended at `now_ms` or before; returns how many.
    pub(crate) fn expire(&mut self, now_ms: u64) -> usize {
        let expired = self.leases.take_expired(now_ms);
        for revision in &expired {
            if let Some(entry) = self.tuples.remove(revision) {
                self.bytes -= entry.bytes();
            }
        }
        expired.len()
    }

    /// The earliest lease end.
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.leases.earliest()
    }

    #[cfg(test)]
    pub(crate) fn leased(&self) -> usize {
        self.leases.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagma_space::Field;

    fn t(v: i64) -> TypedTuple {
        TypedTuple(vec![Field::Str("k".into()), Field::Int(v)])
    }

    fn entry(v: i64, lease: Option<u64>) -> Entry {
        Entry {
            tuple: t(v),
            owner: 1,
            lease_expires_ms: lease,
            sealed: None,
        }
    }

    #[test]
    fn matching_is_oldest_first_and_skips_expired_and_refused_tuples() {
        let mut store = Store::default();
        store.insert(3, entry(30, None));
        store.insert(5, entry(50, Some(100)));
        store.insert(9, entry(90, None));
        let any: TypedTemplate = "(\"k\", *int)".parse().unwrap();
        assert_eq!(
            store.matching(&any, 99, |_| true).collect::<Vec<_>>(),
            [3, 5, 9]
        );
        // At its lease end a tuple no longer matches, though it is still stored.
        assert_eq!(
            store.matching(&any, 100, |_| true).collect::<Vec<_>>(),
            [3, 9]
        );
        assert_eq!(
            store
                .matching(&any, 0, |e| e.tuple.0[1] != Field::Int(30))
                .collect::<Vec<_>>(),
            [5, 9]
        );
        assert_eq!(store.len(), 3);
    }

    #[test]
    fn expiry_renewal_and_removal_keep_the_index_and_bytes_in_step() {
        let mut store = Store::default();
        store.insert(1, entry(1, Some(100)));
        store.insert(2, entry(2, Some(50)));
        store.insert(3, entry(3, None));
        let bytes_one = entry_bytes(&t(1), None);
        assert_eq!(store.bytes(), 3 * bytes_one);
        assert_eq!(store.next_expiry(), Some(50));
        store.set_lease(2, 200);
        assert_eq!(store.next_expiry(), Some(100));
        assert_eq!(store.expire(150), 1);
        assert!(store.get(1).is_none());
        assert_eq!(store.next_expiry(), Some(200));
        assert_eq!(store.remove(2).unwrap().lease_expires_ms, Some(200));
        assert_eq!(store.next_expiry(), None);
        assert_eq!(store.leased(), 0);
        assert_eq!(store.bytes(), bytes_one);
        assert_eq!(store.expire(u64::MAX), 0, "a tuple with no lease stays");
    }
}
