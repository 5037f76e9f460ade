//! A deterministic discrete-event simulator of causal CRDT replication for thousands of
//! nodes in one process: VCube-Sync's sans-IO node (`tagma-vcube`) and the baselines run on
//! one link model ([`link`]), one workload ([`workload`]) and one message accounting
//! ([`metrics`]), judged by one causal-order checker ([`checker`]). The event loop
//! ([`engine`]) runs the nodes on several threads and gives the same report on any number.

pub mod calendar;
pub mod checker;
pub mod engine;
pub mod error;
pub mod flood;
pub mod inbox;
pub mod link;
pub mod metrics;
pub mod overlay;
pub mod plumtree;
pub mod proto;
pub mod run;
pub mod station;
pub mod vcube;
pub mod workload;

pub use error::SimError;
pub use link::LinkModel;
pub use metrics::Report;
pub use run::{Protocol as ProtocolKind, run, run_on};
pub use workload::Workload;
