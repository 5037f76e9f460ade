//! Counters the runtime exports as metrics ([`CoreStats`]).

/// Counters the runtime exports as metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreStats {
    pub decided_instances: u64,
    pub decided_requests: u64,
    pub pending_requests: u64,
    pub proposals_sent: u64,
    pub future_messages_buffered: u64,
    /// Regencies installed (leader changes).
    pub leader_changes: u64,
    /// Instances decided from a forwarded proof (catch-up) rather than by voting.
    pub decisions_forwarded_in: u64,
    /// States installed by state transfer.
    pub state_transfers: u64,
    /// How long the last state transfer took, from its start to the installed state (0:
    /// none yet).
    pub last_state_transfer_ms: u64,
    /// Hash votes after a restart that confirmed the recovered state (see `StateVoteRound`).
    pub state_votes_confirmed: u64,
    /// Hash votes after a restart that contradicted the recovered state (see `StateVoteRound`).
    pub state_votes_contradicted: u64,
    /// 1 while this replica's state is unconfirmed: the state vote after its restart was
    /// inconclusive and the later check against its peers' checkpoints has not settled yet
    /// (see `StateCheck`).
    pub state_unconfirmed: u64,
    /// Later checks that confirmed the state (f+1 peers' checkpoints matched it).
    pub state_checks_confirmed: u64,
    /// Later checks that contradicted the state (f+1 peers' checkpoints differ): it was
    /// fetched from the others.
    pub state_checks_contradicted: u64,
    /// Views installed by view changes.
    pub views_installed: u64,
    /// Requests from peers answered in part or not at all because the peer's answer budget
    /// for the period was spent (see `AnswerBudget`).
    pub answers_refused: u64,
    /// Batches this replica proposed with no request, only the agreed time (see `time_batch`).
    pub time_batches_proposed: u64,
    /// Times this replica suspected the leader because the agreed time stood still past the
    /// service's due time (see `time_batch`).
    pub due_suspicions: u64,
    /// Proposals this replica held as leader for their batches to fill (see `batch_fill`):
    /// holds that ended because enough requests arrived, and holds that ran out.
    pub batch_holds_filled: u64,
    pub batch_holds_expired: u64,
}
