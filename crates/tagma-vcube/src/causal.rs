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
//!
//! The buffer holds whatever carries a message ([`Carried`]: its barrier, and the rest for
//! the caller), so delivering hands back the very value the node received.

use std::collections::BTreeMap;
use std::collections::hash_map::Entry;

use smallvec::SmallVec;

use self::counters::{COUNTER_LIMIT, Counters};
use crate::cube::NodeId;
use crate::error::VcubeError;
use crate::fast::FastMap;
use crate::varint::varint_len;

/// Node ids at or above this are refused (a cube holds at most 2^20 nodes).
const ID_LIMIT: u32 = 1 << 20;

mod barrier;
mod counters;

pub(crate) use self::barrier::Barrier;
pub use self::barrier::{Ids, NarrowId};

/// A message's id: its publisher and the publisher's counter on the topic (from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MsgId {
    pub source: NodeId,
    pub counter: u64,
}

impl MsgId {
    pub fn new(source: NodeId, counter: u64) -> MsgId {
        MsgId { source, counter }
    }

    /// Bytes of the id as encoded.
    pub fn encoded_len(&self) -> usize {
        varint_len(u64::from(self.source.0)) + varint_len(self.counter)
    }
}

/// Bytes of a list of ids as encoded (a barrier, a fetch): its length, then each id.
pub fn barrier_len(ids: &[MsgId]) -> usize {
    varint_len(ids.len() as u64) + ids.iter().map(MsgId::encoded_len).sum::<usize>()
}

/// The highest node id among a message's publisher and its barrier's entries.
pub fn highest_node(id: MsgId, barrier: &[MsgId]) -> NodeId {
    (barrier.iter().map(|p| p.source)).fold(id.source, |a, b| a.max(b))
}

/// What carries a message: its causal barrier, the message's direct predecessors.
pub trait Carried {
    fn barrier(&self) -> Ids<'_>;

    /// The highest node id among the publisher and the barrier's entries.
    fn highest_node(&self) -> NodeId;
}

/// A bare barrier carries a message with nothing else.
impl Carried for Vec<MsgId> {
    fn barrier(&self) -> Ids<'_> {
        Ids::Wide(self)
    }

    fn highest_node(&self) -> NodeId {
        (self.iter().map(|p| p.source)).max().unwrap_or(NodeId(0))
    }
}

/// A message delivered in causal order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered<T> {
    pub id: MsgId,
    pub message: T,
}

struct Waiting<T> {
    message: T,
    /// Barrier entries before this one are delivered (deliveries only grow, so each
    /// entry is checked once).
    checked: usize,
    since_ms: u64,
}

/// What receiving a message did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// Delivered already or waiting in the buffer.
    Duplicate,
    /// Taken: delivered, with what it unblocked, or buffered.
    Taken,
}

/// The buffered messages waiting on one predecessor (rarely more than one or two).
type Waiters = SmallVec<[MsgId; 2]>;

/// One topic's causal state at one node, buffering messages carried by `T`.
pub struct Causal<T> {
    me: NodeId,
    /// The highest counter delivered from each publisher, marked for the publishers whose
    /// last delivered message is a direct predecessor of this node's next message (the
    /// barrier holds at most one message per publisher, since a publisher's earlier messages
    /// precede its later ones, and only its last delivered one: a later one covers it). One
    /// word per publisher, so that checking a barrier entry and then taking it out of this
    /// node's barrier read the same memory.
    delivered: Counters,
    /// Buffered messages (never iterated in the map's order: walks sort by id).
    buffer: FastMap<MsgId, Waiting<T>>,
    /// Buffered messages by the predecessor they wait on (one each at a time).
    waiters: FastMap<MsgId, Waiters>,
    buffer_max: usize,
    /// Buffer without delivering (a joining node awaiting its snapshot).
    held: bool,
}

impl<T: Carried> Causal<T> {
    pub fn new(me: NodeId, buffer_max: usize) -> Causal<T> {
        Causal {
            me,
            delivered: Counters::default(),
            buffer: FastMap::default(),
            waiters: FastMap::default(),
            buffer_max,
            held: false,
        }
    }

    /// A node that joins late: it buffers until [`Causal::install`] gives it a snapshot.
    pub fn held(me: NodeId, buffer_max: usize) -> Causal<T> {
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
        self.delivered.get(source)
    }

