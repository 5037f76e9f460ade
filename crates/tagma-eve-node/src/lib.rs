//! `tagma-eve-node`: a server of execute-verify replication as a process: a server of the
//! primary-backup deployment, driving the sans-IO [`PbCore`](tagma_eve::pb::PbCore) with
//! real TCP and a real clock, or an executor of the BFT deployment ([`bft`], around
//! [`ExecutorCore`](tagma_eve::bft::ExecutorCore), with a proxy to the verifier cluster).
//!
//! Threads and queues (every queue bounded by `[limits] connection_queue_max` or
//! `[eve] queue_max`):
//! - `accept`: takes connections; each runs the authenticated handshake of `tagma-net` and
//!   becomes a client connection (a reader thread and a `client-out` writer) or the other
//!   server's inbound link (a reader);
//! - `peer-out-N`: keeps the outbound connection to server N and writes its queue;
//! - `protocol`: owns the core; takes requests (authenticated by the reader), the other
//!   server's messages, the stage's answers and the time; sends messages, replies to
//!   clients, and hands execution and state-transfer actions to
//! - `stage`: owns the [`Stage`](tagma_eve::Stage) (the executor and its thread pool),
//!   carries the actions out in order, and answers the protocol thread.
//!
//! [`verifier`] is the verifiers' replicated service of the asynchronous BFT deployment,
//! which tagma's ordering core runs.
//!
//! Clients are `tagma-client` proxies: a request goes to every server; the first reply
//! counts in the primary-backup deployment (crash faults only), `r + 1` matching ones in the
//! BFT deployment.

pub mod bft;
pub mod lies;
mod links;
mod routes;
mod server;
mod stage_thread;
pub mod verifier;

pub use bft::{Application, ExecutorHandle, ExecutorStatus, VerifierLink, start_executor};
pub use lies::Lies;
pub use server::{EveNodeError, EveNodeHandle, Handle, start};
pub use verifier::VerifierService;
