//! The dot: the unique id the causal broadcast layer gives every operation.

use std::fmt;

/// An operation's unique id: the node that published it and that node's message counter on
/// the topic (counters start at 1 and grow by one per published operation).
///
/// Dots order by node, then counter; the order is arbitrary with respect to causality and
/// serves only to make encodings and tie-breaks deterministic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dot {
    /// The publishing node.
    pub node: u32,
    /// The publisher's per-topic message counter.
    pub counter: u64,
}

impl Dot {
    /// The dot of `node`'s `counter`-th operation.
    pub const fn new(node: u32, counter: u64) -> Self {
        Self { node, counter }
    }
}

impl fmt::Display for Dot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.counter)
    }
}

#[cfg(test)]
mod tests {
    use super::Dot;

    #[test]
    fn dots_order_by_node_then_counter() {
        assert!(Dot::new(1, 9) < Dot::new(2, 1));
        assert!(Dot::new(2, 1) < Dot::new(2, 2));
        assert_eq!(Dot::new(3, 4).to_string(), "3:4");
    }
}
