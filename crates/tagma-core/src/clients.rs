//! Per-client sessions: sequence numbers, pending queues with flow control, replay
//! rejection, and round-robin batch selection.
//!
//! Two kinds of state live here, and the split matters:
//! - **Sessions** (`last_delivered` per client) change only when a batch is decided, so they
//!   are identical on every correct replica that decided the same instances. Proposal
//!   validation reads only this state (plus the batch), never the local pending queues.
//! - **Pending queues** hold requests this replica received and that are not ordered yet.
//!   They differ between replicas (clients reach replicas in different orders) and are only
//!   used by the leader to build batches.
//!
//! The session table is bounded by `clients_max` and sessions are **never evicted**: forgetting
//! a client's last sequence number would let its old requests be ordered again (by a faulty
//! leader, or by a late retransmission). When the table is full, requests of new clients are
//! refused (`Rejection::SessionsFull` at admission, `ProposalFault::TooManySessions` in a
//! proposal); both checks read only decided state, so all correct replicas agree.
//! Reclaiming sessions safely needs client session management (a replicated watermark), which
//! is future work.

use std::collections::BTreeMap;
use std::ops::Bound;

use tagma_wire::{Batch, ClientId, ConsensusId, RequestAuth, RequestEnvelope, RequestSeq, ViewId};

use crate::error::{ProposalFault, Rejection};

/// Conservative bound on the encoded bytes a request adds to a batch beyond its payload and
/// its authenticator's tags/signature: framing, the header fields (client, seq, kind, view),
/// the length prefixes and the authenticator's tag and count.
pub const REQUEST_OVERHEAD_BYTES: usize = 48;

/// Conservative bound on the encoded bytes of a batch beyond its requests: version, tag,
/// timestamp, seed and request count.
pub const BATCH_OVERHEAD_BYTES: usize = 32;

/// Upper bound on the bytes `request` adds to an encoded batch.
pub fn request_size_estimate(request: &RequestEnvelope) -> usize {
    let auth_bytes = match &request.auth {
        RequestAuth::Macs(tags) => tags.len() * tagma_wire::MacTag::LEN,
        RequestAuth::Signature(_) => tagma_wire::Signature::LEN,
    };
    request.request.payload.len() + auth_bytes + REQUEST_OVERHEAD_BYTES
}

/// The limits that govern sessions, queues and batches (a subset of `ReplicaParams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    pub view: ViewId,
    pub batch_size_max: usize,
    pub batch_bytes_max: usize,
    pub request_bytes_max: usize,
    pub client_pending_max: usize,
    pub pending_requests_max: usize,
    pub clients_max: usize,
    /// Request timer period (Mod-SMaRt: first expiry forwards, second suspects the leader).
    pub request_timeout_ms: u64,
}

/// The request timer of one client: it watches the client's *head* request (the next
/// sequence number to order), the only one the leader can propose. Requests behind a gap are
/// not timed, so a client that skips a sequence number cannot force leader changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeadTimer {
    seq: RequestSeq,
    deadline_ms: u64,
    /// The first expiry already forwarded the request.
    forwarded: bool,
}

/// A head request whose timer expired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    pub request: RequestEnvelope,
    /// True on the second (or later) expiry: the leader is suspected.
    pub forwarded_before: bool,
}

/// What happened to an admitted request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Stored in the pending queue.
    Queued,
    /// Already ordered (a client retransmission, or a late forward): nothing was stored.
    AlreadyDelivered,
}

/// One client's replicated session state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Session {
    /// The last ordered sequence number (0: none yet).
    last_delivered: RequestSeq,
}

/// Per-client sessions and pending queues. Owned by the `Replica`.
#[derive(Debug)]
pub struct Clients {
    limits: ClientLimits,
    /// Replicated: bounded by `clients_max`, changed only by decisions.
    sessions: BTreeMap<ClientId, Session>,
    /// Local: clients with at least one pending request (never empty queues).
    pending: BTreeMap<ClientId, BTreeMap<RequestSeq, RequestEnvelope>>,
    /// Requests in `pending`, all clients together.
    pending_total: usize,
    /// The client where the previous batch's round-robin stopped; the next batch starts
    /// with the client after it.
    round_robin_cursor: Option<ClientId>,
    /// Request timers, one per client whose head request is pending, and their index by
    /// deadline.
    timers: BTreeMap<ClientId, HeadTimer>,
    timer_index: BTreeMap<(u64, ClientId), ()>,
    /// The time of the input being processed (set by the replica).
    now_ms: u64,
}

