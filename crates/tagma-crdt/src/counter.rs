//! Positive-negative counters: the plain one, and the one a map key removal can reset.
//!
//! An operation adds a signed amount (negative to decrement). Each counter keeps one running
//! sum per publishing node; the value is the sum of those sums. Causal delivery applies every
//! node's operations in the order that node published them, so each per-node sum goes through
//! the same sequence on every replica. Arithmetic saturates at the `i64` bounds instead of
//! wrapping: a per-node sum saturates as its own adds arrive, and the value is the saturating
//! sum of the per-node sums in ascending node order, the same on every replica.
//!
//! [`ResetCounter`] is the counter inside a [`crate::Map`]. A key removal carries, for every
//! node whose adds its origin had seen, a [`CounterMark`]: the counter of that node's last add
//! to the key and the node's sum up to it. Applying the removal takes away that prefix of the
//! node's adds; adds the removal's origin had not seen stay. Marks combine by maximum, so the
//! outcome does not depend on the order removals and concurrent adds arrive in.

use std::collections::BTreeMap;

use crate::dot::Dot;

/// A counter operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterOp {
    /// Adds the amount (negative: subtracts).
    Add(i64),
}

/// A positive-negative counter whose state is one sum per node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    sums: BTreeMap<u32, i64>,
}

impl Counter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// A counter with these per-node sums (a snapshot's form).
    pub fn from_sums(sums: BTreeMap<u32, i64>) -> Self {
        Self { sums }
    }

    /// The per-node sums.
    pub fn sums(&self) -> &BTreeMap<u32, i64> {
        &self.sums
    }

    /// The value: the saturating sum of the per-node sums.
    pub fn value(&self) -> i64 {
        self.sums
            .values()
            .fold(0, |total, sum| total.saturating_add(*sum))
    }

    /// Builds the operation that adds `amount`.
    pub fn add(&self, amount: i64) -> CounterOp {
        CounterOp::Add(amount)
    }

    /// Applies the operation with id `dot`.
    pub fn apply(&mut self, dot: Dot, op: &CounterOp) {
        let CounterOp::Add(amount) = *op;
        let sum = self.sums.entry(dot.node).or_insert(0);
        *sum = sum.saturating_add(amount);
    }
}

/// A node's part of a [`ResetCounter`]: the counter of its last add and its running sum, and
/// the prefix of its adds that key removals took away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeTally {
    /// The counter of the node's last add applied.
    pub last: u64,
    /// The saturating sum of all the node's adds applied.
    pub sum: i64,
    /// The counter of the node's last add a key removal took away (0: none).
    pub removed_last: u64,
    /// The node's sum up to and including that add.
    pub removed_sum: i64,
}

impl NodeTally {
    /// Whether the node has adds no removal took away.
    pub fn is_live(&self) -> bool {
        self.last > self.removed_last
    }

    /// The node's contribution to the value: its adds that no removal took away.
    pub fn contribution(&self) -> i64 {
        if self.is_live() {
            self.sum.saturating_sub(self.removed_sum)
        } else {
            0
        }
    }
}

/// What a key removal takes away from one node's adds: those up to and including the add with
/// counter `counter`, which summed to `sum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CounterMark {
    /// The node.
    pub node: u32,
    /// The counter of the node's last add the removal's origin had seen.
    pub counter: u64,
    /// The node's sum up to and including that add.
    pub sum: i64,
}

/// A positive-negative counter that key removals can reset, as a map holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResetCounter {
    tallies: BTreeMap<u32, NodeTally>,
}

