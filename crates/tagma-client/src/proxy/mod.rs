//! The threaded proxy: one reader thread per replica connection, one maintenance thread
//! (retransmission, fallback, timeouts, reconnection), callers on any thread.
//!
//! [`Proxy`]'s state (`Inner`) is shared by those threads; its operations live by concern:
//! `connect` (handshakes, reader and writer threads), `invoke` (frames, sending, voting),
//! `each` (unordered requests every replica answers for itself, collected without voting),
//! `views` (following the installed view), `maintenance` (the periodic work). `links` (the
//! replicas and the view's members), `call` (one invocation in flight) and `leader` (which
//! replica ordered requests go to first) hold the state they work on.

mod call;
mod connect;
mod each;
mod invoke;
mod leader;
mod links;
mod maintenance;
mod views;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_config::ValidConfig;
use tagma_crypto::IdentityKey;
use tagma_net::NetLimits;
use tagma_wire::{
    ClientId, ClientMessage, Decode, Encode, ReplicaId, RequestKind, RequestSeq, StateInfo,
};

use self::call::Call;
use self::each::EachCall;
pub use self::each::EachReply;
use self::leader::LeaderGuess;
use self::links::{Members, members_of};
use crate::error::ClientError;
use crate::future::{ReplyFuture, Slot};
use crate::locking::lock;
use crate::voting::ViewFollower;

/// Proxy settings beyond the cluster configuration.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The configured client principal whose key this proxy holds.
    pub principal: u32,
    /// Instance part of the client id; a random one if `None` (a fresh session).
    pub instance: Option<u32>,
    /// Most requests in flight; `invoke_async` blocks beyond it.
    pub outstanding_max: usize,
    /// Matching replies an ordered request needs, instead of the cluster's quorum: the
    /// servers of an execute-verify BFT deployment are `u + max(u, r) + 1` executors whose
    /// clients accept `r + 1` matching replies.
    pub reply_quorum: Option<usize>,
    /// Send ordered requests to the replica believed to lead first, and to every member only
    /// when it does not answer soon (see `proxy::leader`); `false` sends every request to
    /// every member. Servers that are not tagma replicas ordering with a leader (the
    /// executors of an execute-verify deployment) want `false`.
    pub leader_first: bool,
}

impl ClientOptions {
    pub fn new(principal: u32) -> Self {
        ClientOptions {
            principal,
            instance: None,
            outstanding_max: 128,
            reply_quorum: None,
            leader_first: true,
        }
    }
}

/// Where a view history answered by a replica goes.
type HistorySender = crossbeam_channel::Sender<(ReplicaId, Vec<tagma_wire::ViewChange>)>;

struct Inner {
    client: ClientId,
    key: IdentityKey,
    signed: bool,
    mode: tagma_config::Mode,
    /// Whether unordered reads may be answered (`[cluster] readonly_requests`): it changes
    /// the ordered reply quorum.
    readonly: bool,
    /// The ordered reply quorum the client chose instead of the cluster's.
    reply_quorum: Option<usize>,
    /// Read on every send; replaced on a view change (see [`Members`]).
    members: RwLock<Arc<Members>>,
    /// Where ordered requests go first, when `leader_first`.
    leader: LeaderGuess,
    leader_first: bool,
    /// The longest a request waits for the guessed leader before it goes to every member:
    /// the retransmission period or half the replicas' request timeout, whichever is shorter.
    spread_most: Duration,
    request_bytes_max: usize,
    limits: NetLimits,
    connect_timeout: Duration,
    reconnect_delay: Duration,
    retransmit: Duration,
    invoke_timeout: Duration,
    calls: Mutex<HashMap<(RequestKind, RequestSeq), Call>>,
    /// Unordered requests whose replies are collected per replica ([`Proxy::invoke_unordered_each`]).
    each_calls: Mutex<HashMap<RequestSeq, EachCall>>,
    queries: Mutex<HashMap<u64, crossbeam_channel::Sender<StateInfo>>>,
    /// Ordered (reconfigurations included) and unordered sequence numbers.
    next_seq: [AtomicU64; 2],
    next_nonce: AtomicU64,
    follower: Mutex<ViewFollower>,
    /// [`Proxy::current_view`] calls in progress: every view report is copied to them.
    view_queries: Mutex<Vec<crossbeam_channel::Sender<(ReplicaId, tagma_wire::View)>>>,
    /// Bootstrap in progress ([`Inner::bootstrap_view`]): view histories are copied to it.
    history_queries: Mutex<Vec<HistorySender>>,
    outstanding: Mutex<Outstanding>,
    outstanding_freed: Condvar,
    outstanding_max: usize,
    closed: AtomicBool,
}

