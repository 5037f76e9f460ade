//! What the gossip baselines share: the overlay they run on and a node's replicas.
//!
//! The overlay is a connected random graph drawn from the seed: a ring plus two random links
//! per node (mean degree 6, at least 4), standing for HyParView's active views of about
//! five neighbours, which Plumtree and the epidemic tree VCube-Sync was compared with run on.
//! Replicas deliver in causal order with the same causal barriers as VCube-Sync
//! (`tagma_vcube::Causal`), so the protocols differ only in how they spread messages.

use std::collections::{BTreeMap, BTreeSet};

use tagma_vcube::message::varint_len;
use tagma_vcube::{Causal, Data, MsgId, NodeId, Published, Received, Store, TopicId};

use crate::proto::{Effect, Sizes};
use tagma_vcube::Kernel;

/// Neighbours of every node.
pub fn overlay(nodes: u32, seed: u64) -> Vec<Vec<NodeId>> {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x0e7_1a75);
    let mut links: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); nodes as usize];
    let link = |a: u32, b: u32, links: &mut Vec<BTreeSet<u32>>| {
        if a != b {
            links[a as usize].insert(b);
            links[b as usize].insert(a);
        }
    };
    for i in 0..nodes {
        link(i, (i + 1) % nodes, &mut links);
    }
    for i in 0..nodes {
        for _ in 0..2 {
            let j = rng.u32(0..nodes);
            link(i, j, &mut links);
        }
    }
    links
        .into_iter()
        .map(|l| l.into_iter().map(NodeId).collect())
        .collect()
}

/// A baseline's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GossipMessage {
    /// An operation, `data.hops` hops from its publisher.
    Gossip(Data),
    /// "I have this message" (Plumtree's lazy push).
    IHave { topic: TopicId, id: MsgId },
    /// "Send me this message, and push to me eagerly from now on."
    Graft { topic: TopicId, id: MsgId },
    /// "Stop pushing to me eagerly."
    Prune,
}

impl GossipMessage {
    /// Bytes by class, encoded as compactly as VCube-Sync's messages.
    pub fn sizes(&self) -> Sizes {
        match self {
            GossipMessage::Gossip(data) => {
                let metadata = data.barrier_len();
                let payload = data.payload().len();
                let header = 1
                    + varint_len(u64::from(data.topic().0))
                    + data.id().encoded_len()
                    + 1
                    + varint_len(payload as u64);
                Sizes {
                    payload,
                    metadata,
                    control: header,
                    detector: 0,
                }
            }
            GossipMessage::IHave { topic, id } | GossipMessage::Graft { topic, id } => Sizes {
                control: 1 + varint_len(u64::from(topic.0)) + id.encoded_len(),
                ..Sizes::default()
            },
            GossipMessage::Prune => Sizes {
                control: 1,
                ..Sizes::default()
            },
        }
    }
}

/// A baseline node's view of the topics: what it saw (every node relays every topic) and,
/// for the topics it subscribes to, its replica.
pub struct Replicas {
    me: NodeId,
    causal: BTreeMap<TopicId, Causal<Data>>,
    subscribed: BTreeSet<TopicId>,
    store: Kernel,
    /// Messages seen by a node that does not subscribe to their topic.
    relayed: BTreeMap<TopicId, BTreeSet<MsgId>>,
    pub duplicates: u64,
}

impl Replicas {
    pub fn new(
        me: NodeId,
        subscriptions: &BTreeMap<TopicId, BTreeSet<NodeId>>,
        buffer_max: usize,
        value_bytes: usize,
    ) -> Replicas {
        let subscribed: BTreeSet<TopicId> = (subscriptions.iter())
            .filter(|(_, m)| m.contains(&me))
            .map(|(t, _)| *t)
            .collect();
        Replicas {
            me,
            causal: subscribed
                .iter()
                .map(|t| (*t, Causal::new(me, buffer_max)))
                .collect(),
            subscribed,
            store: Kernel::new(me, value_bytes),
            relayed: BTreeMap::new(),
            duplicates: 0,
        }
    }

    pub fn has(&self, topic: TopicId, id: MsgId) -> bool {
        match self.causal.get(&topic) {
            Some(c) => c.has(id),
            None => self.relayed.get(&topic).is_some_and(|s| s.contains(&id)),
        }
    }

    /// Takes a message seen for the first time; delivers what it unblocks.
    pub fn take<M>(&mut self, now_ms: u64, data: &Data, out: &mut Vec<Effect<M>>) {
        let (topic, id) = (data.topic(), data.id());
        let Some(c) = self.causal.get_mut(&topic) else {
            self.relayed.entry(topic).or_default().insert(id);
            return;
        };
        let hops = data.hops;
        let mut delivered = Vec::new();
        if let Ok(Received::Taken) = c.receive(id, data.clone(), now_ms, &mut delivered) {
            for d in delivered {
                self.store.apply(topic, d.id, d.message.payload());
                let hops = if d.id == id { hops } else { 0 };
                out.push(Effect::Deliver {
                    topic,
                    id: d.id,
                    hops,
                });
            }
        }
    }

    /// Publishes an operation built from this replica: the message to spread, delivered
    /// here at once.
    pub fn publish<M>(
        &mut self,
        topic: TopicId,
        draw: u64,
        out: &mut Vec<Effect<M>>,
    ) -> Option<Data> {
        if !self.subscribed.contains(&topic) {
            return None;
        }
        let payload = self.store.operation(topic, draw);
        let c = self.causal.get_mut(&topic)?;
        let (id, barrier) = c.publish();
        self.store.apply(topic, id, &payload);
        out.push(Effect::Deliver { topic, id, hops: 0 });
        Some(Data::new(Published::new(topic, id, barrier, payload), 0))
    }

    pub fn digest(&self, topic: TopicId) -> [u8; 32] {
        self.store.digest(topic)
    }

    pub fn me(&self) -> NodeId {
        self.me
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overlay_is_symmetric_connected_and_about_degree_six() {
        let g = overlay(500, 3);
        let mut seen = vec![false; 500];
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            stack.extend(g[i].iter().map(|j| j.0 as usize));
        }
        assert!(seen.iter().all(|&s| s));
        for (i, n) in g.iter().enumerate() {
            assert!(n.len() >= 2 && !n.contains(&NodeId(i as u32)));
            for j in n {
                assert!(g[j.0 as usize].contains(&NodeId(i as u32)));
            }
        }
        let mean = g.iter().map(Vec::len).sum::<usize>() as f64 / 500.0;
        assert!((5.0..7.0).contains(&mean), "{mean}");
    }
}
