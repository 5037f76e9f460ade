//! `tagma-config`: the cluster's configuration, shared by replicas and clients.
//!
//! - [`config`]: the validated `tagma.toml`, with every limit and its default;
//! - [`eve`]: its `[eve]` section, the settings of execute-verify replication;
//! - [`position`]: where a key or an error is in the file (line, column, key);
//! - [`quorum`]: all quorum arithmetic ([`Mode`], [`Quorums`]);
//! - [`view`]: views and the administrator's signed view changes (`judge`, `apply`,
//!   `replay`, [`view::Membership`]).
//!
//! Nothing here knows the consensus protocol's messages; like the core, the crate does no IO
//! and reads no clock (`clippy.toml`), so every replica judges a view change alike.

pub mod config;
mod documented;
pub mod eve;
pub mod position;
pub mod quorum;
pub mod view;

pub use config::{Config, ConfigError, ValidConfig};
pub use quorum::{Mode, Quorums};
