//! `tagma-exec`: the [`Service`] trait that applications implement, the sequential executor
//! that applies decided batches to it, the bounded per-client reply cache, and a conformance
//! suite every `Service` must pass.

pub mod conformance;
pub mod reply_cache;

use std::collections::HashMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tagma_core::view::Membership;
use tagma_wire::{
    Batch, CheckpointInfo, ClientId, ConsensusId, Digest, ReconfigureOutcome, Reply, RequestKind,
    RequestSeq, View, ViewId,
};
use tagma_wire::{Decode, Encode};

pub use reply_cache::ReplyCache;

/// What a service learns about the request it executes. Time and randomness reach a service
/// only through here, so execution stays deterministic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context {
    pub client: ClientId,
    pub seq: RequestSeq,
    /// The consensus instance that ordered the request (`None` for unordered requests).
    pub cid: Option<ConsensusId>,
    /// Leader-chosen, consensus-agreed timestamp of the batch (ms since the Unix epoch).
    pub timestamp_ms: u64,
    /// Deterministic per-request seed: derived from the batch seed and the request's index.
    pub seed: u64,
}

/// A reply to an ordered request executed earlier, whose reply its service deferred
/// ([`Service::execute_ordered_run`] answered it with `None`): a blocked operation answered by
/// a later request, or by the agreed time passing ([`Service::advance_time`]).
///
/// Every correct replica executes the same requests at the same agreed times, so each gives
/// the same late reply at the same point of the order; the executor caches it like any reply,
/// so a retransmission of the deferred request is answered from the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LateReply {
    pub client: ClientId,
    pub seq: RequestSeq,
    pub payload: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    #[error("invalid snapshot: {0}")]
    InvalidSnapshot(String),
}

/// A deterministic replicated service. Same initial state + same sequence of ordered requests
/// ⇒ same state and same replies on every replica.
pub trait Service: Send + 'static {
    /// Executes a totally ordered request and returns the reply bytes.
    fn execute_ordered(&mut self, request: &Bytes, ctx: &Context) -> Bytes;
    /// Executes consecutive ordered requests of one decided batch, in order, and returns
    /// their replies in order. The default runs [`Service::execute_ordered`] on each; a
    /// parallel service (`tagma_parallel::ParallelReplica`) runs requests that do not conflict
    /// at once, with the same replies and state. Called between view changes only: no view
    /// change and no checkpoint happens while these requests run.
    fn execute_ordered_batch(&mut self, requests: &[(Bytes, Context)]) -> Vec<Bytes> {
        requests
            .iter()
            .map(|(request, ctx)| self.execute_ordered(request, ctx))
            .collect()
    }
    /// Executes consecutive ordered requests of one decided batch, in order, where the service
    /// may defer replies: `None` at position `i` defers the reply to request `i`, which the
    /// service gives later as a [`LateReply`] (exactly once); late replies to requests
    /// deferred earlier go into `late`, in the order the service gives them. The default
    /// defers nothing ([`Service::execute_ordered_batch`]). Same calling rules as
    /// [`Service::execute_ordered_batch`]; a service that overrides this one is only ever
    /// called through it.
    fn execute_ordered_run(
        &mut self,
        requests: &[(Bytes, Context)],
        late: &mut Vec<LateReply>,
    ) -> Vec<Option<Bytes>> {
        let _ = late;
        self.execute_ordered_batch(requests)
            .into_iter()
            .map(Some)
            .collect()
    }
    /// The agreed time reached `timestamp_ms` (the timestamp of the decided batch about to
    /// execute, time-only batches included; it never goes back): the service does what is
    /// due by then (timeouts of waiting requests, leases running out), and gives the late
    /// replies that makes into `late`. Called before the batch's first request.
    fn advance_time(&mut self, timestamp_ms: u64, late: &mut Vec<LateReply>) {
        let _ = (timestamp_ms, late);
    }
    /// The earliest agreed time at which [`Service::advance_time`] has something to do, if
    /// any. When it passes with no request to order, the leader orders a batch that carries
    /// only the time, so a wait times out even when no client sends anything.
    fn next_due_ms(&self) -> Option<u64> {
        None
    }
    /// Executes a read-only request without ordering. Must not change the state.
    fn execute_unordered(&self, request: &Bytes, ctx: &Context) -> Bytes;
    /// A complete, deterministic serialisation of the state.
    fn snapshot(&self) -> Bytes;
    /// Writes exactly the bytes of [`Service::snapshot`] to `out`, for a consumer that
    /// needs only to stream them (a digest of a large state, without a copy of it in
    /// memory). The default writes `snapshot()`; a service with a large state overrides it.
    fn write_snapshot(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(&self.snapshot())
    }
    /// A copy of the state that [`Service::snapshot`] can be computed from later, on another
    /// thread, if taking it costs much less than serialising the state: a service whose
    /// large values are shared (`Bytes`) copies only its index. The checkpoint of a large
    /// state then holds the execution thread for the copy, not for the serialisation. `None`
    /// (the default): checkpoints call [`Service::snapshot`] at once.
    fn freeze(&self) -> Option<FrozenSnapshot> {
        None
    }
    /// Replaces the state with a snapshot.
    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError>;
    /// Deterministic digest of the state: equal on replicas that executed the same requests.
    fn state_digest(&self) -> Digest;
}

