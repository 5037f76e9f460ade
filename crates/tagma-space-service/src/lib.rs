//! `tagma-space-service`: the coordination service as a replicated state machine — typed
//! tuple spaces in the manner of DepSpace (Bessani, Alchieri, Correia, Fraga: "DepSpace: A
//! Byzantine Fault-Tolerant Coordination Service") and DDS (Félix, Bessani, Correia), run by
//! `tagma_exec` on every replica. Clients speak the protocol of `tagma_space`.
//!
//! What every replica does alike:
//! - **Agreed time only.** Leases end, and waits time out, at the agreed timestamps of
//!   decided batches ([`tagma_exec::Service::advance_time`]), from an ordered
//!   `(time, id)` index, never from a replica's clock; [`tagma_exec::Service::next_due_ms`]
//!   tells the leader when to order a batch that carries only the time.
//! - **Blocking `rd` and `in`** wait in their space in the total order, each with a deadline
//!   (at most `wait_ms_max`) and under caps per space and per principal; each is answered
//!   exactly once, as a late reply: by the insert that satisfies it (every `rd` that
//!   matches; the first `in` that matches, which takes the tuple), by its deadline
//!   (`TimedOut`), or by its space's destruction (`UnknownSpace`).
//! - **Fencing.** Every inserted tuple gets a revision from its space's growing counter; the
//!   replies carry it (see `tagma_space::reply`).
//! - **Snapshots** hold tuples with their revisions, owners, absolute lease ends and sealed
//!   parts, waiting operations in arrival order, taken sealed parts, and the counters
//!   ([`snapshot`]).
//! - **Confidentiality.** A space created with a field protection
//!   (`tagma_space::protection`) stores comparable fields as keyed hashes, private fields as
//!   placeholders, and each tuple's sealed original; every replica checks the stored tuples
//!   and templates against the protection, keeps a taken tuple's sealed part for its taker
//!   ([`taken`]), and answers `share` — unordered only, with its own share for a reader the
//!   policy admits ([`sharing`]; [`SpaceService::with_replica_key`]).
//! - **Parallel by space.** A run of requests is cut at create, destroy and list; between
//!   cuts, different spaces run side by side ([`parallel`]).
//!
//! Modules: [`limits`] (the bounds), [`store`] (one space's tuples), [`leases`] (their lease
//! index), [`waits`] (waiting operations and their caps), [`taken`] (taken sealed parts),
//! [`space`] (one space executing one operation), [`sharing`] (answering `share`),
//! [`parallel`] (a segment by space), [`snapshot`], [`service`] (the
//! [`tagma_exec::Service`]).

pub mod leases;
pub mod limits;
pub mod parallel;
pub mod service;
pub mod sharing;
pub mod snapshot;
pub mod space;
pub mod store;
pub mod taken;
pub mod waits;

pub use limits::{LimitsError, SpaceLimits};
pub use service::SpaceService;
