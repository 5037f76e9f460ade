//! `tagma-space`: the protocol of the coordination service, a Byzantine fault-tolerant tuple
//! space in the manner of DepSpace (Bessani, Alchieri, Correia, Fraga: "DepSpace: A Byzantine
//! Fault-Tolerant Coordination Service") and DDS (Félix, Bessani, Correia) — what a client
//! needs to talk to it, without the replica's code.
//!
//! - [`typed`]: typed tuples and templates, their limits and encoding;
//! - [`text`]: their textual form (`("lock", *str, 7)`);
//! - [`name`]: space names;
//! - [`policy`]: a space's declarative access policy, its text and encoding;
//! - [`protection`]: a confidential space's field protection (public, comparable,
//!   private) and the rules its tuples and templates keep;
//! - [`request`]: [`SpaceRequest`], the operations, and their encoding;
//! - [`reply`]: [`SpaceReply`], the answers, and their encoding;
//! - [`error`]: [`SpaceError`], why an operation was refused;
//! - [`codec`]: the byte layout the messages share and [`DecodeError`];
//! - [`client`]: [`SpaceClient`], the operations over a `tagma_client::Proxy`;
//! - [`confidential`]: [`ConfidentialSpace`], the operations on a protected space: tuples
//!   hashed and sealed on insertion, opened with f+1 replicas' shares on reading;
//! - [`recipes`]: locks, leader election, barriers, work queues, counters and a
//!   configuration store built on those operations.
//!
//! The service itself (`tagma-space-service`) executes these requests as a replicated state
//! machine.

pub mod client;
pub mod codec;
pub mod confidential;
pub mod error;
pub mod name;
pub mod policy;
pub mod protection;
pub mod recipes;
pub mod reply;
pub mod request;
pub mod text;
pub mod typed;

pub use client::{Pending, SpaceClient, SpaceClientError};
pub use codec::DecodeError;
pub use confidential::{
    Confidential, ConfidentialError, ConfidentialSpace, Revealed, SealingGroup, SpaceKey,
};
pub use error::{SpaceError, WaitScope};
pub use name::{SPACE_NAME_BYTES_MAX, check_space_name};
pub use policy::{OpClass, Policy, PolicyError, Principals, Rule};
pub use protection::{Protection, ProtectionError, Protections};
pub use reply::{CasOutcome, Receipt, Replacement, SpaceInfo, SpaceReply, Stored};
pub use request::SpaceRequest;
pub use text::TextError;
pub use typed::{Field, FieldType, Limits, Pattern, ShapeError, TypedTemplate, TypedTuple};
