//! A versioned configuration store with change notification: each key is one tuple
//! `("config", key, version, value)`; setting replaces the exact version read with the next
//! one (a compare-and-swap on the version), and a watcher waits in an `rdAfter` for a tuple
//! of the key newer than the one it saw, so it misses no change and sees each value once.

use std::time::Duration;

use bytes::Bytes;

use super::{is, template, text, tuple};
use crate::{CasOutcome, Field, FieldType, Pattern, SpaceClient, SpaceClientError, Stored};

/// The configuration store of a space.
pub struct ConfigStore<'a> {
    client: &'a SpaceClient,
    space: String,
}

/// A key's value, its version (1 for the first value set) and the revision of its tuple
/// (what [`ConfigStore::watch`] takes to wait for the next change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    pub version: i64,
    pub value: Bytes,
    pub revision: u64,
}

fn versioned(stored: Stored) -> Option<Versioned> {
    let revision = stored.revision;
    let mut fields = stored.tuple.0.into_iter().skip(2);
    match (fields.next(), fields.next()) {
        (Some(Field::Int(version)), Some(Field::Bytes(value))) => Some(Versioned {
            version,
            value,
            revision,
        }),
        _ => None,
    }
}

impl<'a> ConfigStore<'a> {
    pub fn new(client: &'a SpaceClient, space: &str) -> Self {
        ConfigStore {
            client,
            space: space.to_owned(),
        }
    }

    fn key_at(&self, key: &str, version: Pattern) -> crate::TypedTemplate {
        template([
            is(text("config")),
            is(text(key)),
            version,
            Pattern::AnyOf(FieldType::Bytes),
        ])
    }

    fn entry(&self, key: &str, version: i64, value: Bytes) -> crate::TypedTuple {
        tuple([
            text("config"),
            text(key),
            Field::Int(version),
            Field::Bytes(value),
        ])
    }

    /// The key's current value and version.
    pub fn get(&self, key: &str) -> Result<Option<Versioned>, SpaceClientError> {
        let stored = self
            .client
            .rdp(
                &self.space,
                self.key_at(key, Pattern::AnyOf(FieldType::Int)),
            )
            .wait()?;
        Ok(stored.and_then(versioned))
    }

    /// Sets the key's value; returns the new version.
    pub fn set(&self, key: &str, value: Bytes) -> Result<i64, SpaceClientError> {
        loop {
            match self.get(key)? {
                None => {
                    let any = self.key_at(key, Pattern::AnyOf(FieldType::Int));
                    let first = self.entry(key, 1, value.clone());
                    let created = self.client.cas(&self.space, any, first, None).wait()?;
                    if let CasOutcome::Inserted(_) = created {
                        return Ok(1);
                    }
                }
                Some(current) => {
                    let next = current.version + 1;
                    let at = self.key_at(key, is(Field::Int(current.version)));
                    let new = self.entry(key, next, value.clone());
                    if self
                        .client
                        .replace(&self.space, at, new, None)
                        .wait()?
                        .is_some()
                    {
                        return Ok(next);
                    }
                }
            }
        }
    }

    /// Waits up to `timeout` for a value of the key newer than the one whose tuple had
    /// revision `seen` (0: any value); `None` if none came in time.
    pub fn watch(
        &self,
        key: &str,
        seen: u64,
        timeout: Duration,
    ) -> Result<Option<Versioned>, SpaceClientError> {
        let any = self.key_at(key, Pattern::AnyOf(FieldType::Int));
        let stored = self
            .client
            .rd_after(&self.space, any, seen, timeout)
            .wait()?;
        Ok(stored.and_then(versioned))
    }
}
