//! Causal delivery with causal barriers (Prakash, Raynal, Singhal: "An adaptive causal
//! ordering algorithm suited to mobile computing environments"; Baldoni, Prakash, Raynal,
//! Singhal: "Efficient Δ-causal broadcasting"), per topic: a message carries only its
//! direct causal predecessors (the publisher's barrier), not a vector clock. A receiver
//! buffers a message until every predecessor is delivered; delivering `m` with barrier `B`
//! turns the barrier into `(barrier ∖ B) ∪ {m}`, and publishing resets it to the new message
//! alone. Causal delivery implies per-publisher FIFO delivery, so what was delivered is one
//! counter per publisher.
//!
//! The buffer is bounded: a message that would overflow it is refused with
//! [`VcubeError::BufferFull`]; [`Causal::missing`] names the predecessors that buffered
//! messages have waited on too long, for the node to fetch.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use crate::cube::NodeId;
use crate::error::VcubeError;

/// Node ids at or above this are refused (a cube holds at most 2^20 nodes).
const ID_LIMIT: u32 = 1 << 20;

/// A message's id: its publisher and the publisher's counter on the topic (from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MsgId {
    pub source: NodeId,
    pub counter: u64,
}

/// A message delivered in causal order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    pub id: MsgId,
    pub barrier: Vec<MsgId>,
    pub payload: Bytes,
}

struct Waiting {
    barrier: Vec<MsgId>,
    /// Barrier entries before this one are delivered (deliveries only grow, so each
    /// entry is checked once).
    checked: usize,
    payload: Bytes,
    since_ms: u64,
}

/// What receiving a message did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// Delivered already or waiting in the buffer.
    Duplicate,
    /// Taken; these messages (it and any it unblocked) are now delivered, in causal order.
    Taken(Vec<Delivered>),
}

/// One topic's causal state at one node.
pub struct Causal {
    me: NodeId,
    /// The highest counter delivered from each publisher, by node id (0: none).
    delivered: Vec<u64>,
    /// The direct predecessors of this node's next message: at most one per publisher (a
    /// publisher's earlier messages precede its later ones), by node id (0: none).
    barrier: Vec<u64>,
    buffer: BTreeMap<MsgId, Waiting>,
    /// Buffered messages by the predecessor they wait on (one each at a time).
    waiters: HashMap<MsgId, Vec<MsgId>>,
    buffer_max: usize,
    /// Buffer without delivering (a joining node awaiting its snapshot).
    held: bool,
}

impl Causal {
    pub fn new(me: NodeId, buffer_max: usize) -> Causal {
        Causal {
            me,
            delivered: Vec::new(),
            barrier: Vec::new(),
            buffer: BTreeMap::new(),
            waiters: HashMap::new(),
            buffer_max,
            held: false,
        }
    }

    /// A node that joins late: it buffers until [`Causal::install`] gives it a snapshot.
    pub fn held(me: NodeId, buffer_max: usize) -> Causal {
        Causal {
            held: true,
            ..Causal::new(me, buffer_max)
        }
    }

    pub fn is_held(&self) -> bool {
        self.held
    }

    pub fn is_delivered(&self, id: MsgId) -> bool {
        self.delivered_of(id.source) >= id.counter
    }

    /// The highest counter delivered from `source`.
    pub fn delivered_of(&self, source: NodeId) -> u64 {
        self.delivered.get(source.0 as usize).copied().unwrap_or(0)
    }

    /// Whether `id` is delivered or waiting.
    pub fn has(&self, id: MsgId) -> bool {
        self.is_delivered(id) || self.buffer.contains_key(&id)
    }

    /// The highest counter delivered from each publisher that delivered any.
    pub fn delivered(&self) -> Vec<(NodeId, u64)> {
        (self.delivered.iter().enumerate())
            .filter(|(_, c)| **c > 0)
            .map(|(i, &c)| (NodeId(i as u32), c))
            .collect()
    }

    /// The direct predecessors of this node's next message.
    pub fn barrier(&self) -> Vec<MsgId> {
        (self.barrier.iter().enumerate())
            .filter(|(_, c)| **c > 0)
            .map(|(i, &counter)| MsgId {
                source: NodeId(i as u32),
                counter,
            })
            .collect()
    }

    /// Records `counter` as `source`'s highest delivered.
    fn set_delivered(&mut self, source: NodeId, counter: u64) {
        let i = source.0 as usize;
        if i >= self.delivered.len() {
            self.delivered.resize(i + 1, 0);
        }
        self.delivered[i] = counter;
    }

