//! A service with a concurrency bug: `increment` reads a shared counter, works, and writes
//! the counter plus one, with nothing to keep two increments apart; its mixer says requests
//! never conflict. Run at once, two increments can both read the same count and one update
//! is lost, differently from one executor to the next: the race Eve detects (executors
//! disagree) and repairs (the batch runs again in order). The deterministic BFT deployment
//! carries the same read-modify-write as its key-value service's counter
//! (`pb::harness::COUNTER_KEY`), for the concurrency-bug masking experiment.

use bytes::Bytes;

use crate::context::RequestContext;
use crate::mixer::{Access, Mixer};
use crate::service::EveService;
use crate::services::micro::Work;
use crate::tree::ObjectId;

/// The counter's object.
pub const COUNTER: ObjectId = ObjectId(0);

/// Increment the counter by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Increment {
    pub id: u64,
}

/// The racy counter; `work` runs between the read and the write (the window of the race).
#[derive(Clone, Debug)]
pub struct RacyService {
    pub work: Work,
}

/// Reads the counter from an object's value (absent: 0).
pub fn count(value: Option<&Bytes>) -> u64 {
    value
        .and_then(|v| v.get(..8))
        .map_or(0, |v| u64::from_le_bytes(v.try_into().expect("8 bytes")))
}

impl EveService for RacyService {
    type Request = Increment;

    fn execute(&self, _request: &Increment, ctx: &mut RequestContext<'_>) -> Bytes {
        let before = count(ctx.get(COUNTER).as_ref());
        self.work.run();
        let after = before + 1;
        ctx.put(COUNTER, Bytes::copy_from_slice(&after.to_le_bytes()));
        Bytes::copy_from_slice(&after.to_le_bytes())
    }
}

/// The wrong guess: increments touch nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct RacyMixer;

impl Mixer<Increment> for RacyMixer {
    type Key = u64;

    fn access(&self, _request: &Increment) -> Access<u64> {
        Access::default()
    }
}
