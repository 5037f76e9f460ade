//! The byte layouts' building blocks: an append-only writer and a bounds-checked reader
//! (byte strings are `u32` little-endian lengths and the bytes, read as zero-copy slices).

use bytes::Bytes;

use crate::KvCodecError;

/// Append-only encoder for the formats of this crate.
pub(crate) struct Writer(pub(crate) Vec<u8>);

impl Writer {
    pub(crate) fn with_tag(tag: u8) -> Self {
        Writer(vec![tag])
    }
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn bytes(&mut self, v: &[u8]) {
        let len = u32::try_from(v.len()).expect("kv byte string longer than u32::MAX bytes");
        self.u32(len);
        self.0.extend_from_slice(v);
    }
    pub(crate) fn opt_bytes(&mut self, v: &Option<Bytes>) {
        match v {
            None => self.u8(0),
            Some(b) => {
                self.u8(1);
                self.bytes(b);
            }
        }
    }
    pub(crate) fn finish(self) -> Bytes {
        Bytes::from(self.0)
    }
}

/// Bounds-checked decoder over a [`Bytes`] (byte strings are zero-copy slices of it).
pub(crate) struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a Bytes) -> Self {
        Reader { buf, pos: 0 }
    }
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], KvCodecError> {
        if n > self.remaining() {
            return Err(KvCodecError::Malformed(what));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }
    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, KvCodecError> {
        Ok(self.take(1, what)?[0])
    }
    pub(crate) fn array<const N: usize>(
        &mut self,
        what: &'static str,
    ) -> Result<[u8; N], KvCodecError> {
        let slice = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, KvCodecError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, KvCodecError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, KvCodecError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn bool(&mut self, what: &'static str) -> Result<bool, KvCodecError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(KvCodecError::Malformed("invalid bool/option byte")),
        }
    }
    pub(crate) fn bytes(&mut self, what: &'static str) -> Result<Bytes, KvCodecError> {
        let len = self.u32(what)? as usize;
        if len > self.remaining() {
            return Err(KvCodecError::Malformed(what));
        }
        let out = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(out)
    }
    pub(crate) fn opt_bytes(&mut self, what: &'static str) -> Result<Option<Bytes>, KvCodecError> {
        if self.bool(what)? {
            Ok(Some(self.bytes(what)?))
        } else {
            Ok(None)
        }
    }
    pub(crate) fn finish(&self) -> Result<(), KvCodecError> {
        if self.remaining() != 0 {
            return Err(KvCodecError::Malformed("trailing bytes"));
        }
        Ok(())
    }
}
