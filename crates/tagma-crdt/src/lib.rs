//! `tagma-crdt`: operation-based CRDTs replicated by a causal broadcast layer (VCube-Sync:
//! causal CRDT replication over a hypercube).
//!
//! # Delivery contract
//!
//! The broadcast layer gives every operation a unique id, its [`Dot`]: the publishing node and
//! that node's per-topic message counter (counters start at 1). It delivers every operation to
//! every replica exactly once and in causal order: an operation is delivered after every
//! operation its publisher had delivered when publishing it, and a publisher delivers its own
//! operation when it publishes it, so each node's operations arrive in the order it published
//! them. Under that contract the CRDTs here keep no version vectors and do no deduplication of
//! their own: replicas that delivered the same operations hold equal states and equal
//! [`Crdt::digest`]s, whatever the delivery order. Outside it (a replayed or forged operation)
//! nothing panics, though replicas may then disagree.
//!
//! # What each CRDT needs
//!
//! - [`Register`] (last-writer-wins): only the stamp in each assignment; the origin builds the
//!   assignment from its own register ([`Register::assign`]) so its stamp exceeds every stamp
//!   it has seen.
//! - [`Counter`] (positive-negative): nothing; adds commute. The state is one sum per node.
//! - [`Set`] (observed-remove, add-wins): each add's dot as the element's tag, and causal order
//!   so that a remove, which names the tags its origin saw ([`Set::remove`]), arrives after
//!   them.
//! - [`Map`] (keys to registers, counters and sets): the dots and causal order, so that a key
//!   removal ([`Map::remove`]) takes away exactly the contributions its origin saw and a
//!   concurrent update keeps the key; each node's adds in publish order, for its counters.
//!
//! # Modules
//!
//! - [`dot`], [`kind`], [`value`]: operation ids, CRDT kinds and the values users see.
//! - [`register`], [`counter`], [`set`], [`map`]: the CRDTs and their operations.
//! - [`crdt`]: a CRDT of any kind ([`Crdt`]) and an operation of any kind ([`Op`]).
//! - [`codec`]: the binary forms of operations and states, with decoding [`Limits`], and the
//!   digest.
//! - [`error`]: the error types.

pub mod codec;
pub mod counter;
pub mod crdt;
pub mod dot;
pub mod error;
pub mod kind;
pub mod map;
pub mod register;
pub mod set;
pub mod value;

pub use codec::{
    Limits, decode_and_apply, decode_op, decode_op_with, decode_state, decode_state_with,
    encode_op, encode_state,
};
pub use counter::{Counter, CounterMark, CounterOp, NodeTally, ResetCounter};
pub use crdt::{Crdt, Op};
pub use dot::Dot;
pub use error::{CodecError, CrdtError, MapError};
pub use kind::Kind;
pub use map::{Entry, Map, MapOp, NestedOp};
pub use register::{Register, RegisterOp, Stamp};
pub use set::{Set, SetOp};
pub use value::Value;
