//! `tagma-kv`: a replicated key-value service: `put`, `get`, `delete`, `cas`, `incr`, and
//! `scan` by prefix with a limit, over a deterministic ordered map.
//!
//! TO BE COMPLETED (helper): codec for [`KvOp`] / [`KvReply`], [`KvService`], tests.

use bytes::Bytes;

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

impl KvOp {
    pub fn encode(&self) -> Bytes {
        todo!()
    }
    pub fn decode(bytes: &Bytes) -> Result<Self, KvCodecError> {
        todo!()
    }
    /// Whether the op never changes state (may be sent unordered).
    pub fn is_read_only(&self) -> bool {
        matches!(self, KvOp::Get { .. } | KvOp::Scan { .. })
    }
}

impl KvReply {
    pub fn encode(&self) -> Bytes {
        todo!()
    }
    pub fn decode(bytes: &Bytes) -> Result<Self, KvCodecError> {
        todo!()
    }
}

/// The service. Implements `tagma_exec::Service`.
pub struct KvService {
    // BTreeMap<Bytes, Bytes>, limits
}

impl KvService {
    pub fn new() -> Self {
        todo!()
    }
}
