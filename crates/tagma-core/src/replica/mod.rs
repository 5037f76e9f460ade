//! The Mod-SMaRt replica: a deterministic state machine with no IO.
//!
//! See [`Replica`] for the calling contract.
//!
//! # Where each protocol lives
//! - `normal_case`: PROPOSE → WRITE → ACCEPT → decide (CFT skips WRITE), one instance at
//!   a time; messages for later instances wait in the bounded `future_buffer`.
//! - `leader_change`: STOP, STOPDATA, SYNC and the value choice.
//! - `catch_up`: decision forwarding to a replica that fell behind.
//! - `startup`, `state_vote`, `durable_votes`, `durable_log`: what a durable replica does
//!   to never forget a vote, to never run far ahead of its log, and to rejoin after a crash.
//! - `serving`, `state_transfer`: checkpoints offered to, and fetched from, other replicas.
//! - `membership`: views installed by ordered view changes.
//! - `time_batch`: the leader's batches that carry only the agreed time.
//! - `timers`: what a tick fires.

mod action;
mod answer_budget;
mod batch_fill;
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
mod start;
mod startup;
mod state_check;
mod state_transfer;
mod state_vote;
mod stats;
mod time_batch;
mod timers;

use std::collections::{BTreeMap, VecDeque};

use tagma_crypto::IdentityKey;
use tagma_wire::{
    CheckpointInfo, ConsensusId, DecidedInstance, Epoch, Regency, ReplicaId, RequestEnvelope, View,
    ViewId,
};

pub use self::{
    action::{Action, Decision},
    answer_budget::{Allowance, AnswerBudget, AnswerKind},
    durable_log::LOG_LAG_MAX,
    input::{Input, PeerInput, PreparedBatch},
    leader_change::WRITE_SET_MAX,
    params::{ReplicaParams, chunk_bytes},
    start::{Recovered, Resume, Start},
    stats::CoreStats,
};
use self::{
    answer_budget::AnswerLedger, catch_up::CatchUp, durable_votes::RecoveredVotes,
    future_buffer::FutureBuffer, instance::Instance, leader_change::LeaderChange, startup::Startup,
    state_vote::OwnStateVote,
};
pub use crate::error::{ProposalFault, Rejection};
use crate::{
    clients::{Admission, ClientLimits, Clients},
    proof::{DecisionLog, ProofChecker},
    transfer::Fetch,
};

