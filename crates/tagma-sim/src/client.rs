//! Simulated key-value clients: closed-loop, one request outstanding, each request sent to
//! every replica, replies voted with [`tagma_client::Voter`], retransmission on timeout,
//! unordered reads that fall back to ordered ones. Correct clients record a history per key
//! for the linearizability check; faulty clients misbehave on the first send of each request.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_client::Voter;
use tagma_kv::{KvOp, KvReply};
use tagma_wire::{ClientId, RequestSeq};

use crate::linearizability::{Op, Ret, Value};
use crate::rng::Rng;
use crate::scenario::ClientFault;

/// Resend an ordered request to every replica after this long without a reply quorum.
pub const RETRANSMIT_MS: u64 = 600;
/// Give up on an unordered read (and order it) after this long.
pub const UNORDERED_TIMEOUT_MS: u64 = 300;
/// Pause between two operations of a client.
pub const THINK_MS_MAX: u64 = 30;

/// Which attempt of the current operation is in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    Ordered(RequestSeq),
    Unordered(RequestSeq),
}

/// The operation a client is waiting for.
#[derive(Debug)]
pub struct Outstanding {
    pub op: KvOp,
    /// (key, index in that key's history): `None` for scans and faulty clients.
    pub history: Option<(Bytes, usize)>,
    pub attempt: Attempt,
    pub voter: Voter,
    /// Wire digest(s) of the current attempt's request(s) (two for an equivocating client).
    pub started_ms: u64,
}

#[derive(Debug)]
pub struct SimClient {
    pub id: ClientId,
    pub index: usize,
    pub fault: Option<ClientFault>,
    pub keys: Vec<Bytes>,
    pub scan_prefix: Bytes,
    /// Last ordered / unordered sequence number used.
    pub last_seq: u64,
    pub last_useq: u64,
    pub out: Option<Outstanding>,
    /// Timer generation: a wake-up with an older token is stale.
    pub token: u64,
    /// Values this client last saw per key (for plausible CAS expectations).
    pub last_seen: BTreeMap<Bytes, Value>,
    values_made: u64,
    /// In the liveness phase: operations still to complete (`None` before it).
    pub liveness_left: Option<u64>,
    pub completed: u64,
}

impl SimClient {
    pub fn new(
        index: usize,
        fault: Option<ClientFault>,
        keys: Vec<Bytes>,
        scan_prefix: Bytes,
    ) -> Self {
        SimClient {
            id: ClientId::new(100 + index as u32, 1),
            index,
            fault,
            keys,
            scan_prefix,
            last_seq: 0,
            last_useq: 0,
            out: None,
            token: 0,
            last_seen: BTreeMap::new(),
            values_made: 0,
            liveness_left: None,
            completed: 0,
        }
    }

    pub fn is_correct(&self) -> bool {
        self.fault.is_none()
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