/// A client's proxy to the replicated service. Cheap to share: `Proxy` is `Send + Sync` and
/// all methods take `&self`.
pub struct Proxy {
    inner: Arc<Inner>,
}

fn random_u32() -> u32 {
    // Instance ids only need to differ between concurrent proxies of one principal.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let h = tagma_crypto::digest(
        &[
            t.to_le_bytes().as_slice(),
            &std::process::id().to_le_bytes(),
        ]
        .concat(),
    );
    u32::from_le_bytes([h.0[0], h.0[1], h.0[2], h.0[3]])
}

/// The requests in flight: how many hold a slot, and the sequence numbers of the ordered
/// ones.
#[derive(Default)]
struct Outstanding {
    count: usize,
    ordered: std::collections::BTreeSet<u64>,
}

impl Outstanding {
    /// Takes the next ordered sequence number from `next`, recorded in flight if the request
    /// holds the window.
    fn take_ordered(&mut self, next: &AtomicU64, holds_window: bool) -> OrderedSeq {
        let seq = next.fetch_add(1, Ordering::Relaxed);
        if holds_window {
            self.ordered.insert(seq);
        }
        OrderedSeq {
            seq: RequestSeq(seq),
            holds_window,
        }
    }
}

/// An ordered request's sequence number, and whether it holds the window of later ones
/// open below it until its call ends ([`Inner::acquire_slot`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct OrderedSeq {
    pub(super) seq: RequestSeq,
    pub(super) holds_window: bool,
}

impl Proxy {
    /// Connects to the replicas of `cfg` (in parallel) as client principal
    /// `options.principal` with `key`, and returns once a reply quorum is connected (the
    /// others connect in the background). Fails with [`ClientError::Unreachable`] when fewer
    /// replicas than a reply quorum answer (with [`ClientError::UnknownKey`] when replicas
    /// refused the key); the others are retried in the background.
    pub fn connect(
        cfg: &ValidConfig,
        key: IdentityKey,
        options: ClientOptions,
    ) -> Result<Proxy, ClientError> {
        let raw = &cfg.raw;
        let instance = options.instance.unwrap_or_else(random_u32);
        let members = members_of(
            &key,
            cfg.mode,
            raw.cluster.readonly_requests,
            options.reply_quorum,
            &cfg.initial_view(),
            None,
        )?;
        let leader = LeaderGuess::new(&members);
        let inner = Arc::new(Inner {
            client: ClientId::new(options.principal, instance),
            key,
            signed: raw.cluster.signed_requests,
            mode: cfg.mode,
            readonly: raw.cluster.readonly_requests,
            reply_quorum: options.reply_quorum,
            members: RwLock::new(Arc::new(members)),
            leader,
            leader_first: options.leader_first,
            spread_most: Duration::from_millis(
                (raw.timeouts.client_retransmit_ms).min(raw.timeouts.request_timeout_ms / 2),
            ),
            request_bytes_max: raw.limits.request_bytes_max,
            limits: NetLimits {
                frame_bytes_max: raw.limits.frame_bytes_max,
                handshake_timeout: Duration::from_millis(raw.timeouts.handshake_timeout_ms),
            },
            connect_timeout: Duration::from_millis(raw.timeouts.connect_timeout_ms),
            reconnect_delay: Duration::from_millis(raw.timeouts.reconnect_delay_ms.max(10)),
            retransmit: Duration::from_millis(raw.timeouts.client_retransmit_ms),
            invoke_timeout: Duration::from_millis(raw.timeouts.client_invoke_timeout_ms),
            calls: Mutex::new(HashMap::new()),
            each_calls: Mutex::new(HashMap::new()),
            queries: Mutex::new(HashMap::new()),
            next_seq: [AtomicU64::new(1), AtomicU64::new(1)],
            next_nonce: AtomicU64::new(1),
            follower: Mutex::new(ViewFollower::new(cfg.mode, &cfg.initial_view())),
            view_queries: Mutex::new(Vec::new()),
            history_queries: Mutex::new(Vec::new()),
            outstanding: Mutex::new(Outstanding::default()),
            outstanding_freed: Condvar::new(),
            // Replicas cache the `reply_cache_per_client` replies of a client with the highest
            // sequence numbers: with more requests in flight, or ordered ones spread over a
            // wider range of numbers, a lost reply could be evicted before the retransmission
            // asks for it.
            outstanding_max: options
                .outstanding_max
                .clamp(1, raw.limits.reply_cache_per_client),
            closed: AtomicBool::new(false),
        });
        let mut members = inner.members();
        let (mut connected, mut failures) = inner.connect_all(&members);
        if connected < members.ordered_quorum
            && connected > 0
            && let Some(admin) = cfg.admin
            && let Some(view) = inner.bootstrap_view(&cfg.initial_view(), &admin)
        {
            // Too few configured replicas answer, but those that do proved, with the
            // administrator's signatures, which replicas are members now.
            tracing::info!(
                view = view.id.0,
                members = view.members.len(),
                "the configured replicas are not the current members: following the administrator's signed history"
            );
            *lock(&inner.follower) = ViewFollower::new(cfg.mode, &view);
            inner.move_to_view(&view);
            members = inner.members();
            // Links kept from the configured view are connected already (no error).
            (connected, failures) = inner.connect_all(&members);
        }
        if connected < members.ordered_quorum {
            inner.close();
            return Err(inner.too_few_connected(connected, members.ordered_quorum, failures));
        }
        inner.spawn_maintenance();
        Ok(Proxy { inner })
    }

