//! The byte layout the coordination service's messages share, and its decoding errors.
//!
//! All integers are little-endian. A space name is `len u8 | bytes`; a text (a reason, a
//! message) is `len u16 | UTF-8 bytes`; an optional `u64` is `0`, or `1 | u64`; a list is
//! `count u32 | item*`; a sealed tuple is `len u32 | bytes`; tuples and templates use their
//! own encoding ([`crate::typed`]), which delimits itself. Every decoder reads through [`Reader`], which
//! checks each length against the input left before it allocates, so no input makes a
//! decoder panic or allocate more than the input's size allows.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::name::{SPACE_NAME_BYTES_MAX, check_space_name};
use crate::typed::{self, Limits, TypedTemplate, TypedTuple};

/// The most bytes of a text in a message (a denial's reason, an error's message).
pub const TEXT_BYTES_MAX: usize = 1024;

/// Why bytes do not decode as a request, a reply or a policy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the input ends inside {0}")]
    Truncated(&'static str),
    #[error("unknown {what} tag {tag}")]
    UnknownTag { what: &'static str, tag: u8 },
    #[error("{0} bytes are left after the message")]
    TrailingBytes(usize),
    #[error("{0}")]
    BadSpaceName(String),
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    #[error("{what} holds {len}, more than the {max} allowed")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("not in canonical form: {0}")]
    NotCanonical(&'static str),
    #[error("a tuple or template: {0}")]
    Field(#[from] typed::DecodeError),
}

/// Reads the shared layout from the front of a buffer (the service's snapshot uses it too).
pub struct Reader {
    buf: Bytes,
}

impl Reader {
    /// A reader at the start of `bytes` (which it shares, without a copy).
    pub fn new(bytes: &Bytes) -> Self {
        Reader { buf: bytes.clone() }
    }

    fn need(&self, n: usize, what: &'static str) -> Result<(), DecodeError> {
        if self.buf.remaining() < n {
            Err(DecodeError::Truncated(what))
        } else {
            Ok(())
        }
    }

    pub fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        self.need(1, what)?;
        Ok(self.buf.get_u8())
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        self.need(2, what)?;
        Ok(self.buf.get_u16_le())
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.need(4, what)?;
        Ok(self.buf.get_u32_le())
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        self.need(8, what)?;
        Ok(self.buf.get_u64_le())
    }

    pub fn opt_u64(&mut self, what: &'static str) -> Result<Option<u64>, DecodeError> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => Ok(Some(self.u64(what)?)),
            tag => Err(DecodeError::UnknownTag { what, tag }),
        }
    }

    /// A flag: `0` or `1`.
    pub fn flag(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(DecodeError::UnknownTag { what, tag }),
        }
    }

    pub fn space_name(&mut self) -> Result<String, DecodeError> {
        let len = self.u8("a space name")? as usize;
        if len > SPACE_NAME_BYTES_MAX {
            return Err(DecodeError::TooLong {
                what: "a space name",
                len,
                max: SPACE_NAME_BYTES_MAX,
            });
        }
        self.need(len, "a space name")?;
        let bytes = self.buf.split_to(len);
        let name = std::str::from_utf8(&bytes).map_err(|_| DecodeError::NotUtf8("a space name"))?;
        check_space_name(name).map_err(DecodeError::BadSpaceName)?;
        Ok(name.to_owned())
    }

    pub fn text(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let len = self.u16(what)? as usize;
        if len > TEXT_BYTES_MAX {
            return Err(DecodeError::TooLong {
                what,
                len,
                max: TEXT_BYTES_MAX,
            });
        }
        self.need(len, what)?;
        let bytes = self.buf.split_to(len);
        std::str::from_utf8(&bytes)
            .map(str::to_owned)
            .map_err(|_| DecodeError::NotUtf8(what))
    }

    pub fn tuple(&mut self, limits: &Limits) -> Result<TypedTuple, DecodeError> {
        Ok(TypedTuple::decode_from(&mut self.buf, limits)?)
    }

    pub fn template(&mut self, limits: &Limits) -> Result<TypedTemplate, DecodeError> {
        Ok(TypedTemplate::decode_from(&mut self.buf, limits)?)
    }

    /// A sealed tuple's bytes (`len u32 | bytes`), at most `max` of them; shares the input
    /// (no copy).
    pub fn sealed(&mut self, max: usize) -> Result<Bytes, DecodeError> {
        let len = self.u32("a sealed tuple")? as usize;
        if len > max {
            return Err(DecodeError::TooLong {
                what: "a sealed tuple",
                len,
                max,
            });
        }
        self.bytes(len, "a sealed tuple")
    }

    /// The next `len` bytes, copied: a decoded tuple may be stored for as long as the space
    /// lives, and a slice of the request would keep the whole buffer its batch arrived in
    /// alive with it.
    pub fn bytes(&mut self, len: usize, what: &'static str) -> Result<Bytes, DecodeError> {
        self.need(len, what)?;
        let out = Bytes::copy_from_slice(&self.buf[..len]);
        self.buf.advance(len);
        Ok(out)
    }

    /// Bytes of fixed length `N`.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        self.need(N, what)?;
        let mut out = [0u8; N];
        self.buf.copy_to_slice(&mut out);
        Ok(out)
    }

    /// A list's count, each item taking at least `item_bytes_min` bytes: a count the input
    /// cannot hold is truncation, found before anything is allocated.
    pub fn count(
        &mut self,
        what: &'static str,
        item_bytes_min: usize,
    ) -> Result<usize, DecodeError> {
        let count = self.u32(what)? as usize;
        self.need(count.saturating_mul(item_bytes_min), what)?;
        Ok(count)
    }

    /// Fails unless the whole input was read.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.has_remaining() {
            Err(DecodeError::TrailingBytes(self.buf.remaining()))
        } else {
            Ok(())
        }
    }
}

