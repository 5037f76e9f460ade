//! The application's side of a node: typed handles on each topic's CRDT — a register, a
//! counter, a set or a map — that read the local replica and publish operations built from
//! it, and change callbacks that run whenever an operation or a snapshot changes a watched
//! topic. [`Replica`] wraps a [`Node`] over the replication [`Kernel`]; its driver feeds it
//! inputs and takes its actions as it would the node's.
//!
//! ```text
//! let mut replica = Replica::new(node);
//! replica.on_change(TopicId(1), |topic, value| println!("{topic:?} is now {value}"));
//! replica.counter(TopicId(1))?.add(now_ms, 5)?;
//! replica.set(TopicId(2))?.insert(now_ms, Bytes::from("alice"))?;
//! ```

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_crdt::{Crdt, Kind, Op, Value, encode_op};

use crate::causal::MsgId;
use crate::error::VcubeError;
use crate::kernel::Kernel;
use crate::message::TopicId;
use crate::node::{Action, Input, Node};

/// A change callback: the topic and its value after the change.
pub type Watcher = Box<dyn FnMut(TopicId, &Value) + Send>;

/// A node with typed access to its replicas.
pub struct Replica {
    node: Node<Kernel>,
    watchers: BTreeMap<TopicId, Vec<Watcher>>,
}

impl Replica {
    pub fn new(node: Node<Kernel>) -> Replica {
        Replica {
            node,
            watchers: BTreeMap::new(),
        }
    }

    pub fn node(&self) -> &Node<Kernel> {
        &self.node
    }

    pub fn node_mut(&mut self) -> &mut Node<Kernel> {
        &mut self.node
    }

    /// Runs `watcher` after every change of `topic`'s replica (a delivered operation, this
    /// node's own included, or an installed snapshot).
    pub fn on_change(
        &mut self,
        topic: TopicId,
        watcher: impl FnMut(TopicId, &Value) + Send + 'static,
    ) {
        self.watchers
            .entry(topic)
            .or_default()
            .push(Box::new(watcher));
    }

    /// Takes an input, as [`Node::handle`].
    pub fn handle(&mut self, now_ms: u64, input: Input) {
        self.node.handle(now_ms, input);
    }

    /// The node's next action, as [`Node::poll_action`]; a delivery or an installed snapshot
    /// on a watched topic runs its callbacks first.
    pub fn poll_action(&mut self) -> Option<Action> {
        let action = self.node.poll_action()?;
        let topic = match &action {
            Action::Deliver { topic, .. } | Action::Installed { topic, .. } => Some(*topic),
            Action::Send { .. } => None,
        };
        if let Some(topic) = topic
            && let Some(watchers) = self.watchers.get_mut(&topic)
        {
            let value = self.node.store().crdt(topic).value();
            for w in watchers {
                w(topic, &value);
            }
        }
        Some(action)
    }

    /// `topic`'s value in this replica.
    pub fn value(&self, topic: TopicId) -> Value {
        self.node.store().crdt(topic).value()
    }

    fn typed(&mut self, topic: TopicId, kind: Kind) -> Result<Handle<'_>, VcubeError> {
        let holds = self.node.store().kind(topic);
        if holds != kind {
            return Err(VcubeError::Config(format!(
                "topic {} holds a {}, not a {}",
                topic.0,
                holds.name(),
                kind.name()
            )));
        }
        Ok(Handle {
            replica: self,
            topic,
        })
    }

    pub fn register(&mut self, topic: TopicId) -> Result<RegisterHandle<'_>, VcubeError> {
        self.typed(topic, Kind::Register).map(RegisterHandle)
    }

    pub fn counter(&mut self, topic: TopicId) -> Result<CounterHandle<'_>, VcubeError> {
        self.typed(topic, Kind::Counter).map(CounterHandle)
    }

    pub fn set(&mut self, topic: TopicId) -> Result<SetHandle<'_>, VcubeError> {
        self.typed(topic, Kind::Set).map(SetHandle)
    }

    pub fn map(&mut self, topic: TopicId) -> Result<MapHandle<'_>, VcubeError> {
        self.typed(topic, Kind::Map).map(MapHandle)
    }
}

/// A topic of a replica, of the kind checked.
struct Handle<'a> {
    replica: &'a mut Replica,
    topic: TopicId,
}

