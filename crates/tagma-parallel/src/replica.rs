//! A parallel service as a replica's [`tagma_exec::Service`]: the executor hands it each run
//! of ordered requests between view changes ([`Service::execute_ordered_batch`]), and the
//! scheduler runs them on its workers. Checkpoints and view changes happen between runs, when
//! no request runs (the seed's reconfiguration barrier).
//!
//! Requests are classified by the service ([`Classify::Service`], the graph scheduler's
//! input) or by the group the client chose ([`Classify::Groups`], the seed's model): then each
//! payload is an [`envelope`] carrying the group before the operation. Clients may be faulty,
//! so a group is trusted only as far as it covers the service's own classification of the
//! request ([`Access::covers`]); otherwise the request conflicts with everything.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tagma_exec::{Context, FrozenSnapshot, Service, ServiceError};
use tagma_wire::Digest;

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
    /// [`envelope`]s.
    Groups,
}

/// A client's request with its conflict group: `u8` tag (0 none, 1 all, 2 a worker's group,
/// 3 a registered group), for tags 2 and 3 the id `u32` LE, then the operation.
pub fn envelope(group: Group, op: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + op.len());
    match group {
        Group::None => out.put_u8(0),
        Group::All => out.put_u8(1),
        Group::Worker(t) => {
            out.put_u8(2);
            out.put_u32_le(t);
        }
        Group::Custom(id) => {
            out.put_u8(3);
            out.put_u32_le(id);
        }
    }
    out.put_slice(op);
    out.freeze()
}

/// The group and operation of an [`envelope`]; `None` if it is not one.
pub fn open_envelope(payload: &Bytes) -> Option<(Group, Bytes)> {
    let mut b = payload.clone();
    if !b.has_remaining() {
        return None;
    }
    let group = match b.get_u8() {
        0 => Group::None,
        1 => Group::All,
        tag @ (2 | 3) => {
            if b.remaining() < 4 {
                return None;
            }
            let id = b.get_u32_le();
            if tag == 2 {
                Group::Worker(id)
            } else {
                Group::Custom(id)
            }
        }
        _ => return None,
    };
    Some((group, b))
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
                let (group, op) = open_envelope(payload).unwrap_or((Group::All, payload.clone()));
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
                open_envelope(payload).map_or_else(|| payload.clone(), |(_, op)| op),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_carry_the_group() {
        for g in [Group::None, Group::All, Group::Worker(3), Group::Custom(77)] {
            let e = envelope(g, b"op");
            assert_eq!(open_envelope(&e), Some((g, Bytes::from_static(b"op"))));
        }
        assert_eq!(open_envelope(&Bytes::from_static(b"\x02\x01")), None);
        assert_eq!(open_envelope(&Bytes::from_static(b"\x09")), None);
        assert_eq!(open_envelope(&Bytes::new()), None);
    }
}
