//! The Mod-SMaRt replica state machine (normal case; leader change comes later but the
//! state is already keyed by regency/epoch).
//!
//! # Calling protocol
//! 1. Feed inputs: [`Replica::handle_client_request`] for requests that arrived on an
//!    authenticated client connection, [`Replica::handle_peer`] for consensus messages from
//!    authenticated peers (the network stage has already decoded the batch, hashed it and
//!    checked the requests' authenticators), [`Replica::handle_tick`] when
//!    [`Replica::next_timeout_ms`] has passed.
//! 2. After each input, drain [`Replica::poll_action`] until `None` and carry the actions out
//!    in order.
//!
//! Every input carries `now_ms`; the core has no other notion of time.
//!
//! # Normal case (SPEC §3, reference §1.2)
//! Instances run one at a time. The leader of the regency (the first member for regency 0)
//! proposes instance `next_cid` only when the previous one has decided, sends PROPOSE to the
//! others and handles its proposal as if received. BFT: a valid PROPOSE → WRITE; a write
//! quorum of matching WRITEs → ACCEPT; an accept quorum of matching ACCEPTs, with the PROPOSE
//! value at hand → decide. CFT: a valid PROPOSE → ACCEPT; an accept quorum → decide.
//! Votes may arrive before the PROPOSE: they are counted per hash and re-checked when the
//! PROPOSE arrives. Messages for later instances are buffered (bounded) and replayed, in
//! arrival order, when their instance becomes current.
//!
//! The state of an instance is keyed by epoch (= regency) so that leader change can be added
//! without reshaping it.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use tagma_wire::{
    Batch, ClientId, ConsensusId, Digest, Encode, Epoch, PeerMessage, Propose, Regency, ReplicaId,
    RequestEnvelope, RequestSeq, ViewId, Vote,
};

use crate::clients::{Admission, ClientLimits, Clients};
use crate::config::ValidConfig;
use crate::quorum::{Mode, Quorums};

/// Everything the core needs from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaParams {
    pub me: ReplicaId,
    /// Members of the view, ascending. The leader of regency 0 is the first.
    pub members: Vec<ReplicaId>,
    pub quorums: Quorums,
    pub view: ViewId,
    pub batch_size_max: usize,
    pub batch_bytes_max: usize,
    pub request_bytes_max: usize,
    pub client_pending_max: usize,
    pub pending_requests_max: usize,
    pub clients_max: usize,
    pub future_messages_max: usize,
    pub request_timeout_ms: u64,
    /// Seed for the leader's choice of per-batch seeds (deterministic).
    pub seed: u64,
}

impl ReplicaParams {
    pub fn from_config(cfg: &ValidConfig, me: ReplicaId) -> Self {
        let r = &cfg.raw;
        ReplicaParams {
            me,
            members: cfg.members(),
            quorums: cfg.quorums(),
            view: ViewId(0),
            batch_size_max: r.batch.batch_size_max,
            batch_bytes_max: r.batch.batch_bytes_max,
            request_bytes_max: r.limits.request_bytes_max,
            client_pending_max: r.limits.client_pending_max,
            pending_requests_max: r.limits.pending_requests_max,
            clients_max: r.limits.clients_max,
            future_messages_max: r.limits.future_messages_max,
            request_timeout_ms: r.timeouts.request_timeout_ms,
            seed: 0x7461_676d_6100_0000 ^ me.0 as u64,
        }
    }
}

/// A PROPOSE's batch as prepared by the network stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedBatch {
    /// The encoded batch exactly as received.
    pub bytes: Bytes,
    /// BLAKE3 of `bytes`.
    pub hash: Digest,
    /// `bytes` decoded.
    pub batch: Batch,
    /// Whether every request's authentication (this replica's MAC entry, or the signature)
    /// verified.
    pub authentic: bool,
}

/// A consensus input from an authenticated peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerInput {
    Propose {
        cid: ConsensusId,
        epoch: Epoch,
        batch: VerifiedBatch,
    },
    /// A PROPOSE whose batch could not be decoded.
    UndecodablePropose {
        cid: ConsensusId,
        epoch: Epoch,
    },
    Write(Vote),
    Accept(Vote),
    /// A forwarded request, with whether its authentication verified.
    Forward {
        request: RequestEnvelope,
        authentic: bool,
    },
}

