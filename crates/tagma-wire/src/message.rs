//! Every message that crosses a process boundary.
//!
//! Three families, each its own top-level enum with its own tag space:
//! - [`Handshake`]: the authenticated key exchange that opens every connection;
//! - [`PeerMessage`]: replica ↔ replica (Mod-SMaRt consensus and request forwarding);
//! - [`ClientMessage`] (client → replica) and [`ReplicaMessage`] (replica → client).
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

/// Replica ↔ replica messages. The sender is the authenticated peer of the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMessage {
    Propose(Propose),
    Write(Vote),
    Accept(Vote),
    /// A client request forwarded by a replica whose request timer expired (SPEC §3).
    Forward(RequestEnvelope),
}

/// Client → replica messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage {
    Request(RequestEnvelope),
    /// Ask for the replica's execution position and state digest (used by tests and `demo`).
    StateQuery {
        nonce: u64,
    },
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
}
