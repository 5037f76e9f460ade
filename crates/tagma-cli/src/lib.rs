//! `tagma-cli`: the `tagma` command and the pieces it is made of, kept in a library so the
//! multi-process tests drive exactly what users run.
//!
//! - [`init`]: writes a cluster directory (keys and a documented `tagma.toml`);
//! - [`chaos`]: the failure scenarios of `tagma chaos` (durability under crashes);
//! - [`cluster`]: starts and stops replica *processes* of a local cluster (joiners too);
//! - [`tour`]: `tagma chaos --scenario reconfig-tour`, the reconfiguration timeline;
//! - [`workload`]: the mixed key-value workload of `tagma demo`, which checks every result a
//!   client gets for its own keys against a sequential model (linearizability per key).

pub mod chaos;
pub mod cluster;
pub mod init;
pub mod tour;
pub mod transfer_bench;
pub mod workload;
