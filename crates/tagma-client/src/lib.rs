//! `tagma-client`: the service proxy a client uses to invoke a replicated service.
//!
//! Every request goes to all replicas of the view; the proxy votes on the replies
//! ([`voting`], SPEC §2): f+1 matching replies in BFT mode (one in CFT), or
//! ⌊(n+f)/2⌋+1 (⌊n/2⌋+1) when the cluster enables unordered reads. Unordered reads whose
//! replies disagree or time out fall back to ordered invocations. Unanswered requests are
//! retransmitted every `client_retransmit_ms`; broken connections are re-established in the
//! background; an invocation fails with a typed error after `client_invoke_timeout_ms`.
//!
//! [`Proxy`] offers blocking calls ([`Proxy::invoke_ordered`], [`Proxy::invoke_unordered`])
//! and asynchronous ones ([`Proxy::invoke_async`]) that return a [`ReplyFuture`] — both a
//! `std::future::Future` and waitable from plain threads — with up to `outstanding_max`
//! requests in flight per proxy.

pub mod proxy;
pub mod voting;

pub use proxy::{ClientError, ClientOptions, Proxy, ReplyFuture};
pub use voting::Voter;
