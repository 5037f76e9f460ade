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

mod action;
mod catch_up;
mod durable_log;
mod durable_votes;
mod future_buffer;
mod input;
mod instance;
mod leader_change;
mod membership;
mod normal_case;
mod params;
mod serving;
mod startup_sync;
mod state_transfer;
mod state_vote;
mod stats;
mod timers;

use std::collections::{BTreeMap, VecDeque};

use tagma_crypto::IdentityKey;
use tagma_wire::{
    CheckpointInfo, ConsensusId, DecidedInstance, Epoch, Regency, ReplicaId, RequestEnvelope, View,
    ViewId,
};

pub use self::{
    action::{Action, Decision},
    input::{PeerInput, VerifiedBatch},
    params::{ReplicaParams, chunk_bytes},
    stats::CoreStats,
};
use self::{
    catch_up::CatchUp, durable_votes::RecoveredVotes, future_buffer::FutureBuffer,
    instance::Instance, leader_change::SyncState, startup_sync::Recovery, state_vote::OwnVote,
};
pub use crate::error::{ProposalFault, Rejection};
use crate::{
    clients::{Admission, ClientLimits, Clients},
    proof::{DecisionLog, ProofChecker},
    transfer::Fetch,
};

/// The replica core. See the module documentation for the calling protocol.
pub struct Replica {
    params: ReplicaParams,
    /// When to ask the others for their positions if nothing is decided until then.
    idle_probe_ms: Option<u64>,
    /// Durable replicas: the newest instance the runtime reported on this replica's disk
    /// ([`Replica::note_durable`]); the leader proposes instance c only once c−1 is.
    durable_through: Option<ConsensusId>,
    /// Durable replicas: the sequence number of the last [`Action::PersistVote`] issued, and
    /// of the newest one the runtime reported on disk ([`Replica::note_votes_durable`]).
    votes_issued: u64,
    votes_durable: u64,
    /// The (instance, epoch) whose messages were last resent to each peer
    /// (`resend_own_messages`).
    resent_to: BTreeMap<ReplicaId, (ConsensusId, Epoch)>,
    /// Votes read back from disk after a restart, by instance ([`Replica::restore_votes`]).
    recovered_votes: BTreeMap<ConsensusId, RecoveredVotes>,
    key: IdentityKey,
    checker: ProofChecker,
    /// The checkers of the last few views before this one, each with the first instance of
    /// the view that followed it: a decision is proven under the view it was decided in
    /// ([`Replica::check_decided`]).
    past_checkers: VecDeque<(ConsensusId, ProofChecker)>,
    /// Installed regency; the epoch of every instance started in it.
    regency: Regency,
    clients: Clients,
    /// The instance in progress (the next one to decide).
    instance: Instance,
    /// Timestamp of the last decided batch (0 before the first).
    last_decided_timestamp_ms: u64,
    /// The last decided instance, for the ordering invariant.
    last_decided: Option<ConsensusId>,
    decisions: DecisionLog,
    future: FutureBuffer,
    sync: SyncState,
    catch_up: CatchUp,
    /// The leader's source of per-batch seeds.
    rng: SplitMix64,
    actions: VecDeque<Action>,
    stats: CoreStats,
    /// The last fault a leader committed, recorded by [`Replica::suspect_leader`].
    leader_fault: Option<(ConsensusId, ProposalFault)>,
    /// Start-up synchronisation in progress ([`Replica::start_recovery`]).
    recovery: Option<Recovery>,
    /// A view without this replica was installed: it only serves (`serve_after_leaving`).
    left: bool,
    /// This replica's durable checkpoints, oldest first (at most two: the newest one is
    /// offered, the previous one still served to a fetch that started before it).
    served: VecDeque<CheckpointInfo>,
    /// This replica's vote in its hash vote after a restart (see [`Audit`]); `None` before
    /// one, or once withdrawn (its state was replaced, or the others moved past it).
    vote: Option<OwnVote>,
    /// State transfer in progress.
    fetch: Option<Fetch>,
    /// The newest decisions of the state being installed (kept for forwarding once it is).
    installing_recent: Vec<DecidedInstance>,
    now_ms: u64,
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

impl Replica {
    pub fn new(params: ReplicaParams, key: IdentityKey) -> Self {
        assert!(
            !params.members.is_empty() && params.members.windows(2).all(|w| w[0] < w[1]),
            "members must be non-empty and ascending"
        );
        assert_eq!(
            params.members.len(),
            params.quorums.n,
            "members and quorums disagree"
        );
        assert_eq!(
            params.members.len(),
            params.member_keys.len(),
            "one key per member"
        );
        assert_eq!(
            params.members.len(),
            params.member_addrs.len(),
            "one address per member"
        );
        let me_index = params
            .members
            .iter()
            .position(|m| *m == params.me)
            .expect("this replica is not a member");
        assert_eq!(
            params.member_keys[me_index],
            key.public(),
            "the key does not match this replica's configured key"
        );
        assert!(
            params.batch_size_max > 0
                && params.future_messages_max > 0
                && params.request_timeout_ms > 0
        );
        let clients = Clients::new(ClientLimits {
            view: params.view,
            batch_size_max: params.batch_size_max,
            batch_bytes_max: params.batch_bytes_max,
            request_bytes_max: params.request_bytes_max,
            client_pending_max: params.client_pending_max,
            pending_requests_max: params.pending_requests_max,
            clients_max: params.clients_max,
            request_timeout_ms: params.request_timeout_ms,
        });
        let future = FutureBuffer::new(params.future_messages_max, params.members.len());
        let checker = ProofChecker::new(
            &params.members,
            &params.member_keys,
            params.quorums.accept_quorum(),
        );
        Replica {
            idle_probe_ms: None,
            durable_through: None,
            votes_issued: 0,
            votes_durable: 0,
            resent_to: BTreeMap::new(),
            recovered_votes: BTreeMap::new(),
            rng: SplitMix64(params.seed),
            key,
            checker,
            past_checkers: VecDeque::new(),
            regency: Regency(0),
            clients,
            instance: Instance::new(ConsensusId(0)),
            last_decided_timestamp_ms: 0,
            last_decided: None,
            decisions: DecisionLog::new(params.decisions_kept),
            future,
            sync: SyncState::default(),
            catch_up: CatchUp::default(),
            actions: VecDeque::new(),
            stats: CoreStats::default(),
            leader_fault: None,
            recovery: None,
            left: false,
            served: VecDeque::new(),
            vote: None,
            fetch: None,
            installing_recent: Vec::new(),
            now_ms: 0,
            params,
        }
    }