/// A decided instance, handed to execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub cid: ConsensusId,
    pub epoch: Epoch,
    pub hash: Digest,
    pub batch: Batch,
}

/// What the caller must do. Carry actions out in the order they are polled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send to every other member of the view.
    Broadcast(PeerMessage),
    /// Send to one member.
    Send { to: ReplicaId, msg: PeerMessage },
    /// Execute a decided batch. Emitted exactly once per instance, in instance order.
    Deliver(Decision),
    /// A client retransmitted a request that is already ordered: resend its cached reply.
    ResendReply { client: ClientId, seq: RequestSeq },
}

/// Why a proposal is invalid. A correct replica never WRITEs or ACCEPTs an invalid proposal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProposalFault {
    Undecodable,
    Unauthentic,
    UnorderedRequest {
        client: ClientId,
        seq: RequestSeq,
    },
    WrongView {
        client: ClientId,
        seq: RequestSeq,
    },
    Replayed {
        client: ClientId,
        seq: RequestSeq,
    },
    OutOfSequence {
        client: ClientId,
        seq: RequestSeq,
        expected: RequestSeq,
    },
    RequestTooLarge {
        client: ClientId,
        seq: RequestSeq,
        bytes: usize,
    },
    TooManyRequests {
        count: usize,
    },
    TooManyBytes {
        bytes: usize,
    },
    Empty,
    TimestampRegressed {
        timestamp_ms: u64,
        previous_ms: u64,
    },
    /// The batch would open more client sessions than `clients_max` allows.
    TooManySessions,
}

/// Why an input was not taken. Returned to the caller, which logs it once and counts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Flow control: this client has `client_pending_max` requests waiting.
    ClientQueueFull {
        client: ClientId,
    },
    /// All clients together have `pending_requests_max` requests waiting.
    Overloaded,
    /// A request that is not ordered was given to the ordering core.
    NotOrdered,
    RequestTooLarge {
        bytes: usize,
        max: usize,
    },
    /// The request names a view other than the current one.
    WrongView {
        view: ViewId,
    },
    /// A request whose sequence number is too far ahead of the last delivered one.
    SequenceTooFarAhead {
        client: ClientId,
        seq: RequestSeq,
    },
    /// The session table holds `clients_max` clients; new clients are refused.
    SessionsFull {
        client: ClientId,
    },
    /// Already pending (a duplicate).
    Duplicate {
        client: ClientId,
        seq: RequestSeq,
    },
    /// A consensus message from a replica that is not a member.
    NotAMember {
        from: ReplicaId,
    },
    /// A PROPOSE from a replica that is not the leader of the epoch.
    NotFromLeader {
        from: ReplicaId,
    },
    /// A message for an instance or epoch already finished (dropped silently upstream).
    Stale {
        cid: ConsensusId,
    },
    /// A second, different PROPOSE for the same instance and epoch.
    Equivocation {
        from: ReplicaId,
        cid: ConsensusId,
    },
    /// The buffer for future instances is full.
    FutureBufferFull,
    InvalidProposal {
        from: ReplicaId,
        cid: ConsensusId,
        fault: ProposalFault,
    },
    /// A forwarded request whose authentication failed.
    Unauthentic,
}

impl Rejection {
    /// A short stable label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::ClientQueueFull { .. } => "client_queue_full",
            Rejection::Overloaded => "overloaded",
            Rejection::NotOrdered => "not_ordered",
            Rejection::RequestTooLarge { .. } => "request_too_large",
            Rejection::WrongView { .. } => "wrong_view",
            Rejection::SequenceTooFarAhead { .. } => "sequence_too_far_ahead",
            Rejection::Duplicate { .. } => "duplicate",
            Rejection::SessionsFull { .. } => "sessions_full",
            Rejection::NotAMember { .. } => "not_a_member",
            Rejection::NotFromLeader { .. } => "not_from_leader",
            Rejection::Stale { .. } => "stale",
            Rejection::Equivocation { .. } => "equivocation",
            Rejection::FutureBufferFull => "future_buffer_full",
            Rejection::InvalidProposal { .. } => "invalid_proposal",
            Rejection::Unauthentic => "unauthentic",
        }
    }
}

