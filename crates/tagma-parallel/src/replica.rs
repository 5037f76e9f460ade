//! A parallel service as a replica's [`tagma_exec::Service`]: the executor hands it each run
//! of ordered requests between view changes ([`Service::execute_ordered_batch`]), and the
//! scheduler runs them on its workers. Checkpoints and view changes happen between runs, when
//! no request runs (a reconfiguration barrier).
//!
//! Requests are classified by the service ([`Classify::Service`], the graph scheduler's
//! input) or by the group the client chose ([`Classify::Groups`]): then each
//! payload is a [`GroupEnvelope`] carrying the group before the operation. Clients may be faulty,
//! so a group is trusted only as far as it covers the service's own classification of the
//! request ([`Access::covers`]); otherwise the request conflicts with everything.

use bytes::Bytes;
use tagma_exec::{Context, FrozenSnapshot, Service, ServiceError};
use tagma_wire::{Decode, Digest, GroupEnvelope};

use crate::access::{Access, Group};
use crate::sched::{ParallelService, Scheduler, Task};

/// What a parallel service needs besides execution to be a replica's state.
pub trait ParallelState: ParallelService + Send + 'static {
    /// A read-only request, executed without ordering.
    fn execute_unordered(&self, op: &Bytes) -> Bytes;
    /// A complete, deterministic serialisation of the state.
    fn snapshot(&self) -> Bytes;
    /// A copy of the state that [`ParallelState::snapshot`] can be computed from later, on
    /// another thread (see [`Service::freeze`]); `None` (the default): checkpoints serialise
    /// the state on the execution thread.
    fn freeze(&self) -> Option<FrozenSnapshot> {
        None
    }
    /// Replaces the state with a snapshot.
    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), String>;
}

/// Where a request's conflict classes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classify {
    /// The service's classifier ([`ParallelService::classify`]).
    Service,
    /// The group the client chose (`invoke_parallel(request, group)`): payloads are
    /// [`GroupEnvelope`]s.
    Groups,
}

/// A parallel service running as a replica's service.
#[derive(Debug)]
pub struct ParallelReplica<P> {
    pub state: P,
    scheduler: Scheduler,
    classify: Classify,
}

impl<P: ParallelState> ParallelReplica<P> {
    pub fn new(state: P, scheduler: Scheduler, classify: Classify) -> Self {
        ParallelReplica {
            state,
            scheduler,
            classify,
        }
    }

    /// The task of one payload: a request that is no envelope (with [`Classify::Groups`])
    /// conflicts with everything and reaches the service as it is, which refuses it alike on
    /// every replica.
    fn task(&self, payload: &Bytes) -> Task {
        match self.classify {
            Classify::Service => {
                let access = self.state.classify(payload);
                Task {
                    group: crate::group_of(&access),
                    op: payload.clone(),
                    access,
                }
            }
            Classify::Groups => {
                let (group, op) = GroupEnvelope::decode(payload)
                    .map_or((Group::All, payload.clone()), |e| (e.group, e.op));
                let declared = self.scheduler.groups().access(group);
                // Clients may be faulty: a group that does not cover what the service itself
                // says the request touches (a write sent as conflict-free) would let correct
                // replicas run conflicting requests in different orders. Such a request
                // conflicts with everything instead.
                if declared.covers(&self.state.classify(&op)) {
                    Task {
                        access: declared,
                        group,
                        op,
                    }
                } else {
                    Task {
                        access: Access::all(),
                        group: Group::All,
                        op,
                    }
                }
            }
        }
    }

    fn op<'a>(&self, payload: &'a Bytes) -> std::borrow::Cow<'a, Bytes> {
        match self.classify {
            Classify::Service => std::borrow::Cow::Borrowed(payload),
            Classify::Groups => std::borrow::Cow::Owned(
                GroupEnvelope::decode(payload).map_or_else(|_| payload.clone(), |e| e.op),
            ),
        }
    }
}

impl<P: ParallelState> Service for ParallelReplica<P> {
    fn execute_ordered(&mut self, request: &Bytes, _ctx: &Context) -> Bytes {
        self.state.execute(&self.op(request))
    }

    fn execute_ordered_batch(&mut self, requests: &[(Bytes, Context)]) -> Vec<Bytes> {
        let tasks: Vec<Task> = requests.iter().map(|(p, _)| self.task(p)).collect();
        self.scheduler.run(&self.state, &tasks)
    }

    fn execute_unordered(&self, request: &Bytes, _ctx: &Context) -> Bytes {
        self.state.execute_unordered(&self.op(request))
    }

    fn snapshot(&self) -> Bytes {
        self.state.snapshot()
    }

    fn freeze(&self) -> Option<FrozenSnapshot> {
        self.state.freeze()
    }

    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError> {
        self.state
            .install_snapshot(snapshot)
            .map_err(ServiceError::InvalidSnapshot)
    }

    fn state_digest(&self) -> Digest {
        Digest(self.state.digest())
    }
}
