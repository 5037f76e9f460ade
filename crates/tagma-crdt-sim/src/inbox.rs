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

use std::collections::VecDeque;

use tagma_vcube::NodeId;

/// A message sent to the node, not yet in order.
struct Incoming<M> {
    from: NodeId,
    /// The sender's count of its sends, at this one.
    seq: u64,
    arrive_us: u64,
    message: M,
}

/// Messages on their way to one node.
pub struct Inbox<M> {
    /// Taken out (`None`) as they are put in order.
    incoming: Vec<Option<Incoming<M>>>,
    /// Room to sort the keys of `incoming` (arrival, sender, sender's count): sorting them,
    /// not the messages, moves less.
    order: Vec<((u64, NodeId, u64), u32)>,
    /// The earliest arrival in `incoming`.
    incoming_arrive_us: u64,
    /// In handling order: (handling time, sender, message).
    queue: VecDeque<(u64, NodeId, M)>,
    /// When the node is done with the last message in `queue`.
    busy_until_us: u64,
}

impl<M> Default for Inbox<M> {
    fn default() -> Self {
        Inbox {
            incoming: Vec::new(),
            order: Vec::new(),
            incoming_arrive_us: u64::MAX,
            queue: VecDeque::new(),
            busy_until_us: 0,
        }
    }
}

impl<M> Inbox<M> {
    /// A message from `from` (its `seq`-th send), arriving at `arrive_us`.
    pub fn push(&mut self, seq: u64, from: NodeId, arrive_us: u64, message: M) {
        self.incoming_arrive_us = self.incoming_arrive_us.min(arrive_us);
        self.incoming.push(Some(Incoming {
            from,
            seq,
            arrive_us,
            message,
        }));
    }

    /// Puts the messages arriving before `horizon_us` in handling order (every message
    /// arriving before then must be in).
    pub fn place(&mut self, horizon_us: u64, receive_cost_us: u64) {
        if self.incoming_arrive_us >= horizon_us {
            return;
        }
        // Keys are unique: a sender numbers its sends.
        self.order.clear();
        for (k, m) in self.incoming.iter().enumerate() {
            if let Some(m) = m.as_ref().filter(|m| m.arrive_us < horizon_us) {
                self.order.push(((m.arrive_us, m.from, m.seq), k as u32));
            }
        }
        self.order.sort_unstable();
        for &(_, k) in &self.order {
            let m = self.incoming[k as usize].take().expect("taken once");
            let handle_us = self.busy_until_us.max(m.arrive_us) + receive_cost_us;
            self.busy_until_us = handle_us;
            self.queue.push_back((handle_us, m.from, m.message));
        }
        self.incoming.retain(Option::is_some);
        self.incoming_arrive_us = (self.incoming.iter().flatten().map(|m| m.arrive_us))
            .min()
            .unwrap_or(u64::MAX);
    }

    /// When the next message in order is handled.
    pub fn next_handle_us(&self) -> Option<u64> {
        self.queue.front().map(|(at, _, _)| *at)
    }

    /// No message not yet in order is handled before this.
    pub fn incoming_after_us(&self, receive_cost_us: u64) -> u64 {
        self.incoming_arrive_us.saturating_add(receive_cost_us)
    }

    /// The next message in order: its handling time, sender and contents.
    pub fn pop(&mut self) -> Option<(u64, NodeId, M)> {
        self.queue.pop_front()
    }

    /// Drops every message (its node crashed).
    pub fn clear(&mut self) {
        self.incoming.clear();
        self.incoming_arrive_us = u64::MAX;
        self.queue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_handled_in_the_order_they_arrive() {
        let mut inbox = Inbox::default();
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
}
