//! The primary-backup deployment of execute-verify replication: two servers tolerating a
//! crash. The primary orders client requests into numbered batches with their
//! non-deterministic inputs and sends each to the backup (EXECUTE-BATCH); both execute it
//! in parallel; the backup returns its token. Equal tokens commit the batch and both servers
//! reply; different tokens make both roll back to the last committed state and run the
//! batch again in order. When the primary falls silent for `takeover_ms`, the backup
//! commits what it executed and sent its token for and takes over in the next view; a
//! server alone runs its batches in order; a server that comes back fetches the committed
//! state incrementally from the one serving and becomes its backup.
//!
//! - [`core`]: the protocol, a sans-IO state machine ([`PbCore`]): inputs in through
//!   [`PbCore::handle`], which takes the time, actions out of [`PbCore::poll_action`]. It
//!   holds no application state.
//! - [`harness`]: a deterministic driver of a pair (virtual time, drawn link delays,
//!   faults, checks), for the tests and the simulator.
//! - `sessions`: the replies kept per client, for exactly-once answers across takeovers.
//!
//! A server's state lives in a [`Stage`](crate::Stage), which carries out the core's
//! execution and state-transfer work ([`Action::Stage`]).
//!
//! Two servers cannot tell a crashed peer from a cut link: if the link between them fails
//! while both run, each serves alone until the other's messages reach it again (a server
//! that hears of a later view steps down and fetches the state). Like the paper's
//! deployment, it assumes the servers' link is reliable, FIFO, and timely within
//! `takeover_ms`.

pub mod core;
pub mod harness;
pub(crate) mod sessions;

pub use self::core::{Action, Input, PbConfig, PbCore, PbStats, Role};

#[cfg(test)]
mod tests;
