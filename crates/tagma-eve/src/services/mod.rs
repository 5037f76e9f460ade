//! Services that run in execute-verify mode, for benchmarks and tests.
//!
//! - [`micro`]: the micro-benchmark of Kapritsos et al. ("All about Eve"): each request
//!   works for a set time and then updates one object of a set size; conflicts come from
//!   requests drawing the same object, and a mixer that misses a set share of them.
//! - [`racy`]: a counter incremented by an unsynchronised read-modify-write, which its mixer
//!   says never conflicts: a concurrency bug, for the bug-masking experiment.

pub mod micro;
pub mod racy;
