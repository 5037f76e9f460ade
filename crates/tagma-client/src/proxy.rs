//! The threaded proxy: one reader thread per replica connection, one maintenance thread
//! (retransmission, fallback, timeouts, reconnection), callers on any thread.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::task::{Context as TaskContext, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_config::ValidConfig;
use tagma_config::config::ReplicaInfo;
use tagma_crypto::{Authenticator, IdentityKey};
use tagma_net::{FrameReader, FrameWriter, LocalIdentity, NetError, NetLimits};
use tagma_wire::{
    ClientId, ClientMessage, Decode, Encode, ReplicaId, ReplicaMessage, Request, RequestAuth,
    RequestEnvelope, RequestKind, RequestSeq, Role, StateInfo, ViewId,
};
use tracing::debug;

use crate::voting::{ViewFollower, Voter};

/// Why an invocation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cluster unreachable: connected to {connected} of {needed} replicas needed ({details}) — fix: start the replicas (`tagma replica --dir DIR --id N`) and check the addresses in tagma.toml"
    )]
    Unreachable {
        connected: usize,
        needed: usize,
        details: String,
    },
    #[error(
        "no reply quorum after {after_ms} ms ({replies} replies, {quorum} matching needed) — fix: check that enough replicas are running and connected to each other"
    )]
    Timeout {
        after_ms: u64,
        replies: usize,
        quorum: usize,
    },
    #[error("replies disagree: no {quorum} matching replies among {replies}")]
    NoQuorum { replies: usize, quorum: usize },
    #[error("request of {bytes} bytes exceeds request_bytes_max = {max}")]
    TooLarge { bytes: usize, max: usize },
    #[error("invalid client key: {0}")]
    Key(String),
    #[error("the proxy was closed")]
    Closed,
    #[error("a reply quorum agreed on a reply that does not decode: {0}")]
    BadReply(String),
}

/// Proxy settings beyond the cluster configuration.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The configured client principal whose key this proxy holds.
    pub principal: u32,
    /// Instance part of the client id; a random one if `None` (a fresh session).
    pub instance: Option<u32>,
    /// Most requests in flight; `invoke_async` blocks beyond it.
    pub outstanding_max: usize,
}

impl ClientOptions {
    pub fn new(principal: u32) -> Self {
        ClientOptions {
            principal,
            instance: None,
            outstanding_max: 128,
        }
    }
}

#[derive(Default)]
struct SlotState {
    result: Option<Result<Bytes, ClientError>>,
    waker: Option<Waker>,
}

#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    ready: Condvar,
}

impl Slot {
    fn complete(&self, result: Result<Bytes, ClientError>) {
        let mut st = lock(&self.state);
        if st.result.is_none() {
            st.result = Some(result);
            if let Some(w) = st.waker.take() {
                w.wake();
            }
            self.ready.notify_all();
        }
    }
}

/// The pending result of an asynchronous invocation.
pub struct ReplyFuture {
    slot: Arc<Slot>,
}

