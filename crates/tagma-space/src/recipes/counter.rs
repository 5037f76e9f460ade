//! A shared counter: the tuple `("counter", name, value)`, changed by `replace` of the exact
//! value read, retried when another client changed it first.

use super::{is, template, text, tuple};
use crate::{CasOutcome, Field, FieldType, Pattern, SpaceClient, SpaceClientError};

/// The counter `name` in a space (0 until first changed).
pub struct Counter<'a> {
    client: &'a SpaceClient,
    space: String,
    name: String,
}

impl<'a> Counter<'a> {
    pub fn new(client: &'a SpaceClient, space: &str, name: &str) -> Self {
        Counter {
            client,
            space: space.to_owned(),
            name: name.to_owned(),
        }
    }

    fn with(&self, value: Pattern) -> crate::TypedTemplate {
        template([is(text("counter")), is(text(&self.name)), value])
    }

    fn tuple(&self, value: i64) -> crate::TypedTuple {
        tuple([text("counter"), text(&self.name), Field::Int(value)])
    }

    /// The current value.
    pub fn get(&self) -> Result<i64, SpaceClientError> {
        let stored = self
            .client
            .rdp(&self.space, self.with(Pattern::AnyOf(FieldType::Int)))
            .wait()?;
        Ok(stored.map_or(0, |s| match s.tuple.0.get(2) {
            Some(Field::Int(v)) => *v,
            _ => 0,
        }))
    }

    /// Adds `delta` and returns the new value.
    pub fn add(&self, delta: i64) -> Result<i64, SpaceClientError> {
        loop {
            let current = self
                .client
                .rdp(&self.space, self.with(Pattern::AnyOf(FieldType::Int)))
                .wait()?;
            match current.and_then(|s| match s.tuple.0.get(2) {
                Some(Field::Int(v)) => Some(*v),
                _ => None,
            }) {
                None => {
                    let created = self
                        .client
                        .cas(
                            &self.space,
                            self.with(Pattern::AnyOf(FieldType::Int)),
                            self.tuple(delta),
                            None,
                        )
                        .wait()?;
                    if let CasOutcome::Inserted(_) = created {
                        return Ok(delta);
                    }
                }
                Some(v) => {
                    let next = v.wrapping_add(delta);
                    let swapped = self
                        .client
                        .replace(
                            &self.space,
                            self.with(is(Field::Int(v))),
                            self.tuple(next),
                            None,
                        )
                        .wait()?;
                    if swapped.is_some() {
                        return Ok(next);
                    }
                }
            }
        }
    }
}
