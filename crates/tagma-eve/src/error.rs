//! Errors of the execute-verify engine.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum EveError {
    #[error("batch {got} arrived where batch {expected} was next")]
    OutOfOrder { expected: u64, got: u64 },
    #[error("{pending} executed batches await verification, the most allowed (raise pending_max)")]
    PipelineFull { pending: usize },
    #[error("batch {seq} is not executed and awaiting verification")]
    NotPending { seq: u64 },
    #[error(
        "batch {seq} committed with another token than this executor computed: fetch the state"
    )]
    TokenMismatch { seq: u64 },
    #[error("an executor needs at least one thread")]
    NoThreads,
    #[error("the executor's thread pool could not start: {0}")]
    Pool(String),
    #[error("resilience u = {u}, r = {r}: u must be at least 1")]
    Resilience { u: usize, r: usize },
}
