//! What the core asks its driver to do ([`Action`]), and the decisions it hands to execution.

use bytes::Bytes;
use tagma_wire::{
    Batch, ClientId, Collect, ConsensusId, DecidedInstance, Digest, Epoch, PeerMessage, Regency,
    ReplicaId, RequestSeq, View,
};

use crate::transfer::StateToInstall;

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
