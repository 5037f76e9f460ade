//! Every message that crosses a process boundary.
//!
//! Three families, each its own top-level enum with its own tag space:
//! - [`Handshake`]: the authenticated key exchange that opens every connection;
//! - [`PeerMessage`]: replica ↔ replica (Mod-SMaRt consensus and request forwarding);
//! - [`ClientMessage`] (client → replica) and [`ReplicaMessage`] (replica → client).
//!
//! A request's payload is the service's own bytes, except for a replica that executes by
//! conflict groups: there it is a [`GroupEnvelope`].
//!
//! A PROPOSE carries its batch as the *encoded* bytes ([`Propose::batch`]): receivers hash
//! exactly the bytes the leader sent, and the decoded [`Batch`] borrows its payloads from them.

use bytes::Bytes;

use crate::ids::*;

/// Whether a request is totally ordered or read-only (executed without ordering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestKind {
    Ordered = 0,
    Unordered = 1,
    /// A view change ([`ViewChange`] in the payload) signed by the administrator: ordered
    /// like an ordered request (same sequence numbers), never given to the service.
    Reconfigure = 2,
}

impl RequestKind {
    /// Whether requests of this kind are totally ordered (they share one sequence space).
    pub const fn is_ordered(self) -> bool {
        matches!(self, RequestKind::Ordered | RequestKind::Reconfigure)
    }
}

/// One member of a view: its id, the address it listens on for replicas and clients, and its
/// Ed25519 public key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewMember {
    pub id: ReplicaId,
    pub addr: String,
    pub key: PublicKey,
}

/// The replica set: id (incremented by each installed change), members ascending by id, and
/// the number of faults tolerated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub id: ViewId,
    pub f: u32,
    pub members: Vec<ViewMember>,
}

/// One operation of a view change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViewOp {
    Add(ViewMember),
    Remove(ReplicaId),
    SetF(u32),
}

/// The payload of the reply to a [`RequestKind::Reconfigure`] request: the view it installed,
/// or why it was refused (the view is then unchanged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconfigureOutcome {
    Installed(View),
    Refused(String),
}

/// The payload of a [`RequestKind::Reconfigure`] request: operations for view `view`, signed
/// by the administrator's key over `view_change_signing_bytes(view, ops)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewChange {
    /// The view the operations apply to; in any other view the change is refused.
    pub view: ViewId,
    pub ops: Vec<ViewOp>,
    pub signature: Signature,
}

/// A client request. Its digest (`tagma_crypto::request_digest`) is what MACs and signatures
/// cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub client: ClientId,
    /// Ordered and unordered requests have separate sequence spaces.
    pub seq: RequestSeq,
    pub kind: RequestKind,
    /// The view the client believes current.
    pub view: ViewId,
    /// Opaque service command.
    pub payload: Bytes,
}

/// How a request proves that its client sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestAuth {
    /// An authenticator: one MAC tag per replica of the view, in ascending replica-id order.
    /// Each replica checks only its own entry, with the static key it shares with the client.
    Macs(Vec<MacTag>),
    /// An Ed25519 signature by the client principal's key over the request digest; anyone can
    /// check it (needed when `signed_requests = true`).
    Signature(Signature),
}

/// A request together with its authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestEnvelope {
    pub request: Request,
    pub auth: RequestAuth,
}

/// The value a consensus instance decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Leader-chosen time, agreed by consensus; never decreases from one batch to the next.
    pub timestamp_ms: u64,
    /// Leader-chosen seed for the service's deterministic randomness.
    pub seed: u64,
    pub requests: Vec<RequestEnvelope>,
}

/// Mod-SMaRt step 1: the leader's proposal for instance `cid` in `epoch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Propose {
    pub cid: ConsensusId,
    pub epoch: Epoch,
    /// The encoded [`Batch`]. Its BLAKE3 hash is the value WRITE and ACCEPT vote on.
    pub batch: Bytes,
}

/// A WRITE or ACCEPT vote: it names the batch by hash only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vote {
    pub cid: ConsensusId,
    pub epoch: Epoch,
    pub hash: Digest,
}

/// Mod-SMaRt step 3: an ACCEPT vote, signed by its sender so that a quorum of ACCEPTs forms a
/// [`DecisionProof`] that any third replica can check. The signature covers
/// [`accept_signing_bytes`] of the vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    pub vote: Vote,
    pub signature: Signature,
}

/// The bytes an ACCEPT signature covers: a domain separator, cid, epoch and batch hash.
pub fn accept_signing_bytes(vote: &Vote) -> [u8; ACCEPT_SIGNING_LEN] {
    let mut out = [0u8; ACCEPT_SIGNING_LEN];
    out[..16].copy_from_slice(b"tagma v1 accept\0");
    out[16..24].copy_from_slice(&vote.cid.0.to_le_bytes());
    out[24..28].copy_from_slice(&vote.epoch.0.to_le_bytes());
    out[28..60].copy_from_slice(&vote.hash.0);
    out
}

