//! A batch as the primary orders it: a sequence number, the requests in their agreed order,
//! and the non-deterministic inputs (a random seed, a timestamp) that every executor uses
//! instead of its own clock and random source, so that correct executors compute alike.

/// The non-deterministic inputs the primary attaches to a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NonDeterminism {
    /// Seeds every random choice a request makes (mixed with the request's position in the
    /// batch, so that requests running at once draw different numbers).
    pub seed: u64,
    /// The batch's time, in milliseconds since the Unix epoch: what requests read as "now".
    pub timestamp_ms: u64,
}

/// Requests ordered into batch `seq` (batches are numbered from 1; 0 names the initial
/// state), with their non-deterministic inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch<R> {
    pub seq: u64,
    pub nd: NonDeterminism,
    pub requests: Vec<R>,
}
