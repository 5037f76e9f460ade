//! The replication kernel between the broadcast layer and the CRDT store: a [`Store`] that
//! keeps one CRDT per topic (`tagma-crdt`), decodes each delivered operation and applies it
//! with its dot (the message id), and serves and installs snapshots (the CRDT's encoded
//! state). A topic's CRDT kind follows its number — register, counter, set, map, in turn —
//! and [`Kernel::operation`] builds an operation from this replica (a register's next stamp,
//! a set's observed tags), as an application would; workloads and tests use it.

use std::collections::BTreeMap;

use crate::causal::MsgId;
use crate::cube::NodeId;
use crate::message::TopicId;
use crate::store::Store;
use bytes::Bytes;
use tagma_crdt::{Crdt, Dot, Kind, Op, decode_and_apply, decode_state, encode_op, encode_state};

/// The CRDT kind of a topic no kind was declared for.
pub fn kind_of(topic: TopicId) -> Kind {
    [Kind::Register, Kind::Counter, Kind::Set, Kind::Map][topic.0 as usize % 4]
}

/// One node's replicas, one CRDT per topic.
#[derive(Clone, Debug)]
pub struct Kernel {
    me: NodeId,
    replicas: BTreeMap<TopicId, Crdt>,
    /// Kinds declared per topic (others follow [`kind_of`]).
    kinds: BTreeMap<TopicId, Kind>,
    /// Bytes of a register's value.
    value_bytes: usize,
    /// Operations that did not decode or apply (none in a correct run).
    pub refused: u64,
}

impl Kernel {
    pub fn new(me: NodeId, value_bytes: usize) -> Kernel {
        Kernel {
            me,
            replicas: BTreeMap::new(),
            kinds: BTreeMap::new(),
            value_bytes,
            refused: 0,
        }
    }

    /// Declares `topic`'s CRDT kind (every replica of the topic must declare the same).
    pub fn with_kind(mut self, topic: TopicId, kind: Kind) -> Kernel {
        self.kinds.insert(topic, kind);
        self
    }

    /// The CRDT kind of `topic`.
    pub fn kind(&self, topic: TopicId) -> Kind {
        self.kinds
            .get(&topic)
            .copied()
            .unwrap_or_else(|| kind_of(topic))
    }

    /// The node this kernel belongs to.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// `topic`'s CRDT as this replica holds it (the initial one before any operation).
    pub fn crdt(&self, topic: TopicId) -> Crdt {
        (self.replicas.get(&topic).cloned()).unwrap_or_else(|| Crdt::new(self.kind(topic)))
    }

    fn replica(&mut self, topic: TopicId) -> &mut Crdt {
        let kinds = &self.kinds;
        self.replicas.entry(topic).or_insert_with(|| {
            Crdt::new(kinds.get(&topic).copied().unwrap_or_else(|| kind_of(topic)))
        })
    }

    /// An operation on `topic` built from this replica, `draw` choosing what it does.
    pub fn operation(&self, topic: TopicId, draw: u64) -> Bytes {
        let empty;
        let crdt = match self.replicas.get(&topic) {
            Some(c) => c,
            None => {
                empty = Crdt::new(self.kind(topic));
                &empty
            }
        };
        let element = Bytes::from(format!("e{}", draw % 64));
        let op: Op = match crdt {
            Crdt::Register(r) => {
                let mut value = vec![(draw & 0xff) as u8; self.value_bytes];
                value[..8.min(self.value_bytes)]
                    .copy_from_slice(&draw.to_le_bytes()[..8.min(self.value_bytes)]);
                r.assign(Bytes::from(value), self.me.0).into()
            }
            Crdt::Counter(c) => c.add((draw % 21) as i64 - 10).into(),
            Crdt::Set(s) => {
                if draw.is_multiple_of(3) {
                    s.remove(element).into()
                } else {
                    s.add(element).into()
                }
            }
            Crdt::Map(m) => {
                let key = Bytes::from(format!("k{}", draw % 16));
                let built = match draw % 5 {
                    0 => Ok(m.remove(key)),
                    1 | 2 => m.add(key, (draw % 7) as i64 + 1),
                    _ => m.insert(key, element),
                };
                // A key holding another kind takes a removal instead.
                built
                    .unwrap_or_else(|_| m.remove(Bytes::from(format!("k{}", draw % 16))))
                    .into()
            }
        };
        Bytes::from(encode_op(&op))
    }

    pub fn digest(&self, topic: TopicId) -> [u8; 32] {
        match self.replicas.get(&topic) {
            Some(c) => c.digest(),
            None => Crdt::new(self.kind(topic)).digest(),
        }
    }
}

impl Store for Kernel {
    fn apply(&mut self, topic: TopicId, id: MsgId, payload: &Bytes) {
        let dot = Dot::new(id.source.0, id.counter);
        if decode_and_apply(self.replica(topic), dot, payload) != Ok(Ok(())) {
            self.refused += 1;
        }
    }

    fn snapshot(&self, topic: TopicId) -> Bytes {
        match self.replicas.get(&topic) {
            Some(c) => Bytes::from(encode_state(c)),
            None => Bytes::from(encode_state(&Crdt::new(self.kind(topic)))),
        }
    }

    fn install(&mut self, topic: TopicId, state: &Bytes) -> Result<(), String> {
        let crdt = decode_state(state).map_err(|e| e.to_string())?;
        if crdt.kind() != self.kind(topic) {
            return Err(format!(
                "a {} snapshot for a {} topic",
                crdt.kind().name(),
                self.kind(topic).name()
            ));
        }
        self.replicas.insert(topic, crdt);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_apply_and_snapshots_carry_the_state() {
        for t in 0..4 {
            let topic = TopicId(t);
            let mut a = Kernel::new(NodeId(1), 32);
            for k in 1..=20u64 {
                let op = a.operation(topic, k * 7919);
                a.apply(
                    topic,
                    MsgId {
                        source: NodeId(1),
                        counter: k,
                    },
                    &op,
                );
            }
            assert_eq!(a.refused, 0, "topic {t}");
            let mut b = Kernel::new(NodeId(2), 32);
            b.install(topic, &a.snapshot(topic)).unwrap();
            assert_eq!(a.digest(topic), b.digest(topic));
            assert!(b.install(TopicId(t + 1), &a.snapshot(topic)).is_err());
        }
    }
}