    /// Whether `id` is delivered or waiting.
    pub fn has(&self, id: MsgId) -> bool {
        self.is_delivered(id) || self.buffer.contains_key(&id)
    }

    /// The highest counter delivered from each publisher that delivered any.
    pub fn delivered(&self) -> Vec<(NodeId, u64)> {
        (self.delivered).collect(|source, counter, _| Some((source, counter)))
    }

    /// The direct predecessors of this node's next message.
    pub fn barrier(&self) -> Vec<MsgId> {
        (self.delivered)
            .collect(|source, counter, marked| marked.then_some(MsgId { source, counter }))
    }

    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Whether this node has numbered its last message (counters stay below 2^63): then
    /// [`Causal::publish`] must not be called.
    pub fn counters_exhausted(&self) -> bool {
        self.delivered_of(self.me) >= COUNTER_LIMIT - 1
    }

    /// Publishes a message: its id and barrier; it is delivered here at once and the
    /// barrier becomes the message alone. The caller checks [`Causal::counters_exhausted`]
    /// first.
    pub fn publish(&mut self) -> (MsgId, Vec<MsgId>) {
        let counter = self.delivered_of(self.me) + 1;
        let id = MsgId {
            source: self.me,
            counter,
        };
        // The barrier goes out with the message and is emptied, in one pass.
        let barrier = self.delivered.take_barrier();
        self.delivered.set(self.me, counter, true);
        (id, barrier)
    }

    /// Takes message `id`, carried by `message`, received at `now_ms`; appends to `out`
    /// what is now delivered (it and any message it unblocked), in causal order.
    pub fn receive(
        &mut self,
        id: MsgId,
        message: T,
        now_ms: u64,
        out: &mut Vec<Delivered<T>>,
    ) -> Result<Received, VcubeError> {
        if self.has(id) {
            return Ok(Received::Duplicate);
        }
        self.receive_unseen(id, message, now_ms, out)
    }

    /// [`Causal::receive`] for a message the caller found neither delivered nor buffered
    /// ([`Causal::has`]), without looking again.
    pub fn receive_unseen(
        &mut self,
        id: MsgId,
        message: T,
        now_ms: u64,
        out: &mut Vec<Delivered<T>>,
    ) -> Result<Received, VcubeError> {
        debug_assert!(!self.has(id), "the caller checked");
        let highest = id.source.max(message.highest_node());
        if highest.0 >= ID_LIMIT {
            return Err(VcubeError::NodeOutsideCube {
                id: highest.0,
                n: ID_LIMIT,
            });
        }
        if id.counter >= COUNTER_LIMIT {
            return Err(VcubeError::Malformed("a message counter of 2^63 or more"));
        }
        let barrier = message.barrier();
        if self.buffer.len() >= self.buffer_max {
            return Err(VcubeError::BufferFull {
                topic: 0,
                max: self.buffer_max,
            });
        }
        let mut checked = 0;
        let blocker = if self.held {
            None
        } else {
            self.delivered.first_missing(id, barrier, &mut checked)
        };
        if self.held || blocker.is_some() {
            self.buffer.insert(
                id,
                Waiting {
                    message,
                    checked,
                    since_ms: now_ms,
                },
            );
            if let Some(blocker) = blocker {
                self.waiters.entry(blocker).or_default().push(id);
            }
            return Ok(Received::Taken);
        }
        // Nothing blocks it: delivered without passing through the buffer.
        self.deliver(id, barrier);
        out.push(Delivered { id, message });
        if let Some(unblocked) = self.waiters.remove(&id) {
            self.settle(&unblocked, out);
        }
        Ok(Received::Taken)
    }

    /// Delivers each of `candidates` that nothing blocks, and whatever that unblocks; the
    /// others wait on their first blocker.
    fn settle(&mut self, first: &[MsgId], out: &mut Vec<Delivered<T>>) {
        let mut candidates: SmallVec<[MsgId; 8]> = SmallVec::from_slice(first);
        while let Some(id) = candidates.pop() {
            // One lookup: the entry is checked, and taken if nothing blocks it.
            let Entry::Occupied(mut entry) = self.buffer.entry(id) else {
                continue; // delivered meanwhile, or dropped by a snapshot
            };
            let w = entry.get_mut();
            if let Some(blocker) =
                (self.delivered).first_missing(id, w.message.barrier(), &mut w.checked)
            {
                self.waiters.entry(blocker).or_default().push(id);
                continue;
            }
            let w = entry.remove();
            self.deliver(id, w.message.barrier());
            if let Some(unblocked) = self.waiters.remove(&id) {
                candidates.extend(unblocked);
            }
            out.push(Delivered {
                id,
                message: w.message,
            });
        }
    }

