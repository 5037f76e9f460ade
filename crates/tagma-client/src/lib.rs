//! `tagma-client`: the service proxy a client uses to invoke a replicated service.
//!
//! Every request goes to all replicas of the view; the proxy votes on the replies
//! ([`voting`]): f+1 matching replies in BFT mode (one in CFT), or
//! ⌊(n+f)/2⌋+1 (⌊n/2⌋+1) when the cluster enables unordered reads. An unordered read whose
//! replies disagree, or that is unanswered after `client_retransmit_ms`, is re-issued as an
//! ordered request (so it may take up to `client_retransmit_ms` + `client_invoke_timeout_ms`).
//! Unanswered ordered requests are retransmitted every `client_retransmit_ms`; after
//! `client_invoke_timeout_ms` the caller gets a typed error, but the request keeps being
//! retransmitted (replicas order a client's requests by contiguous sequence numbers).
//! Broken connections are re-established in the background.
//!
//! Replicas cache each client's `limits.reply_cache_per_client` replies with the highest
//! sequence numbers, so a proxy keeps at most that many requests in flight, and no ordered
//! request goes that many numbers or more above the lowest one still unanswered: a lost reply
//! is still cached when the retransmission asks for it. A request whose reply is deferred
//! (a blocked take) is outside that window, or it would stall its client's later requests
//! while it waits.
//!
//! [`Proxy`] offers blocking calls ([`Proxy::invoke_ordered`], [`Proxy::invoke_unordered`])
//! and asynchronous ones ([`Proxy::invoke_async`]) that return a [`ReplyFuture`] — both a
//! `std::future::Future` and waitable from plain threads — with up to `outstanding_max`
//! requests in flight per proxy. [`Proxy::invoke_unordered_each`] collects every replica's
//! own reply to an unordered request, without voting, for answers that differ by replica.

pub mod error;
pub mod future;
mod locking;
pub mod proxy;
pub mod voting;

pub use error::ClientError;
pub use future::ReplyFuture;
pub use proxy::{ClientOptions, EachReply, Proxy};
pub use voting::{ViewFollower, Voter};
