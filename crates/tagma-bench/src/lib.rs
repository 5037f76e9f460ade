//! `tagma-bench`: the demo and every benchmark of the `tagma` command. `tagma bench`
//! measures a local cluster of replica processes against an unreplicated server run beside
//! it in the same invocation; the local clusters come from `tagma-cluster`.
//!
//! - [`demo`]: `tagma demo`, a local cluster under the checked key-value workload;
//! - [`history`]: the recorded load of `--history FILE` (chaos, demo), written as JSON lines
//!   and judged by the linearizability checker;
//! - [`gateway`]: a Redis-protocol gateway started in front of a cluster, with the `INFO`
//!   facts it reports; [`gateway_bench`]: `tagma bench gateway`, redis-benchmark against it
//!   and against a real Redis in the same invocation;
//! - [`space_bench`]: `tagma bench space`, the coordination service's inserts by client count
//!   with and without durability, and its execution stage by space in parallel;
//! - [`space_recovery`]: `tagma bench space-recovery`, the coordination service back after
//!   every replica stopped, by state size, with one log or one state damaged;
//! - [`space_demo`]: `tagma demo --service space`, the coordination service's recipes under
//!   concurrency while a replica dies, checked;
//! - [`replicated`]: `tagma bench` itself (one configuration, or a sweep and its figure);
//! - [`measure`]: one measurement window on a running cluster (load, server counters, CPU
//!   and memory);
//! - [`requests`]: the requests of each workload;
//! - [`exec`]: the execution stage alone (`tagma bench exec`): the list and tuple-space
//!   workloads through the sequential, barrier and dependency-graph schedulers;
//! - [`eve_bench`]: `tagma bench eve`, execute-verify replication's executors and
//!   verification on the micro-benchmark against sequential execution;
//! - [`eve_pair`]: an execute-verify primary-backup pair under the checked key-value
//!   workload, with a primary crash (`tagma demo --mode eve`, `tagma chaos --mode eve`);
//! - [`soak`]: `tagma bench soak`, a long run with periodic faults, sampling every
//!   replica's memory, descriptors, threads and disk; [`process_sample`] reads them;
//! - [`state_transfer`]: `tagma bench state-transfer`, how fast a wiped replica gets a
//!   large state back;
//! - [`micro`]: the micro-benchmark service ("empty" requests that ask for a reply of a
//!   given size) and its request encoding;
//! - [`load`]: a closed-loop load driver that keeps a number of logical clients' requests
//!   outstanding through a few [`tagma_client::Proxy`]s and records latencies;
//! - [`report`]: percentiles, process resource figures from `/proc`, and the report (JSON
//!   object and human table);
//! - [`sweep`]: the configurations of the throughput and latency figures of Bessani, Sousa,
//!   Alchieri: State Machine Replication for the Masses with BFT-SMaRt (`tagma bench
//!   --sweep`);
//! - [`plot`]: PNG charts of those figures.

pub mod demo;
pub mod eve_bench;
pub mod eve_pair;
pub mod exec;
pub mod gateway;
pub mod gateway_bench;
pub mod history;
pub mod load;
pub mod measure;
pub mod micro;
pub mod plot;
pub mod process_sample;
pub mod replicated;
pub mod report;
pub mod requests;
pub mod soak;
pub mod space_bench;
pub mod space_demo;
pub mod space_recovery;
pub mod state_transfer;
pub mod sweep;
