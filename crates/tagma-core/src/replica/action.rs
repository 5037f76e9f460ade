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
    /// The instance with the signatures of its decision (its proof), for the runtime's log,
    /// from which it serves replicas that catch up or fetch state.
    pub logged: DecidedInstance,
}

/// What the driver must do. Carry actions out in the order they are polled; an action that
/// names an [`Input`](super::Input) expects the driver to give it back once done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send to every other member of the view.
    Broadcast(PeerMessage),
    /// Send to one member.
    Send { to: ReplicaId, msg: PeerMessage },
    /// Execute a decided batch. Emitted exactly once per instance, in instance order. Once a
    /// fetched state is installed ([`Action::InstallState`]), the executor skips the
    /// deliveries it covers (they were decided while the state was fetched); the runtime
    /// logs `logged` meanwhile (the decision with its proof: on disk, or in memory without
    /// durability), to serve it to replicas that fetch state.
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
    /// A client sent a request of an older view: tell it the installed `view` (public, so
    /// nothing needs authenticating first).
    SendCurrentView { client: ClientId, view: View },
    /// A new regency was installed (observability: logs, metrics, failover measurements).
    RegencyInstalled { regency: Regency, leader: ReplicaId },
    /// This replica is behind by instances that no peer keeps in memory any more; it needs
    /// a checkpoint and log from the others. The core starts fetching them at once (the
    /// actions below); this is reported for logs and metrics.
    StateTransferNeeded {
        next_cid: ConsensusId,
        known_decided: ConsensusId,
    },
    /// State transfer, serving side: send `to` the `len` bytes at `offset` of this replica's
    /// checkpoint of `cid` as a [`PeerMessage::Chunk`] (the core checked the range against
    /// the checkpoint it announced; an empty chunk says the checkpoint is gone).
    ReadChunk {
        to: ReplicaId,
        cid: ConsensusId,
        offset: u64,
        len: u32,
    },
    /// State transfer and catch-up, serving side: send `to` the logged decisions `from ..`
    /// as [`PeerMessage::LogEntry`]s: at most `count`, stopping at the first the log lacks
    /// and before the first that would take the encoded messages past `bytes_max` (what is
    /// left of the peer's answer budget). Then give back
    /// [`Input::LogServed`](super::Input::LogServed) with what was not used.
    ReadLog {
        to: ReplicaId,
        from: ConsensusId,
        count: u32,
        bytes_max: u64,
    },
    /// State transfer, fetching side: store this part of the incoming checkpoint (chunks come
    /// in order from offset 0; a new fetch starts again from 0).
    StoreChunk {
        cid: ConsensusId,
        offset: u64,
        data: Bytes,
    },
    /// Durable replicas: add this replica's votes on instance `votes.cid` (the collect it
    /// would report in a leader change, unsigned: the values it wrote and the highest epoch
    /// in which it saw a write quorum) to the next vote record. A `PersistVote` supersedes
    /// the earlier ones of the same instance (lower `seq`); the record keeps each instance's
    /// newest until that instance's decision is durable in the log, and the highest
    /// `regency` seen always (a regency is recorded when installed, before this replica says
    /// anything in it). [`Action::WriteVotes`] writes the record.
    PersistVote { seq: u64, votes: Collect },
    /// Durable replicas: write the vote record of everything persisted so far; with `flush`,
    /// flush it to the disk and give back [`Input::VotesDurable`](super::Input::VotesDurable)
    /// with the newest `PersistVote` `seq`. The core asks for a flush when a WRITE, an ACCEPT
    /// or an installed regency's STOPDATA waits for the votes behind it: none leaves before
    /// they are durable, so a replica that crashes and restarts never forgets a value it
    /// wrote or may have helped decide (it reads its votes back: [`Recovered::votes`]).
    ///
    /// [`Recovered::votes`]: super::Recovered::votes
    ///
    /// The instances before `next` are decided: the record may leave out the votes of those
    /// already in the log (at most [`LOG_LAG_MAX`](super::LOG_LAG_MAX) of them are not).
    WriteVotes { flush: bool, next: ConsensusId },
    /// Durable replicas: the next proposal of a leader waits until instance `cid` is in the
    /// log, flushed (so ordering never runs ahead of the log, and requests arriving meanwhile
    /// join the next batch); so does the instance in progress of a replica that decided
    /// [`LOG_LAG_MAX`](super::LOG_LAG_MAX) instances beyond its log (a stalled disk holds it
    /// back instead of queueing without bound). Give
    /// [`Input::LogDurable`](super::Input::LogDurable) once it is; a report that falls short
    /// is answered by this action again.
    AwaitLogDurable { cid: ConsensusId },
    /// State transfer, fetching side: every part arrived; validate and install it (see
    /// [`crate::transfer`]), then give back
    /// [`Input::StateInstalled`](super::Input::StateInstalled). The core may still deliver
    /// instances meanwhile (decided by the others while the state was fetched): once a state
    /// is installed, the executor skips the `Deliver`s of instances it covers, and the log
    /// takes none of them.
    InstallState(StateToInstall),
    /// Durable replicas, at the end of the start-up synchronisation (the state vote on the
    /// recovered state): compute the digest a checkpoint of the state after instance `cid` —
    /// the last one delivered — would have, without writing it, and give it back as
    /// [`Input::StateDigest`](super::Input::StateDigest).
    DigestState { cid: ConsensusId },
    /// Durable replicas whose state vote stands, once a peer's vote contradicted it (the
    /// fresh checkpoint that peer repairs from): checkpoint the state after instance `cid` —
    /// the last one delivered, or a later one if the runtime executed more meanwhile — now,
    /// whatever the staggered points say, and give back
    /// [`Input::CheckpointWritten`](super::Input::CheckpointWritten) once it is durable.
    CheckpointNow { cid: ConsensusId },
}