impl Handle<'_> {
    fn crdt(&self) -> Crdt {
        self.replica.node.store().crdt(self.topic)
    }

    fn me(&self) -> u32 {
        self.replica.node.store().me().0
    }

    /// The topic's CRDT is no longer of the kind the handle was made for (its kind is fixed
    /// per topic, so this does not happen).
    fn changed_kind(&self) -> VcubeError {
        VcubeError::Config(format!("topic {} changed its kind", self.topic.0))
    }

    fn publish(&mut self, now_ms: u64, op: impl Into<Op>) -> Result<MsgId, VcubeError> {
        let bytes = Bytes::from(encode_op(&op.into()));
        self.replica.node.publish(now_ms, self.topic, bytes)
    }
}

fn map_error(e: tagma_crdt::MapError) -> VcubeError {
    VcubeError::Config(e.to_string())
}

/// A last-writer-wins register.
pub struct RegisterHandle<'a>(Handle<'a>);

impl RegisterHandle<'_> {
    pub fn get(&self) -> Option<Bytes> {
        match self.0.crdt() {
            Crdt::Register(r) => r.value().cloned(),
            _ => None,
        }
    }

    /// Assigns `value` (it wins over every assignment this replica has seen).
    pub fn set(&mut self, now_ms: u64, value: Bytes) -> Result<MsgId, VcubeError> {
        let Crdt::Register(r) = self.0.crdt() else {
            return Err(self.0.changed_kind());
        };
        let op = r.assign(value, self.0.me());
        self.0.publish(now_ms, op)
    }
}

/// A counter that goes up and down.
pub struct CounterHandle<'a>(Handle<'a>);

impl CounterHandle<'_> {
    pub fn value(&self) -> i64 {
        match self.0.crdt() {
            Crdt::Counter(c) => c.value(),
            _ => 0,
        }
    }

    pub fn add(&mut self, now_ms: u64, amount: i64) -> Result<MsgId, VcubeError> {
        let Crdt::Counter(c) = self.0.crdt() else {
            return Err(self.0.changed_kind());
        };
        let op = c.add(amount);
        self.0.publish(now_ms, op)
    }
}

/// An observed-remove set (a concurrent add wins over a remove).
pub struct SetHandle<'a>(Handle<'a>);

impl SetHandle<'_> {
    pub fn contains(&self, element: &[u8]) -> bool {
        matches!(self.0.crdt(), Crdt::Set(s) if s.contains(element))
    }

    pub fn elements(&self) -> Vec<Bytes> {
        match self.0.crdt() {
            Crdt::Set(s) => s.iter().cloned().collect(),
            _ => Vec::new(),
        }
    }

    pub fn insert(&mut self, now_ms: u64, element: Bytes) -> Result<MsgId, VcubeError> {
        let Crdt::Set(s) = self.0.crdt() else {
            return Err(self.0.changed_kind());
        };
        let op = s.add(element);
        self.0.publish(now_ms, op)
    }

    /// Removes the element as this replica has seen it added.
    pub fn remove(&mut self, now_ms: u64, element: Bytes) -> Result<MsgId, VcubeError> {
        let Crdt::Set(s) = self.0.crdt() else {
            return Err(self.0.changed_kind());
        };
        let op = s.remove(element);
        self.0.publish(now_ms, op)
    }
}

/// A map from keys to registers, counters and sets (an update wins over a concurrent
/// removal).
pub struct MapHandle<'a>(Handle<'a>);