impl ReplyFuture {
    /// Blocks until the reply quorum is reached or the invocation fails.
    pub fn wait(self) -> Result<Bytes, ClientError> {
        let mut st = lock(&self.slot.state);
        loop {
            if let Some(r) = st.result.take() {
                return r;
            }
            st = self.slot.ready.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Future for ReplyFuture {
    type Output = Result<Bytes, ClientError>;
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut st = lock(&self.slot.state);
        match st.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                st.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

struct Call {
    payload: Bytes,
    frame: Bytes,
    voter: Voter,
    /// The view the frame was built in: only its members' replies count.
    members: Arc<Members>,
    first_sent: Instant,
    last_sent: Instant,
    slot: Arc<Slot>,
    /// The caller was told the call timed out, but the request keeps being retransmitted:
    /// replicas order a client's requests by contiguous sequence numbers, so giving up on
    /// one would block every later request of this client. It still holds its
    /// `outstanding` slot, which bounds how many such requests can pile up.
    abandoned: bool,
}

struct Link {
    info: ReplicaInfo,
    /// The queue of the current connection's writer thread, tagged with the connection's
    /// generation so that the threads of an older connection cannot tear down a newer one.
    /// Callers never write to a socket themselves: a replica that stops reading fills only
    /// its own queue (frames beyond it are dropped; retransmission covers them).
    writer: Mutex<Option<(u64, crossbeam_channel::Sender<Bytes>)>>,
    generation: AtomicU64,
    last_attempt: Mutex<Option<Instant>>,
}

impl Link {
    fn new(info: ReplicaInfo) -> Arc<Link> {
        Arc::new(Link {
            info,
            writer: Mutex::new(None),
            generation: AtomicU64::new(0),
            last_attempt: Mutex::new(None),
        })
    }

    /// Queues `frame` without blocking.
    fn send(&self, frame: &Bytes) {
        let mut guard = lock(&self.writer);
        if let Some((_, tx)) = guard.as_ref()
            && let Err(crossbeam_channel::TrySendError::Disconnected(_)) =
                tx.try_send(frame.clone())
        {
            *guard = None;
        }
    }

    /// Forgets connection `generation` if it is still the current one.
    fn drop_connection(&self, generation: u64) {
        let mut guard = lock(&self.writer);
        if guard.as_ref().is_some_and(|(g, _)| *g == generation) {
            *guard = None;
        }
    }

    /// Closes the connection (its writer thread ends and shuts the socket down).
    fn close(&self) {
        drop(lock(&self.writer).take());
    }
}

/// The replicas of the view requests go in: a link to each, the request authenticator for
/// them (one MAC per member, ascending id) and the reply quorums. Replaced as a whole when
/// the client moves to a view with other members or another f.
struct Members {
    view: ViewId,
    links: Vec<Arc<Link>>,
    auth: Authenticator,
    ordered_quorum: usize,
    unordered_quorum: usize,
}

impl Members {
    fn contains(&self, id: ReplicaId) -> bool {
        self.links.iter().any(|l| l.info.id == id)
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
    /// Read on every send; replaced on a view change (see [`Members`]).
    members: RwLock<Arc<Members>>,
    request_bytes_max: usize,
    limits: NetLimits,
    connect_timeout: Duration,
    reconnect_delay: Duration,
    retransmit: Duration,
    invoke_timeout: Duration,
    calls: Mutex<HashMap<(RequestKind, RequestSeq), Call>>,
    queries: Mutex<HashMap<u64, crossbeam_channel::Sender<StateInfo>>>,
    /// Ordered (reconfigurations included) and unordered sequence numbers.
    next_seq: [AtomicU64; 2],
    next_nonce: AtomicU64,
    follower: Mutex<ViewFollower>,
    /// [`Proxy::current_view`] calls in progress: every view report is copied to them.
    view_queries: Mutex<Vec<crossbeam_channel::Sender<(ReplicaId, tagma_wire::View)>>>,
    /// Bootstrap in progress ([`Inner::bootstrap_view`]): view histories are copied to it.
    history_queries: Mutex<Vec<HistorySender>>,
    outstanding: Mutex<usize>,
    outstanding_freed: Condvar,
    outstanding_max: usize,
    closed: AtomicBool,
}

/// A client's proxy to the replicated service. Cheap to share: `Proxy` is `Send + Sync` and
/// all methods take `&self`.
pub struct Proxy {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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

impl Proxy {
    /// Connects to every replica of `cfg` (in parallel) as client principal
    /// `options.principal` with `key`. Fails with [`ClientError::Unreachable`] when fewer
    /// replicas than a reply quorum answer; the others are retried in the background.
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
            &cfg.initial_view(),
            None,
        )?;
        let inner = Arc::new(Inner {
            client: ClientId::new(options.principal, instance),
            key,
            signed: raw.cluster.signed_requests,
            mode: cfg.mode,
            readonly: raw.cluster.readonly_requests,
            members: RwLock::new(Arc::new(members)),
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
            queries: Mutex::new(HashMap::new()),
            next_seq: [AtomicU64::new(1), AtomicU64::new(1)],
            next_nonce: AtomicU64::new(1),
            follower: Mutex::new(ViewFollower::new(cfg.mode, &cfg.initial_view())),
            view_queries: Mutex::new(Vec::new()),
            history_queries: Mutex::new(Vec::new()),
            outstanding: Mutex::new(0),
            outstanding_freed: Condvar::new(),
            // Replicas cache `reply_cache_per_client` replies per client: with more requests
            // in flight, a lost reply could be evicted before the retransmission asks for it.
            outstanding_max: options
                .outstanding_max
                .clamp(1, raw.limits.reply_cache_per_client),
            closed: AtomicBool::new(false),
        });
        let mut members = inner.members();
        let mut errors = inner.connect_all(&members);
        let mut connected = errors.iter().filter(|e| e.is_none()).count();
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
            errors = inner.connect_all(&members);
            connected = errors.iter().filter(|e| e.is_none()).count();
        }
        if connected < members.ordered_quorum {
            inner.close();
            let details = errors.into_iter().flatten().collect::<Vec<_>>().join("; ");
            return Err(ClientError::Unreachable {
                connected,
                needed: members.ordered_quorum,
                details,
            });
        }
        let weak = Arc::downgrade(&inner);
        thread::Builder::new()
            .name(format!("tagma-client-{:x}", inner.client.0))
            .spawn(move || maintenance_loop(weak))
            .expect("spawn client maintenance thread");
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

    /// Sends a request and returns immediately (after waiting for a free slot when
    /// `outstanding_max` requests are in flight).
    pub fn invoke_async(
        &self,
        request: Bytes,
        kind: RequestKind,
    ) -> Result<ReplyFuture, ClientError> {
        let inner = &self.inner;
        if request.len() > inner.request_bytes_max {
            return Err(ClientError::TooLarge {
                bytes: request.len(),
                max: inner.request_bytes_max,
            });
        }
        {
            let waited = Instant::now();
            let mut n = lock(&inner.outstanding);
            while *n >= inner.outstanding_max {
                if inner.closed.load(Ordering::Relaxed) {
                    return Err(ClientError::Closed);
                }
                if waited.elapsed() >= inner.invoke_timeout {
                    return Err(ClientError::Timeout {
                        after_ms: inner.invoke_timeout.as_millis() as u64,
                        replies: 0,
                        quorum: inner.members().ordered_quorum,
                    });
                }
                n = inner
                    .outstanding_freed
                    .wait_timeout(n, Duration::from_millis(100))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            *n += 1;
        }
        let slot = Arc::new(Slot::default());
        inner.start_call(request, kind, slot.clone());
        Ok(ReplyFuture { slot })
    }

    /// Asks every replica for the view it installed (as far as it executed) and returns the
    /// newest view that enough replicas report for one of them to be correct (f+1 in BFT, one
    /// in CFT) — waiting for every replica's answer until `timeout`. Requests then go in it.
    pub fn current_view(&self, timeout: Duration) -> Result<tagma_wire::View, ClientError> {
        let inner = &self.inner;
        let asked = inner.members().links.len();
        let (tx, rx) = crossbeam_channel::bounded(asked * 2);
        lock(&inner.view_queries).push(tx);
        inner.send_all(&ClientMessage::ViewQuery.to_bytes());
        let started = Instant::now();
        let deadline = started + timeout;
        let mut reports: HashMap<ReplicaId, tagma_wire::View> = HashMap::new();
        while reports.len() < asked {
            match rx.recv_deadline(deadline) {
                Ok((from, view)) => {
                    reports.insert(from, view);
                }
                Err(_) => break,
            }
        }
        drop(rx);
        let needed = lock(&inner.follower).quorums().one_correct();
        let mut best: Option<&tagma_wire::View> = None;
        for view in reports.values() {
            let agreeing = reports.values().filter(|v| *v == view).count();
            if agreeing >= needed && best.is_none_or(|b| view.id > b.id) {
                best = Some(view);
            }
        }
        let Some(view) = best.cloned() else {
            return Err(ClientError::Timeout {
                after_ms: started.elapsed().as_millis() as u64,
                replies: reports.len(),
                quorum: needed,
            });
        };
        let newer = {
            let mut follower = lock(&inner.follower);
            let newer = view.id > follower.view();
            if newer {
                *follower = ViewFollower::new(follower.mode(), &view);
            }
            newer
        };
        if newer {
            inner.move_to_view(&view);
        }
        Ok(view)
    }

    /// Asks every replica for its execution position and state digest.
    pub fn query_states(&self, timeout: Duration) -> Vec<(ReplicaId, Option<StateInfo>)> {
        let inner = &self.inner;
        let mut waits = Vec::new();
        for link in &inner.members().links {
            let nonce = inner.next_nonce.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = crossbeam_channel::bounded(1);
            lock(&inner.queries).insert(nonce, tx);
            let frame = ClientMessage::StateQuery { nonce }.to_bytes();
            link.send(&frame);
            waits.push((link.info.id, nonce, rx));
        }
        let deadline = Instant::now() + timeout;
        waits
            .into_iter()
            .map(|(id, nonce, rx)| {
                let got = rx.recv_deadline(deadline).ok();
                lock(&inner.queries).remove(&nonce);
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

/// The [`Members`] of `view` for a client with `key`; links of `old` to the same replica
/// (same address and key) are kept, with their connections. Members whose address is not
/// IP:PORT cannot be reached (they still count in the quorums).
fn members_of(
    key: &IdentityKey,
    mode: tagma_config::Mode,
    readonly: bool,
    view: &tagma_wire::View,
    old: Option<&Members>,
) -> Result<Members, ClientError> {
    let keys: Vec<_> = view.members.iter().map(|m| m.key).collect();
    let auth = Authenticator::new(key, &keys).map_err(|e| ClientError::Key(e.to_string()))?;
    let links = view
        .members
        .iter()
        .filter_map(|m| {
            let addr = m.addr.parse().ok()?;
            let same = |l: &&Arc<Link>| {
                l.info.id == m.id && l.info.addr == addr && l.info.public_key == m.key
            };
            Some(match old.and_then(|o| o.links.iter().find(same)) {
                Some(link) => link.clone(),
                None => Link::new(ReplicaInfo {
                    id: m.id,
                    addr,
                    public_key: m.key,
                    metrics_addr: None,
                }),
            })
        })
        .collect();
    let q = tagma_config::Quorums::new(mode, view.members.len(), view.f as usize);
    Ok(Members {
        view: view.id,
        links,
        auth,
        ordered_quorum: q.reply_quorum(readonly),
        unordered_quorum: q.unordered_reply_quorum(),
    })
}

impl Inner {
    /// Connects to every member not connected yet, in parallel: one error (or `None`) per
    /// link, in order.
    fn connect_all(self: &Arc<Self>, members: &Members) -> Vec<Option<String>> {
        thread::scope(|s| {
            let handles: Vec<_> = members
                .links
                .iter()
                .map(|link| {
                    s.spawn({
                        let inner = self.clone();
                        move || {
                            if lock(&link.writer).is_some() {
                                return None;
                            }
                            inner.connect_link(link).err().map(|e| {
                                format!("replica {} at {}: {e}", link.info.id, link.info.addr)
                            })
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Some("connect thread panicked".into())))
                .collect()
        })
    }

    /// Asks the connected replicas for the administrator's signed history and replays each
    /// from the configured view `initial` ([`tagma_config::view::replay`]): the newest view a
    /// valid history leads to, if newer than `initial`. A faulty replica can only send an
    /// older (shorter) history, never a view the administrator did not sign.
    fn bootstrap_view(
        &self,
        initial: &tagma_wire::View,
        admin: &tagma_wire::PublicKey,
    ) -> Option<tagma_wire::View> {
        let links = self.members().links.len();
        let (tx, rx) = crossbeam_channel::bounded(links * 2);
        lock(&self.history_queries).push(tx.clone());
        self.send_all(&ClientMessage::ViewHistoryQuery.to_bytes());
        let deadline = Instant::now() + self.connect_timeout.max(Duration::from_millis(500));
        let mut best: Option<tagma_wire::View> = None;
        let mut answered = std::collections::BTreeSet::new();
        while answered.len() < links {
            let Ok((from, history)) = rx.recv_deadline(deadline) else {
                break;
            };
            answered.insert(from);
            match tagma_config::view::replay(initial, admin, self.mode, &history) {
                Ok(view) if best.as_ref().is_none_or(|b| view.id > b.id) => best = Some(view),
                Ok(_) => {}
                Err(e) => debug!("replica {from} sent a view history that does not replay: {e}"),
            }
        }
        lock(&self.history_queries).retain(|t| !t.same_channel(&tx));
        best.filter(|v| v.id > initial.id)
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

    fn connect_link(self: &Arc<Self>, link: &Arc<Link>) -> Result<(), NetError> {
        *lock(&link.last_attempt) = Some(Instant::now());
        let principal = self.client.principal();
        let me = LocalIdentity {
            role: Role::Client(principal),
            key: &self.key,
        };
        let (reader, writer) = tagma_net::connect(
            link.info.addr,
            &me,
            Role::Replica(link.info.id),
            &link.info.public_key,
            self.limits,
            self.connect_timeout,
        )?;
        let generation = link.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = crossbeam_channel::bounded::<Bytes>(LINK_QUEUE_MAX);
        *lock(&link.writer) = Some((generation, tx));
        let weak = Arc::downgrade(self);
        let id = link.info.id;
        thread::Builder::new()
            .name(format!("tagma-client-w{}", id.0))
            .spawn({
                let (weak, link) = (weak.clone(), link.clone());
                move || writer_loop(weak, link, generation, rx, writer)
            })
            .map_err(NetError::Io)?;
        let reader_link = link.clone();
        thread::Builder::new()
            .name(format!("tagma-client-r{}", id.0))
            .spawn(move || reader_loop(weak, reader_link, id, generation, reader))
            .map_err(NetError::Io)?;
        // A view change may have dropped this link while it connected (`maintain` works on a
        // snapshot): close it rather than keep a connection nobody uses.
        if !self.members().links.iter().any(|l| Arc::ptr_eq(l, link)) {
            link.close();
        }
        Ok(())
    }

    /// The request in the view of `members`, authenticated for its members.
    fn build_frame(
        &self,
        members: &Members,
        kind: RequestKind,
        seq: RequestSeq,
        payload: Bytes,
    ) -> Bytes {
        let request = Request {
            client: self.client,
            seq,
            kind,
            view: members.view,
            payload,
        };
        let digest = tagma_crypto::request_digest(&request);
        let auth = if self.signed {
            RequestAuth::Signature(self.key.sign(digest.as_bytes()))
        } else {
            RequestAuth::Macs(members.auth.tags(&digest))
        };
        ClientMessage::Request(RequestEnvelope { request, auth }).to_bytes()
    }

    fn start_call(&self, payload: Bytes, kind: RequestKind, slot: Arc<Slot>) {
        let sequence = &self.next_seq[usize::from(!kind.is_ordered())];
        let seq = RequestSeq(sequence.fetch_add(1, Ordering::Relaxed));
        let members = self.members();
        let frame = self.build_frame(&members, kind, seq, payload.clone());
        let now = Instant::now();
        let call = Call {
            payload,
            frame: frame.clone(),
            voter: voter(&members, kind),
            members: members.clone(),
            first_sent: now,
            last_sent: now,
            slot,
            abandoned: false,
        };
        lock(&self.calls).insert((kind, seq), call);
        send_all(&members, &frame);
        // The client may have moved to another view between the snapshot and the insertion
        // (`move_to_view` rebuilds only the calls it finds): rebuild this one.
        let now_members = self.members();
        if now_members.view != members.view {
            let frame = {
                let mut calls = lock(&self.calls);
                let Some(call) = calls.get_mut(&(kind, seq)) else {
                    return;
                };
                if call.members.view == now_members.view {
                    return;
                }
                call.frame = self.build_frame(&now_members, kind, seq, call.payload.clone());
                call.voter = voter(&now_members, kind);
                call.members = now_members.clone();
                call.frame.clone()
            };
            send_all(&now_members, &frame);
        }
    }

    /// A replica refused a request of an older view and reported the installed one (or
    /// answered a view query). Once the follower moves (f+1 members reported the same newer
    /// view), requests go in it, to its members, voted on with its quorums.
    fn on_current_view(&self, from: ReplicaId, view: tagma_wire::View) {
        lock(&self.view_queries).retain(|tx| tx.try_send((from, view.clone())).is_ok());
        let Some(view) = lock(&self.follower).report(from, &view) else {
            return;
        };
        self.move_to_view(&view);
    }

    /// Requests go in `view` from now on, to its members (links to new members connect on
    /// the next maintenance tick; links to replicas no longer members close); pending ones
    /// are rebuilt in it, voted on afresh, and sent again.
    fn move_to_view(&self, view: &tagma_wire::View) {
        let members = {
            let mut current = self
                .members
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if view.id <= current.view {
                return;
            }
            let next = match members_of(&self.key, self.mode, self.readonly, view, Some(&current)) {
                Ok(m) => Arc::new(m),
                Err(e) => {
                    tracing::warn!("cannot follow view {}: {e}", view.id);
                    return;
                }
            };
            for link in &current.links {
                if !next.links.iter().any(|l| Arc::ptr_eq(l, link)) {
                    link.close();
                }
            }
            *current = next.clone();
            next
        };
        tracing::info!(
            client = self.client.0,
            view = view.id.0,
            members = view.members.len(),
            "the cluster installed a new view: requests follow it"
        );
        let mut resend = Vec::new();
        for ((kind, seq), call) in lock(&self.calls).iter_mut() {
            call.frame = self.build_frame(&members, *kind, *seq, call.payload.clone());
            call.voter = voter(&members, *kind);
            call.members = members.clone();
            call.last_sent = Instant::now();
            resend.push(call.frame.clone());
        }
        for frame in resend {
            send_all(&members, &frame);
        }
    }

    fn finish(&self, call: Call, result: Result<Bytes, ClientError>) {
        call.slot.complete(result);
        let mut n = lock(&self.outstanding);
        *n = n.saturating_sub(1);
        self.outstanding_freed.notify_one();
    }

    /// An unordered read that cannot be decided is re-issued as an ordered request, keeping
    /// the caller's future.
    fn fall_back_to_ordered(&self, call: Call) {
        debug!(
            client = self.client.0,
            "unordered replies disagree or time out: retrying ordered"
        );
        self.start_call(call.payload, RequestKind::Ordered, call.slot);
    }

    fn send_all(&self, frame: &Bytes) {
        send_all(&self.members(), frame);
    }

    fn on_reply(&self, from: ReplicaId, msg: ReplicaMessage) {
        let reply = match msg {
            ReplicaMessage::Reply(r) => r,
            ReplicaMessage::StateInfo(info) => {
                if let Some(tx) = lock(&self.queries).remove(&info.nonce) {
                    let _ = tx.send(info);
                }
                return;
            }
            ReplicaMessage::CurrentView(view) => {
                self.on_current_view(from, view);
                return;
            }
            ReplicaMessage::ViewHistory(history) => {
                lock(&self.history_queries)
                    .retain(|tx| tx.try_send((from, history.clone())).is_ok());
                return;
            }
        };
        if reply.client != self.client {
            return;
        }
        let key = (reply.kind, reply.seq);
        let mut calls = lock(&self.calls);
        let Some(call) = calls.get_mut(&key) else {
            return;
        };
        if !call.members.contains(from) {
            // Only the members of the view the request went in vote (checked under the lock
            // that `move_to_view` takes to move the call).
            return;
        }
        if let Some(result) = call.voter.add(from, reply.payload) {
            let call = calls.remove(&key).expect("present");
            drop(calls);
            self.finish(call, Ok(result));
        } else if call.voter.exhausted() {
            let call = calls.remove(&key).expect("present");
            drop(calls);
            if reply.kind == RequestKind::Unordered {
                self.fall_back_to_ordered(call);
            } else {
                let (replies, quorum) = (call.voter.replies(), call.voter.quorum());
                self.finish(call, Err(ClientError::NoQuorum { replies, quorum }));
            }
        }
    }

    /// Retransmissions, unordered fallbacks on timeout, invocation timeouts, reconnection.
    fn maintain(self: &Arc<Self>) {
        let now = Instant::now();
        let members = self.members();
        for link in &members.links {
            let down = lock(&link.writer).is_none();
            let due = lock(&link.last_attempt)
                .is_none_or(|t| now.duration_since(t) >= self.reconnect_delay);
            if !(down && due) {
                continue;
            }
            match self.connect_link(link) {
                Err(e) => debug!("reconnect to replica {} failed: {e}", link.info.id),
                // A replica that restarted lost the requests it had not ordered yet: the
                // ordered calls in flight go to it again now rather than at their next
                // retransmission (after a restart of every replica, that would be the first
                // time any replica hears them again).
                Ok(()) => {
                    let frames: Vec<Bytes> = lock(&self.calls)
                        .iter()
                        .filter(|(key, _)| key.0 != RequestKind::Unordered)
                        .map(|(_, call)| call.frame.clone())
                        .collect();
                    for frame in &frames {
                        link.send(frame);
                    }
                }
            }
        }
        let mut resend = Vec::new();
        let mut expired = Vec::new();
        let mut fallback = Vec::new();
        {
            let mut calls = lock(&self.calls);
            let keys: Vec<_> = calls.keys().copied().collect();
            for key in keys {
                let call = calls.get_mut(&key).expect("present");
                if !call.abandoned && now.duration_since(call.first_sent) >= self.invoke_timeout {
                    call.abandoned = true;
                    let (replies, quorum) = (call.voter.replies(), call.voter.quorum());
                    expired.push((call.slot.clone(), replies, quorum));
                }
                if now.duration_since(call.last_sent) >= self.retransmit {
                    if key.0 == RequestKind::Unordered {
                        fallback.push(calls.remove(&key).expect("present"));
                    } else {
                        call.last_sent = now;
                        resend.push(call.frame.clone());
                    }
                }
            }
        }
        for frame in resend {
            self.send_all(&frame);
        }
        for call in fallback {
            self.fall_back_to_ordered(call);
        }
        let after_ms = self.invoke_timeout.as_millis() as u64;
        for (slot, replies, quorum) in expired {
            slot.complete(Err(ClientError::Timeout {
                after_ms,
                replies,
                quorum,
            }));
        }
    }
}

/// A fresh voter for a call of `kind` among `members`.
fn voter(members: &Members, kind: RequestKind) -> Voter {
    let quorum = if kind.is_ordered() {
        members.ordered_quorum
    } else {
        members.unordered_quorum
    };
    Voter::new(quorum, members.links.len().max(quorum))
}

fn send_all(members: &Members, frame: &Bytes) {
    for link in &members.links {
        link.send(frame);
    }
}

fn reader_loop(
    inner: Weak<Inner>,
    link: Arc<Link>,
    from: ReplicaId,
    generation: u64,
    mut reader: FrameReader,
) {
    loop {
        let frame = reader.read_frame();
        let Some(inner) = inner.upgrade() else { return };
        match frame {
            Ok(frame) => match ReplicaMessage::decode(&frame) {
                Ok(msg) => inner.on_reply(from, msg),
                Err(e) => debug!("malformed reply from replica {from}: {e}"),
            },
            Err(e) => {
                debug!("connection to replica {from} lost: {e}");
                link.drop_connection(generation);
                return;
            }
        }
    }
}

/// Frames queued per replica link; beyond it frames are dropped (retransmission resends).
const LINK_QUEUE_MAX: usize = 1024;
/// A writer coalesces queued frames into writes of about this many bytes.
const LINK_COALESCE_BYTES: usize = 256 << 10;

/// Writes the frames queued for one connection, coalescing them; on a write error (or when the
/// queue is dropped) it shuts the socket down and forgets the link.
fn writer_loop(
    inner: Weak<Inner>,
    link: Arc<Link>,
    generation: u64,
    rx: crossbeam_channel::Receiver<Bytes>,
    mut writer: FrameWriter,
) {
    while let Ok(first) = rx.recv() {
        let mut ok = writer.push(&first).is_ok();
        while ok && writer.pending_bytes() < LINK_COALESCE_BYTES {
            match rx.try_recv() {
                Ok(more) => ok = writer.push(&more).is_ok(),
                Err(_) => break,
            }
        }
        if !ok || writer.flush().is_err() {
            break;
        }
    }
    writer.shutdown();
    if inner.upgrade().is_some() {
        link.drop_connection(generation);
    }
}

fn maintenance_loop(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if strong.closed.load(Ordering::Relaxed) {
            return;
        }
        let tick =
            (strong.retransmit / 4).clamp(Duration::from_millis(5), Duration::from_millis(50));
        strong.maintain();
        drop(strong);
        thread::sleep(tick);
    }
}
