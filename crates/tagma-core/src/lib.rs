//! `tagma-core`: the sans-IO replica.
//!
//! The core orders client requests with Mod-SMaRt (Sousa, Bessani: From Byzantine Consensus
//! to BFT State Machine Replication: A Latency-Optimal Transformation). It never touches sockets,
//! clocks, threads or OS randomness: callers pass inputs with the current time `now_ms`, then
//! drain [`Action`]s with [`Replica::poll_action`] and carry them out. The production runtime
//! (`tagma-node`) and the deterministic simulator are two drivers of the same core.
//!
//! Modules: [`clients`] (per-client sessions, sequence numbers, pending queues, batch
//! selection), [`replica`] (the consensus state machine and its calling protocol), [`proof`]
//! (signed ACCEPTs and decision proofs), [`value_choice`] (the leader change's value choice), [`error`] (why an input is refused),
//! [`transfer`] (the fetching side of state transfer). The configuration, quorum arithmetic
//! and views come from `tagma-config` and are re-exported as [`config`], [`quorum`] and
//! [`view`].

pub mod clients;
pub mod error;
pub mod proof;
pub mod replica;
pub mod transfer;
pub mod value_choice;

pub use replica::{
    Action, Allowance, AnswerBudget, CoreStats, Decision, Input, LOG_LAG_MAX, PeerInput,
    PreparedBatch, ProposalFault, Recovered, Rejection, Replica, ReplicaParams, Resume, Start,
    WRITE_SET_MAX,
};
pub use tagma_config::{Config, ConfigError, Mode, Quorums, ValidConfig};
pub use tagma_config::{config, eve, quorum, view};
