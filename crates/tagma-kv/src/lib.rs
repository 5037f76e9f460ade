//! `tagma-kv`: a replicated key-value service: `put`, `get`, `delete`, `cas`, `incr`, and
//! `scan` by prefix with a limit, over a deterministic ordered map.
//!
//! # Encoding
//!
//! Ops and replies use a compact binary encoding: the first byte is the variant tag, then the
//! fields in declaration order. Byte strings are a `u32` little-endian length followed by the
//! bytes; an `Option` is a `0`/`1` byte followed (if `1`) by the value; `i64` and `u32` are
//! little-endian; `bool` is a `0`/`1` byte; scan pairs are a `u32` count followed by the pairs.
//! Decoding never panics, rejects unknown tags and trailing bytes, and checks every length
//! against the remaining input before allocating.

use std::collections::BTreeMap;
use std::ops::Bound;

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
}

mod reply_tag {
    pub const PUT: u8 = 1;
    pub const GET: u8 = 2;
    pub const DELETE: u8 = 3;
    pub const CAS: u8 = 4;
    pub const INCR: u8 = 5;
    pub const SCAN: u8 = 6;
    pub const ERROR: u8 = 7;
}

/// Append-only encoder for the formats of this crate.
struct Writer(Vec<u8>);

impl Writer {
    fn with_tag(tag: u8) -> Self {
        Writer(vec![tag])
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        let len = u32::try_from(v.len()).expect("kv byte string longer than u32::MAX bytes");
        self.u32(len);
        self.0.extend_from_slice(v);
    }
    fn opt_bytes(&mut self, v: &Option<Bytes>) {
        match v {
            None => self.u8(0),
            Some(b) => {
                self.u8(1);
                self.bytes(b);
            }
        }
    }
    fn finish(self) -> Bytes {
        Bytes::from(self.0)
    }
}

/// Bounds-checked decoder over a [`Bytes`] (byte strings are zero-copy slices of it).
struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a Bytes) -> Self {
        Reader { buf, pos: 0 }
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], KvCodecError> {
        if n > self.remaining() {
            return Err(KvCodecError::Malformed(what));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, KvCodecError> {
        Ok(self.take(1, what)?[0])
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], KvCodecError> {
        let slice = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, KvCodecError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, KvCodecError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn i64(&mut self, what: &'static str) -> Result<i64, KvCodecError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    fn bool(&mut self, what: &'static str) -> Result<bool, KvCodecError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(KvCodecError::Malformed("invalid bool/option byte")),
        }
    }
    fn bytes(&mut self, what: &'static str) -> Result<Bytes, KvCodecError> {
        let len = self.u32(what)? as usize;
        if len > self.remaining() {
            return Err(KvCodecError::Malformed(what));
        }
        let out = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(out)
    }
    fn opt_bytes(&mut self, what: &'static str) -> Result<Option<Bytes>, KvCodecError> {
        if self.bool(what)? {
            Ok(Some(self.bytes(what)?))
        } else {
            Ok(None)
        }
    }
    fn finish(&self) -> Result<(), KvCodecError> {
        if self.remaining() != 0 {
            return Err(KvCodecError::Malformed("trailing bytes"));
        }
        Ok(())
    }
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
            _ => return Err(KvCodecError::Malformed("unknown op tag")),
        };
        r.finish()?;
        Ok(op)
    }
    /// Whether the op never changes state (may be sent unordered).
    pub fn is_read_only(&self) -> bool {
        matches!(self, KvOp::Get { .. } | KvOp::Scan { .. })
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
const DIGEST_DOMAIN: &[u8] = b"tagma-kv/state-digest/v1";
/// Snapshot header: magic then format version.
const SNAPSHOT_MAGIC: &[u8; 4] = b"TKVS";
const SNAPSHOT_VERSION: u8 = 1;

/// The service. Implements `tagma_exec::Service`.
///
/// Ordered requests are [`KvOp`] encodings; replies are [`KvReply`] encodings. A request that
/// does not decode gets [`KvReply::Error`]. Unordered requests may only be `get` and `scan`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KvService {
    map: BTreeMap<Bytes, Bytes>,
}

