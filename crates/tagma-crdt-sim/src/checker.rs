//! The run's judge, independent of the protocols' own bookkeeping: every operation gets, at
//! its publish, the vector clock of what its publisher had delivered on the topic; a node
//! delivering it must have delivered, before it, its publisher's previous operation and
//! everything that clock names — otherwise a causal violation is counted. Delivering an
//! operation twice is counted too. A node that installs a snapshot takes the snapshot's
//! counters as what it delivered. Clocks of operations every expected receiver delivered
//! are dropped, so memory follows the operations in flight.
//!
//! Comparing clocks costs one step per publisher per delivery; when nodes × publishers
//! exceeds the budget, the full comparison runs at evenly spread witness nodes only, while
//! every node still has its per-publisher order and double deliveries checked.
//!
//! Each node carries its own clocks ([`Clocks`]) and the checks of a stretch of the run
//! gather what they find apart ([`Findings`]), so nodes are checked in parallel; the
//! operations published in a stretch are known to the checks from the next one on, which
//! is soon enough since no message reaches another node within the stretch it was sent in.

use tagma_vcube::fast::FastMap;
use tagma_vcube::{MsgId, NodeId, TopicId};

/// No publisher index: the node does not publish on the topic.
pub const NOT_PUBLISHER: u32 = u32::MAX;

/// Each node's index among the publishers of each topic ([`NOT_PUBLISHER`] if it is not
/// one): index[topic][node].
pub fn publisher_index(nodes: u32, publishers: &[Vec<NodeId>]) -> Vec<Vec<u32>> {
    (publishers.iter())
        .map(|p| {
            let mut index = vec![NOT_PUBLISHER; nodes as usize];
            for (i, n) in p.iter().enumerate() {
                if let Some(slot) = index.get_mut(n.0 as usize) {
                    *slot = i as u32;
                }
            }
            index
        })
        .collect()
}

/// An operation's causal past, kept until every expected witness delivered it.
pub struct Op {
    clock: Box<[u32]>,
    /// Deliveries still expected.
    remaining: u32,
}

/// What one node delivered on each topic, from each publisher, in publisher order: the
/// topics' rows one after the other ([`Checker::clock`] reads one).
pub struct Clocks(Box<[u32]>);

/// What the checks of a stretch of the run found, before [`Checker::merge`] takes it in:
/// nodes check their deliveries on their own, in parallel, against the operations
/// published before.
#[derive(Default)]
pub struct Findings {
    violations: u64,
    double_deliveries: u64,
    published: Vec<((TopicId, MsgId), Op)>,
    /// Witness deliveries, each one fewer expected.
    witnessed: Vec<(TopicId, MsgId)>,
}

/// Causal-order checks of one run.
pub struct Checker {
    /// Publisher index of each node, per topic: index[topic][node].
    index: Vec<Vec<u32>>,
    /// Where each topic's row starts in [`Clocks`] (and, last, their length).
    starts: Vec<usize>,
    ops: FastMap<(TopicId, MsgId), Op>,
    /// Every `stride`-th node compares clocks.
    stride: u32,
    /// The witnesses among each topic's subscribers.
    witness_subscribers: Vec<u32>,
    witnesses: u32,
    violations: u64,
    double_deliveries: u64,
}

impl Checker {
    /// `publishers[t]` and `subscribers[t]`: the publishers and subscribers of topic `t`;
    /// full clock comparisons at most about `budget` steps per operation.
    pub fn new(
        nodes: u32,
        publishers: &[Vec<NodeId>],
        subscribers: &[Vec<NodeId>],
        budget: u64,
    ) -> Checker {
        let width = publishers.iter().map(Vec::len).max().unwrap_or(1).max(1) as u64;
        let stride = (u64::from(nodes) * width)
            .div_ceil(budget.max(1))
            .clamp(1, u64::from(nodes)) as u32;
        Checker {
            index: publisher_index(nodes, publishers),
            starts: std::iter::once(0)
                .chain(publishers.iter().scan(0, |end, p| {
                    *end += p.len();
                    Some(*end)
                }))
                .collect(),
            ops: FastMap::default(),
            stride,
            witness_subscribers: (subscribers.iter())
                .map(|members| {
                    let witnesses = members.iter().filter(|n| n.0.is_multiple_of(stride));
                    witnesses.count() as u32
                })
                .collect(),
            witnesses: nodes.div_ceil(stride),
            violations: 0,
            double_deliveries: 0,
        }
    }