/// Counters the runtime exports as metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreStats {
    pub decided_instances: u64,
    pub decided_requests: u64,
    pub pending_requests: u64,
    pub proposals_sent: u64,
    pub future_messages_buffered: u64,
}

/// The replica core. See the module documentation for the calling protocol.
pub struct Replica {
    params: ReplicaParams,
    /// Installed regency; the epoch of every instance started in it. Always 0 until leader
    /// change is implemented.
    regency: Regency,
    clients: Clients,
    /// The instance in progress (the next one to decide).
    instance: Instance,
    /// Timestamp of the last decided batch (0 before the first).
    last_decided_timestamp_ms: u64,
    /// The last decided instance, for the ordering invariant.
    last_decided: Option<ConsensusId>,
    future: FutureBuffer,
    /// The leader's source of per-batch seeds.
    rng: SplitMix64,
    actions: VecDeque<Action>,
    stats: CoreStats,
    /// The last fault a leader committed, recorded by [`Replica::suspect_leader`].
    leader_fault: Option<(ConsensusId, ProposalFault)>,
}

impl Replica {
    pub fn new(params: ReplicaParams) -> Self {
        assert!(
            !params.members.is_empty() && params.members.windows(2).all(|w| w[0] < w[1]),
            "members must be non-empty and ascending"
        );
        assert_eq!(
            params.members.len(),
            params.quorums.n,
            "members and quorums disagree"
        );
        assert!(
            params.members.contains(&params.me),
            "this replica is not a member"
        );
        assert!(params.batch_size_max > 0 && params.future_messages_max > 0);
        let clients = Clients::new(ClientLimits {
            view: params.view,
            batch_size_max: params.batch_size_max,
            batch_bytes_max: params.batch_bytes_max,
            request_bytes_max: params.request_bytes_max,
            client_pending_max: params.client_pending_max,
            pending_requests_max: params.pending_requests_max,
            clients_max: params.clients_max,
        });
        let future = FutureBuffer::new(params.future_messages_max, params.members.len());
        Replica {
            rng: SplitMix64(params.seed),
            regency: Regency(0),
            clients,
            instance: Instance::new(ConsensusId(0)),
            last_decided_timestamp_ms: 0,
            last_decided: None,
            future,
            actions: VecDeque::new(),
            stats: CoreStats::default(),
            leader_fault: None,
            params,
        }
    }
    pub fn me(&self) -> ReplicaId {
        self.params.me
    }
    /// The current leader.
    pub fn leader(&self) -> ReplicaId {
        let members = &self.params.members;
        members[self.regency.0 as usize % members.len()]
    }
    /// The next instance this replica will decide.
    pub fn next_cid(&self) -> ConsensusId {
        self.instance.cid
    }
    pub fn stats(&self) -> CoreStats {
        CoreStats {
            pending_requests: self.clients.pending_total() as u64,
            future_messages_buffered: self.future.len as u64,
            ..self.stats
        }
    }
    /// The per-client sessions and pending queues (read-only).
    pub fn clients(&self) -> &Clients {
        &self.clients
    }
    /// The last proposal fault this replica blamed on a leader, with its instance. Leader
    /// change will act on it; for now it is only recorded.
    pub fn suspected_leader_fault(&self) -> Option<&(ConsensusId, ProposalFault)> {
        self.leader_fault.as_ref()
    }
    /// An ordered request that arrived on an authenticated client connection (authentication
    /// already checked). A retransmission of an ordered request yields `ResendReply`.
    pub fn handle_client_request(
        &mut self,
        now_ms: u64,
        request: RequestEnvelope,
    ) -> Result<(), Rejection> {
        let (client, seq) = (request.request.client, request.request.seq);
        match self.clients.admit(request)? {
            Admission::AlreadyDelivered => {
                self.actions.push_back(Action::ResendReply { client, seq });
            }
            Admission::Queued => self.settle(now_ms),
        }
        Ok(())
    }
    /// A consensus message from authenticated peer `from`.
    pub fn handle_peer(
        &mut self,
        now_ms: u64,
        from: ReplicaId,
        input: PeerInput,
    ) -> Result<(), Rejection> {
        if !self.params.members.contains(&from) {
            return Err(Rejection::NotAMember { from });
        }
        let result = match input {
            PeerInput::Forward { request, authentic } => self.on_forward(request, authentic),
            consensus => self.on_consensus_input(from, consensus),
        };
        self.settle(now_ms);
        result
    }
    /// Timers whose deadline passed.
    pub fn handle_tick(&mut self, _now_ms: u64) {
        // No timers in the normal case. The request timers (forward on first expiry, suspect
        // the leader on the second) arrive with leader change.
    }
    /// The earliest time at which `handle_tick` must be called, if any timer is armed.
    pub fn next_timeout_ms(&self) -> Option<u64> {
        None
    }
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn epoch(&self) -> Epoch {
        Epoch(self.regency.0)
    }

