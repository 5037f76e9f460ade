//! `tagma-core`: the sans-IO replica.
//!
//! The core orders client requests with Mod-SMaRt (SPEC §3). It never touches sockets,
//! clocks, threads or OS randomness: callers pass inputs with the current time `now_ms`, then
//! drain [`Action`]s with [`Replica::poll_action`] and carry them out. The production runtime
//! (`tagma-node`) and the deterministic simulator are two drivers of the same core.
//!
//! Modules: [`config`] (the validated `tagma.toml`), [`quorum`] (all quorum arithmetic),
//! [`clients`] (per-client sessions, sequence numbers, pending queues, batch selection),
//! [`replica`] (the consensus state machine and its calling protocol).

pub mod clients;
pub mod config;
pub mod error;
pub mod proof;
pub mod quorum;
pub mod replica;
pub mod transfer;
pub mod value_choice;
pub mod view;

pub use config::{Config, ConfigError, ValidConfig};
pub use quorum::{Mode, Quorums};
pub use replica::{
    Action, CoreStats, Decision, Input, PeerInput, PreparedBatch, ProposalFault, Recovered,
    Rejection, Replica, ReplicaParams, Resume, Start,
};
