//! Typed errors of the simulator.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SimError {
    #[error("invalid workload: {0}")]
    Workload(String),
    #[error("{0}")]
    Node(#[from] tagma_vcube::VcubeError),
}
