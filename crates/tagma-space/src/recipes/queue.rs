//! A FIFO work queue: items are `("job", name, item)` tuples; a worker takes the oldest with
//! a blocking `in`, so each item goes to exactly one worker, in insertion order, and workers
//! waiting for work are served in the order they asked.

use std::time::Duration;

use bytes::Bytes;

use super::{is, template, text, tuple};
use crate::{Field, FieldType, Pattern, SpaceClient, SpaceClientError};

/// The work queue `name` in a space.
pub struct WorkQueue<'a> {
    client: &'a SpaceClient,
    space: String,
    name: String,
}

/// An item taken from the queue, with the revision its insertion got (its position).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub payload: Bytes,
    pub revision: u64,
}

impl<'a> WorkQueue<'a> {
    pub fn new(client: &'a SpaceClient, space: &str, name: &str) -> Self {
        WorkQueue {
            client,
            space: space.to_owned(),
            name: name.to_owned(),
        }
    }

    /// Adds an item; returns its revision.
    pub fn put(&self, payload: Bytes) -> Result<u64, SpaceClientError> {
        let item = tuple([text("job"), text(&self.name), Field::Bytes(payload)]);
        Ok(self.client.out(&self.space, item, None).wait()?.revision)
    }

    /// Takes the oldest item, waiting up to `timeout` for one; `None` if none came.
    pub fn take(&self, timeout: Duration) -> Result<Option<Item>, SpaceClientError> {
        let any = template([
            is(text("job")),
            is(text(&self.name)),
            Pattern::AnyOf(FieldType::Bytes),
        ]);
        let taken = self.client.in_(&self.space, any, timeout).wait()?;
        Ok(
            taken.and_then(|stored| match stored.tuple.0.into_iter().nth(2) {
                Some(Field::Bytes(payload)) => Some(Item {
                    payload,
                    revision: stored.revision,
                }),
                _ => None,
            }),
        )
    }
}
