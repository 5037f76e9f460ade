//! The key-value store in execute-verify mode: the same operations and replies as
//! [`KvService`](crate::KvService), on an object tree, with a key-level mixer.
//!
//! Each key lives in the object named by the first eight bytes of its BLAKE3 digest. The
//! object is a bucket: every (key, value) pair whose key has that name, sorted by key (one
//! pair, but for a collision). The mixer names a request's bucket: `put`, `delete`, `cas`
//! and `incr` write it, `get` reads it. A `scan` reads every object, so it writes a shared
//! key that every other writer reads: it runs alone in its parallel batch, and writers run
//! side by side. Requests that do not decode are answered with an error and touch nothing.

use bytes::{BufMut, Bytes, BytesMut};
use tagma_eve::{Access, EveService, Mixer, ObjectId, RequestContext};

use crate::{KvOp, KvReply, SCAN_BYTES_MAX, SCAN_LIMIT_MAX};

/// The object holding `key`'s bucket.
pub fn bucket_of(key: &[u8]) -> ObjectId {
    let digest = blake3::hash(key);
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest.as_bytes()[..8]);
    ObjectId(u64::from_le_bytes(id))
}

type Pairs = Vec<(Bytes, Bytes)>;

/// A bucket's pairs; a bucket that does not parse (never written by this service) is empty.
fn decode_bucket(bucket: &Bytes) -> Pairs {
    let mut pairs = Vec::new();
    let mut at = 0usize;
    let field = |at: &mut usize| -> Option<Bytes> {
        let len = u32::from_le_bytes(bucket.get(*at..*at + 4)?.try_into().ok()?) as usize;
        let start = *at + 4;
        let field = bucket.get(start..start.checked_add(len)?)?;
        *at = start + len;
        Some(bucket.slice_ref(field))
    };
    while at < bucket.len() {
        let (Some(key), Some(value)) = (field(&mut at), field(&mut at)) else {
            return Vec::new();
        };
        pairs.push((key, value));
    }
    pairs
}

fn encode_bucket(pairs: &Pairs) -> Bytes {
    let mut out = BytesMut::new();
    for (key, value) in pairs {
        out.put_u32_le(key.len() as u32);
        out.put_slice(key);
        out.put_u32_le(value.len() as u32);
        out.put_slice(value);
    }
    out.freeze()
}

/// The key-value store on an object tree.
#[derive(Clone, Copy, Debug, Default)]
pub struct EveKv;

impl EveKv {
    fn load(ctx: &RequestContext<'_>, key: &[u8]) -> Pairs {
        ctx.get(bucket_of(key))
            .map_or_else(Vec::new, |b| decode_bucket(&b))
    }

    fn value(pairs: &Pairs, key: &[u8]) -> Option<Bytes> {
        pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    /// Sets (`Some`) or removes (`None`) `key`; returns its value before.
    fn store(ctx: &mut RequestContext<'_>, key: &Bytes, value: Option<Bytes>) -> Option<Bytes> {
        let id = bucket_of(key);
        let mut pairs = Self::load(ctx, key);
        let at = pairs.binary_search_by(|(k, _)| k[..].cmp(&key[..]));
        let before = match (at, value) {
            (Ok(i), Some(value)) => Some(std::mem::replace(&mut pairs[i].1, value)),
            (Ok(i), None) => Some(pairs.remove(i).1),
            (Err(i), Some(value)) => {
                pairs.insert(i, (key.clone(), value));
                None
            }
            (Err(_), None) => return None,
        };
        if pairs.is_empty() {
            ctx.remove(id);
        } else {
            ctx.put(id, encode_bucket(&pairs));
        }
        before
    }

    fn apply(ctx: &mut RequestContext<'_>, op: KvOp) -> KvReply {
        match op {
            KvOp::Put { key, value } => KvReply::Put {
                previous: Self::store(ctx, &key, Some(value)),
            },
            KvOp::Get { key } => KvReply::Get {
                value: Self::value(&Self::load(ctx, &key), &key),
            },
            KvOp::Delete { key } => KvReply::Delete {
                previous: Self::store(ctx, &key, None),
            },
            KvOp::Cas { key, expected, new } => {
                let current = Self::value(&Self::load(ctx, &key), &key);
                let (apply, reply) = crate::cas(current, expected, new.clone());
                if apply {
                    Self::store(ctx, &key, Some(new));
                }
                reply
            }
            KvOp::Incr { key, delta } => {
                let current = Self::value(&Self::load(ctx, &key), &key);
                match crate::incremented(current.as_ref(), delta) {
                    Ok(value) => {
                        let bytes = Bytes::copy_from_slice(&value.to_le_bytes());
                        Self::store(ctx, &key, Some(bytes));
                        KvReply::Incr { value }
                    }
                    Err(reply) => reply,
                }
            }
            KvOp::Redis(_) => crate::error(
                "Redis commands run on the ordered key-value service (tagma replica --service kv), not in execute-verify mode",
            ),
            KvOp::Scan { prefix, limit } => {
                let mut pairs: Pairs = (ctx.objects().into_iter())
                    .flat_map(|(_, bucket)| decode_bucket(&bucket))
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .collect();
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                let mut bytes = 0usize;
                let pairs = (pairs.into_iter())
                    .take(limit.min(SCAN_LIMIT_MAX) as usize)
                    .take_while(|(key, value)| {
                        bytes += key.len() + value.len();
                        bytes <= SCAN_BYTES_MAX
                    })
                    .collect();
                KvReply::Scan { pairs }
            }
        }
    }
}

impl EveService for EveKv {
    type Request = Bytes;

