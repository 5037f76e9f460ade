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
use tagma_vcube::varint::varint_len;
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

/// A row of counters, one per publisher, in words as narrow as the run allows: 8 bits when
/// no counter of the run reaches 2^8, 16 bits when none reaches 2^16 (what a publisher's
/// counter reaches is known from the workload), 32 bits otherwise. Every node reads its row
/// at each delivery, and the witnesses read a whole row of every operation they deliver, so
/// the row's size is what the checks cost.
#[derive(Clone, Debug)]
enum Words {
    Tiny(Box<[u8]>),
    Narrow(Box<[u16]>),
    Wide(Box<[u32]>),
}

impl Words {
    /// The counters of `range`, whatever their width.
    fn counters(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = u64> + '_ {
        let (tiny, narrow, wide) = match self {
            Words::Tiny(row) => (&row[range], &[][..], &[][..]),
            Words::Narrow(row) => (&[][..], &row[range], &[][..]),
            Words::Wide(row) => (&[][..], &[][..], &row[range]),
        };
        (tiny.iter().map(|&c| c.get()))
            .chain(narrow.iter().map(|&c| c.get()))
            .chain(wide.iter().map(|&c| c.get()))
    }
}

/// A counter in a row.
trait Word: Copy + Ord + Default {
    /// The counter as a word, if it fits.
    fn of(counter: u64) -> Option<Self>;
    fn get(self) -> u64;
    /// The row, if its words are of this width.
    fn row(words: &Words) -> Option<&[Self]>;
    fn row_mut(words: &mut Words) -> Option<&mut [Self]>;
    fn words(row: Box<[Self]>) -> Words;
}

macro_rules! word {
    ($t:ty, $variant:ident) => {
        impl Word for $t {
            fn of(counter: u64) -> Option<$t> {
                // The counters of a run fit (the checker's width comes from the
                // workload); one that does not is counted as a violation.
                <$t>::try_from(counter).ok()
            }

            fn get(self) -> u64 {
                u64::from(self)
            }

            fn row(words: &Words) -> Option<&[$t]> {
                match words {
                    Words::$variant(row) => Some(row),
                    _ => None,
                }
            }

            fn row_mut(words: &mut Words) -> Option<&mut [$t]> {
                match words {
                    Words::$variant(row) => Some(row),
                    _ => None,
                }
            }

            fn words(row: Box<[$t]>) -> Words {
                Words::$variant(row)
            }
        }
    };
}

word!(u8, Tiny);
word!(u16, Narrow);
word!(u32, Wide);

/// The width of a run's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    Tiny,
    Narrow,
    Wide,
}

impl Width {
    /// The narrowest width that holds counters up to `counter_max`.
    fn of(counter_max: u64) -> Width {
        if counter_max <= u64::from(u8::MAX) {
            Width::Tiny
        } else if counter_max <= u64::from(u16::MAX) {
            Width::Narrow
        } else {
            Width::Wide
        }
    }
}

/// Runs `$body` with `$W` the width of the checker's words.
macro_rules! with_width {
    ($width:expr, $W:ident => $body:expr) => {
        match $width {
            Width::Tiny => {
                type $W = u8;
                $body
            }
            Width::Narrow => {
                type $W = u16;
                $body
            }
            Width::Wide => {
                type $W = u32;
                $body
            }
        }
    };
}

/// An operation's causal past, kept until every expected witness delivered it.
pub struct Op {
    clock: Words,
    /// Deliveries still expected.
    remaining: u32,
}

