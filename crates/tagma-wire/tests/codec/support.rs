//! Checks every codec test uses.

use std::fmt::Debug;

use bytes::{Bytes, BytesMut};
use tagma_wire::*;

use crate::common;

/// Round-trips `value`, checks `encoded_len`, and checks that every strict prefix and every
/// one-byte extension of the encoding is rejected (without panicking).
pub fn check<T: Encode + Decode + PartialEq + Debug>(value: &T) -> Bytes {
    let bytes = value.to_bytes();
    assert_eq!(bytes.len(), value.encoded_len(), "encoded_len of {value:?}");
    // `encode` appends to an existing buffer.
    let mut out = BytesMut::from(&b"xyz"[..]);
    value.encode(&mut out);
    assert_eq!(&out[3..], &bytes[..]);

    assert_eq!(&T::decode(&bytes).unwrap(), value);
    for n in 0..bytes.len() {
        let prefix = bytes.slice(..n);
        assert!(
            T::decode(&prefix).is_err(),
            "prefix {n} of {value:?} decoded"
        );
    }
    let mut longer = BytesMut::from(&bytes[..]);
    longer.extend_from_slice(&[0]);
    assert_eq!(
        T::decode(&longer.freeze()),
        Err(WireError::TrailingBytes { count: 1 })
    );
    bytes
}

pub fn assert_within(outer: &Bytes, inner: &Bytes) {
    let range = outer.as_ptr_range();
    if !inner.is_empty() {
        assert!(range.contains(&inner.as_ptr()), "not a slice of the input");
    }
}

pub fn invalid<T>(what: &'static str) -> Result<T, WireError> {
    Err(WireError::Invalid { what })
}

pub fn with_byte(bytes: &Bytes, at: usize, value: u8) -> Bytes {
    let mut v = bytes.to_vec();
    v[at] = value;
    Bytes::from(v)
}

pub type DecodeFn = fn(&Bytes) -> Result<(), WireError>;

pub fn all_top_level() -> Vec<(&'static str, Bytes, DecodeFn)> {
    fn d<T: Decode>(b: &Bytes) -> Result<(), WireError> {
        T::decode(b).map(|_| ())
    }
    let mut out: Vec<(&'static str, Bytes, DecodeFn)> = vec![];
    for (name, m) in common::handshakes() {
        out.push((name, m.to_bytes(), d::<Handshake>));
    }
    for (name, m) in common::peer_messages() {
        out.push((name, m.to_bytes(), d::<PeerMessage>));
    }
    for (name, m) in common::client_messages() {
        out.push((name, m.to_bytes(), d::<ClientMessage>));
    }
    for (name, m) in common::replica_messages() {
        out.push((name, m.to_bytes(), d::<ReplicaMessage>));
    }
    out
}