    fn is_leader(&self) -> bool {
        self.leader() == self.params.me
    }

    /// A forwarded request: like a client request, but an already-ordered one is ignored
    /// (the forwarding replica is not the client and needs no reply).
    fn on_forward(&mut self, request: RequestEnvelope, authentic: bool) -> Result<(), Rejection> {
        if !authentic {
            return Err(Rejection::Unauthentic);
        }
        self.clients.admit(request).map(|_| ())
    }

    /// Routes a consensus message by instance: older → stale, later → buffered, current →
    /// handled now.
    fn on_consensus_input(&mut self, from: ReplicaId, input: PeerInput) -> Result<(), Rejection> {
        let (cid, epoch) = match &input {
            PeerInput::Propose { cid, epoch, .. }
            | PeerInput::UndecodablePropose { cid, epoch } => (*cid, *epoch),
            PeerInput::Write(v) | PeerInput::Accept(v) => (v.cid, v.epoch),
            PeerInput::Forward { .. } => unreachable!("forwards are handled by on_forward"),
        };
        let next = self.instance.cid;
        if cid < next {
            return Err(Rejection::Stale { cid });
        }
        if cid > next {
            tracing::trace!(%from, %cid, "buffering a message for a later instance");
            return self.future.push(next, cid, from, input);
        }
        // TODO(leader change): buffer messages of a later epoch instead of dropping them.
        if epoch != self.epoch() {
            return Err(Rejection::Stale { cid });
        }
        match input {
            PeerInput::Propose { batch, .. } => self.on_propose(from, epoch, Some(batch)),
            PeerInput::UndecodablePropose { .. } => self.on_propose(from, epoch, None),
            PeerInput::Write(vote) => {
                self.on_write(from, vote);
                Ok(())
            }
            PeerInput::Accept(vote) => {
                self.on_accept(from, vote);
                Ok(())
            }
            PeerInput::Forward { .. } => unreachable!("forwards are handled by on_forward"),
        }
    }

    /// Mod-SMaRt step 2: a PROPOSE for the current instance and epoch (`None`: undecodable).
    fn on_propose(
        &mut self,
        from: ReplicaId,
        epoch: Epoch,
        batch: Option<VerifiedBatch>,
    ) -> Result<(), Rejection> {
        let cid = self.instance.cid;
        if from != self.leader() {
            return Err(Rejection::NotFromLeader { from });
        }
        let hash = batch.as_ref().map(|b| b.hash);
        // Only the first PROPOSE of an epoch is taken; an identical copy is ignored.
        if let Some(first) = self.instance.epoch_mut(epoch).proposal.hash() {
            return if first == hash {
                Ok(())
            } else {
                Err(Rejection::Equivocation { from, cid })
            };
        }
        let verdict = match &batch {
            None => Err(ProposalFault::Undecodable),
            Some(b) => self.clients.validate_proposal(
                &b.batch,
                b.bytes.len(),
                b.authentic,
                self.last_decided_timestamp_ms,
            ),
        };
        match (verdict, batch) {
            (Ok(()), Some(b)) => {
                self.take_proposal(epoch, b);
                Ok(())
            }
            (Err(fault), _) => {
                self.instance.epoch_mut(epoch).proposal = ProposalSlot::Invalid(hash);
                self.suspect_leader(cid, fault.clone());
                Err(Rejection::InvalidProposal { from, cid, fault })
            }
            (Ok(()), None) => unreachable!("an undecodable proposal never validates"),
        }
    }