    pub fn client_id(&self) -> ClientId {
        self.inner.client
    }

    /// Totally ordered invocation; blocks until a reply quorum is reached.
    pub fn invoke_ordered(&self, request: Bytes) -> Result<Bytes, ClientError> {
        self.invoke_async(request, RequestKind::Ordered)?.wait()
    }

    /// Totally ordered invocation naming the request's conflict group (`invoke_parallel`):
    /// the payload goes in a [`GroupEnvelope`](tagma_wire::GroupEnvelope), and a replica executing in parallel by groups (`tagma replica
    /// --exec-classify groups`) runs requests of groups that do not conflict at once.
    pub fn invoke_parallel(
        &self,
        request: Bytes,
        group: tagma_wire::Group,
    ) -> Result<Bytes, ClientError> {
        let envelope = tagma_wire::GroupEnvelope { group, op: request };
        self.invoke_ordered(envelope.to_bytes())
    }

    /// Orders a view change (signed by the administrator, see
    /// `tagma_config::view::sign_change`) and returns what the replicas made of it.
    pub fn reconfigure(
        &self,
        change: &tagma_wire::ViewChange,
    ) -> Result<tagma_wire::ReconfigureOutcome, ClientError> {
        let reply = self
            .invoke_async(change.to_bytes(), RequestKind::Reconfigure)?
            .wait()?;
        tagma_wire::ReconfigureOutcome::decode(&reply)
            .map_err(|e| ClientError::BadReply(e.to_string()))
    }

    /// Read-only invocation without ordering; falls back to ordered when replies disagree.
    pub fn invoke_unordered(&self, request: Bytes) -> Result<Bytes, ClientError> {
        self.invoke_async(request, RequestKind::Unordered)?.wait()
    }

    /// Totally ordered invocation of a request whose reply may come up to `wait` after its
    /// execution (a service that defers replies: a blocking read answered by a later write,
    /// or by its own timeout in the service). The call gives up `wait` later than
    /// [`Proxy::invoke_ordered`] would.
    pub fn invoke_ordered_waiting(
        &self,
        request: Bytes,
        wait: Duration,
    ) -> Result<Bytes, ClientError> {
        self.invoke_async_waiting(request, RequestKind::Ordered, wait)?
            .wait()
    }

    /// Sends a request and returns immediately (after waiting for a free slot when
    /// `outstanding_max` requests are in flight).
    pub fn invoke_async(
        &self,
        request: Bytes,
        kind: RequestKind,
    ) -> Result<ReplyFuture, ClientError> {
        self.invoke_async_waiting(request, kind, Duration::ZERO)
    }

    /// [`Proxy::invoke_async`] for a request whose reply may come up to `wait` after its
    /// execution (see [`Proxy::invoke_ordered_waiting`]).
    pub fn invoke_async_waiting(
        &self,
        request: Bytes,
        kind: RequestKind,
        wait: Duration,
    ) -> Result<ReplyFuture, ClientError> {
        let inner = &self.inner;
        inner.check_size(&request)?;
        // A request whose reply may come long after its execution (a blocked take) does
        // not hold the window: later requests of this client must not wait for it.
        let seq = inner.acquire_slot(kind.is_ordered(), wait.is_zero())?;
        let slot = Arc::new(Slot::default());
        inner.start_call(
            request,
            kind,
            seq,
            inner.invoke_timeout.saturating_add(wait),
            slot.clone(),
        );
        Ok(ReplyFuture { slot })
    }

