//! `tagma-kv`: a replicated key-value service: `put`, `get`, `delete`, `cas`, `incr`, and
//! `scan` by prefix with a limit, and Redis commands in bundles ([`redis`]: strings, keys with
//! expiry in the cluster's agreed time, hashes, transactions), over a deterministic store of
//! typed values ([`store`]).
//!
//! # Encoding
//!
//! Ops and replies use a compact binary encoding: the first byte is the variant tag, then the
//! fields in declaration order. Byte strings are a `u32` little-endian length followed by the
//! bytes; an `Option` is a `0`/`1` byte followed (if `1`) by the value; `i64` and `u32` are
//! little-endian; `bool` is a `0`/`1` byte; scan pairs are a `u32` count followed by the pairs.
//! Decoding never panics, rejects unknown tags and trailing bytes, and checks every length
//! against the remaining input before allocating.

use crate::codec::{Reader, Writer};

use bytes::Bytes;
use tagma_exec::{Context, FrozenSnapshot, Service, ServiceError};
use tagma_wire::Digest;

/// The most pairs a single `scan` returns, whatever limit it asks for.
pub const SCAN_LIMIT_MAX: u32 = 1000;
/// A scan stops adding pairs once its keys and values reach this many bytes, so its reply
/// always fits in a frame (the cluster's `frame_bytes_max` is at least 1 MiB + overhead).
pub const SCAN_BYTES_MAX: usize = 512 << 10;

/// A key-value command, encoded as the opaque request payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    Put {
        key: Bytes,
        value: Bytes,
    },
    Get {
        key: Bytes,
    },
    Delete {
        key: Bytes,
    },
    /// Sets `key` to `new` if its current value is `expected` (`None` = absent).
    Cas {
        key: Bytes,
        expected: Option<Bytes>,
        new: Bytes,
    },
    /// Adds `delta` to the decimal-free little-endian i64 stored at `key` (absent = 0).
    Incr {
        key: Bytes,
        delta: i64,
    },
    /// Up to `limit` pairs whose key starts with `prefix`, in key order.
    Scan {
        prefix: Bytes,
        limit: u32,
    },
    /// Redis commands ([`redis::Bundle`]), what the Redis-protocol gateway sends.
    Redis(redis::Bundle),
}