    /// A valid proposal becomes the value of the epoch: vote for it (WRITE in BFT, ACCEPT in
    /// CFT), then check whether votes that came before it complete a quorum.
    fn take_proposal(&mut self, epoch: Epoch, batch: VerifiedBatch) {
        let cid = self.instance.cid;
        let me = self.params.me;
        let hash = batch.hash;
        let mode = self.params.quorums.mode;
        let state = self.instance.epoch_mut(epoch);
        debug_assert!(matches!(state.proposal, ProposalSlot::Empty));
        state.proposal = ProposalSlot::Valid(batch);
        let vote = Vote { cid, epoch, hash };
        match mode {
            // Mod-SMaRt: valid PROPOSE → WRITE.
            Mode::Bft => {
                let fresh = state.writes.add(me, hash);
                debug_assert!(fresh, "own WRITE counted twice");
                self.actions
                    .push_back(Action::Broadcast(PeerMessage::Write(vote)));
            }
            // CFT has no WRITE step: valid PROPOSE → ACCEPT.
            Mode::Cft => {
                let fresh = state.accepts.add(me, hash);
                debug_assert!(fresh, "own ACCEPT counted twice");
                state.accept_sent = true;
                self.actions
                    .push_back(Action::Broadcast(PeerMessage::Accept(vote)));
            }
        }
        self.check_quorums(epoch);
    }

    fn on_write(&mut self, from: ReplicaId, vote: Vote) {
        if self.params.quorums.mode == Mode::Cft {
            // CFT has no WRITE step; a WRITE is meaningless here.
            return;
        }
        if self
            .instance
            .epoch_mut(vote.epoch)
            .writes
            .add(from, vote.hash)
        {
            self.check_quorums(vote.epoch);
        }
    }

    fn on_accept(&mut self, from: ReplicaId, vote: Vote) {
        if self
            .instance
            .epoch_mut(vote.epoch)
            .accepts
            .add(from, vote.hash)
        {
            self.check_quorums(vote.epoch);
        }
    }

    /// Mod-SMaRt steps 3–4, for the value of the PROPOSE this replica holds: a write quorum →
    /// ACCEPT (BFT); an accept quorum → decide. Votes for other hashes never count.
    fn check_quorums(&mut self, epoch: Epoch) {
        let cid = self.instance.cid;
        let me = self.params.me;
        let quorums = self.params.quorums;
        let state = self.instance.epoch_mut(epoch);
        let ProposalSlot::Valid(proposal) = &state.proposal else {
            return;
        };
        let hash = proposal.hash;
        if quorums.mode == Mode::Bft
            && !state.accept_sent
            && state.writes.count(hash) >= quorums.write_quorum()
        {
            // Mod-SMaRt: quorum of WRITEs → ACCEPT.
            state.accept_sent = true;
            let fresh = state.accepts.add(me, hash);
            debug_assert!(fresh, "own ACCEPT counted twice");
            self.actions
                .push_back(Action::Broadcast(PeerMessage::Accept(Vote {
                    cid,
                    epoch,
                    hash,
                })));
        }
        if state.accepts.count(hash) >= quorums.accept_quorum() {
            // Mod-SMaRt: quorum of ACCEPTs → decided.
            self.decide(epoch);
        }
    }

