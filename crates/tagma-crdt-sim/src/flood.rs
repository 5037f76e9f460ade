//! The flooding baseline: a node that sees a message for the first time relays it to
//! every overlay neighbour but the one it came from; a copy seen before is a duplicate and
//! goes no further. Over FIFO links on a fixed overlay it needs no repair for moderate loss
//! (each node hears a message from several neighbours), at the price of about `degree − 1`
//! copies per node.

use std::collections::{BTreeMap, BTreeSet};

use tagma_vcube::{Data, MsgId, NodeId, TopicId};

use crate::overlay::{GossipMessage, Replicas};
use crate::proto::{Effect, Protocol, Sizes};

/// A flooding node.
pub struct FloodNode {
    neighbours: Vec<NodeId>,
    replicas: Replicas,
}

impl FloodNode {
    pub fn new(
        me: NodeId,
        neighbours: Vec<NodeId>,
        subscriptions: &BTreeMap<TopicId, BTreeSet<NodeId>>,
        value_bytes: usize,
    ) -> FloodNode {
        FloodNode {
            neighbours,
            replicas: Replicas::new(me, subscriptions, 1 << 20, value_bytes),
        }
    }

    fn spread(&self, data: &Data, except: Option<NodeId>, out: &mut Vec<Effect<GossipMessage>>) {
        for &to in &self.neighbours {
            if Some(to) != except {
                out.push(Effect::Send {
                    to,
                    message: GossipMessage::Gossip(data.clone()),
                });
            }
        }
    }
}

impl Protocol for FloodNode {
    type Message = GossipMessage;

    fn sizes(message: &GossipMessage) -> Sizes {
        message.sizes()
    }

    fn handle(
        &mut self,
        now_ms: u64,
        from: NodeId,
        message: GossipMessage,
        out: &mut Vec<Effect<GossipMessage>>,
    ) {
        let GossipMessage::Gossip(data) = message else {
            return;
        };
        if self.replicas.has(data.topic(), data.id()) {
            self.replicas.duplicates += 1;
            return;
        }
        let data = Data {
            hops: data.hops.saturating_add(1),
            ..data
        };
        self.spread(&data, Some(from), out);
        self.replicas.take(now_ms, &data, out);
    }

    fn tick(&mut self, _now_ms: u64, _out: &mut Vec<Effect<GossipMessage>>) {}

    fn next_timeout_ms(&self) -> u64 {
        u64::MAX / 1_000
    }

    fn publish(
        &mut self,
        _now_ms: u64,
        topic: TopicId,
        draw: u64,
        out: &mut Vec<Effect<GossipMessage>>,
    ) -> Option<(MsgId, usize)> {
        let data = self.replicas.publish(topic, draw, out)?;
        self.spread(&data, None, out);
        Some((data.id(), data.payload().len()))
    }

    fn digest(&self, topic: TopicId) -> [u8; 32] {
        self.replicas.digest(topic)
    }

    fn duplicates(&self) -> u64 {
        self.replicas.duplicates
    }
}