impl Clients {
    pub fn new(limits: ClientLimits) -> Self {
        assert!(limits.batch_size_max > 0 && limits.clients_max > 0);
        Clients {
            limits,
            sessions: BTreeMap::new(),
            pending: BTreeMap::new(),
            pending_total: 0,
            round_robin_cursor: None,
            timers: BTreeMap::new(),
            timer_index: BTreeMap::new(),
            now_ms: 0,
        }
    }

    /// The time of the current input; request timers started from now on use it.
    pub fn set_now(&mut self, now_ms: u64) {
        debug_assert!(now_ms >= self.now_ms, "time went backwards");
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// The earliest request-timer deadline.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.timer_index.keys().next().map(|(d, _)| *d)
    }

    /// Removes and returns the head requests whose timers expired at `now_ms`, re-arming
    /// each for another period and marking it forwarded.
    pub fn take_expired(&mut self, now_ms: u64) -> Vec<Expired> {
        let mut out = Vec::new();
        while let Some((&(deadline, client), _)) = self.timer_index.first_key_value() {
            if deadline > now_ms {
                break;
            }
            self.timer_index.remove(&(deadline, client));
            let timer = self.timers.get_mut(&client).expect("indexed timer exists");
            let request = self.pending[&client][&timer.seq].clone();
            out.push(Expired {
                request,
                forwarded_before: timer.forwarded,
            });
            timer.forwarded = true;
            timer.deadline_ms = now_ms + self.limits.request_timeout_ms;
            self.timer_index.insert((timer.deadline_ms, client), ());
        }
        out
    }

    /// Restarts every request timer from `now_ms` (a new regency gives its leader a full
    /// period); forwarded flags are kept, so a request still pending after the next period
    /// suspects the new leader at once.
    pub fn restart_timers(&mut self, now_ms: u64) {
        self.timer_index.clear();
        let deadline = now_ms + self.limits.request_timeout_ms;
        for (client, timer) in self.timers.iter_mut() {
            timer.deadline_ms = deadline;
            self.timer_index.insert((deadline, *client), ());
        }
    }

    /// Keeps `client`'s timer on its head request: starts one when the head becomes
    /// pending, drops it when the head is ordered or absent.
    fn refresh_timer(&mut self, client: ClientId) {
        let head = self.last_delivered(client).next();
        let has_head = self
            .pending
            .get(&client)
            .is_some_and(|q| q.contains_key(&head));
        let current = self.timers.get(&client).copied();
        match current {
            Some(t) if t.seq == head && has_head => {}
            _ => {
                if let Some(t) = current {
                    self.timer_index.remove(&(t.deadline_ms, client));
                    self.timers.remove(&client);
                }
                if has_head {
                    let deadline_ms = self.now_ms + self.limits.request_timeout_ms;
                    self.timers.insert(
                        client,
                        HeadTimer {
                            seq: head,
                            deadline_ms,
                            forwarded: false,
                        },
                    );
                    self.timer_index.insert((deadline_ms, client), ());
                }
            }
        }
        debug_assert_eq!(self.timers.len(), self.timer_index.len());
    }

    /// Up to `max` pending head requests (for a STOP, so the next leader learns them).
    pub fn head_requests(&self, max: usize) -> Vec<RequestEnvelope> {
        self.timers
            .iter()
            .take(max)
            .map(|(client, t)| self.pending[client][&t.seq].clone())
            .collect()
    }

    /// The last ordered sequence number of `client` (0 if none).
    pub fn last_delivered(&self, client: ClientId) -> RequestSeq {
        self.sessions
            .get(&client)
            .map_or(RequestSeq(0), |s| s.last_delivered)
    }

    /// Requests waiting to be ordered, all clients together.
    pub fn pending_total(&self) -> usize {
        self.pending_total
    }

    /// Requests of `client` waiting to be ordered.
    pub fn pending_of(&self, client: ClientId) -> usize {
        self.pending.get(&client).map_or(0, BTreeMap::len)
    }

