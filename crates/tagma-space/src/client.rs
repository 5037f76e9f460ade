//! [`SpaceClient`]: the coordination service's operations over a [`Proxy`], with typed
//! tuples and templates in and typed results out.
//!
//! Every operation returns a [`Pending`] result at once, which a thread waits for
//! ([`Pending::wait`]) or async code awaits (it is a `Future`): one API for both. Blocking
//! operations (`rd`, `in`) are sent as requests whose reply may come later than their
//! execution, and the call waits as long as the operation's own timeout (the service answers
//! `TimedOut` then, in agreed time).
//!
//! A [`Proxy`] may carry several operations at once (`outstanding_max`), so a client blocked
//! in an `in` can still renew its leases from another thread.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tagma_client::{ClientError, Proxy, ReplyFuture};
use tagma_wire::RequestKind;

use crate::{
    CasOutcome, DecodeError, Limits, Policy, Protections, Receipt, Replacement, SpaceError,
    SpaceInfo, SpaceReply, SpaceRequest, Stored, TypedTemplate, TypedTuple,
};

/// How much longer than a blocking operation's timeout the call waits for its answer: the
/// agreed time that fires the timeout runs a little behind the client's clock (a time-only
/// batch is ordered once the due time passes).
pub const WAIT_MARGIN: Duration = Duration::from_secs(5);

/// Why an operation of the coordination service did not give its result.
#[derive(Debug, thiserror::Error)]
pub enum SpaceClientError {
    /// The request did not get a reply quorum (or could not be sent).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The space's policy refused the operation; nothing changed.
    #[error("denied by the space's policy: {0}")]
    Denied(String),
    /// The service refused the operation; nothing changed.
    #[error(transparent)]
    Refused(SpaceError),
    /// The request breaks the limits before it is sent.
    #[error("not sent: {0}")]
    Invalid(SpaceError),
    /// A reply quorum agreed on bytes that do not decode as a reply.
    #[error("the replicas' reply does not decode: {0}")]
    BadReply(DecodeError),
    /// A reply quorum agreed on a reply that does not answer this operation.
    #[error("the replicas answered {op} with an unexpected reply: {reply:?}")]
    Unexpected { op: &'static str, reply: SpaceReply },
}

/// A client of the coordination service (see the module docs). Cheap to share between
/// threads: every method takes `&self`.
pub struct SpaceClient {
    proxy: Proxy,
    limits: Limits,
}

/// What a reply must be for an operation, and the result it gives.
type Decoder<T> = fn(SpaceReply) -> Result<T, SpaceReply>;

/// The pending result of an operation: wait for it ([`Pending::wait`]) or await it.
pub struct Pending<T> {
    state: PendingState,
    op: &'static str,
    limits: Limits,
    decode: Decoder<T>,
}

enum PendingState {
    Sent(ReplyFuture),
    Failed(Option<SpaceClientError>),
}

impl<T> Pending<T> {
    /// Blocks until the operation's result is known.
    pub fn wait(self) -> Result<T, SpaceClientError> {
        match self.state {
            PendingState::Sent(future) => finish(self.op, &self.limits, self.decode, future.wait()),
            PendingState::Failed(mut e) => Err(e.take().expect("a failure is taken once")),
        }
    }
}

impl<T> Future for Pending<T> {
    type Output = Result<T, SpaceClientError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (op, decode) = (this.op, this.decode);
        match &mut this.state {
            PendingState::Sent(future) => match Pin::new(future).poll(cx) {
                Poll::Ready(reply) => Poll::Ready(finish(op, &this.limits, decode, reply)),
                Poll::Pending => Poll::Pending,
            },
            PendingState::Failed(e) => Poll::Ready(Err(e
                .take()
                .expect("a pending result is not polled after it is ready"))),
        }
    }
}