    fn set_barrier(&mut self, source: NodeId, counter: u64) {
        let i = source.0 as usize;
        if i >= self.barrier.len() {
            self.barrier.resize(i + 1, 0);
        }
        self.barrier[i] = counter;
    }

    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Publishes a message: its id and barrier; it is delivered here at once and the
    /// barrier becomes the message alone.
    pub fn publish(&mut self) -> (MsgId, Vec<MsgId>) {
        let counter = self.delivered_of(self.me) + 1;
        let id = MsgId {
            source: self.me,
            counter,
        };
        self.set_delivered(self.me, counter);
        let barrier = self.barrier();
        self.barrier.iter_mut().for_each(|c| *c = 0);
        self.set_barrier(self.me, counter);
        (id, barrier)
    }

    /// Takes a message received at `now_ms`.
    pub fn receive(
        &mut self,
        id: MsgId,
        barrier: Vec<MsgId>,
        payload: Bytes,
        now_ms: u64,
    ) -> Result<Received, VcubeError> {
        if self.has(id) {
            return Ok(Received::Duplicate);
        }
        if let Some(bad) = (std::iter::once(id.source).chain(barrier.iter().map(|p| p.source)))
            .find(|s| s.0 >= ID_LIMIT)
        {
            return Err(VcubeError::NodeOutsideCube {
                id: bad.0,
                n: ID_LIMIT,
            });
        }
        if self.buffer.len() >= self.buffer_max {
            return Err(VcubeError::BufferFull {
                topic: 0,
                max: self.buffer_max,
            });
        }
        self.buffer.insert(
            id,
            Waiting {
                barrier,
                checked: 0,
                payload,
                since_ms: now_ms,
            },
        );
        let mut out = Vec::new();
        if !self.held {
            self.settle(vec![id], &mut out);
        }
        Ok(Received::Taken(out))
    }

    /// The first predecessor of a buffered message not delivered yet: its publisher's
    /// previous message, then its barrier (from where the last check stopped).
    fn blocker(&mut self, id: MsgId) -> Option<MsgId> {
        let previous = MsgId {
            source: id.source,
            counter: id.counter.saturating_sub(1),
        };
        if id.counter > 1 && !self.is_delivered(previous) {
            return Some(previous);
        }
        let delivered = &self.delivered;
        let w = self.buffer.get_mut(&id)?;
        while let Some(&p) = w.barrier.get(w.checked) {
            if delivered.get(p.source.0 as usize).copied().unwrap_or(0) < p.counter {
                return Some(p);
            }
            w.checked += 1;
        }
        None
    }

    /// Delivers each of `candidates` that nothing blocks, and whatever that unblocks; the
    /// others wait on their first blocker.
    fn settle(&mut self, mut candidates: Vec<MsgId>, out: &mut Vec<Delivered>) {
        while let Some(id) = candidates.pop() {
            if !self.buffer.contains_key(&id) {
                continue; // delivered meanwhile, or dropped by a snapshot
            }
            if let Some(blocker) = self.blocker(id) {
                self.waiters.entry(blocker).or_default().push(id);
                continue;
            }
            let w = self.buffer.remove(&id).expect("found");
            self.deliver(id, &w.barrier);
            if let Some(unblocked) = self.waiters.remove(&id) {
                candidates.extend(unblocked);
            }
            out.push(Delivered {
                id,
                barrier: w.barrier,
                payload: w.payload,
            });
        }
    }

    fn deliver(&mut self, id: MsgId, barrier: &[MsgId]) {
        debug_assert!(
            barrier.iter().all(|&p| self.is_delivered(p)),
            "causal order"
        );
        self.set_delivered(id.source, id.counter);
        for b in barrier {
            if let Some(c) = self.barrier.get_mut(b.source.0 as usize)
                && *c == b.counter
            {
                *c = 0;
            }
        }
        self.set_barrier(id.source, id.counter);
    }