    /// Client sessions currently kept.
    pub fn sessions_len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether a batch could be built now (some client's next request is pending).
    pub fn has_proposable(&self) -> bool {
        self.pending
            .iter()
            .any(|(client, queue)| queue.contains_key(&self.last_delivered(*client).next()))
    }

    /// Checks an ordered request against the session and the limits and queues it.
    /// Flow-control order: kind, view, size, retransmission, duplicate, window, per-client
    /// queue, total queue.
    ///
    /// `ClientQueueFull` is defence in depth: the window check (`seq ≤ last_delivered +
    /// client_pending_max`) already keeps a client's queue within `client_pending_max`.
    pub fn admit(&mut self, request: RequestEnvelope) -> Result<Admission, Rejection> {
        let r = &request.request;
        let limits = self.limits;
        if !r.kind.is_ordered() {
            return Err(Rejection::NotOrdered);
        }
        if r.view != limits.view {
            return Err(Rejection::WrongView { view: r.view });
        }
        if r.payload.len() > limits.request_bytes_max {
            return Err(Rejection::RequestTooLarge {
                bytes: r.payload.len(),
                max: limits.request_bytes_max,
            });
        }
        if let RequestAuth::Macs(tags) = &request.auth
            && tags.len() > tagma_wire::codec::MAX_MAC_ENTRIES
        {
            // Not encodable in a batch (the wire cannot carry it either).
            return Err(Rejection::RequestTooLarge {
                bytes: tags.len() * tagma_wire::MacTag::LEN,
                max: tagma_wire::codec::MAX_MAC_ENTRIES * tagma_wire::MacTag::LEN,
            });
        }
        // A request that could not fit in a batch even alone would block its client forever
        // (batches take each client's requests in sequence): refuse it here. With
        // `request_bytes_max` validated against `batch_bytes_max` this only catches
        // oversized authenticators.
        let alone_bytes = BATCH_OVERHEAD_BYTES + request_size_estimate(&request);
        if alone_bytes > limits.batch_bytes_max {
            return Err(Rejection::RequestTooLarge {
                bytes: alone_bytes,
                max: limits.batch_bytes_max,
            });
        }
        let (client, seq) = (r.client, r.seq);
        let last = self.last_delivered(client);
        if seq <= last {
            return Ok(Admission::AlreadyDelivered);
        }
        if last == RequestSeq(0) && self.sessions.len() >= limits.clients_max {
            return Err(Rejection::SessionsFull { client });
        }
        let queue_len = self.pending_of(client);
        if self
            .pending
            .get(&client)
            .is_some_and(|q| q.contains_key(&seq))
        {
            return Err(Rejection::Duplicate { client, seq });
        }
        if seq.0 - last.0 > limits.client_pending_max as u64 {
            return Err(Rejection::SequenceTooFarAhead { client, seq });
        }
        if queue_len >= limits.client_pending_max {
            return Err(Rejection::ClientQueueFull { client });
        }
        if self.pending_total >= limits.pending_requests_max {
            return Err(Rejection::Overloaded);
        }
        self.pending.entry(client).or_default().insert(seq, request);
        self.pending_total += 1;
        self.refresh_timer(client);
        debug_assert!(self.pending_total <= limits.pending_requests_max);
        Ok(Admission::Queued)
    }

    /// Leader: picks the next batch's requests (Mod-SMaRt step 1).
    ///
    /// Round-robin over clients in id order, starting after the client where the previous
    /// batch stopped; per client only the contiguous run starting at `last_delivered + 1`
    /// (requests behind a gap wait), one request per client per round; stops at
    /// `batch_size_max` requests or when the next request would push the estimated encoded
    /// size over `batch_bytes_max`. Returns an empty vector when nothing can be proposed.
    ///
    /// The requests stay pending until a decision orders them (one instance runs at a time,
    /// so they cannot be selected twice).
    pub fn select_batch(&mut self) -> Vec<RequestEnvelope> {
        let limits = self.limits;
        let mut chosen: Vec<RequestEnvelope> = Vec::new();
        let mut bytes = BATCH_OVERHEAD_BYTES;
        let mut last_taken: Option<ClientId> = None;
        // New sessions this batch may open without exceeding `clients_max`.
        let mut new_sessions_left = limits.clients_max.saturating_sub(self.sessions.len());
        // Clients with a proposable next request, in round-robin order, with the next
        // sequence number to take from each.
        let mut round: Vec<(ClientId, RequestSeq)> = self
            .round_robin_order()
            .filter_map(|client| {
                let next = self.last_delivered(client).next();
                self.pending[&client]
                    .contains_key(&next)
                    .then_some((client, next))
            })
            .filter(|&(client, _)| {
                if self.sessions.contains_key(&client) {
                    return true;
                }
                let room = new_sessions_left > 0;
                new_sessions_left = new_sessions_left.saturating_sub(1);
                room
            })
            // Every client of the first round gives at most one request to it, and a batch
            // ends within the first round once it has `batch_size_max` clients: looking past
            // them (thousands of clients waiting) would change nothing but the cost.
            .take(limits.batch_size_max)
            .collect();
        'rounds: while !round.is_empty() {
            let mut next_round = Vec::with_capacity(round.len());
            for &(client, seq) in &round {
                if chosen.len() == limits.batch_size_max {
                    break 'rounds;
                }
                let request = &self.pending[&client][&seq];
                let size = request_size_estimate(request);
                if bytes + size > limits.batch_bytes_max {
                    break 'rounds;
                }
                bytes += size;
                chosen.push(request.clone());
                last_taken = Some(client);
                if self.pending[&client].contains_key(&seq.next()) {
                    next_round.push((client, seq.next()));
                }
            }
            round = next_round;
        }
        if last_taken.is_some() {
            self.round_robin_cursor = last_taken;
        }
        debug_assert!(chosen.len() <= limits.batch_size_max);
        debug_assert!(bytes <= limits.batch_bytes_max);
        chosen
    }

