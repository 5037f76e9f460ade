//! Mixing: splitting a batch into parallel batches whose requests may run at once.
//!
//! The application supplies a [`Mixer`]: a deterministic guess of the keys (objects, rows,
//! tables: any granularity) each request reads and writes. [`mix`] scans the batch in order
//! and puts each request into the first parallel batch it does not conflict with (it writes
//! no key that batch reads or writes, and reads no key that batch writes), or into a new one
//! at the end. Parallel batches run one after the other, the requests inside one
//! concurrently; that order, parallel batch by parallel batch and by position in the batch
//! within each, is the order the batch is executed in ([`Mixed::order`]). Every replica
//! mixes the same batch alike. A wrong guess costs a rollback, never safety: the replicas'
//! states are compared after the batch.

use std::collections::HashSet;
use std::hash::Hash;

/// The keys one request reads and writes, as the mixer guesses them. A key both read and
/// written belongs in `writes` (it may be listed in both).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access<K> {
    pub reads: Vec<K>,
    pub writes: Vec<K>,
}

/// An application's guess of what its requests touch. It must be deterministic: the same
/// request gives the same keys on every replica.
pub trait Mixer<R> {
    type Key: Hash + Eq + Clone;
    fn access(&self, request: &R) -> Access<Self::Key>;
}

/// A batch split into parallel batches: each holds positions in the batch, ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mixed {
    pub parallel_batches: Vec<Vec<usize>>,
}

impl Mixed {
    /// The order the batch executes in: parallel batch after parallel batch.
    pub fn order(&self) -> impl Iterator<Item = usize> + '_ {
        self.parallel_batches.iter().flatten().copied()
    }
}

/// The keys one parallel batch reads and writes so far.
struct Touched<K> {
    reads: HashSet<K>,
    writes: HashSet<K>,
}

impl<K: Hash + Eq + Clone> Touched<K> {
    fn conflicts(&self, access: &Access<K>) -> bool {
        access
            .writes
            .iter()
            .any(|k| self.writes.contains(k) || self.reads.contains(k))
            || access.reads.iter().any(|k| self.writes.contains(k))
    }

    fn add(&mut self, access: Access<K>) {
        self.reads.extend(access.reads);
        self.writes.extend(access.writes);
    }
}

/// Splits `batch` into parallel batches (see the module's documentation). The sets are only
/// queried, never iterated, so the result does not depend on their hashing.
pub fn mix<R, M: Mixer<R>>(mixer: &M, batch: &[R]) -> Mixed {
    let mut touched: Vec<Touched<M::Key>> = Vec::new();
    let mut parallel_batches: Vec<Vec<usize>> = Vec::new();
    for (i, request) in batch.iter().enumerate() {
        let access = mixer.access(request);
        match touched.iter().position(|t| !t.conflicts(&access)) {
            Some(p) => {
                touched[p].add(access);
                parallel_batches[p].push(i);
            }
            None => {
                let mut t = Touched {
                    reads: HashSet::new(),
                    writes: HashSet::new(),
                };
                t.add(access);
                touched.push(t);
                parallel_batches.push(vec![i]);
            }
        }
    }
    Mixed { parallel_batches }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests as (keys read, keys written).
    struct Keys;

    impl Mixer<(&'static [u32], &'static [u32])> for Keys {
        type Key = u32;
        fn access(&self, r: &(&'static [u32], &'static [u32])) -> Access<u32> {
            Access {
                reads: r.0.to_vec(),
                writes: r.1.to_vec(),
            }
        }
    }

    #[test]
    fn requests_without_conflicts_share_one_parallel_batch() {
        let batch: [(&[u32], &[u32]); 4] = [(&[1], &[1]), (&[2], &[2]), (&[9], &[]), (&[9], &[3])];
        assert_eq!(mix(&Keys, &batch).parallel_batches, vec![vec![0, 1, 2, 3]]);
        assert_eq!(
            mix(&Keys, &batch[..0]).parallel_batches,
            Vec::<Vec<usize>>::new()
        );
    }

    #[test]
    fn write_write_and_read_write_conflicts_start_new_parallel_batches() {
        let batch: [(&[u32], &[u32]); 4] = [
            (&[], &[1]), // writes 1
            (&[], &[1]), // writes 1 again: conflict
            (&[1], &[]), // reads 1: conflicts with both writers
            (&[2], &[]), // reads 2: no conflict
        ];
        let mixed = mix(&Keys, &batch);
        assert_eq!(mixed.parallel_batches, vec![vec![0, 3], vec![1], vec![2]]);
        assert_eq!(mixed.order().collect::<Vec<_>>(), vec![0, 3, 1, 2]);
        // Readers share a batch; a writer after them does not join it.
        let batch: [(&[u32], &[u32]); 3] = [(&[5], &[]), (&[5], &[]), (&[], &[5])];
        assert_eq!(
            mix(&Keys, &batch).parallel_batches,
            vec![vec![0, 1], vec![2]]
        );
    }

    #[test]
    fn a_request_goes_into_the_first_parallel_batch_it_does_not_conflict_with() {
        let batch: [(&[u32], &[u32]); 4] = [
            (&[], &[1]),
            (&[], &[1, 2]), // conflicts with 0: second batch
            (&[], &[2, 3]), // conflicts with 1 only: back into the first
            (&[], &[3]),    // conflicts with 2 (first) only: second batch
        ];
        assert_eq!(
            mix(&Keys, &batch).parallel_batches,
            vec![vec![0, 2], vec![1, 3]]
        );
    }
}
