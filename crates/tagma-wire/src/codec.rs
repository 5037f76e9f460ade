//! The binary encoding: traits, typed errors, and the byte-level reader/writer.
//!
//! TO BE COMPLETED (helper): `Encode`/`Decode` impls for every message in `message.rs`.

use bytes::{Bytes, BytesMut};

/// Why bytes could not be decoded. Every variant is a rejection of outside input, never a bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    #[error("unsupported wire version {found} (this build speaks {expected})")]
    Version { found: u8, expected: u8 },
    #[error("unknown {what} tag {tag}")]
    UnknownTag { what: &'static str, tag: u8 },
    #[error("{what} length {len} exceeds limit {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{count} trailing bytes after the message")]
    TrailingBytes { count: usize },
    #[error("invalid field {what}")]
    Invalid { what: &'static str },
}

/// Types with a canonical byte encoding.
pub trait Encode {
    /// Appends the encoding to `out`.
    fn encode(&self, out: &mut BytesMut);
    /// Exact length of the encoding (used to reserve buffers once).
    fn encoded_len(&self) -> usize;
    /// Convenience: encodes into a fresh buffer.
    fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out.freeze()
    }
}

/// Types that can be decoded from bytes received from outside. Decoding takes a `Bytes` so
/// payload fields become zero-copy slices of it.
pub trait Decode: Sized {
    /// Decodes a whole buffer; trailing bytes are an error.
    fn decode(bytes: &Bytes) -> Result<Self, WireError>;
}