fn finish<T>(
    op: &'static str,
    limits: &Limits,
    decode: Decoder<T>,
    reply: Result<Bytes, ClientError>,
) -> Result<T, SpaceClientError> {
    let reply = SpaceReply::decode(&reply?, limits).map_err(SpaceClientError::BadReply)?;
    match reply {
        SpaceReply::Denied(reason) => Err(SpaceClientError::Denied(reason)),
        SpaceReply::Error(e) => Err(SpaceClientError::Refused(e)),
        reply => decode(reply).map_err(|reply| SpaceClientError::Unexpected { op, reply }),
    }
}

impl SpaceClient {
    /// A client over `proxy`, with the default tuple limits for decoding replies.
    pub fn new(proxy: Proxy) -> Self {
        SpaceClient {
            proxy,
            limits: Limits::default(),
        }
    }

    /// The same, with the tuple limits the service runs with.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The proxy underneath (its client id is this client's identity in the space).
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// This client's identity as a tuple field: its client id as an integer (what policy
    /// rules `field N = invoker` compare with is the principal part, the high 32 bits).
    pub fn id(&self) -> i64 {
        self.proxy.client_id().0 as i64
    }

    fn send<T>(
        &self,
        request: SpaceRequest,
        kind: RequestKind,
        wait: Duration,
        decode: Decoder<T>,
    ) -> Pending<T> {
        let op = request.op_name();
        let state = match request.check(&self.limits) {
            Err(e) => PendingState::Failed(Some(SpaceClientError::Invalid(e))),
            Ok(()) => match self
                .proxy
                .invoke_async_waiting(request.encode(), kind, wait)
            {
                Ok(future) => PendingState::Sent(future),
                Err(e) => PendingState::Failed(Some(e.into())),
            },
        };
        Pending {
            state,
            op,
            limits: self.limits,
            decode,
        }
    }

    fn ordered<T>(&self, request: SpaceRequest, decode: Decoder<T>) -> Pending<T> {
        self.send(request, RequestKind::Ordered, Duration::ZERO, decode)
    }

    /// An ordered operation that may wait up to `timeout` for its answer: a tuple, or none
    /// if none came in time.
    fn waiting(&self, request: SpaceRequest, timeout: Duration) -> Pending<Option<Stored>> {
        self.send(
            request,
            RequestKind::Ordered,
            timeout + WAIT_MARGIN,
            waited_tuple,
        )
    }

    /// The tuple limits replies are decoded with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Creates `space` with `policy`; this client becomes its creator.
    pub fn create(&self, space: &str, policy: Policy) -> Pending<()> {
        self.create_protected(space, policy, None)
    }

    /// Creates `space` with `policy` and, if given, a field protection (a confidential
    /// space: see [`crate::protection`]; `ConfidentialSpace` runs its operations).
    pub fn create_protected(
        &self,
        space: &str,
        policy: Policy,
        protection: Option<Protections>,
    ) -> Pending<()> {
        let request = SpaceRequest::Create {
            space: space.to_owned(),
            policy,
            protection,
        };
        self.ordered(request, |r| match r {
            SpaceReply::Created => Ok(()),
            r => Err(r),
        })
    }

    /// Destroys `space`; its waiting operations are answered that it is gone.
    pub fn destroy(&self, space: &str) -> Pending<()> {
        let request = SpaceRequest::Destroy {
            space: space.to_owned(),
        };
        self.ordered(request, |r| match r {
            SpaceReply::Destroyed => Ok(()),
            r => Err(r),
        })
    }

    /// Every space with its tuple and waiter counts.
    pub fn list(&self) -> Pending<Vec<SpaceInfo>> {
        self.ordered(SpaceRequest::ListSpaces, |r| match r {
            SpaceReply::Spaces(s) => Ok(s),
            r => Err(r),
        })
    }

    /// `out`: inserts `tuple`, for `lease` if given (it vanishes when the lease runs out
    /// unless renewed).
    pub fn out(&self, space: &str, tuple: TypedTuple, lease: Option<Duration>) -> Pending<Receipt> {
        self.out_sealed(space, tuple, lease, None)
    }

