//! `tagma-eve-node`: a server of execute-verify replication's primary-backup deployment as a
//! process, driving the sans-IO [`PbCore`](tagma_eve::pb::PbCore) with real TCP and a real
//! clock.
//!
//! Threads and queues (every queue bounded by `[limits] connection_queue_max` or
//! `[eve] queue_max`):
//! - `accept`: takes connections; each runs the authenticated handshake of `tagma-net` and
//!   becomes a client connection (a reader thread and a `client-out` writer) or the other
//!   server's inbound link (a reader);
//! - `peer-out`: keeps the outbound connection to the other server and writes its queue;
//! - `protocol`: owns the core; takes requests (authenticated by the reader), the other
//!   server's messages, the stage's answers and the time; sends messages, replies to
//!   clients, and hands execution and state-transfer actions to
//! - `stage`: owns the [`Stage`](tagma_eve::Stage) (the executor and its thread pool),
//!   carries the actions out in order, and answers the protocol thread.
//!
//! [`verifier`] is the verifiers' replicated service of the asynchronous BFT deployment,
//! which tagma's ordering core runs.
//!
//! Clients are `tagma-client` proxies: a request goes to both servers, the first reply
//! counts (crash faults only).

mod links;
mod server;
pub mod verifier;

pub use server::{EveNodeError, EveNodeHandle, start};
