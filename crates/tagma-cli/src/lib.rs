//! `tagma-cli`: the `tagma` command and the pieces it is made of, kept in a library so the
//! multi-process tests drive exactly what users run. Local clusters of replica processes
//! come from `tagma-cluster`; the demo and the benchmarks from `tagma-bench`.
//!
//! - [`cmd`]: one module per subcommand: its arguments and the code that runs it;
//! - [`chaos`]: the failure scenarios of `tagma chaos` (durability under crashes and
//!   damaged disks);
//! - [`chaos_space`]: the same scenarios under a coordination-service load, with operations
//!   waiting and leases running across the fault (`tagma chaos --service space`);
//! - [`tour`]: `tagma chaos --scenario reconfig-tour`, the reconfiguration timeline;
//! - [`slow_disk`]: `tagma chaos --scenario slow-disk`, a follower's and the leader's disk
//!   stalling under load.

pub mod chaos;
pub mod chaos_eve;
pub mod chaos_eve_race;
pub mod chaos_netns;
pub mod chaos_space;
pub mod cmd;
pub mod slow_disk;
pub mod tour;