    /// A node's clocks before it delivered anything.
    pub fn clocks(&self) -> Clocks {
        Clocks(vec![0u32; self.starts.last().copied().unwrap_or(0)].into_boxed_slice())
    }

    /// What the node of `clocks` delivered on `topic` from each publisher.
    pub fn clock<'c>(&self, clocks: &'c Clocks, topic: TopicId) -> &'c [u32] {
        let t = topic.0 as usize;
        &clocks.0[self.starts[t]..self.starts[t + 1]]
    }

    fn clock_mut<'c>(&self, clocks: &'c mut Clocks, t: usize) -> &'c mut [u32] {
        &mut clocks.0[self.starts[t]..self.starts[t + 1]]
    }

    /// Nodes that compare clocks (all of them within the budget).
    pub fn witnesses(&self) -> u32 {
        self.witnesses
    }

    pub fn violations(&self) -> u64 {
        self.violations
    }

    pub fn double_deliveries(&self) -> u64 {
        self.double_deliveries
    }

    fn is_witness(&self, node: NodeId) -> bool {
        node.0.is_multiple_of(self.stride)
    }

    /// The publisher index of `node` on topic `t`.
    fn publisher(&self, t: usize, node: NodeId) -> Option<usize> {
        let p = *self.index[t].get(node.0 as usize)?;
        (p != NOT_PUBLISHER).then_some(p as usize)
    }

    /// `id` was published by the node of `clocks`; every witness among the topic's other
    /// subscribers is expected to deliver it.
    pub fn published(&self, clocks: &mut Clocks, topic: TopicId, id: MsgId, found: &mut Findings) {
        let t = topic.0 as usize;
        let witnesses = self.witness_subscribers.get(t).copied().unwrap_or(0);
        let receivers = witnesses.saturating_sub(u32::from(self.is_witness(id.source)));
        let Some(p) = self.publisher(t, id.source) else {
            found.violations += 1;
            return;
        };
        let clock = self.clock_mut(clocks, t);
        if u64::from(clock[p]) + 1 != id.counter {
            found.violations += 1;
        }
        clock[p] = id.counter as u32;
        found.published.push((
            (topic, id),
            Op {
                clock: clock.to_vec().into_boxed_slice(),
                remaining: receivers,
            },
        ));
    }

    /// `node`, whose clocks are `clocks`, delivered `id` (a publisher's own delivery happens
    /// at [`Checker::published`]).
    pub fn delivered(
        &self,
        node: NodeId,
        clocks: &mut Clocks,
        topic: TopicId,
        id: MsgId,
        found: &mut Findings,
    ) {
        if node == id.source {
            return;
        }
        let t = topic.0 as usize;
        let Some(p) = self.publisher(t, id.source) else {
            found.violations += 1;
            return;
        };
        let mine = self.clock_mut(clocks, t);
        if u64::from(mine[p]) >= id.counter {
            found.double_deliveries += 1;
            return;
        }
        if !self.is_witness(node) {
            if u64::from(mine[p]) + 1 != id.counter {
                found.violations += 1;
            }
            mine[p] = id.counter as u32;
            return;
        }
        let Some(op) = self.ops.get(&(topic, id)) else {
            found.violations += 1;
            return;
        };
        let in_order = u64::from(mine[p]) + 1 == id.counter
            && covers(&mine[..p], &op.clock[..p])
            && covers(&mine[p + 1..], &op.clock[p + 1..]);
        if !in_order {
            found.violations += 1;
        }
        mine[p] = id.counter as u32;
        found.witnessed.push((topic, id));
    }

    /// The node of `clocks` installed a snapshot covering `delivered`.
    pub fn installed(&self, clocks: &mut Clocks, topic: TopicId, delivered: &[(NodeId, u64)]) {
        let t = topic.0 as usize;
        for (source, counter) in delivered {
            if let Some(p) = self.publisher(t, *source) {
                let c = &mut self.clock_mut(clocks, t)[p];
                *c = (*c).max(*counter as u32);
            }
        }
    }

    /// Takes in what checks found: operations published, witness deliveries, violations.
    pub fn merge(&mut self, found: &mut Findings) {
        self.violations += std::mem::take(&mut found.violations);
        self.double_deliveries += std::mem::take(&mut found.double_deliveries);
        self.ops.extend(found.published.drain(..));
        for key in found.witnessed.drain(..) {
            if let Some(op) = self.ops.get_mut(&key) {
                op.remaining = op.remaining.saturating_sub(1);
                if op.remaining == 0 {
                    self.ops.remove(&key);
                }
            }
        }
    }
}

