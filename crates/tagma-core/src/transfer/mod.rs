//! State transfer (BFT-SMaRt's collaborative state transfer, as in DDS): how a replica that fell further behind than its
//! peers keep decisions in memory gets the service state back, while the others keep serving.
//!
//! # Protocol
//! 1. The lagging replica broadcasts `StateQuery`; every replica answers with a `StateOffer`:
//!    its newest durable checkpoint (instance, length, BLAKE3 digest) and its next instance.
//! 2. From the offers it makes a plan. The **target** is the highest instance that at least
//!    one correct replica has decided (the f+1-th highest `next`, minus one; the highest in
//!    CFT). The **source** is a replica whose checkpoint is at most the target; the
//!    **vouchers** are the other replicas whose checkpoints lie between the source's and the
//!    target. Checkpoints are staggered, so the vouchers' lie at different instances.
//! 3. **Collaborative fetch**: the checkpoint comes in chunks from the source (a bounded
//!    window of chunk requests in flight, each chunk handed to the runtime to store as it
//!    arrives: memory stays bounded by the window, not the state); the decisions from the
//!    checkpoint up to the target come in runs from the *other* replicas, rotating. Every
//!    decision carries its proof and is checked here, so a faulty replica cannot slip in a
//!    wrong one.
//! 4. **Validation**: the runtime checks the stored checkpoint against the source's digest,
//!    installs it, replays the proven decisions and, at each voucher's instance, compares
//!    the digest of its own (deterministic) executor checkpoint with the voucher's. The state
//!    is accepted only if at least f+1 of {source} ∪ vouchers match (one in CFT): one of them
//!    is correct, and a correct replica's state at any instance determines the state at every
//!    later one. Otherwise everything is rolled back and another source is tried.
//!
//! Safety does not depend on timing; progress needs f+1 correct replicas with checkpoints in
//! the window and a correct source among the candidates, which rotation finds.
//!
//! This module is sans-IO: it never touches files or sockets. The replica core owns a
//! [`Fetch`] and turns what it returns into [`crate::Action`]s.

use bytes::Bytes;
use tagma_wire::{CheckpointInfo, ClientId, ConsensusId, DecidedInstance, ReplicaId, RequestSeq};

/// Chunk requests in flight to the source.
pub const CHUNK_WINDOW: u64 = 8;
/// Decisions asked for in one `LogRequest`.
pub const LOG_RUN: u32 = 64;
/// Runs of decisions in flight.
const LOG_WINDOW: u64 = 4;
/// An attempt that makes no progress for this many request timeouts is abandoned and the next
/// source tried.
const STALL_TIMEOUTS: u32 = 4;

/// A state-transfer message from an authenticated peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferInput {
    Query {
        next: ConsensusId,
    },
    Offer {
        checkpoint: Option<CheckpointInfo>,
        next: ConsensusId,
    },
    ChunkRequest {
        cid: ConsensusId,
        offset: u64,
        len: u32,
    },
    Chunk {
        cid: ConsensusId,
        offset: u64,
        data: Bytes,
    },
    LogRequest {
        from: ConsensusId,
        count: u32,
    },
    LogEntry(DecidedInstance),
}

/// Everything fetched, for the runtime to validate and install ([`crate::Action::InstallState`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateToInstall {
    pub source: ReplicaId,
    /// The checkpoint the runtime stored chunk by chunk (its BLAKE3 must be `digest`);
    /// `None` for a joining replica's fetch without one vouched for: the log then starts at
    /// the instance its executor runs next (0 from the initial state).
    pub checkpoint: Option<CheckpointInfo>,
    /// The proven decisions after the checkpoint (without one, from the replica's next
    /// instance) up to the target, in order.
    pub log: Vec<DecidedInstance>,
    /// Other replicas' checkpoints at instances in `(checkpoint.cid, target]`.
    pub vouchers: Vec<(ReplicaId, CheckpointInfo)>,
    /// How many of {source} ∪ vouchers must match the replayed state: f+1 (BFT) or 1 (CFT).
    pub matches_needed: usize,
    /// It replaces a state the state vote contradicted (its disk lied): the runtime also
    /// drops that disk's log, whose records before the checkpoint are suspect.
    pub repair: bool,
}

impl StateToInstall {
    /// The last instance the installed state covers.
    pub fn target(&self) -> ConsensusId {
        match (self.log.last(), self.checkpoint) {
            (Some(d), _) => d.cid,
            (None, Some(c)) => c.cid,
            (None, None) => {
                unreachable!("a plan without a checkpoint fetches one decision at least")
            }
        }
    }

    /// The vouchers' checkpoints.
    pub fn voucher_checkpoints(&self) -> Vec<CheckpointInfo> {
        self.vouchers.iter().map(|(_, v)| *v).collect()
    }
}

/// The runtime's verdict on a [`StateToInstall`] ([`crate::Input::StateInstalled`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstallOutcome {
    /// The state is installed: every instance up to `last` is executed, the last batch's
    /// timestamp was `timestamp_ms`, the client sessions are `sessions`, and the view the
    /// state ends in is `view` (when the executor keeps members).
    Installed {
        last: ConsensusId,
        timestamp_ms: u64,
        sessions: Vec<(ClientId, RequestSeq)>,
        view: Option<tagma_wire::View>,
    },
    /// Not enough digests matched (or the checkpoint did not check or install): the runtime
    /// rolled back; another source is tried.
    Rejected { reason: String },
}

/// Whether a decided batch orders a view change (an undecodable one does not).
fn changes_view(decided: &DecidedInstance) -> bool {
    <tagma_wire::Batch as tagma_wire::Decode>::decode(&decided.batch).is_ok_and(|b| {
        b.requests
            .iter()
            .any(|e| e.request.kind == tagma_wire::RequestKind::Reconfigure)
    })
}

/// What a [`Fetch`] step asks of the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchOut {
    Broadcast(tagma_wire::PeerMessage),
    Send {
        to: ReplicaId,
        msg: tagma_wire::PeerMessage,
    },
    /// Store `data` at `offset` of the incoming checkpoint (chunks come in order, from 0).
    StoreChunk {
        cid: ConsensusId,
        offset: u64,
        data: Bytes,
    },
    Install(StateToInstall),
}

/// The fixed parts of a fetch.
#[derive(Clone, Debug)]
pub struct FetchParams {
    pub me: ReplicaId,
    pub peers: usize,
    /// f+1 (BFT) or 1 (CFT).
    pub one_correct: usize,
    pub chunk_bytes: u32,
    pub state_bytes_max: u64,
    pub timeout_ms: u64,
    /// A joining replica knows only the view that added it: decisions of earlier views
    /// carry proofs its checker cannot judge. They are held unverified, and the executor,
    /// which replays from the checkpoint's view, verifies every one before the state is
    /// installed.
    pub joining: bool,
    /// The state vote after a restart contradicted this replica's state: the state at its
    /// own position is fetched to replace it (see [`StateToInstall::repair`]).
    pub repair: bool,
}

mod fetch;
mod plan;
#[cfg(test)]
mod tests;

pub use self::fetch::Fetch;
