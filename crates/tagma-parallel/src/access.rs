//! What a request may conflict with: its conflict classes.
//!
//! Two requests conflict when one writes a class the other reads or writes; a request that
//! touches everything (`all`) conflicts with every request. Requests that do not conflict may
//! run in any order, or at once, with the same result; conflicting ones must run in decision
//! order. The service declares the classes of each request ([`crate::ParallelService::classify`]);
//! the client-chosen conflict groups ([`Group`]) are one way to name them.

/// A conflict class (a key, a partition, a tuple arity, a worker's group…), named by the
/// service.
pub type Class = u64;

/// The conflict footprint of one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// Conflicts with every other request (`CONFLICT_ALL`).
    pub all: bool,
    /// Classes read: a request reading a class conflicts only with those writing it.
    pub reads: Vec<Class>,
    /// Classes written: conflicts with every request reading or writing them.
    pub writes: Vec<Class>,
}

impl Access {
    /// Conflicts with nothing (`CONFLICT_NONE`).
    pub fn none() -> Self {
        Access::default()
    }

    /// Conflicts with everything.
    pub fn all() -> Self {
        Access {
            all: true,
            ..Access::default()
        }
    }

    pub fn reads(classes: impl IntoIterator<Item = Class>) -> Self {
        Access {
            reads: classes.into_iter().collect(),
            ..Access::default()
        }
    }

    pub fn writes(classes: impl IntoIterator<Item = Class>) -> Self {
        Access {
            writes: classes.into_iter().collect(),
            ..Access::default()
        }
    }

    /// Whether this footprint declares at least everything `other` touches: every request
    /// that conflicts with `other` also conflicts with this one.
    pub fn covers(&self, other: &Access) -> bool {
        self.all
            || (!other.all
                && other.writes.iter().all(|c| self.writes.contains(c))
                && other
                    .reads
                    .iter()
                    .all(|c| self.reads.contains(c) || self.writes.contains(c)))
    }

    /// Whether the two requests may not run concurrently (or out of order).
    pub fn conflicts_with(&self, other: &Access) -> bool {
        self.all
            || other.all
            || self
                .writes
                .iter()
                .any(|c| other.writes.contains(c) || other.reads.contains(c))
            || other.writes.iter().any(|c| self.reads.contains(c))
    }
}

/// The conflict groups a client chooses per request (`invoke_parallel(request, group)`): the
/// type and its encoding are `tagma-wire`'s ([`tagma_wire::GroupEnvelope`]); [`Groups`]
/// gives each its conflict classes.
pub use tagma_wire::Group;

/// The groups registered on a parallel replica (`add_execution_conflict_group`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Groups {
    custom: std::collections::BTreeMap<u32, Vec<u32>>,
}

/// A group registration that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("group {0} names no worker")]
    Empty(u32),
    #[error(
        "group {group} names worker {worker}, but there are only {threads} workers (0..{threads})"
    )]
    NoSuchWorker {
        group: u32,
        worker: u32,
        threads: u32,
    },
    #[error("group {0} is already registered")]
    Taken(u32),
}

impl Groups {
    /// Registers group `id` as the workers `workers` of `threads`
    /// (`addExecutionConflictGroup`).
    pub fn add(&mut self, id: u32, workers: &[u32], threads: u32) -> Result<(), GroupError> {
        if workers.is_empty() {
            return Err(GroupError::Empty(id));
        }
        if let Some(&worker) = workers.iter().find(|w| **w >= threads) {
            return Err(GroupError::NoSuchWorker {
                group: id,
                worker,
                threads,
            });
        }
        if self.custom.contains_key(&id) {
            return Err(GroupError::Taken(id));
        }
        let mut workers = workers.to_vec();
        workers.sort_unstable();
        workers.dedup();
        self.custom.insert(id, workers);
        Ok(())
    }

    /// The workers of a registered group (`None` for an unknown id, which conflicts with
    /// everything, as `CONFLICT_ALL` does).
    pub fn workers(&self, id: u32) -> Option<&[u32]> {
        self.custom.get(&id).map(Vec::as_slice)
    }

    /// The footprint of a request of `group`: a worker's group is the class of that worker; a
    /// registered group writes the classes of all its workers; an unknown one, like `All`,
    /// conflicts with everything.
    pub fn access(&self, group: Group) -> Access {
        match group {
            Group::None => Access::none(),
            Group::All => Access::all(),
            Group::Worker(t) => Access::writes([u64::from(t)]),
            Group::Custom(id) => match self.workers(id) {
                Some(ws) => Access::writes(ws.iter().map(|w| u64::from(*w))),
                None => Access::all(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_follow_reads_and_writes() {
        let r1 = Access::reads([1]);
        let w1 = Access::writes([1]);
        let w2 = Access::writes([2]);
        assert!(!r1.conflicts_with(&Access::reads([1])));
        assert!(r1.conflicts_with(&w1) && w1.conflicts_with(&r1));
        assert!(w1.conflicts_with(&w1));
        assert!(!w1.conflicts_with(&w2));
        assert!(Access::all().conflicts_with(&Access::none()));
        assert!(!Access::none().conflicts_with(&w1));
        assert!(w1.covers(&r1) && w1.covers(&w1) && !r1.covers(&w1));
        assert!(Access::all().covers(&w2) && !w2.covers(&Access::all()));
        assert!(w1.covers(&Access::none()) && !Access::none().covers(&w1));
    }

    #[test]
    fn groups_map_to_classes() {
        let mut g = Groups::default();
        g.add(10, &[1, 0], 4).unwrap();
        assert_eq!(g.workers(10), Some(&[0, 1][..]));
        assert_eq!(
            g.add(11, &[4], 4),
            Err(GroupError::NoSuchWorker {
                group: 11,
                worker: 4,
                threads: 4
            })
        );
        assert_eq!(g.add(10, &[2], 4), Err(GroupError::Taken(10)));
        assert_eq!(g.add(12, &[], 4), Err(GroupError::Empty(12)));
        let custom = g.access(Group::Custom(10));
        assert!(custom.conflicts_with(&g.access(Group::Worker(1))));
        assert!(!custom.conflicts_with(&g.access(Group::Worker(2))));
        assert!(
            g.access(Group::Custom(99)).all,
            "unknown groups conflict with all"
        );
        assert!(!g.access(Group::None).conflicts_with(&custom));
    }
}
