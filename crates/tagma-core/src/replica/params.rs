//! Everything the core needs from the configuration ([`ReplicaParams`]).

use tagma_wire::{PublicKey, ReplicaId, View, ViewId, ViewMember};

use super::answer_budget::AnswerBudget;
use crate::{config::ValidConfig, quorum::Quorums, view::Membership};

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
    /// How long a leader may hold its next batch while requests arrive to fill it to most of
    /// the last decided batch's size (`[batch] fill_wait_ms`; 0: propose at once).
    pub batch_fill_wait_ms: u64,
    pub request_bytes_max: usize,
    pub client_pending_max: usize,
    pub pending_requests_max: usize,
    pub clients_max: usize,
    pub future_messages_max: usize,
    pub request_timeout_ms: u64,
    /// How far ahead of this replica's clock a leader's new batch may be timestamped
    /// (`[timeouts] clock_skew_max_ms`): a later one is refused as a faulty proposal, so a
    /// faulty leader cannot run the agreed time (and with it leases and waits) ahead.
    pub clock_skew_max_ms: u64,
    /// Seed for the leader's choice of per-batch seeds (deterministic).
    pub seed: u64,
    /// Members' Ed25519 public keys, in the order of `members` (to check signed ACCEPTs,
    /// collects and decision proofs).
    pub member_keys: Vec<PublicKey>,
    /// Decided instances (with their ACCEPT signatures) kept in memory for decision
    /// forwarding to replicas that fell behind.
    pub decisions_kept: usize,
    /// Whether this replica's log and checkpoints are on a disk (`durability = "fsync"`): its
    /// votes are then flushed before its ACCEPTs, a leader proposes only once its previous
    /// instance is logged, and a restart runs the start-up synchronisation. Every replica
    /// serves and runs state transfer ([`crate::transfer`]) whatever this says: without a
    /// disk its runtime keeps the log and checkpoints in memory.
    pub durable: bool,
    /// With `durable`, in BFT mode: end the start-up synchronisation with the state vote on
    /// the recovered state (see `StateVoteRound`; `[storage] state_vote`).
    pub state_vote: bool,
    /// Instances between two checkpoints of one replica (`[storage] checkpoint_period`): a
    /// replica whose state the state vote left unconfirmed expects each peer's next
    /// checkpoint this far after its last one (see `StateCheck`). 0: no later check.
    pub checkpoint_period: u64,
    /// Bytes per state-transfer chunk (fits in a frame).
    pub chunk_bytes: u32,
    /// The largest checkpoint fetched by state transfer.
    pub state_bytes_max: u64,
    /// Members' addresses, in the order of `members` (part of the view a change produces).
    pub member_addrs: Vec<String>,
    /// The administrator's key, which signs view changes (`None`: all are refused).
    pub admin_key: Option<PublicKey>,
    /// What answering one peer may cost per period (position queries, decision and log
    /// requests, state queries and chunk requests): [`AnswerBudget::for_limits`] by default.
    pub answer_budget: AnswerBudget,
}

impl ReplicaParams {
    /// The installed view and the rules for changing it.
    pub fn membership(&self) -> Membership {
        Membership {
            view: View {
                id: self.view,
                f: self.quorums.f as u32,
                members: self
                    .members
                    .iter()
                    .zip(&self.member_keys)
                    .zip(&self.member_addrs)
                    .map(|((id, key), addr)| ViewMember {
                        id: *id,
                        addr: addr.clone(),
                        key: *key,
                    })
                    .collect(),
            },
            admin: self.admin_key,
            history: Vec::new(),
            mode: self.quorums.mode,
        }
    }

    /// Makes `view` the installed one (members, keys, addresses, quorums, id).
    pub fn set_view(&mut self, view: &View) {
        self.view = view.id;
        self.members = view.members.iter().map(|m| m.id).collect();
        self.member_keys = view.members.iter().map(|m| m.key).collect();
        self.member_addrs = view.members.iter().map(|m| m.addr.clone()).collect();
        self.quorums = Quorums::new(self.quorums.mode, view.members.len(), view.f as usize);
    }
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
            batch_fill_wait_ms: r.batch.fill_wait_ms,
            request_bytes_max: r.limits.request_bytes_max,
            client_pending_max: r.limits.client_pending_max,
            pending_requests_max: r.limits.pending_requests_max,
            clients_max: r.limits.clients_max,
            future_messages_max: r.limits.future_messages_max,
            request_timeout_ms: r.timeouts.request_timeout_ms,
            clock_skew_max_ms: r.timeouts.clock_skew_max_ms,
            seed: 0x7461_676d_6100_0000 ^ me.0 as u64,
            member_keys: cfg.replicas.iter().map(|r| r.public_key).collect(),
            decisions_kept: r.limits.decisions_kept,
            durable: r.storage.durability == crate::config::Durability::Fsync,
            state_vote: r.storage.state_vote,
            checkpoint_period: r.storage.checkpoint_period,
            chunk_bytes: chunk_bytes(r.limits.frame_bytes_max),
            state_bytes_max: r.storage.state_bytes_max,
            member_addrs: cfg.replicas.iter().map(|r| r.addr.to_string()).collect(),
            admin_key: cfg.admin,
            answer_budget: AnswerBudget::for_limits(
                r.batch.batch_bytes_max,
                chunk_bytes(r.limits.frame_bytes_max),
            ),
        }
    }
}

/// State-transfer chunks: 1 MiB, or less when frames are smaller (with room for the header).
pub fn chunk_bytes(frame_bytes_max: usize) -> u32 {
    (frame_bytes_max.saturating_sub(64)).clamp(1, 1 << 20) as u32
}
