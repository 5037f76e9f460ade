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

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use tagma_crypto::IdentityKey;
use tagma_wire::{
    Accept, Batch, CheckpointInfo, ClientId, Collect, ConsensusId, DecidedInstance, Decode, Digest,
    Encode, Epoch, PeerMessage, Propose, PublicKey, Regency, ReplicaId, RequestEnvelope,
    RequestKind, RequestSeq, Signature, SignedCollect, Stop, StopData, Sync, View, ViewId,
    ViewMember, Vote, collect_signing_bytes,
};

use crate::clients::{Admission, ClientLimits, Clients};
use crate::config::ValidConfig;
use crate::proof::{DecisionLog, ProofChecker, sign_accept};
use crate::quorum::{Mode, Quorums};
use crate::sync::{self, Choice, Normalized};
use crate::transfer::{
    Fetch, FetchOut, FetchParams, InstallOutcome, LOG_RUN, StateToInstall, TransferInput,
};
use crate::view::Membership;

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
    /// Members' Ed25519 public keys, in the order of `members` (to check signed ACCEPTs,
    /// collects and decision proofs).
    pub member_keys: Vec<PublicKey>,
    /// Decided instances (with their ACCEPT signatures) kept in memory for decision
    /// forwarding to replicas that fell behind.
    pub decisions_kept: usize,
    /// Whether this replica keeps durable checkpoints and a log: it then serves and runs
    /// state transfer ([`crate::transfer`]) when decision forwarding cannot help.
    pub state_transfer: bool,
    /// With `state_transfer`, in BFT mode: end the start-up synchronisation with the hash
    /// vote on the recovered state (see `Audit`; `[storage] hash_vote`).
    pub hash_vote: bool,
    /// Bytes per state-transfer chunk (fits in a frame).
    pub chunk_bytes: u32,
    /// The largest checkpoint fetched by state transfer.
    pub state_bytes_max: u64,
    /// Members' addresses, in the order of `members` (part of the view a change produces).
    pub member_addrs: Vec<String>,
    /// The administrator's key, which signs view changes (`None`: all are refused).
    pub admin_key: Option<PublicKey>,
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
            request_bytes_max: r.limits.request_bytes_max,
            client_pending_max: r.limits.client_pending_max,
            pending_requests_max: r.limits.pending_requests_max,
            clients_max: r.limits.clients_max,
            future_messages_max: r.limits.future_messages_max,
            request_timeout_ms: r.timeouts.request_timeout_ms,
            seed: 0x7461_676d_6100_0000 ^ me.0 as u64,
            member_keys: cfg.replicas.iter().map(|r| r.public_key).collect(),
            decisions_kept: r.limits.decisions_kept,
            state_transfer: r.storage.durability == crate::config::Durability::Fsync,
            hash_vote: r.storage.hash_vote,
            chunk_bytes: chunk_bytes(r.limits.frame_bytes_max),
            state_bytes_max: r.storage.state_bytes_max,
            member_addrs: cfg.replicas.iter().map(|r| r.addr.to_string()).collect(),
            admin_key: cfg.admin,
        }
    }
}

/// State-transfer chunks: 1 MiB, or less when frames are smaller (with room for the header).
pub fn chunk_bytes(frame_bytes_max: usize) -> u32 {
    (frame_bytes_max.saturating_sub(64)).clamp(1, 1 << 20) as u32
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
    /// A signed ACCEPT; its signature is checked by the core only when a decision rests on
    /// it (2f per instance in BFT, never per request), so ACCEPTs beyond the quorum cost no
    /// verification.
    Accept(Accept),
    /// STOP; the network stage has dropped requests whose authentication failed.
    Stop(Stop),
    StopData(StopData),
    /// SYNC, with whether every request of its fresh proposal authenticated.
    Sync {
        sync: Sync,
        proposal_authentic: bool,
    },
    DecisionRequest {
        cid: ConsensusId,
    },
    Decision(DecidedInstance),
    /// A peer's start-up position ([`PeerMessage::Position`]).
    Position {
        next: ConsensusId,
        reply: bool,
    },
    /// A forwarded request, with whether its authentication verified.
    Forward {
        request: RequestEnvelope,
        authentic: bool,
    },
    /// A state-transfer message.
    Transfer(TransferInput),
    /// A peer's vote in the hash vote after a restart ([`PeerMessage::StateVote`]).
    StateVote {
        cid: ConsensusId,
        digest: Digest,
    },
}

impl PeerInput {
    /// Maps a received message to the core's input the way the network stage must:
    /// PROPOSE batches are decoded and hashed, and `authentic` is asked about the requests
    /// that need checking (a PROPOSE's batch, a forwarded request, each request of a STOP —
    /// unauthentic ones are dropped —, and a SYNC's fresh proposal). `None` for the view
    /// exchange of joining replicas ([`PeerMessage::ViewQuery`], [`PeerMessage::ViewInfo`]),
    /// which the runtime answers on the connection it came on, without the core.
    pub fn from_message(
        msg: PeerMessage,
        authentic: impl Fn(&[RequestEnvelope]) -> bool,
    ) -> Option<PeerInput> {
        Some(match msg {
            PeerMessage::Propose(p) => match Batch::decode(&p.batch) {
                Ok(batch) => {
                    let hash = tagma_crypto::digest(&p.batch);
                    let ok = authentic(&batch.requests);
                    PeerInput::Propose {
                        cid: p.cid,
                        epoch: p.epoch,
                        batch: VerifiedBatch {
                            bytes: p.batch,
                            hash,
                            batch,
                            authentic: ok,
                        },
                    }
                }
                Err(_) => PeerInput::UndecodablePropose {
                    cid: p.cid,
                    epoch: p.epoch,
                },
            },
            PeerMessage::Write(v) => PeerInput::Write(v),
            PeerMessage::Accept(a) => PeerInput::Accept(a),
            PeerMessage::Forward(request) => {
                let ok = authentic(std::slice::from_ref(&request));
                PeerInput::Forward {
                    request,
                    authentic: ok,
                }
            }
            PeerMessage::Stop(mut stop) => {
                stop.requests.retain(|r| authentic(std::slice::from_ref(r)));
                PeerInput::Stop(stop)
            }
            PeerMessage::StopData(data) => PeerInput::StopData(data),
            PeerMessage::Sync(sync) => {
                let proposal_authentic = sync.proposal.is_empty()
                    || Batch::decode(&sync.proposal).is_ok_and(|b| authentic(&b.requests));
                PeerInput::Sync {
                    sync,
                    proposal_authentic,
                }
            }
            PeerMessage::DecisionRequest { cid } => PeerInput::DecisionRequest { cid },
            PeerMessage::Decision(d) => PeerInput::Decision(d),
            PeerMessage::Position { next, reply } => PeerInput::Position { next, reply },
            PeerMessage::StateQuery { next } => PeerInput::Transfer(TransferInput::Query { next }),
            PeerMessage::StateOffer { checkpoint, next } => {
                PeerInput::Transfer(TransferInput::Offer { checkpoint, next })
            }
            PeerMessage::ChunkRequest { cid, offset, len } => {
                PeerInput::Transfer(TransferInput::ChunkRequest { cid, offset, len })
            }
            PeerMessage::Chunk { cid, offset, data } => {
                PeerInput::Transfer(TransferInput::Chunk { cid, offset, data })
            }
            PeerMessage::LogRequest { from, count } => {
                PeerInput::Transfer(TransferInput::LogRequest { from, count })
            }
            PeerMessage::LogEntry(d) => PeerInput::Transfer(TransferInput::LogEntry(d)),
            PeerMessage::StateVote { cid, digest } => PeerInput::StateVote { cid, digest },
            PeerMessage::ViewQuery | PeerMessage::ViewInfo(_) => return None,
        })
    }
}

/// A decided instance, handed to execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub cid: ConsensusId,
    pub epoch: Epoch,
    pub hash: Digest,
    pub batch: Batch,
    /// Durable replicas (`state_transfer`): the instance with the signatures of its
    /// decision, for the log.
    pub logged: Option<DecidedInstance>,
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
    /// A view change ordered in instance `cid` (delivered just before) installed `view`:
    /// instance `cid + 1` runs in it. The runtime connects to new members and persists the
    /// view; if this replica is no longer a member (`member` false) it stops ordering — the
    /// core only answers positions, decision requests and state transfer from then on.
    ViewInstalled {
        cid: ConsensusId,
        view: View,
        member: bool,
    },
    /// A client retransmitted a request that is already ordered: resend its cached reply.
    ResendReply { client: ClientId, seq: RequestSeq },
    /// A new regency was installed (observability: logs, metrics, failover measurements).
    RegencyInstalled { regency: Regency, leader: ReplicaId },
    /// This replica is behind by instances that no peer keeps in memory any more; it needs
    /// a checkpoint and log from the others. With `state_transfer` on, the core starts
    /// fetching them at once (the actions below); otherwise this is only reported.
    StateTransferNeeded {
        next_cid: ConsensusId,
        known_decided: ConsensusId,
    },
    /// State transfer, serving side: send `to` the `len` bytes at `offset` of the durable
    /// checkpoint of `cid` as a [`PeerMessage::Chunk`] (the core checked the range against
    /// the checkpoint it announced).
    ReadChunk {
        to: ReplicaId,
        cid: ConsensusId,
        offset: u64,
        len: u32,
    },
    /// State transfer, serving side: send `to` the logged decisions `from ..` (at most
    /// `count`, stopping at the first the log lacks) as [`PeerMessage::LogEntry`]s.
    ReadLog {
        to: ReplicaId,
        from: ConsensusId,
        count: u32,
    },
    /// State transfer, fetching side: store this part of the incoming checkpoint (chunks come
    /// in order from offset 0; a new fetch starts again from 0).
    StoreChunk {
        cid: ConsensusId,
        offset: u64,
        data: Bytes,
    },
    /// Durable replicas: write this replica's votes on the instance in progress to disk
    /// (the collect it would report in a leader change, unsigned: the values it wrote and
    /// the highest epoch in which it saw a write quorum), then report them with
    /// [`Replica::note_votes_durable`]`(seq)`. The core sends an ACCEPT only once the votes
    /// that include it are durable, so a replica that crashes and restarts never forgets a
    /// value it may have helped decide (it reads its votes back with
    /// [`Replica::restore_votes`]); WRITEs do not wait. A `PersistVote` supersedes the earlier
    /// ones of the same instance (lower `seq`); the runtime keeps each instance's newest until
    /// that instance's decision is durable in its log, and the highest `regency` seen always
    /// (a regency is recorded when installed, before this replica says anything in it).
    PersistVote { seq: u64, votes: Collect },
    /// State transfer, fetching side: every part arrived; validate and install it (see
    /// [`crate::transfer`]), then report with [`Replica::state_installed`]. The core may
    /// still deliver instances meanwhile (decided by the others while the state was
    /// fetched): once a state is installed, the runtime skips the `Deliver`s of instances it
    /// covers, and logs none of them.
    InstallState(StateToInstall),
    /// Durable replicas, at the end of the start-up synchronisation (the hash vote on the
    /// recovered state): compute the digest a checkpoint of the state after instance `cid` —
    /// the last one delivered — would have, without writing it, and report it with
    /// [`Replica::note_state_digest`].
    DigestState { cid: ConsensusId },
    /// Durable replicas whose vote in the hash vote stands, once a peer's vote contradicted
    /// it (DDS's fresh checkpoint, for that peer's repair): checkpoint the state after
    /// instance `cid` — the last one delivered, or a later one if the runtime executed more
    /// meanwhile — now, whatever the staggered points say, and report it with
    /// [`Replica::note_checkpoint`] once it is durable.
    CheckpointNow { cid: ConsensusId },
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
    /// A vote or leader-change message while this replica recovers from its disk: it
    /// neither votes nor reports a collect until the start-up synchronisation is over (it
    /// first catches up to the others' positions; the votes it persisted before the crash are
    /// restored, the WRITEs it did not persist are lost).
    Recovering,
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
            Rejection::Recovering => "recovering",
            Rejection::NotMember => "not_member",
            Rejection::InvalidTransfer { .. } => "invalid_transfer",
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
    /// Regencies installed (leader changes).
    pub leader_changes: u64,
    /// Instances decided from a forwarded proof (catch-up) rather than by voting.
    pub decisions_forwarded_in: u64,
    /// States installed by state transfer.
    pub state_transfers: u64,
    /// Hash votes after a restart that confirmed the recovered state (see `Audit`).
    pub audits_confirmed: u64,
    /// Hash votes after a restart that contradicted the recovered state (see `Audit`).
    pub audits_contradicted: u64,
    /// Views installed by view changes.
    pub views_installed: u64,
}

/// Requests carried in one STOP, at most.
const STOP_REQUESTS_MAX: usize = 64;
/// Votes are kept for epochs at most this far above the installed regency.
const FUTURE_EPOCHS_MAX: u32 = 16;
/// Forwarded decisions kept for later instances while catching up.
const FUTURE_DECISIONS_MAX: usize = 64;
/// Checkers of past views kept to judge decisions of those views (leader changes right after a
/// view change carry the last decision of the view before).
const PAST_CHECKERS_KEPT: usize = 4;
/// Values kept in a collect's write set: the most recent writes. Enough for safety — once a
/// value may have been decided, every later epoch writes that same value, so it is always
/// among the newest — and it bounds the size of STOPDATA and SYNC.
const WRITE_SET_MAX: usize = 2;

/// Leader-change state (SPEC §3 synchronization phase, reference §1.4).
#[derive(Default)]
struct SyncState {
    /// The regency this replica asked for (`> regency` while a change is in progress).
    next_regency: Regency,
    /// The highest regency each replica sent a STOP for (this replica included).
    stops: BTreeMap<ReplicaId, Regency>,
    /// Our STOP, retransmitted until the regency is installed.
    own_stop: Option<Stop>,
    stop_retransmit_ms: Option<u64>,
    /// Installed the regency, waiting for its SYNC.
    waiting_sync: bool,
    sync_deadline_ms: Option<u64>,
    /// Regencies that ended without a decision in a row (doubles the SYNC timeout).
    failed_regencies: u32,
    /// New leader: the STOPDATAs of the current regency (own included).
    stopdata: BTreeMap<ReplicaId, StopData>,
    /// STOPDATAs for a later regency this replica will lead, received before it installed
    /// it (the latest per sender).
    early_stopdata: BTreeMap<ReplicaId, StopData>,
    /// A SYNC whose last decided instance is ahead of us: applied once we caught up.
    pending: Option<Finalise>,
    /// The highest epoch each peer sent a consensus message in (to notice a regency that
    /// was installed without us, e.g. while this replica was down).
    epochs_seen: BTreeMap<ReplicaId, Epoch>,
    /// Durable replicas: an installed regency whose record (`PersistVote` `seq`) is not on
    /// disk yet; its STOPDATA (or, as leader, its own collect and SYNC) waits for it.
    held_install: Option<(u64, Regency)>,
}

