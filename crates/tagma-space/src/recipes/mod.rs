//! Coordination recipes on the tuple space, as library functions: what ZooKeeper and etcd
//! users build from their primitives, here from `cas`, `replace`, leases and blocking reads.
//!
//! - [`lock`]: mutual exclusion with a lease (a dead holder's lock frees itself) and a
//!   fencing revision;
//! - [`election`]: leader election on the same tuple, with terms and observation;
//! - [`barrier`]: N parties wait for each other, round after round;
//! - [`queue`]: a FIFO work queue whose items are taken exactly once;
//! - [`counter`]: a shared counter;
//! - [`config`]: a versioned configuration store with change notification.
//!
//! Every recipe names its tuples with a tag and the recipe's name, so several recipes share
//! one space without seeing each other's tuples.

pub mod barrier;
pub mod config;
pub mod counter;
pub mod election;
pub mod lock;
pub mod queue;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Field, Pattern, TypedTemplate, TypedTuple};

/// A tuple of the given fields.
pub(crate) fn tuple(fields: impl IntoIterator<Item = Field>) -> TypedTuple {
    TypedTuple(fields.into_iter().collect())
}

/// A template of the given patterns.
pub(crate) fn template(patterns: impl IntoIterator<Item = Pattern>) -> TypedTemplate {
    TypedTemplate(patterns.into_iter().collect())
}

pub(crate) fn text(s: &str) -> Field {
    Field::Str(s.to_owned())
}

pub(crate) fn is(field: Field) -> Pattern {
    Pattern::Is(field)
}

/// How long until the agreed time `at_ms` by this machine's clock (at least `floor`): the
/// agreed time follows the leader's clock, which may differ from this one by the replicas'
/// `clock_skew_max_ms` at most.
pub(crate) fn until(at_ms: u64, floor: Duration) -> Duration {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Duration::from_millis(at_ms.saturating_sub(now_ms)).max(floor)
}
