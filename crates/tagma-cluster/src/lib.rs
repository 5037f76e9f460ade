//! `tagma-cluster`: local clusters of real replica processes, for the `tagma` command
//! (`demo`, `chaos`, `bench`), the benchmarks and the multi-process tests. It is tooling
//! around the `tagma` binary, not part of a replica, so its errors are `anyhow` errors that
//! say what to fix.
//!
//! - [`init`]: writes a cluster directory (keys and a documented `tagma.toml`), as
//!   `tagma init` does;
//! - [`cluster`]: starts, stops and inspects the replica processes of such a directory
//!   (replicas joining by view change too);
//! - [`eve_pair`]: a local primary-backup pair of execute-verify servers (`tagma eve
//!   serve`);
//! - [`eve_bft`]: a local BFT deployment of execute-verify replication: executors (`tagma
//!   eve serve`) and their verifier cluster (`tagma replica --service eve-verifier`);
//! - [`disk`]: damages a stopped replica's data directory the way failing disks do (for the
//!   chaos scenarios and the state-transfer benchmark);
//! - [`workload`]: a mixed key-value workload that checks every result a client gets for its
//!   own keys against a sequential model (linearizability per key);
//! - [`history_load`]: clients contending on a few shared keys, every operation recorded for
//!   a linearizability checker (`tagma chaos --history`, `tagma demo --history`).

pub mod cluster;
pub mod disk;
pub mod eve_bft;
pub mod eve_pair;
pub mod history_load;
pub mod init;
pub mod workload;

pub use cluster::{LaunchOptions, LocalCluster, converged_states, digests_equal};
