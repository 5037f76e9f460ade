//! `tagma-gateway`: a Redis-protocol (RESP2) server in front of tagma's replicated
//! key-value store, so that redis-cli, redis-benchmark and Redis client libraries work
//! unmodified against a Byzantine fault-tolerant cluster.
//!
//! - [`session`]: one connection's state — authentication, its name, a transaction being
//!   queued, watched keys — as a state machine from commands to steps, without IO.
//! - [`shard`]: a tagma client proxy and the threads that gather commands from many
//!   connections into bundles (one ordered request each) and hand each reply back.
//! - [`connection`]: a connection's thread: reads commands (pipelined), submits them, writes
//!   the replies in order.
//! - [`server`]: the listener, the connection limit, the shared counters, `INFO`.
//!
//! A connection's commands all go through one shard, whose proxy is one tagma client, and a
//! client's requests are ordered in the order it sends them: a pipeline executes in order.

pub mod connection;
pub mod server;
pub mod session;
pub mod shard;

pub use server::{Gateway, GatewayOptions, ReplicationInfo};
