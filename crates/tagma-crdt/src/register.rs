//! Last-writer-wins register: the assignment with the largest stamp holds the value.
//!
//! Every assignment carries a stamp `(lamport, node)`, ordered lexicographically. The origin
//! picks `lamport` one above the largest stamp its register has seen, so an assignment made
//! after seeing another one always has the larger stamp; of two concurrent assignments the
//! larger stamp wins, and the node id breaks lamport ties. An assignment replaces the value iff
//! its stamp is larger than every stamp applied before, so the outcome is the same in every
//! delivery order. Stamps are unique when every node applies its own assignment before making
//! the next; should a faulty node reuse a stamp, the operations' dots break the tie so replicas
//! still agree.
//!
//! Inside a [`crate::Map`] a key removal can drop the value ([`Register::reset`]). The register
//! then keeps the winning stamp as a tombstone: a concurrent assignment with a larger stamp
//! still takes effect, and one with a smaller stamp, which had already lost to the removed
//! value, stays lost on every replica whatever the order it arrives in.

use bytes::Bytes;

use crate::dot::Dot;

/// An assignment's stamp: a Lamport clock and the assigning node. Stamps order by `lamport`,
/// then `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    /// One above the largest lamport the origin's register had seen.
    pub lamport: u64,
    /// The assigning node.
    pub node: u32,
}

/// A register operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOp {
    /// Sets the value to `value` if `stamp` is the largest seen.
    Assign { stamp: Stamp, value: Bytes },
}

/// The assignment that won so far: its stamp and dot, and its value unless a key removal
/// dropped it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Winner {
    pub(crate) stamp: Stamp,
    pub(crate) dot: Dot,
    pub(crate) value: Option<Bytes>,
}

/// A last-writer-wins register of bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Register {
    winner: Option<Winner>,
}

impl Register {
    /// An unassigned register.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn from_winner(winner: Option<Winner>) -> Self {
        Self { winner }
    }

    pub(crate) fn winner(&self) -> Option<&Winner> {
        self.winner.as_ref()
    }

    /// The current value, if any.
    pub fn value(&self) -> Option<&Bytes> {
        self.winner
            .as_ref()
            .and_then(|winner| winner.value.as_ref())
    }

    /// The largest stamp applied so far (also after a key removal dropped its value).
    pub fn stamp(&self) -> Option<Stamp> {
        self.winner.as_ref().map(|winner| winner.stamp)
    }

    /// The dot of the assignment that holds the current value, if there is a value.
    pub fn value_dot(&self) -> Option<Dot> {
        self.winner
            .as_ref()
            .filter(|winner| winner.value.is_some())
            .map(|winner| winner.dot)
    }

    /// Builds the operation by which `node` assigns `value`: its lamport is one above the
    /// largest this register has seen.
    pub fn assign(&self, value: Bytes, node: u32) -> RegisterOp {
        let lamport = self
            .stamp()
            .map_or(0, |stamp| stamp.lamport)
            .saturating_add(1);
        RegisterOp::Assign {
            stamp: Stamp { lamport, node },
            value,
        }
    }

    /// Applies the operation with id `dot`.
    pub fn apply(&mut self, dot: Dot, op: &RegisterOp) {
        let RegisterOp::Assign { stamp, value } = op;
        self.apply_lazily(dot, *stamp, || value.clone());
    }

    /// Applies an assignment with id `dot` and `stamp`; `value` makes its value, called only
    /// if the assignment wins (a decoder copies the value out of the message only then).
    pub(crate) fn apply_lazily(&mut self, dot: Dot, stamp: Stamp, value: impl FnOnce() -> Bytes) {
        let wins =
            (self.winner.as_ref()).is_none_or(|winner| (stamp, dot) > (winner.stamp, winner.dot));
        if wins {
            self.winner = Some(Winner {
                stamp,
                dot,
                value: Some(value()),
            });
        }
    }

    /// Drops the value if the assignment that holds it is one of `observed`; the stamp stays.
    pub fn reset(&mut self, observed: &[Dot]) {
        if let Some(winner) = self.winner.as_mut()
            && observed.contains(&winner.dot)
        {
            winner.value = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Register, RegisterOp, Stamp};
    use crate::dot::Dot;
    use bytes::Bytes;

    fn assign(lamport: u64, node: u32, value: &'static [u8]) -> RegisterOp {
        RegisterOp::Assign {
            stamp: Stamp { lamport, node },
            value: Bytes::from_static(value),
        }
    }

    #[test]
    fn higher_stamp_wins_in_either_order() {
        let (low, high) = (assign(3, 9, b"low"), assign(4, 1, b"high"));
        let mut a = Register::new();
        a.apply(Dot::new(9, 1), &low);
        a.apply(Dot::new(1, 1), &high);
        let mut b = Register::new();
        b.apply(Dot::new(1, 1), &high);
        b.apply(Dot::new(9, 1), &low);
        assert_eq!(a.value(), Some(&Bytes::from_static(b"high")));
        assert_eq!(a, b);
    }

    #[test]
    fn lamport_ties_break_by_node() {
        let (one, two) = (assign(5, 1, b"one"), assign(5, 2, b"two"));
        let mut a = Register::new();
        a.apply(Dot::new(2, 1), &two);
        a.apply(Dot::new(1, 1), &one);
        assert_eq!(a.value(), Some(&Bytes::from_static(b"two")));
        let mut b = Register::new();
        b.apply(Dot::new(1, 1), &one);
        b.apply(Dot::new(2, 1), &two);
        assert_eq!(a, b);
    }

    #[test]
    fn a_reused_stamp_breaks_the_tie_by_dot() {
        let (first, second) = (assign(2, 7, b"first"), assign(2, 7, b"second"));
        let mut a = Register::new();
        a.apply(Dot::new(7, 1), &first);
        a.apply(Dot::new(7, 2), &second);
        let mut b = Register::new();
        b.apply(Dot::new(7, 2), &second);
        b.apply(Dot::new(7, 1), &first);
        assert_eq!(a, b);
        assert_eq!(a.value(), Some(&Bytes::from_static(b"second")));
    }

    #[test]
    fn assign_stamps_one_above_the_largest_seen() {
        let mut register = Register::new();
        let RegisterOp::Assign { stamp, .. } = register.assign(Bytes::new(), 4);
        assert_eq!(
            stamp,
            Stamp {
                lamport: 1,
                node: 4
            }
        );
        register.apply(Dot::new(8, 1), &assign(41, 8, b"x"));
        let op = register.assign(Bytes::from_static(b"y"), 4);
        let RegisterOp::Assign { stamp, .. } = &op;
        assert_eq!(
            *stamp,
            Stamp {
                lamport: 42,
                node: 4
            }
        );
        register.apply(Dot::new(4, 1), &op);
        assert_eq!(register.value(), Some(&Bytes::from_static(b"y")));
    }

    #[test]
    fn reset_drops_only_an_observed_value_and_keeps_the_stamp() {
        let mut register = Register::new();
        register.apply(Dot::new(1, 1), &assign(1, 1, b"a"));
        register.reset(&[Dot::new(2, 1)]);
        assert_eq!(register.value(), Some(&Bytes::from_static(b"a")));
        register.reset(&[Dot::new(1, 1)]);
        assert_eq!(register.value(), None);
        assert_eq!(register.value_dot(), None);
        assert_eq!(
            register.stamp(),
            Some(Stamp {
                lamport: 1,
                node: 1
            })
        );
        // An assignment that lost to the removed one stays lost.
        register.apply(Dot::new(3, 1), &assign(1, 0, b"late"));
        assert_eq!(register.value(), None);
    }
}
