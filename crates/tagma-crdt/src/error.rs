//! Errors of applying operations, building map updates and decoding the binary forms.

use thiserror::Error;

use crate::kind::Kind;

/// Applying an operation to a CRDT failed; the CRDT is unchanged.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CrdtError {
    /// The operation is for another kind of CRDT than the replica holds.
    #[error("a {op} operation cannot apply to a {crdt}: the topic's replicas must all hold a {op}")]
    KindMismatch { crdt: Kind, op: Kind },
}

/// Building a map update failed; nothing is published.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MapError {
    /// The key holds another kind of value than the update is for.
    #[error("the key holds a {key}, not a {op}: remove the key before giving it another kind")]
    KindMismatch { key: Kind, op: Kind },
}

/// Decoding an operation or a state failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CodecError {
    #[error("the input ends inside a field")]
    Truncated,
    #[error("{count} bytes follow the encoded value")]
    TrailingBytes { count: usize },
    #[error("unknown {what} tag {tag}")]
    UnknownTag { what: &'static str, tag: u8 },
    #[error("a variable-length integer is longer than its minimal form or than 64 bits")]
    BadVarint,
    #[error("{what} = {value} is out of range")]
    OutOfRange { what: &'static str, value: u64 },
    #[error("a byte string of {len} bytes exceeds value_bytes_max = {max}")]
    ValueTooLarge { len: u64, max: usize },
    #[error("the input holds more than elements_max = {max} collection items")]
    TooManyElements { max: usize },
    #[error("the input nests {depth} levels deep, more than depth_max = {max}")]
    TooDeep { depth: usize, max: usize },
    #[error("a map value cannot be a map")]
    NestedMap,
    #[error("the state is not in canonical form: {what}")]
    NotCanonical { what: &'static str },
}
