//! A barrier for N parties, reusable round after round.
//!
//! Each party arriving at round `r` inserts `("barrier", name, r, party)`; the one that finds
//! N arrivals inserts `("barrier-open", name, r)` (with a `cas`, so once); every party waits
//! in an `rd` of that tuple. Every tuple has a lease (`keep`), so finished rounds clean up
//! after themselves.

use std::time::{Duration, Instant};

use super::{is, template, text, tuple};
use crate::{Field, FieldType, Pattern, SpaceClient, SpaceClientError};

/// A barrier for `parties` parties.
pub struct Barrier<'a> {
    client: &'a SpaceClient,
    space: String,
    name: String,
    parties: u32,
    keep: Duration,
}

impl<'a> Barrier<'a> {
    /// The barrier `name` in `space` for `parties` parties; its tuples last `keep` (longer
    /// than any party takes to arrive).
    pub fn new(
        client: &'a SpaceClient,
        space: &str,
        name: &str,
        parties: u32,
        keep: Duration,
    ) -> Self {
        Barrier {
            client,
            space: space.to_owned(),
            name: name.to_owned(),
            parties: parties.max(1),
            keep,
        }
    }

    /// Arrives at round `round` and waits up to `timeout` for every party; true when all
    /// arrived.
    pub fn wait(&self, round: i64, timeout: Duration) -> Result<bool, SpaceClientError> {
        let deadline = Instant::now() + timeout;
        let arrival = tuple([
            text("barrier"),
            text(&self.name),
            Field::Int(round),
            Field::Int(self.client.id()),
        ]);
        self.client
            .out(&self.space, arrival, Some(self.keep))
            .wait()?;
        let arrivals = template([
            is(text("barrier")),
            is(text(&self.name)),
            is(Field::Int(round)),
            Pattern::AnyOf(FieldType::Int),
        ]);
        let open = tuple([text("barrier-open"), text(&self.name), Field::Int(round)]);
        let open_template = template(open.0.iter().cloned().map(Pattern::Is));
        let arrived = self
            .client
            .rd_all(&self.space, arrivals, self.parties)
            .wait()?;
        if arrived.len() as u32 >= self.parties {
            self.client
                .cas(&self.space, open_template.clone(), open, Some(self.keep))
                .wait()?;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        Ok(self
            .client
            .rd(
                &self.space,
                open_template,
                left.max(Duration::from_millis(1)),
            )
            .wait()?
            .is_some())
    }
}
