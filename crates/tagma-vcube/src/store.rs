//! What a node replicates: the replication kernel's side of the broadcast layer. The node
//! hands it every delivered operation in causal order, asks it for a topic's state when
//! another node joins, and gives it a state to install when this node joins.

use bytes::Bytes;

use crate::causal::MsgId;
use crate::message::TopicId;

/// The replicated objects, one per topic.
pub trait Store {
    /// Applies a delivered operation (its publisher's payload) to the topic's object.
    fn apply(&mut self, topic: TopicId, id: MsgId, payload: &Bytes);
    /// The topic's state, for a joining node.
    fn snapshot(&self, topic: TopicId) -> Bytes;
    /// Replaces the topic's state by a snapshot; an error refuses it.
    fn install(&mut self, topic: TopicId, state: &Bytes) -> Result<(), String>;
}

/// A store that keeps nothing (a relay, or a test of the broadcast layer alone).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoStore;

impl Store for NoStore {
    fn apply(&mut self, _: TopicId, _: MsgId, _: &Bytes) {}
    fn snapshot(&self, _: TopicId) -> Bytes {
        Bytes::new()
    }
    fn install(&mut self, _: TopicId, _: &Bytes) -> Result<(), String> {
        Ok(())
    }
}
