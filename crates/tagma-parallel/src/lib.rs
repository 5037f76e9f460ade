//! `tagma-parallel`: executing decided batches on several cores.
//!
//! Ordering stays sequential; inside a replica, requests that do not conflict run at once.
//! - [`access`]: conflict classes ([`Access`]) and the client-chosen conflict groups
//!   ([`Group`], [`Groups`]).
//! - [`sched`]: the schedulers — sequential, a barrier scheduler, and a
//!   dependency-graph scheduler — behind one [`Scheduler::run`], and the [`ParallelService`]
//!   trait a service implements to run in parallel.
//! - [`list`]: a linked list of integers, the benchmark service.
//! - [`replica`]: a parallel service as a replica's `tagma_exec::Service` ([`ParallelReplica`]);
//!   with client-chosen groups, each payload is a [`GroupEnvelope`] (`tagma-wire`).
//!
//! Every policy gives the replies and final state of sequential execution in decision order
//! whenever the classification is right; `tests/equivalence.rs` checks it on random
//! workloads and classifications, and shows a wrong classification caught.

pub mod access;
pub mod list;
pub mod replica;
pub mod sched;

pub use access::{Access, Class, Group, GroupError, Groups};
pub use replica::{Classify, ParallelReplica, ParallelState};
pub use sched::{ParallelService, Policy, Scheduler, Task};
pub use tagma_exec::FrozenSnapshot;
pub use tagma_wire::GroupEnvelope;

/// The tasks of a batch classified by the service itself (the graph scheduler's input); the
/// barrier policy gets the group that matches each footprint ([`group_of`]).
pub fn classify<S: ParallelService>(service: &S, ops: &[bytes::Bytes]) -> Vec<Task> {
    ops.iter()
        .map(|op| {
            let access = service.classify(op);
            Task {
                group: group_of(&access),
                op: op.clone(),
                access,
            }
        })
        .collect()
}

/// The group for a footprint: none for no class, all for `all`; a request of one class goes
/// to that class's worker (`Group::Worker(class)`, taken modulo the workers); several
/// classes conflict with everything (groups have no finer way to say it).
pub fn group_of(access: &Access) -> Group {
    let mut classes = access.reads.iter().chain(&access.writes);
    match (access.all, classes.next(), classes.next()) {
        (true, _, _) => Group::All,
        (false, None, _) => Group::None,
        (false, Some(c), None) => Group::Worker((*c % u64::from(u32::MAX)) as u32),
        (false, Some(_), Some(_)) => Group::All,
    }
}