/// The outcome of a verified SYNC, applied by [`Replica::finalise`].
#[derive(Clone, Debug)]
struct Finalise {
    last_decided: Option<DecidedInstance>,
    current_cid: ConsensusId,
    /// The value for `current_cid` in the new epoch (`None`: the leader proposes normally).
    value: Option<(Bytes, bool)>,
    proposal_authentic: bool,
    /// This replica's own collect, at `current_cid`, was among those the value was chosen
    /// from (so were its restored votes on that instance).
    own_collect_counted: bool,
}

/// Catch-up (decision forwarding, reference §1.9): detects that this replica is behind and
/// asks the others for the decided instances it missed.
#[derive(Default)]
struct CatchUp {
    /// The highest instance each peer sent a consensus message for.
    highest_seen: BTreeMap<ReplicaId, ConsensusId>,
    /// When f+1 peers were first seen ahead (`None`: not behind).
    behind_since_ms: Option<u64>,
    next_request_ms: u64,
    /// Verified decisions for instances after the next one.
    future: BTreeMap<ConsensusId, DecidedInstance>,
    /// The end (exclusive) of the run of decisions last requested.
    requested_until: ConsensusId,
    /// Rotates catch-up requests over the peers that are ahead.
    rotation: usize,
    state_transfer_signalled: bool,
    /// Forwarded decisions that came after this replica already had them, since it last
    /// caught up: each doubles the catch-up gap (up to a quarter of a request timeout), so
    /// a replica that processes decisions slower than the gap stops re-requesting runs it
    /// is still working through.
    duplicates: u32,
    /// The wait before the next request is the long one for peers merely early on the next
    /// instance (`note_ahead`): shortened to the catch-up gap once f+1 peers show they
    /// decided further.
    waiting_early: bool,
}

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

/// Start-up synchronisation (SPEC §5, reference §2.4): a replica that (re)starts with
/// durable state does not order until it knows where the others are and has caught up to
/// the highest position it heard, so replicas that all restarted converge on the highest
/// durable instance instead of deciding it again differently.
#[derive(Debug)]
struct Recovery {
    /// The `next` instance each peer reported.
    heard: BTreeMap<ReplicaId, ConsensusId>,
    /// Until then every peer's position is awaited; after it, n − f (this replica's own
    /// included) are enough.
    deadline_ms: u64,
    /// When the position goes again to the peers not heard from.
    retransmit_ms: u64,
    /// The hash vote that ends it on a durable BFT replica (see [`Audit`]).
    audit: AuditStage,
    /// Peers that asked for this replica's checkpoint while it synchronised: they get its
    /// vote once it has one (they may be auditing too).
    asked: BTreeSet<ReplicaId>,
    /// The peers' votes in the hash vote (kept from before this replica's own starts).
    votes: BTreeMap<ReplicaId, (ConsensusId, Digest)>,
    /// The repair's state is installed (see [`AuditStage::Repairing`]).
    repaired: bool,
}

/// DDS's hash vote (SPEC §5: REINIT with checkpoint hashes, install what enough replicas
/// agree on, then a fresh checkpoint everywhere), done after the start-up synchronisation
/// has caught up: every durable replica that restarts computes the digest a checkpoint of
/// the state after the last instance decided (`cid`) would have — streamed into the hash,
/// nothing written (`Action::DigestState`) — and compares it with its peers' votes
/// (`StateVote`) and the checkpoints they offer at that instance. Checksums catch a torn or
/// corrupted disk; this catches one whose wrong content passes them (a lying disk, a bug
/// that wrote a wrong state): a replica whose recovered state f+1 peers contradict with one
/// digest fetches theirs by state transfer (one of them is correct), instead of serving and
/// checkpointing a wrong state; a confirmed replica orders at once and, if a peer's vote
/// contradicted it, writes DDS's fresh checkpoint meanwhile (`Action::CheckpointNow`), which
/// is what that peer fetches.
/// After a restart of every replica all of them stand at the same instance and vote there; a
/// replica restarting alone finds the others past it (nothing to compare: inconclusive,
/// logged). BFT only: CFT assumes disks that fail detectably.
#[derive(Debug)]
struct Audit {
    /// The instance voted on.
    cid: ConsensusId,
    /// This replica's digest of its state there, once computed.
    own: Option<Digest>,
    /// What each peer offered: its newest checkpoint and its next instance.
    offers: BTreeMap<ReplicaId, (Option<CheckpointInfo>, ConsensusId)>,
    /// When the query goes again to the peers whose answer settles nothing yet.
    query_ms: u64,
    /// When the audit gives up (inconclusive).
    deadline_ms: u64,
}

#[derive(Debug)]
enum AuditStage {
    NotStarted,
    Running(Audit),
    /// Contradicted: the state is being fetched (the synchronisation ends once it is
    /// installed).
    Repairing,
    /// Concluded (or not needed): the synchronisation may end.
    Done,
}

/// This replica's vote in the hash vote: the digest of its state after instance `cid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OwnVote {
    cid: ConsensusId,
    digest: Digest,
    stage: VoteStage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VoteStage {
    /// Cast, the verdict pending: sent to the peers that query this replica.
    Cast,
    /// Confirmed or inconclusive: still sent; a peer's vote that contradicts it asks for the
    /// fresh checkpoint that peer repairs from (`true` once asked: once per vote).
    Stands { checkpoint_asked: bool },
    /// f+1 peers contradicted it: no longer offered, but sent with each query of the repair
    /// fetch (a peer that missed it would not write the checkpoint the fetch needs).
    Contradicted,
}

/// What the peers' votes (and checkpoints) say about this replica's digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AuditVerdict {
    /// f+1 peers hold the same state: one of them is correct.
    Confirmed,
    /// f+1 peers hold one other state: this replica's is wrong.
    Contradicted,
    /// Every peer has moved past the instance or answered, or the time is up.
    Inconclusive,
}

/// The audit gives up after this many request timeouts (hashing a large state takes a while
/// on every replica).
const AUDIT_WAIT_TIMEOUTS: u64 = 5;
/// Once this replica's digest is computed, the peers' votes are awaited this many request
/// timeouts at most.
const AUDIT_PEER_WAIT_TIMEOUTS: u64 = 2;

