//! VCube-Sync over TCP: host processes that each run many of `tagma-vcube`'s sans-IO nodes
//! in one loop thread ([`host`]), linked by authenticated connections ([`net`]), reading a
//! shared plan ([`plan`]); and the multi-process demo that starts them and judges the run
//! from their reports ([`demo`]).

pub mod demo;
pub mod error;
pub mod host;
pub mod net;
pub mod plan;

pub use demo::{DemoOptions, DemoReport};
pub use error::HostError;
