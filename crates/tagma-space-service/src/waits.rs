//! The operations waiting in one space (blocked `rd` and `in`), in arrival order — the
//! total order of the requests that registered them — with a deadline index so the agreed
//! time's advance finds the ones due in O(due); and the per-principal counts of waiting
//! operations over all spaces, with the view of them one space's execution gets.

use std::collections::{BTreeMap, BTreeSet};

use tagma_space::TypedTemplate;
use tagma_wire::{ClientId, RequestSeq};

use crate::limits::WAIT_OVERHEAD_BYTES;

/// One waiting operation: the request it answers later, what it waits for, and until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub(crate) client: ClientId,
    pub(crate) seq: RequestSeq,
    /// `in` (takes the tuple) rather than `rd`.
    pub(crate) take: bool,
    pub(crate) template: TypedTemplate,
    /// The agreed time at which it times out.
    pub(crate) deadline_ms: u64,
}

impl Waiter {
    /// The bytes it counts against its space's budget.
    pub(crate) fn bytes(&self) -> usize {
        wait_bytes(&self.template)
    }
}

/// The bytes a waiting operation on `template` counts against its space's budget.
pub(crate) fn wait_bytes(template: &TypedTemplate) -> usize {
    template.encoded_len() + WAIT_OVERHEAD_BYTES
}

/// The waiting operations of one space.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Waits {
    /// By arrival number, so iteration is arrival order.
    queue: BTreeMap<u64, Waiter>,
    /// `(deadline, arrival number)`.
    deadlines: BTreeSet<(u64, u64)>,
    bytes: usize,
}

impl Waits {
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Every waiting operation, in arrival order, with its arrival number.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, &Waiter)> {
        self.queue.iter().map(|(id, w)| (*id, w))
    }

    /// Registers `waiter` under arrival number `id`, which must be above every one here.
    pub(crate) fn push(&mut self, id: u64, waiter: Waiter) {
        debug_assert!(
            self.queue
                .last_key_value()
                .is_none_or(|(last, _)| *last < id)
        );
        self.deadlines.insert((waiter.deadline_ms, id));
        self.bytes += waiter.bytes();
        self.queue.insert(id, waiter);
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.queue.remove(&id)?;
        self.deadlines.remove(&(waiter.deadline_ms, id));
        self.bytes -= waiter.bytes();
        Some(waiter)
    }

    /// Removes and returns the waiting operations whose deadline is `now_ms` or before,
    /// earliest deadline first (ties in arrival order).
    pub(crate) fn take_due(&mut self, now_ms: u64) -> Vec<Waiter> {
        let mut due = Vec::new();
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now_ms {
                break;
            }
            self.deadlines.pop_first();
            if let Some(waiter) = self.queue.remove(&id) {
                self.bytes -= waiter.bytes();
                due.push(waiter);
            }
        }
        due
    }

    /// Removes and returns every waiting operation, in arrival order.
    pub(crate) fn drain(&mut self) -> Vec<Waiter> {
        self.deadlines.clear();
        self.bytes = 0;
        std::mem::take(&mut self.queue).into_values().collect()
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }
}

/// How many operations wait for each client principal, over all spaces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WaitCounts(BTreeMap<u32, u32>);

impl WaitCounts {
    fn get(&self, principal: u32) -> u32 {
        self.0.get(&principal).copied().unwrap_or(0)
    }

    /// Adds the changes one space's execution made.
    pub(crate) fn apply(&mut self, delta: &BTreeMap<u32, i64>) {
        for (principal, change) in delta {
            let count = i64::from(self.get(*principal)) + change;
            let count = u32::try_from(count.max(0)).unwrap_or(u32::MAX);
            if count == 0 {
                self.0.remove(principal);
            } else {
                self.0.insert(*principal, count);
            }
        }
    }

    /// Counts one more waiting operation for `principal` (rebuilding the counts from a
    /// snapshot's waiting operations).
    pub(crate) fn add(&mut self, principal: u32) {
        *self.0.entry(principal).or_insert(0) += 1;
    }
}

/// The per-principal counts as one space's execution sees them: the counts from before the
/// group of operations it runs, plus its own changes since. It never sees another space's
/// changes of the same group, so spaces running side by side decide the same as one after
/// the other.
pub(crate) struct WaitBudget<'a> {
    before: &'a WaitCounts,
    pub(crate) delta: BTreeMap<u32, i64>,
}

impl<'a> WaitBudget<'a> {
    pub(crate) fn new(before: &'a WaitCounts) -> Self {
        WaitBudget {
            before,
            delta: BTreeMap::new(),
        }
    }

    /// The operations waiting for `principal`, as this view counts them.
    pub(crate) fn count(&self, principal: u32) -> u64 {
        let count = i64::from(self.before.get(principal))
            + self.delta.get(&principal).copied().unwrap_or(0);
        count.max(0) as u64
    }

    pub(crate) fn started(&mut self, principal: u32) {
        *self.delta.entry(principal).or_insert(0) += 1;
    }

    pub(crate) fn ended(&mut self, principal: u32) {
        *self.delta.entry(principal).or_insert(0) -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(client: u64, deadline_ms: u64) -> Waiter {
        Waiter {
            client: ClientId(client),
            seq: RequestSeq(1),
            take: false,
            template: "(*)".parse().unwrap(),
            deadline_ms,
        }
    }

    #[test]
    fn waiters_keep_arrival_order_and_fall_due_by_deadline() {
        let mut waits = Waits::default();
        waits.push(1, waiter(10, 500));
        waits.push(2, waiter(20, 100));
        waits.push(3, waiter(30, 100));
        waits.push(4, waiter(40, 900));
        let order: Vec<u64> = waits.iter().map(|(_, w)| w.client.0).collect();
        assert_eq!(order, [10, 20, 30, 40]);
        assert_eq!(waits.next_deadline(), Some(100));
        let due: Vec<u64> = waits.take_due(500).iter().map(|w| w.client.0).collect();
        assert_eq!(due, [20, 30, 10]);
        assert_eq!(waits.remove(4).unwrap().client, ClientId(40));
        assert!(waits.is_empty());
        assert_eq!(waits.bytes(), 0);
        assert_eq!(waits.next_deadline(), None);
    }

    #[test]
    fn a_budget_sees_the_counts_before_it_and_its_own_changes_only() {
        let mut counts = WaitCounts::default();
        counts.add(7);
        counts.add(7);
        let mut a = WaitBudget::new(&counts);
        let mut b = WaitBudget::new(&counts);
        a.started(7);
        assert_eq!(a.count(7), 3);
        assert_eq!(b.count(7), 2, "b does not see a's change");
        b.ended(7);
        let (da, db) = (a.delta, b.delta);
        counts.apply(&da);
        counts.apply(&db);
        assert_eq!(WaitBudget::new(&counts).count(7), 2);
        counts.apply(&BTreeMap::from([(7, -2)]));
        assert_eq!(counts, WaitCounts::default(), "a count of 0 leaves the map");
    }
}