impl KvService {
    pub fn new() -> Self {
        KvService::default()
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The value stored at `key`.
    pub fn get(&self, key: &[u8]) -> Option<&Bytes> {
        self.map.get(key)
    }

    /// Applies `op` to the state and returns its reply.
    pub fn apply(&mut self, op: KvOp) -> KvReply {
        match op {
            KvOp::Put { key, value } => KvReply::Put {
                previous: self.map.insert(key, value),
            },
            KvOp::Delete { key } => KvReply::Delete {
                previous: self.map.remove(&key),
            },
            KvOp::Cas { key, expected, new } => {
                let (apply, reply) = cas(self.map.get(&key).cloned(), expected, new.clone());
                if apply {
                    self.map.insert(key, new);
                }
                reply
            }
            KvOp::Incr { key, delta } => match incremented(self.map.get(&key), delta) {
                Ok(value) => {
                    self.map
                        .insert(key, Bytes::copy_from_slice(&value.to_le_bytes()));
                    KvReply::Incr { value }
                }
                Err(reply) => reply,
            },
            op @ (KvOp::Get { .. } | KvOp::Scan { .. }) => self.query(&op),
        }
    }

    /// Answers a read-only op (`get`, `scan`) without changing the state; any other op gets
    /// [`KvReply::Error`] ("write operations must be ordered").
    pub fn query(&self, op: &KvOp) -> KvReply {
        match op {
            KvOp::Get { key } => KvReply::Get {
                value: self.map.get(key).cloned(),
            },
            KvOp::Scan { prefix, limit } => {
                let limit = (*limit).min(SCAN_LIMIT_MAX) as usize;
                let mut bytes = 0usize;
                let pairs = self
                    .map
                    .range::<[u8], _>((Bound::Included(&prefix[..]), Bound::Unbounded))
                    .take_while(|(key, _)| key.starts_with(prefix))
                    .take(limit)
                    .take_while(|(key, value)| {
                        bytes += key.len() + value.len();
                        bytes <= SCAN_BYTES_MAX
                    })
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect();
                KvReply::Scan { pairs }
            }
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
        w.u64(self.map.len() as u64);
        for (key, value) in &self.map {
            w.bytes(key);
            w.bytes(value);
            if w.0.len() >= flush_at {
                flush(&w.0)?;
                w.0.clear();
            }
        }
        Ok(w.0)
    }

    fn decode_snapshot(snapshot: &Bytes) -> Result<BTreeMap<Bytes, Bytes>, KvCodecError> {
        let mut r = Reader::new(snapshot);
        if r.take(4, "snapshot magic")? != SNAPSHOT_MAGIC {
            return Err(KvCodecError::Malformed("bad snapshot magic"));
        }
        if r.u8("snapshot version")? != SNAPSHOT_VERSION {
            return Err(KvCodecError::Malformed("unsupported snapshot version"));
        }
        let count = r.u64("snapshot entry count")?;
        // Each entry takes at least two 4-byte length prefixes.
        if count > (r.remaining() / 8) as u64 {
            return Err(KvCodecError::Malformed("snapshot entry count"));
        }
        let mut map = BTreeMap::new();
        let mut last: Option<Bytes> = None;
        for _ in 0..count {
            let key = r.bytes("snapshot key")?;
            let value = r.bytes("snapshot value")?;
            if last.as_ref().is_some_and(|last| *last >= key) {
                return Err(KvCodecError::Malformed(
                    "snapshot keys not in strictly increasing order",
                ));
            }
            last = Some(key.clone());
            map.insert(key, value);
        }
        r.finish()?;
        Ok(map)
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
    fn execute_ordered(&mut self, request: &Bytes, _ctx: &Context) -> Bytes {
        match KvOp::decode(request) {
            Ok(op) => self.apply(op).encode(),
            Err(e) => error(&e.to_string()).encode(),
        }
    }

    fn execute_unordered(&self, request: &Bytes, _ctx: &Context) -> Bytes {
        match KvOp::decode(request) {
            Ok(op) => self.query(&op).encode(),
            Err(e) => error(&e.to_string()).encode(),
        }
    }

    /// `"TKVS"`, version byte `1`, `u64` LE entry count, then each entry as `u32` LE
    /// length-prefixed key and value, in strictly increasing key order.
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

    /// A copy of the map: its keys and values are `Bytes`, shared with the live map, so the
    /// copy costs the tree's nodes and reference counts, not the data.
    fn freeze(&self) -> Option<FrozenSnapshot> {
        let frozen = KvService {
            map: self.map.clone(),
        };
        Some(Box::new(move || frozen.snapshot()))
    }

    /// Validates the whole snapshot before replacing the state (on error the state is kept).
    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError> {
        let map = Self::decode_snapshot(snapshot)
            .map_err(|e| ServiceError::InvalidSnapshot(e.to_string()))?;
        self.map = map;
        Ok(())
    }

    /// BLAKE3 over the domain separator, the `u64` LE entry count, then each entry as
    /// (`u64` LE key length, key, `u64` LE value length, value) in key order.
    fn state_digest(&self) -> Digest {
        let mut hasher = blake3::Hasher::new();
        hasher.update(DIGEST_DOMAIN);
        hasher.update(&(self.map.len() as u64).to_le_bytes());
        for (key, value) in &self.map {
            hasher.update(&(key.len() as u64).to_le_bytes());
            hasher.update(key);
            hasher.update(&(value.len() as u64).to_le_bytes());
            hasher.update(value);
        }
        Digest(hasher.finalize().into())
    }
}

pub mod eve;
pub mod parallel;

#[cfg(test)]
mod tests;