pub fn put_space_name(out: &mut BytesMut, name: &str) {
    debug_assert!(name.len() <= SPACE_NAME_BYTES_MAX);
    out.put_u8(name.len() as u8);
    out.put_slice(name.as_bytes());
}

/// Writes a text, cut at a character boundary to [`TEXT_BYTES_MAX`] bytes.
pub fn put_text(out: &mut BytesMut, text: &str) {
    let text = clip(text);
    out.put_u16_le(text.len() as u16);
    out.put_slice(text.as_bytes());
}

/// `text`, cut at a character boundary to at most [`TEXT_BYTES_MAX`] bytes.
pub fn clip(text: &str) -> &str {
    if text.len() <= TEXT_BYTES_MAX {
        return text;
    }
    let mut end = TEXT_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

pub fn put_sealed(out: &mut BytesMut, sealed: &Bytes) {
    out.put_u32_le(sealed.len() as u32);
    out.put_slice(sealed);
}

pub fn put_opt_u64(out: &mut BytesMut, value: Option<u64>) {
    match value {
        None => out.put_u8(0),
        Some(v) => {
            out.put_u8(1);
            out.put_u64_le(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_beyond_the_input_are_truncation_before_any_allocation() {
        let mut r = Reader::new(&Bytes::from_static(b"\xff\xff\xff\xff"));
        assert_eq!(r.count("a list", 1), Err(DecodeError::Truncated("a list")));
        let mut r = Reader::new(&Bytes::from_static(b"\x05ab"));
        assert_eq!(r.space_name(), Err(DecodeError::Truncated("a space name")));
        let mut r = Reader::new(&Bytes::from_static(b"\xff\xff"));
        assert!(matches!(
            r.text("a reason"),
            Err(DecodeError::TooLong { .. })
        ));
        let mut r = Reader::new(&Bytes::from_static(b"\x02\x00"));
        assert_eq!(
            r.opt_u64("a lease"),
            Err(DecodeError::UnknownTag {
                what: "a lease",
                tag: 2
            })
        );
    }

    #[test]
    fn long_texts_are_clipped_at_a_character_boundary() {
        let long = "é".repeat(TEXT_BYTES_MAX);
        let clipped = clip(&long);
        assert!(clipped.len() <= TEXT_BYTES_MAX && clipped.len() >= TEXT_BYTES_MAX - 1);
        let mut out = BytesMut::new();
        put_text(&mut out, &long);
        let mut r = Reader::new(&out.freeze());
        assert_eq!(r.text("a reason").unwrap(), clipped);
        r.finish().unwrap();
    }
}