    fn deliver(&mut self, id: MsgId, barrier: Ids) {
        debug_assert!(barrier.iter().all(|p| self.is_delivered(p)), "causal order");
        self.delivered.deliver(id, barrier);
    }

    /// Predecessors that buffered messages have waited on since before `before_ms`, neither
    /// delivered nor buffered here, that `want` accepts: what to fetch, at most `max` of
    /// them, each named once. The work is bounded by `max`, the buffer and what `want`
    /// refuses, not by the gap a message's counter claims (a counter far ahead names
    /// billions of predecessors) nor by how many buffered messages share a gap.
    pub fn missing(
        &self,
        before_ms: u64,
        max: usize,
        mut want: impl FnMut(MsgId) -> bool,
    ) -> Vec<MsgId> {
        let mut out: Vec<MsgId> = Vec::new();
        if self.held || max == 0 {
            return out;
        }
        let mut named = std::collections::BTreeSet::new();
        let mut waiting: Vec<(&MsgId, &Waiting<T>)> = (self.buffer.iter())
            .filter(|(_, w)| w.since_ms <= before_ms)
            .collect();
        waiting.sort_unstable_by_key(|(id, _)| **id);
        // The publisher whose gap is walked, and up to which counter: the waiting messages
        // come sorted, so each publisher's gap is walked once, not once per message.
        let mut walked: Option<(NodeId, u64)> = None;
        for (id, w) in waiting {
            // The publisher's earlier messages, then the barrier.
            let mut first = self.delivered_of(id.source) + 1;
            if let Some((source, upto)) = walked
                && source == id.source
            {
                first = first.max(upto + 1);
            }
            walked = Some((id.source, id.counter));
            let gap = (first..id.counter).map(|counter| MsgId {
                source: id.source,
                counter,
            });
            for p in gap.chain(w.message.barrier().iter()) {
                if !self.has(p) && want(p) && named.insert(p) {
                    out.push(p);
                    if out.len() == max {
                        return out;
                    }
                }
            }
        }
        out
    }

