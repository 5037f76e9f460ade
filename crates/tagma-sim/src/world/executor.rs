//! A replica's executor, whatever service the run gives it: what the world needs of a
//! [`tagma_exec::Executor`], as one object-safe trait ([`SimExecutor`]) over the service, and
//! the executor of each [`SimService`] ([`new_executor`]).
//!
//! - Key-value runs: the store as a parallel service, each decided batch run in an order of
//!   its own (a seeded random order that respects the conflicts between requests, as a
//!   parallel run could take), so that every seed also checks that parallel execution cannot
//!   make correct replicas diverge.
//! - Coordination-service runs: [`SpaceService`] on one thread (the simulator runs no
//!   threads; that its spaces give the same replies and state on several is the service's
//!   own test), with the workload's space created at genesis by an ordered request of its
//!   administrator.

use bytes::Bytes;
use tagma_core::view::Membership;
use tagma_exec::{Context, Executor, Service, ServiceError};
use tagma_kv::parallel::ParallelKv;
use tagma_space_service::{SpaceLimits, SpaceService};
use tagma_wire::{
    Batch, CheckpointInfo, ClientId, ConsensusId, DecidedInstance, Digest, Reply, RequestSeq, View,
    ViewId,
};

use crate::{kv_client, options::SimService, space_client};

/// What the world asks of a replica's executor (see [`tagma_exec::Executor`] for each).
pub(crate) trait SimExecutor {
    fn execute_batch(&mut self, cid: ConsensusId, batch: &Batch) -> Vec<Reply>;
    fn covers(&self, cid: ConsensusId) -> bool;
    fn checkpoint(&self) -> Bytes;
    fn checkpoint_digest(&self) -> Digest;
    fn state_digest(&self) -> Digest;
    fn cached_reply(&self, client: ClientId, seq: RequestSeq) -> Option<Reply>;
    fn execute_unordered(
        &self,
        client: ClientId,
        seq: RequestSeq,
        payload: &Bytes,
        now_ms: u64,
    ) -> Reply;
    fn restore(&mut self, checkpoint: &Bytes) -> Result<(), ServiceError>;
    fn executed_instances(&self) -> u64;
    fn last_timestamp_ms(&self) -> u64;
    fn sessions(&self) -> Vec<(ClientId, RequestSeq)>;
    fn members(&self) -> Option<&View>;
    fn install_fetched(
        &mut self,
        state: &Bytes,
        checkpoint: Option<&CheckpointInfo>,
        log: &[DecidedInstance],
        vouchers: &[CheckpointInfo],
        needed: usize,
    ) -> Result<usize, String>;
    fn next_due_ms(&self) -> Option<u64>;
    /// Executes `request` outside the order, at agreed time 0: a write nobody ordered (what a
    /// lying disk or state source adds to a true state).
    fn execute_unordained(&mut self, request: &Bytes);
}

impl<S: Service> SimExecutor for Executor<S> {
    fn execute_batch(&mut self, cid: ConsensusId, batch: &Batch) -> Vec<Reply> {
        Executor::execute_batch(self, cid, batch)
    }
    fn covers(&self, cid: ConsensusId) -> bool {
        Executor::covers(self, cid)
    }
    fn checkpoint(&self) -> Bytes {
        Executor::checkpoint(self)
    }
    fn checkpoint_digest(&self) -> Digest {
        Executor::checkpoint_digest(self)
    }
    fn state_digest(&self) -> Digest {
        Executor::state_digest(self)
    }
    fn cached_reply(&self, client: ClientId, seq: RequestSeq) -> Option<Reply> {
        Executor::cached_reply(self, client, seq)
    }
    fn execute_unordered(
        &self,
        client: ClientId,
        seq: RequestSeq,
        payload: &Bytes,
        now_ms: u64,
    ) -> Reply {
        Executor::execute_unordered(self, client, seq, payload, now_ms)
    }
    fn restore(&mut self, checkpoint: &Bytes) -> Result<(), ServiceError> {
        Executor::restore(self, checkpoint)
    }
    fn executed_instances(&self) -> u64 {
        Executor::executed_instances(self)
    }
    fn last_timestamp_ms(&self) -> u64 {
        Executor::last_timestamp_ms(self)
    }
    fn sessions(&self) -> Vec<(ClientId, RequestSeq)> {
        Executor::sessions(self)
    }
    fn members(&self) -> Option<&View> {
        Executor::members(self)
    }
    fn install_fetched(
        &mut self,
        state: &Bytes,
        checkpoint: Option<&CheckpointInfo>,
        log: &[DecidedInstance],
        vouchers: &[CheckpointInfo],
        needed: usize,
    ) -> Result<usize, String> {
        Executor::install_fetched(self, state, checkpoint, log, vouchers, needed)
    }
    fn next_due_ms(&self) -> Option<u64> {
        Executor::next_due_ms(self)
    }
    fn execute_unordained(&mut self, request: &Bytes) {
        self.service
            .execute_ordered(request, &context(ClientId(0), 0));
    }
}

fn context(client: ClientId, timestamp_ms: u64) -> Context {
    Context {
        client,
        seq: RequestSeq(0),
        cid: None,
        timestamp_ms,
        seed: 0,
    }
}

/// A replica's executor for `service`, in the initial view of `membership`, with the
/// replica's execution-order seed.
pub(crate) fn new_executor(
    service: SimService,
    membership: &Membership,
    order_seed: u64,
) -> Box<dyn SimExecutor> {
    match service {
        SimService::Kv => {
            let scheduler = tagma_parallel::Scheduler::new(
                tagma_parallel::Policy::Shuffled { seed: order_seed },
                1,
                tagma_parallel::Groups::default(),
            );
            let service = tagma_parallel::ParallelReplica::new(
                ParallelKv::new(),
                scheduler,
                tagma_parallel::Classify::Service,
            );
            Box::new(with_membership(service, membership))
        }
        SimService::Space => {
            let mut service = SpaceService::new(SpaceLimits::default())
                .expect("the default limits work")
                .with_threads(1)
                .expect("one thread starts no worker");
            let admin = ClientId::new(space_client::GENESIS_PRINCIPAL, 1);
            let created =
                service.execute_ordered(&space_client::genesis_request(), &context(admin, 0));
            debug_assert_eq!(
                created,
                tagma_space::SpaceReply::Created.encode(),
                "the genesis space is created"
            );
            Box::new(with_membership(service, membership))
        }
    }
}

fn with_membership<S: Service>(service: S, membership: &Membership) -> Executor<S> {
    Executor::new(service, ViewId(0), 4, 64).with_membership(membership.clone())
}

/// The request that adds a write nobody ordered to a state of `service`.
pub(crate) fn lie_request(service: SimService) -> Bytes {
    match service {
        SimService::Kv => kv_client::lie_request(),
        SimService::Space => space_client::lie_request(),
    }
}
