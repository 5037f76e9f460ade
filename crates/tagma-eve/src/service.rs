//! The interface an application implements to run in execute-verify mode.

use bytes::Bytes;

use crate::context::RequestContext;

/// A service whose state lives in an [`ObjectTree`](crate::ObjectTree) and whose requests
/// may run on several threads at once. `execute` reads and writes objects only through its
/// context (state kept elsewhere, such as caches or connections, is local and outside what
/// executors compare), and takes time and randomness only from it. Its output is the reply
/// to the request's client.
///
/// Requests run concurrently when the [`Mixer`](crate::Mixer) says they do not conflict; if
/// the mixer is wrong, or `execute` races with itself, executors may diverge, and the batch
/// is run again in order: correctness never depends on the mixer.
pub trait EveService: Send + Sync {
    type Request: Send + Sync;
    fn execute(&self, request: &Self::Request, ctx: &mut RequestContext<'_>) -> Bytes;
}