    /// The current instance decided the value of `epoch`: hand it to execution, advance the
    /// client sessions, and start the next instance.
    fn decide(&mut self, epoch: Epoch) {
        let cid = self.instance.cid;
        let next = Instance::new(cid.next());
        let mut instance = std::mem::replace(&mut self.instance, next);
        let state = instance
            .epochs
            .remove(&epoch)
            .expect("deciding epoch exists");
        let ProposalSlot::Valid(value) = state.proposal else {
            unreachable!("only a valid proposal is decided")
        };
        // An instance decides once: its state is replaced right here and every later message
        // for it is `Stale`, so no cid is ever decided with two hashes.
        if let Some(last_cid) = self.last_decided {
            debug_assert_eq!(last_cid.next(), cid, "decisions out of order");
        } else {
            debug_assert_eq!(cid, ConsensusId(0), "first decision is not instance 0");
        }
        let batch = value.batch;
        debug_assert!(batch.timestamp_ms >= self.last_decided_timestamp_ms);
        self.last_decided = Some(cid);
        self.last_decided_timestamp_ms = batch.timestamp_ms;
        self.clients.on_decided(cid, &batch);
        self.stats.decided_instances += 1;
        self.stats.decided_requests += batch.requests.len() as u64;
        tracing::debug!(%cid, %epoch, requests = batch.requests.len(), "decided");
        self.actions.push_back(Action::Deliver(Decision {
            cid,
            epoch,
            hash: value.hash,
            batch,
        }));
    }

    /// After every input: replay buffered messages of the instance that became current, and
    /// let the leader propose, until neither makes progress.
    fn settle(&mut self, now_ms: u64) {
        loop {
            let cid = self.instance.cid;
            for (from, input) in self.future.take(cid) {
                if let Err(rejection) = self.on_consensus_input(from, input) {
                    tracing::debug!(%from, %cid, reason = rejection.reason(), "buffered message rejected");
                }
            }
            if self.instance.cid != cid {
                continue;
            }
            self.try_propose(now_ms);
            if self.instance.cid == cid {
                return;
            }
        }
    }

    /// Mod-SMaRt step 1 (leader): propose the next batch if no instance is in progress and a
    /// request is waiting.
    fn try_propose(&mut self, now_ms: u64) {
        let epoch = self.epoch();
        if !self.is_leader() || !self.instance.epoch_mut(epoch).proposal.is_empty() {
            return;
        }
        let requests = self.clients.select_batch();
        if requests.is_empty() {
            return;
        }
        let batch = Batch {
            timestamp_ms: now_ms.max(self.last_decided_timestamp_ms),
            seed: self.rng.next_u64(),
            requests,
        };
        let bytes = batch.to_bytes();
        assert!(
            bytes.len() <= self.params.batch_bytes_max,
            "batch of {} bytes exceeds batch_bytes_max = {}: the size estimate in clients.rs is too small",
            bytes.len(),
            self.params.batch_bytes_max
        );
        debug_assert!(batch.requests.len() <= self.params.batch_size_max);
        debug_assert_eq!(
            self.clients.validate_proposal(
                &batch,
                bytes.len(),
                true,
                self.last_decided_timestamp_ms
            ),
            Ok(()),
            "the leader built an invalid batch"
        );
        let hash = tagma_crypto::digest(&bytes);
        let cid = self.instance.cid;
        tracing::debug!(%cid, requests = batch.requests.len(), bytes = bytes.len(), "proposing");
        self.actions
            .push_back(Action::Broadcast(PeerMessage::Propose(Propose {
                cid,
                epoch,
                batch: bytes.clone(),
            })));
        self.stats.proposals_sent += 1;
        // The leader handles its own PROPOSE as received (it does not send it to itself).
        self.take_proposal(
            epoch,
            VerifiedBatch {
                bytes,
                hash,
                batch,
                authentic: true,
            },
        );
    }

    /// HOOK(leader change): an invalid proposal from the leader must make this replica
    /// suspect it and start a leader change (SPEC §3, reference §1.2 step 2). For now it is
    /// only recorded.
    fn suspect_leader(&mut self, cid: ConsensusId, fault: ProposalFault) {
        tracing::debug!(leader = %self.leader(), %cid, ?fault, "invalid proposal from the leader");
        self.leader_fault = Some((cid, fault));
    }
}

/// The state of one consensus instance, per epoch.
struct Instance {
    cid: ConsensusId,
    epochs: BTreeMap<Epoch, EpochState>,
}

impl Instance {
    fn new(cid: ConsensusId) -> Self {
        Instance {
            cid,
            epochs: BTreeMap::new(),
        }
    }
    fn epoch_mut(&mut self, epoch: Epoch) -> &mut EpochState {
        self.epochs.entry(epoch).or_default()
    }
}