    /// Clients with pending requests, starting after the round-robin cursor and wrapping.
    fn round_robin_order(&self) -> impl Iterator<Item = ClientId> + '_ {
        let cursor = self.round_robin_cursor;
        let after = match cursor {
            Some(c) => self.pending.range((Bound::Excluded(c), Bound::Unbounded)),
            None => self.pending.range::<ClientId, _>(..),
        };
        let wrapped = cursor
            .into_iter()
            .flat_map(move |c| self.pending.range(..=c));
        after.chain(wrapped).map(|(c, _)| *c)
    }

    /// Acceptor: checks a proposed batch against the replicated sessions (Mod-SMaRt step
    /// 2). `encoded_bytes` is the length of the batch as received;
    /// `previous_timestamp_ms` the timestamp of the last decided batch.
    pub fn validate_proposal(
        &self,
        batch: &Batch,
        encoded_bytes: usize,
        authentic: bool,
        previous_timestamp_ms: u64,
    ) -> Result<(), ProposalFault> {
        let limits = self.limits;
        if !authentic {
            return Err(ProposalFault::Unauthentic);
        }
        // A batch with no request only carries the agreed time forward (a time-only batch).
        if batch.requests.is_empty() && batch.timestamp_ms <= previous_timestamp_ms {
            return Err(ProposalFault::Empty);
        }
        if batch.requests.len() > limits.batch_size_max {
            return Err(ProposalFault::TooManyRequests {
                count: batch.requests.len(),
            });
        }
        if encoded_bytes > limits.batch_bytes_max {
            return Err(ProposalFault::TooManyBytes {
                bytes: encoded_bytes,
            });
        }
        // Per client, the next sequence number the batch must contain.
        let mut expected: BTreeMap<ClientId, RequestSeq> = BTreeMap::new();
        let mut new_sessions = 0usize;
        for envelope in &batch.requests {
            let r = &envelope.request;
            let (client, seq) = (r.client, r.seq);
            if !r.kind.is_ordered() {
                return Err(ProposalFault::UnorderedRequest { client, seq });
            }
            if r.view != limits.view {
                return Err(ProposalFault::WrongView { client, seq });
            }
            if r.payload.len() > limits.request_bytes_max {
                return Err(ProposalFault::RequestTooLarge {
                    client,
                    seq,
                    bytes: r.payload.len(),
                });
            }
            if !expected.contains_key(&client) && !self.sessions.contains_key(&client) {
                new_sessions += 1;
                if self.sessions.len() + new_sessions > limits.clients_max {
                    return Err(ProposalFault::TooManySessions);
                }
            }
            let next = expected
                .entry(client)
                .or_insert_with(|| self.last_delivered(client).next());
            if seq <= self.last_delivered(client) {
                return Err(ProposalFault::Replayed { client, seq });
            }
            if seq != *next {
                return Err(ProposalFault::OutOfSequence {
                    client,
                    seq,
                    expected: *next,
                });
            }
            *next = seq.next();
        }
        if batch.timestamp_ms < previous_timestamp_ms {
            return Err(ProposalFault::TimestampRegressed {
                timestamp_ms: batch.timestamp_ms,
                previous_ms: previous_timestamp_ms,
            });
        }
        Ok(())
    }

    /// A batch was decided in instance `cid`: advance the sessions and drop what is now
    /// ordered from the pending queues.
    ///
    /// The batch was validated by [`Clients::validate_proposal`] before it could be decided,
    /// so its sequence numbers continue every session.
    pub fn on_decided(&mut self, cid: ConsensusId, batch: &Batch) {
        for envelope in &batch.requests {
            let (client, seq) = (envelope.request.client, envelope.request.seq);
            let session = self.sessions.entry(client).or_insert(Session {
                last_delivered: RequestSeq(0),
            });
            debug_assert_eq!(
                seq,
                session.last_delivered.next(),
                "decided out of sequence"
            );
            session.last_delivered = seq;
            self.drop_pending_up_to(client, seq);
            self.refresh_timer(client);
        }
        tracing::trace!(%cid, sessions = self.sessions.len(), "sessions advanced");
        debug_assert!(self.sessions.len() <= self.limits.clients_max);
    }

    /// Recovery: the sessions as of the instance a replica resumes after (read from its
    /// checkpoint and log). Only before any request was admitted.
    pub fn restore_sessions(&mut self, sessions: &[(ClientId, RequestSeq)]) {
        debug_assert!(
            self.pending.is_empty(),
            "sessions restored after admissions"
        );
        self.sessions = sessions
            .iter()
            .map(|(client, seq)| {
                (
                    *client,
                    Session {
                        last_delivered: *seq,
                    },
                )
            })
            .collect();
    }

    /// Replaces the sessions with those of a state installed by state transfer (this
    /// replica skipped the decisions in between): pending requests those sessions already
    /// delivered are dropped.
    pub fn install_sessions(&mut self, sessions: &[(ClientId, RequestSeq)]) {
        for (client, seq) in sessions {
            let session = self.sessions.entry(*client).or_insert(Session {
                last_delivered: RequestSeq(0),
            });
            session.last_delivered = session.last_delivered.max(*seq);
            self.drop_pending_up_to(*client, *seq);
            self.refresh_timer(*client);
        }
    }

    /// Replaces the sessions outright with those of a state that repairs this replica's own
    /// (the state vote contradicted the state its disk returned, sessions included): sessions
    /// the installed state lacks go, and pending requests it already delivered are dropped.
    pub fn replace_sessions(&mut self, sessions: &[(ClientId, RequestSeq)]) {
        self.sessions.clear();
        self.install_sessions(sessions);
    }

    /// A view change installed `view`: requests are admitted (and proposed) only in it, so
    /// pending requests issued in an older view are dropped — their clients retransmit them
    /// in the new view, with the same sequence numbers.
    pub fn set_view(&mut self, view: ViewId) {
        self.limits.view = view;
        let clients: Vec<ClientId> = self.pending.keys().copied().collect();
        for client in clients {
            let queue = self.pending.get_mut(&client).expect("listed above");
            let before = queue.len();
            queue.retain(|_, e| e.request.view == view);
            self.pending_total -= before - queue.len();
            if queue.is_empty() {
                self.pending.remove(&client);
            }
            self.refresh_timer(client);
        }
    }

    /// This replica left the view: nothing it holds will be proposed.
    pub fn drop_pending(&mut self) {
        self.pending.clear();
        self.pending_total = 0;
        self.timers.clear();
        self.timer_index.clear();
    }

    fn drop_pending_up_to(&mut self, client: ClientId, seq: RequestSeq) {
        let Some(queue) = self.pending.get_mut(&client) else {
            return;
        };
        let keep = queue.split_off(&seq.next());
        self.pending_total -= queue.len();
        if keep.is_empty() {
            self.pending.remove(&client);
        } else {
            *queue = keep;
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tagma_wire::{Request, RequestKind};

    use super::*;

    fn limits() -> ClientLimits {
        ClientLimits {
            view: ViewId(0),
            batch_size_max: 4,
            batch_bytes_max: 10_000,
            request_bytes_max: 1000,
            client_pending_max: 3,
            pending_requests_max: 8,
            clients_max: 2,
            request_timeout_ms: 1000,
        }
    }

    /// Room for 100 pending requests and `clients_max` sessions, the other limits as above.
    fn roomy(clients_max: usize) -> Clients {
        Clients::new(ClientLimits {
            pending_requests_max: 100,
            clients_max,
            ..limits()
        })
    }

    fn req(client: u64, seq: u64, payload_bytes: usize) -> RequestEnvelope {
        RequestEnvelope {
            request: Request {
                client: ClientId(client),
                seq: RequestSeq(seq),
                kind: RequestKind::Ordered,
                view: ViewId(0),
                payload: Bytes::from(vec![7u8; payload_bytes]),
            },
            auth: RequestAuth::Macs(vec![]),
        }
    }

    fn ids(batch: &[RequestEnvelope]) -> Vec<(u64, u64)> {
        batch
            .iter()
            .map(|e| (e.request.client.0, e.request.seq.0))
            .collect()
    }

    fn batch(requests: Vec<RequestEnvelope>) -> Batch {
        Batch {
            timestamp_ms: 10,
            seed: 0,
            requests,
        }
    }

    #[test]
    fn admission_limits() {
        let mut c = Clients::new(limits());
        assert_eq!(c.admit(req(1, 1, 0)), Ok(Admission::Queued));
        assert_eq!(
            c.admit(req(1, 1, 0)),
            Err(Rejection::Duplicate {
                client: ClientId(1),
                seq: RequestSeq(1)
            })
        );
        assert_eq!(
            c.admit(req(1, 4, 0)),
            Err(Rejection::SequenceTooFarAhead {
                client: ClientId(1),
                seq: RequestSeq(4)
            })
        );
        assert_eq!(c.admit(req(1, 3, 0)), Ok(Admission::Queued));
        assert_eq!(c.admit(req(1, 2, 0)), Ok(Admission::Queued));
        assert_eq!(c.pending_of(ClientId(1)), 3);
        // The window is full and so is the queue.
        assert!(c.admit(req(1, 4, 0)).is_err());
        assert_eq!(
            c.admit(req(1, 1001, 0)),
            Err(Rejection::SequenceTooFarAhead {
                client: ClientId(1),
                seq: RequestSeq(1001)
            })
        );
        assert_eq!(
            c.admit(req(2, 1, 1001)),
            Err(Rejection::RequestTooLarge {
                bytes: 1001,
                max: 1000
            })
        );
        for client in 2..=3 {
            for seq in 1..=2 {
                c.admit(req(client, seq, 0)).unwrap();
            }
        }
        assert_eq!(c.pending_total(), 7);
        c.admit(req(4, 1, 0)).unwrap();
        assert_eq!(c.admit(req(5, 1, 0)), Err(Rejection::Overloaded));
    }

    #[test]
    fn per_client_queue_full() {
        let mut c = Clients::new(ClientLimits {
            client_pending_max: 2,
            ..limits()
        });
        c.admit(req(1, 1, 0)).unwrap();
        c.admit(req(1, 2, 0)).unwrap();
        // seq 3 is outside the window (last_delivered 0 + 2)
        assert!(matches!(
            c.admit(req(1, 3, 0)),
            Err(Rejection::SequenceTooFarAhead { .. })
        ));
        c.on_decided(ConsensusId(0), &batch(vec![req(1, 1, 0)]));
        assert_eq!(c.pending_of(ClientId(1)), 1);
        c.admit(req(1, 3, 0)).unwrap();
        assert_eq!(c.admit(req(1, 1, 0)), Ok(Admission::AlreadyDelivered));
    }

    #[test]
    fn round_robin_contiguous_and_fair() {
        let mut c = roomy(100);
        for client in 1..=3 {
            for seq in 1..=3 {
                c.admit(req(client, seq, 0)).unwrap();
            }
        }
        // Client 4 has a gap: seq 2 waits for seq 1.
        c.admit(req(4, 2, 0)).unwrap();
        let b = c.select_batch();
        assert_eq!(ids(&b), vec![(1, 1), (2, 1), (3, 1), (1, 2)]);
        c.on_decided(ConsensusId(0), &batch(b));
        // The next batch starts after client 1, where the previous one stopped.
        let b = c.select_batch();
        assert_eq!(ids(&b), vec![(2, 2), (3, 2), (1, 3), (2, 3)]);
        c.on_decided(ConsensusId(1), &batch(b));
        let b = c.select_batch();
        assert_eq!(ids(&b), vec![(3, 3)]);
        c.on_decided(ConsensusId(2), &batch(b));
        assert!(c.select_batch().is_empty());
        assert!(!c.has_proposable());
        c.admit(req(4, 1, 0)).unwrap();
        assert!(c.has_proposable());
        assert_eq!(ids(&c.select_batch()), vec![(4, 1), (4, 2)]);
    }

    #[test]
    fn with_more_waiting_clients_than_a_batch_holds_each_batch_takes_the_next_ones_in_turn() {
        let mut c = roomy(100);
        for client in 1..=10 {
            for seq in 1..=2 {
                c.admit(req(client, seq, 0)).unwrap();
            }
        }
        let mut order = Vec::new();
        for cid in 0..5 {
            let b = c.select_batch();
            assert_eq!(b.len(), 4);
            order.extend(ids(&b));
            c.on_decided(ConsensusId(cid), &batch(b));
        }
        // One request per client per turn, every client before any client's second.
        let expected: Vec<(u64, u64)> = (1..=2)
            .flat_map(|seq| (1..=10).map(move |client| (client, seq)))
            .collect();
        assert_eq!(order, expected);
        // New sessions beyond `clients_max` wait, and only the clients a batch takes count.
        let mut c = roomy(6);
        for client in 1..=10 {
            c.admit(req(client, 1, 0))
                .unwrap_or_else(|e| panic!("{client}: {e:?}"));
        }
        let b = c.select_batch();
        assert_eq!(ids(&b), vec![(1, 1), (2, 1), (3, 1), (4, 1)]);
        c.on_decided(ConsensusId(0), &batch(b));
        assert_eq!(ids(&c.select_batch()), vec![(5, 1), (6, 1)]);
    }

    #[test]
    fn batch_bytes_limit() {
        let per = request_size_estimate(&req(1, 1, 100));
        let mut c = Clients::new(ClientLimits {
            batch_bytes_max: BATCH_OVERHEAD_BYTES + 2 * per + per / 2,
            pending_requests_max: 100,
            clients_max: 100,
            request_timeout_ms: 1000,
            ..limits()
        });
        for client in 1..=3 {
            c.admit(req(client, 1, 100)).unwrap();
        }
        let b = c.select_batch();
        assert_eq!(ids(&b), vec![(1, 1), (2, 1)]);
        c.on_decided(ConsensusId(0), &batch(b));
        assert_eq!(ids(&c.select_batch()), vec![(3, 1)]);
    }

    #[test]
    fn size_estimate_bounds_the_encoding() {
        use tagma_wire::{Encode, MacTag, Signature};
        let mut requests = Vec::new();
        for (i, payload_bytes) in [0usize, 1, 100, 4096].into_iter().enumerate() {
            let mut r = req(i as u64, 1, payload_bytes);
            requests.push(r.clone());
            r.auth = RequestAuth::Macs(vec![MacTag([1; 16]); 7]);
            requests.push(r.clone());
            r.auth = RequestAuth::Signature(Signature([2; 64]));
            requests.push(r);
        }
        for n in 0..=requests.len() {
            let b = batch(requests[..n].to_vec());
            let estimate =
                BATCH_OVERHEAD_BYTES + b.requests.iter().map(request_size_estimate).sum::<usize>();
            assert!(
                b.to_bytes().len() <= estimate,
                "estimate too small for {n} requests"
            );
        }
    }

    #[test]
    fn validation_faults() {
        let mut c = Clients::new(limits());
        c.on_decided(ConsensusId(0), &batch(vec![req(1, 1, 0), req(1, 2, 0)]));
        let ok = batch(vec![req(1, 3, 0), req(2, 1, 0), req(1, 4, 0)]);
        assert_eq!(c.validate_proposal(&ok, 100, true, 10), Ok(()));
        assert_eq!(
            c.validate_proposal(&ok, 100, false, 10),
            Err(ProposalFault::Unauthentic)
        );
        // A batch with no request must carry the agreed time forward.
        assert_eq!(
            c.validate_proposal(&batch(vec![]), 100, true, 10),
            Err(ProposalFault::Empty)
        );
        assert_eq!(c.validate_proposal(&batch(vec![]), 100, true, 9), Ok(()));
        assert_eq!(
            c.validate_proposal(&batch(vec![req(2, 1, 0); 5]), 100, true, 0),
            Err(ProposalFault::TooManyRequests { count: 5 })
        );
        assert_eq!(
            c.validate_proposal(&ok, 10_001, true, 0),
            Err(ProposalFault::TooManyBytes { bytes: 10_001 })
        );
        assert_eq!(
            c.validate_proposal(&batch(vec![req(1, 2, 0)]), 100, true, 0),
            Err(ProposalFault::Replayed {
                client: ClientId(1),
                seq: RequestSeq(2)
            })
        );
        assert_eq!(
            c.validate_proposal(&batch(vec![req(1, 4, 0)]), 100, true, 0),
            Err(ProposalFault::OutOfSequence {
                client: ClientId(1),
                seq: RequestSeq(4),
                expected: RequestSeq(3)
            })
        );
        assert_eq!(
            c.validate_proposal(&batch(vec![req(2, 1, 0), req(2, 1, 0)]), 100, true, 0),
            Err(ProposalFault::OutOfSequence {
                client: ClientId(2),
                seq: RequestSeq(1),
                expected: RequestSeq(2)
            })
        );
        let mut unordered = req(2, 1, 0);
        unordered.request.kind = RequestKind::Unordered;
        assert_eq!(
            c.validate_proposal(&batch(vec![unordered]), 100, true, 0),
            Err(ProposalFault::UnorderedRequest {
                client: ClientId(2),
                seq: RequestSeq(1)
            })
        );
        let mut wrong_view = req(2, 1, 0);
        wrong_view.request.view = ViewId(3);
        assert_eq!(
            c.validate_proposal(&batch(vec![wrong_view]), 100, true, 0),
            Err(ProposalFault::WrongView {
                client: ClientId(2),
                seq: RequestSeq(1)
            })
        );
        assert_eq!(
            c.validate_proposal(&batch(vec![req(2, 1, 1001)]), 2000, true, 0),
            Err(ProposalFault::RequestTooLarge {
                client: ClientId(2),
                seq: RequestSeq(1),
                bytes: 1001
            })
        );
        assert_eq!(
            c.validate_proposal(&ok, 100, true, 11),
            Err(ProposalFault::TimestampRegressed {
                timestamp_ms: 10,
                previous_ms: 11
            })
        );
    }

    #[test]
    fn sessions_are_never_evicted_and_new_clients_are_refused_when_full() {
        let mut c = Clients::new(limits()); // clients_max = 2
        c.on_decided(ConsensusId(0), &batch(vec![req(1, 1, 0)]));
        c.on_decided(ConsensusId(1), &batch(vec![req(2, 1, 0)]));
        assert_eq!(c.sessions_len(), 2);
        // A third client is refused at admission…
        assert_eq!(
            c.admit(req(3, 1, 0)),
            Err(Rejection::SessionsFull {
                client: ClientId(3)
            })
        );
        // …and a proposal that would open its session is invalid.
        assert_eq!(
            c.validate_proposal(&batch(vec![req(3, 1, 0)]), 100, true, 0),
            Err(ProposalFault::TooManySessions)
        );
        // Known clients keep their numbering: an old request is still a replay.
        assert_eq!(c.admit(req(1, 1, 0)), Ok(Admission::AlreadyDelivered));
        assert_eq!(
            c.validate_proposal(&batch(vec![req(1, 1, 0)]), 100, true, 0),
            Err(ProposalFault::Replayed {
                client: ClientId(1),
                seq: RequestSeq(1)
            })
        );
        assert_eq!(c.admit(req(1, 2, 0)), Ok(Admission::Queued));
        assert_eq!(c.select_batch().len(), 1);
    }

    #[test]
    fn the_leader_opens_no_more_sessions_than_fit() {
        let mut c = Clients::new(limits()); // clients_max = 2
        c.on_decided(ConsensusId(0), &batch(vec![req(1, 1, 0)]));
        for client in [2, 3] {
            c.admit(req(client, 1, 0)).unwrap();
        }
        let chosen = c.select_batch();
        assert_eq!(chosen.len(), 1, "only one new session fits");
    }
}