/// Whether `have` is at least `need` everywhere (no early exit, so it runs on vectors).
fn covers(have: &[u32], need: &[u32]) -> bool {
    have.len() == need.len()
        && (have.iter().zip(need)).fold(true, |covered, (have, need)| covered & (have >= need))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: u32, c: u64) -> MsgId {
        MsgId {
            source: NodeId(s),
            counter: c,
        }
    }

    #[test]
    fn an_operation_delivered_before_its_causal_past_is_a_violation() {
        let t = TopicId(0);
        let all = [(0..3).map(NodeId).collect()];
        let mut c = Checker::new(3, &[vec![NodeId(0), NodeId(1)]], &all, 1 << 20);
        let mut clocks: Vec<Clocks> = (0..3).map(|_| c.clocks()).collect();
        let mut found = Findings::default();
        c.published(&mut clocks[0], t, id(0, 1), &mut found);
        c.merge(&mut found);
        c.delivered(NodeId(1), &mut clocks[1], t, id(0, 1), &mut found);
        c.published(&mut clocks[1], t, id(1, 1), &mut found); // after 0's
        c.merge(&mut found);
        c.delivered(NodeId(2), &mut clocks[2], t, id(1, 1), &mut found); // before 0's
        c.merge(&mut found);
        assert_eq!(c.violations(), 1);
        c.delivered(NodeId(2), &mut clocks[2], t, id(0, 1), &mut found);
        c.delivered(NodeId(2), &mut clocks[2], t, id(0, 1), &mut found);
        c.merge(&mut found);
        assert_eq!((c.violations(), c.double_deliveries()), (1, 1));
        assert_eq!(c.clock(&clocks[2], t), &[1, 1]);
    }

    #[test]
    fn an_operation_is_forgotten_once_every_witness_delivered_it() {
        let t = TopicId(0);
        let all = [(0..3).map(NodeId).collect()];
        let mut c = Checker::new(3, &[vec![NodeId(0)]], &all, 1 << 20);
        let mut clocks: Vec<Clocks> = (0..3).map(|_| c.clocks()).collect();
        let mut found = Findings::default();
        c.published(&mut clocks[0], t, id(0, 1), &mut found);
        c.merge(&mut found);
        c.delivered(NodeId(1), &mut clocks[1], t, id(0, 1), &mut found);
        c.delivered(NodeId(2), &mut clocks[2], t, id(0, 1), &mut found);
        c.merge(&mut found);
        assert!(c.ops.is_empty());
        assert_eq!(c.violations(), 0);
    }

    #[test]
    fn witnesses_expect_the_deliveries_of_the_witnesses_among_the_subscribers() {
        // Budget 6 for 4 nodes × 4 publishers: every third node is a witness (0 and 3). An
        // operation of node 1 is expected at both, one of node 3 at node 0 only.
        let t = TopicId(0);
        let all: Vec<NodeId> = (0..4).map(NodeId).collect();
        let mut c = Checker::new(4, std::slice::from_ref(&all), std::slice::from_ref(&all), 6);
        assert_eq!(c.witnesses(), 2);
        let mut clocks: Vec<Clocks> = (0..4).map(|_| c.clocks()).collect();
        let mut found = Findings::default();
        c.published(&mut clocks[1], t, id(1, 1), &mut found);
        c.merge(&mut found);
        c.delivered(NodeId(0), &mut clocks[0], t, id(1, 1), &mut found);
        c.merge(&mut found);
        assert_eq!(c.ops.len(), 1, "node 3 has yet to deliver it");
        c.delivered(NodeId(3), &mut clocks[3], t, id(1, 1), &mut found);
        c.merge(&mut found);
        assert!(c.ops.is_empty());
        c.published(&mut clocks[3], t, id(3, 1), &mut found);
        c.merge(&mut found);
        c.delivered(NodeId(0), &mut clocks[0], t, id(3, 1), &mut found);
        c.merge(&mut found);
        assert!(c.ops.is_empty());
        assert_eq!(c.violations(), 0);
    }
}
