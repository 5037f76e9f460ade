//! `tagma-exec`: the [`Service`] trait that applications implement, the sequential executor
//! that applies decided batches to it, the bounded per-client reply cache, and a conformance
//! suite every `Service` must pass.
//!
//! TO BE COMPLETED (helper): `todo!()` bodies, the conformance suite, tests.

use bytes::Bytes;
use tagma_wire::{Batch, ClientId, ConsensusId, Digest, Reply, RequestSeq, ViewId};

/// What a service learns about the request it executes. Time and randomness reach a service
/// only through here, so execution stays deterministic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context {
    pub client: ClientId,
    pub seq: RequestSeq,
    /// The consensus instance that ordered the request (`None` for unordered requests).
    pub cid: Option<ConsensusId>,
    /// Leader-chosen, consensus-agreed timestamp of the batch (ms since the Unix epoch).
    pub timestamp_ms: u64,
    /// Deterministic per-request seed: derived from the batch seed and the request's index.
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    #[error("invalid snapshot: {0}")]
    InvalidSnapshot(String),
}

/// A deterministic replicated service. Same initial state + same sequence of ordered requests
/// ⇒ same state and same replies on every replica.
pub trait Service: Send + 'static {
    /// Executes a totally ordered request and returns the reply bytes.
    fn execute_ordered(&mut self, request: &Bytes, ctx: &Context) -> Bytes;
    /// Executes a read-only request without ordering. Must not change the state.
    fn execute_unordered(&self, request: &Bytes, ctx: &Context) -> Bytes;
    /// A complete, deterministic serialisation of the state.
    fn snapshot(&self) -> Bytes;
    /// Replaces the state with a snapshot.
    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError>;
    /// Deterministic digest of the state: equal on replicas that executed the same requests.
    fn state_digest(&self) -> Digest;
}

/// Applies decided batches to a service in consensus order, tracking the execution position
/// and caching recent replies per client for retransmissions.
pub struct Executor<S: Service> {
    pub service: S,
    // executed_instances, executed_requests, reply cache, view
}

impl<S: Service> Executor<S> {
    pub fn new(
        service: S,
        view: ViewId,
        reply_cache_per_client: usize,
        reply_cache_clients_max: usize,
    ) -> Self {
        todo!()
    }
    /// Executes every request of the batch decided in `cid` in order (cid must be the next
    /// instance: asserted), caches the replies and returns them in batch order.
    pub fn execute_batch(&mut self, cid: ConsensusId, batch: &Batch) -> Vec<Reply> {
        todo!()
    }
    /// Executes an unordered request against the current state.
    pub fn execute_unordered(
        &self,
        client: ClientId,
        seq: RequestSeq,
        payload: &Bytes,
        now_ms: u64,
    ) -> Reply {
        todo!()
    }
    /// The cached reply for an ordered request already executed, if still cached.
    pub fn cached_reply(&self, client: ClientId, seq: RequestSeq) -> Option<Reply> {
        todo!()
    }
    pub fn executed_instances(&self) -> u64 {
        todo!()
    }
    pub fn executed_requests(&self) -> u64 {
        todo!()
    }
    pub fn state_digest(&self) -> Digest {
        self.service.state_digest()
    }
}
