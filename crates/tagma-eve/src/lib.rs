//! `tagma-eve`: execute-verify replication, after Kapritsos, Wang, Quema, Clement, Alvisi and
//! Dahlin, "All about Eve: Execute-Verify Replication for Multi-Core Servers". Replicas
//! execute a batch's requests in parallel first and then check that they agree, by comparing
//! a token of the state and the replies each reached; when they do not, they roll back and
//! run the batch again in order.
//!
//! - [`tree`]: the application state as named objects in a copy-on-write Merkle tree
//!   ([`ObjectTree`]): a snapshot per batch costs one pointer copy (a rollback restores it),
//!   the root digest is the same for the same objects whatever the order they were written
//!   in, rehashing touches only the nodes a batch changed (subtrees in parallel), and two
//!   trees name the objects they differ in without visiting the subtrees they share, and a
//!   fetcher gets only the differing subtrees of another's tree ([`TreeSync`]).
//! - [`mixer`]: the application's guess of what each request reads and writes ([`Mixer`]),
//!   and [`mix`], which splits a batch into parallel batches of requests that do not
//!   conflict.
//! - [`service`], [`context`] and `working`: what an application implements
//!   ([`EveService`]), what a request sees while it runs ([`RequestContext`]), and the
//!   batch's working state, which notes the conflicts a mixer missed.
//! - [`batch`] and [`token`]: the primary's numbered batches with their non-deterministic
//!   inputs, and the token that sums up a batch's outcome.
//! - [`executor`]: runs batches in parallel or in order, keeps the states not yet verified,
//!   commits, rolls back or adopts a fetched state.
//! - [`quorum`]: the sizes and quorums of a deployment tolerating `u` and `r` faults.
//! - [`verify`]: the verifiers' decision of the asynchronous BFT deployment (which token a
//!   batch commits with, or that it rolls back), as a deterministic state machine over the
//!   verifiers' agreed order of VERIFYs.
//! - [`stage`]: a server's executor and state transfer, doing the work a protocol core
//!   asks for ([`Work`]) and telling it what was done ([`Done`]).
//! - [`pb`]: the primary-backup deployment's protocol, a sans-IO state machine.
//! - [`bft`]: the asynchronous BFT deployment's executor protocol, a sans-IO state machine,
//!   and a deterministic driver of a whole deployment with lying executors and verifiers.
//! - [`services`]: the micro-benchmark service and a deliberately racy one.

pub mod batch;
pub mod bft;
pub mod context;
pub mod error;
pub mod executor;
pub mod mixer;
pub mod pb;
pub mod quorum;
pub mod service;
pub mod services;
pub mod stage;
pub mod token;
pub mod tree;
pub mod verify;
pub(crate) mod working;

pub use batch::{Batch, NonDeterminism};
pub use context::RequestContext;
pub use error::EveError;
pub use executor::{Executed, Execution, Executor, MissedConflicts, Stable, run_in_order};
pub use mixer::{Access, Mixed, Mixer, mix};
pub use quorum::{Agreement, Resilience, agree};
pub use service::EveService;
pub use stage::{Done, Stage, StageOutput, Work};
pub use token::{Token, TokenProof};
pub use tree::{HashReport, NodeSummary, ObjectId, ObjectTree, Prefix, SyncError, TreeSync};
