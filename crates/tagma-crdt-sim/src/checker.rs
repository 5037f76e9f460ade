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

use std::collections::HashMap;

use tagma_vcube::{MsgId, NodeId, TopicId};

struct Op {
    clock: Box<[u32]>,
    /// Deliveries still expected.
    remaining: u32,
}

/// Causal-order checks of one run.
pub struct Checker {
    /// Publisher index of each node, per topic.
    index: Vec<HashMap<NodeId, usize>>,
    /// What each node delivered: clocks[topic][node].
    clocks: Vec<Vec<Box<[u32]>>>,
    ops: HashMap<(TopicId, MsgId), Op>,
    /// Every `stride`-th node compares clocks.
    stride: u32,
    witnesses: u32,
    pub violations: u64,
    pub double_deliveries: u64,
}

impl Checker {
    /// `publishers[t]`: the publishers of topic `t`; full clock comparisons at most about
    /// `budget` steps per operation.
    pub fn new(nodes: u32, publishers: &[Vec<NodeId>], budget: u64) -> Checker {
        let width = publishers.iter().map(Vec::len).max().unwrap_or(1).max(1) as u64;
        let stride = (u64::from(nodes) * width)
            .div_ceil(budget.max(1))
            .clamp(1, u64::from(nodes)) as u32;
        let index: Vec<HashMap<NodeId, usize>> = (publishers.iter())
            .map(|p| p.iter().enumerate().map(|(i, n)| (*n, i)).collect())
            .collect();
        let clocks = (publishers.iter())
            .map(|p| {
                (0..nodes)
                    .map(|_| vec![0u32; p.len()].into_boxed_slice())
                    .collect()
            })
            .collect();
        Checker {
            index,
            clocks,
            ops: HashMap::new(),
            stride,
            witnesses: nodes.div_ceil(stride),
            violations: 0,
            double_deliveries: 0,
        }
    }

    /// Nodes that compare clocks (all of them within the budget).
    pub fn witnesses(&self) -> u32 {
        self.witnesses
    }

    fn is_witness(&self, node: NodeId) -> bool {
        node.0.is_multiple_of(self.stride)
    }

    /// `id` was published; `receivers` deliveries are expected (all nodes but the
    /// publisher; only the witnesses' count).
    pub fn published(&mut self, topic: TopicId, id: MsgId, receivers: u32) {
        let receivers = if self.stride == 1 {
            receivers
        } else {
            receivers.div_ceil(self.stride)
        };
        let t = topic.0 as usize;
        let Some(&p) = self.index[t].get(&id.source) else {
            self.violations += 1;
            return;
        };
        let clock = &mut self.clocks[t][id.source.0 as usize];
        if u64::from(clock[p]) + 1 != id.counter {
            self.violations += 1;
        }
        clock[p] = id.counter as u32;
        let clock = clock.clone();
        self.ops.insert(
            (topic, id),
            Op {
                clock,
                remaining: receivers,
            },
        );
    }

    /// `node` delivered `id` (a publisher's own delivery happens at [`Checker::published`]).
    pub fn delivered(&mut self, node: NodeId, topic: TopicId, id: MsgId) {
        if node == id.source {
            return;
        }
        let t = topic.0 as usize;
        let Some(&p) = self.index[t].get(&id.source) else {
            self.violations += 1;
            return;
        };
        let witness = self.is_witness(node);
        let mine = &mut self.clocks[t][node.0 as usize];
        if u64::from(mine[p]) >= id.counter {
            self.double_deliveries += 1;
            return;
        }
        if !witness {
            if u64::from(mine[p]) + 1 != id.counter {
                self.violations += 1;
            }
            mine[p] = id.counter as u32;
            return;
        }
        let Some(op) = self.ops.get_mut(&(topic, id)) else {
            self.violations += 1;
            return;
        };
        let in_order = u64::from(mine[p]) + 1 == id.counter
            && (op.clock.iter().zip(mine.iter()).enumerate())
                .all(|(i, (need, have))| i == p || have >= need);
        if !in_order {
            self.violations += 1;
        }
        mine[p] = id.counter as u32;
        op.remaining = op.remaining.saturating_sub(1);
        if op.remaining == 0 {
            self.ops.remove(&(topic, id));
        }
    }

    /// `node` installed a snapshot covering `delivered`.
    pub fn installed(&mut self, node: NodeId, topic: TopicId, delivered: &[(NodeId, u64)]) {
        let t = topic.0 as usize;
        for (source, counter) in delivered {
            if let Some(&p) = self.index[t].get(source) {
                let c = &mut self.clocks[t][node.0 as usize][p];
                *c = (*c).max(*counter as u32);
            }
        }
    }

    /// What `node` delivered on `topic` from each publisher, in publisher order.
    pub fn clock(&self, node: NodeId, topic: TopicId) -> &[u32] {
        &self.clocks[topic.0 as usize][node.0 as usize]
    }
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
        let mut c = Checker::new(3, &[vec![NodeId(0), NodeId(1)]], 1 << 20);
        c.published(t, id(0, 1), 2);
        c.delivered(NodeId(1), t, id(0, 1));
        c.published(t, id(1, 1), 2); // after 0's
        c.delivered(NodeId(2), t, id(1, 1)); // before 0's
        assert_eq!(c.violations, 1);
        c.delivered(NodeId(2), t, id(0, 1));
        c.delivered(NodeId(2), t, id(0, 1));
        assert_eq!((c.violations, c.double_deliveries), (1, 1));
        assert_eq!(c.clock(NodeId(2), t), &[1, 1]);
    }
}
