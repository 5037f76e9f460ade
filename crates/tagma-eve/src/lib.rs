//! `tagma-eve`: execute-verify replication, after Kapritsos, Wang, Quema, Clement, Alvisi and
//! Dahlin, "All about Eve: Execute-Verify Replication for Multi-Core Servers". Replicas
//! execute a batch's requests in parallel first and then check that they agree, by comparing
//! a digest of the state each reached.
//!
//! - [`tree`]: the application state as named objects in a copy-on-write Merkle tree
//!   ([`ObjectTree`]): a snapshot per batch costs one pointer copy (a rollback restores it),
//!   the root digest is the same for the same objects whatever the order they were written
//!   in, rehashing touches only the nodes a batch changed (subtrees in parallel), and two
//!   trees name the objects they differ in without visiting the subtrees they share.
//! - [`mixer`]: the application's guess of what each request reads and writes ([`Mixer`]),
//!   and [`mix`], which splits a batch into parallel batches of requests that do not
//!   conflict.

pub mod mixer;
pub mod tree;

pub use mixer::{Access, Mixed, Mixer, mix};
pub use tree::{HashReport, ObjectId, ObjectTree};
