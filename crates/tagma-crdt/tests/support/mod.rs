//! A simulated causal broadcast for the integration tests: publishing replicas build operations
//! from their own state, every replica receives everyone's operations in an order the test
//! picks among those causal order allows, and late joiners start from a decoded snapshot. A
//! reference evaluator computes each CRDT's intended value straight from the happened-before
//! relation of the published operations.

#![allow(dead_code, reason = "each test binary uses a part of the support")]

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_crdt::{
    CounterOp, Crdt, Dot, Kind, Map, MapError, MapOp, NestedOp, Op, RegisterOp, SetOp, Stamp,
    Value, decode_state, encode_state,
};

/// One published operation with the publisher's vector clock when it published it.
pub struct Message {
    pub publisher: usize,
    pub dot: Dot,
    pub op: Op,
    pub deps: Vec<u64>,
}

impl Message {
    /// Whether `self` happened before `later`.
    fn before(&self, later: &Message) -> bool {
        later.deps[self.publisher] >= self.dot.counter
    }
}

pub struct Replica {
    pub crdt: Crdt,
    /// Per publisher, how many of its operations this replica delivered.
    pub clock: Vec<u64>,
}

pub struct Network {
    kind: Kind,
    publishers: usize,
    /// Whether counter adds may be `i64::MAX` / `i64::MIN`, which saturate.
    extremes: bool,
    pub replicas: Vec<Replica>,
    pub log: Vec<Message>,
    /// How many times a map update builder refused an update of another kind.
    pub refused: usize,
}

/// The node id of publisher `index`: sparse on purpose.
pub fn node_of(index: usize) -> u32 {
    100 + 7 * index as u32
}

const KEYS: [&[u8]; 3] = [b"a", b"b", b"c"];
const ELEMENTS: [&[u8]; 4] = [b"w", b"x", b"y", b"z"];

fn amount(choice: u64, extremes: bool) -> i64 {
    match choice % 16 {
        14 if extremes => i64::MAX,
        15 if extremes => i64::MIN,
        _ => (choice >> 4) as i64 % 21 - 10,
    }
}