impl ResetCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn from_tallies(tallies: BTreeMap<u32, NodeTally>) -> Self {
        Self { tallies }
    }

    /// The per-node tallies.
    pub fn tallies(&self) -> &BTreeMap<u32, NodeTally> {
        &self.tallies
    }

    /// The value: the saturating sum of the nodes' contributions.
    pub fn value(&self) -> i64 {
        self.tallies
            .values()
            .fold(0, |total, tally| total.saturating_add(tally.contribution()))
    }

    /// Whether some add is not taken away by a removal.
    pub fn is_live(&self) -> bool {
        self.tallies.values().any(NodeTally::is_live)
    }

    /// The marks a removal of this counter carries: one per node with adds still counted.
    pub fn marks(&self) -> Vec<CounterMark> {
        self.tallies
            .iter()
            .filter(|(_, tally)| tally.is_live())
            .map(|(node, tally)| CounterMark {
                node: *node,
                counter: tally.last,
                sum: tally.sum,
            })
            .collect()
    }

    /// Applies the add with id `dot`.
    pub fn apply(&mut self, dot: Dot, op: &CounterOp) {
        let CounterOp::Add(amount) = *op;
        let tally = self.tallies.entry(dot.node).or_default();
        tally.last = tally.last.max(dot.counter);
        tally.sum = tally.sum.saturating_add(amount);
    }

    /// Takes away the prefixes of the nodes' adds that `marks` name. A mark that names less
    /// than an earlier one changes nothing.
    pub fn reset(&mut self, marks: &[CounterMark]) {
        for mark in marks {
            let tally = self.tallies.entry(mark.node).or_default();
            if (mark.counter, mark.sum) > (tally.removed_last, tally.removed_sum) {
                tally.removed_last = mark.counter;
                tally.removed_sum = mark.sum;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Counter, CounterMark, CounterOp, ResetCounter};
    use crate::dot::Dot;

    #[test]
    fn value_is_the_sum_of_the_adds() {
        let mut counter = Counter::new();
        let adds = [(1, 5), (2, -3), (1, 7), (3, -10), (2, 1)];
        let mut counters = [0u64; 4];
        for (node, amount) in adds {
            counters[node as usize] += 1;
            counter.apply(
                Dot::new(node, counters[node as usize]),
                &counter.add(amount),
            );
        }
        assert_eq!(counter.value(), 5 - 3 + 7 - 10 + 1);
        assert_eq!(counter.sums().get(&1), Some(&12));
        assert_eq!(Counter::from_sums(counter.sums().clone()), counter);
    }

    #[test]
    fn arithmetic_saturates() {
        let mut counter = Counter::new();
        counter.apply(Dot::new(1, 1), &CounterOp::Add(i64::MAX));
        counter.apply(Dot::new(1, 2), &CounterOp::Add(1));
        counter.apply(Dot::new(2, 1), &CounterOp::Add(i64::MAX));
        assert_eq!(counter.sums().get(&1), Some(&i64::MAX));
        assert_eq!(counter.value(), i64::MAX);
        counter.apply(Dot::new(3, 1), &CounterOp::Add(i64::MIN));
        counter.apply(Dot::new(3, 2), &CounterOp::Add(i64::MIN));
        assert_eq!(counter.value(), i64::MAX.saturating_add(i64::MIN));
    }

    #[test]
    fn reset_takes_away_only_the_marked_prefix_in_either_order() {
        let mut base = ResetCounter::new();
        base.apply(Dot::new(1, 1), &CounterOp::Add(10));
        base.apply(Dot::new(2, 1), &CounterOp::Add(100));
        let marks = base.marks();
        assert_eq!(
            marks,
            vec![
                CounterMark {
                    node: 1,
                    counter: 1,
                    sum: 10
                },
                CounterMark {
                    node: 2,
                    counter: 1,
                    sum: 100
                },
            ]
        );
        // Node 1 adds 5 concurrently with the removal.
        let mut add_first = base.clone();
        add_first.apply(Dot::new(1, 2), &CounterOp::Add(5));
        add_first.reset(&marks);
        let mut reset_first = base.clone();
        reset_first.reset(&marks);
        assert!(!reset_first.is_live());
        assert_eq!(reset_first.value(), 0);
        reset_first.apply(Dot::new(1, 2), &CounterOp::Add(5));
        assert_eq!(add_first, reset_first);
        assert_eq!(add_first.value(), 5);
        assert!(add_first.is_live());
        // A smaller mark arriving later changes nothing.
        add_first.reset(&[CounterMark {
            node: 1,
            counter: 0,
            sum: 0,
        }]);
        assert_eq!(add_first, reset_first);
    }
}
