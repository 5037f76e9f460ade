//! `tagma-bench`: the pieces of `tagma bench`, which measures a local cluster against an
//! unreplicated server run beside it in the same invocation.
//!
//! - [`exec`]: the execution stage alone (`tagma bench exec`): the seed's list and tuple-space
//!   workloads through the sequential, barrier and dependency-graph schedulers;
//! - [`micro`]: the paper's micro-benchmark service ("empty" requests that ask for a reply of
//!   a given size) and its request encoding;
//! - [`load`]: a closed-loop load driver that keeps a number of logical clients' requests
//!   outstanding through a few [`tagma_client::Proxy`]s and records latencies;
//! - [`report`]: percentiles, process resource figures from `/proc`, and the report (JSON
//!   object and human table);
//! - [`sweep`]: the configurations of the paper's Figures 4–6 (`tagma bench --sweep`);
//! - [`plot`]: PNG charts of those figures.

pub mod exec;
pub mod load;
pub mod micro;
pub mod plot;
pub mod report;
pub mod sweep;
