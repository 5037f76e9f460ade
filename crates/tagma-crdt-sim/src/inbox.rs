//! A node's inbox in the simulator. The node handles its messages one at a time in the order
//! they arrive (ties by sender, then by the sender's order of sending), each taking
//! `receive_cost_us` once it has arrived and the node is done with the message before.
//!
//! Messages come in when a window of the run ends ([`crate::engine`]), from many senders
//! and not in the order they arrive. A message sent at or after a window's start arrives at
//! least the link's least delay later (its horizon); so before the node runs a window,
//! [`Inbox::place`] puts every message arriving before that horizon in arrival order — no
//! message still to be sent can arrive before them — and gives each its handling time, in a
//! FIFO queue.
//!
//! Messages not yet in order wait in buckets by arrival time (a calendar queue), so placing
//! a window's messages looks only at the buckets that end before the horizon and the one
//! bucket it falls in, not at every message still on its way.

use std::collections::VecDeque;

use tagma_vcube::NodeId;

/// The shortest bucket: a link with (almost) no delay would make buckets too many.
const BUCKET_MIN_US: u64 = 1_000;

/// A message sent to the node, not yet in order.
struct Incoming<M> {
    from: NodeId,
    /// The sender's count of its sends, at this one.
    seq: u64,
    arrive_us: u64,
    message: M,
}

impl<M> Incoming<M> {
    /// The order of arrival (unique: a sender numbers its sends).
    fn key(&self) -> (u64, NodeId, u64) {
        (self.arrive_us, self.from, self.seq)
    }
}

/// Messages on their way to one node.
pub struct Inbox<M> {
    /// The width of a bucket.
    bucket_us: u64,
    /// Messages not yet in order, by arrival: `buckets[k]` holds those arriving in bucket
    /// `first_bucket + k` (from `(first_bucket + k) * bucket_us` on).
    buckets: VecDeque<Vec<Incoming<M>>>,
    first_bucket: u64,
    /// Emptied buckets, to use again.
    spare: Vec<Vec<Incoming<M>>>,
    /// Messages in `buckets`.
    incoming: usize,
    /// In handling order; each is handled `receive_cost_us` after it arrives or after the
    /// node is done with the one before, whichever is later.
    queue: VecDeque<Incoming<M>>,
    receive_cost_us: u64,
    /// When the node is done with the last message taken from `queue`.
    busy_until_us: u64,
}

impl<M> Inbox<M> {
    /// An inbox whose buckets span `bucket_us` (at least a millisecond): best at the least
    /// delay from sending a message to its arrival, which a window's horizon moves by.
    pub fn new(bucket_us: u64) -> Inbox<M> {
        Inbox {
            bucket_us: bucket_us.max(BUCKET_MIN_US),
            buckets: VecDeque::new(),
            first_bucket: 0,
            spare: Vec::new(),
            incoming: 0,
            queue: VecDeque::new(),
            receive_cost_us: 0,
            busy_until_us: 0,
        }
    }

    /// A message from `from` (its `seq`-th send), arriving at `arrive_us` (not before the
    /// horizon of the last [`Inbox::place`]).
    pub fn push(&mut self, seq: u64, from: NodeId, arrive_us: u64, message: M) {
        let bucket = arrive_us / self.bucket_us;
        if self.incoming == 0 {
            // Nothing waits: the buckets start at this one.
            self.first_bucket = bucket;
        }
        while bucket < self.first_bucket {
            // Earlier than any waiting message.
            let spare = self.spare.pop().unwrap_or_default();
            self.buckets.push_front(spare);
            self.first_bucket -= 1;
        }
        let k = (bucket - self.first_bucket) as usize;
        while self.buckets.len() <= k {
            let spare = self.spare.pop().unwrap_or_default();
            self.buckets.push_back(spare);
        }
        self.buckets[k].push(Incoming {
            from,
            seq,
            arrive_us,
            message,
        });
        self.incoming += 1;
    }

