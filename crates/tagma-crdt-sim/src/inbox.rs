//! A node's inbox in the simulator. The node handles its messages one at a time in the order
//! they arrive (ties by sender, then by the sender's order of sending), each taking
//! `receive_cost_us` once it has arrived and the node is done with the message before.
//!
//! Before a node runs a window, its chunk's calendar ([`crate::calendar`]) hands it every
//! message arriving before the window's horizon; [`Inbox::place`] puts them in arrival order
//! behind those placed before (which arrive before the last horizon, so before these) and
//! gives each its handling time, in a FIFO queue.

use std::collections::VecDeque;

use tagma_vcube::NodeId;

/// A message on its way to a node.
pub struct Mail<M> {
    pub to: NodeId,
    /// The sender's count of its sends, at this one.
    pub seq: u64,
    pub from: NodeId,
    pub arrive_us: u64,
    pub message: M,
}

impl<M> Mail<M> {
    /// The order of arrival at its node (unique: a sender numbers its sends).
    fn key(&self) -> (u64, NodeId, u64) {
        (self.arrive_us, self.from, self.seq)
    }
}

/// The messages one node has to handle, in order.
pub struct Inbox<M> {
    /// In handling order; each is handled `receive_cost_us` after it arrives or after the
    /// node is done with the one before, whichever is later.
    queue: VecDeque<Mail<M>>,
    receive_cost_us: u64,
    /// When the node is done with the last message taken from `queue`.
    busy_until_us: u64,
}

impl<M> Inbox<M> {
    /// An inbox whose node spends `receive_cost_us` on each message.
    pub fn new(receive_cost_us: u64) -> Inbox<M> {
        Inbox {
            queue: VecDeque::new(),
            receive_cost_us,
            busy_until_us: 0,
        }
    }

    /// Puts in handling order the node's messages arriving before a horizon, every one
    /// arriving before then and not placed yet, in any order.
    pub fn place(&mut self, messages: impl Iterator<Item = Mail<M>>) {
        if self.queue.is_empty() {
            // Start from the front of the queue's room, so that what comes in stays in one
            // piece.
            self.queue.clear();
        }
        let placed = self.queue.len();
        self.queue.extend(messages);
        // Those placed before arrive before the last horizon, so before these.
        self.queue.make_contiguous()[placed..].sort_unstable_by_key(Mail::key);
    }

    /// When the next message in order is handled.
    pub fn next_handle_us(&self) -> Option<u64> {
        (self.queue.front()).map(|m| self.busy_until_us.max(m.arrive_us) + self.receive_cost_us)
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
        self.queue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mail(seq: u64, from: u32, arrive_us: u64, message: &str) -> Mail<&str> {
        let (to, from) = (NodeId(9), NodeId(from));
        Mail {
            to,
            seq,
            from,
            arrive_us,
            message,
        }
    }

    #[test]
    fn messages_are_handled_in_the_order_they_arrive() {
        let mut inbox = Inbox::new(5);
        // Placed out of order.
        inbox.place(
            [
                mail(3, 1, 40, "second"),
                mail(4, 3, 35, "first"),
                mail(1, 1, 40, "tie: same time, same sender, sent before"),
                mail(1, 0, 40, "tie: same time, lower sender"),
            ]
            .into_iter(),
        );
        assert_eq!(inbox.pop().map(|(at, _, m)| (at, m)), Some((40, "first")));
        // A later horizon: behind those placed before.
        inbox.place([mail(2, 2, 100, "beyond the first horizon")].into_iter());
        let placed: Vec<(u64, &str)> =
            std::iter::from_fn(|| inbox.pop().map(|(at, _, m)| (at, m))).collect();
        assert_eq!(
            placed,
            vec![
                (45, "tie: same time, lower sender"),
                (50, "tie: same time, same sender, sent before"),
                (55, "second"),
                (105, "beyond the first horizon"),
            ]
        );
        assert_eq!(inbox.next_handle_us(), None);
    }
}