    fn execute(&self, request: &Bytes, ctx: &mut RequestContext<'_>) -> Bytes {
        match KvOp::decode(request) {
            Ok(op) => Self::apply(ctx, op).encode(),
            Err(e) => crate::error(&format!("undecodable request: {e}")).encode(),
        }
    }
}

/// What a scan writes and every other writer reads.
const EVERYTHING: u64 = u64::MAX;

/// The key-level mixer of [`EveKv`].
#[derive(Clone, Copy, Debug, Default)]
pub struct EveKvMixer;

impl Mixer<Bytes> for EveKvMixer {
    type Key = u64;

    fn access(&self, request: &Bytes) -> Access<u64> {
        let Ok(op) = KvOp::decode(request) else {
            return Access::default();
        };
        let write = |key: &Bytes| Access {
            reads: vec![EVERYTHING],
            writes: vec![bucket_of(key).0],
        };
        match &op {
            KvOp::Put { key, .. }
            | KvOp::Delete { key }
            | KvOp::Cas { key, .. }
            | KvOp::Incr { key, .. } => write(key),
            KvOp::Get { key } => Access {
                reads: vec![bucket_of(key).0],
                writes: Vec::new(),
            },
            KvOp::Scan { .. } | KvOp::Redis(_) => Access {
                reads: Vec::new(),
                writes: vec![EVERYTHING],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use tagma_eve::{Batch, Execution, Executor, NonDeterminism, ObjectTree, mix};

    use super::*;
    use crate::KvService;

    fn ops() -> Vec<KvOp> {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let mut ops = Vec::new();
        for i in 0..40 {
            let key = b(&format!("k{}", i % 13));
            ops.push(match i % 7 {
                0 => KvOp::Put {
                    key,
                    value: b(&format!("v{i}")),
                },
                1 => KvOp::Get { key },
                2 => KvOp::Incr {
                    key: b(&format!("n{}", i % 3)),
                    delta: i,
                },
                3 => KvOp::Cas {
                    key,
                    expected: None,
                    new: b("fresh"),
                },
                4 => KvOp::Delete { key },
                5 => KvOp::Scan {
                    prefix: b("k1"),
                    limit: 5,
                },
                _ => KvOp::Put {
                    key: b(&format!("k{}", i % 5)),
                    value: b("x"),
                },
            });
        }
        ops
    }

    #[test]
    fn in_eve_mode_the_store_replies_as_the_ordinary_one_in_the_mixed_order() {
        let batch = Batch {
            seq: 1,
            nd: NonDeterminism::default(),
            requests: ops().iter().map(KvOp::encode).collect::<Vec<_>>(),
        };
        let mixed = mix(&EveKvMixer, &batch.requests);
        assert!(mixed.parallel_batches.len() < batch.requests.len());
        // The ordinary store, applying the ops in the order parallel execution stands for.
        let mut plain = KvService::new();
        let mut expected = vec![Bytes::new(); batch.requests.len()];
        for position in mixed.order() {
            expected[position] = plain.apply(ops()[position].clone()).encode();
        }
        let mut executor = Executor::new(EveKv, EveKvMixer, 4, ObjectTree::new(), 2).unwrap();
        let executed = executor
            .execute(&batch, Execution::Parallel)
            .unwrap()
            .clone();
        assert_eq!(executed.missed_conflicts, 0);
        assert_eq!(executed.outputs, expected);
        let mut sequential = Executor::new(EveKv, EveKvMixer, 1, ObjectTree::new(), 2).unwrap();
        let in_order = sequential.execute(&batch, Execution::Sequential).unwrap();
        assert_eq!(in_order.outputs, expected);
        assert_eq!(in_order.token, executed.token);
    }

    #[test]
    fn colliding_keys_share_a_bucket_and_a_bad_request_gets_an_error() {
        let mut tree = ObjectTree::new();
        // Two keys forced into one bucket: the bucket keeps both, sorted.
        let id = bucket_of(b"a");
        tree.insert(
            id,
            encode_bucket(&vec![
                (Bytes::from_static(b"a"), Bytes::from_static(b"1")),
                (Bytes::from_static(b"zz"), Bytes::from_static(b"2")),
            ]),
        );
        let pairs = decode_bucket(tree.get(id).unwrap());
        assert_eq!(pairs.len(), 2);
        assert_eq!(
            decode_bucket(&Bytes::from_static(b"\x09\0\0\0ab")),
            Vec::new()
        );
        let batch = Batch {
            seq: 1,
            nd: NonDeterminism::default(),
            requests: vec![Bytes::from_static(b"\xff garbage")],
        };
        let mut executor = Executor::new(EveKv, EveKvMixer, 1, tree, 1).unwrap();
        let reply = executor
            .execute(&batch, Execution::Parallel)
            .unwrap()
            .outputs[0]
            .clone();
        assert!(matches!(KvReply::decode(&reply), Ok(KvReply::Error { .. })));
    }
}