    /// Installs a snapshot's delivered counters (the state it came with holds those
    /// messages): buffered messages it covers are dropped, the barrier names each
    /// publisher's last message, and what the snapshot unblocks is delivered.
    pub fn install(&mut self, delivered: &BTreeMap<NodeId, u64>) -> Vec<Delivered<T>> {
        self.held = false;
        for (&source, &counter) in delivered {
            if source.0 < ID_LIMIT && counter < COUNTER_LIMIT && counter > self.delivered_of(source)
            {
                self.delivered.set(source, counter, true);
            }
        }
        // Every publisher's last message is a barrier entry.
        self.delivered.mark_all();
        let delivered = &self.delivered;
        self.buffer
            .retain(|id, _| delivered.get(id.source) < id.counter);
        self.waiters.clear();
        let mut candidates: Vec<MsgId> = self.buffer.keys().copied().collect();
        candidates.sort_unstable();
        let mut out = Vec::new();
        self.settle(&candidates, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(source: u32, counter: u64) -> MsgId {
        MsgId::new(NodeId(source), counter)
    }

    type Bare = Causal<Vec<MsgId>>;

    /// What receiving delivered, or `None` for a duplicate.
    fn receive(c: &mut Bare, id: MsgId, barrier: Vec<MsgId>, now_ms: u64) -> Option<Vec<MsgId>> {
        let mut out = Vec::new();
        match c.receive(id, barrier, now_ms, &mut out) {
            Ok(Received::Taken) => Some(out.into_iter().map(|d| d.id).collect()),
            Ok(Received::Duplicate) => {
                assert!(out.is_empty());
                None
            }
            Err(e) => panic!("refused: {e}"),
        }
    }

    #[test]
    fn a_message_waits_for_its_barrier_and_the_barrier_follows_deliveries() {
        let mut a = Bare::new(NodeId(0), 16);
        let mut b = Bare::new(NodeId(1), 16);
        let mut c = Bare::new(NodeId(2), 16);
        let (m1, b1) = a.publish();
        assert!(b1.is_empty());
        assert_eq!(receive(&mut b, m1, b1.clone(), 0), Some(vec![m1]));
        let (m2, b2) = b.publish();
        assert_eq!(b2, vec![m1], "b's message follows a's");
        // c gets b's message first: it waits for a's.
        assert_eq!(receive(&mut c, m2, b2, 0), Some(vec![]));
        assert_eq!(c.missing(0, 10, |_| true), vec![m1]);
        assert_eq!(receive(&mut c, m1, b1, 5), Some(vec![m1, m2]));
        assert_eq!(c.barrier(), vec![m2], "m1 is an indirect predecessor now");
        assert_eq!(receive(&mut c, m1, vec![], 6), None);
    }

    /// Found by fuzzing: a message whose counter is far ahead named every predecessor in the
    /// gap, each checked against the list so far, and a tick never ended.
    #[test]
    fn a_counter_far_ahead_names_at_most_the_batch() {
        let mut r = Bare::new(NodeId(3), 16);
        assert_eq!(
            receive(&mut r, id(0, COUNTER_LIMIT - 1), vec![], 0),
            Some(vec![])
        );
        let start = std::time::Instant::now();
        let asked = r.missing(0, 64, |_| true);
        assert_eq!(asked.len(), 64);
        assert_eq!(asked[0], id(0, 1));
        // Those asked recently are skipped, and the next ones named instead.
        let next = r.missing(0, 64, |m| m.counter > 64);
        assert_eq!(next[0], id(0, 65));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn counters_of_2_63_or_more_are_refused_and_barrier_entries_beyond_never_deliver() {
        let mut r = Bare::new(NodeId(3), 16);
        let mut out = Vec::new();
        for counter in [COUNTER_LIMIT, u64::MAX] {
            assert_eq!(
                r.receive(id(0, counter), vec![], 0, &mut out),
                Err(VcubeError::Malformed("a message counter of 2^63 or more"))
            );
        }
        assert_eq!(r.buffered(), 0);
        // A predecessor that no message can be waits in the buffer, bounded as any other.
        assert_eq!(
            receive(&mut r, id(1, 1), vec![id(0, u64::MAX)], 0),
            Some(vec![])
        );
        assert_eq!(r.buffered(), 1);
        assert!(out.is_empty());
        assert!(!r.is_delivered(id(0, COUNTER_LIMIT)));
        assert_eq!(r.delivered(), vec![]);
        // A snapshot may bring this node's own counter to the last one: no further message.
        assert!(!r.counters_exhausted());
        r.install(&BTreeMap::from([(NodeId(3), COUNTER_LIMIT - 1)]));
        assert!(r.counters_exhausted());
    }

    #[test]
    fn the_barrier_follows_deliveries_publishes_and_snapshots() {
        let mut r = Bare::new(NodeId(3), 16);
        assert_eq!(receive(&mut r, id(0, 1), vec![], 0), Some(vec![id(0, 1)]));
        assert_eq!(receive(&mut r, id(1, 1), vec![], 0), Some(vec![id(1, 1)]));
        // Node 2's message follows node 0's only: node 1's stays in the barrier.
        assert_eq!(
            receive(&mut r, id(2, 1), vec![id(0, 1)], 0),
            Some(vec![id(2, 1)])
        );
        assert_eq!(r.barrier(), vec![id(1, 1), id(2, 1)]);
        assert_eq!(
            r.delivered_of(NodeId(0)),
            1,
            "out of the barrier, still delivered"
        );
        let (mine, barrier) = r.publish();
        assert_eq!((mine, barrier), (id(3, 1), vec![id(1, 1), id(2, 1)]));
        assert_eq!(r.barrier(), vec![mine]);
        assert_eq!(
            r.delivered(),
            vec![
                (NodeId(0), 1),
                (NodeId(1), 1),
                (NodeId(2), 1),
                (NodeId(3), 1)
            ]
        );
        // A snapshot makes each publisher's last message a barrier entry.
        let snapshot = BTreeMap::from([(NodeId(0), 4), (NodeId(5), 2), (NodeId(6), COUNTER_LIMIT)]);
        assert!(r.install(&snapshot).is_empty());
        assert_eq!(
            r.barrier(),
            vec![id(0, 4), id(1, 1), id(2, 1), id(3, 1), id(5, 2)],
            "a counter of 2^63 or more in a snapshot is left out"
        );
    }

    #[test]
    fn messages_sharing_a_gap_walk_it_once() {
        // A thousand messages from one publisher wait on the same 2,000 missing ones, all
        // asked for already: finding nothing new to ask looks at each missing one once,
        // not once per waiting message.
        let mut r = Bare::new(NodeId(3), 1_000);
        for counter in 2_001..=3_000 {
            assert_eq!(receive(&mut r, id(0, counter), vec![], 0), Some(vec![]));
        }
        let mut looked = 0;
        let asked = r.missing(0, 64, |m| {
            looked += 1;
            m.counter > 2_000
        });
        assert_eq!(asked, vec![]);
        assert_eq!(looked, 2_000);
        // The first one not asked yet is named.
        assert_eq!(r.missing(0, 64, |m| m.counter > 1_999), vec![id(0, 2_000)]);
    }

    #[test]
    fn a_publishers_messages_are_delivered_in_order() {
        let mut r = Bare::new(NodeId(3), 16);
        assert_eq!(receive(&mut r, id(0, 2), vec![id(0, 1)], 0), Some(vec![]));
        // Even an empty barrier cannot overtake the publisher's earlier message.
        assert_eq!(receive(&mut r, id(0, 3), vec![], 0), Some(vec![]));
        assert_eq!(r.missing(0, 10, |_| true), vec![id(0, 1)]);
        assert_eq!(
            receive(&mut r, id(0, 1), vec![], 0),
            Some(vec![id(0, 1), id(0, 2), id(0, 3)])
        );
    }

    #[test]
    fn a_publishers_next_message_follows_its_last_one_and_what_it_delivered_since() {
        let mut a = Bare::new(NodeId(0), 16);
        let (m1, b1) = a.publish();
        assert!(b1.is_empty());
        let (m2, b2) = a.publish();
        assert_eq!(b2, vec![m1]);
        assert_eq!(receive(&mut a, id(1, 1), vec![], 0), Some(vec![id(1, 1)]));
        let (_, b3) = a.publish();
        assert_eq!(b3, vec![m2, id(1, 1)]);
    }

    #[test]
    fn a_message_waits_on_each_barrier_entry_in_turn() {
        let mut r = Bare::new(NodeId(3), 16);
        let m = id(2, 1);
        assert_eq!(
            receive(&mut r, m, vec![id(0, 1), id(1, 1)], 0),
            Some(vec![])
        );
        assert_eq!(receive(&mut r, id(0, 1), vec![], 0), Some(vec![id(0, 1)]));
        assert_eq!(
            receive(&mut r, id(1, 1), vec![], 0),
            Some(vec![id(1, 1), m])
        );
        assert_eq!(r.buffered(), 0);
        assert_eq!(r.barrier(), vec![m], "m covers both of its predecessors");
    }

    #[test]
    fn the_buffer_is_bounded() {
        let mut r = Bare::new(NodeId(3), 2);
        let mut out = Vec::new();
        r.receive(id(0, 5), vec![], 0, &mut out).unwrap();
        r.receive(id(0, 6), vec![], 0, &mut out).unwrap();
        assert!(matches!(
            r.receive(id(0, 7), vec![], 0, &mut out),
            Err(VcubeError::BufferFull { max: 2, .. })
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn a_snapshot_covers_what_it_holds_and_unblocks_the_rest() {
        let mut r = Bare::new(NodeId(3), 16);
        assert_eq!(receive(&mut r, id(0, 2), vec![], 0), Some(vec![]));
        assert_eq!(receive(&mut r, id(0, 4), vec![], 0), Some(vec![]));
        let snapshot = BTreeMap::from([(NodeId(0), 3)]);
        let delivered: Vec<MsgId> = r.install(&snapshot).into_iter().map(|d| d.id).collect();
        assert_eq!(delivered, vec![id(0, 4)]);
        assert_eq!(r.buffered(), 0);
        assert!(r.is_delivered(id(0, 2)));
    }
}
