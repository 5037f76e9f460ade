//! The binary encoding of every message: one file per group of messages, on shared
//! building blocks ([`primitives`]).
//!
//! # Layout
//!
//! - Integers are fixed-width little-endian (`u8`, `u32`, `u64`); identifiers are encoded as
//!   their inner integer, fixed-size values ([`Digest`], [`MacTag`], [`Signature`], ...) as
//!   their raw bytes.
//! - Variable-length byte fields (payloads, the batch carried by a PROPOSE) are a `u32` length
//!   followed by the bytes. Vector counts are `u32`, except MAC vectors whose count is a `u8`
//!   (at most [`MAX_MAC_ENTRIES`] entries).
//! - Before anything is allocated for a length or count, it is checked against the bytes that
//!   remain (`count × minimum element size ≤ remaining`), so hostile input can never make the
//!   decoder allocate more than the input size; violations are [`WireError::Truncated`] (byte
//!   fields) or [`WireError::TooLong`] (counts).
//! - Enumerations are a `u8` tag; an unknown tag is [`WireError::UnknownTag`]. Every value has
//!   exactly one encoding, so decode-then-encode reproduces the input bytes exactly.
//! - Byte fields decode as zero-copy [`Bytes::slice`]s of the input buffer.
//! - Decoding a whole value rejects trailing bytes ([`WireError::TrailingBytes`]).
//!
//! Standalone encodings (requests, batches, votes, proofs, collects, views) carry no version
//! byte; the version is that of the enclosing top-level message. Top-level messages
//! ([`PeerMessage`], [`ClientMessage`], [`ReplicaMessage`], [`Handshake`]) start with the
//! version byte (`WIRE_VERSION`, otherwise [`WireError::Version`]) and a tag byte, then the
//! fields. Ordering constraints (proof signers, write-set epochs, view members) make the
//! encoding canonical: the decoder rejects a violation as [`WireError::Invalid`], and the
//! encoder writes vectors as given, so a value that breaks them encodes to bytes that do not
//! decode.
//!
//! Each module's documentation has the table of its layouts: [`request`] (requests, their
//! authentication, batches), [`consensus`] (votes, ACCEPTs, decision proofs, decided
//! instances), [`leader_change`] (STOP, collects, STOPDATA, SYNC), [`view`] (views and view
//! changes), [`peer`] (replica-to-replica messages), [`client`] (client-to-replica messages and
//! the replies), [`handshake`] (the connection handshake), [`group`] (the conflict group
//! an ordered request's payload may carry), [`eve`] (execute-verify's primary-backup
//! messages).
//!
//! Encoding cannot fail; it panics only on values that cannot be represented (a MAC vector of
//! more than 255 entries, a byte field or vector of more than `u32::MAX` bytes/entries), which
//! are programming errors, never outside input. Decoding never panics.
//!
//! [`PeerMessage`]: crate::PeerMessage
//! [`ClientMessage`]: crate::ClientMessage
//! [`ReplicaMessage`]: crate::ReplicaMessage
//! [`Handshake`]: crate::Handshake
//! [`Digest`]: crate::Digest
//! [`MacTag`]: crate::MacTag
//! [`Signature`]: crate::Signature
//! [`Bytes::slice`]: bytes::Bytes::slice

pub mod client;
pub mod consensus;
pub mod eve;
pub mod group;
pub mod handshake;
pub mod leader_change;
pub mod peer;
pub mod primitives;
pub mod request;
pub mod view;

pub use leader_change::collect_signing_bytes;
pub use primitives::{Decode, Encode, WireError};
pub use request::{MAX_MAC_ENTRIES, REQUEST_HEADER_LEN};
pub use view::{ADDR_BYTES_MAX, view_change_signing_bytes};
