//! A replica's storage: the IO behind the core's log, checkpoints, state transfer and (with
//! `[storage] durability = "fsync"`) durable votes. With durability the log and checkpoints
//! are files (`tagma_storage::Log`, `CheckpointStore`); without, the same threads keep them
//! in memory (`tagma_storage::MemoryLog`, `MemoryCheckpoints`), so a replica without a disk
//! still serves state to the others and fetches its own after a restart.
//!
//! ```text
//!  consensus thread ── PersistVote/WriteVotes: writes the votes of every instance not yet
//!        │            logged (votes.rs); flushes them when the core asks (an ACCEPT waits)
//!        ├── Deliver ──► execution thread ── executes, replies at once
//!        └── Append(cid, decided instance + proof) ──► log thread (log_thread.rs)
//!                  appends every record queued, one flush (group commit) ── durable_below
//!  execution thread ── at its staggered checkpoint point: (cid, executor checkpoint) ──►
//!  checkpoint thread (checkpoint_thread.rs): waits for the log, writes it (files: tmp,
//!  fsync, rename, dir fsync) ── Release(cid) ──► log thread drops what it covers
//! ```
//!
//! **Votes before ACCEPTs** (`tagma_storage::VoteStore`): a replica sends an ACCEPT only
//! once its votes on the instance (the collect it would report in a leader change) are
//! flushed, so a decision is on the disks of the replicas that accepted it before anyone can
//! deliver it. **Parallel logging**: a batch is logged while it executes, and its replies
//! leave as soon as it is executed: a crash of every replica before the log flush decides
//! the instance again with the same value (the restored votes bind it). Checkpoints are
//! written by their own thread, so a large one stalls neither ordering nor logging. At
//! start, local recovery (recovery.rs) rebuilds the executor from the newest checkpoint and
//! the log after it, and hands the core the position, the sessions and the recent decisions
//! (for forwarding) to resume with.
//!
//! **State transfer** (`tagma_core::transfer`): the core decides what to fetch and checks
//! every decision's proof; here are its hands (transfer_thread.rs). The *transfer* thread reads
//! chunks of this replica's checkpoints for peers and stores incoming chunks in
//! `incoming.part`; the storage thread reads runs of logged decisions for peers; the
//! execution thread validates a fetched state ([`ExecStorage::install`]: digest, replay,
//! vouchers), rolls back if it does not validate, and otherwise checkpoints it durably and
//! restarts the log after it before the core goes on.

mod checkpoint_thread;
mod log_thread;
mod recovery;
mod stall;
mod transfer_thread;
mod votes;

use bytes::Bytes;
use tagma_core::transfer::StateToInstall;
use tagma_wire::{DecidedInstance, ReplicaId};

pub(crate) use self::{
    checkpoint_thread::{ExecStorage, checkpoint_loop},
    log_thread::storage_loop,
    recovery::recover_or_quarantine,
    stall::FlushStall,
    transfer_thread::transfer_loop,
    votes::VoteWriter,
};

/// What the storage thread is asked to do.
pub(crate) enum StorageEvent {
    /// Log decided instance `cid` with its proof (encoded by the storage thread, off the
    /// consensus thread).
    Append { cid: u64, decided: DecidedInstance },
    /// A checkpoint of `cid` is durable: drop the log segments it covers.
    Release { cid: u64 },
    /// Send `to` the logged decisions `from ..` (at most `count`, and at most `bytes_max`
    /// bytes of messages) as `LogEntry`s, then tell the consensus thread what was not used
    /// (`ConsensusEvent::LogServed`).
    ReadLog {
        to: ReplicaId,
        from: u64,
        count: u32,
        bytes_max: u64,
    },
    /// State transfer: the checkpoint of `checkpoint` is durable and `entries` are the
    /// proven decisions after it; log those not logged yet (restarting the log after the
    /// checkpoint if it does not reach it) and flush. Sent by the consensus thread before the
    /// core hears of the install, so it comes before any later instance's `Append`.
    Installed {
        /// `None`: replayed from the initial state (no checkpoint installed).
        checkpoint: Option<u64>,
        entries: Vec<DecidedInstance>,
        /// The state replaced one the state vote contradicted: the log restarts after the
        /// checkpoint (its records came from the same disk).
        repair: bool,
    },
}

/// A checkpoint for the checkpoint thread to write.
pub(crate) struct CheckpointJob {
    pub cid: u64,
    /// Serialised by the checkpoint thread (`DeferredCheckpoint::finish`).
    pub state: tagma_exec::DeferredCheckpoint,
    /// How long taking it held the execution thread.
    pub taken_ms: u64,
}

/// What the transfer thread is asked to do.
pub(crate) enum TransferJob {
    ReadChunk {
        to: ReplicaId,
        cid: u64,
        offset: u64,
        len: u32,
    },
    StoreChunk {
        offset: u64,
        data: Bytes,
    },
    /// Every chunk is stored: hand the fetched state to the execution thread (through here,
    /// so that it never reads a chunk not yet written).
    Install(StateToInstall),
}
