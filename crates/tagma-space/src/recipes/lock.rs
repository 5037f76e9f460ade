//! A mutual-exclusion lock with a lease.
//!
//! The lock is the tuple `("lock", name, holder)`: acquiring it is a `cas` that inserts it
//! with a lease if no such tuple exists. The holder renews the lease while it works and
//! releases the lock by taking its tuple, then inserting `("lock-released", name, revision)`
//! (with a short lease) to wake the waiters. A waiter blocks in an `rd` of that release
//! tuple until the holder's lease ends, so it wakes when the lock is released and when its
//! holder died (its tuple vanishes with the lease, in agreed time).
//!
//! The revision the service assigned to the lock tuple is the hold's fencing token: give it
//! to the resource the lock protects, which refuses any token lower than the newest it has
//! seen. A lease alone never guarantees exclusion: a holder paused past its lease is no
//! longer the holder, whatever it believes.

use std::time::{Duration, Instant};

use super::{is, template, text, tuple, until};
use crate::{CasOutcome, Field, FieldType, Pattern, SpaceClient, SpaceClientError};

/// How long a release tuple stays (it only has to outlive the waiters' wake-up).
const RELEASE_LEASE: Duration = Duration::from_secs(10);
/// The shortest wait between two attempts of a waiter.
const RETRY_FLOOR: Duration = Duration::from_millis(20);

/// A held lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// The fencing token: the revision of the lock tuple.
    pub revision: u64,
    /// When the lease ends unless renewed (agreed time, ms since the Unix epoch).
    pub lease_expires_ms: u64,
}

/// A named lock in a space (see the module docs).
pub struct Lock<'a> {
    client: &'a SpaceClient,
    space: String,
    name: String,
    lease: Duration,
    tag: &'static str,
}

impl<'a> Lock<'a> {
    /// The lock `name` in `space`, held for `lease` at a time unless renewed.
    pub fn new(client: &'a SpaceClient, space: &str, name: &str, lease: Duration) -> Self {
        Self::tagged(client, space, name, lease, "lock")
    }

    /// A lock whose tuples carry `tag` instead of `lock` (an election's).
    pub(crate) fn tagged(
        client: &'a SpaceClient,
        space: &str,
        name: &str,
        lease: Duration,
        tag: &'static str,
    ) -> Self {
        Lock {
            client,
            space: space.to_owned(),
            name: name.to_owned(),
            lease,
            tag,
        }
    }

    fn any_holder(&self) -> crate::TypedTemplate {
        template([
            is(text(self.tag)),
            is(text(&self.name)),
            Pattern::AnyOf(FieldType::Int),
        ])
    }

    fn mine(&self) -> crate::TypedTemplate {
        template([
            is(text(self.tag)),
            is(text(&self.name)),
            is(Field::Int(self.client.id())),
        ])
    }

    fn release_tag(&self) -> String {
        format!("{}-released", self.tag)
    }

    /// One attempt: the lock if it was free, else who holds it (their client id) and their
    /// hold.
    pub fn try_acquire(&self) -> Result<Result<Held, (i64, Held)>, SpaceClientError> {
        let mine = tuple([
            text(self.tag),
            text(&self.name),
            Field::Int(self.client.id()),
        ]);
        let outcome = self
            .client
            .cas(&self.space, self.any_holder(), mine, Some(self.lease))
            .wait()?;
        Ok(match outcome {
            CasOutcome::Inserted(receipt) => Ok(Held {
                revision: receipt.revision,
                lease_expires_ms: receipt.lease_expires_ms.unwrap_or(u64::MAX),
            }),
            CasOutcome::Exists(stored) => {
                let holder = match stored.tuple.0.get(2) {
                    Some(Field::Int(id)) => *id,
                    _ => 0,
                };
                Err((
                    holder,
                    Held {
                        revision: stored.revision,
                        lease_expires_ms: stored.lease_expires_ms.unwrap_or(u64::MAX),
                    },
                ))
            }
        })
    }

    /// Acquires the lock, waiting up to `timeout` for it to be released or for its holder's
    /// lease to end; `None` if it was not acquired in time.
    pub fn acquire(&self, timeout: Duration) -> Result<Option<Held>, SpaceClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            let (_, other) = match self.try_acquire()? {
                Ok(held) => return Ok(Some(held)),
                Err(holder) => holder,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            // Until the holder releases (its release tuple) or its lease ends.
            let wait = until(other.lease_expires_ms, RETRY_FLOOR).min(left);
            let released = template([
                is(Field::Str(self.release_tag())),
                is(text(&self.name)),
                is(Field::Int(other.revision as i64)),
            ]);
            self.client.rd(&self.space, released, wait).wait()?;
        }
    }

    /// Extends the lease of a held lock by the lock's lease from now (agreed time); false if
    /// the lock is no longer held by this client (its lease ran out).
    pub fn renew(&self) -> Result<bool, SpaceClientError> {
        Ok(self
            .client
            .renew(&self.space, self.mine(), self.lease)
            .wait()?
            == 1)
    }

    /// Releases a held lock and wakes its waiters; false if this client did not hold it.
    pub fn release(&self, held: Held) -> Result<bool, SpaceClientError> {
        if self.client.inp(&self.space, self.mine()).wait()?.is_none() {
            return Ok(false);
        }
        let released = tuple([
            Field::Str(self.release_tag()),
            text(&self.name),
            Field::Int(held.revision as i64),
        ]);
        self.client
            .out(&self.space, released, Some(RELEASE_LEASE))
            .wait()?;
        Ok(true)
    }

    /// Who holds the lock now (their client id and hold), read without ordering.
    pub fn holder(&self) -> Result<Option<(i64, Held)>, SpaceClientError> {
        let stored = self
            .client
            .rdp_unordered(&self.space, self.any_holder())
            .wait()?;
        Ok(stored.map(|s| {
            let id = match s.tuple.0.get(2) {
                Some(Field::Int(id)) => *id,
                _ => 0,
            };
            (
                id,
                Held {
                    revision: s.revision,
                    lease_expires_ms: s.lease_expires_ms.unwrap_or(u64::MAX),
                },
            )
        }))
    }
}