impl MapHandle<'_> {
    fn map(&self) -> tagma_crdt::Map {
        match self.0.crdt() {
            Crdt::Map(m) => m,
            _ => tagma_crdt::Map::new(),
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<Value> {
        self.map().get(key)
    }

    pub fn keys(&self) -> Vec<Bytes> {
        self.map().keys().cloned().collect()
    }

    pub fn assign(&mut self, now_ms: u64, key: Bytes, value: Bytes) -> Result<MsgId, VcubeError> {
        let op = self
            .map()
            .assign(key, value, self.0.me())
            .map_err(map_error)?;
        self.0.publish(now_ms, op)
    }

    pub fn add(&mut self, now_ms: u64, key: Bytes, amount: i64) -> Result<MsgId, VcubeError> {
        let op = self.map().add(key, amount).map_err(map_error)?;
        self.0.publish(now_ms, op)
    }

    pub fn insert(&mut self, now_ms: u64, key: Bytes, element: Bytes) -> Result<MsgId, VcubeError> {
        let op = self.map().insert(key, element).map_err(map_error)?;
        self.0.publish(now_ms, op)
    }

    pub fn remove(&mut self, now_ms: u64, key: Bytes) -> Result<MsgId, VcubeError> {
        let op = self.map().remove(key);
        self.0.publish(now_ms, op)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, VecDeque};
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::cube::{Cube, NodeId};
    use crate::node::NodeConfig;

    const COUNTER: TopicId = TopicId(1);
    const SET: TopicId = TopicId(2);
    const MAP: TopicId = TopicId(3);

    /// Four replicas of three topics; messages are delivered at once, in order.
    fn replicas() -> Vec<Replica> {
        let cube = Cube::new(4).unwrap();
        let all: BTreeSet<NodeId> = (0..4).map(NodeId).collect();
        let subs = [COUNTER, SET, MAP].map(|t| (t, all.clone())).into();
        (0..4)
            .map(|i| {
                let kernel = Kernel::new(NodeId(i), 16);
                let node = Node::new(
                    cube,
                    NodeId(i),
                    NodeConfig::default(),
                    &subs,
                    kernel,
                    false,
                    0,
                )
                .unwrap();
                Replica::new(node)
            })
            .collect()
    }

    fn settle(rs: &mut [Replica], now_ms: u64) {
        let mut queue = VecDeque::new();
        loop {
            for (i, r) in rs.iter_mut().enumerate() {
                while let Some(action) = r.poll_action() {
                    if let Action::Send { to, message } = action {
                        queue.push_back((NodeId(i as u32), to, message));
                    }
                }
            }
            let Some((from, to, message)) = queue.pop_front() else {
                break;
            };
            rs[to.0 as usize].handle(now_ms, Input::Message { from, message });
        }
    }

    #[test]
    fn typed_handles_publish_and_every_replica_converges_with_callbacks() {
        let mut rs = replicas();
        settle(&mut rs, 0);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        rs[3].on_change(COUNTER, move |_, v| log.lock().unwrap().push(v.to_string()));
        rs[0].counter(COUNTER).unwrap().add(1, 5).unwrap();
        rs[1].counter(COUNTER).unwrap().add(1, -2).unwrap();
        rs[2].set(SET).unwrap().insert(1, Bytes::from("a")).unwrap();
        rs[0]
            .map(MAP)
            .unwrap()
            .add(1, Bytes::from("hits"), 3)
            .unwrap();
        settle(&mut rs, 1);
        rs[3].set(SET).unwrap().remove(2, Bytes::from("a")).unwrap();
        rs[1].set(SET).unwrap().insert(2, Bytes::from("b")).unwrap();
        settle(&mut rs, 2);
        for r in &mut rs {
            assert_eq!(r.counter(COUNTER).unwrap().value(), 3);
            assert_eq!(r.set(SET).unwrap().elements(), vec![Bytes::from("b")]);
            assert!(r.map(MAP).unwrap().get(b"hits").is_some());
        }
        assert_eq!(
            seen.lock().unwrap().len(),
            2,
            "one callback per delivered add"
        );
        assert!(
            rs[0].register(COUNTER).is_err(),
            "a counter topic is no register"
        );
        assert!(
            rs[0]
                .map(MAP)
                .unwrap()
                .insert(3, Bytes::from("hits"), Bytes::from("x"))
                .is_err()
        );
    }

    #[test]
    fn a_register_keeps_the_last_assignment_everywhere() {
        let cube = Cube::new(2).unwrap();
        let all: BTreeSet<NodeId> = (0..2).map(NodeId).collect();
        let subs = [(TopicId(9), all)].into();
        let mut rs: Vec<Replica> = (0..2)
            .map(|i| {
                let kernel = Kernel::new(NodeId(i), 16).with_kind(TopicId(9), Kind::Register);
                Replica::new(
                    Node::new(
                        cube,
                        NodeId(i),
                        NodeConfig::default(),
                        &subs,
                        kernel,
                        false,
                        0,
                    )
                    .unwrap(),
                )
            })
            .collect();
        rs[0]
            .register(TopicId(9))
            .unwrap()
            .set(1, Bytes::from("first"))
            .unwrap();
        settle(&mut rs, 1);
        rs[1]
            .register(TopicId(9))
            .unwrap()
            .set(2, Bytes::from("second"))
            .unwrap();
        settle(&mut rs, 2);
        for r in &mut rs {
            assert_eq!(
                r.register(TopicId(9)).unwrap().get(),
                Some(Bytes::from("second"))
            );
        }
    }
}
