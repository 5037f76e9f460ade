//! The encoding's building blocks: the [`Encode`]/[`Decode`] traits, the typed
//! [`WireError`], the bounds-checked `Reader` every decoder reads through, the writer helpers
//! (length-prefixed byte fields, the version and tag header of top-level messages) and the
//! `u8`-tagged `Option<T>` (0 = `None`, 1 = `Some` then the value; any other byte is
//! [`WireError::UnknownTag`]).

use bytes::{BufMut, Bytes, BytesMut};

use crate::WIRE_VERSION;

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

/// Version + tag.
pub(super) const HEADER_LEN: usize = 2;

/// A bounds-checked cursor over a received buffer. Invariant: `pos <= buf.len()`.
pub(super) struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a Bytes) -> Self {
        Reader { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Advances over `n` bytes and returns their range.
    fn advance(&mut self, n: usize) -> Result<(usize, usize), WireError> {
        let remaining = self.remaining();
        if n > remaining {
            return Err(WireError::Truncated {
                needed: n - remaining,
            });
        }
        let start = self.pos;
        let end = start
            .checked_add(n)
            .ok_or(WireError::Truncated { needed: n })?;
        self.pos = end;
        Ok((start, end))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let (start, end) = self.advance(n)?;
        let buf: &'a [u8] = self.buf;
        buf.get(start..end)
            .ok_or(WireError::Truncated { needed: n })
    }

    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let slice = self.take(N)?;
        <[u8; N]>::try_from(slice).map_err(|_| WireError::Truncated { needed: N })
    }

    pub(super) fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    pub(super) fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(super) fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A `u32`-length-prefixed byte field, as a zero-copy slice of the input.
    pub(super) fn bytes(&mut self) -> Result<Bytes, WireError> {
        let len = self.u32()? as usize;
        let (start, end) = self.advance(len)?;
        Ok(self.buf.slice(start..end))
    }

    /// The bytes that remain, as a zero-copy slice of the input (for a field that ends the
    /// message and carries no length).
    pub(super) fn rest(&mut self) -> Bytes {
        let start = self.pos;
        self.pos = self.buf.len();
        self.buf.slice(start..)
    }

    /// Validates a decoded element count against the bytes that remain.
    pub(super) fn check_count(
        &self,
        count: usize,
        min_elem: usize,
        what: &'static str,
    ) -> Result<usize, WireError> {
        let remaining = self.remaining();
        let fits = count
            .checked_mul(min_elem)
            .is_some_and(|total| total <= remaining);
        if fits {
            Ok(count)
        } else {
            Err(WireError::TooLong {
                what,
                len: count,
                max: remaining / min_elem.max(1),
            })
        }
    }

    /// Checks the version byte and returns the message tag.
    pub(super) fn header(&mut self) -> Result<u8, WireError> {
        self.version()?;
        self.u8()
    }

    pub(super) fn version(&mut self) -> Result<(), WireError> {
        let found = self.u8()?;
        if found != WIRE_VERSION {
            return Err(WireError::Version {
                found,
                expected: WIRE_VERSION,
            });
        }
        Ok(())
    }

    fn finish(&self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(WireError::TrailingBytes { count }),
        }
    }
}

/// Decodes a whole buffer with `f`, rejecting trailing bytes.
pub(super) fn decode_all<T>(
    bytes: &Bytes,
    f: impl FnOnce(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<T, WireError> {
    let mut r = Reader::new(bytes);
    let value = f(&mut r)?;
    r.finish()?;
    Ok(value)
}

// Writer helpers (no reservation: callers reserve the exact total once).

pub(super) fn put_len(out: &mut BytesMut, len: usize, what: &str) {
    let len = u32::try_from(len).unwrap_or_else(|_| panic!("{what} longer than u32::MAX"));
    out.put_u32_le(len);
}

pub(super) fn put_bytes(out: &mut BytesMut, bytes: &[u8]) {
    put_len(out, bytes.len(), "byte field");
    out.put_slice(bytes);
}

pub(super) fn put_header(out: &mut BytesMut, tag: u8) {
    out.put_u8(WIRE_VERSION);
    out.put_u8(tag);
}

const OPTION_NONE: u8 = 0;
const OPTION_SOME: u8 = 1;

/// `u8` presence tag (0 = `None`, 1 = `Some`) then the value.
pub(super) fn option_len<T>(value: Option<&T>, len: impl FnOnce(&T) -> usize) -> usize {
    1 + value.map_or(0, len)
}

pub(super) fn put_option<T>(
    out: &mut BytesMut,
    value: Option<&T>,
    put: impl FnOnce(&mut BytesMut, &T),
) {
    match value {
        None => out.put_u8(OPTION_NONE),
        Some(v) => {
            out.put_u8(OPTION_SOME);
            put(out, v);
        }
    }
}

pub(super) fn read_option<T>(
    r: &mut Reader<'_>,
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<Option<T>, WireError> {
    match r.u8()? {
        OPTION_NONE => Ok(None),
        OPTION_SOME => read(r).map(Some),
        tag => Err(WireError::UnknownTag {
            what: "option",
            tag,
        }),
    }
}

/// Standalone `Encode`/`Decode` (no version byte) for a type with `put`/`read`/`len` helpers.
macro_rules! standalone {
    ($ty:ty, $put:ident, $read:ident, $len:expr) => {
        impl Encode for $ty {
            fn encode(&self, out: &mut BytesMut) {
                out.reserve(self.encoded_len());
                $put(out, self);
            }
            fn encoded_len(&self) -> usize {
                ($len)(self)
            }
        }

        impl Decode for $ty {
            fn decode(bytes: &Bytes) -> Result<Self, WireError> {
                decode_all(bytes, $read)
            }
        }
    };
}
pub(super) use standalone;
