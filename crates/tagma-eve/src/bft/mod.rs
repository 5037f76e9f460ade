//! The asynchronous BFT deployment of execute-verify replication: `n_E = u + max(u, r) + 1`
//! executors run every batch and send their tokens to the verifiers, whose decisions
//! ([`verify`](crate::verify)) tell them to commit, to fetch the committed state, or to roll
//! back into a new view.
//!
//! - [`core`]: an executor's protocol, a sans-IO state machine ([`ExecutorCore`]): inputs in
//!   through [`ExecutorCore::handle`], which takes the time, actions out of
//!   [`ExecutorCore::poll_action`]. Its state lives in a [`Stage`](crate::Stage).
//! - [`harness`]: a deterministic driver of a whole deployment (executors, the verifiers'
//!   agreed order, clients) with virtual time, lying executors and verifiers, crashes and
//!   checks, for the tests and the simulator.
//!
//! The executor of view `v`'s primary is `v mod n_E`. It orders client requests into numbered
//! batches with their non-deterministic inputs and sends them to every executor
//! (EXECUTE-BATCH). Each executor runs a batch (mixed into parallel batches; the first batch
//! of a view in order), then sends VERIFY(view, n, token, token of n − 1) to the verifiers.
//! An executor acts on `r + 1` matching VERIFY-RESPONSEs:
//!
//! - *commit* with its own token: the batch is stable, its replies are released;
//! - *commit* with another token, or of a batch it never ran: it fetches the committed state
//!   from another executor (JOIN, STATE-OFFER, TREE-QUERY / TREE-NODES), checking the offered
//!   root against the decided token and every node against its parent's digest, then runs
//!   again what it holds after that state;
//! - *rollback* into view `v'`: it discards what it executed after the last committed batch,
//!   and tells the other executors it is in `v'` (COMMIT(v'), on which an executor still in
//!   an earlier view asks the verifiers); the primary of `v'` sends the batches again, the
//!   first in order.
//!
//! An executor that holds requests or batches and sees nothing commit for `progress_ms`
//! complains to the verifiers; `max(u, r) + 1` complaints rotate the primary. A client
//! accepts a reply once `r + 1` executors sent the same one.

pub mod core;
pub mod harness;

pub use self::core::{Action, BftConfig, ExecutorCore, ExecutorStats, Input};

#[cfg(test)]
mod tests;
