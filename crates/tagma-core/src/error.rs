//! Why the core refuses an input ([`Rejection`]) or blames a leader for a proposal
//! ([`ProposalFault`]). Both are returned, never panicked on.

use tagma_wire::{ClientId, ConsensusId, ReplicaId, RequestSeq, ViewId};

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
    /// A batch with no request whose timestamp does not advance the agreed time (a
    /// time-only batch must).
    Empty,
    TimestampRegressed {
        timestamp_ms: u64,
        previous_ms: u64,
    },
    /// A new batch timestamped further ahead of this replica's clock than
    /// `clock_skew_max_ms` allows.
    TimestampAhead {
        timestamp_ms: u64,
        local_ms: u64,
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
    /// A message from this replica's own id (only a key compromise could produce it).
    FromSelf,
    /// A STOPDATA that is not for this leader's regency or whose collect does not verify.
    InvalidStopData {
        from: ReplicaId,
    },
    /// A SYNC whose evidence does not verify (the leader is then suspected).
    InvalidSync {
        from: ReplicaId,
        reason: &'static str,
    },
    /// A forwarded decision whose proof does not verify.
    InvalidProof {
        from: ReplicaId,
        cid: ConsensusId,
    },
    InvalidProposal {
        from: ReplicaId,
        cid: ConsensusId,
        fault: ProposalFault,
    },
    /// A forwarded request whose authentication failed.
    Unauthentic,
    /// A vote or leader-change message during the start-up synchronisation: the replica
    /// neither votes nor reports a collect until the start-up synchronisation is over (it
    /// first catches up to the others' positions; the votes it persisted before the crash are
    /// restored, the WRITEs it did not persist are lost).
    StartingUp,
    /// A vote, leader-change message or decision while f+1 peers' checkpoints contradict this
    /// replica's state and it fetches theirs (see `StateCheck`): it takes part again once the
    /// fetched state is installed.
    RepairingState,
    /// This replica left the view (a view without it was installed): it takes no input.
    NotMember,
    /// A state-transfer message that does not fit (out of range, unexpected, unproven).
    InvalidTransfer {
        from: ReplicaId,
        reason: &'static str,
    },
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
            Rejection::FromSelf => "from_self",
            Rejection::InvalidStopData { .. } => "invalid_stopdata",
            Rejection::InvalidSync { .. } => "invalid_sync",
            Rejection::InvalidProof { .. } => "invalid_proof",
            Rejection::Unauthentic => "unauthentic",
            Rejection::StartingUp => "starting_up",
            Rejection::RepairingState => "repairing_state",
            Rejection::NotMember => "not_member",
            Rejection::InvalidTransfer { .. } => "invalid_transfer",
        }
    }
}