    /// Puts the messages arriving before `horizon_us` in handling order (every message
    /// arriving before then must be in).
    pub fn place(&mut self, horizon_us: u64, receive_cost_us: u64) {
        self.receive_cost_us = receive_cost_us;
        if self.incoming == 0 {
            return;
        }
        if self.queue.is_empty() {
            // Start from the front of the queue's room, so that what comes in stays in one
            // piece.
            self.queue.clear();
        }
        let placed = self.queue.len();
        let last = horizon_us / self.bucket_us;
        // Whole buckets before the horizon's own.
        while self.first_bucket < last
            && let Some(mut bucket) = self.buckets.pop_front()
        {
            self.first_bucket += 1;
            self.incoming -= bucket.len();
            self.queue.extend(bucket.drain(..));
            self.spare.push(bucket);
        }
        // The part of the horizon's bucket before it.
        if self.first_bucket == last
            && let Some(bucket) = self.buckets.front_mut()
        {
            let mut k = 0;
            while k < bucket.len() {
                if bucket[k].arrive_us < horizon_us {
                    self.queue.push_back(bucket.swap_remove(k));
                    self.incoming -= 1;
                } else {
                    k += 1;
                }
            }
        }
        if self.incoming == 0 {
            // Nothing waits: keep the buckets' room for later.
            for mut bucket in self.buckets.drain(..) {
                bucket.clear();
                self.spare.push(bucket);
            }
        }
        // Those placed before arrive before the last horizon, so before these.
        self.queue.make_contiguous()[placed..].sort_unstable_by_key(Incoming::key);
    }

    /// When the next message in order is handled.
    pub fn next_handle_us(&self) -> Option<u64> {
        (self.queue.front()).map(|m| self.busy_until_us.max(m.arrive_us) + self.receive_cost_us)
    }

    /// No message not yet in order is handled before this.
    pub fn incoming_after_us(&self, receive_cost_us: u64) -> u64 {
        let earliest = (self.buckets.iter())
            .find(|b| !b.is_empty())
            .and_then(|b| b.iter().map(|m| m.arrive_us).min());
        earliest.map_or(u64::MAX, |at| at.saturating_add(receive_cost_us))
    }

    /// The message in order after the next one, if in order already.
    pub fn second(&self) -> Option<&M> {
        self.queue.get(1).map(|m| &m.message)
    }

    /// The next message in order: its handling time, sender and contents.
    pub fn pop(&mut self) -> Option<(u64, NodeId, M)> {
        let handle_us = self.next_handle_us()?;
        let m = self.queue.pop_front()?;
        self.busy_until_us = handle_us;
        Some((handle_us, m.from, m.message))
    }

    /// Drops every message (its node crashed).
    pub fn clear(&mut self) {
        for mut bucket in self.buckets.drain(..) {
            bucket.clear();
            self.spare.push(bucket);
        }
        self.incoming = 0;
        self.queue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_handled_in_the_order_they_arrive() {
        let mut inbox = Inbox::new(1);
        // Added out of order.
        inbox.push(3, NodeId(1), 40, "second");
        inbox.push(2, NodeId(2), 100, "beyond the horizon");
        inbox.push(4, NodeId(3), 35, "first");
        inbox.push(1, NodeId(1), 40, "tie: same time, same sender, sent before");
        inbox.push(1, NodeId(0), 40, "tie: same time, lower sender");
        inbox.place(50, 5);
        assert_eq!(inbox.incoming_after_us(5), 105);
        let placed: Vec<(u64, &str)> =
            std::iter::from_fn(|| inbox.pop().map(|(at, _, m)| (at, m))).collect();
        assert_eq!(
            placed,
            vec![
                (40, "first"),
                (45, "tie: same time, lower sender"),
                (50, "tie: same time, same sender, sent before"),
                (55, "second"),
            ]
        );
        inbox.place(101, 5);
        assert_eq!(inbox.next_handle_us(), Some(105));
        assert_eq!(inbox.incoming_after_us(5), u64::MAX);
    }

    #[test]
    fn buckets_place_messages_as_one_sorted_list_would() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut inbox = Inbox::new(2_000);
        let mut reference: Vec<(u64, NodeId, u64)> = Vec::new();
        let mut placed = Vec::new();
        let mut expected = Vec::new();
        let (mut seq, mut start) = (0, 0);
        for _ in 0..200 {
            // A window: messages sent from its start arrive from its horizon on.
            let horizon = start + 1_500;
            for _ in 0..rng.usize(0..6) {
                seq += 1;
                let (from, arrive) = (NodeId(rng.u32(0..4)), horizon + rng.u64(0..20_000));
                inbox.push(seq, from, arrive, (arrive, from, seq));
                reference.push((arrive, from, seq));
            }
            start += rng.u64(1..1_500);
            let horizon = start + 1_500;
            inbox.place(horizon, 0);
            placed.extend(std::iter::from_fn(|| inbox.pop().map(|(_, _, m)| m)));
            reference.sort_unstable();
            let due = reference.partition_point(|m| m.0 < horizon);
            expected.extend(reference.drain(..due));
            assert_eq!(placed, expected);
            let earliest = reference.first().map_or(u64::MAX, |m| m.0);
            assert_eq!(inbox.incoming_after_us(0), earliest);
        }
    }
}
