//! Leader election: the leader holds the election's lock (a [`Lock`] whose tuples are tagged
//! `leader`) and renews its lease while it leads; a leader that dies or stops renewing loses
//! the lease, and a candidate waiting in [`Election::campaign`] wins. Each term is named by
//! the revision of its leader tuple, which only grows: a fencing token for what the leader
//! does.

use std::time::Duration;

use super::lock::{Held, Lock};
use crate::{SpaceClient, SpaceClientError};

/// A won election: the term (fencing token) and when its lease ends unless renewed.
pub type Term = Held;

/// An election among the clients that campaign for `name` in a space.
pub struct Election<'a> {
    lock: Lock<'a>,
}

impl<'a> Election<'a> {
    /// The election `name` in `space`; a leader's lease lasts `lease` unless renewed.
    pub fn new(client: &'a SpaceClient, space: &str, name: &str, lease: Duration) -> Self {
        Election {
            lock: Lock::tagged(client, space, name, lease, "leader"),
        }
    }

    /// Campaigns until this client leads or `timeout` passes.
    pub fn campaign(&self, timeout: Duration) -> Result<Option<Term>, SpaceClientError> {
        self.lock.acquire(timeout)
    }

    /// Keeps leading (renews the lease); false if the lease had run out and leadership is
    /// lost.
    pub fn heartbeat(&self) -> Result<bool, SpaceClientError> {
        self.lock.renew()
    }

    /// Steps down, waking the other candidates.
    pub fn resign(&self, term: Term) -> Result<bool, SpaceClientError> {
        self.lock.release(term)
    }

    /// The current leader (its client id) and term, if any.
    pub fn leader(&self) -> Result<Option<(i64, Term)>, SpaceClientError> {
        self.lock.holder()
    }
}
