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
//! TO BE COMPLETED (helper): the state machine behind these signatures, and its tests.

use bytes::Bytes;
use tagma_wire::{
    Batch, ClientId, ConsensusId, Digest, Epoch, PeerMessage, ReplicaId, RequestEnvelope,
    RequestSeq, ViewId, Vote,
};

use crate::config::ValidConfig;
use crate::quorum::Quorums;

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
    // TO BE COMPLETED (helper)
}

impl Replica {
    pub fn new(params: ReplicaParams) -> Self {
        todo!()
    }
    pub fn me(&self) -> ReplicaId {
        todo!()
    }
    /// The current leader.
    pub fn leader(&self) -> ReplicaId {
        todo!()
    }
    /// The next instance this replica will decide.
    pub fn next_cid(&self) -> ConsensusId {
        todo!()
    }
    pub fn stats(&self) -> CoreStats {
        todo!()
    }
    /// An ordered request that arrived on an authenticated client connection (authentication
    /// already checked). A retransmission of an ordered request yields `ResendReply`.
    pub fn handle_client_request(
        &mut self,
        now_ms: u64,
        request: RequestEnvelope,
    ) -> Result<(), Rejection> {
        todo!()
    }
    /// A consensus message from authenticated peer `from`.
    pub fn handle_peer(
        &mut self,
        now_ms: u64,
        from: ReplicaId,
        input: PeerInput,
    ) -> Result<(), Rejection> {
        todo!()
    }
    /// Timers whose deadline passed.
    pub fn handle_tick(&mut self, now_ms: u64) {
        todo!()
    }
    /// The earliest time at which `handle_tick` must be called, if any timer is armed.
    pub fn next_timeout_ms(&self) -> Option<u64> {
        todo!()
    }
    pub fn poll_action(&mut self) -> Option<Action> {
        todo!()
    }
}
