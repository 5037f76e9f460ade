//! Typed errors of a host process and of the demo's coordinator.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum HostError {
    #[error("cannot read or write {path}: {error}")]
    Io { path: String, error: String },
    #[error("invalid plan: {0}")]
    Plan(String),
    #[error("cannot listen on {addr}: {error} (is another process using the port?)")]
    Listen { addr: String, error: String },
    #[error("{0}")]
    Node(#[from] tagma_vcube::VcubeError),
    #[error("host {index} failed: {why}")]
    Host { index: usize, why: String },
}