/// Length of [`accept_signing_bytes`].
pub const ACCEPT_SIGNING_LEN: usize = 60;

/// Transferable evidence that a batch was decided: ACCEPT signatures of a quorum of distinct
/// replicas for the same (cid, epoch, hash). The cid and hash come from the enclosing
/// [`DecidedInstance`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionProof {
    pub epoch: Epoch,
    /// (signer, signature over `accept_signing_bytes`), ascending by signer.
    pub accepts: Vec<(ReplicaId, Signature)>,
}

/// A decided instance with its proof: the batch bytes (their BLAKE3 hash is the decided
/// value) and the signed ACCEPTs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecidedInstance {
    pub cid: ConsensusId,
    /// The encoded [`Batch`].
    pub batch: Bytes,
    pub proof: DecisionProof,
}

/// STOP: the sender suspects the leader and asks to move to `regency`. Carries the requests
/// whose timers expired so that every replica (and the next leader) learns them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    pub regency: Regency,
    pub requests: Vec<RequestEnvelope>,
}

/// What a replica knows about the instance in progress when it installs a new regency
/// (Cachin's "collect"). Signed, because the new leader relays it in SYNC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collect {
    pub replica: ReplicaId,
    /// The regency being installed.
    pub regency: Regency,
    /// The instance in progress (the replica's next undecided cid).
    pub cid: ConsensusId,
    /// The highest epoch in which this replica saw a WRITE quorum (BFT) or accepted a value
    /// (CFT), with that value's hash; `None` if it never did. `None` is distinct from any
    /// epoch, including epoch 0 (BFT-SMaRt's `unbound` pitfall).
    pub write_quorum: Option<(Epoch, Digest)>,
    /// The values this replica wrote (BFT) or accepted (CFT) for `cid`, with the highest
    /// epoch in which it did, ascending by epoch: (epoch, encoded batch).
    pub write_set: Vec<(Epoch, Bytes)>,
}

/// A [`Collect`] with its author's signature over [`Collect`]'s encoding prefixed by the
/// domain separator `"tagma v1 collect\0"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedCollect {
    pub collect: Collect,
    pub signature: Signature,
}

/// STOPDATA: sent to the new leader once a replica installs `regency`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopData {
    pub regency: Regency,
    /// The sender's last decided instance with its proof, if any.
    pub last_decided: Option<DecidedInstance>,
    pub collect: SignedCollect,
}

/// SYNC: the new leader's choice for the instance in progress, with the evidence every
/// replica re-checks: the highest proven decision and the signed collects it gathered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sync {
    pub regency: Regency,
    pub last_decided: Option<DecidedInstance>,
    pub collects: Vec<SignedCollect>,
    /// The leader's fresh batch (encoded), used when no earlier value can have been decided.
    pub proposal: Bytes,
}

/// Replica ↔ replica messages. The sender is the authenticated peer of the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMessage {
    Propose(Propose),
    Write(Vote),
    Accept(Accept),
    /// A client request forwarded by a replica whose request timer expired.
    Forward(RequestEnvelope),
    Stop(Stop),
    StopData(StopData),
    Sync(Sync),
    /// Catch-up: "send me instance `cid` with its proof".
    DecisionRequest {
        cid: ConsensusId,
    },
    /// Catch-up answer (decision forwarding).
    Decision(DecidedInstance),
    /// Start-up synchronisation: "every instance before `next` is decided and
    /// durable here". Sent by a replica that starts (with `reply = false`) and answered by
    /// every replica that receives one (`reply = true`), so replicas that all restarted
    /// converge on the highest durable instance before ordering more.
    Position {
        next: ConsensusId,
        reply: bool,
    },
    /// State transfer: "which checkpoint do you hold?" from a replica that is too
    /// far behind for decision forwarding; `next` is its next instance.
    StateQuery {
        next: ConsensusId,
    },
    /// The answer: the sender's newest durable checkpoint (if any) and its next instance
    /// (every instance before it is decided there).
    StateOffer {
        checkpoint: Option<CheckpointInfo>,
        next: ConsensusId,
    },
    /// The hash vote after a restart (DDS's REINIT: Bessani et al., On the Efficiency of
    /// Durable State Machine Replication): the digest the sender's checkpoint of the state
    /// after instance `cid` would have (computed, not written).
    /// Sent with the answer to a `StateQuery`, before the `StateOffer`.
    StateVote {
        cid: ConsensusId,
        digest: Digest,
    },
    /// "Send me `len` bytes at `offset` of your checkpoint of instance `cid`."
    ChunkRequest {
        cid: ConsensusId,
        offset: u64,
        len: u32,
    },
    /// Part of a checkpoint; empty: the sender no longer holds that checkpoint (its answer
    /// to a `ChunkRequest` for one it released).
    Chunk {
        cid: ConsensusId,
        offset: u64,
        data: Bytes,
    },
    /// "Send me the logged decisions `from`, `from + 1`, … (at most `count`)."
    LogRequest {
        from: ConsensusId,
        count: u32,
    },
    /// A logged decision with its proof (the answer to a [`PeerMessage::LogRequest`]).
    LogEntry(DecidedInstance),
    /// "Which view is installed?" — sent by a joining replica (one the view includes but
    /// that does not know it yet) on its own connection, which the member answers on.
    ViewQuery,
    /// The answer: the administrator's signed view changes since the configured view, which
    /// the joining replica replays itself (it trusts no single member's word for the view).
    ViewInfo(Vec<ViewChange>),
}

