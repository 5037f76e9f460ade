//! The messages of execute-verify replication (Eve) in its primary-backup deployment: two
//! servers that both execute each batch and compare tokens, and the incremental state
//! transfer of a server that comes back. Clients use the ordinary [`ClientMessage`] and
//! [`ReplicaMessage`].
//!
//! [`ClientMessage`]: crate::ClientMessage
//! [`ReplicaMessage`]: crate::ReplicaMessage

use bytes::Bytes;

use crate::ids::{ClientId, Digest, RequestSeq};

/// A client's request as a batch carries it (authenticated by the server that took it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EveRequest {
    pub client: ClientId,
    pub seq: RequestSeq,
    pub payload: Bytes,
}

/// A numbered batch with the non-deterministic inputs every executor uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EveBatch {
    pub seq: u64,
    pub seed: u64,
    pub timestamp_ms: u64,
    pub requests: Vec<EveRequest>,
}

/// One committed request of a client and its reply, with its session's floor (every
/// request number at or below it counts as done) and the batch of the session's last commit:
/// what a server needs to answer retransmissions exactly once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EveSession {
    pub client: ClientId,
    pub seq: RequestSeq,
    pub floor: RequestSeq,
    pub last_batch: u64,
    pub reply: Bytes,
}

/// A position in the object tree: the first `depth` (≤ 16) four-bit slots of a path, in the
/// top bits of `bits`, the rest zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreePrefix {
    pub depth: u8,
    pub bits: u64,
}

/// A node of the object tree as a donor describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeNode {
    /// The donor has no node there (its state moved on, or the prefix was wrong).
    Absent,
    /// The root of an empty tree.
    Empty,
    /// One object.
    Leaf { id: u64, value: Bytes },
    /// A branch's children: slots (ascending, below 16) and digests.
    Branch { children: Vec<(u8, Digest)> },
}

/// Server-to-server messages of the primary-backup deployment. `view` numbers the primary's
/// term (server `view % 2` is primary); `run` counts the primary's rollbacks in the view, so
/// a token of a run rolled back is recognised and ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EveMessage {
    /// Primary → backup: execute `batch` (in order if `sequential`); every batch up to
    /// `committed` is committed.
    ExecuteBatch {
        view: u64,
        run: u32,
        committed: u64,
        sequential: bool,
        batch: EveBatch,
    },
    /// Backup → primary: the token the backup computed for batch `seq`.
    Token {
        view: u64,
        run: u32,
        seq: u64,
        token: Digest,
    },
    /// Primary → backup: every batch up to `committed` is committed. Sent when no batch
    /// carries it, and as the primary's heartbeat.
    Commit { view: u64, committed: u64 },
    /// Primary → backup: the tokens of batch `seq` differed. Roll back to the committed
    /// state; the batches from `seq` come again, `seq` in order, in run `run`.
    Rollback { view: u64, run: u32, seq: u64 },
    /// A server that (re)starts, to the other: send me the committed state.
    Join { view: u64 },
    /// Primary → joining server: the committed state of batch `seq` to fetch, its token,
    /// root digest and what else the token covers (none for batch 0), and the clients'
    /// sessions; `run` is the primary's, which the joiner takes.
    StateOffer {
        view: u64,
        run: u32,
        seq: u64,
        token: Digest,
        root: Digest,
        proof: Option<EveTokenProof>,
        sessions: Vec<EveSession>,
    },
    /// Joining server → primary: describe these nodes of the state offered for `seq`.
    TreeQuery { seq: u64, prefixes: Vec<TreePrefix> },
    /// Primary → joining server: the nodes asked for.
    TreeNodes {
        seq: u64,
        nodes: Vec<(TreePrefix, TreeNode)>,
    },
    /// Joining server → primary: it installed the state of batch `seq` and is ready for the
    /// next batches.
    Joined { view: u64, seq: u64 },
}

/// What a batch's token covers besides the state's root: the digest of the batch's outputs
/// and the token before it. With the root, it gives the token back, so that a server that
/// fetches a state checks it against a token it knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EveTokenProof {
    pub outputs: Digest,
    pub previous: Digest,
}