/// What one node delivered on each topic, from each publisher, in publisher order: the
/// topics' rows one after the other ([`Checker::clock`] reads one).
pub struct Clocks(Words);

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
    /// The width of the run's counters.
    width: Width,
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
    /// full clock comparisons at most about `budget` steps per operation; no publisher's
    /// counter goes beyond `counter_max`.
    pub fn new(
        nodes: u32,
        publishers: &[Vec<NodeId>],
        subscribers: &[Vec<NodeId>],
        budget: u64,
        counter_max: u64,
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
            width: Width::of(counter_max),
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
        let len = self.starts.last().copied().unwrap_or(0);
        with_width!(self.width, W => Clocks(W::words(vec![W::default(); len].into_boxed_slice())))
    }

    /// What the node of `clocks` delivered on `topic` from each publisher.
    pub fn clock(&self, clocks: &Clocks, topic: TopicId) -> Vec<u64> {
        clocks.0.counters(self.range(topic.0 as usize)).collect()
    }

    /// Bytes of the node's clock on `topic` as a dense vector clock: its length, then each
    /// counter (varints).
    pub fn vector_clock_len(&self, clocks: &Clocks, topic: TopicId) -> usize {
        let range = self.range(topic.0 as usize);
        varint_len(range.len() as u64) + clocks.0.counters(range).map(varint_len).sum::<usize>()
    }

    fn range(&self, t: usize) -> std::ops::Range<usize> {
        self.starts[t]..self.starts[t + 1]
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
        with_width!(self.width, W => self.published_in::<W>(clocks, topic, id, found))
    }

    fn published_in<W: Word>(
        &self,
        clocks: &mut Clocks,
        topic: TopicId,
        id: MsgId,
        found: &mut Findings,
    ) {
        let t = topic.0 as usize;
        let witnesses = self.witness_subscribers.get(t).copied().unwrap_or(0);
        let receivers = witnesses.saturating_sub(u32::from(self.is_witness(id.source)));
        let (Some(p), Some(row), Some(counter)) = (
            self.publisher(t, id.source),
            W::row_mut(&mut clocks.0),
            W::of(id.counter),
        ) else {
            found.violations += 1;
            return;
        };
        let clock = &mut row[self.range(t)];
        if clock[p].get() + 1 != id.counter {
            found.violations += 1;
        }
        clock[p] = counter;
        found.published.push((
            (topic, id),
            Op {
                clock: W::words(clock.to_vec().into_boxed_slice()),
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
        with_width!(self.width, W => self.delivered_in::<W>(node, clocks, topic, id, found))
    }

    fn delivered_in<W: Word>(
        &self,
        node: NodeId,
        clocks: &mut Clocks,
        topic: TopicId,
        id: MsgId,
        found: &mut Findings,
    ) {
        let t = topic.0 as usize;
        let (Some(p), Some(row), Some(counter)) = (
            self.publisher(t, id.source),
            W::row_mut(&mut clocks.0),
            W::of(id.counter),
        ) else {
            found.violations += 1;
            return;
        };
        let mine = &mut row[self.range(t)];
        if mine[p].get() >= id.counter {
            found.double_deliveries += 1;
            return;
        }
        if !self.is_witness(node) {
            if mine[p].get() + 1 != id.counter {
                found.violations += 1;
            }
            mine[p] = counter;
            return;
        }
        let Some(op) = (self.ops.get(&(topic, id))).and_then(|op| W::row(&op.clock)) else {
            found.violations += 1;
            return;
        };
        let in_order = mine[p].get() + 1 == id.counter
            && covers(&mine[..p], &op[..p])
            && covers(&mine[p + 1..], &op[p + 1..]);
        if !in_order {
            found.violations += 1;
        }
        mine[p] = counter;
        found.witnessed.push((topic, id));
    }

    /// The node of `clocks` installed a snapshot covering `delivered` (a counter beyond
    /// what the run publishes is a violation).
    pub fn installed(
        &self,
        clocks: &mut Clocks,
        topic: TopicId,
        delivered: &[(NodeId, u64)],
        found: &mut Findings,
    ) {
        with_width!(self.width, W => self.installed_in::<W>(clocks, topic, delivered, found))
    }

    fn installed_in<W: Word>(
        &self,
        clocks: &mut Clocks,
        topic: TopicId,
        delivered: &[(NodeId, u64)],
        found: &mut Findings,
    ) {
        let t = topic.0 as usize;
        let range = self.range(t);
        let Some(row) = W::row_mut(&mut clocks.0) else {
            found.violations += 1;
            return;
        };
        for (source, counter) in delivered {
            if let Some(p) = self.publisher(t, *source) {
                let Some(counter) = W::of(*counter) else {
                    found.violations += 1;
                    continue;
                };
                let c = &mut row[range.clone()][p];
                *c = (*c).max(counter);
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
fn covers<W: Word>(have: &[W], need: &[W]) -> bool {
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
        // Counters in 8-bit words, 16-bit ones, then 32-bit ones (runs whose counters go
        // beyond each).
        for (counter_max, width) in [
            (10, Width::Tiny),
            (1_000, Width::Narrow),
            (1 << 20, Width::Wide),
        ] {
            let t = TopicId(0);
            let all = [(0..3).map(NodeId).collect()];
            let publishers = [vec![NodeId(0), NodeId(1)]];
            let mut c = Checker::new(3, &publishers, &all, 1 << 20, counter_max);
            assert_eq!(c.width, width);
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
            assert_eq!(c.clock(&clocks[2], t), vec![1, 1]);
            assert_eq!(c.vector_clock_len(&clocks[2], t), 3);
        }
    }

    #[test]
    fn a_counter_beyond_the_runs_width_is_a_violation() {
        let t = TopicId(0);
        let all = [(0..2).map(NodeId).collect()];
        for (counter_max, width, beyond) in
            [(10, Width::Tiny, 1 << 8), (1_000, Width::Narrow, 1 << 16)]
        {
            let mut c = Checker::new(2, &[vec![NodeId(0)]], &all, 1 << 20, counter_max);
            assert_eq!(c.width, width);
            let mut clocks: Vec<Clocks> = (0..2).map(|_| c.clocks()).collect();
            let mut found = Findings::default();
            c.delivered(NodeId(1), &mut clocks[1], t, id(0, beyond), &mut found);
            c.installed(&mut clocks[1], t, &[(NodeId(0), beyond)], &mut found);
            c.published(&mut clocks[0], t, id(0, beyond), &mut found);
            c.merge(&mut found);
            assert_eq!((c.violations(), c.double_deliveries()), (3, 0));
            assert_eq!(c.clock(&clocks[1], t), vec![0], "nothing cut short is kept");
        }
    }

    #[test]
    fn an_operation_is_forgotten_once_every_witness_delivered_it() {
        let t = TopicId(0);
        let all = [(0..3).map(NodeId).collect()];
        let mut c = Checker::new(3, &[vec![NodeId(0)]], &all, 1 << 20, 10);
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
        let mut c = Checker::new(
            4,
            std::slice::from_ref(&all),
            std::slice::from_ref(&all),
            6,
            10,
        );
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