/// A durable checkpoint as a state-transfer offer names it: the executor state after
/// instance `cid`, `len` bytes whose BLAKE3 is `digest`. Executor checkpoints are
/// deterministic, so correct replicas that checkpoint the same instance announce the same
/// digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CheckpointInfo {
    pub cid: ConsensusId,
    pub len: u64,
    pub digest: Digest,
}

/// Client → replica messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage {
    Request(RequestEnvelope),
    /// Ask for the replica's execution position and state digest (used by tests and `demo`).
    StateQuery {
        nonce: u64,
    },
    /// Ask for the installed view: answered with [`ReplicaMessage::CurrentView`].
    ViewQuery,
    /// Ask for the administrator's signed changes since the configured view: answered with
    /// [`ReplicaMessage::ViewHistory`] (a client that reaches too few configured replicas
    /// verifies them itself and finds the current members).
    ViewHistoryQuery,
}

/// A replica's answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub client: ClientId,
    pub seq: RequestSeq,
    pub kind: RequestKind,
    /// The replica's current view.
    pub view: ViewId,
    pub payload: Bytes,
}

/// A replica's answer to [`ClientMessage::StateQuery`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateInfo {
    pub nonce: u64,
    pub replica: ReplicaId,
    /// Number of consensus instances executed (the next instance to execute).
    pub executed_instances: u64,
    /// Number of ordered requests executed.
    pub executed_requests: u64,
    /// Deterministic digest of the service state.
    pub state_digest: Digest,
}

/// Replica → client messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaMessage {
    Reply(Reply),
    StateInfo(StateInfo),
    /// The installed view, sent to a client whose request named an older one: the client
    /// installs it once enough replicas agree ([`View`]), and retransmits in it.
    CurrentView(View),
    /// Every view change installed since the configured view, in order, each as the
    /// administrator signed it (the answer to [`ClientMessage::ViewHistoryQuery`]).
    ViewHistory(Vec<ViewChange>),
    /// The leader of the replica's installed regency, sent by a replica that is not the
    /// leader to a client that sent it an ordered request (at most once per connection and
    /// regency). Clients send ordered requests to the leader first; a client believes a hint
    /// once enough replicas agree on it.
    Leader(LeaderHint),
}

/// Which replica leads a view's regency, as one replica sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderHint {
    pub view: ViewId,
    pub regency: Regency,
    pub leader: ReplicaId,
}

/// Who is at the other end of a connection, as claimed in the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Replica(ReplicaId),
    /// A client principal (the high 32 bits of its [`ClientId`]s).
    Client(u32),
}

/// The handshake that opens every connection (see `tagma-net`):
/// initiator `Hello` → responder `Hello` → initiator `Proof` → responder `Proof`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handshake {
    Hello {
        role: Role,
        /// Long-term Ed25519 identity.
        identity: PublicKey,
        /// Fresh X25519 key for this connection.
        ephemeral: KexPublic,
    },
    /// Signature by the identity key over the transcript of both `Hello`s.
    Proof { signature: Signature },
    /// The responder's answer, in place of its `Hello`, to an initiator it refuses; the
    /// connection closes after it. Unauthenticated: it only lets the initiator tell its user
    /// why (a refused connection closes either way).
    Refused { reason: Refusal },
}

/// Why a responder refused a handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The responder registers no key for the role the initiator claimed, or another key.
    UnknownKey,
}

/// The conflict group a client names for an ordered request, for a replica that executes
/// requests in parallel by groups, with `k` workers numbered `0..k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    /// Conflicts with nothing: any one worker runs it.
    None,
    /// Conflicts with everything: every worker stops for it.
    All,
    /// Worker `t`'s own group: conflicts with the requests of the same group (and with the
    /// multi-worker groups containing `t`).
    Worker(u32),
    /// A group the replica registered (a set of workers): conflicts with the groups of its
    /// workers.
    Custom(u32),
}

/// The payload of an ordered request for a replica that executes by conflict groups: the
/// group the client chose, then the service's operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupEnvelope {
    pub group: Group,
    pub op: Bytes,
}
