//! The key-value workload of the simulated clients: puts, gets, increments, compare-and-sets,
//! deletes and scans over keys shared by a group of clients, with the model operation each
//! one is for the linearizability check, and the mapping of a voted reply to the model's
//! result.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_kv::{KvOp, KvReply};

use crate::linearizability::{Op, Ret, Value};
use crate::rng::Rng;

/// What one key-value client works on and remembers.
#[derive(Debug)]
pub struct KvWorkload {
    /// The client's index (its values are unique to it).
    index: usize,
    pub keys: Vec<Bytes>,
    pub scan_prefix: Bytes,
    /// Values this client last saw per key (for plausible CAS expectations).
    pub last_seen: BTreeMap<Bytes, Value>,
    values_made: u64,
}

impl KvWorkload {
    pub fn new(index: usize, keys: Vec<Bytes>, scan_prefix: Bytes) -> Self {
        KvWorkload {
            index,
            keys,
            scan_prefix,
            last_seen: BTreeMap::new(),
            values_made: 0,
        }
    }

    /// A value no other client writes (8 bytes, so `incr` applies to it).
    fn fresh_value(&mut self) -> i64 {
        self.values_made += 1;
        (((self.index as i64) + 1) << 32) | self.values_made as i64
    }

    /// Draws the next operation: (op, key for the history, model op, whether to try it
    /// unordered).
    pub fn next_op(
        &mut self,
        rng: &mut Rng,
        unordered_p: f64,
    ) -> (KvOp, Option<(Bytes, Op)>, bool) {
        let key = self.keys[rng.index(self.keys.len())].clone();
        let roll = rng.below(100);
        let (op, model) = match roll {
            0..=24 => {
                let v = self.fresh_value();
                (
                    KvOp::Put {
                        key: key.clone(),
                        value: enc(v),
                    },
                    Some(Op::Put(v)),
                )
            }
            25..=49 => (KvOp::Get { key: key.clone() }, Some(Op::Get)),
            50..=64 => {
                let delta = rng.range(1, 5) as i64;
                (
                    KvOp::Incr {
                        key: key.clone(),
                        delta,
                    },
                    Some(Op::Incr(delta)),
                )
            }
            65..=84 => {
                let expected = if rng.chance(0.7) {
                    self.last_seen.get(&key).copied().unwrap_or(None)
                } else {
                    None
                };
                let new = self.fresh_value();
                (
                    KvOp::Cas {
                        key: key.clone(),
                        expected: expected.map(enc),
                        new: enc(new),
                    },
                    Some(Op::Cas { expected, new }),
                )
            }
            85..=94 => (KvOp::Delete { key: key.clone() }, Some(Op::Delete)),
            _ => (
                KvOp::Scan {
                    prefix: self.scan_prefix.clone(),
                    limit: 16,
                },
                None,
            ),
        };
        let unordered = op.is_read_only() && rng.chance(unordered_p);
        (op, model.map(|m| (key, m)), unordered)
    }

    /// What an equivocating client sends some replicas instead of its request: a put of a
    /// random value to its own key.
    pub fn equivocation(&self, rng: &mut Rng) -> KvOp {
        let key = self.keys[0].clone();
        let v = rng.next_u64() as i64;
        KvOp::Put { key, value: enc(v) }
    }
}

/// A reply a Byzantine replica makes up: a read of a random value.
pub fn made_up_reply(rng: &mut Rng) -> Bytes {
    let lie = rng.next_u64() as i64;
    KvReply::Get {
        value: Some(Bytes::copy_from_slice(&lie.to_le_bytes())),
    }
    .encode()
}

/// A write nobody ordered (what a lying disk or state source adds to a true state).
pub fn lie_request() -> Bytes {
    KvOp::Put {
        key: Bytes::from_static(b"lie"),
        value: Bytes::from_static(b"never ordered"),
    }
    .encode()
}

pub fn enc(v: i64) -> Bytes {
    Bytes::copy_from_slice(&v.to_le_bytes())
}

fn dec(b: &Option<Bytes>) -> Result<Value, String> {
    match b {
        None => Ok(None),
        Some(bytes) => <[u8; 8]>::try_from(&bytes[..])
            .map(|a| Some(i64::from_le_bytes(a)))
            .map_err(|_| format!("value of {} bytes, clients only write 8", bytes.len())),
    }
}

/// Maps the voted reply to the model's result; an error reply or a reply of the wrong kind is
/// a violation (correct replicas never send it, and a quorum of them agreed on it).
pub fn to_ret(op: &Op, reply: &KvReply) -> Result<Ret, String> {
    let ret = match (op, reply) {
        (Op::Put(_), KvReply::Put { previous }) => Ret::Put {
            previous: dec(previous)?,
        },
        (Op::Get, KvReply::Get { value }) => Ret::Get { value: dec(value)? },
        (Op::Delete, KvReply::Delete { previous }) => Ret::Delete {
            previous: dec(previous)?,
        },
        (Op::Cas { .. }, KvReply::Cas { applied, current }) => Ret::Cas {
            applied: *applied,
            current: dec(current)?,
        },
        (Op::Incr(_), KvReply::Incr { value }) => Ret::Incr { value: *value },
        _ => return Err(format!("reply {reply:?} does not answer {op:?}")),
    };
    Ok(ret)
}

/// The value a completed operation leaves the client believing the key holds.
pub fn seen_after(op: &Op, ret: &Ret) -> Value {
    match (op, ret) {
        (Op::Put(v), _) => Some(*v),
        (_, Ret::Get { value }) => *value,
        (_, Ret::Delete { .. }) => None,
        (_, Ret::Cas { current, .. }) => *current,
        (_, Ret::Incr { value }) => Some(*value),
        _ => None,
    }
}