/// The reply to a [`KvOp`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvReply {
    /// `put`: the previous value.
    Put {
        previous: Option<Bytes>,
    },
    Get {
        value: Option<Bytes>,
    },
    Delete {
        previous: Option<Bytes>,
    },
    /// `cas`: whether it applied, and the current value after the operation.
    Cas {
        applied: bool,
        current: Option<Bytes>,
    },
    /// `incr`: the new value.
    Incr {
        value: i64,
    },
    Scan {
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// One RESP2-encoded reply per entry of the bundle.
    Redis {
        replies: Vec<Bytes>,
    },
    /// The request could not be decoded or was invalid (e.g. incr on a non-counter value).
    Error {
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvCodecError {
    #[error("malformed kv message: {0}")]
    Malformed(&'static str),
}

mod op_tag {
    pub const PUT: u8 = 1;
    pub const GET: u8 = 2;
    pub const DELETE: u8 = 3;
    pub const CAS: u8 = 4;
    pub const INCR: u8 = 5;
    pub const SCAN: u8 = 6;
    pub const REDIS: u8 = 7;
}

mod reply_tag {
    pub const PUT: u8 = 1;
    pub const GET: u8 = 2;
    pub const DELETE: u8 = 3;
    pub const CAS: u8 = 4;
    pub const INCR: u8 = 5;
    pub const SCAN: u8 = 6;
    pub const ERROR: u8 = 7;
    pub const REDIS: u8 = 8;
}

impl KvOp {
    pub fn encode(&self) -> Bytes {
        match self {
            KvOp::Put { key, value } => {
                let mut w = Writer::with_tag(op_tag::PUT);
                w.bytes(key);
                w.bytes(value);
                w.finish()
            }
            KvOp::Get { key } => {
                let mut w = Writer::with_tag(op_tag::GET);
                w.bytes(key);
                w.finish()
            }
            KvOp::Delete { key } => {
                let mut w = Writer::with_tag(op_tag::DELETE);
                w.bytes(key);
                w.finish()
            }
            KvOp::Cas { key, expected, new } => {
                let mut w = Writer::with_tag(op_tag::CAS);
                w.bytes(key);
                w.opt_bytes(expected);
                w.bytes(new);
                w.finish()
            }
            KvOp::Incr { key, delta } => {
                let mut w = Writer::with_tag(op_tag::INCR);
                w.bytes(key);
                w.i64(*delta);
                w.finish()
            }
            KvOp::Scan { prefix, limit } => {
                let mut w = Writer::with_tag(op_tag::SCAN);
                w.bytes(prefix);
                w.u32(*limit);
                w.finish()
            }
            KvOp::Redis(bundle) => {
                let mut w = Writer::with_tag(op_tag::REDIS);
                bundle.write(&mut w);
                w.finish()
            }
        }
    }
    pub fn decode(bytes: &Bytes) -> Result<Self, KvCodecError> {
        let mut r = Reader::new(bytes);
        let op = match r.u8("empty op")? {
            op_tag::PUT => KvOp::Put {
                key: r.bytes("put key")?,
                value: r.bytes("put value")?,
            },
            op_tag::GET => KvOp::Get {
                key: r.bytes("get key")?,
            },
            op_tag::DELETE => KvOp::Delete {
                key: r.bytes("delete key")?,
            },
            op_tag::CAS => KvOp::Cas {
                key: r.bytes("cas key")?,
                expected: r.opt_bytes("cas expected")?,
                new: r.bytes("cas new")?,
            },
            op_tag::INCR => KvOp::Incr {
                key: r.bytes("incr key")?,
                delta: r.i64("incr delta")?,
            },
            op_tag::SCAN => KvOp::Scan {
                prefix: r.bytes("scan prefix")?,
                limit: r.u32("scan limit")?,
            },
            op_tag::REDIS => KvOp::Redis(redis::Bundle::read(&mut r)?),
            _ => return Err(KvCodecError::Malformed("unknown op tag")),
        };
        r.finish()?;
        Ok(op)
    }
    /// Whether the op never changes state (may be sent unordered).
    pub fn is_read_only(&self) -> bool {
        match self {
            KvOp::Get { .. } | KvOp::Scan { .. } => true,
            KvOp::Redis(bundle) => bundle.is_read_only(),
            _ => false,
        }
    }
}

impl KvReply {
    pub fn encode(&self) -> Bytes {
        match self {
            KvReply::Put { previous } => {
                let mut w = Writer::with_tag(reply_tag::PUT);
                w.opt_bytes(previous);
                w.finish()
            }
            KvReply::Get { value } => {
                let mut w = Writer::with_tag(reply_tag::GET);
                w.opt_bytes(value);
                w.finish()
            }
            KvReply::Delete { previous } => {
                let mut w = Writer::with_tag(reply_tag::DELETE);
                w.opt_bytes(previous);
                w.finish()
            }
            KvReply::Cas { applied, current } => {
                let mut w = Writer::with_tag(reply_tag::CAS);
                w.u8(u8::from(*applied));
                w.opt_bytes(current);
                w.finish()
            }
            KvReply::Incr { value } => {
                let mut w = Writer::with_tag(reply_tag::INCR);
                w.i64(*value);
                w.finish()
            }
            KvReply::Scan { pairs } => {
                let mut w = Writer::with_tag(reply_tag::SCAN);
                let count = u32::try_from(pairs.len()).expect("more than u32::MAX scan pairs");
                w.u32(count);
                for (key, value) in pairs {
                    w.bytes(key);
                    w.bytes(value);
                }
                w.finish()
            }
            KvReply::Redis { replies } => {
                let mut w = Writer::with_tag(reply_tag::REDIS);
                w.u32(u32::try_from(replies.len()).expect("fewer than 2^32 replies"));
                for reply in replies {
                    w.bytes(reply);
                }
                w.finish()
            }
            KvReply::Error { message } => {
                let mut w = Writer::with_tag(reply_tag::ERROR);
                w.bytes(message.as_bytes());
                w.finish()
            }
        }
    }
    pub fn decode(bytes: &Bytes) -> Result<Self, KvCodecError> {
        let mut r = Reader::new(bytes);
        let reply = match r.u8("empty reply")? {
            reply_tag::PUT => KvReply::Put {
                previous: r.opt_bytes("put previous")?,
            },
            reply_tag::GET => KvReply::Get {
                value: r.opt_bytes("get value")?,
            },
            reply_tag::DELETE => KvReply::Delete {
                previous: r.opt_bytes("delete previous")?,
            },
            reply_tag::CAS => KvReply::Cas {
                applied: r.bool("cas applied")?,
                current: r.opt_bytes("cas current")?,
            },
            reply_tag::INCR => KvReply::Incr {
                value: r.i64("incr value")?,
            },
            reply_tag::SCAN => {
                let count = r.u32("scan pair count")? as usize;
                // Each pair takes at least two 4-byte length prefixes: reject impossible counts
                // before allocating.
                if count > r.remaining() / 8 {
                    return Err(KvCodecError::Malformed("scan pair count"));
                }
                let mut pairs = Vec::with_capacity(count);
                for _ in 0..count {
                    let key = r.bytes("scan key")?;
                    let value = r.bytes("scan value")?;
                    pairs.push((key, value));
                }
                KvReply::Scan { pairs }
            }
            reply_tag::REDIS => {
                let count = r.u32("redis reply count")? as usize;
                if count > r.remaining() / 4 {
                    return Err(KvCodecError::Malformed("redis reply count"));
                }
                let replies = (0..count)
                    .map(|_| r.bytes("redis reply"))
                    .collect::<Result<_, _>>()?;
                KvReply::Redis { replies }
            }
            reply_tag::ERROR => {
                let message = r.bytes("error message")?;
                let message = std::str::from_utf8(&message)
                    .map_err(|_| KvCodecError::Malformed("error message is not UTF-8"))?
                    .to_owned();
                KvReply::Error { message }
            }
            _ => return Err(KvCodecError::Malformed("unknown reply tag")),
        };
        r.finish()?;
        Ok(reply)
    }
}

/// Domain separator of [`KvService`]'s state digest.
const DIGEST_DOMAIN: &[u8] = b"tagma-kv/state-digest/v2";
/// Snapshot header: magic then format version.
const SNAPSHOT_MAGIC: &[u8; 4] = b"TKVS";
const SNAPSHOT_VERSION: u8 = 2;

/// The service. Implements `tagma_exec::Service`.
///
/// Ordered requests are [`KvOp`] encodings; replies are [`KvReply`] encodings. A request that
/// does not decode gets [`KvReply::Error`]. Unordered requests may only be `get`, `scan` and
/// bundles of read-only Redis commands.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KvService {
    store: Store,
}

/// The reply to an operation on a key that holds a hash where a string is expected.
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl KvService {
    pub fn new() -> Self {
        KvService::default()
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// The stored values, read-only (the structure-aware fuzz target takes WATCH digests
    /// from it).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The string stored at `key` (`None` if absent or not a string).
    pub fn get(&self, key: &[u8]) -> Option<&Bytes> {
        self.store.get_string(key).ok().flatten()
    }

    /// Applies `op` to the state and returns its reply.
    pub fn apply(&mut self, op: KvOp) -> KvReply {
        let store = &mut self.store;
        match op {
            KvOp::Put { key, value } => KvReply::Put {
                previous: string_of(store.insert(key, Value::String(value), Ttl::Clear)),
            },
            KvOp::Delete { key } => KvReply::Delete {
                previous: string_of(store.remove(&key)),
            },
            KvOp::Cas { key, expected, new } => {
                let Ok(current) = store.get_string(&key) else {
                    return error(WRONGTYPE);
                };
                let (apply, reply) = cas(current.cloned(), expected, new.clone());
                if apply {
                    store.insert(key, Value::String(new), Ttl::Clear);
                }
                reply
            }
            KvOp::Incr { key, delta } => {
                let Ok(current) = store.get_string(&key) else {
                    return error(WRONGTYPE);
                };
                match incremented(current, delta) {
                    Ok(value) => {
                        let bytes = Bytes::copy_from_slice(&value.to_le_bytes());
                        store.insert(key, Value::String(bytes), Ttl::Keep);
                        KvReply::Incr { value }
                    }
                    Err(reply) => reply,
                }
            }
            KvOp::Redis(bundle) => KvReply::Redis {
                replies: redis::execute(store, &bundle),
            },
            op @ (KvOp::Get { .. } | KvOp::Scan { .. }) => self.query(&op),
        }
    }

    /// Answers a read-only op (`get`, `scan`, a bundle of read-only Redis commands) without
    /// changing the state; any other op gets [`KvReply::Error`] ("write operations must be
    /// ordered").
    pub fn query(&self, op: &KvOp) -> KvReply {
        match op {
            KvOp::Get { key } => match self.store.get_string(key) {
                Ok(value) => KvReply::Get {
                    value: value.cloned(),
                },
                Err(_) => error(WRONGTYPE),
            },
            KvOp::Scan { prefix, limit } => {
                let limit = (*limit).min(SCAN_LIMIT_MAX) as usize;
                let mut bytes = 0usize;
                let pairs = (self.store.range_from(prefix))
                    .take_while(|(key, _)| key.starts_with(prefix))
                    .filter_map(|(key, value)| match value {
                        Value::String(s) => Some((key, s)),
                        Value::Hash(_) => None,
                    })
                    .take(limit)
                    .take_while(|(key, value)| {
                        bytes += key.len() + value.len();
                        bytes <= SCAN_BYTES_MAX
                    })
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect();
                KvReply::Scan { pairs }
            }
            KvOp::Redis(bundle) => KvReply::Redis {
                replies: redis::query(&self.store, bundle),
            },
            _ => error("write operations must be ordered"),
        }
    }

    /// Encodes the snapshot, handing `flush` the buffer each time it reaches `flush_at`
    /// bytes; returns what is left in it (all of it when `flush_at` is never reached).
    fn encode_snapshot(
        &self,
        flush_at: usize,
        mut flush: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<Vec<u8>> {
        let mut w = Writer(Vec::new());
        w.0.extend_from_slice(SNAPSHOT_MAGIC);
        w.u8(SNAPSHOT_VERSION);
        self.store.encode(&mut w, flush_at, &mut flush)?;
        Ok(w.0)
    }

    fn decode_snapshot(snapshot: &Bytes) -> Result<Store, KvCodecError> {
        let mut r = Reader::new(snapshot);
        if r.take(4, "snapshot magic")? != SNAPSHOT_MAGIC {
            return Err(KvCodecError::Malformed("bad snapshot magic"));
        }
        if r.u8("snapshot version")? != SNAPSHOT_VERSION {
            return Err(KvCodecError::Malformed("unsupported snapshot version"));
        }
        let store = Store::decode(&mut r)?;
        r.finish()?;
        Ok(store)
    }
}

/// The string among a removed or replaced value.
fn string_of(value: Option<Value>) -> Option<Bytes> {
    match value {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// `cas`'s decision: whether `new` replaces `current` (it equals `expected`), and the reply.
pub(crate) fn cas(current: Option<Bytes>, expected: Option<Bytes>, new: Bytes) -> (bool, KvReply) {
    if current == expected {
        (
            true,
            KvReply::Cas {
                applied: true,
                current: Some(new),
            },
        )
    } else {
        (
            false,
            KvReply::Cas {
                applied: false,
                current,
            },
        )
    }
}

/// `incr`'s arithmetic: the counter `current` holds (absent: 0) plus `delta`, or the error
/// reply (not an 8-byte counter, overflow).
pub(crate) fn incremented(current: Option<&Bytes>, delta: i64) -> Result<i64, KvReply> {
    let current = match current {
        None => 0,
        Some(value) => match <[u8; 8]>::try_from(&value[..]) {
            Ok(bytes) => i64::from_le_bytes(bytes),
            Err(_) => return Err(error("incr: the value is not an 8-byte counter")),
        },
    };
    current
        .checked_add(delta)
        .ok_or_else(|| error("incr: overflow"))
}

pub(crate) fn error(message: &str) -> KvReply {
    KvReply::Error {
        message: message.to_owned(),
    }
}

impl Service for KvService {
    /// The executor has advanced the time to the batch's already ([`Service::advance_time`]);
    /// advancing again is a comparison, and keeps a caller that runs requests without it
    /// (a test, the conformance suite) on the request's agreed time.
    fn execute_ordered(&mut self, request: &Bytes, ctx: &Context) -> Bytes {
        self.store.advance(ctx.timestamp_ms);
        match KvOp::decode(request) {
            Ok(op) => self.apply(op).encode(),
            Err(e) => error(&e.to_string()).encode(),
        }
    }

    /// Keys whose deadline has come are removed before the batch runs.
    fn advance_time(&mut self, timestamp_ms: u64, _late: &mut Vec<tagma_exec::LateReply>) {
        self.store.advance(timestamp_ms);
    }

    fn execute_unordered(&self, request: &Bytes, _ctx: &Context) -> Bytes {
        match KvOp::decode(request) {
            Ok(op) => self.query(&op).encode(),
            Err(e) => error(&e.to_string()).encode(),
        }
    }

    /// `"TKVS"`, version byte `2`, `u64` LE entry count, then each entry in strictly
    /// increasing key order: its `u32` LE length-prefixed key, type byte (0 string, 1 hash),
    /// the string, or the hash's `u32` LE field count and its length-prefixed fields and
    /// values in increasing order, then its deadline in agreed time (`u64` LE ms, 0: none).
    fn snapshot(&self) -> Bytes {
        let all = self
            .encode_snapshot(usize::MAX, |_| unreachable!("never flushed"))
            .expect("encoding to memory never fails");
        Bytes::from(all)
    }

    /// The snapshot's bytes, through a 64 KiB buffer.
    fn write_snapshot(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let rest = self.encode_snapshot(64 << 10, |chunk| out.write_all(chunk))?;
        out.write_all(&rest)
    }

    /// A copy of the state: its keys and values are `Bytes`, shared with the live state, so
    /// the copy costs the trees' nodes and reference counts, not the data.
    fn freeze(&self) -> Option<FrozenSnapshot> {
        let frozen = self.clone();
        Some(Box::new(move || frozen.snapshot()))
    }

    /// Validates the whole snapshot before replacing the state (on error the state is kept).
    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError> {
        let mut store = Self::decode_snapshot(snapshot)
            .map_err(|e| ServiceError::InvalidSnapshot(e.to_string()))?;
        store.advance(self.store.now_ms());
        self.store = store;
        Ok(())
    }

    /// BLAKE3 over the domain separator and the state ([`Store::digest`]: every key with its
    /// type, contents and deadline, in key order).
    fn state_digest(&self) -> Digest {
        let mut hasher = blake3::Hasher::new();
        hasher.update(DIGEST_DOMAIN);
        self.store.digest(&mut hasher);
        Digest(hasher.finalize().into())
    }
}

mod codec;
pub mod eve;
pub mod parallel;
pub mod redis;
pub mod store;

pub use store::{Store, Ttl, Value};

#[cfg(test)]
mod tests;
