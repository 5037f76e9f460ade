//! LEB128 varints, the integers of the message encoding: seven bits a byte, low bits first,
//! the high bit set on every byte but the last.

use bytes::{BufMut, BytesMut};

/// Appends `v` as a varint.
pub fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Bytes of `v` as a varint.
pub fn varint_len(v: u64) -> usize {
    (64 - v.max(1).leading_zeros() as usize).div_ceil(7)
}
