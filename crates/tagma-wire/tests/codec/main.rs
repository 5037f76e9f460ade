//! Round-trip, exact-length, zero-copy and rejection tests for the wire codec, one module per
//! group of messages, plus property tests over arbitrary values and bytes.

#[path = "../common/mod.rs"]
mod common;

mod consensus;
mod properties;
mod rejection;
mod requests;
mod support;
mod views;