fn pick(choices: &[&'static [u8]], choice: u64) -> Bytes {
    Bytes::from_static(choices[choice as usize % choices.len()])
}

fn nested(
    map: &Map,
    key: Bytes,
    kind: Kind,
    node: u32,
    choice: u64,
    extremes: bool,
) -> Result<MapOp, MapError> {
    match kind {
        Kind::Register => map.assign(key, Bytes::from(format!("v{}", choice % 97)), node),
        Kind::Counter => map.add(key, amount(choice, extremes)),
        _ if choice.is_multiple_of(3) => map.remove_element(key, pick(&ELEMENTS, choice >> 2)),
        _ => map.insert(key, pick(&ELEMENTS, choice >> 2)),
    }
}

impl Network {
    pub fn new(kind: Kind, publishers: usize, extremes: bool) -> Self {
        let replicas = (0..publishers)
            .map(|_| Replica {
                crdt: Crdt::new(kind),
                clock: vec![0; publishers],
            })
            .collect();
        Self {
            kind,
            publishers,
            extremes,
            replicas,
            log: Vec::new(),
            refused: 0,
        }
    }

    /// The operation publisher `index` builds from its state for `choice`, if any.
    fn make_op(&mut self, index: usize, choice: u64) -> Option<Op> {
        let node = node_of(index);
        let extremes = self.extremes;
        match &self.replicas[index].crdt {
            Crdt::Register(register) => Some(
                register
                    .assign(Bytes::from(format!("v{}", choice % 97)), node)
                    .into(),
            ),
            Crdt::Counter(counter) => Some(counter.add(amount(choice, extremes)).into()),
            Crdt::Set(set) => {
                let element = pick(&ELEMENTS, choice >> 1);
                Some(
                    if choice.is_multiple_of(2) {
                        set.add(element)
                    } else {
                        set.remove(element)
                    }
                    .into(),
                )
            }
            Crdt::Map(map) => {
                let key = pick(&KEYS, choice);
                let action = (choice >> 2) % 8;
                if action == 0 {
                    return Some(map.remove(key).into());
                }
                let kinds = [Kind::Register, Kind::Counter, Kind::Set];
                let random = kinds[(choice >> 5) as usize % 3];
                // Mostly the kind the key shows; sometimes another, which the builder refuses.
                let kind = match map.kind(&key) {
                    Some(shown) if action != 1 => shown,
                    _ => random,
                };
                let built = nested(map, key.clone(), kind, node, choice >> 7, extremes);
                match built {
                    Ok(op) => Some(op.into()),
                    Err(MapError::KindMismatch { key: shown, op }) => {
                        assert_eq!(Some(shown), map.kind(&key));
                        assert_eq!(op, kind);
                        assert_ne!(shown, op);
                        self.refused += 1;
                        None
                    }
                }
            }
        }
    }

    /// Publisher `index % publishers` builds an operation, applies it and broadcasts it.
    pub fn publish(&mut self, index: usize, choice: u64) {
        let index = index % self.publishers;
        let Some(op) = self.make_op(index, choice) else {
            return;
        };
        let replica = &mut self.replicas[index];
        let deps = replica.clock.clone();
        let dot = Dot::new(node_of(index), deps[index] + 1);
        replica.crdt.apply(dot, &op).unwrap();
        replica.clock[index] += 1;
        self.log.push(Message {
            publisher: index,
            dot,
            op,
            deps,
        });
    }

    /// The log positions replica `index` may deliver next under causal order.
    pub fn deliverable(&self, index: usize) -> Vec<usize> {
        let clock = &self.replicas[index].clock;
        self.log
            .iter()
            .enumerate()
            .filter(|(_, message)| {
                clock[message.publisher] + 1 == message.dot.counter
                    && (0..self.publishers)
                        .all(|q| q == message.publisher || clock[q] >= message.deps[q])
            })
            .map(|(position, _)| position)
            .collect()
    }

    /// Replica `index % replicas` delivers one of its deliverable operations, if any.
    pub fn deliver(&mut self, index: usize, choice: usize) -> bool {
        let index = index % self.replicas.len();
        let ready = self.deliverable(index);
        if ready.is_empty() {
            return false;
        }
        let message = &self.log[ready[choice % ready.len()]];
        let replica = &mut self.replicas[index];
        replica.crdt.apply(message.dot, &message.op).unwrap();
        replica.clock[message.publisher] += 1;
        true
    }

    /// A new, receive-only replica installs a snapshot of replica `index % replicas`.
    pub fn join(&mut self, index: usize) {
        let source = &self.replicas[index % self.replicas.len()];
        let snapshot = encode_state(&source.crdt);
        let crdt = decode_state(&snapshot).unwrap();
        assert_eq!(crdt, source.crdt);
        assert_eq!(crdt.digest(), source.crdt.digest());
        let clock = source.clock.clone();
        self.replicas.push(Replica { crdt, clock });
    }

    /// Delivers everything left, picking among deliverable operations with `choices`.
    pub fn drain(&mut self, choices: &[u64]) {
        let mut turn = 0usize;
        loop {
            let mut progressed = false;
            for index in 0..self.replicas.len() {
                let choice = choices
                    .get(turn % choices.len().max(1))
                    .copied()
                    .unwrap_or(0);
                turn += 1;
                while self.deliver(index, choice as usize) {
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
        }
        let published: Vec<u64> = (0..self.publishers)
            .map(|p| self.log.iter().filter(|m| m.publisher == p).count() as u64)
            .collect();
        for replica in &self.replicas {
            assert_eq!(replica.clock, published, "every operation is delivered");
        }
    }

    /// Runs `steps` (action, replica, choice), then delivers everything left.
    pub fn run(kind: Kind, publishers: usize, extremes: bool, steps: &[(u8, usize, u64)]) -> Self {
        let mut network = Network::play(kind, publishers, extremes, steps);
        let choices: Vec<u64> = steps.iter().map(|step| step.2).collect();
        network.drain(&choices);
        network
    }

    /// Runs `steps`: actions 0-3 publish, 4-8 deliver, 9 adds a late joiner (at most two).
    pub fn play(kind: Kind, publishers: usize, extremes: bool, steps: &[(u8, usize, u64)]) -> Self {
        let mut network = Network::new(kind, publishers, extremes);
        for &(action, index, choice) in steps {
            match action % 10 {
                0..=3 => network.publish(index, choice),
                4..=8 => {
                    network.deliver(index, choice as usize);
                }
                _ if network.replicas.len() < publishers + 2 => network.join(index),
                _ => {}
            }
        }
        network
    }

    /// The value the operations in the log should give, computed from happened-before alone.
    pub fn expected(&self) -> Value {
        let removed = |add: &Message, removals: &[&Message]| removals.iter().any(|r| add.before(r));
        match self.kind {
            Kind::Register => Value::Register(register_winner(self.log.iter())),
            Kind::Counter => Value::Counter(
                self.log
                    .iter()
                    .map(|m| match &m.op {
                        Op::Counter(CounterOp::Add(amount)) => *amount,
                        _ => 0,
                    })
                    .sum(),
            ),
            Kind::Set => {
                let mut elements: Vec<Bytes> = Vec::new();
                for element in ELEMENTS {
                    let ops: Vec<(&Message, &SetOp)> = self
                        .log
                        .iter()
                        .filter_map(|m| match &m.op {
                            Op::Set(op) if op.element() == element => Some((m, op)),
                            _ => None,
                        })
                        .collect();
                    let removals: Vec<&Message> = ops
                        .iter()
                        .filter(|(_, op)| matches!(op, SetOp::Remove { .. }))
                        .map(|(m, _)| *m)
                        .collect();
                    if ops
                        .iter()
                        .any(|(m, op)| matches!(op, SetOp::Add { .. }) && !removed(m, &removals))
                    {
                        elements.push(Bytes::from_static(element));
                    }
                }
                Value::Set(elements)
            }
            Kind::Map => {
                let mut entries = BTreeMap::new();
                for key in KEYS {
                    let ops: Vec<(&Message, &MapOp)> = self
                        .log
                        .iter()
                        .filter_map(|m| match &m.op {
                            Op::Map(op) if op.key() == key => Some((m, op)),
                            _ => None,
                        })
                        .collect();
                    let removals: Vec<&Message> = ops
                        .iter()
                        .filter(|(_, op)| matches!(op, MapOp::Remove { .. }))
                        .map(|(m, _)| *m)
                        .collect();
                    let updates = |kind: Kind| {
                        ops.iter().filter_map(move |(m, op)| match op {
                            MapOp::Update { op, .. } if op.kind() == kind => Some((*m, op)),
                            _ => None,
                        })
                    };
                    // Register: the highest-stamped assignment, unless a removal saw it.
                    let winner = updates(Kind::Register).max_by_key(|(m, op)| match op {
                        NestedOp::Register(RegisterOp::Assign { stamp, .. }) => (*stamp, m.dot),
                        _ => (
                            Stamp {
                                lamport: 0,
                                node: 0,
                            },
                            m.dot,
                        ),
                    });
                    let register = winner
                        .filter(|(m, _)| !removed(m, &removals))
                        .and_then(|(m, _)| register_winner(std::iter::once(m)));
                    // Counter: the adds no removal saw.
                    let live_adds: Vec<i64> = updates(Kind::Counter)
                        .filter(|(m, _)| !removed(m, &removals))
                        .map(|(_, op)| match op {
                            NestedOp::Counter(CounterOp::Add(amount)) => *amount,
                            _ => 0,
                        })
                        .collect();
                    // Set: elements with an add that neither a key removal nor an element
                    // removal saw.
                    let mut elements = Vec::new();
                    for element in ELEMENTS {
                        let set_ops: Vec<(&Message, &SetOp)> = updates(Kind::Set)
                            .filter_map(|(m, op)| match op {
                                NestedOp::Set(op) if op.element() == element => Some((m, op)),
                                _ => None,
                            })
                            .collect();
                        let mut element_removals = removals.clone();
                        element_removals.extend(
                            set_ops
                                .iter()
                                .filter(|(_, op)| matches!(op, SetOp::Remove { .. }))
                                .map(|(m, _)| *m),
                        );
                        if set_ops.iter().any(|(m, op)| {
                            matches!(op, SetOp::Add { .. }) && !removed(m, &element_removals)
                        }) {
                            elements.push(Bytes::from_static(element));
                        }
                    }
                    let shown = if register.is_some() {
                        Some(Value::Register(register))
                    } else if !live_adds.is_empty() {
                        Some(Value::Counter(live_adds.iter().sum()))
                    } else if !elements.is_empty() {
                        Some(Value::Set(elements))
                    } else {
                        None
                    };
                    if let Some(value) = shown {
                        entries.insert(Bytes::from_static(key), value);
                    }
                }
                Value::Map(entries)
            }
        }
    }
}

/// The value of the highest-stamped register assignment among `messages`.
fn register_winner<'a>(messages: impl Iterator<Item = &'a Message>) -> Option<Bytes> {
    messages
        .filter_map(|m| match &m.op {
            Op::Register(RegisterOp::Assign { stamp, value })
            | Op::Map(MapOp::Update {
                op: NestedOp::Register(RegisterOp::Assign { stamp, value }),
                ..
            }) => Some(((*stamp, m.dot), value.clone())),
            _ => None,
        })
        .max_by_key(|(order, _)| *order)
        .map(|(_, value)| value)
}
