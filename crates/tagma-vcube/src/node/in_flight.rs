//! The tree messages a node awaits acknowledgements for, kept in the order they were sent.
//!
//! Entries sit in a ring in sending order, found by key through a small index of positions.
//! Acknowledgements come back in about the order the messages went out (links are FIFO and
//! a receiver acknowledges in the order it received), so the entries one batch of
//! acknowledgements takes out lie close together in the ring, and the index holds only
//! keys and positions. A hash map of whole entries would scatter them over a table several
//! times larger. The ring also gives the oldest entry at once, which is the one to give up
//! when too many are in flight.
//!
//! An entry taken out leaves a hole, closed when it reaches the front; holes behind an old
//! entry are squeezed out once they outnumber the entries ([`InFlightTable::compact`]), so
//! the ring stays within a constant factor of what is in flight.

use std::collections::VecDeque;

use crate::causal::MsgId;
use crate::fast::FastMap;
use crate::message::TopicId;

/// What an entry is found by: the message's topic and id.
pub(super) type Key = (TopicId, MsgId);

/// Entries in sending order, found by key.
pub(super) struct InFlightTable<V> {
    /// `ring[k]` is the entry at position `base + k` (`None`: taken out since).
    ring: VecDeque<Option<(Key, V)>>,
    base: u64,
    /// The position of every entry.
    index: FastMap<Key, u64>,
}

impl<V> Default for InFlightTable<V> {
    fn default() -> Self {
        InFlightTable {
            ring: VecDeque::new(),
            base: 0,
            index: FastMap::default(),
        }
    }
}

impl<V> InFlightTable<V> {
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    pub(super) fn contains_key(&self, key: &Key) -> bool {
        self.index.contains_key(key)
    }

    pub(super) fn get(&self, key: &Key) -> Option<&V> {
        let pos = *self.index.get(key)?;
        let slot = self.ring.get((pos - self.base) as usize)?;
        slot.as_ref().map(|(_, v)| v)
    }

    pub(super) fn get_mut(&mut self, key: &Key) -> Option<&mut V> {
        let pos = *self.index.get(key)?;
        let slot = self.ring.get_mut((pos - self.base) as usize)?;
        slot.as_mut().map(|(_, v)| v)
    }

    /// Adds an entry as the newest; an entry already there under `key` is replaced where it
    /// is (it keeps its age).
    pub(super) fn insert(&mut self, key: Key, value: V) {
        if let Some(v) = self.get_mut(&key) {
            *v = value;
            return;
        }
        let pos = self.base + self.ring.len() as u64;
        self.ring.push_back(Some((key, value)));
        self.index.insert(key, pos);
    }

    pub(super) fn remove(&mut self, key: &Key) -> Option<V> {
        let pos = self.index.remove(key)?;
        let taken = self.ring.get_mut((pos - self.base) as usize)?.take();
        self.trim_front();
        taken.map(|(_, v)| v)
    }

    /// Takes out the oldest entry.
    pub(super) fn pop_oldest(&mut self) -> Option<(Key, V)> {
        self.trim_front();
        let (key, value) = self.ring.pop_front()??;
        self.base += 1;
        self.index.remove(&key);
        self.trim_front();
        Some((key, value))
    }

    /// The entries, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.ring.iter().flatten().map(|(k, v)| (k, v))
    }

    /// Squeezes the holes out once they outnumber the entries (each hole is squeezed out
    /// once: constant time per entry, amortized).
    pub(super) fn compact(&mut self) {
        let live = self.index.len();
        if self.ring.len() <= 2 * live + 64 {
            return;
        }
        let entries: Vec<(Key, V)> = self.ring.drain(..).flatten().collect();
        self.base = 0;
        for (pos, (key, value)) in entries.into_iter().enumerate() {
            self.index.insert(key, pos as u64);
            self.ring.push_back(Some((key, value)));
        }
    }

    /// Closes the holes at the front.
    fn trim_front(&mut self) {
        while let Some(None) = self.ring.front() {
            self.ring.pop_front();
            self.base += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cube::NodeId;

    fn key(source: u32, counter: u64) -> Key {
        (TopicId(0), MsgId::new(NodeId(source), counter))
    }

    #[test]
    fn entries_are_found_by_key_and_given_up_oldest_first() {
        let mut table = InFlightTable::default();
        for k in 1..=5 {
            table.insert(key(k as u32 % 2, k), k);
        }
        assert_eq!(table.len(), 5);
        assert_eq!(
            table.remove(&key(1, 1)),
            Some(1),
            "the front: its hole closes"
        );
        assert_eq!(table.remove(&key(1, 3)), Some(3), "a hole behind an entry");
        assert_eq!(table.remove(&key(1, 3)), None);
        *table.get_mut(&key(0, 4)).unwrap() += 40;
        table.insert(key(0, 2), 20);
        assert_eq!(table.get(&key(0, 2)), Some(&20), "replaced where it was");
        let order: Vec<u64> = table.iter().map(|(_, v)| *v).collect();
        assert_eq!(order, vec![20, 44, 5]);
        assert_eq!(table.pop_oldest(), Some((key(0, 2), 20)));
        assert_eq!(table.pop_oldest(), Some((key(0, 4), 44)));
        assert!(table.contains_key(&key(1, 5)));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn holes_behind_an_old_entry_are_squeezed_out() {
        let mut table = InFlightTable::default();
        table.insert(key(9, 1), 0);
        for k in 1..=1_000 {
            table.insert(key(1, k), k);
            assert_eq!(table.remove(&key(1, k)), Some(k));
            table.compact();
            assert!(table.ring.len() <= 2 * table.len() + 65);
        }
        table.insert(key(2, 1), 7);
        assert_eq!(table.get(&key(9, 1)), Some(&0));
        assert_eq!(table.get(&key(2, 1)), Some(&7));
        let order: Vec<Key> = table.iter().map(|(k, _)| *k).collect();
        assert_eq!(order, vec![key(9, 1), key(2, 1)]);
    }
}