    /// `out` of a tuple as a protected space stores it, with its sealed original
    /// (`ConfidentialSpace` builds both).
    pub fn out_sealed(
        &self,
        space: &str,
        tuple: TypedTuple,
        lease: Option<Duration>,
        sealed: Option<Bytes>,
    ) -> Pending<Receipt> {
        let request = SpaceRequest::Out {
            space: space.to_owned(),
            tuple,
            lease_ms: lease.map(millis),
            sealed,
        };
        self.ordered(request, |r| match r {
            SpaceReply::Inserted(receipt) => Ok(receipt),
            r => Err(r),
        })
    }

    /// `rdp`: the oldest tuple matching `template`, if any (ordered: linearizable).
    pub fn rdp(&self, space: &str, template: TypedTemplate) -> Pending<Option<Stored>> {
        self.ordered(rdp(space, template), one_tuple)
    }

    /// `rdp` without ordering: faster, answered by the replicas' current states (it falls
    /// back to an ordered read when they disagree).
    pub fn rdp_unordered(&self, space: &str, template: TypedTemplate) -> Pending<Option<Stored>> {
        self.send(
            rdp(space, template),
            RequestKind::Unordered,
            Duration::ZERO,
            one_tuple,
        )
    }

    /// `inp`: takes the oldest tuple matching `template`, if any.
    pub fn inp(&self, space: &str, template: TypedTemplate) -> Pending<Option<Stored>> {
        let request = SpaceRequest::Inp {
            space: space.to_owned(),
            template,
        };
        self.ordered(request, one_tuple)
    }

    /// `rd`: the oldest tuple matching `template`, waiting up to `timeout` for one to be
    /// inserted; `None` if none came in time.
    pub fn rd(
        &self,
        space: &str,
        template: TypedTemplate,
        timeout: Duration,
    ) -> Pending<Option<Stored>> {
        let request = SpaceRequest::Rd {
            space: space.to_owned(),
            template,
            timeout_ms: millis(timeout),
        };
        self.waiting(request, timeout)
    }

    /// `rdAfter`: the oldest tuple matching `template` inserted after revision `after`,
    /// waiting up to `timeout` for one; `None` if none came in time. Called again with the
    /// revision it returned, it watches the template: every later insertion has a higher
    /// revision.
    pub fn rd_after(
        &self,
        space: &str,
        template: TypedTemplate,
        after: u64,
        timeout: Duration,
    ) -> Pending<Option<Stored>> {
        let request = SpaceRequest::RdAfter {
            space: space.to_owned(),
            template,
            after,
            timeout_ms: millis(timeout),
        };
        self.waiting(request, timeout)
    }

    /// `in`: takes the oldest tuple matching `template`, waiting up to `timeout` for one to
    /// be inserted; `None` if none came in time. Clients waiting for the same tuples are
    /// served in the order their operations were ordered; a tuple goes to one of them only.
    pub fn in_(
        &self,
        space: &str,
        template: TypedTemplate,
        timeout: Duration,
    ) -> Pending<Option<Stored>> {
        let request = SpaceRequest::In {
            space: space.to_owned(),
            template,
            timeout_ms: millis(timeout),
        };
        self.waiting(request, timeout)
    }

    /// `cas`: inserts `tuple` (for `lease` if given) if no tuple matches `template`;
    /// otherwise returns the oldest match.
    pub fn cas(
        &self,
        space: &str,
        template: TypedTemplate,
        tuple: TypedTuple,
        lease: Option<Duration>,
    ) -> Pending<CasOutcome> {
        self.cas_sealed(space, template, tuple, lease, None)
    }