/// The replica core: the Mod-SMaRt state machine with no IO.
///
/// # Calling contract
/// - [`Replica::new`] builds the core from its parameters, identity key and [`Start`] (fresh,
///   recovered from a disk, or joining), at the current time.
/// - Every input goes through one entry point, [`Replica::handle`]`(now_ms, `[`Input`]`)`:
///   client requests, peer messages (prepared by the network stage:
///   [`PeerInput::from_message`]), timer ticks, and the driver's answers to earlier actions
///   (log and votes durable, checkpoint written, state digest, fetched state installed).
///   `now_ms` is the only clock the core knows.
/// - Every output comes out of [`Replica::poll_action`]: after each input, drain it until
///   `None` and carry the [`Action`]s out in order. An action that waits for the driver
///   ([`Action::WriteVotes`] with a flush, [`Action::AwaitLogDurable`],
///   [`Action::DigestState`], [`Action::InstallState`], [`Action::CheckpointNow`]) names the
///   input that answers it; the driver may give that input while still draining.
/// - [`Replica::next_timeout_ms`] says when to give [`Input::Tick`] next.
/// - Getters ([`Replica::stats`], [`Replica::regency`], …) are for observability only: no
///   protocol decision of the driver depends on them.
///
/// The production runtime (`tagma-node`) and the deterministic simulator (`tagma-sim`) drive
/// exactly this API, so the simulator tests what runs.
pub struct Replica {
    params: ReplicaParams,
    /// When to ask the others for their positions if nothing is decided until then.
    idle_probe_ms: Option<u64>,
    /// Durable replicas: the newest instance the runtime reported on this replica's disk
    /// ([`Input::LogDurable`]); the leader proposes instance c only once c−1 is, and no
    /// replica decides more than [`LOG_LAG_MAX`] instances beyond it.
    durable_through: Option<ConsensusId>,
    /// Durable replicas: the sequence number of the last [`Action::PersistVote`] issued, and
    /// of the newest one the runtime reported on disk ([`Input::VotesDurable`]).
    votes_issued: u64,
    votes_durable: u64,
    /// Durable replicas: the newest `PersistVote` written ([`Action::WriteVotes`]), and the
    /// newest whose flush was asked for.
    votes_written: u64,
    votes_flush_asked: u64,
    /// The instance the leader's next proposal waits to see in the log, once announced
    /// ([`Action::AwaitLogDurable`]).
    log_wait_announced: Option<ConsensusId>,
    /// When "the log caught up" was last logged at info level (a replica catching up by
    /// decisions holds and resumes every few instances: the others go to debug).
    log_caught_up_noted_ms: Option<u64>,
    /// The (instance, epoch) whose messages were last resent to each peer
    /// (`resend_own_messages`).
    resent_to: BTreeMap<ReplicaId, (ConsensusId, Epoch)>,
    /// What each peer was answered in its current period ([`AnswerBudget`]).
    answers: AnswerLedger,
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
    /// The leader's hold on its next proposal while the batch fills (`batch_fill`).
    batch_fill: batch_fill::BatchFill,
    /// The last decided instance, for the ordering invariant.
    last_decided: Option<ConsensusId>,
    decisions: DecisionLog,
    future: FutureBuffer,
    leader_change: LeaderChange,
    catch_up: CatchUp,
    /// The leader's source of per-batch seeds.
    rng: SplitMix64,
    actions: VecDeque<Action>,
    stats: CoreStats,
    /// The last fault a leader committed, recorded by [`Replica::suspect_leader`].
    leader_fault: Option<(ConsensusId, ProposalFault)>,
    /// Start-up synchronisation in progress ([`Replica::start_startup`]).
    startup: Option<Startup>,
    /// A view without this replica was installed: it only serves (`serve_after_leaving`).
    left: bool,
    /// This replica's durable checkpoints, oldest first (at most two: the newest one is
    /// offered, the previous one still served to a fetch that started before it).
    served: VecDeque<CheckpointInfo>,
    /// This replica's vote in its state vote after a restart (see [`StateVoteRound`]); `None` before
    /// one, or once withdrawn (its state was replaced, or the others moved past it).
    own_state_vote: Option<OwnStateVote>,
    /// State transfer in progress.
    fetch: Option<Fetch>,
    /// The later check of a state the state vote left unconfirmed (see [`state_check`]).
    state_check: Option<state_check::StateCheck>,
    /// The newest decisions of the state being installed (kept for forwarding once it is).
    installing_recent: Vec<DecidedInstance>,
    /// The service's next due time, for time-only batches (`time_batch`).
    service_due: time_batch::ServiceDue,
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
    fn build(params: ReplicaParams, key: IdentityKey) -> Self {
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
            votes_written: 0,
            votes_flush_asked: 0,
            log_wait_announced: None,
            log_caught_up_noted_ms: None,
            resent_to: BTreeMap::new(),
            answers: AnswerLedger::default(),
            recovered_votes: BTreeMap::new(),
            rng: SplitMix64(params.seed),
            key,
            checker,
            past_checkers: VecDeque::new(),
            regency: Regency(0),
            clients,
            instance: Instance::new(ConsensusId(0)),
            last_decided_timestamp_ms: 0,
            batch_fill: batch_fill::BatchFill::default(),
            last_decided: None,
            decisions: DecisionLog::new(params.decisions_kept),
            future,
            leader_change: LeaderChange::default(),
            catch_up: CatchUp::default(),
            actions: VecDeque::new(),
            stats: CoreStats::default(),
            leader_fault: None,
            startup: None,
            left: false,
            served: VecDeque::new(),
            own_state_vote: None,
            fetch: None,
            state_check: None,
            installing_recent: Vec::new(),
            service_due: time_batch::ServiceDue::default(),
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
            state_unconfirmed: u64::from(self.state_check.is_some()),
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

    /// The one entry point: takes `input` at `now_ms` (the core has no other notion of
    /// time), runs the protocol, and queues the actions it calls for ([`Replica::poll_action`]).
    /// An input the core refuses comes back as a [`Rejection`] (for the driver to count and
    /// log); it changes nothing, and never panics, whatever the bytes behind it.
    pub fn handle(&mut self, now_ms: u64, input: Input) -> Result<(), Rejection> {
        let result = match input {
            Input::ClientRequest(request) => self.on_client_request(now_ms, request),
            Input::Peer { from, input } => self.on_peer(now_ms, from, input),
            Input::Tick => {
                self.on_tick(now_ms);
                Ok(())
            }
            other => {
                self.set_now(now_ms);
                match other {
                    Input::LogDurable(cid) => self.on_log_durable(cid),
                    Input::VotesDurable { seq } => self.on_votes_durable(seq),
                    Input::CheckpointWritten(info) => self.on_checkpoint_written(info),
                    Input::StateDigest { cid, digest } => self.on_state_digest(cid, digest),
                    Input::StateInstalled(outcome) => self.on_state_installed(outcome),
                    Input::LogServed { to, unused } => self.on_log_served(to, unused),
                    Input::ServiceDue {
                        executed_through,
                        due_ms,
                    } => self.on_service_due(executed_through, due_ms),
                    Input::ClientRequest(_) | Input::Peer { .. } | Input::Tick => {
                        unreachable!("matched above")
                    }
                }
                Ok(())
            }
        };
        self.write_votes_after_input();
        self.announce_log_wait();
        result
    }

    /// An ordered request that arrived on an authenticated client connection (authentication
    /// already checked). A retransmission of an ordered request yields `ResendReply`; a
    /// request of an older view, `SendCurrentView`.
    fn on_client_request(
        &mut self,
        now_ms: u64,
        request: RequestEnvelope,
    ) -> Result<(), Rejection> {
        if self.left {
            return Err(Rejection::NotMember);
        }
        self.set_now(now_ms);
        let (client, seq) = (request.request.client, request.request.seq);
        if request.request.view < self.params.view {
            self.actions.push_back(Action::SendCurrentView {
                client,
                view: self.view(),
            });
        }
        match self.clients.admit(request)? {
            Admission::AlreadyDelivered => {
                self.actions.push_back(Action::ResendReply { client, seq });
            }
            Admission::Queued => self.settle(),
        }
        Ok(())
    }

    /// A message from authenticated peer `from`.
    fn on_peer(&mut self, now_ms: u64, from: ReplicaId, input: PeerInput) -> Result<(), Rejection> {
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
        let holds = self.startup.is_some() || self.state_check_holds();
        if holds
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
            // votes could be replayed against what it votes now (with them buffered, two
            // values were decided: regression seed 6563 with `--reconfig 2`).
            if self.startup.is_some() {
                return Err(Rejection::StartingUp);
            }
            return Err(Rejection::RepairingState);
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