    /// Asks every replica for its execution position and state digest.
    /// A replica this proxy is not connected to has no answer at once (none is waited for).
    pub fn query_states(&self, timeout: Duration) -> Vec<(ReplicaId, Option<StateInfo>)> {
        let inner = &self.inner;
        let mut waits = Vec::new();
        for link in &inner.members().links {
            if !link.is_connected() {
                waits.push((link.info.id, None));
                continue;
            }
            let nonce = inner.next_nonce.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = crossbeam_channel::bounded(1);
            lock(&inner.queries).insert(nonce, tx);
            let frame = ClientMessage::StateQuery { nonce }.to_bytes();
            link.send(&frame);
            waits.push((link.info.id, Some((nonce, rx))));
        }
        let deadline = Instant::now() + timeout;
        waits
            .into_iter()
            .map(|(id, wait)| {
                let got = wait.and_then(|(nonce, rx)| {
                    let got = rx.recv_deadline(deadline).ok();
                    lock(&inner.queries).remove(&nonce);
                    got
                });
                (id, got)
            })
            .collect()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.inner.close();
    }
}

impl Inner {
    /// Refuses a request beyond `request_bytes_max`.
    fn check_size(&self, request: &Bytes) -> Result<(), ClientError> {
        if request.len() > self.request_bytes_max {
            return Err(ClientError::TooLarge {
                bytes: request.len(),
                max: self.request_bytes_max,
            });
        }
        Ok(())
    }

    /// Takes one of the `outstanding_max` slots of requests in flight, waiting up to the
    /// invocation timeout for one to be freed. An `ordered` request also gets its sequence
    /// number here, and waits while it would lie `outstanding_max` or more above the lowest
    /// ordered request in flight that `holds_window`: replies may complete out of order, and
    /// the replicas keep only the replies with the highest numbers, so a count alone would let
    /// a slow request's reply be evicted before its retransmission asks for it. A request
    /// whose reply is deferred (a blocked take) does not hold the window, or it would stall
    /// every later request of the client while it waits.
    fn acquire_slot(
        &self,
        ordered: bool,
        holds_window: bool,
    ) -> Result<Option<OrderedSeq>, ClientError> {
        let waited = Instant::now();
        let mut state = lock(&self.outstanding);
        loop {
            let next = self.next_seq[0].load(Ordering::Relaxed);
            let window_full = ordered
                && state
                    .ordered
                    .first()
                    .is_some_and(|low| next - low >= self.outstanding_max as u64);
            if state.count < self.outstanding_max && !window_full {
                break;
            }
            if self.closed.load(Ordering::Relaxed) {
                return Err(ClientError::Closed);
            }
            if waited.elapsed() >= self.invoke_timeout {
                return Err(ClientError::Timeout {
                    after_ms: self.invoke_timeout.as_millis() as u64,
                    replies: 0,
                    quorum: self.members().ordered_quorum,
                });
            }
            state = self
                .outstanding_freed
                .wait_timeout(state, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        state.count += 1;
        Ok(ordered.then(|| state.take_ordered(&self.next_seq[0], holds_window)))
    }

    /// The next ordered sequence number, holding the window, for a request that already
    /// holds a slot (an unordered read re-issued as ordered): it does not wait for the window.
    fn next_ordered_seq(&self) -> OrderedSeq {
        lock(&self.outstanding).take_ordered(&self.next_seq[0], true)
    }

    /// Frees a slot taken by [`Inner::acquire_slot`] (and the window the request held).
    fn release_slot(&self, ordered: Option<OrderedSeq>) {
        let mut state = lock(&self.outstanding);
        state.count = state.count.saturating_sub(1);
        if let Some(OrderedSeq {
            seq,
            holds_window: true,
        }) = ordered
        {
            state.ordered.remove(&seq.0);
        }
        // Both the count and the window may have opened: every waiter looks again.
        self.outstanding_freed.notify_all();
    }

    fn members(&self) -> Arc<Members> {
        self.members
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        for link in &self.members().links {
            // Dropping the queue ends the writer thread, which shuts the socket down (and so
            // ends the reader thread).
            link.close();
        }
        let calls: Vec<_> = lock(&self.calls).drain().map(|(_, c)| c).collect();
        for c in calls {
            c.slot.complete(Err(ClientError::Closed));
        }
        self.outstanding_freed.notify_all();
    }
}
