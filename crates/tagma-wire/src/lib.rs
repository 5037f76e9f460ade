//! `tagma-wire`: the only code that knows tagma's byte layouts.
//!
//! It defines the identifiers shared by every crate ([`ids`]), every message that crosses a
//! process boundary ([`message`]), and their compact, versioned binary encoding ([`codec`]).
//! Decoding never panics: malformed input becomes a typed [`WireError`]. Payloads are
//! [`bytes::Bytes`] slices of the received buffer, so requests and replies are never copied on
//! the hot path.
//!
//! Layout rules (see `codec` for the details): every message body starts with the protocol
//! version byte and a message tag byte; integers are fixed-width little-endian; variable-length
//! fields are prefixed with a `u32` length that is checked against the bytes actually present
//! before anything is allocated.

pub mod codec;
pub mod eve;
pub mod ids;
pub mod message;

pub use codec::{
    ADDR_BYTES_MAX, Decode, Encode, MAX_MAC_ENTRIES, REQUEST_HEADER_LEN, WireError,
    collect_signing_bytes, view_change_signing_bytes,
};
pub use eve::*;
pub use ids::*;
pub use message::*;

/// Version byte carried at the start of every message body and handshake.
pub const WIRE_VERSION: u8 = 1;