    /// Predecessors that buffered messages have waited on since before `before_ms`, neither
    /// delivered nor buffered here: what to fetch. Each is named once.
    pub fn missing(&self, before_ms: u64) -> Vec<MsgId> {
        let mut out: Vec<MsgId> = Vec::new();
        if self.held {
            return out;
        }
        for (id, w) in &self.buffer {
            if w.since_ms > before_ms {
                continue;
            }
            // The publisher's earlier messages, then the barrier.
            let previous = self.delivered_of(id.source);
            let gap = (previous + 1..id.counter).map(|counter| MsgId {
                source: id.source,
                counter,
            });
            for p in gap.chain(w.barrier.iter().copied()) {
                if !self.has(p) && !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// Installs a snapshot's delivered counters (the state it came with holds those
    /// messages): buffered messages it covers are dropped, the barrier names each
    /// publisher's last message, and what the snapshot unblocks is delivered.
    pub fn install(&mut self, delivered: &BTreeMap<NodeId, u64>) -> Vec<Delivered> {
        self.held = false;
        for (&source, &counter) in delivered {
            if source.0 < ID_LIMIT && counter > self.delivered_of(source) {
                self.set_delivered(source, counter);
            }
        }
        let delivered = &self.delivered;
        self.buffer
            .retain(|id, _| delivered.get(id.source.0 as usize).copied().unwrap_or(0) < id.counter);
        self.barrier = self.delivered.clone();
        self.waiters.clear();
        let candidates: Vec<MsgId> = self.buffer.keys().copied().collect();
        let mut out = Vec::new();
        self.settle(candidates, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(source: u32, counter: u64) -> MsgId {
        MsgId {
            source: NodeId(source),
            counter,
        }
    }

    fn taken(r: Received) -> Vec<MsgId> {
        match r {
            Received::Taken(d) => d.into_iter().map(|d| d.id).collect(),
            Received::Duplicate => panic!("a duplicate"),
        }
    }

    #[test]
    fn a_message_waits_for_its_barrier_and_the_barrier_follows_deliveries() {
        let mut a = Causal::new(NodeId(0), 16);
        let mut b = Causal::new(NodeId(1), 16);
        let mut c = Causal::new(NodeId(2), 16);
        let (m1, b1) = a.publish();
        assert!(b1.is_empty());
        assert_eq!(
            taken(b.receive(m1, b1.clone(), Bytes::new(), 0).unwrap()),
            vec![m1]
        );
        let (m2, b2) = b.publish();
        assert_eq!(b2, vec![m1], "b's message follows a's");
        // c gets b's message first: it waits for a's.
        assert_eq!(taken(c.receive(m2, b2, Bytes::new(), 0).unwrap()), vec![]);
        assert_eq!(c.missing(0), vec![m1]);
        assert_eq!(
            taken(c.receive(m1, b1, Bytes::new(), 5).unwrap()),
            vec![m1, m2]
        );
        assert_eq!(c.barrier(), vec![m2], "m1 is an indirect predecessor now");
        assert_eq!(
            c.receive(m1, vec![], Bytes::new(), 6).unwrap(),
            Received::Duplicate
        );
    }

    #[test]
    fn a_publishers_messages_are_delivered_in_order() {
        let mut r = Causal::new(NodeId(3), 16);
        assert_eq!(
            taken(
                r.receive(id(0, 2), vec![id(0, 1)], Bytes::new(), 0)
                    .unwrap()
            ),
            vec![]
        );
        // Even an empty barrier cannot overtake the publisher's earlier message.
        assert_eq!(
            taken(r.receive(id(0, 3), vec![], Bytes::new(), 0).unwrap()),
            vec![]
        );
        assert_eq!(r.missing(0), vec![id(0, 1)]);
        assert_eq!(
            taken(r.receive(id(0, 1), vec![], Bytes::new(), 0).unwrap()),
            vec![id(0, 1), id(0, 2), id(0, 3)]
        );
    }

    #[test]
    fn the_buffer_is_bounded() {
        let mut r = Causal::new(NodeId(3), 2);
        r.receive(id(0, 5), vec![], Bytes::new(), 0).unwrap();
        r.receive(id(0, 6), vec![], Bytes::new(), 0).unwrap();
        assert!(matches!(
            r.receive(id(0, 7), vec![], Bytes::new(), 0),
            Err(VcubeError::BufferFull { max: 2, .. })
        ));
    }

    #[test]
    fn a_snapshot_covers_what_it_holds_and_unblocks_the_rest() {
        let mut r = Causal::new(NodeId(3), 16);
        r.receive(id(0, 2), vec![], Bytes::new(), 0).unwrap();
        r.receive(id(0, 4), vec![], Bytes::new(), 0).unwrap();
        let snapshot = BTreeMap::from([(NodeId(0), 3)]);
        let delivered: Vec<MsgId> = r.install(&snapshot).into_iter().map(|d| d.id).collect();
        assert_eq!(delivered, vec![id(0, 4)]);
        assert_eq!(r.buffered(), 0);
        assert!(r.is_delivered(id(0, 2)));
    }
}