    /// `cas` inserting a tuple as a protected space stores it, with its sealed original.
    pub fn cas_sealed(
        &self,
        space: &str,
        template: TypedTemplate,
        tuple: TypedTuple,
        lease: Option<Duration>,
        sealed: Option<Bytes>,
    ) -> Pending<CasOutcome> {
        let request = SpaceRequest::Cas {
            space: space.to_owned(),
            template,
            tuple,
            lease_ms: lease.map(millis),
            sealed,
        };
        self.ordered(request, |r| match r {
            SpaceReply::Cas(outcome) => Ok(outcome),
            r => Err(r),
        })
    }

    /// `replace`: atomically takes the oldest tuple matching `template` and inserts `tuple`
    /// (for `lease` if given); nothing if no tuple matches.
    pub fn replace(
        &self,
        space: &str,
        template: TypedTemplate,
        tuple: TypedTuple,
        lease: Option<Duration>,
    ) -> Pending<Option<Replacement>> {
        self.replace_sealed(space, template, tuple, lease, None)
    }

    /// `replace` inserting a tuple as a protected space stores it, with its sealed original.
    pub fn replace_sealed(
        &self,
        space: &str,
        template: TypedTemplate,
        tuple: TypedTuple,
        lease: Option<Duration>,
        sealed: Option<Bytes>,
    ) -> Pending<Option<Replacement>> {
        let request = SpaceRequest::Replace {
            space: space.to_owned(),
            template,
            tuple,
            lease_ms: lease.map(millis),
            sealed,
        };
        self.ordered(request, |r| match r {
            SpaceReply::Replaced(replacement) => Ok(replacement),
            r => Err(r),
        })
    }

    /// `rdAll`: up to `max` tuples matching `template`, oldest first.
    pub fn rd_all(&self, space: &str, template: TypedTemplate, max: u32) -> Pending<Vec<Stored>> {
        self.ordered(rd_all(space, template, max), tuples)
    }

    /// `rdAll` without ordering (see [`SpaceClient::rdp_unordered`]).
    pub fn rd_all_unordered(
        &self,
        space: &str,
        template: TypedTemplate,
        max: u32,
    ) -> Pending<Vec<Stored>> {
        self.send(
            rd_all(space, template, max),
            RequestKind::Unordered,
            Duration::ZERO,
            tuples,
        )
    }

    /// `inAll`: takes up to `max` tuples matching `template`, oldest first.
    pub fn in_all(&self, space: &str, template: TypedTemplate, max: u32) -> Pending<Vec<Stored>> {
        let request = SpaceRequest::InAll {
            space: space.to_owned(),
            template,
            max,
        };
        self.ordered(request, tuples)
    }

    /// `renew`: the leases of every tuple matching `template` that this client inserted with
    /// a lease end `lease` after the agreed time; returns how many.
    pub fn renew(&self, space: &str, template: TypedTemplate, lease: Duration) -> Pending<u32> {
        let request = SpaceRequest::Renew {
            space: space.to_owned(),
            template,
            lease_ms: millis(lease),
        };
        self.ordered(request, |r| match r {
            SpaceReply::Renewed(n) => Ok(n),
            r => Err(r),
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn rdp(space: &str, template: TypedTemplate) -> SpaceRequest {
    SpaceRequest::Rdp {
        space: space.to_owned(),
        template,
    }
}

fn rd_all(space: &str, template: TypedTemplate, max: u32) -> SpaceRequest {
    SpaceRequest::RdAll {
        space: space.to_owned(),
        template,
        max,
    }
}

fn one_tuple(reply: SpaceReply) -> Result<Option<Stored>, SpaceReply> {
    match reply {
        SpaceReply::Tuple(t) => Ok(t),
        r => Err(r),
    }
}

fn waited_tuple(reply: SpaceReply) -> Result<Option<Stored>, SpaceReply> {
    match reply {
        SpaceReply::Tuple(Some(t)) => Ok(Some(t)),
        SpaceReply::TimedOut => Ok(None),
        r => Err(r),
    }
}

fn tuples(reply: SpaceReply) -> Result<Vec<Stored>, SpaceReply> {
    match reply {
        SpaceReply::Tuples(t) => Ok(t),
        r => Err(r),
    }
}
