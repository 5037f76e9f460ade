//! Subscribing and unsubscribing at run time. Every node also belongs to one reserved
//! topic, [`MEMBERSHIP`], whose messages say "node j subscribes to topic t" or "node j
//! unsubscribes from topic t": they travel like any topic's messages (down a tree over every
//! node, hop by hop, in causal order, repaired by fetch and anti-entropy), and each node
//! applies them to its view of who subscribes to what. A node's own changes are therefore
//! seen in the order it made them. The membership topic's snapshot is that view, so a node
//! that joins late learns every change made before it started.
//!
//! A node that subscribes starts the topic like a late joiner: it buffers the topic's
//! messages, fetches a snapshot from a subscriber and delivers on top of it; what was
//! published while the others did not know it yet reaches it through anti-entropy. A node
//! that unsubscribes drops its replica at once; messages still on their way to it are
//! relayed, not delivered.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::log::Log;
use super::{Node, Topic};
use crate::causal::{Causal, MsgId};
use crate::cube::NodeId;
use crate::error::VcubeError;
use crate::message::TopicId;
use crate::store::Store;

/// The reserved topic of subscription changes (every node belongs to it).
pub const MEMBERSHIP: TopicId = TopicId(u32::MAX);

const SUBSCRIBE: u8 = 1;
const UNSUBSCRIBE: u8 = 2;

impl<S: Store> Node<S> {
    /// Subscribes this node to `topic`: it fetches the topic's state from a subscriber and
    /// tells every node, which then sends it the topic's messages.
    pub fn subscribe(&mut self, now_ms: u64, topic: TopicId) -> Result<(), VcubeError> {
        self.change(now_ms, topic, SUBSCRIBE)?;
        self.topics.insert(topic, self.fresh_topic(true));
        self.subscribers
            .entry(topic)
            .or_default()
            .insert(self.me.0 as usize);
        Ok(())
    }

    /// Unsubscribes this node from `topic`: its replica is dropped and every node is told to
    /// stop sending it the topic's messages.
    pub fn unsubscribe(&mut self, now_ms: u64, topic: TopicId) -> Result<(), VcubeError> {
        self.change(now_ms, topic, UNSUBSCRIBE)?;
        self.topics.remove(&topic);
        if let Some(members) = self.subscribers.get_mut(&topic) {
            members.remove(self.me.0 as usize);
        }
        Ok(())
    }

    /// Whether this node subscribes to `topic` now.
    pub fn subscribes(&self, topic: TopicId) -> bool {
        topic != MEMBERSHIP && self.topics.contains_key(&topic)
    }

    /// Who subscribes to `topic`, in this node's view.
    pub fn subscribers_of(&self, topic: TopicId) -> Option<BTreeSet<NodeId>> {
        let members = self.subscribers.get(&topic)?;
        Some(members.iter().map(|j| NodeId(j as u32)).collect())
    }

    fn change(&mut self, now_ms: u64, topic: TopicId, kind: u8) -> Result<(), VcubeError> {
        if topic == MEMBERSHIP {
            return Err(VcubeError::Config(format!(
                "topic {} is reserved for subscription changes",
                MEMBERSHIP.0
            )));
        }
        let subscribed = self.topics.contains_key(&topic);
        if kind == SUBSCRIBE && subscribed {
            return Err(VcubeError::Config(format!(
                "already subscribed to topic {}",
                topic.0
            )));
        }
        if kind == UNSUBSCRIBE && !subscribed {
            return Err(VcubeError::NotSubscribed { topic: topic.0 });
        }
        if self.is_joining(MEMBERSHIP) {
            return Err(VcubeError::Config(
                "this node is still fetching the subscriptions: change them once it has".into(),
            ));
        }
        let mut payload = vec![kind];
        payload.extend_from_slice(&topic.0.to_le_bytes());
        self.publish_on(now_ms, MEMBERSHIP, Bytes::from(payload))?;
        Ok(())
    }

    /// A topic's state at this node before anything is delivered (`joining`: it awaits a
    /// snapshot).
    pub(super) fn fresh_topic(&self, joining: bool) -> Topic {
        let causal = if joining {
            Causal::held(self.me, self.config.buffer_max)
        } else {
            Causal::new(self.me, self.config.buffer_max)
        };
        Topic {
            causal,
            log: Log::default(),
            fetched: BTreeMap::new(),
            joining: joining.then_some((0, 0)),
        }
    }

    /// Applies a delivered subscription change of its publisher.
    pub(super) fn apply_change(&mut self, id: MsgId, payload: &[u8]) {
        let (Some(&kind), Some(topic)) = (payload.first(), payload.get(1..5)) else {
            self.stats.rejected += 1;
            return;
        };
        let topic = TopicId(u32::from_le_bytes(topic.try_into().expect("4 bytes")));
        if id.source == self.me || topic == MEMBERSHIP {
            return; // applied when made
        }
        let members = self.subscribers.entry(topic).or_default();
        match kind {
            SUBSCRIBE => {
                members.insert(id.source.0 as usize);
            }
            UNSUBSCRIBE => {
                members.remove(id.source.0 as usize);
            }
            _ => self.stats.rejected += 1,
        }
    }

    /// The membership topic's snapshot: who subscribes to what.
    pub(super) fn membership_snapshot(&self) -> Bytes {
        let mut out = Vec::new();
        for (topic, members) in &self.subscribers {
            out.extend_from_slice(&topic.0.to_le_bytes());
            out.extend_from_slice(&(members.iter().count() as u32).to_le_bytes());
            for m in members {
                out.extend_from_slice(&(m as u32).to_le_bytes());
            }
        }
        Bytes::from(out)
    }

    /// Installs a membership snapshot; this node's own subscriptions stay as they are.
    pub(super) fn install_membership(&mut self, state: &Bytes) -> Result<(), VcubeError> {
        let mut view: BTreeMap<TopicId, BTreeSet<NodeId>> = BTreeMap::new();
        let mut rest = state.as_ref();
        let word = |rest: &mut &[u8]| -> Result<u32, VcubeError> {
            let (head, tail) = rest
                .split_first_chunk::<4>()
                .ok_or(VcubeError::Malformed("truncated subscriptions"))?;
            *rest = tail;
            Ok(u32::from_le_bytes(*head))
        };
        while !rest.is_empty() {
            let topic = TopicId(word(&mut rest)?);
            let count = word(&mut rest)? as usize;
            if count > rest.len() / 4 {
                return Err(VcubeError::Malformed(
                    "subscriber count beyond the snapshot",
                ));
            }
            let members = view.entry(topic).or_default();
            for _ in 0..count {
                let node = NodeId(word(&mut rest)?);
                self.cube.check(node)?;
                members.insert(node);
            }
        }
        for (topic, members) in &mut view {
            members.remove(&self.me);
            if self.topics.contains_key(topic) {
                members.insert(self.me);
            }
        }
        for topic in self.topics.keys().filter(|t| **t != MEMBERSHIP) {
            view.entry(*topic).or_default().insert(self.me);
        }
        view.remove(&MEMBERSHIP);
        self.subscribers = (view.into_iter())
            .map(|(topic, members)| (topic, members.iter().map(|j| j.0 as usize).collect()))
            .collect();
        Ok(())
    }
}