/// Start-up synchronisation waits this many request timeouts for every peer's position
/// before settling for n − f, and twice as long for catching up before giving up on it.
const RECOVERY_WAIT_TIMEOUTS: u64 = 5;
/// A replica that decided nothing for this many request timeouts asks the others where they
/// are (`Position`), so one that missed the last decisions before the load stopped catches
/// up without waiting for the next request (nothing else it receives names a later
/// instance).
const IDLE_PROBE_TIMEOUTS: u64 = 2;

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

    /// Recovery from durable storage, before any input: this replica has executed every
    /// instance up to `last` (its checkpoint and log), whose batch timestamp was
    /// `timestamp_ms`, leaving the client sessions `sessions`. `recent` are the newest
    /// logged decisions with their proofs, oldest first, kept for decision forwarding. The
    /// next instance it orders is `last + 1`; peers ahead of it are caught up with as after
    /// any lag.
    pub fn resume(
        &mut self,
        last: ConsensusId,
        timestamp_ms: u64,
        sessions: &[(ClientId, RequestSeq)],
        recent: impl IntoIterator<Item = DecidedInstance>,
    ) {
        debug_assert!(
            self.last_decided.is_none() && self.instance.cid == ConsensusId(0),
            "resume before any decision"
        );
        self.instance = Instance::new(last.next());
        self.last_decided = Some(last);
        self.arm_idle_probe();
        self.durable_through = Some(last);
        self.last_decided_timestamp_ms = timestamp_ms;
        self.clients.restore_sessions(sessions);
        for decided in recent {
            self.record_proven(decided);
        }
    }

    /// Keeps a proven decision for forwarding (after the last one kept).
    fn record_proven(&mut self, decided: DecidedInstance) {
        let hash = tagma_crypto::digest(&decided.batch);
        let signatures = decided.proof.accepts.iter().copied().collect();
        self.decisions.record(
            decided.cid,
            decided.proof.epoch,
            hash,
            decided.batch.clone(),
            signatures,
            Some(decided.proof),
        );
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
    /// Timers whose deadline passed: request timers (first expiry forwards the request to
    /// all replicas, the second suspects the leader), STOP retransmission, the SYNC timeout,
    /// and catch-up requests.
    pub fn handle_tick(&mut self, now_ms: u64) {
        if self.left {
            return;
        }
        self.set_now(now_ms);
        let mut expired = self.clients.take_expired(now_ms);
        if self.recovery.is_some() {
            // Not ordering yet: no request timer may forward or suspect meanwhile (they
            // restart when recovery ends).
            expired.clear();
            self.retransmit_position();
            self.progress_recovery();
        } else if self.idle_probe_ms.is_some_and(|t| t <= now_ms) {
            self.arm_idle_probe();
            self.actions
                .push_back(Action::Broadcast(PeerMessage::Position {
                    next: self.instance.cid,
                    reply: false,
                }));
        }
        let mut suspect = Vec::new();
        for e in expired {
            if e.forwarded_before {
                suspect.push(e.request);
            } else {
                // SPEC §3: first expiry → forward to all (the client may have skipped some).
                self.actions
                    .push_back(Action::Broadcast(PeerMessage::Forward(e.request)));
            }
        }
        if !suspect.is_empty() {
            tracing::debug!(leader = %self.leader(), requests = suspect.len(), "request timers expired twice: suspecting the leader");
            self.suspect(suspect);
            // This replica may simply have fallen behind while the others went quiet (nothing
            // it receives then names a later instance): ask everyone for the next decision.
            self.request_decisions(true);
        }
        if self.sync.stop_retransmit_ms.is_some_and(|t| t <= now_ms)
            && let Some(stop) = self.sync.own_stop.clone()
        {
            self.actions
                .push_back(Action::Broadcast(PeerMessage::Stop(stop)));
            self.sync.stop_retransmit_ms = Some(now_ms + self.params.request_timeout_ms);
        }
        if self.sync.sync_deadline_ms.is_some_and(|t| t <= now_ms) {
            // The new leader did not synchronise in time: move on to the next one.
            tracing::debug!(regency = %self.regency, "no SYNC in time: suspecting the new leader");
            self.sync.sync_deadline_ms = None;
            self.sync.failed_regencies += 1;
            self.start_stop(
                Regency(self.regency.0.saturating_add(1)),
                self.clients.head_requests(STOP_REQUESTS_MAX),
            );
        }
        self.maybe_request_decisions();
        if let Some(fetch) = self.fetch.as_mut() {
            let mut out = Vec::new();
            fetch.tick(now_ms, &mut out);
            self.fetch_actions(out);
        }
        self.settle();
    }
    /// The earliest time at which `handle_tick` must be called, if any timer is armed.
    pub fn next_timeout_ms(&self) -> Option<u64> {
        if self.left {
            return None;
        }
        let catch_up = self
            .catch_up
            .behind_since_ms
            .map(|_| self.catch_up.next_request_ms);
        let recovery = self.recovery_timer();
        let fetch = self.fetch.as_ref().and_then(Fetch::deadline_ms);
        [
            self.idle_probe_ms.filter(|_| self.recovery.is_none()),
            self.clients.next_deadline_ms(),
            self.sync.stop_retransmit_ms,
            self.sync.sync_deadline_ms,
            catch_up,
            recovery,
            fetch,
        ]
        .into_iter()
        .flatten()
        .min()
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

    /// A forwarded request: like a client request, but an already-ordered one is ignored
    /// (the forwarding replica is not the client and needs no reply).
    fn on_forward(&mut self, request: RequestEnvelope, authentic: bool) -> Result<(), Rejection> {
        if !authentic {
            return Err(Rejection::Unauthentic);
        }
        self.clients.admit(request).map(|_| ())
    }

    /// Routes a consensus message by instance: older → stale (late ACCEPT signatures are
    /// kept for proofs), later → buffered, current → handled now.
    fn on_consensus_input(&mut self, from: ReplicaId, input: PeerInput) -> Result<(), Rejection> {
        let (cid, epoch) = match &input {
            PeerInput::Propose { cid, epoch, .. }
            | PeerInput::UndecodablePropose { cid, epoch } => (*cid, *epoch),
            PeerInput::Write(v) => (v.cid, v.epoch),
            PeerInput::Accept(a) => (a.vote.cid, a.vote.epoch),
            _ => unreachable!("non-consensus inputs are routed by handle_peer"),
        };
        let next = self.instance.cid;
        if cid < next {
            if let PeerInput::Accept(a) = &input {
                self.decisions.add_signature(from, &a.vote, a.signature);
            }
            return Err(Rejection::Stale { cid });
        }
        if cid > next {
            self.note_ahead(from, cid);
            tracing::trace!(%from, %cid, "buffering a message for a later instance");
            return self.future.push(next, cid, from, input);
        }
        // Votes of the current regency and of later ones (bounded) are kept: a replica that
        // installs a regency late must not lose them. Earlier epochs are frozen.
        self.note_epoch(from, epoch);
        let current = self.epoch();
        if epoch < current || epoch.0 > current.0.saturating_add(FUTURE_EPOCHS_MAX) {
            return Err(Rejection::Stale { cid });
        }
        match input {
            PeerInput::Propose { batch, .. } if epoch == current => {
                self.on_propose(from, epoch, Some(batch))
            }
            PeerInput::UndecodablePropose { .. } if epoch == current => {
                self.on_propose(from, epoch, None)
            }
            PeerInput::Propose { .. } | PeerInput::UndecodablePropose { .. } => {
                Err(Rejection::Stale { cid })
            }
            PeerInput::Write(vote) => {
                self.on_write(from, vote);
                Ok(())
            }
            PeerInput::Accept(accept) => {
                self.on_accept(from, accept);
                Ok(())
            }
            _ => unreachable!("non-consensus inputs are routed by handle_peer"),
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
        if self.sync.waiting_sync {
            // The new leader's SYNC comes first on the same link; a PROPOSE before it is stale.
            return Err(Rejection::Stale { cid });
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
                true,
                self.last_decided_timestamp_ms,
            ),
        };
        match (verdict, batch) {
            (Ok(()), Some(b)) if b.authentic => {
                self.take_proposal(epoch, b);
                Ok(())
            }
            (Ok(()), Some(b)) => {
                // Mod-SMaRt with MAC authenticators: a request this replica cannot
                // authenticate may still be genuine (a faulty client can corrupt one entry of
                // its authenticator). Wait for f+1 vouchers instead of blaming the leader.
                self.instance.epoch_mut(epoch).proposal = ProposalSlot::Unverified(b);
                self.check_quorums(epoch);
                Err(Rejection::InvalidProposal {
                    from,
                    cid,
                    fault: ProposalFault::Unauthentic,
                })
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
        let state = self.instance.epoch_mut(epoch);
        debug_assert!(matches!(
            state.proposal,
            ProposalSlot::Empty | ProposalSlot::Unverified(_)
        ));
        state.proposal = ProposalSlot::Valid(batch);
        self.vote_for_proposal(epoch);
        self.check_quorums(epoch);
    }

    /// Sends this replica's vote for the epoch's (valid) proposal.
    fn vote_for_proposal(&mut self, epoch: Epoch) {
        let cid = self.instance.cid;
        let me = self.params.me;
        let mode = self.params.quorums.mode;
        let state = self.instance.epoch_mut(epoch);
        let ProposalSlot::Valid(batch) = &state.proposal else {
            unreachable!("voting for a valid proposal")
        };
        let hash = batch.hash;
        if self
            .recovered_votes
            .get(&cid)
            .is_some_and(|r| r.forbids(epoch, hash))
        {
            tracing::info!(%cid, %epoch, "not voting: before a crash this replica voted for another value of this instance, in this epoch, or accepted one that no SYNC has superseded since");
            return;
        }
        let state = self.instance.epoch_mut(epoch);
        debug_assert!(!state.write_sent, "voted twice for one epoch");
        state.write_sent = true;
        match mode {
            // Mod-SMaRt: valid PROPOSE → WRITE.
            Mode::Bft => {
                let fresh = state.writes.add(me, hash);
                debug_assert!(fresh, "own WRITE counted twice");
                if self.params.state_transfer {
                    // Durable: the value written goes to disk too (the WRITE does not wait),
                    // so that after a crash this replica still vouches for it.
                    self.persist_votes();
                }
                self.actions
                    .push_back(Action::Broadcast(PeerMessage::Write(Vote {
                        cid,
                        epoch,
                        hash,
                    })));
            }
            // CFT has no WRITE step: valid PROPOSE → ACCEPT (`check_quorums`, which every
            // caller runs next).
            Mode::Cft => {}
        }
    }

    /// Issues an [`Action::PersistVote`] of this replica's votes on the instance in progress;
    /// returns its sequence number.
    fn persist_votes(&mut self) -> u64 {
        self.votes_issued += 1;
        let votes = self.collect();
        self.actions.push_back(Action::PersistVote {
            seq: self.votes_issued,
            votes,
        });
        self.votes_issued
    }

    /// Signs, counts and broadcasts this replica's ACCEPT.
    fn send_accept(&mut self, epoch: Epoch, hash: Digest) {
        let vote = Vote {
            cid: self.instance.cid,
            epoch,
            hash,
        };
        let signature = sign_accept(&self.key, &vote);
        let me = self.params.me;
        let state = self.instance.epoch_mut(epoch);
        debug_assert!(!state.accept_sent, "ACCEPT sent twice in one epoch");
        state.accept_sent = true;
        let fresh = state.accepts.add(me, hash);
        debug_assert!(fresh, "own ACCEPT counted twice");
        state.accept_signatures.insert(me, (hash, signature));
        self.actions
            .push_back(Action::Broadcast(PeerMessage::Accept(Accept {
                vote,
                signature,
            })));
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

    fn on_accept(&mut self, from: ReplicaId, accept: Accept) {
        let vote = accept.vote;
        let state = self.instance.epoch_mut(vote.epoch);
        if state.accepts.add(from, vote.hash) {
            state
                .accept_signatures
                .insert(from, (vote.hash, accept.signature));
            self.check_quorums(vote.epoch);
        }
    }

    /// Mod-SMaRt steps 3–4, for the value of the PROPOSE this replica holds: a write quorum →
    /// ACCEPT (BFT); an accept quorum → decide. Votes for other hashes never count. An
    /// unverified proposal is voted for once f+1 others vouch for it.
    fn check_quorums(&mut self, epoch: Epoch) {
        if epoch != self.epoch() {
            return; // votes of a later regency wait until it is installed
        }
        let quorums = self.params.quorums;
        let me = self.params.me;
        let state = self.instance.epoch_mut(epoch);
        let (hash, unverified) = match &state.proposal {
            ProposalSlot::Valid(b) => (b.hash, false),
            ProposalSlot::Unverified(b) => (b.hash, true),
            _ => return,
        };
        if unverified {
            let vouchers = match quorums.mode {
                Mode::Bft => state.writes.count_except(hash, me),
                Mode::Cft => state.accepts.count_except(hash, me),
            };
            let decided = state.accepts.count(hash) >= quorums.accept_quorum();
            if vouchers < quorums.one_correct() && !decided {
                return;
            }
            let ProposalSlot::Unverified(b) = std::mem::take(&mut state.proposal) else {
                unreachable!()
            };
            state.proposal = ProposalSlot::Valid(b);
            self.vote_for_proposal(epoch);
        }
        let durable = self.params.state_transfer;
        let state = self.instance.epoch_mut(epoch);
        let quorum_step = match quorums.mode {
            // Mod-SMaRt: quorum of WRITEs → ACCEPT.
            Mode::Bft => state.writes.count(hash) >= quorums.write_quorum(),
            // CFT: the vote for the proposal is the ACCEPT.
            Mode::Cft => true,
        };
        // Only for a proposal this replica voted for.
        if state.write_sent && !state.accept_sent && quorum_step {
            if durable && state.accept_seq == 0 {
                // Durable replicas: the write quorum goes to disk first, and the ACCEPT waits
                // for it, so a crash never makes this replica forget the value.
                // Set first: the record (`collect`) claims the write quorum from now on.
                state.accept_seq = self.votes_issued + 1;
                let seq = self.persist_votes();
                debug_assert_eq!(self.instance.epoch_mut(epoch).accept_seq, seq);
            }
            if self.instance.epoch_mut(epoch).accept_seq <= self.votes_durable {
                self.send_accept(epoch, hash);
            }
        }
        if self.instance.epoch_mut(epoch).accepts.count(hash) >= quorums.accept_quorum()
            && self.accept_quorum_verified(epoch, hash)
        {
            // Mod-SMaRt: quorum of ACCEPTs → decided.
            self.decide(epoch);
        }
    }

    /// BFT: before deciding, check the signatures of the ACCEPTs the decision rests on
    /// (once per vote, never per request); a vote with a bad signature is dropped. A correct
    /// replica can therefore always prove its last decision in STOPDATA — otherwise a leader
    /// change could not see that the instance was decided and might replace its value. In CFT
    /// (no Byzantine replicas) signatures are taken as valid.
    fn accept_quorum_verified(&mut self, epoch: Epoch, hash: Digest) -> bool {
        if self.params.quorums.mode == Mode::Cft {
            return true;
        }
        let cid = self.instance.cid;
        let me = self.params.me;
        let checker = &self.checker;
        let state = self.instance.epoch_mut(epoch);
        let vote = Vote { cid, epoch, hash };
        let unchecked: Vec<(ReplicaId, Signature)> = state
            .accept_signatures
            .iter()
            .filter(|(from, (h, _))| {
                *h == hash && **from != me && !state.verified_accepts.contains(from)
            })
            .map(|(from, (_, sig))| (*from, *sig))
            .collect();
        for (from, sig) in unchecked {
            if checker.valid_accept(from, &vote, &sig) {
                state.verified_accepts.insert(from);
            } else {
                tracing::warn!(%from, %cid, "ACCEPT with an invalid signature: vote dropped");
                state.accept_signatures.remove(&from);
                state.accepts.remove(from);
            }
        }
        state.accepts.count(hash) >= self.params.quorums.accept_quorum()
    }

    /// The current instance decided the value of `epoch` by voting.
    fn decide(&mut self, epoch: Epoch) {
        let cid = self.instance.cid;
        let mut instance = std::mem::replace(&mut self.instance, Instance::new(cid.next()));
        let state = instance
            .epochs
            .remove(&epoch)
            .expect("deciding epoch exists");
        let ProposalSlot::Valid(value) = state.proposal else {
            unreachable!("only a valid proposal is decided")
        };
        let signatures = state
            .accept_signatures
            .into_iter()
            .filter(|(_, (h, _))| *h == value.hash)
            .map(|(from, (_, sig))| (from, sig))
            .collect();
        self.commit(
            cid,
            epoch,
            value.hash,
            value.bytes,
            value.batch,
            signatures,
            None,
        );
    }

    /// Records a decision of the current instance (by voting or from a verified proof), hands
    /// it to execution, advances the client sessions, and starts the next instance.
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &mut self,
        cid: ConsensusId,
        epoch: Epoch,
        hash: Digest,
        bytes: Bytes,
        batch: Batch,
        signatures: BTreeMap<ReplicaId, Signature>,
        proof: Option<tagma_wire::DecisionProof>,
    ) {
        // An instance decides once: its state is replaced before this is called and every
        // later message for it is `Stale`, so no cid is ever decided with two hashes.
        match self.last_decided {
            Some(last) => debug_assert_eq!(last.next(), cid, "decisions out of order"),
            None => debug_assert_eq!(cid, ConsensusId(0), "first decision is not instance 0"),
        }
        if self.instance.cid == cid {
            self.instance = Instance::new(cid.next());
        }
        debug_assert_eq!(self.instance.cid, cid.next());
        // Buffered messages for this instance (decided here from a proof, without them) are
        // obsolete.
        self.future.discard_below(cid.next());
        self.recovered_votes.retain(|c, _| *c > cid);
        self.last_decided = Some(cid);
        self.arm_idle_probe();
        self.last_decided_timestamp_ms = self.last_decided_timestamp_ms.max(batch.timestamp_ms);
        self.clients.on_decided(cid, &batch);
        self.decisions
            .record(cid, epoch, hash, bytes, signatures, proof);
        self.stats.decided_instances += 1;
        self.stats.decided_requests += batch.requests.len() as u64;
        self.sync.failed_regencies = 0;
        if self.sync.waiting_sync && epoch >= self.epoch() {
            // Decided in the installed regency: its SYNC completed elsewhere (this replica
            // missed it); later instances are proposed normally.
            self.sync.waiting_sync = false;
            self.sync.sync_deadline_ms = None;
        }
        // Peers working on the next instance are not ahead; peers beyond it are.
        if self
            .catch_up
            .highest_seen
            .values()
            .filter(|c| **c > cid.next())
            .count()
            < self.params.quorums.one_correct()
        {
            self.catch_up.behind_since_ms = None;
            self.catch_up.duplicates = 0;
            self.catch_up.state_transfer_signalled = false;
            // Caught up by other means: a fetch not yet handed over is pointless.
            if self.fetch.as_ref().is_some_and(|f| !f.is_installing()) {
                tracing::info!(%cid, "caught up while fetching state: state transfer abandoned");
                self.fetch = None;
            }
        }
        tracing::debug!(%cid, %epoch, requests = batch.requests.len(), "decided");
        // Taken now: by the time the runtime logs it, more decisions may have pushed it out
        // of the bounded decision log.
        let logged = if self.params.state_transfer {
            self.decisions.as_decided(cid)
        } else {
            None
        };
        let new_view = self.judge_view_changes(&batch);
        self.actions.push_back(Action::Deliver(Decision {
            cid,
            epoch,
            hash,
            batch,
            logged,
        }));
        if let Some(view) = new_view {
            self.install_view(cid, view);
        }
    }

    /// The view that the view changes ordered in `batch` install, judged in order against the
    /// installed view exactly as the executor judges them (`None`: no change installs one).
    fn judge_view_changes(&self, batch: &Batch) -> Option<View> {
        let mut changes = batch
            .requests
            .iter()
            .filter(|e| e.request.kind == RequestKind::Reconfigure)
            .peekable();
        changes.peek()?;
        let mut membership = self.params.membership();
        let before = membership.view.id;
        for change in changes {
            if let Err(e) = membership.apply_change(&change.request.payload) {
                tracing::warn!(client = %change.request.client, seq = %change.request.seq, "view change refused: {e}");
            }
        }
        (membership.view.id != before).then_some(membership.view)
    }

    /// A replica that left the view takes part in nothing, but still answers what others may
    /// need from it: its position, the decisions it holds (with their proofs) and its state.
    /// After every replica stopped, a decision may be durable only at a replica that has since
    /// left — the one that ordered its own removal — and the others must be able to learn it.
    fn serve_after_leaving(
        &mut self,
        now_ms: u64,
        from: ReplicaId,
        input: PeerInput,
    ) -> Result<(), Rejection> {
        self.set_now(now_ms);
        if from == self.params.me {
            return Err(Rejection::FromSelf);
        }
        // Only the serving side runs: no buffered message is replayed, nothing is settled.
        match input {
            PeerInput::Position { reply: false, .. } => {
                self.actions.push_back(Action::Send {
                    to: from,
                    msg: PeerMessage::Position {
                        next: self.instance.cid,
                        reply: true,
                    },
                });
                Ok(())
            }
            PeerInput::DecisionRequest { cid } => {
                self.on_decision_request(from, cid);
                Ok(())
            }
            PeerInput::Transfer(
                t @ (TransferInput::Query { .. }
                | TransferInput::ChunkRequest { .. }
                | TransferInput::LogRequest { .. }),
            ) => self.on_transfer(from, t),
            _ => Err(Rejection::NotMember),
        }
    }

    /// The runtime's copy of the view moved ahead of the core's without the core deciding the
    /// change: after recovery from disk ([`Replica::resume`]) or a state installed by state
    /// transfer, the executor's view (checkpointed and replayed) is the one to order in from
    /// instance `cid + 1` on. An older or equal view is ignored.
    pub fn adopt_view(&mut self, cid: ConsensusId, view: View) {
        if view.id > self.params.view {
            self.install_view(cid, view);
        }
    }

    /// Instance `cid` installed `view`: the next instance runs in it. Everything counted or
    /// verified against the old members goes: buffered messages and catch-up decisions from
    /// replicas that left, and the state of a leader change or start-up synchronisation in
    /// progress is kept only for members. The leader is the new view's member for the
    /// installed regency, so removing the leader hands leadership over at once.
    fn install_view(&mut self, cid: ConsensusId, view: View) {
        debug_assert!(view.id > self.params.view, "views only move forward");
        let member = view.members.iter().any(|m| m.id == self.params.me);
        let old_leader = self.leader();
        // Proofs of instances decided so far are judged by the view they were decided in.
        self.decisions.seal_proofs(&self.checker);
        self.params.set_view(&view);
        let ending = std::mem::replace(
            &mut self.checker,
            ProofChecker::new(
                &self.params.members,
                &self.params.member_keys,
                self.params.quorums.accept_quorum(),
            ),
        );
        self.past_checkers.push_back((cid.next(), ending));
        while self.past_checkers.len() > PAST_CHECKERS_KEPT {
            self.past_checkers.pop_front();
        }
        let members = self.params.members.clone();
        let keep = |r: &ReplicaId| members.contains(r);
        self.future.retain_senders(&keep, self.params.members.len());
        // Verified against the old members' keys and quorums: fetched again when needed.
        self.catch_up.future.clear();
        self.catch_up.highest_seen.retain(|r, _| keep(r));
        self.sync.stops.retain(|r, _| keep(r));
        self.sync.stopdata.retain(|r, _| keep(r));
        self.sync.early_stopdata.retain(|r, _| keep(r));
        self.sync.epochs_seen.retain(|r, _| keep(r));
        self.sync.pending = None;
        if let Some(recovery) = self.recovery.as_mut() {
            recovery.heard.retain(|r, _| keep(r));
        }
        self.clients.set_view(view.id);
        // A fetch planned with the old members' offers, vouchers and f starts again if needed.
        self.fetch = None;
        self.catch_up.state_transfer_signalled = false;
        if !member {
            // Nothing of the ordering goes on: no buffered vote is replayed, no leader change
            // or catch-up continues, no request is proposed.
            self.future =
                FutureBuffer::new(self.params.future_messages_max, self.params.members.len());
            self.catch_up.highest_seen.clear();
            self.sync = SyncState::default();
            self.recovery = None;
            self.clients.drop_pending();
        }
        self.stats.views_installed += 1;
        tracing::info!(%cid, view = %view.id, n = view.members.len(), f = view.f, leader = %self.leader(), member, "view installed");
        if self.leader() != old_leader {
            self.actions.push_back(Action::RegencyInstalled {
                regency: self.regency,
                leader: self.leader(),
            });
        }
        self.left = !member;
        self.actions
            .push_back(Action::ViewInstalled { cid, view, member });
    }

    /// Decides the current instance from a verified proof (catch-up or SYNC).
    fn commit_proven(&mut self, decided: DecidedInstance, hash: Digest) -> bool {
        debug_assert_eq!(decided.cid, self.instance.cid);
        let Ok(batch) = Batch::decode(&decided.batch) else {
            // A quorum signed it, so correct replicas decoded it: only a hash collision could
            // bring us here.
            tracing::error!(cid = %decided.cid, "a proven batch does not decode");
            return false;
        };
        self.stats.decisions_forwarded_in += 1;
        let signatures = decided.proof.accepts.iter().copied().collect();
        self.commit(
            decided.cid,
            decided.proof.epoch,
            hash,
            decided.batch,
            batch,
            signatures,
            Some(decided.proof),
        );
        true
    }

    /// After every input: apply forwarded decisions and buffered messages of the instance
    /// that became current, a pending SYNC, and let the leader propose, until nothing moves.
    fn settle(&mut self) {
        if self.left {
            return;
        }
        loop {
            let cid = self.instance.cid;
            if let Some(decided) = self.catch_up.future.remove(&cid) {
                let hash = tagma_crypto::digest(&decided.batch);
                self.commit_proven(decided, hash);
                continue;
            }
            self.catch_up.future.retain(|c, _| *c > cid);
            for (from, input) in self.future.take(cid) {
                if let Err(rejection) = self.on_consensus_input(from, input) {
                    tracing::trace!(%from, %cid, reason = rejection.reason(), "buffered message rejected");
                }
            }
            if self.instance.cid != cid {
                continue;
            }
            if let Some(pending) = self.sync.pending.take() {
                self.finalise(pending);
                if self.instance.cid != cid {
                    continue;
                }
            }
            self.try_propose();
            if self.instance.cid == cid {
                return;
            }
        }
    }

    /// Mod-SMaRt step 1 (leader): propose the next batch if no instance is in progress and a
    /// request is waiting.
    fn try_propose(&mut self) {
        let epoch = self.epoch();
        if !self.is_leader()
            || self.recovery.is_some()
            || self.sync.waiting_sync
            || self.sync.pending.is_some()
            || !self.instance.epoch_mut(epoch).proposal.is_empty()
            || self.awaits_durable().is_some()
        {
            return;
        }
        let cid = self.instance.cid;
        // A value this replica voted for before a crash, in this epoch or a later one, is
        // the only one it may vote for: propose it again.
        let recovered = match self
            .recovered_votes
            .get(&cid)
            .map(|r| r.value_to_propose(epoch))
        {
            Some(Err(())) => return,
            Some(Ok(value)) => value,
            None => None,
        }
        .and_then(|value| Some((value.clone(), Batch::decode(value).ok()?)));
        let Some((bytes, batch)) = recovered.or_else(|| self.build_batch()) else {
            return;
        };
        let hash = tagma_crypto::digest(&bytes);
        tracing::debug!(%cid, %epoch, requests = batch.requests.len(), bytes = bytes.len(), "proposing");
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

    /// The leader's next batch, encoded, or `None` if nothing can be proposed.
    fn build_batch(&mut self) -> Option<(Bytes, Batch)> {
        let requests = self.clients.select_batch();
        if requests.is_empty() {
            return None;
        }
        let batch = Batch {
            timestamp_ms: self.now_ms.max(self.last_decided_timestamp_ms),
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
        Some((bytes, batch))
    }

    /// An invalid proposal from the leader: suspect it at once (SPEC §3; reference §1.2
    /// step 2) — a correct leader never proposes one.
    fn suspect_leader(&mut self, cid: ConsensusId, fault: ProposalFault) {
        tracing::debug!(leader = %self.leader(), %cid, ?fault, "invalid proposal from the leader");
        self.leader_fault = Some((cid, fault));
        self.suspect(self.clients.head_requests(STOP_REQUESTS_MAX));
    }

    // ---- synchronization phase (leader change) -------------------------------------------

    /// This replica suspects the current leader: ask for the next regency (once per change).
    fn suspect(&mut self, requests: Vec<RequestEnvelope>) {
        if self.sync.next_regency > self.regency {
            return; // a change is already under way; its STOP is being retransmitted
        }
        self.start_stop(Regency(self.regency.0.saturating_add(1)), requests);
    }

    /// Sends STOP(`regency`) to all and records it (SPEC §3: STOP(next regency, requests)).
    fn start_stop(&mut self, regency: Regency, requests: Vec<RequestEnvelope>) {
        debug_assert!(regency > self.regency);
        if regency <= self.sync.next_regency && self.sync.next_regency > self.regency {
            return;
        }
        self.sync.next_regency = regency;
        let stop = Stop { regency, requests };
        self.actions
            .push_back(Action::Broadcast(PeerMessage::Stop(stop.clone())));
        self.sync.own_stop = Some(stop);
        self.sync.stop_retransmit_ms = Some(self.now_ms + self.params.request_timeout_ms);
        self.sync.stops.insert(self.params.me, regency);
        self.check_stops();
    }

    fn on_stop(&mut self, from: ReplicaId, stop: Stop) -> Result<(), Rejection> {
        // The requests are learned whatever the regency (a faulty client may have sent them
        // to some replicas only); the network stage kept only authentic ones.
        for request in stop.requests {
            let _ = self.clients.admit(request);
        }
        if stop.regency <= self.regency {
            return Err(Rejection::Stale {
                cid: self.instance.cid,
            });
        }
        let entry = self.sync.stops.entry(from).or_insert(stop.regency);
        *entry = (*entry).max(stop.regency);
        self.check_stops();
        Ok(())
    }

    /// Replicas that asked for regency `regency` or a later one.
    fn stops_at_least(&self, regency: Regency) -> usize {
        self.sync.stops.values().filter(|r| **r >= regency).count()
    }

    /// STOP thresholds: join a change that f+1 replicas want (one faulty replica cannot force
    /// one); install it once n−f replicas want it.
    fn check_stops(&mut self) {
        let q = self.params.quorums;
        let floor = self.sync.next_regency.max(self.regency);
        let wanted: Vec<Regency> = self
            .sync
            .stops
            .values()
            .copied()
            .filter(|r| *r > floor)
            .collect();
        if let Some(join) = wanted
            .into_iter()
            .filter(|r| self.stops_at_least(*r) >= q.stop_join())
            .max()
        {
            tracing::debug!(regency = %join, "joining a leader change");
            let requests = self.clients.head_requests(STOP_REQUESTS_MAX);
            self.start_stop(join, requests);
            return; // start_stop re-checks
        }
        let next = self.sync.next_regency;
        if next > self.regency && self.stops_at_least(next) >= q.stop_install() {
            self.install(next);
        }
    }

    /// Installs `regency`: freezes the earlier epochs, sends STOPDATA to the new leader, and
    /// waits for its SYNC.
    fn install(&mut self, regency: Regency) {
        self.enter_regency(regency);
        self.sync.waiting_sync = true;
        let backoff = 1u64 << self.sync.failed_regencies.min(6);
        self.sync.sync_deadline_ms = Some(self.now_ms + self.params.request_timeout_ms * backoff);
        if self.params.state_transfer {
            // Durable: the regency goes to disk (in the collect's `regency`) before this
            // replica says anything in it, so that after a crash it never votes in an
            // earlier epoch than one whose synchronisation counted it (epochs are compared
            // across restarts).
            let seq = self.persist_votes();
            if seq > self.votes_durable {
                self.sync.held_install = Some((seq, regency));
                return;
            }
        }
        self.finish_install(regency);
    }

    /// The rest of [`Replica::install`], once the regency is durable: the STOPDATA to the new
    /// leader (as leader: its own, and the SYNC if enough arrived).
    fn finish_install(&mut self, regency: Regency) {
        let leader = self.leader();
        let data = StopData {
            regency,
            last_decided: self.proven_last(),
            collect: self.signed_collect(),
        };
        if leader == self.params.me {
            self.sync.stopdata.insert(leader, data);
            let early = std::mem::take(&mut self.sync.early_stopdata);
            for (from, d) in early {
                if d.regency == regency {
                    let _ = self.on_stopdata(from, d);
                } else if d.regency > regency {
                    self.sync.early_stopdata.insert(from, d);
                }
            }
            self.try_sync();
        } else {
            self.actions.push_back(Action::Send {
                to: leader,
                msg: PeerMessage::StopData(data),
            });
        }
    }

    /// Checks a decision's proof under the view it was decided in: this view's checker, or
    /// one of the last views' for an instance decided before the last change. An instance
    /// this replica has already decided is also accepted — with the hash it decided, if it
    /// still keeps it — as it changes nothing here (a replica that joined knows no checker of
    /// the views before it, and one restarted from a checkpoint keeps no decision before).
    /// Returns the batch hash.
    fn check_decided(&self, d: &DecidedInstance) -> Option<Digest> {
        if let Some(hash) = self.check_proof(d) {
            return Some(hash);
        }
        let hash = tagma_crypto::digest(&d.batch);
        (d.cid < self.instance.cid && self.decisions.hash_of(d.cid).is_none_or(|h| h == hash))
            .then_some(hash)
    }

    /// Checks a decision's proof under the view it was decided in (this view's checker, or
    /// the one of the view, among the last few, whose successor started after it). Only a
    /// real proof counts: what this replica forwards (a STOPDATA's claim that ends up in the
    /// leader's SYNC) must convince replicas that have not decided it.
    fn check_proof(&self, d: &DecidedInstance) -> Option<Digest> {
        if let Some(hash) = self.checker.check(d) {
            return Some(hash);
        }
        // The oldest kept view whose successor started after `d`: the view `d` was decided in.
        let (_, checker) = self
            .past_checkers
            .iter()
            .rev()
            .take_while(|(next_view_from, _)| d.cid < *next_view_from)
            .last()?;
        checker.check(d)
    }

    /// The last decided instance with a verified proof, if one can be built.
    fn proven_last(&mut self) -> Option<DecidedInstance> {
        let last = self.decisions.last_cid()?;
        self.decisions.proven(last, &self.checker)
    }

    /// This replica's signed collect for the instance in progress.
    fn signed_collect(&self) -> SignedCollect {
        let collect = self.collect();
        let signature = self.key.sign(&collect_signing_bytes(&collect));
        SignedCollect { collect, signature }
    }

    /// This replica's collect for the instance in progress: the values it wrote and the
    /// highest epoch in which it saw a write quorum (and accepts or accepted), votes from
    /// before a crash included.
    fn collect(&self) -> Collect {
        let mut write_quorum = None;
        let mut writes: BTreeMap<Digest, (Epoch, Bytes)> = BTreeMap::new();
        for (epoch, state) in &self.instance.epochs {
            let ProposalSlot::Valid(b) = &state.proposal else {
                continue;
            };
            if state.accept_sent || state.accept_seq != 0 {
                // BFT: ACCEPT is sent only on a WRITE quorum; CFT: accepting is the quorum step.
                write_quorum = Some((*epoch, b.hash));
            }
            if state.write_sent {
                writes.insert(b.hash, (*epoch, b.bytes.clone()));
            }
        }
        if let Some(recovered) = self.recovered_votes.get(&self.instance.cid) {
            if let Some((epoch, hash)) = recovered.accepted
                && write_quorum.is_none_or(|(e, _)| e < epoch)
            {
                write_quorum = Some((epoch, hash));
            }
            for (epoch, hash, value) in &recovered.writes {
                let entry = writes.entry(*hash).or_insert((*epoch, value.clone()));
                entry.0 = entry.0.max(*epoch);
            }
        }
        let mut write_set: Vec<(Epoch, Bytes)> = writes.into_values().collect();
        write_set.sort_by_key(|(e, _)| *e);
        if write_set.len() > WRITE_SET_MAX {
            write_set.drain(..write_set.len() - WRITE_SET_MAX);
        }
        Collect {
            replica: self.params.me,
            regency: self.regency,
            cid: self.instance.cid,
            write_quorum,
            write_set,
        }
    }

    fn valid_collect(&self, sc: &SignedCollect, regency: Regency) -> bool {
        let c = &sc.collect;
        c.regency == regency
            && self.params.members.contains(&c.replica)
            && c.write_set.windows(2).all(|w| w[0].0 < w[1].0)
            && self
                .checker
                .valid_signature(c.replica, &collect_signing_bytes(c), &sc.signature)
    }

    /// New leader: a STOPDATA for the installed regency.
    fn on_stopdata(&mut self, from: ReplicaId, mut data: StopData) -> Result<(), Rejection> {
        if data.regency > self.regency && self.leader_of(data.regency) == self.params.me {
            let keep = self
                .sync
                .early_stopdata
                .get(&from)
                .is_none_or(|d| d.regency < data.regency);
            if keep {
                self.sync.early_stopdata.insert(from, data);
            }
            return Ok(());
        }
        if data.regency != self.regency || !self.is_leader() || !self.sync.waiting_sync {
            return Err(Rejection::Stale {
                cid: self.instance.cid,
            });
        }
        if data.collect.collect.replica != from || !self.valid_collect(&data.collect, self.regency)
        {
            return Err(Rejection::InvalidStopData { from });
        }
        if data
            .last_decided
            .as_ref()
            .is_some_and(|d| self.check_proof(d).is_none())
        {
            data.last_decided = None; // an unproven claim is ignored
        }
        self.sync.stopdata.insert(from, data);
        if self.sync.held_install.is_none() {
            // (Otherwise `finish_install` tries once this replica's regency is durable.)
            self.try_sync();
        }
        Ok(())
    }

    /// The highest proven decision among STOPDATAs, the instance to synchronise, and the
    /// normalised collects (reference §1.4d).
    fn sync_inputs<'a>(
        &self,
        last: impl Iterator<Item = &'a DecidedInstance>,
        collects: &[SignedCollect],
    ) -> (Option<DecidedInstance>, ConsensusId, Vec<Normalized>) {
        let last_highest = last.max_by_key(|d| d.cid).cloned();
        let current = Self::sync_instance(last_highest.iter());
        let mut normalized: Vec<Normalized> = collects
            .iter()
            .map(|sc| {
                let c = &sc.collect;
                if c.cid != current {
                    return Normalized::empty(c.replica);
                }
                Normalized {
                    replica: c.replica,
                    write_quorum: c.write_quorum,
                    write_set: c
                        .write_set
                        .iter()
                        .map(|(e, v)| (*e, tagma_crypto::digest(v), v.clone()))
                        .collect(),
                }
            })
            .collect();
        normalized.sort_by_key(|n| n.replica);
        normalized.dedup_by_key(|n| n.replica);
        (last_highest, current, normalized)
    }

    /// The instance a synchronization is about: the one after the highest proven decision.
    fn sync_instance<'a>(last: impl Iterator<Item = &'a DecidedInstance>) -> ConsensusId {
        last.map(|d| d.cid.next()).max().unwrap_or(ConsensusId(0))
    }

    /// New leader: once n−f STOPDATAs are in and the value choice is sound, send SYNC.
    fn try_sync(&mut self) {
        let q = self.params.quorums;
        if self.sync.stopdata.len() < q.stop_install() {
            return;
        }
        let collects: Vec<SignedCollect> = self
            .sync
            .stopdata
            .values()
            .map(|d| d.collect.clone())
            .collect();
        let lasts: Vec<DecidedInstance> = self
            .sync
            .stopdata
            .values()
            .filter_map(|d| d.last_decided.clone())
            .collect();
        let current = Self::sync_instance(lasts.iter());
        // A collect for a later instance comes from a replica that decided `current` yet
        // could not prove it (only a faulty one): leave it out, it would read as "nothing
        // written" and could hide the decided value.
        let collects: Vec<SignedCollect> = collects
            .into_iter()
            .filter(|sc| sc.collect.cid <= current)
            .collect();
        if collects.len() < q.stop_install() {
            return;
        }
        let (last_decided, current, normalized) = self.sync_inputs(lasts.iter(), &collects);
        let choice = sync::choose(&q, &normalized);
        if choice == Choice::Unsound {
            tracing::debug!(regency = %self.regency, "value choice not sound yet; waiting for more STOPDATA");
            return;
        }
        // A fresh batch only if nothing can have been decided and this leader is up to date
        // (its sessions must match the others' to build a valid batch).
        let proposal = match (&choice, self.instance.cid == current) {
            (Choice::Unbound, true) => self.build_batch().map(|(b, _)| b).unwrap_or_default(),
            _ => Bytes::new(),
        };
        let sync = Sync {
            regency: self.regency,
            last_decided,
            collects,
            proposal,
        };
        tracing::info!(regency = %self.regency, cid = %current, bound = matches!(choice, Choice::Bound { .. }), "sending SYNC");
        self.actions
            .push_back(Action::Broadcast(PeerMessage::Sync(sync.clone())));
        self.sync.stopdata.clear();
        let me = self.params.me;
        if let Err(r) = self.on_sync(me, sync, true) {
            tracing::error!(reason = r.reason(), "own SYNC rejected");
        }
    }

    /// A SYNC from the leader of `sync.regency`: re-check the evidence, then finalise.
    fn on_sync(
        &mut self,
        from: ReplicaId,
        sync: Sync,
        proposal_authentic: bool,
    ) -> Result<(), Rejection> {
        let q = self.params.quorums;
        if from != self.leader_of(sync.regency) {
            return Err(Rejection::NotFromLeader { from });
        }
        if sync.regency < self.regency || (sync.regency == self.regency && !self.sync.waiting_sync)
        {
            return Err(Rejection::Stale {
                cid: self.instance.cid,
            });
        }
        let mut valid: Vec<SignedCollect> = sync
            .collects
            .iter()
            .filter(|sc| self.valid_collect(sc, sync.regency))
            .cloned()
            .collect();
        valid.sort_by_key(|sc| sc.collect.replica);
        valid.dedup_by_key(|sc| sc.collect.replica);
        let invalid = |me: &mut Self, reason: &'static str| {
            // The leader of this regency sent bad evidence: move on to the next one.
            let next = Regency(sync.regency.0.saturating_add(1));
            if next > me.regency {
                me.start_stop(next, me.clients.head_requests(STOP_REQUESTS_MAX));
            }
            Err(Rejection::InvalidSync { from, reason })
        };
        if valid.len() < q.stop_install() {
            return invalid(self, "fewer than n-f valid collects");
        }
        let last_hash = match &sync.last_decided {
            Some(d) => match self.check_decided(d) {
                Some(h) => Some(h),
                None => return invalid(self, "invalid proof of the last decided instance"),
            },
            None => None,
        };
        let (last_decided, current, normalized) =
            self.sync_inputs(sync.last_decided.iter(), &valid);
        if valid.iter().any(|sc| sc.collect.cid > current) {
            // That replica decided the instance being synchronised: the SYNC hides its
            // decision (a correct replica always proves its last decision).
            return invalid(self, "a collect is ahead of the synchronised instance");
        }
        debug_assert_eq!(last_decided.is_some(), last_hash.is_some());
        let value = match sync::choose(&q, &normalized) {
            Choice::Unsound => return invalid(self, "value choice not sound"),
            Choice::Bound { value, .. } => Some((value, false)),
            Choice::Unbound if sync.proposal.is_empty() => None,
            Choice::Unbound => Some((sync.proposal.clone(), true)),
        };
        if sync.regency > self.regency {
            // n−f valid collects prove that n−f replicas installed this regency.
            self.enter_regency(sync.regency);
        }
        self.sync.waiting_sync = false;
        self.sync.sync_deadline_ms = None;
        let me = self.params.me;
        let own_collect_counted = valid
            .iter()
            .any(|sc| sc.collect.replica == me && sc.collect.cid == current);
        self.finalise(Finalise {
            last_decided,
            current_cid: current,
            value,
            proposal_authentic,
            own_collect_counted,
        });
        Ok(())
    }

    /// f+1 peers vote in an epoch above ours: a correct replica installed that regency
    /// without us (we were down or cut off). Adopt it: we only stop voting in older epochs,
    /// and catch up on the instances it decided through decision forwarding.
    fn note_epoch(&mut self, from: ReplicaId, epoch: Epoch) {
        if epoch <= self.epoch() {
            return;
        }
        let seen = self.sync.epochs_seen.entry(from).or_insert(epoch);
        *seen = (*seen).max(epoch);
        let one_correct = self.params.quorums.one_correct();
        let adopt = self
            .sync
            .epochs_seen
            .values()
            .copied()
            .filter(|e| *e > self.epoch())
            .filter(|e| self.sync.epochs_seen.values().filter(|x| **x >= *e).count() >= one_correct)
            .max();
        if let Some(e) = adopt {
            tracing::info!(
                regency = e.0,
                "f+1 replicas vote in a later regency: adopting it"
            );
            self.enter_regency(Regency(e.0));
            // The SYNC of that regency was not seen here: take no PROPOSE for the instance it
            // synchronised (its value may differ from what the SYNC justified) until a
            // decision made in this regency arrives by forwarding.
            self.sync.waiting_sync = true;
            self.sync.sync_deadline_ms = None;
        }
    }

    /// What every way of moving to a new regency does: older epochs are frozen (the
    /// installed regency is the lowest epoch this replica votes in), the leader-change
    /// bookkeeping of earlier regencies is dropped, and request timers restart so the new
    /// leader gets a full period.
    fn enter_regency(&mut self, regency: Regency) {
        debug_assert!(regency > self.regency, "regencies only grow");
        self.regency = regency;
        self.sync.next_regency = regency;
        self.sync.stops.retain(|_, r| *r > regency);
        self.sync.epochs_seen.retain(|_, e| e.0 > regency.0);
        self.sync.own_stop = None;
        self.sync.stop_retransmit_ms = None;
        self.sync.stopdata.clear();
        self.sync.pending = None;
        self.clients.restart_timers(self.now_ms);
        self.stats.leader_changes += 1;
        let leader = self.leader();
        tracing::info!(%regency, %leader, cid = %self.instance.cid, "installed a new regency");
        self.actions
            .push_back(Action::RegencyInstalled { regency, leader });
    }

    /// Applies a verified SYNC (reference §1.4g): catch up to its last decided instance,
    /// then run the instance in progress in the new epoch with the chosen value.
    fn finalise(&mut self, f: Finalise) {
        if let Some(d) = &f.last_decided
            && d.cid >= self.instance.cid
        {
            if d.cid > self.instance.cid {
                // Behind by more than one: fetch the missing decisions first.
                tracing::debug!(next = %self.instance.cid, target = %d.cid, "behind the SYNC: catching up");
                self.sync.pending = Some(f);
                self.request_decisions_if_due();
                return;
            }
            let hash = tagma_crypto::digest(&d.batch);
            let decided = d.clone();
            if !self.commit_proven(decided, hash) {
                return;
            }
        }
        let cid = self.instance.cid;
        if cid > f.current_cid {
            // Ahead: we decided the synchronised instance already; help the others.
            if let Some(d) = self.decisions.proven(f.current_cid, &self.checker) {
                self.actions
                    .push_back(Action::Broadcast(PeerMessage::Decision(d)));
            }
            return;
        }
        let epoch = self.epoch();
        // Only a SYNC whose value choice saw this replica's restored votes releases them: a
        // collect sent while behind (at an earlier instance) counts as empty for this one
        // (found in review: CFT, a restarted accepter behind by two instances).
        if f.own_collect_counted
            && let Some(r) = self.recovered_votes.get_mut(&f.current_cid)
        {
            r.synchronised = true;
        }
        let Some((bytes, fresh)) = f.value else {
            return;
        };
        let Ok(batch) = Batch::decode(&bytes) else {
            self.suspect(self.clients.head_requests(STOP_REQUESTS_MAX));
            return;
        };
        if fresh
            && let Err(fault) = self.clients.validate_proposal(
                &batch,
                bytes.len(),
                f.proposal_authentic,
                self.last_decided_timestamp_ms,
            )
        {
            self.suspect_leader(cid, fault);
            return;
        }
        let hash = tagma_crypto::digest(&bytes);
        if !self.instance.epoch_mut(epoch).proposal.is_empty() {
            return;
        }
        // The SYNC's value plays the role of the PROPOSE of the new epoch.
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

    // ---- catch-up (decision forwarding) ---------------------------------------------------

    /// A peer sent a message for a later instance: if f+1 peers are ahead, we are behind.
    fn note_ahead(&mut self, from: ReplicaId, cid: ConsensusId) {
        let seen = self.catch_up.highest_seen.entry(from).or_insert(cid);
        *seen = (*seen).max(cid);
        let next = self.instance.cid;
        let one_correct = self.params.quorums.one_correct();
        if self.peers_beyond(next.0) >= one_correct {
            self.maybe_start_state_transfer();
        }
        if self.peers_beyond(next.0) < one_correct {
            return;
        }
        // Messages for the next instance routinely arrive a little early; wait a quarter
        // period before asking. Enough peers (one of them correct) at least two instances
        // ahead have decided one this replica has not even seen proposed: ask after a short
        // gap (a restarted replica stalled 0.5 s after its state transfer when it waited the
        // quarter period here), also when the quarter period already runs (a replica that
        // had just caught up waited it out while the others ran on: stop 23).
        let decided_further = self.peers_beyond(next.0.saturating_add(1)) >= one_correct;
        if self.catch_up.behind_since_ms.is_none() {
            let wait = if decided_further {
                self.catch_up_gap_ms()
            } else {
                self.catch_up_wait_max_ms()
            };
            self.catch_up.behind_since_ms = Some(self.now_ms);
            self.catch_up.next_request_ms = self.now_ms + wait;
            self.catch_up.waiting_early = !decided_further;
        } else if self.catch_up.waiting_early && decided_further {
            self.catch_up.waiting_early = false;
            self.catch_up.next_request_ms = self
                .catch_up
                .next_request_ms
                .min(self.now_ms + self.catch_up_gap_ms());
        }
    }

    /// How long a replica known to be behind waits for decisions before asking (again):
    /// a fiftieth of the request timeout (20 ms by default), well above the gaps inside a
    /// run of decisions, doubled for every duplicate decision received since it last caught
    /// up (it asked again while still working through a run), up to a quarter timeout.
    fn catch_up_gap_ms(&self) -> u64 {
        let base = (self.params.request_timeout_ms / 50).max(1);
        base.saturating_mul(1u64 << self.catch_up.duplicates.min(16))
            .min(self.catch_up_wait_max_ms())
    }

    /// The longest a replica known to be behind waits before asking for decisions: a
    /// quarter of the request timeout.
    fn catch_up_wait_max_ms(&self) -> u64 {
        (self.params.request_timeout_ms / 4).max(1)
    }

    /// How many peers sent a consensus message for an instance after `cid`.
    fn peers_beyond(&self, cid: u64) -> usize {
        self.catch_up
            .highest_seen
            .values()
            .filter(|c| c.0 > cid)
            .count()
    }

    fn maybe_request_decisions(&mut self) {
        if (self.catch_up.behind_since_ms.is_some() || self.sync.pending.is_some())
            && self.now_ms >= self.catch_up.next_request_ms
        {
            self.request_decisions(false);
        }
    }

    /// Asks for the run of decisions starting at the next instance: from one peer known to
    /// be ahead (rotating on retries), or from everyone when none is known or `broadcast`.
    /// Retried by the catch-up timer until the run arrives.
    fn request_decisions(&mut self, broadcast: bool) {
        let cid = self.instance.cid;
        self.catch_up.behind_since_ms.get_or_insert(self.now_ms);
        self.catch_up.waiting_early = false;
        self.catch_up.next_request_ms = self.now_ms + (self.params.request_timeout_ms / 2).max(1);
        self.catch_up.requested_until = ConsensusId(cid.0 + FUTURE_DECISIONS_MAX as u64);
        let ahead: Vec<ReplicaId> = self
            .catch_up
            .highest_seen
            .iter()
            .filter(|(_, c)| **c > cid)
            .map(|(r, _)| *r)
            .collect();
        let msg = PeerMessage::DecisionRequest { cid };
        if broadcast || ahead.is_empty() {
            self.actions.push_back(Action::Broadcast(msg));
        } else {
            let to = ahead[self.catch_up.rotation % ahead.len()];
            self.catch_up.rotation = self.catch_up.rotation.wrapping_add(1);
            self.actions.push_back(Action::Send { to, msg });
        }
        self.maybe_start_state_transfer();
    }

    /// Signals (and, when durable, starts) state transfer once the (f+1)-th highest position
    /// the peers claim is further ahead than they keep decisions in memory.
    fn maybe_start_state_transfer(&mut self) {
        let cid = self.instance.cid;
        // The (f+1)-th highest claim: at least one correct replica is that far ahead.
        let mut claims: Vec<ConsensusId> = self.catch_up.highest_seen.values().copied().collect();
        claims.sort_unstable_by(|a, b| b.cmp(a));
        let furthest = claims
            .get(self.params.quorums.one_correct() - 1)
            .copied()
            .unwrap_or(cid);
        if furthest.0.saturating_sub(cid.0) > self.params.decisions_kept as u64
            && !self.catch_up.state_transfer_signalled
        {
            self.catch_up.state_transfer_signalled = true;
            let known_decided = ConsensusId(furthest.0.saturating_sub(1));
            self.actions.push_back(Action::StateTransferNeeded {
                next_cid: cid,
                known_decided,
            });
            if self.params.state_transfer && self.fetch.is_none() {
                tracing::info!(next = %cid, decided_elsewhere = %known_decided, "too far behind for decision forwarding: starting state transfer");
                self.start_fetch(false, false);
            }
        }
    }

    /// `repair`: the hash vote contradicted this replica's state (see [`Audit`]): the state
    /// at its own position is fetched and replaces it.
    fn start_fetch(&mut self, joining: bool, repair: bool) {
        let mut out = Vec::new();
        let params = FetchParams {
            me: self.params.me,
            peers: self.params.members.len() - 1,
            one_correct: self.params.quorums.one_correct(),
            chunk_bytes: self.params.chunk_bytes,
            state_bytes_max: self.params.state_bytes_max,
            timeout_ms: self.params.request_timeout_ms.max(1),
            joining,
            repair,
        };
        let next = self.instance.cid;
        self.fetch = Some(Fetch::start(params, next, self.now_ms, &mut out));
        self.fetch_actions(out);
    }

    /// Starts a replica that a view change added (its parameters carry that view) and that
    /// has no state: it fetches a checkpoint and the decisions after it by state transfer
    /// before taking part, because the history before it joined was decided in views it
    /// does not know (the executor, started in the configuration's initial view, replays
    /// and verifies it). Needs durable state (`state_transfer`).
    pub fn start_joining(&mut self, now_ms: u64) {
        assert!(
            self.params.state_transfer,
            "a joining replica needs durable state"
        );
        self.set_now(now_ms);
        self.catch_up.state_transfer_signalled = true;
        tracing::info!(
            view = self.params.view.0,
            "joining: fetching the state by state transfer"
        );
        self.start_fetch(true, false);
    }

    /// Requests the next run only if the previous one is used up or its retry is due.
    fn request_decisions_if_due(&mut self) {
        if self.instance.cid >= self.catch_up.requested_until
            || self.now_ms >= self.catch_up.next_request_ms
        {
            self.request_decisions(false);
        }
    }

    /// Answers a catch-up request with the run of consecutive decisions starting at `cid`
    /// that this replica can prove (at most `FUTURE_DECISIONS_MAX`); a durable replica reads
    /// those no longer in memory from its log.
    fn on_decision_request(&mut self, from: ReplicaId, cid: ConsensusId) {
        if self.params.state_transfer
            && cid < self.instance.cid
            && self.decisions.first_cid().is_none_or(|first| cid < first)
        {
            // No longer in memory: a durable replica reads it from its log.
            self.actions.push_back(Action::ReadLog {
                to: from,
                from: cid,
                count: FUTURE_DECISIONS_MAX as u32,
            });
            return;
        }
        for c in cid.0..cid.0.saturating_add(FUTURE_DECISIONS_MAX as u64) {
            let Some(d) = self.decisions.proven(ConsensusId(c), &self.checker) else {
                break;
            };
            self.actions.push_back(Action::Send {
                to: from,
                msg: PeerMessage::Decision(d),
            });
        }
    }

    fn on_decision(&mut self, from: ReplicaId, decided: DecidedInstance) -> Result<(), Rejection> {
        let next = self.instance.cid;
        if self.audit_holds() && decided.cid >= next {
            // Asked for again once the vote ends (catch-up).
            return Err(Rejection::Recovering);
        }
        if decided.cid < next {
            if self.catch_up.behind_since_ms.is_some() {
                self.catch_up.duplicates = self.catch_up.duplicates.saturating_add(1);
            }
            return Err(Rejection::Stale { cid: decided.cid });
        }
        let Some(hash) = self.checker.check(&decided) else {
            return Err(Rejection::InvalidProof {
                from,
                cid: decided.cid,
            });
        };
        if decided.cid == next {
            self.commit_proven(decided, hash);
        } else if self.catch_up.future.len() < FUTURE_DECISIONS_MAX {
            self.catch_up.future.insert(decided.cid, decided);
        }
        if self.catch_up.behind_since_ms.is_some() || self.sync.pending.is_some() {
            if self.instance.cid >= self.catch_up.requested_until {
                // Still behind and the requested run is used up: ask for the next one.
                self.request_decisions(false);
            } else if self.instance.cid > next {
                // A run ends short of what was asked when the peer had decided no further
                // when it answered (it goes on deciding meanwhile): once no decision has come
                // for a short gap, ask again rather than a quarter or half of a request
                // timeout later (a restarted replica stalled 0.5 s this way after its state
                // transfer). Decisions of one run arrive back to back, so the timer keeps
                // moving while they do; a replica slower than the gap re-asks for decisions
                // it has queued, and the duplicates lengthen the gap (`catch_up_gap_ms`).
                self.catch_up.next_request_ms = self.now_ms + self.catch_up_gap_ms();
            }
        }
        self.progress_recovery();
        Ok(())
    }

    /// Starts the start-up synchronisation (after [`Replica::resume`], or on a replica that
    /// keeps durable state and starts empty): tells every peer where this replica is and
    /// orders nothing until [`Replica::is_recovering`] turns false.
    pub fn start_recovery(&mut self, now_ms: u64) {
        if self.left {
            // Recovered into a view without this replica: it only serves (see
            // `serve_after_leaving`).
            return;
        }
        self.set_now(now_ms);
        let timeout = self.params.request_timeout_ms.max(1);
        self.recovery = Some(Recovery {
            heard: BTreeMap::new(),
            deadline_ms: self.now_ms + RECOVERY_WAIT_TIMEOUTS * timeout,
            retransmit_ms: self.now_ms + timeout / 2,
            audit: AuditStage::NotStarted,
            asked: BTreeSet::new(),
            votes: BTreeMap::new(),
            repaired: false,
        });
        tracing::info!(next = %self.instance.cid, "start-up synchronisation: asking the others where they are");
        self.actions
            .push_back(Action::Broadcast(PeerMessage::Position {
                next: self.instance.cid,
                reply: false,
            }));
        self.progress_recovery();
    }

    /// Whether the start-up synchronisation is still running (nothing is ordered then).
    pub fn is_recovering(&self) -> bool {
        self.recovery.is_some()
    }

    fn on_position(&mut self, from: ReplicaId, next: ConsensusId, reply: bool) {
        if !reply {
            self.actions.push_back(Action::Send {
                to: from,
                msg: PeerMessage::Position {
                    next: self.instance.cid,
                    reply: true,
                },
            });
        }
        if !reply {
            // The peer asks (it is starting, or probing): what it refused before it answers
            // again may be resent.
            self.resent_to.remove(&from);
        } else if next == self.instance.cid && self.recovery.is_none() {
            // The peer works on this instance too, and may have missed what this replica
            // sent for it (it refused consensus messages while it synchronised after a
            // restart, and announces its position when done).
            self.resend_own_messages(from);
        }
        if next > self.instance.cid {
            // The peer has decided up to `next − 1`: it is ahead.
            let seen = self.catch_up.highest_seen.entry(from).or_insert(next);
            *seen = (*seen).max(next);
            self.maybe_start_state_transfer();
            // Enough replicas ahead that one is correct: fetch what they decided (an idle
            // probe's answer; during recovery the start-up synchronisation does this).
            let ahead = self
                .catch_up
                .highest_seen
                .values()
                .filter(|c| **c > self.instance.cid)
                .count();
            if self.recovery.is_none()
                && self.fetch.is_none()
                && ahead >= self.params.quorums.one_correct()
            {
                self.request_decisions_if_due();
            }
        }
        if let Some(r) = self.recovery.as_mut() {
            r.heard.insert(from, next);
            self.progress_recovery();
        }
    }

    /// Sends `to` again what this replica sent for the instance in progress in the current
    /// epoch: as leader its PROPOSE, then its WRITE and ACCEPT. Identical copies of messages
    /// of this incarnation (never anything a crash made it forget), so nothing changes for a
    /// peer that already has them.
    fn resend_own_messages(&mut self, to: ReplicaId) {
        if self.sync.waiting_sync || self.left {
            return;
        }
        let (cid, epoch, me) = (self.instance.cid, self.epoch(), self.params.me);
        // Once per peer, instance and epoch: a peer's repeated positions cannot make this
        // replica send its batch again and again.
        if self.resent_to.get(&to) == Some(&(cid, epoch)) {
            return;
        }
        self.resent_to.insert(to, (cid, epoch));
        let leader = self.is_leader();
        let Some(state) = self.instance.epochs.get(&epoch) else {
            return;
        };
        let ProposalSlot::Valid(b) = &state.proposal else {
            return;
        };
        let mut msgs = Vec::new();
        if leader {
            msgs.push(PeerMessage::Propose(Propose {
                cid,
                epoch,
                batch: b.bytes.clone(),
            }));
        }
        let vote = Vote {
            cid,
            epoch,
            hash: b.hash,
        };
        if state.write_sent && self.params.quorums.mode == Mode::Bft {
            msgs.push(PeerMessage::Write(vote));
        }
        if let Some((_, signature)) = state
            .accept_signatures
            .get(&me)
            .filter(|_| state.accept_sent)
        {
            msgs.push(PeerMessage::Accept(Accept {
                vote,
                signature: *signature,
            }));
        }
        for msg in msgs {
            self.actions.push_back(Action::Send { to, msg });
        }
    }

    /// The next time the start-up synchronisation has something to do on its own: resend
    /// the position to peers not heard from, settle for n − f at the deadline, give up
    /// catching up after twice that. Only future times (a past one would spin the timer).
    fn recovery_timer(&self) -> Option<u64> {
        let r = self.recovery.as_ref()?;
        let now = self.now_ms;
        let others = self.params.members.len() - 1;
        let give_up = r.deadline_ms + RECOVERY_WAIT_TIMEOUTS * self.params.request_timeout_ms;
        // Retransmissions go on while a peer is unheard (never in the past: a due one is
        // sent at the next tick); the deadlines matter only until they pass.
        let retransmit = (r.heard.len() < others).then(|| r.retransmit_ms.max(now + 1));
        let ahead = |t: u64| (t > now).then_some(t);
        let audit = match &r.audit {
            AuditStage::Running(a) if a.own.is_some() => [ahead(a.query_ms), ahead(a.deadline_ms)],
            AuditStage::Running(a) => [None, ahead(a.deadline_ms)],
            _ => [None, None],
        };
        [retransmit, ahead(r.deadline_ms), ahead(give_up)]
            .into_iter()
            .chain(audit)
            .flatten()
            .min()
    }

    fn retransmit_position(&mut self) {
        let Some(r) = self.recovery.as_mut() else {
            return;
        };
        if self.now_ms < r.retransmit_ms {
            return;
        }
        r.retransmit_ms = self.now_ms + (self.params.request_timeout_ms / 2).max(1);
        let unheard: Vec<ReplicaId> = self
            .params
            .members
            .iter()
            .filter(|m| **m != self.params.me && !r.heard.contains_key(m))
            .copied()
            .collect();
        for to in unheard {
            self.actions.push_back(Action::Send {
                to,
                msg: PeerMessage::Position {
                    next: self.instance.cid,
                    reply: false,
                },
            });
        }
    }

    /// Ends the start-up synchronisation once every peer's position is known (n − f after
    /// the deadline) and this replica has caught up to the highest of them; asks for the
    /// decisions it misses meanwhile.
    fn progress_recovery(&mut self) {
        let Some(r) = &self.recovery else {
            return;
        };
        let others = self.params.members.len() - 1;
        let enough = others - self.params.quorums.f.min(others);
        let past_deadline = self.now_ms >= r.deadline_ms;
        // After the deadline, n − f positions are enough: an instance decided before the crash
        // that no replica heard holds in its log is still held by the votes its accepters
        // persisted (see `Action::PersistVote`), and any n − f replicas include one of them.
        let heard_enough = r.heard.len() >= others || (past_deadline && r.heard.len() >= enough);
        // Positions, highest first. The highest may be a Byzantine replica's claim; the
        // (f+1)-th highest is held by a correct replica, which can prove every decision up to
        // it (it keeps its last decisions with their proofs), so that one is always awaited.
        // In CFT every position is a correct replica's.
        let mut positions: Vec<ConsensusId> = r.heard.values().copied().collect();
        positions.sort_unstable_by(|a, b| b.cmp(a));
        let highest = positions.first().copied().unwrap_or(ConsensusId(0));
        let vouched = match self.params.quorums.mode {
            Mode::Cft => highest,
            Mode::Bft => positions
                .get(self.params.quorums.f)
                .copied()
                .unwrap_or(ConsensusId(0)),
        };
        let give_up_at = r.deadline_ms + RECOVERY_WAIT_TIMEOUTS * self.params.request_timeout_ms;
        if self.instance.cid < vouched
            && let Some(r) = self.recovery.as_mut()
            && let AuditStage::Running(a) = &r.audit
        {
            // Correct replicas decided past the instance of the vote meanwhile: they will not
            // checkpoint there, and this replica must catch up.
            tracing::info!(cid = %a.cid, "hash vote inconclusive: the others moved past its instance");
            r.audit = AuditStage::Done;
            self.vote = None;
        }
        let Some(r) = &self.recovery else {
            return;
        };
        let behind = self.instance.cid < highest;
        let must_wait = self.instance.cid < vouched || self.now_ms < give_up_at;
        if behind && must_wait {
            if self.now_ms >= self.catch_up.next_request_ms
                || self.instance.cid >= self.catch_up.requested_until
            {
                self.request_decisions(false);
            }
            return;
        }
        if !heard_enough {
            return;
        }
        let heard = r.heard.len();
        if self.audit_pending() {
            return;
        }
        if behind {
            tracing::warn!(next = %self.instance.cid, highest_heard = %highest, "start-up synchronisation: no replica proved the highest position claimed (at most f replicas claim it); ordering anyway");
        }
        tracing::info!(next = %self.instance.cid, heard, "start-up synchronisation done: ordering");
        self.recovery = None;
        // Peers on the same instance resend what this replica refused meanwhile. First a
        // query, which lifts their once-per-instance limit on resends to this replica: a
        // resend they made while it still refused (answering its answer to their own
        // start-up query) must not swallow this announcement (found in `tagma bench
        // state-transfer`: the leader's PROPOSE, refused by two replicas still synchronising,
        // waited for a request timeout after a restart of every replica).
        for reply in [false, true] {
            self.actions
                .push_back(Action::Broadcast(PeerMessage::Position {
                    next: self.instance.cid,
                    reply,
                }));
        }
        self.clients.restart_timers(self.now_ms);
        self.settle();
    }

    /// Whether the hash vote still holds the start-up synchronisation (see [`Audit`]). The
    /// first time the synchronisation could end, it starts: the digest of the state after the
    /// last instance decided (the newest checkpoint's, if it is there).
    fn audit_pending(&mut self) -> bool {
        let audits = self.params.state_transfer
            && self.params.hash_vote
            && self.params.quorums.mode == Mode::Bft;
        let last = self.last_decided;
        let timeout = self.params.request_timeout_ms.max(1);
        let now = self.now_ms;
        let fetching = self.fetch.is_some();
        let Some(r) = self.recovery.as_mut() else {
            return false;
        };
        match &r.audit {
            AuditStage::Done => return false,
            AuditStage::Repairing if r.repaired => {
                r.audit = AuditStage::Done;
                return false;
            }
            AuditStage::Repairing => {
                if !fetching {
                    // The fetch was dropped without installing anything: the contradicted
                    // state must not be ordered on.
                    self.catch_up.state_transfer_signalled = true;
                    self.start_fetch(false, true);
                }
                return true;
            }
            AuditStage::Running(_) => {}
            AuditStage::NotStarted => {
                let Some(cid) = last.filter(|_| audits) else {
                    // Nothing decided yet (a new cluster) or not audited (CFT, no disk).
                    r.audit = AuditStage::Done;
                    return false;
                };
                r.audit = AuditStage::Running(Audit {
                    cid,
                    own: None,
                    offers: BTreeMap::new(),
                    query_ms: u64::MAX,
                    deadline_ms: now + AUDIT_WAIT_TIMEOUTS * timeout,
                });
                tracing::info!(%cid, "start-up synchronisation caught up: hashing the state for the hash vote");
                match self.served.back().copied().filter(|c| c.cid == cid) {
                    Some(held) => self.audit_own_digest(cid, held.digest),
                    None => self.actions.push_back(Action::DigestState { cid }),
                }
            }
        }
        self.audit_progress()
    }

    /// This replica's digest for the hash vote is known: it asks every peer for theirs, and
    /// answers the peers that asked for its own before it was there.
    fn audit_own_digest(&mut self, cid: ConsensusId, digest: Digest) {
        let timeout = self.params.request_timeout_ms.max(1);
        let (now, next) = (self.now_ms, self.instance.cid);
        let Some(Recovery {
            audit: AuditStage::Running(a),
            asked,
            ..
        }) = self.recovery.as_mut()
        else {
            return;
        };
        if a.cid != cid || a.own.is_some() {
            return;
        }
        a.own = Some(digest);
        a.query_ms = now + (timeout / 2).max(1);
        // The peers hash theirs at the same time: a peer not done within two timeouts of
        // this one is not taking part (it did not restart, and sits at the same instance).
        a.deadline_ms = a.deadline_ms.min(now + AUDIT_PEER_WAIT_TIMEOUTS * timeout);
        self.vote = Some(OwnVote {
            cid,
            digest,
            stage: VoteStage::Cast,
        });
        let asked = std::mem::take(asked);
        self.actions
            .push_back(Action::Broadcast(PeerMessage::StateQuery { next }));
        for to in asked {
            self.answer_state_query(to);
        }
    }

    /// The answer to a `StateQuery`: this replica's vote, if it has one (first, so that a
    /// peer auditing it never reads the offer of a position past the vote without it), then
    /// its newest checkpoint and position.
    fn answer_state_query(&mut self, to: ReplicaId) {
        if let Some(OwnVote {
            cid,
            digest,
            stage: VoteStage::Cast | VoteStage::Stands { .. },
        }) = self.vote
        {
            self.actions.push_back(Action::Send {
                to,
                msg: PeerMessage::StateVote { cid, digest },
            });
        }
        self.actions.push_back(Action::Send {
            to,
            msg: PeerMessage::StateOffer {
                checkpoint: self.served.back().copied(),
                next: self.instance.cid,
            },
        });
    }

    /// A peer's vote in the hash vote: kept while this replica synchronises. One that
    /// contradicts this replica's standing vote (also after the synchronisation) asks for
    /// the fresh checkpoint that peer will repair from.
    fn on_state_vote(&mut self, from: ReplicaId, cid: ConsensusId, digest: Digest) {
        if self
            .vote
            .is_some_and(|v| v.cid == cid && v.digest != digest)
        {
            self.fresh_checkpoint_for_repair(from);
        }
        if let Some(r) = self.recovery.as_mut() {
            r.votes.insert(from, (cid, digest));
            self.progress_recovery();
        }
    }

    /// DDS's fresh checkpoint after the hash vote, taken only when a peer needs it: once this
    /// replica's vote stands and a peer's vote contradicts it (that peer fetches the state
    /// from f+1 replicas' checkpoints at or past the vote's instance). Once per vote; not
    /// when a checkpoint at or past that instance is already offered. Without a
    /// contradiction each replica's own checkpoint and log already hold its state.
    fn fresh_checkpoint_for_repair(&mut self, peer: ReplicaId) {
        let Some(OwnVote {
            cid,
            stage: VoteStage::Stands { checkpoint_asked },
            ..
        }) = self.vote.as_mut()
        else {
            return;
        };
        if *checkpoint_asked {
            return;
        }
        *checkpoint_asked = true;
        let cid = *cid;
        if self.served.back().is_some_and(|c| c.cid >= cid) {
            return;
        }
        let Some(last) = self.last_decided else {
            return;
        };
        tracing::info!(%peer, vote = %cid, checkpoint = %last, "a peer's hash vote contradicts this replica's standing vote: fresh checkpoint for its repair");
        self.actions.push_back(Action::CheckpointNow { cid: last });
    }

    /// Weighs the offers (see [`Audit`]); true while the audit goes on. A contradicted state
    /// is fetched from the others (state transfer in repair mode).
    fn audit_progress(&mut self) -> bool {
        let one_correct = self.params.quorums.one_correct();
        let (now, next, me) = (self.now_ms, self.instance.cid, self.params.me);
        let timeout = self.params.request_timeout_ms.max(1);
        let Some(r) = self.recovery.as_mut() else {
            return false;
        };
        let AuditStage::Running(a) = &mut r.audit else {
            return false;
        };
        let Some(own) = a.own else {
            if now < a.deadline_ms {
                return true;
            }
            tracing::warn!(cid = %a.cid, "hash vote: this replica's state was not hashed in time; ordering unaudited");
            r.audit = AuditStage::Done;
            return false;
        };
        let mut matches = 0;
        let mut others: BTreeMap<Digest, usize> = BTreeMap::new();
        let mut open = Vec::new();
        for peer in self.params.members.iter().filter(|m| **m != me) {
            // A peer's vote there, or its checkpoint there (a peer that did not restart may
            // have checkpointed that instance).
            let offer = a.offers.get(peer);
            let digest = r
                .votes
                .get(peer)
                .filter(|(cid, _)| *cid == a.cid)
                .map(|(_, d)| *d)
                .or_else(|| match offer {
                    Some((Some(c), _)) if c.cid == a.cid => Some(c.digest),
                    _ => None,
                });
            match (digest, offer) {
                (Some(d), _) if d == own => matches += 1,
                (Some(d), _) => *others.entry(d).or_default() += 1,
                // Past the instance: it will not vote there.
                (None, Some((Some(c), _))) if c.cid > a.cid => {}
                (None, Some((_, peer_next))) if *peer_next > next => {}
                _ => open.push(*peer),
            }
        }
        let verdict = if matches >= one_correct {
            AuditVerdict::Confirmed
        } else if others.values().any(|n| *n >= one_correct) {
            AuditVerdict::Contradicted
        } else if open.is_empty() || now >= a.deadline_ms {
            AuditVerdict::Inconclusive
        } else {
            if now >= a.query_ms {
                a.query_ms = now + (timeout / 2).max(1);
                for to in open {
                    self.actions.push_back(Action::Send {
                        to,
                        msg: PeerMessage::StateQuery { next },
                    });
                }
            }
            return true;
        };
        let cid = a.cid;
        match verdict {
            AuditVerdict::Confirmed | AuditVerdict::Inconclusive => {
                if verdict == AuditVerdict::Confirmed {
                    self.stats.audits_confirmed += 1;
                    tracing::info!(%cid, matches, "hash vote: the recovered state is confirmed");
                } else {
                    tracing::info!(%cid, matches, "hash vote inconclusive (too few peers voted at this instance: the others are past it)");
                }
                r.audit = AuditStage::Done;
                // Its vote stands, inconclusive too: f+1 peers that outvote another one may
                // each end inconclusive, and that one repairs from their fresh checkpoints.
                let contradicted_by = r
                    .votes
                    .iter()
                    .find(|(_, (c, d))| *c == cid && *d != own)
                    .map(|(peer, _)| *peer);
                self.vote = Some(OwnVote {
                    cid,
                    digest: own,
                    stage: VoteStage::Stands {
                        checkpoint_asked: false,
                    },
                });
                if let Some(peer) = contradicted_by {
                    self.fresh_checkpoint_for_repair(peer);
                }
                false
            }
            AuditVerdict::Contradicted => {
                tracing::warn!(%cid, matches, "hash vote: f+1 replicas hold another state at this instance; this replica's disk returned a wrong state: fetching theirs");
                r.audit = AuditStage::Repairing;
                self.stats.audits_contradicted += 1;
                // The peers learn of it with every query of the repair fetch (`fetch_actions`):
                // those whose vote stands write the fresh checkpoint it repairs from.
                self.vote = Some(OwnVote {
                    cid,
                    digest: own,
                    stage: VoteStage::Contradicted,
                });
                self.catch_up.state_transfer_signalled = true;
                self.fetch = None;
                self.start_fetch(false, true);
                true
            }
        }
    }

    /// The start-up synchronisation's hash vote: a peer's offer (ignored when no vote runs).
    fn audit_offer(
        &mut self,
        from: ReplicaId,
        checkpoint: Option<CheckpointInfo>,
        next: ConsensusId,
    ) {
        if let Some(Recovery {
            audit: AuditStage::Running(a),
            ..
        }) = self.recovery.as_mut()
        {
            a.offers.insert(from, (checkpoint, next));
            self.progress_recovery();
        }
    }

    /// Whether the hash vote is running or repairing: decisions are not committed then (the
    /// vote is on the state at the instance it started at, and a repair replaces that one).
    fn audit_holds(&self) -> bool {
        matches!(
            self.recovery,
            Some(Recovery {
                audit: AuditStage::Running(_) | AuditStage::Repairing,
                ..
            })
        )
    }
}

// ---- state transfer (see `crate::transfer`) -------------------------------------------------

impl Replica {
    /// The idle probe is due [`IDLE_PROBE_TIMEOUTS`] request timeouts from now.
    fn arm_idle_probe(&mut self) {
        self.idle_probe_ms =
            Some(self.now_ms + IDLE_PROBE_TIMEOUTS * self.params.request_timeout_ms);
    }

    /// A durable replica's runtime reports that every instance up to `cid` it delivered is on
    /// its disk (after the sync; instances a fetched state covers count too).
    pub fn note_durable(&mut self, cid: ConsensusId) {
        if self.durable_through.is_some_and(|d| d >= cid) {
            return;
        }
        self.durable_through = Some(cid);
        self.try_propose();
    }

    /// A durable replica's runtime reports that its votes up to [`Action::PersistVote`]
    /// `seq` are on disk: the ACCEPTs waiting for them may go.
    pub fn note_votes_durable(&mut self, seq: u64) {
        if seq <= self.votes_durable {
            return;
        }
        debug_assert!(
            seq <= self.votes_issued,
            "a vote reported durable before it was issued"
        );
        self.votes_durable = seq;
        if let Some((held, regency)) = self.sync.held_install
            && held <= seq
        {
            self.sync.held_install = None;
            if regency == self.regency && self.sync.waiting_sync {
                self.finish_install(regency);
            }
        }
        let epoch = self.epoch();
        self.check_quorums(epoch);
    }

    /// `Some(seq)` while an ACCEPT waits for the vote [`Action::PersistVote`] `seq`; the
    /// runtime then calls [`Replica::note_votes_durable`] when it is on disk.
    pub fn awaits_vote(&self) -> Option<u64> {
        if let Some((seq, _)) = self.sync.held_install {
            return Some(seq);
        }
        let state = self.instance.epochs.get(&self.epoch())?;
        (!state.accept_sent && state.accept_seq > self.votes_durable).then_some(state.accept_seq)
    }

    /// Restart: the votes read back from this replica's disk ([`Action::PersistVote`]), after
    /// [`Replica::resume`] (if anything was recovered) and before
    /// [`Replica::start_recovery`]. Votes on instances already decided are ignored. On the
    /// others this replica writes no other value in an epoch where it wrote one, votes for
    /// no other value in an epoch up to one where it saw a write quorum, reports them in its
    /// collects, and as leader proposes that value again.
    pub fn restore_votes(&mut self, votes: impl IntoIterator<Item = Collect>) {
        let votes: Vec<Collect> = votes.into_iter().collect();
        // The regency it had installed (and voted in) before the crash: it goes on from
        // there, never voting again in an earlier epoch. As after adopting a regency whose
        // SYNC it did not see, it takes no PROPOSE (and proposes nothing) for the instance
        // in progress until a decision made in that regency arrives or a new leader change:
        // it may have forgotten what that regency's synchronisation bound. Unless its last
        // recovered decision was made in that very regency: its leader proposed in it only
        // after its SYNC, so the instance the SYNC bound is at most that one, decided here.
        if let Some(regency) = votes.iter().map(|c| c.regency).max()
            && regency > self.regency
        {
            let synchronised = self
                .last_decided
                .and_then(|cid| self.decisions.epoch_of(cid))
                .is_some_and(|epoch| epoch == Epoch(regency.0));
            tracing::info!(%regency, synchronised, "regency from before the restart restored");
            self.enter_regency(regency);
            if !synchronised {
                self.sync.waiting_sync = true;
                self.sync.sync_deadline_ms = None;
            }
        }
        for collect in votes {
            if collect.cid < self.instance.cid {
                continue;
            }
            tracing::info!(cid = %collect.cid, write_quorum = ?collect.write_quorum.map(|(e, _)| e), writes = collect.write_set.len(), "votes from before the restart restored");
            let slot = self.recovered_votes.entry(collect.cid).or_default();
            if let Some((epoch, hash)) = collect.write_quorum
                && slot.accepted.is_none_or(|(e, _)| e < epoch)
            {
                slot.accepted = Some((epoch, hash));
            }
            for (epoch, value) in collect.write_set {
                let hash = tagma_crypto::digest(&value);
                if !slot.writes.iter().any(|(e, _, _)| *e == epoch) {
                    slot.writes.push((epoch, hash, value));
                }
            }
        }
    }

    /// Storage back-pressure: a durable leader proposes instance c only once c−1 is on its
    /// own disk, so ordering never runs ahead of the log, and the requests that arrive while
    /// the log syncs join the next batch instead of making one more instance (one more sync,
    /// one more round of messages on every replica). `Some(c−1)` while a proposal waits for
    /// it (requests are pending); the runtime then calls [`Replica::note_durable`] when the
    /// sync completes.
    pub fn awaits_durable(&self) -> Option<ConsensusId> {
        let previous = ConsensusId(self.instance.cid.0.checked_sub(1)?);
        (self.params.state_transfer
            && self.is_leader()
            && self.durable_through.is_none_or(|d| d < previous)
            && self.last_decided.is_some_and(|d| d >= previous)
            && self.clients.pending_total() > 0)
            .then_some(previous)
    }

    /// A durable checkpoint of this replica is written (the runtime reports each one): it is
    /// offered to replicas that need state from now on.
    /// A checkpoint of the same instance as the newest replaces it (a state repaired after
    /// the hash vote, see [`Audit`]).
    pub fn note_checkpoint(&mut self, info: CheckpointInfo) {
        match self.served.back_mut() {
            Some(c) if c.cid > info.cid => return,
            Some(c) if c.cid == info.cid => *c = info,
            _ => self.served.push_back(info),
        }
        while self.served.len() > 2 {
            self.served.pop_front();
        }
        self.progress_recovery();
    }

    /// The runtime's answer to [`Action::DigestState`]: the digest a checkpoint of the state
    /// after `cid` would have. It is this replica's vote in the hash vote (see [`Audit`]).
    pub fn note_state_digest(&mut self, cid: ConsensusId, digest: Digest) {
        self.audit_own_digest(cid, digest);
        self.progress_recovery();
    }

    /// Whether a state transfer is in progress (fetching side).
    pub fn is_fetching_state(&self) -> bool {
        self.fetch.is_some()
    }

    /// How long the state transfer in progress has been running.
    pub fn state_transfer_elapsed_ms(&self, now_ms: u64) -> Option<u64> {
        self.fetch
            .as_ref()
            .map(|f| now_ms.saturating_sub(f.started_ms()))
    }

    /// The runtime's verdict on [`Action::InstallState`].
    pub fn state_installed(&mut self, now_ms: u64, outcome: InstallOutcome) {
        self.set_now(now_ms);
        match outcome {
            InstallOutcome::Installed {
                last,
                timestamp_ms,
                sessions,
                view,
            } => {
                let recent = std::mem::take(&mut self.installing_recent);
                let fetch = self.fetch.take();
                let started = fetch.as_ref().map(Fetch::started_ms);
                let repaired = fetch.is_some_and(|f| f.is_repair());
                if last < self.instance.cid && !(repaired && last.next() == self.instance.cid) {
                    tracing::warn!(%last, next = %self.instance.cid, "state installed behind this replica's position: ignored");
                    // Another fetch may start if forwarding cannot take it further.
                    self.catch_up.state_transfer_signalled = false;
                    self.maybe_start_state_transfer();
                    return;
                }
                tracing::info!(
                    %last,
                    from = %self.instance.cid,
                    ms = started.map(|s| now_ms.saturating_sub(s)),
                    "state transfer done"
                );
                self.stats.state_transfers += 1;
                if repaired {
                    // The checkpoints this replica held before are its disk's wrong state.
                    self.served.retain(|c| c.cid >= last);
                }
                self.instance = Instance::new(last.next());
                self.last_decided = Some(last);
                if repaired {
                    // Everything the lying disk said goes, its sessions and timestamp too.
                    self.last_decided_timestamp_ms = timestamp_ms;
                    self.clients.replace_sessions(&sessions);
                    if let Some(r) = self.recovery.as_mut() {
                        r.repaired = true;
                    }
                } else {
                    self.last_decided_timestamp_ms =
                        self.last_decided_timestamp_ms.max(timestamp_ms);
                    self.clients.install_sessions(&sessions);
                    // A state fetched while synchronising did not come from this replica's
                    // disk, and f+1 digests vouched for it: there is nothing for the hash
                    // vote to check (it would only hold ordering while the others move on).
                    if let Some(r) = self.recovery.as_mut()
                        && matches!(r.audit, AuditStage::NotStarted | AuditStage::Running(_))
                    {
                        tracing::info!(%last, "state fetched while synchronising: no hash vote");
                        r.audit = AuditStage::Done;
                        self.vote = None;
                    }
                }
                if let Some(view) = view {
                    // The state may end in a later view than this replica ordered in.
                    self.adopt_view(last, view);
                    if self.left {
                        return;
                    }
                }
                self.future.discard_below(last.next());
                self.catch_up.future.retain(|c, _| *c > last);
                for decided in recent {
                    if self.decisions.last_cid().is_none_or(|n| n < decided.cid) {
                        self.record_proven(decided);
                    }
                }
                self.catch_up.behind_since_ms = None;
                self.catch_up.duplicates = 0;
                self.catch_up.state_transfer_signalled = false;
                self.catch_up.requested_until = last.next();
                // The others went on deciding while the state was fetched: ask for what
                // follows at once (decision forwarding) rather than wait to notice the lag.
                self.request_decisions(false);
                self.progress_recovery();
                self.settle();
            }
            InstallOutcome::Rejected { reason } => {
                self.installing_recent.clear();
                if !self.catch_up.state_transfer_signalled {
                    tracing::info!(%reason, "fetched state not installed, and no longer needed");
                    self.fetch = None;
                    return;
                }
                tracing::warn!(%reason, "fetched state rejected: trying another source");
                if let Some(fetch) = self.fetch.as_mut() {
                    let mut out = Vec::new();
                    fetch.rejected(now_ms, &mut out);
                    self.fetch_actions(out);
                }
            }
        }
    }

    fn on_transfer(&mut self, from: ReplicaId, input: TransferInput) -> Result<(), Rejection> {
        let bad = |reason: &'static str| Err(Rejection::InvalidTransfer { from, reason });
        match input {
            TransferInput::Query { .. } => {
                if let Some(r) = self.recovery.as_mut() {
                    r.asked.insert(from);
                }
                self.answer_state_query(from);
            }
            TransferInput::Offer { checkpoint, next } => {
                let Some(fetch) = self.fetch.as_mut() else {
                    // A late answer (to a fetch or a hash vote that ended): nothing to do.
                    self.audit_offer(from, checkpoint, next);
                    return Ok(());
                };
                let mut out = Vec::new();
                fetch.on_offer(from, checkpoint, next, self.now_ms, &mut out);
                self.fetch_actions(out);
            }
            TransferInput::ChunkRequest { cid, offset, len } => {
                let Some(ckp) = self.served.iter().find(|c| c.cid == cid) else {
                    // Released since it was offered (two newer ones were written): an empty
                    // chunk tells the fetcher at once, which then asks for fresh offers.
                    self.actions.push_back(Action::Send {
                        to: from,
                        msg: PeerMessage::Chunk {
                            cid,
                            offset,
                            data: Bytes::new(),
                        },
                    });
                    return Ok(());
                };
                if len == 0
                    || len > self.params.chunk_bytes
                    || offset
                        .checked_add(u64::from(len))
                        .is_none_or(|end| end > ckp.len)
                {
                    return bad("chunk outside the checkpoint");
                }
                self.actions.push_back(Action::ReadChunk {
                    to: from,
                    cid,
                    offset,
                    len,
                });
            }
            TransferInput::Chunk { cid, offset, data } => {
                let Some(fetch) = self.fetch.as_mut() else {
                    return bad("chunk while not fetching");
                };
                let mut out = Vec::new();
                let r = fetch.on_chunk(from, cid, offset, data, self.now_ms, &mut out);
                self.fetch_actions(out);
                if let Err(reason) = r {
                    return bad(reason);
                }
            }
            TransferInput::LogRequest { from: first, count } => {
                if count == 0 || count > LOG_RUN {
                    return bad("log request of a bad length");
                }
                // From memory when every decision asked for is kept there; else from disk.
                let run: Vec<DecidedInstance> = (first.0..first.0.saturating_add(u64::from(count)))
                    .map_while(|c| self.decisions.proven(ConsensusId(c), &self.checker))
                    .collect();
                if run.len() == count as usize || !self.params.state_transfer {
                    for d in run {
                        self.actions.push_back(Action::Send {
                            to: from,
                            msg: PeerMessage::LogEntry(d),
                        });
                    }
                } else {
                    self.actions.push_back(Action::ReadLog {
                        to: from,
                        from: first,
                        count,
                    });
                }
            }
            TransferInput::LogEntry(decided) => {
                let Some(fetch) = self.fetch.as_mut().filter(|f| f.wants(decided.cid)) else {
                    // Read from a peer's disk for catch-up (or no longer needed by a fetch).
                    return self.on_decision(from, decided);
                };
                let mut out = Vec::new();
                let r = fetch.on_log_entry(decided, &self.checker, self.now_ms, &mut out);
                self.fetch_actions(out);
                if let Err(reason) = r {
                    return bad(reason);
                }
            }
        }
        Ok(())
    }

    fn fetch_actions(&mut self, out: Vec<FetchOut>) {
        for o in out {
            let action = match o {
                FetchOut::Broadcast(msg) => {
                    if let (
                        Some(OwnVote {
                            cid,
                            digest,
                            stage: VoteStage::Contradicted,
                        }),
                        PeerMessage::StateQuery { .. },
                    ) = (self.vote, &msg)
                        && self.fetch.as_ref().is_some_and(Fetch::is_repair)
                    {
                        self.actions
                            .push_back(Action::Broadcast(PeerMessage::StateVote { cid, digest }));
                    }
                    Action::Broadcast(msg)
                }
                FetchOut::Send { to, msg } => Action::Send { to, msg },
                FetchOut::StoreChunk { cid, offset, data } => {
                    Action::StoreChunk { cid, offset, data }
                }
                FetchOut::Install(state) => {
                    // A repair replaces the state at this replica's own position.
                    let floor = if state.repair {
                        ConsensusId(self.instance.cid.0.saturating_sub(1))
                    } else {
                        self.instance.cid
                    };
                    if state.target() < floor && state.repair {
                        tracing::info!(target = %state.target(), next = %self.instance.cid, "repair overtaken: fetching again");
                        self.fetch = None;
                        self.start_fetch(false, true);
                        continue;
                    }
                    if state.target() < floor {
                        // Decided here meanwhile (forwarding overtook the fetch): installing
                        // it would only be refused by the runtime.
                        tracing::info!(target = %state.target(), next = %self.instance.cid, "fetched state overtaken: not installed");
                        self.fetch = None;
                        self.catch_up.state_transfer_signalled = false;
                        continue;
                    }
                    let kept = self.params.decisions_kept;
                    let skip = state.log.len().saturating_sub(kept);
                    self.installing_recent = state.log[skip..].to_vec();
                    Action::InstallState(state)
                }
            };
            self.actions.push_back(action);
        }
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

/// A replica's votes on one instance, read back from its disk after a crash.
///
/// An accepted value binds beyond its epoch until a SYNC covers the instance: a restarted
/// replica resumes at its log's end, which may lag behind instances it accepted (replies
/// leave before the log sync), so its collects understate where it was, and a leader
/// change can synchronise an earlier instance and then propose afresh for this one. In
/// Mod-SMaRt without crashes the quorum intersection puts an accepter's collect at this
/// instance into every SYNC that precedes a fresh proposal for it; here the restored claim
/// stands in for it (found in review: CFT, both accepters of a replied value crash, one
/// comes back with its log two instances behind, the leader change covers only the first).
#[derive(Default, Debug)]
struct RecoveredVotes {
    /// The highest epoch in which it saw a write quorum (and may have accepted), and for what.
    accepted: Option<(Epoch, Digest)>,
    /// The values it wrote: (epoch, hash, value).
    writes: Vec<(Epoch, Digest, Bytes)>,
    /// A SYNC for this instance was taken since the restart (its value choice saw n − f
    /// collects, and this replica follows it).
    synchronised: bool,
}

impl RecoveredVotes {
    /// The accepted value that still binds this replica in `epoch`: the one accepted in that
    /// epoch or a later one, or in any earlier one while no SYNC covered the instance.
    fn binding(&self, epoch: Epoch) -> Option<Digest> {
        self.accepted
            .filter(|(e, _)| epoch <= *e || !self.synchronised)
            .map(|(_, h)| h)
    }

    /// Whether voting for `hash` in `epoch` could contradict these votes: another value
    /// written in that epoch, or another value accepted that still binds (above).
    fn forbids(&self, epoch: Epoch, hash: Digest) -> bool {
        self.binding(epoch).is_some_and(|h| h != hash)
            || self
                .writes
                .iter()
                .any(|(e, h, _)| *e == epoch && *h != hash)
    }

    /// What this replica, as leader of `epoch`, may propose: `Err` if nothing (a binding
    /// value whose bytes it does not hold: a leader change will settle it), `Ok(Some)` the
    /// only value (the binding one, or else the one it wrote in this epoch), `Ok(None)`
    /// anything.
    fn value_to_propose(&self, epoch: Epoch) -> Result<Option<&Bytes>, ()> {
        let value_of = |hash: Digest| {
            self.writes
                .iter()
                .find(|(_, h, _)| *h == hash)
                .map(|(_, _, v)| v)
        };
        match self.binding(epoch) {
            Some(h) => value_of(h).map(Some).ok_or(()),
            None => Ok(self
                .writes
                .iter()
                .find(|(e, _, _)| *e == epoch)
                .map(|(_, _, v)| v)),
        }
    }
}

/// One epoch of an instance: the PROPOSE taken and the votes received.
#[derive(Default)]
struct EpochState {
    proposal: ProposalSlot,
    writes: Votes,
    accepts: Votes,
    /// ACCEPT signatures received (unverified) with the hash each signed.
    accept_signatures: BTreeMap<ReplicaId, (Digest, Signature)>,
    /// Senders whose ACCEPT signature was checked and found valid.
    verified_accepts: std::collections::BTreeSet<ReplicaId>,
    /// This replica has voted for the proposal (WRITE in BFT, ACCEPT in CFT).
    write_sent: bool,
    /// This replica has sent (and counted) its ACCEPT.
    accept_sent: bool,
    /// Durable replicas: the [`Action::PersistVote`] that records the write quorum this
    /// replica accepts in this epoch (0: none issued yet); the ACCEPT leaves once it is
    /// durable.
    accept_seq: u64,
}

/// The first PROPOSE of an epoch; only the first is ever taken.
#[derive(Default)]
enum ProposalSlot {
    #[default]
    Empty,
    Valid(VerifiedBatch),
    /// Valid except that this replica could not verify a request's authentication (its MAC
    /// entry may have been corrupted by a faulty client). It is not voted for until f+1
    /// other replicas vouch for it (then a correct one verified it), and is decided if a
    /// quorum accepts it.
    Unverified(VerifiedBatch),
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
            ProposalSlot::Valid(b) | ProposalSlot::Unverified(b) => Some(Some(b.hash)),
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
    /// Votes for `hash` from senders other than `me`.
    fn count_except(&self, hash: Digest, me: ReplicaId) -> usize {
        self.count(hash) - usize::from(self.by_sender.get(&me) == Some(&hash))
    }
    /// Withdraws `from`'s vote (its signature did not verify).
    fn remove(&mut self, from: ReplicaId) {
        if let Some(hash) = self.by_sender.remove(&from) {
            let n = self.tally.get_mut(&hash).expect("tallied");
            *n -= 1;
            if *n == 0 {
                self.tally.remove(&hash);
            }
        }
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
            per_sender_max: Self::share(len_max, members),
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

    /// Keeps only messages from senders `keep` accepts, with the per-sender share recomputed
    /// for a view of `members` replicas.
    fn retain_senders(&mut self, keep: &impl Fn(&ReplicaId) -> bool, members: usize) {
        for msgs in self.by_cid.values_mut() {
            msgs.retain(|(from, _)| keep(from));
        }
        self.by_cid.retain(|_, msgs| !msgs.is_empty());
        self.per_sender.retain(|r, _| keep(r));
        self.len = self.per_sender.values().sum();
        self.per_sender_max = Self::share(self.len_max, members);
    }

    /// What one sender may buffer: peers do not send to themselves, so `len_max` is shared
    /// among the others.
    fn share(len_max: usize, members: usize) -> usize {
        len_max.div_ceil(members.saturating_sub(1).max(1))
    }

    /// Drops the messages of instances before `cid` (decided without them).
    fn discard_below(&mut self, cid: ConsensusId) {
        let keep = self.by_cid.split_off(&cid);
        let dropped = std::mem::replace(&mut self.by_cid, keep);
        for (from, _) in dropped.into_values().flatten() {
            let n = self.per_sender.get_mut(&from).expect("sender counted");
            *n -= 1;
            if *n == 0 {
                self.per_sender.remove(&from);
            }
            self.len -= 1;
        }
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