/// The per-request seed of the request at position `index` of a batch whose seed is
/// `batch_seed`.
///
/// A splitmix64 step: `z = batch_seed + (index + 1) * 0x9E3779B97F4A7C15` (wrapping), then the
/// splitmix64 finaliser (xor-shift-multiply mixing). It is a pure function of its inputs, so
/// every replica derives the same seed for the same request, and distinct indices of one batch
/// get well-spread, distinct seeds.
pub fn request_seed(batch_seed: u64, index: usize) -> u64 {
    let mut z = batch_seed.wrapping_add(
        (index as u64)
            .wrapping_add(1)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A service's state as [`Service::freeze`] took it: called (once, on any thread), it returns
/// the bytes [`Service::snapshot`] returned when the state was taken.
pub type FrozenSnapshot = Box<dyn FnOnce() -> Bytes + Send>;

/// An [`Executor::checkpoint`] taken at one point and serialised later
/// ([`Executor::checkpoint_deferred`]).
pub struct DeferredCheckpoint {
    head: BytesMut,
    snapshot: Result<Bytes, FrozenSnapshot>,
}

impl DeferredCheckpoint {
    /// The bytes [`Executor::checkpoint`] would have returned when this was taken.
    pub fn finish(self) -> Bytes {
        let DeferredCheckpoint { mut head, snapshot } = self;
        let snapshot = snapshot.unwrap_or_else(|frozen| frozen());
        head.reserve(snapshot.len());
        head.put_slice(&snapshot);
        head.freeze()
    }

    /// Whether the service's snapshot is still to be serialised ([`Service::freeze`]).
    pub fn is_frozen(&self) -> bool {
        self.snapshot.is_err()
    }
}

/// The digest that names a checkpoint in state transfer: BLAKE3 of its bytes.
pub fn checkpoint_digest(checkpoint: &[u8]) -> Digest {
    Digest(*blake3::hash(checkpoint).as_bytes())
}

/// Applies decided batches to a service in consensus order, tracking the execution position
/// and caching recent replies per client for retransmissions.
pub struct Executor<S: Service> {
    pub service: S,
    view: ViewId,
    /// Number of consensus instances executed = the next instance to execute.
    executed_instances: u64,
    /// Number of ordered requests executed.
    executed_requests: u64,
    reply_cache: ReplyCache,
    /// The last ordered request executed per client (the sessions a recovering replica's
    /// core resumes with, so a retransmission is never executed twice).
    last_executed: HashMap<ClientId, RequestSeq>,
    /// The timestamp of the last batch executed (a resumed leader's batches never go back).
    last_timestamp_ms: u64,
    /// The replica set and the rules for changing it ([`Executor::with_membership`]); without
    /// it, every view change is refused.
    membership: Option<Membership>,
    /// The last instance of the newest state installed by state transfer
    /// ([`Executor::install_fetched`]): deliveries of instances up to it were decided while
    /// the state was fetched, and [`Executor::execute_decided`] skips them.
    installed_through: Option<ConsensusId>,
}

/// Version byte of [`Executor::checkpoint`]'s encoding (3: with the view's members and the
/// signed changes that led to it; version 2 checkpoints restore with no history, version 1
/// ones keeping the configured members).
const CHECKPOINT_VERSION: u8 = 3;

impl<S: Service> Executor<S> {
    pub fn new(
        service: S,
        view: ViewId,
        reply_cache_per_client: usize,
        reply_cache_clients_max: usize,
    ) -> Self {
        Executor {
            service,
            view,
            executed_instances: 0,
            executed_requests: 0,
            reply_cache: ReplyCache::new(reply_cache_per_client, reply_cache_clients_max),
            last_executed: HashMap::new(),
            last_timestamp_ms: 0,
            membership: None,
            installed_through: None,
        }
    }

    /// Gives the executor the replica set and the rules for changing it: view changes ordered
    /// later are judged ([`Membership::apply_change`]) and answered here, never reach the
    /// service, and the view is part of every checkpoint.
    pub fn with_membership(mut self, membership: Membership) -> Self {
        self.view = membership.view.id;
        self.membership = Some(membership);
        self
    }

    /// The installed view with its members, when the executor keeps them.
    pub fn members(&self) -> Option<&View> {
        self.membership.as_ref().map(|m| &m.view)
    }

    /// The administrator's signed changes since the configured view (see
    /// [`tagma_core::view::replay`]); empty without a membership.
    pub fn view_history(&self) -> &[tagma_wire::ViewChange] {
        self.membership.as_ref().map_or(&[], |m| &m.history)
    }
    /// A decided batch, as the core delivers it: `None` if a state installed by state
    /// transfer already covers instance `cid` (the core delivered it while the state was
    /// being fetched), else [`Executor::execute_batch`]'s replies.
    pub fn execute_decided(&mut self, cid: ConsensusId, batch: &Batch) -> Option<Vec<Reply>> {
        if self.covers(cid) {
            return None;
        }
        Some(self.execute_batch(cid, batch))
    }

    /// Whether a state installed by state transfer covers instance `cid` (its delivery is
    /// skipped, see [`Executor::execute_decided`]).
    pub fn covers(&self, cid: ConsensusId) -> bool {
        self.installed_through.is_some_and(|t| cid <= t)
    }

    /// Executes every request of the batch decided in `cid` in order (cid must be the next
    /// instance: asserted), caches the replies and returns them: first the late replies the
    /// agreed time's advance gave ([`Service::advance_time`]), then each run's replies in batch
    /// order followed by the late replies the run gave. A request whose reply the service
    /// deferred has none here.
    ///
    /// Request `i` of the batch (its position in `batch.requests`) gets the seed
    /// [`request_seed`]`(batch.seed, i)`. Unordered requests never belong in a batch; they are
    /// skipped (and trip a debug assertion).
    pub fn execute_batch(&mut self, cid: ConsensusId, batch: &Batch) -> Vec<Reply> {
        assert!(
            cid.0 == self.executed_instances,
            "executor: batch of instance {} executed out of order (next instance is {})",
            cid.0,
            self.executed_instances
        );
        let mut replies = Vec::with_capacity(batch.requests.len());
        let mut late = Vec::new();
        self.service.advance_time(batch.timestamp_ms, &mut late);
        self.record_late(late, &mut replies);
        // Runs of ordered requests go to the service together (a parallel service runs them
        // at once); a view change is executed alone between runs, with nothing running.
        let mut run: Vec<(usize, Bytes, Context)> = Vec::new();
        for (index, envelope) in batch.requests.iter().enumerate() {
            let request = &envelope.request;
            debug_assert!(
                request.kind.is_ordered(),
                "unordered request in the batch of instance {}",
                cid.0
            );
            match request.kind {
                RequestKind::Unordered => {}
                RequestKind::Ordered => run.push((
                    index,
                    request.payload.clone(),
                    Context {
                        client: request.client,
                        seq: request.seq,
                        cid: Some(cid),
                        timestamp_ms: batch.timestamp_ms,
                        seed: request_seed(batch.seed, index),
                    },
                )),
                RequestKind::Reconfigure => {
                    self.execute_run(batch, &mut run, &mut replies);
                    let payload = self.reconfigure(&request.payload);
                    self.record(request, payload, &mut replies);
                }
            }
        }
        self.execute_run(batch, &mut run, &mut replies);
        self.executed_instances += 1;
        self.last_timestamp_ms = self.last_timestamp_ms.max(batch.timestamp_ms);
        replies
    }
    /// Executes a run of ordered requests (positions in `batch`, payloads, contexts) and
    /// records their replies in order.
    fn execute_run(
        &mut self,
        batch: &Batch,
        run: &mut Vec<(usize, Bytes, Context)>,
        replies: &mut Vec<Reply>,
    ) {
        if run.is_empty() {
            return;
        }
        let requests: Vec<(Bytes, Context)> = run
            .iter()
            .map(|(_, payload, ctx)| (payload.clone(), *ctx))
            .collect();
        let mut late = Vec::new();
        let payloads = self.service.execute_ordered_run(&requests, &mut late);
        assert_eq!(
            payloads.len(),
            requests.len(),
            "the service answered a run of {} requests with {} replies",
            requests.len(),
            payloads.len()
        );
        for ((index, _, _), payload) in run.drain(..).zip(payloads) {
            let request = &batch.requests[index].request;
            match payload {
                Some(payload) => self.record(request, payload, replies),
                None => self.record_deferred(request),
            }
        }
        self.record_late(late, replies);
    }

    /// Caches and returns the late replies a service gave.
    fn record_late(&mut self, late: Vec<LateReply>, replies: &mut Vec<Reply>) {
        for LateReply {
            client,
            seq,
            payload,
        } in late
        {
            debug_assert!(
                self.last_executed.get(&client).is_some_and(|s| *s >= seq),
                "a late reply to {client}/{seq}, which was never executed"
            );
            debug_assert!(
                self.reply_cache.get(client, seq).is_none(),
                "a second reply to {client}/{seq}"
            );
            let reply = Reply {
                client,
                seq,
                kind: RequestKind::Ordered,
                view: self.view,
                payload,
            };
            self.reply_cache.insert(reply.clone());
            replies.push(reply);
        }
    }

    /// Counts an executed request whose reply the service deferred.
    fn record_deferred(&mut self, request: &tagma_wire::Request) {
        self.executed_requests += 1;
        self.last_executed.insert(request.client, request.seq);
    }

    /// Counts an executed request and caches its reply.
    fn record(&mut self, request: &tagma_wire::Request, payload: Bytes, replies: &mut Vec<Reply>) {
        self.executed_requests += 1;
        self.last_executed.insert(request.client, request.seq);
        let reply = Reply {
            client: request.client,
            seq: request.seq,
            kind: request.kind,
            view: self.view,
            payload,
        };
        self.reply_cache.insert(reply.clone());
        replies.push(reply);
    }

    /// An ordered view change: judged against the installed view and installed if valid (the
    /// core installs the same view for the next instance); the reply says which.
    fn reconfigure(&mut self, payload: &Bytes) -> Bytes {
        let outcome = match self.membership.as_mut() {
            None => ReconfigureOutcome::Refused(
                "this replica runs without a membership: view changes are refused".into(),
            ),
            Some(m) => match m.apply_change(payload) {
                Ok(view) => ReconfigureOutcome::Installed(view.clone()),
                Err(e) => ReconfigureOutcome::Refused(e.to_string()),
            },
        };
        if let ReconfigureOutcome::Installed(view) = &outcome {
            self.view = view.id;
        }
        outcome.to_bytes()
    }

    /// Executes an unordered request against the current state.
    pub fn execute_unordered(
        &self,
        client: ClientId,
        seq: RequestSeq,
        payload: &Bytes,
        now_ms: u64,
    ) -> Reply {
        let ctx = Context {
            client,
            seq,
            cid: None,
            timestamp_ms: now_ms,
            seed: 0,
        };
        let payload = self.service.execute_unordered(payload, &ctx);
        Reply {
            client,
            seq,
            kind: RequestKind::Unordered,
            view: self.view,
            payload,
        }
    }
    /// The cached reply for an ordered request already executed, if still cached.
    pub fn cached_reply(&self, client: ClientId, seq: RequestSeq) -> Option<Reply> {
        self.reply_cache.get(client, seq).cloned()
    }
    pub fn executed_instances(&self) -> u64 {
        self.executed_instances
    }
    pub fn executed_requests(&self) -> u64 {
        self.executed_requests
    }
    pub fn state_digest(&self) -> Digest {
        self.service.state_digest()
    }
    /// The service's [`Service::next_due_ms`]: when the leader is to order a time-only batch
    /// if no request comes first.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.service.next_due_ms()
    }
    /// The service, read-only (every change goes through ordered batches).
    pub fn service(&self) -> &S {
        &self.service
    }
    /// The timestamp of the last batch executed (0 before any).
    pub fn last_timestamp_ms(&self) -> u64 {
        self.last_timestamp_ms
    }

    /// The last ordered request executed of every client that has one.
    pub fn sessions(&self) -> Vec<(ClientId, RequestSeq)> {
        let mut sessions: Vec<_> = self.last_executed.iter().map(|(c, s)| (*c, *s)).collect();
        sessions.sort();
        sessions
    }

    /// Everything a replica must recover to continue after its last executed instance
    /// exactly: the execution position, the sessions, the cached replies and the service's
    /// snapshot: a checkpoint.
    ///
    /// Layout: version `u8` (1) | executed_instances `u64` | executed_requests `u64` | view
    /// `u32` | last batch timestamp `u64` | sessions `u32` count × (client `u64`, seq `u64`) | replies `u32` count × (`u32`
    /// length, encoded `ReplicaMessage::Reply`) | service snapshot (the rest), all LE.
    pub fn checkpoint(&self) -> Bytes {
        let snapshot = self.service.snapshot();
        let mut out = self.checkpoint_head(snapshot.len());
        out.put_slice(&snapshot);
        out.freeze()
    }

    /// [`Executor::checkpoint`], of which only the executor's own part and a frozen copy of
    /// the service's state ([`Service::freeze`]) are taken now: the service's serialisation
    /// happens in [`DeferredCheckpoint::finish`], wherever that is called.
    pub fn checkpoint_deferred(&self) -> DeferredCheckpoint {
        match self.service.freeze() {
            Some(frozen) => DeferredCheckpoint {
                head: self.checkpoint_head(0),
                snapshot: Err(frozen),
            },
            None => {
                let snapshot = self.service.snapshot();
                DeferredCheckpoint {
                    head: self.checkpoint_head(snapshot.len()),
                    snapshot: Ok(snapshot),
                }
            }
        }
    }

    /// [`checkpoint_digest`] of [`Executor::checkpoint`], with the service's snapshot
    /// streamed into the hash ([`Service::write_snapshot`]) instead of built in memory.
    pub fn checkpoint_digest(&self) -> Digest {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&self.checkpoint_head(0));
        self.service
            .write_snapshot(&mut hasher)
            .expect("hashing never fails to write");
        Digest(*hasher.finalize().as_bytes())
    }

    /// Everything [`Executor::checkpoint`] holds before the service's snapshot (with room
    /// for `snapshot_len` more bytes).
    fn checkpoint_head(&self, snapshot_len: usize) -> BytesMut {
        let sessions = self.sessions();
        let replies: Vec<Bytes> = self
            .reply_cache
            .replies()
            .map(|r| tagma_wire::ReplicaMessage::Reply(r.clone()).to_bytes())
            .collect();
        let mut out = BytesMut::with_capacity(
            37 + 16 * sessions.len()
                + replies.iter().map(|r| 4 + r.len()).sum::<usize>()
                + snapshot_len,
        );
        out.put_u8(CHECKPOINT_VERSION);
        out.put_u64_le(self.executed_instances);
        out.put_u64_le(self.executed_requests);
        out.put_u32_le(self.view.0);
        out.put_u64_le(self.last_timestamp_ms);
        out.put_u32_le(sessions.len() as u32);
        for (client, seq) in sessions {
            out.put_u64_le(client.0);
            out.put_u64_le(seq.0);
        }
        out.put_u32_le(replies.len() as u32);
        for r in &replies {
            out.put_u32_le(r.len() as u32);
            out.put_slice(r);
        }
        match self.members() {
            None => out.put_u8(0),
            Some(view) => {
                let view = view.to_bytes();
                out.put_u8(1);
                out.put_u32_le(view.len() as u32);
                out.put_slice(&view);
                let history = self.view_history();
                out.put_u32_le(history.len() as u32);
                for change in history {
                    let change = change.to_bytes();
                    out.put_u32_le(change.len() as u32);
                    out.put_slice(&change);
                }
            }
        }
        out
    }

    /// Replaces the whole state with a [`Executor::checkpoint`].
    pub fn restore(&mut self, checkpoint: &Bytes) -> Result<(), ServiceError> {
        let bad =
            |what: &str| ServiceError::InvalidSnapshot(format!("executor checkpoint: {what}"));
        let mut b = checkpoint.clone();
        let need = |b: &Bytes, n: usize, what: &str| {
            if b.remaining() < n {
                Err(bad(what))
            } else {
                Ok(())
            }
        };
        need(&b, 33, "truncated header")?;
        let version = b.get_u8();
        if !(1..=CHECKPOINT_VERSION).contains(&version) {
            return Err(bad("unknown version"));
        }
        let executed_instances = b.get_u64_le();
        let executed_requests = b.get_u64_le();
        let view_id = ViewId(b.get_u32_le());
        let last_timestamp_ms = b.get_u64_le();
        need(&b, 4, "truncated sessions")?;
        let count = b.get_u32_le() as usize;
        need(&b, count.saturating_mul(16), "truncated sessions")?;
        let mut last_executed = HashMap::with_capacity(count);
        for _ in 0..count {
            last_executed.insert(ClientId(b.get_u64_le()), RequestSeq(b.get_u64_le()));
        }
        need(&b, 4, "truncated replies")?;
        let count = b.get_u32_le() as usize;
        let mut reply_cache = ReplyCache::new(
            self.reply_cache.per_client(),
            self.reply_cache.clients_max(),
        );
        for _ in 0..count {
            need(&b, 4, "truncated reply")?;
            let len = b.get_u32_le() as usize;
            need(&b, len, "truncated reply")?;
            match tagma_wire::ReplicaMessage::decode(&b.split_to(len)) {
                // The payload is copied: a slice would keep the whole checkpoint alive for
                // as long as the reply stays cached (a client that never comes back).
                Ok(tagma_wire::ReplicaMessage::Reply(mut r)) => {
                    r.payload = Bytes::copy_from_slice(&r.payload);
                    reply_cache.insert(r)
                }
                _ => return Err(bad("a cached reply does not decode")),
            }
        }
        // Version 1 predates views with members: the configured ones stay (and the history).
        let mut history = self
            .membership
            .as_ref()
            .map(|m| m.history.clone())
            .unwrap_or_default();
        let members = if version == 1 {
            self.membership.as_ref().map(|m| m.view.clone())
        } else {
            need(&b, 1, "truncated view")?;
            match b.get_u8() {
                0 => None,
                1 => {
                    need(&b, 4, "truncated view")?;
                    let len = b.get_u32_le() as usize;
                    need(&b, len, "truncated view")?;
                    let view = View::decode(&b.split_to(len))
                        .map_err(|_| bad("the view does not decode"))?;
                    if view.id != view_id {
                        return Err(bad("the view's members belong to another view"));
                    }
                    // Version 2 predates the history: none is known.
                    history.clear();
                    if version >= 3 {
                        need(&b, 4, "truncated view history")?;
                        let count = b.get_u32_le() as usize;
                        if count > tagma_core::view::HISTORY_MAX {
                            return Err(bad("a view history longer than kept"));
                        }
                        for _ in 0..count {
                            need(&b, 4, "truncated view history")?;
                            let len = b.get_u32_le() as usize;
                            need(&b, len, "truncated view history")?;
                            let change = tagma_wire::ViewChange::decode(&b.split_to(len))
                                .map_err(|_| bad("a view change of the history does not decode"))?;
                            history.push(change);
                        }
                    }
                    Some(view)
                }
                _ => return Err(bad("unknown view tag")),
            }
        };
        if members.is_some() != self.membership.is_some() {
            return Err(bad(if members.is_some() {
                "it names the view's members, this executor runs without a membership"
            } else {
                "it lacks the view's members, which this executor keeps"
            }));
        }
        self.service.install_snapshot(&b)?;
        if let (Some(m), Some(view)) = (self.membership.as_mut(), members) {
            m.view = view;
            m.history = history;
        }
        self.executed_instances = executed_instances;
        self.executed_requests = executed_requests;
        self.view = view_id;
        self.last_timestamp_ms = last_timestamp_ms;
        self.last_executed = last_executed;
        self.reply_cache = reply_cache;
        Ok(())
    }

    /// Whether a fetched state ending at instance `target` may still be installed: not if this
    /// executor already executed beyond it (see [`Executor::install_fetched`]).
    pub fn can_install_through(&self, target: ConsensusId) -> Result<(), String> {
        if self.executed_instances > target.0.saturating_add(1) {
            return Err(format!(
                "this replica already executed beyond instance {target}"
            ));
        }
        Ok(())
    }

    /// State transfer: replaces the state with a fetched checkpoint (`state`, which must be
    /// the `checkpoint` its source announced: length and digest are checked here), executes
    /// the proven decisions `log` after it, and compares the digest of its own checkpoint
    /// ([`Executor::checkpoint`], deterministic) at each voucher's instance with the
    /// voucher's (a voucher at the checkpoint's own instance is compared with the
    /// checkpoint's digest). With a membership, every decision's proof is checked under the
    /// view in effect at its instance. Counting the source as one match, at least `needed`
    /// must match; otherwise — or if anything does not install, decode, prove or follow — the
    /// previous state is restored and the reason returned. Replies of the replayed batches are cached, not
    /// returned. On success returns how many matched. A state that ends before what this
    /// executor already executed is refused without touching anything (the replica caught up
    /// by other means while it was fetched; installing it would go back in time).
    ///
    /// Without a checkpoint (`None`: a joining replica replaying the history because no
    /// checkpoint was vouched for), `log` starts at the instance this executor executes next
    /// — 0 from the initial state every replica starts from, or after the state a joining
    /// replica restarted with — that state counts as the source's match, and `state` is
    /// ignored.
    pub fn install_fetched(
        &mut self,
        state: &Bytes,
        checkpoint: Option<&CheckpointInfo>,
        log: &[tagma_wire::DecidedInstance],
        vouchers: &[CheckpointInfo],
        needed: usize,
    ) -> Result<usize, String> {
        let through = match (log.last(), checkpoint) {
            (Some(d), _) => d.cid,
            (None, Some(c)) => c.cid,
            (None, None) => return Err("nothing fetched".into()),
        };
        self.can_install_through(through)?;
        match checkpoint {
            Some(c) if state.len() as u64 != c.len || checkpoint_digest(state) != c.digest => {
                return Err("the fetched checkpoint does not match its source's digest".into());
            }
            None if log
                .first()
                .is_none_or(|d| d.cid.0 != self.executed_instances) =>
            {
                return Err(format!(
                    "a replay without a checkpoint starts where this executor stands (instance {})",
                    self.executed_instances
                ));
            }
            _ => {}
        }
        let backup = self.checkpoint();
        let result = self.replay_fetched(state, checkpoint, log, vouchers, needed);
        match result {
            Ok(_) => self.installed_through = Some(through),
            Err(_) => self
                .restore(&backup)
                .expect("a checkpoint of this executor restores"),
        }
        result
    }

    fn replay_fetched(
        &mut self,
        state: &Bytes,
        checkpoint: Option<&CheckpointInfo>,
        log: &[tagma_wire::DecidedInstance],
        vouchers: &[CheckpointInfo],
        needed: usize,
    ) -> Result<usize, String> {
        let mut matched = 1;
        if let Some(checkpoint) = checkpoint {
            let checkpoint_cid = checkpoint.cid.0;
            self.restore(state)
                .map_err(|e| format!("the fetched checkpoint does not install: {e}"))?;
            if self.executed_instances != checkpoint_cid + 1 {
                return Err(format!(
                    "the fetched checkpoint is at instance {}, announced {checkpoint_cid}",
                    self.executed_instances.wrapping_sub(1)
                ));
            }
            matched += vouchers
                .iter()
                .filter(|v| v.cid == checkpoint.cid && v.digest == checkpoint.digest)
                .count();
        }
        // Proofs are checked under the view each instance was decided in: the checkpoint's,
        // then each view a replayed change installs (the core could check them only under
        // its own view).
        let mut checker: Option<(ViewId, tagma_core::proof::ProofChecker)> = None;
        for decided in log {
            if decided.cid.0 != self.executed_instances {
                return Err(format!(
                    "the fetched log skips from instance {} to {}",
                    self.executed_instances, decided.cid
                ));
            }
            if let Some(m) = &self.membership {
                if checker.as_ref().is_none_or(|(view, _)| *view != m.view.id) {
                    checker = Some((
                        m.view.id,
                        tagma_core::proof::ProofChecker::for_membership(m),
                    ));
                }
                let (view, checker) = checker.as_ref().expect("set above");
                if checker.check(decided).is_none() {
                    return Err(format!(
                        "the proof of fetched instance {} does not hold in view {view}",
                        decided.cid
                    ));
                }
            }
            let batch = Batch::decode(&decided.batch)
                .map_err(|e| format!("a proven batch does not decode: {e}"))?;
            self.execute_batch(decided.cid, &batch);
            let at_voucher = vouchers.iter().filter(|v| v.cid == decided.cid);
            let mut digest = None;
            for CheckpointInfo {
                digest: expected, ..
            } in at_voucher
            {
                if matched >= needed {
                    // Enough already: one of the matches is a correct replica's.
                    break;
                }
                let d = *digest.get_or_insert_with(|| self.checkpoint_digest());
                matched += usize::from(d == *expected);
            }
        }
        if matched >= needed {
            Ok(matched)
        } else {
            Err(format!(
                "only {matched} of the source and {} vouchers match the replayed state ({needed} needed)",
                vouchers.len()
            ))
        }
    }

    /// The view stamped on replies.
    pub fn view(&self) -> ViewId {
        self.view
    }
    /// Changes the view stamped on subsequent replies (after a reconfiguration).
    pub fn set_view(&mut self, view: ViewId) {
        self.view = view;
    }
}

#[cfg(test)]
mod tests;