/// One epoch of an instance: the PROPOSE taken and the votes received.
#[derive(Default)]
struct EpochState {
    proposal: ProposalSlot,
    writes: Votes,
    accepts: Votes,
    /// This replica has sent (and counted) its ACCEPT.
    accept_sent: bool,
}

/// The first PROPOSE of an epoch; only the first is ever taken.
#[derive(Default)]
enum ProposalSlot {
    #[default]
    Empty,
    Valid(VerifiedBatch),
    /// Rejected; the hash of its batch (`None`: undecodable).
    Invalid(Option<Digest>),
}

impl ProposalSlot {
    fn is_empty(&self) -> bool {
        matches!(self, ProposalSlot::Empty)
    }
    /// `None` when empty; otherwise the hash of the PROPOSE taken (`Some(None)`: undecodable).
    fn hash(&self) -> Option<Option<Digest>> {
        match self {
            ProposalSlot::Empty => None,
            ProposalSlot::Valid(b) => Some(Some(b.hash)),
            ProposalSlot::Invalid(h) => Some(*h),
        }
    }
}

/// Votes of one kind in one epoch: the first vote of each sender counts, tallied per hash.
#[derive(Default)]
struct Votes {
    by_sender: BTreeMap<ReplicaId, Digest>,
    tally: BTreeMap<Digest, usize>,
}

impl Votes {
    /// Counts `from`'s vote; false if `from` already voted (its first vote stands).
    fn add(&mut self, from: ReplicaId, hash: Digest) -> bool {
        if self.by_sender.contains_key(&from) {
            return false;
        }
        self.by_sender.insert(from, hash);
        *self.tally.entry(hash).or_default() += 1;
        debug_assert_eq!(
            self.tally.values().sum::<usize>(),
            self.by_sender.len(),
            "a vote counted twice"
        );
        true
    }
    fn count(&self, hash: Digest) -> usize {
        self.tally.get(&hash).copied().unwrap_or(0)
    }
}

/// Consensus messages for instances after the current one, replayed in arrival order when
/// their instance becomes current. Bounded in total by `future_messages_max`, in distance
/// (at most `future_messages_max` instances ahead), and per sender (an equal share of the
/// total among the other members, so one faulty peer cannot crowd out the others).
struct FutureBuffer {
    by_cid: BTreeMap<ConsensusId, Vec<(ReplicaId, PeerInput)>>,
    per_sender: BTreeMap<ReplicaId, usize>,
    len: usize,
    len_max: usize,
    per_sender_max: usize,
}

impl FutureBuffer {
    fn new(len_max: usize, members: usize) -> Self {
        FutureBuffer {
            by_cid: BTreeMap::new(),
            per_sender: BTreeMap::new(),
            len: 0,
            len_max,
            // Peers do not send to themselves: share among the others.
            per_sender_max: len_max.div_ceil(members.saturating_sub(1).max(1)),
        }
    }

    fn push(
        &mut self,
        current: ConsensusId,
        cid: ConsensusId,
        from: ReplicaId,
        input: PeerInput,
    ) -> Result<(), Rejection> {
        debug_assert!(cid > current);
        let sender_len = self.per_sender.get(&from).copied().unwrap_or(0);
        if cid.0 - current.0 > self.len_max as u64
            || self.len >= self.len_max
            || sender_len >= self.per_sender_max
        {
            return Err(Rejection::FutureBufferFull);
        }
        self.by_cid.entry(cid).or_default().push((from, input));
        self.per_sender.insert(from, sender_len + 1);
        self.len += 1;
        Ok(())
    }

    /// Removes and returns the messages of instance `cid`, in arrival order.
    fn take(&mut self, cid: ConsensusId) -> Vec<(ReplicaId, PeerInput)> {
        debug_assert!(
            self.by_cid.first_key_value().is_none_or(|(c, _)| *c >= cid),
            "messages of a past instance left in the buffer"
        );
        let messages = self.by_cid.remove(&cid).unwrap_or_default();
        for (from, _) in &messages {
            let n = self.per_sender.get_mut(from).expect("sender counted");
            *n -= 1;
            if *n == 0 {
                self.per_sender.remove(from);
            }
        }
        self.len -= messages.len();
        messages
    }
}

/// splitmix64: a tiny deterministic generator for the leader's per-batch seeds.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