    pub fn me(&self) -> ReplicaId {
        self.params.me
    }

    /// The installed view, with its members (what a client in an older view is sent).
    pub fn view(&self) -> View {
        self.params.membership().view
    }

    /// The installed view's id (requests must name it).
    pub fn view_id(&self) -> ViewId {
        self.params.view
    }

    /// Whether a view without this replica was installed (it orders nothing more).
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// The leader of the installed regency: round-robin over the view's members.
    pub fn leader(&self) -> ReplicaId {
        self.leader_of(self.regency)
    }

    /// The installed regency.
    pub fn regency(&self) -> Regency {
        self.regency
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

    /// The last proposal fault this replica blamed on a leader, with its instance.
    pub fn suspected_leader_fault(&self) -> Option<&(ConsensusId, ProposalFault)> {
        self.leader_fault.as_ref()
    }

    /// A decided instance still kept, with the signatures of its decision (for the durable
    /// log: the node logs each instance as it is delivered).
    pub fn decided_instance(&self, cid: ConsensusId) -> Option<DecidedInstance> {
        self.decisions.as_decided(cid)
    }

    /// An ordered request that arrived on an authenticated client connection (authentication
    /// already checked). A retransmission of an ordered request yields `ResendReply`.
    pub fn handle_client_request(
        &mut self,
        now_ms: u64,
        request: RequestEnvelope,
    ) -> Result<(), Rejection> {
        if self.left {
            return Err(Rejection::NotMember);
        }
        self.set_now(now_ms);
        let (client, seq) = (request.request.client, request.request.seq);
        match self.clients.admit(request)? {
            Admission::AlreadyDelivered => {
                self.actions.push_back(Action::ResendReply { client, seq });
            }
            Admission::Queued => self.settle(),
        }
        Ok(())
    }

    /// A message from authenticated peer `from`.
    pub fn handle_peer(
        &mut self,
        now_ms: u64,
        from: ReplicaId,
        input: PeerInput,
    ) -> Result<(), Rejection> {
        if self.left {
            return self.serve_after_leaving(now_ms, from, input);
        }
        self.set_now(now_ms);
        if from == self.params.me {
            return Err(Rejection::FromSelf);
        }
        if !self.params.members.contains(&from) {
            return Err(Rejection::NotAMember { from });
        }
        if self.recovery.is_some()
            && matches!(
                input,
                PeerInput::Propose { .. }
                    | PeerInput::UndecodablePropose { .. }
                    | PeerInput::Write(_)
                    | PeerInput::Accept(_)
                    | PeerInput::Stop(_)
                    | PeerInput::StopData(_)
                    | PeerInput::Sync { .. }
            )
        {
            // Not buffered either: after a restart of the sender, its earlier incarnation's
            // votes could be replayed against what it votes now (found in review: with them
            // buffered, `tagma sim --seed 6563 --reconfig 2` decided two values).
            return Err(Rejection::Recovering);
        }
        let result = match input {
            PeerInput::Forward { request, authentic } => self.on_forward(request, authentic),
            PeerInput::Stop(stop) => self.on_stop(from, stop),
            PeerInput::StopData(data) => self.on_stopdata(from, data),
            PeerInput::Sync {
                sync,
                proposal_authentic,
            } => self.on_sync(from, sync, proposal_authentic),
            PeerInput::DecisionRequest { cid } => {
                self.on_decision_request(from, cid);
                Ok(())
            }
            PeerInput::Decision(decided) => self.on_decision(from, decided),
            PeerInput::Position { next, reply } => {
                self.on_position(from, next, reply);
                Ok(())
            }
            PeerInput::Transfer(t) => self.on_transfer(from, t),
            PeerInput::StateVote { cid, digest } => {
                self.on_state_vote(from, cid, digest);
                Ok(())
            }
            consensus => self.on_consensus_input(from, consensus),
        };
        self.settle();
        result
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn set_now(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        self.clients.set_now(self.now_ms);
    }

    fn epoch(&self) -> Epoch {
        Epoch(self.regency.0)
    }

    fn leader_of(&self, regency: Regency) -> ReplicaId {
        let members = &self.params.members;
        members[regency.0 as usize % members.len()]
    }

    fn is_leader(&self) -> bool {
        self.leader() == self.params.me
    }
}
