//! Durability (SPEC §4), when `[storage] durability = "fsync"`.
//!
//! ```text
//!  consensus thread ── after each round of actions, writes the votes of every instance
//!        │            not yet logged (VoteWriter); fdatasync when an ACCEPT waits for them,
//!        │            then sends that ACCEPT
//!        ├── Deliver ──► execution thread ── executes, replies at once
//!        └── Append(cid, decided instance + proof) ──► storage thread
//!                  appends every record queued, one fdatasync (group commit) ── durable_below
//!  execution thread ── at its staggered checkpoint point: (cid, executor checkpoint) ──►
//!  checkpoint thread: waits for the log, writes it (tmp, fsync, rename, dir fsync) ──
//!  Release(cid) ──► storage thread drops the log segments the checkpoint covers
//! ```
//!
//! **Votes before ACCEPTs** (`tagma_storage::VoteStore`): a replica sends an ACCEPT only
//! once its votes on the instance (the collect it would report in a leader change) are
//! synced, so a decision is on the disks of the replicas that accepted it before anyone can
//! deliver it. **Parallel logging**: a batch is logged while it executes, and its replies
//! leave as soon as it is executed: a crash of every replica before the log sync decides the
//! instance again with the same value (the restored votes bind it). Checkpoints are written
//! by their own thread, so a large one stalls neither ordering nor logging. At start, [`recover`]
//! rebuilds the executor from the newest checkpoint and the log after it, and hands the core
//! the position, the sessions and the recent decisions (for forwarding) to resume with.
//!
//! **State transfer** (`tagma_core::transfer`): the core decides what to fetch and checks
//! every decision's proof; here are its hands. The *transfer* thread reads chunks of this
//! replica's checkpoints for peers and stores incoming chunks in `incoming.part`; the
//! storage thread reads runs of logged decisions for peers; the execution thread validates
//! a fetched state ([`DurableExec::install`]: digest, replay, vouchers), rolls back if it
//! does not validate, and otherwise checkpoints it durably and restarts the log after it
//! before the core goes on.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use tagma_core::ValidConfig;
use tagma_core::transfer::{InstallOutcome, StateToInstall};
use tagma_exec::{Executor, Service};
use tagma_storage::{CheckpointStore, Log, LogOptions, VoteStore};
use tagma_wire::{
    Batch, CheckpointInfo, ConsensusId, DecidedInstance, Decode, Encode, PeerMessage, ReplicaId,
};
use tracing::{debug, error, info, warn};

use crate::{ConsensusEvent, ExecEvent, Metrics, NodeError, Shared, send_peer};

/// What the storage thread is asked to do.
pub(crate) enum StorageEvent {
    /// Log decided instance `cid` with its proof (encoded by the storage thread, off the
    /// consensus thread).
    Append { cid: u64, decided: DecidedInstance },
    /// A checkpoint of `cid` is durable: drop the log segments it covers.
    Release { cid: u64 },
    /// Send `to` the logged decisions `from ..` (at most `count`) as `LogEntry`s.
    ReadLog {
        to: ReplicaId,
        from: u64,
        count: u32,
    },
    /// State transfer: the checkpoint of `checkpoint` is durable and `entries` are the
    /// proven decisions after it; log those not logged yet (restarting the log after the
    /// checkpoint if it does not reach it) and sync. Sent by the consensus thread before the
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

/// What recovery found on disk.
pub(crate) struct Recovered {
    pub log: Log,
    pub store: CheckpointStore,
    /// The last instance recovered (`None`: nothing durable yet).
    pub last: Option<ConsensusId>,
    /// The newest logged decisions, oldest first (at most `decisions_kept`).
    pub recent: Vec<DecidedInstance>,
    /// The checkpoint recovered from, as offered to replicas that need state.
    pub checkpoint: Option<CheckpointInfo>,
    /// The votes this replica cast before it stopped, newest first, and their store.
    pub votes: Vec<tagma_wire::Collect>,
    pub vote_store: VoteStore,
}

/// The replica's storage directories under its data directory.
fn paths(data_dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    (
        data_dir.join("checkpoints"),
        data_dir.join("log"),
        data_dir.join("votes"),
    )
}

/// Why local recovery failed.
enum Failure {
    /// The disk could not be read or written: the replica must not start.
    Io(String),
    /// What is on disk is damaged (a corrupt checkpoint or record, a gap, something that
    /// does not decode or install).
    Damaged(String),
}

impl From<&tagma_storage::StorageError> for Failure {
    fn from(e: &tagma_storage::StorageError) -> Self {
        match e {
            tagma_storage::StorageError::Io { .. } => Failure::Io(e.to_string()),
            _ => Failure::Damaged(e.to_string()),
        }
    }
}

/// Local recovery, and what to do when the disk's state is damaged: the damaged directory is
/// moved aside (kept for inspection, never deleted) and the replica starts empty; the start-up
/// synchronisation and decision forwarding then bring it what it misses from the others,
/// whose decisions carry proofs, instead of guessing from a damaged disk. (Until state
/// transfer exists, this works while the others still keep every decision it misses:
/// `limits.decisions_kept`.) A disk that cannot be read at all stops the replica.
pub(crate) fn recover_or_quarantine<S: Service>(
    cfg: &ValidConfig,
    data_dir: &Path,
    executor: &mut Executor<S>,
    metrics: &Metrics,
) -> Result<Recovered, NodeError> {
    let fail = |reason: String| NodeError::StartupSync {
        dir: data_dir.to_path_buf(),
        reason,
    };
    let empty = executor.checkpoint();
    match recover(cfg, data_dir, executor) {
        Ok(r) => return Ok(r),
        Err(Failure::Io(reason)) => return Err(fail(reason)),
        Err(Failure::Damaged(reason)) => {
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            let mut aside = data_dir.as_os_str().to_owned();
            aside.push(format!(".damaged-{stamp}"));
            let aside = PathBuf::from(aside);
            std::fs::rename(data_dir, &aside)
                .and_then(|()| std::fs::create_dir_all(data_dir))
                .map_err(|e| fail(format!("{reason}; moving it aside failed: {e}")))?;
            error!(
                moved_to = %aside.display(),
                "the durable state is damaged ({reason}): moved aside; starting empty and fetching the state from the other replicas"
            );
            metrics.state_discarded.store(1, Ordering::Relaxed);
            executor
                .restore(&empty)
                .map_err(|e| fail(format!("cannot reset the executor: {e}")))?;
        }
    }
    recover(cfg, data_dir, executor).map_err(|f| match f {
        Failure::Io(reason) | Failure::Damaged(reason) => fail(reason),
    })
}

/// Local recovery: the newest valid checkpoint into `executor`, then the logged instances
/// after it, executed in order (their replies are cached, not sent).
fn recover<S: Service>(
    cfg: &ValidConfig,
    data_dir: &Path,
    executor: &mut Executor<S>,
) -> Result<Recovered, Failure> {
    let started = std::time::Instant::now();
    let (ckp_dir, log_dir, votes_dir) = paths(data_dir);
    let store = CheckpointStore::open(ckp_dir).map_err(|e| Failure::from(&e))?;
    // A torn vote file holds nothing (it is the write a crash interrupted); only an
    // unreadable disk fails here.
    let (vote_store, stored) = VoteStore::open(votes_dir).map_err(|e| Failure::from(&e))?;
    let mut votes = Vec::new();
    for v in stored {
        // The record's checksum held: bytes that do not decode are damage, not a torn write.
        let collects = decode_votes(&v.payload).ok_or_else(|| {
            Failure::Damaged(format!(
                "the vote record of instance {} does not decode",
                v.cid
            ))
        })?;
        votes.extend(collects);
    }
    let options = LogOptions {
        dir: log_dir,
        segment_bytes: cfg.raw.storage.log_segment_bytes,
    };
    let kept = cfg.raw.limits.decisions_kept;
    let mut recent: VecDeque<DecidedInstance> = VecDeque::new();
    let mut checkpoint_cid = None;
    let mut checkpoint = None;
    // When the checkpoint was read and checked (before it is decoded into the executor).
    let mut restored_ms = None;
    // Both steps of recovery change the executor, one after the other.
    let executor = std::cell::RefCell::new(executor);
    let (log, last) = tagma_storage::recover(
        &store,
        options,
        |ckp| {
            checkpoint_cid = Some(ckp.cid);
            checkpoint = Some(CheckpointInfo {
                cid: ConsensusId(ckp.cid),
                len: ckp.state.len() as u64,
                digest: tagma_wire::Digest(ckp.digest),
            });
            let mut executor = executor.borrow_mut();
            restored_ms = Some(started.elapsed().as_millis() as u64);
            executor
                .restore(&Bytes::copy_from_slice(&ckp.state))
                .map_err(|e| e.to_string())?;
            if executor.executed_instances() != ckp.cid + 1 {
                return Err(format!(
                    "the checkpoint's executor state is at instance {}, its file says {}",
                    executor.executed_instances(),
                    ckp.cid + 1
                ));
            }
            Ok(())
        },
        |cid, payload| {
            let decided = DecidedInstance::decode(&Bytes::copy_from_slice(payload))
                .map_err(|e| format!("record does not decode: {e}"))?;
            if decided.cid.0 != cid {
                return Err(format!("record holds instance {}", decided.cid));
            }
            let batch =
                Batch::decode(&decided.batch).map_err(|e| format!("batch does not decode: {e}"))?;
            executor.borrow_mut().execute_batch(decided.cid, &batch);
            recent.push_back(decided);
            if recent.len() > kept {
                recent.pop_front();
            }
            Ok(())
        },
    )
    .map_err(|e| match &e {
        tagma_storage::RecoverError::Storage(s) => Failure::from(s),
        other => Failure::Damaged(other.to_string()),
    })?;
    let executor = executor.into_inner();
    // The replayed decisions are in `recent`; the log also keeps up to `decisions_kept` that
    // the checkpoint covers: read those too (only those), so this replica can prove its
    // position to replicas that are behind, after any restart.
    if let (Some(ckp), Some(last)) = (checkpoint_cid, last)
        && recent.len() < kept
    {
        let first = (last + 1).saturating_sub(kept as u64);
        let first = first.max(log.first_cid().unwrap_or(first));
        let mut older = VecDeque::new();
        let mut undecodable = None;
        log.replay_range(
            first..ckp + 1,
            |cid, payload| -> Result<(), tagma_storage::StorageError> {
                match DecidedInstance::decode(&Bytes::copy_from_slice(payload)) {
                    Ok(decided) => older.push_back(decided),
                    Err(e) => undecodable = Some(format!("record {cid} does not decode: {e}")),
                }
                Ok(())
            },
        )
        .map_err(|e| Failure::from(&e))?;
        if let Some(reason) = undecodable {
            return Err(Failure::Damaged(reason));
        }
        older.extend(recent);
        while older.len() > kept {
            older.pop_front();
        }
        recent = older;
    }
    if let Some(last) = last {
        info!(
            last_instance = last,
            executed_requests = executor.executed_requests(),
            checkpoint_read_ms = restored_ms,
            ms = started.elapsed().as_millis() as u64,
            "recovered from the local checkpoint and log"
        );
    }
    Ok(Recovered {
        log,
        store,
        last: last.map(ConsensusId),
        recent: recent.into(),
        checkpoint,
        votes,
        vote_store,
    })
}

/// The storage thread: appends every record queued, syncs once, tells the execution thread.
/// A checkpoint releases the log up to `keep` instances before it (kept for forwarding).
pub(crate) fn storage_loop(
    sh: &Shared,
    mut log: Log,
    rx: Receiver<StorageEvent>,
    peers: crate::membership::PeerLinks,
) {
    let keep = sh.cfg.raw.limits.decisions_kept as u64;
    let metrics = &sh.metrics;
    // Instances up to this one are covered by a state installed by state transfer.
    let mut covered: Option<u64> = None;
    // Bounds one group: the replies of its first batch wait for all of it.
    const GROUP_MAX: usize = 1024;
    while let Ok(first) = rx.recv() {
        let mut last = None;
        let mut release = None;
        for event in std::iter::once(first).chain(rx.try_iter().take(GROUP_MAX)) {
            match event {
                StorageEvent::Append { cid, decided } => {
                    if covered.is_some_and(|c| cid <= c) {
                        continue;
                    }
                    if let Err(e) = log.append(cid, &decided.to_bytes()) {
                        error!("cannot log instance {cid}: {e}; this replica stops replying");
                        return;
                    }
                    metrics.log_records.fetch_add(1, Ordering::Relaxed);
                    last = Some(cid);
                }
                StorageEvent::Release { cid } => release = release.max(Some(cid)),
                StorageEvent::ReadLog { to, from, count } => {
                    if let Some(tx) = peers.get(to) {
                        serve_log(sh, &log, &tx, from, count);
                    }
                }
                StorageEvent::Installed {
                    checkpoint,
                    entries,
                    repair,
                } => {
                    if let Err(e) = log_installed(&mut log, checkpoint, &entries, repair) {
                        error!(
                            "cannot log the decisions of an installed state: {e}; this replica stops replying"
                        );
                        return;
                    }
                    let through = entries.last().map(|d| d.cid.0).or(checkpoint);
                    covered = covered.max(through);
                    last = last.max(through);
                }
            }
        }
        if let Some(cid) = last {
            let syncing = std::time::Instant::now();
            if let Err(e) = log.sync() {
                error!("cannot sync the log: {e}; this replica stops replying");
                return;
            }
            let us = syncing.elapsed().as_micros() as u64;
            metrics.log_syncs.fetch_add(1, Ordering::Relaxed);
            metrics.log_sync_us.fetch_add(us, Ordering::Relaxed);
            // Published first (a full execution queue must not hold the leader's next
            // proposal), and never backwards: an installed state's `through` can be below
            // instances synced before it.
            sh.durable_below.fetch_max(cid + 1, Ordering::SeqCst);
            // The internal channel is only full when the consensus thread has events to
            // handle, after each of which it looks at `durable_below` again.
            if sh.wake_on_durable.swap(false, Ordering::SeqCst) {
                let _ = sh.internal_tx.try_send(crate::ConsensusEvent::Durable);
            }
        }
        if let Some(cid) = release
            && let Err(e) = log.release_through(cid.saturating_sub(keep))
        {
            warn!("cannot release the log up to checkpoint {cid}: {e}");
        }
    }
}

/// Instances whose votes the vote writer keeps while their decisions are not yet in the log;
/// beyond it, it waits for the log (this replica's ACCEPTs wait with it).
const VOTES_PENDING_MAX: usize = 64;
/// How long the vote writer waits for a log that does not advance before this replica stops.
const LOG_WAIT_MAX: Duration = Duration::from_secs(10);

/// This replica's votes on disk (`VoteStore`), written by the consensus thread itself: the
/// ACCEPT that waits for them leaves right after their sync, with no thread hop on the way
/// (on a busy machine a hop costs a scheduling delay per replica and instance).
///
/// Every record holds the votes of each instance whose decision the storage thread has not
/// synced yet (at most [`VOTES_PENDING_MAX`]), the newest per instance: an instance's votes
/// leave the records only once its decision is durable, so the two writers need no order
/// between them. Every record also carries the highest regency installed (an empty collect
/// when no other carries it). A record is synced only when an ACCEPT (or an installed
/// regency) waits for it; otherwise it is written unsynced, a best effort that survives a
/// process crash.
///
/// An unsynced record holds only the instances whose votes changed since the last synced
/// record (a WRITE's votes on the next instance, not again the batches of the instances
/// still waiting for the log). That loses nothing: the store never overwrites the newest
/// synced record with an unsynced one, and recovery merges both files' records
/// (`recover`, newest votes per instance first). A synced record holds every pending
/// instance, because the next write may overwrite the other file.
pub(crate) struct VoteWriter {
    store: VoteStore,
    /// By instance: the newest collect's regency and its encoding (encoded once, written
    /// with every record until the instance is logged).
    pending: std::collections::BTreeMap<u64, (tagma_wire::Regency, Bytes)>,
    /// The highest regency this replica installed: every record carries it, even when the
    /// instances whose collects carried it are all logged (a restart goes on from it).
    regency: Option<(tagma_wire::Regency, ReplicaId)>,
    /// The instances whose votes changed since the last synced record: what an unsynced
    /// record holds.
    changed: std::collections::BTreeSet<u64>,
    /// The newest `PersistVote` added; whether a vote was added since the last record;
    /// whether the last record was written unsynced.
    added: u64,
    dirty: bool,
    unsynced: bool,
    buf: Vec<u8>,
}

impl VoteWriter {
    /// `restored` are the votes read back at start, newest record first: they stay in the
    /// records until their instances are logged too (the core reports restored votes only
    /// for the instance in progress, and a later one may be restored as well). Before
    /// anything else it writes them all back as one synced record: the newest record on disk
    /// may be an unsynced one holding only some of them (the store, which takes it for the
    /// newest, lets the next write overwrite the other file), and a power cut must not leave
    /// only that one.
    /// `logged_below`: the instances below it are in the recovered log.
    pub(crate) fn new(
        store: VoteStore,
        restored: &[tagma_wire::Collect],
        logged_below: u64,
    ) -> Result<Self, String> {
        let regency = restored.iter().map(|c| (c.regency, c.replica)).max();
        let mut pending = std::collections::BTreeMap::new();
        // An empty collect carries only a regency (the marker of a record none of whose
        // other collects did, with the instance at which it was written): it must not stand
        // for that instance's votes, which an older record may hold. `regency` keeps it.
        let votes = restored
            .iter()
            .filter(|c| c.write_quorum.is_some() || !c.write_set.is_empty());
        for collect in votes {
            pending
                .entry(collect.cid.0)
                .or_insert_with(|| (collect.regency, collect.to_bytes()));
        }
        let mut writer = VoteWriter {
            store,
            regency,
            changed: std::collections::BTreeSet::new(),
            pending,
            added: 0,
            dirty: false,
            unsynced: false,
            buf: Vec::new(),
        };
        if !restored.is_empty() {
            writer.write_record(true, logged_below)?;
        }
        Ok(writer)
    }

    /// Takes the core's `PersistVote { seq, votes }`, superseding its earlier votes on that
    /// instance; [`VoteWriter::flush`] writes it.
    pub(crate) fn add(&mut self, seq: u64, votes: &tagma_wire::Collect) {
        self.added = self.added.max(seq);
        self.regency = self.regency.max(Some((votes.regency, votes.replica)));
        self.pending
            .insert(votes.cid.0, (votes.regency, votes.to_bytes()));
        self.changed.insert(votes.cid.0);
        self.dirty = true;
    }

    /// Writes a record of every vote added, synced if `sync` (if no vote was added since
    /// the last record, only to sync an unsynced one). Returns the newest `PersistVote`
    /// sequence number now durable, if this record is synced. `decided_below`: the instances
    /// below it are decided (and handed to the storage thread). With more than
    /// [`VOTES_PENDING_MAX`] instances pending it first waits (at most [`LOG_WAIT_MAX`]) for
    /// the log to catch up with those.
    pub(crate) fn flush(
        &mut self,
        sh: &Shared,
        sync: bool,
        decided_below: u64,
    ) -> Result<Option<u64>, String> {
        if !(self.dirty || sync && self.unsynced) {
            return Ok(None);
        }
        let started = std::time::Instant::now();
        let logged_below = loop {
            let logged_below = sh.durable_below.load(Ordering::SeqCst);
            self.pending.retain(|cid, _| *cid >= logged_below);
            // Waiting helps only while the log has decided instances to catch up with: the
            // others (votes restored after a crash on instances not decided yet) only this
            // thread can retire, by deciding them.
            if self.pending.len() <= VOTES_PENDING_MAX || logged_below >= decided_below {
                break logged_below;
            }
            if started.elapsed() > LOG_WAIT_MAX {
                return Err(format!(
                    "the log stays below instance {decided_below} for {} s while the votes of {} instances wait for it",
                    LOG_WAIT_MAX.as_secs(),
                    self.pending.len()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let writing = std::time::Instant::now();
        self.write_record(sync, logged_below)?;
        if !sync {
            return Ok(None);
        }
        let us = writing.elapsed().as_micros() as u64;
        sh.metrics.vote_syncs.fetch_add(1, Ordering::Relaxed);
        sh.metrics.vote_sync_us.fetch_add(us, Ordering::Relaxed);
        Ok(Some(self.added))
    }

    /// Writes the next record (see [`VoteWriter::encode_record`]); the instances below
    /// `logged_below` are in the log and leave the records.
    fn write_record(&mut self, sync: bool, logged_below: u64) -> Result<(), String> {
        let newest = self.encode_record(sync, logged_below);
        self.store
            .write(newest, &self.buf, sync)
            .map_err(|e| format!("cannot write this replica's votes: {e}"))?;
        self.dirty = false;
        self.unsynced = !sync;
        if sync {
            self.changed.clear();
        }
        Ok(())
    }

    /// Encodes into `buf` the next record (every pending instance if `sync`, else those
    /// changed since the last synced record), with the regency marker when none of its
    /// collects carries the highest regency. Returns the newest instance it holds.
    fn encode_record(&mut self, sync: bool, logged_below: u64) -> u64 {
        self.pending.retain(|cid, _| *cid >= logged_below);
        self.changed.retain(|cid| *cid >= logged_below);
        let held: Vec<(&u64, &(tagma_wire::Regency, Bytes))> = if sync {
            self.pending.iter().collect()
        } else {
            self.pending
                .iter()
                .filter(|(cid, _)| self.changed.contains(cid))
                .collect()
        };
        let marker = self
            .regency
            .filter(|(r, _)| held.iter().all(|(_, (c, _))| c < r))
            .map(|(regency, replica)| {
                tagma_wire::Collect {
                    replica,
                    regency,
                    cid: ConsensusId(logged_below),
                    write_quorum: None,
                    write_set: Vec::new(),
                }
                .to_bytes()
            });
        let record: Vec<&[u8]> = held
            .iter()
            .map(|(_, (_, bytes))| &bytes[..])
            .chain(marker.as_deref())
            .collect();
        encode_votes(&mut self.buf, &record);
        held.last().map_or(logged_below, |(cid, _)| **cid)
    }
}

/// A vote record's payload: the count, then each encoded collect, length-prefixed.
fn encode_votes(out: &mut Vec<u8>, collects: &[&[u8]]) {
    out.clear();
    out.extend_from_slice(&(collects.len() as u32).to_le_bytes());
    for bytes in collects {
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
}

/// The collects of a vote record's payload (`None`: it does not decode).
fn decode_votes(payload: &[u8]) -> Option<Vec<tagma_wire::Collect>> {
    let mut rest = payload;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = rest.split_at_checked(n)?;
        rest = tail;
        Some(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?);
    let mut votes = Vec::new();
    for _ in 0..count {
        let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let bytes = Bytes::copy_from_slice(take(len)?);
        votes.push(tagma_wire::Collect::decode(&bytes).ok()?);
    }
    take(0)?;
    rest.is_empty().then_some(votes)
}

/// Sends `to` the logged decisions `from ..` (at most `count`), stopping at the first the
/// log does not hold.
fn serve_log(sh: &Shared, log: &Log, tx: &Sender<Bytes>, from: u64, count: u32) {
    let first = log.first_cid().unwrap_or(u64::MAX);
    let last = log.last_cid().unwrap_or(0);
    if from < first || from > last {
        return;
    }
    let end = from.saturating_add(u64::from(count)).min(last + 1);
    let mut entries = Vec::new();
    let read = log.replay_range(
        from..end,
        |_, payload| -> Result<(), tagma_storage::StorageError> {
            if let Ok(d) = DecidedInstance::decode(&Bytes::copy_from_slice(payload)) {
                entries.push(d);
            }
            Ok(())
        },
    );
    if let Err(e) = read {
        warn!("cannot read the log for a replica fetching state: {e}");
    }
    for d in entries {
        send_peer(sh, tx, PeerMessage::LogEntry(d).to_bytes());
    }
}

/// The checkpoint thread: writes each checkpoint handed to it, tells the core (which offers
/// it to replicas that need state), then lets the storage thread release the log up to the
/// previous checkpoint (the two newest are kept and served).
pub(crate) fn checkpoint_loop(
    sh: &Shared,
    store: CheckpointStore,
    rx: Receiver<CheckpointJob>,
    storage_tx: Sender<StorageEvent>,
) {
    let mut previous: Option<u64> = None;
    while let Ok(job) = rx.recv() {
        let cid = job.cid;
        // A checkpoint must not be on disk before its instance's log record: after a crash of
        // every replica, a replica recovered from it would be ahead of every proof it can
        // give (found by the simulator, regression seed 2095). The log normally syncs well
        // before the snapshot is serialised; a log that stopped (its thread reported the
        // error) skips the checkpoint, which is always safe.
        if !wait_for_log(sh, cid) {
            warn!("the log did not reach instance {cid} in time: its checkpoint is skipped");
            continue;
        }
        let serialising = std::time::Instant::now();
        let state = job.state.finish();
        let serialise_ms = serialising.elapsed().as_millis() as u64;
        match store.write(cid, &state) {
            Ok((path, digest)) => {
                sh.metrics.checkpoints.fetch_add(1, Ordering::Relaxed);
                info!(
                    instance = cid,
                    bytes = state.len(),
                    taken_ms = job.taken_ms,
                    serialise_ms,
                    write_ms = serialising.elapsed().as_millis() as u64 - serialise_ms,
                    file = %path.display(),
                    "checkpoint written"
                );
                let info = CheckpointInfo {
                    cid: ConsensusId(cid),
                    len: state.len() as u64,
                    digest: tagma_wire::Digest(digest),
                };
                if sh
                    .internal_tx
                    .send(ConsensusEvent::Checkpointed(info))
                    .is_err()
                {
                    return;
                }
                if let Some(p) = previous
                    && storage_tx.send(StorageEvent::Release { cid: p }).is_err()
                {
                    return;
                }
                previous = Some(cid);
            }
            Err(e) => warn!("cannot write the checkpoint of instance {cid}: {e}"),
        }
    }
}

/// Waits (bounded) until the storage thread has synced instance `cid`.
fn wait_for_log(sh: &Shared, cid: u64) -> bool {
    const WAIT_MAX: Duration = Duration::from_secs(10);
    let start = std::time::Instant::now();
    loop {
        if sh.durable_below.load(Ordering::SeqCst) > cid {
            return true;
        }
        if start.elapsed() > WAIT_MAX {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The transfer thread: serves chunks of this replica's checkpoints to peers, and stores the
/// chunks of a checkpoint this replica fetches.
pub(crate) fn transfer_loop(
    sh: &Shared,
    store: CheckpointStore,
    rx: Receiver<TransferJob>,
    peers: crate::membership::PeerLinks,
    exec_tx: Sender<ExecEvent>,
) {
    while let Ok(job) = rx.recv() {
        match job {
            TransferJob::ReadChunk {
                to,
                cid,
                offset,
                len,
            } => {
                let Some(tx) = peers.get(to) else {
                    continue;
                };
                match store.read_chunk(cid, offset, len as usize) {
                    Ok(data) => {
                        sh.metrics
                            .state_bytes_served
                            .fetch_add(u64::from(len), Ordering::Relaxed);
                        let msg = PeerMessage::Chunk {
                            cid: ConsensusId(cid),
                            offset,
                            data: Bytes::from(data),
                        };
                        send_peer(sh, &tx, msg.to_bytes());
                    }
                    // Replaced by newer checkpoints meanwhile: an empty chunk tells the
                    // fetcher, which asks for fresh offers at once.
                    Err(e) => {
                        warn!("cannot read a chunk of checkpoint {cid}: {e}");
                        let msg = PeerMessage::Chunk {
                            cid: ConsensusId(cid),
                            offset,
                            data: Bytes::new(),
                        };
                        send_peer(sh, &tx, msg.to_bytes());
                    }
                }
            }
            TransferJob::StoreChunk { offset, data } => {
                sh.metrics
                    .state_bytes_fetched
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                if let Err(e) = store.store_chunk(offset, &data) {
                    // The install's digest check then fails and another attempt starts.
                    warn!("cannot store a fetched chunk: {e}");
                }
            }
            TransferJob::Install(state) => {
                if exec_tx.send(ExecEvent::Install(state)).is_err() {
                    return;
                }
            }
        }
    }
}

/// The execution thread's side of durability: replies held until their batch is logged,
/// and the staggered checkpoint points.
pub(crate) struct DurableExec {
    pub checkpoint_tx: Sender<CheckpointJob>,
    /// The consensus thread's internal channel (never full: see `Shared::internal_tx`).
    pub consensus_tx: Sender<ConsensusEvent>,
    /// Where fetched checkpoints are stored (read back at install).
    pub store: CheckpointStore,
    /// This replica's position among the members, the member count and the period.
    pub index: usize,
    pub n: usize,
    pub period: u64,
    /// The instance of the last checkpoint handed to the checkpoint thread: a fresh one asked
    /// for the same instance (`checkpoint_now`) is not taken twice (a second job could land
    /// after a repair replaced that checkpoint, and put the contradicted state back).
    pub last_queued: std::cell::Cell<Option<u64>>,
}

impl DurableExec {
    /// At this replica's checkpoint point, hands the executor's checkpoint to the checkpoint
    /// thread (skipped, with a warning, while the previous one is still being written).
    pub fn maybe_checkpoint<S: Service>(&self, cid: u64, executor: &Executor<S>) {
        if !tagma_storage::checkpoint_due(cid, self.index, self.n, self.period) {
            return;
        }
        if self.checkpoint_tx.is_full() {
            warn!(
                instance = cid,
                "previous checkpoint still being written: this one is skipped"
            );
            return;
        }
        self.checkpoint(cid, executor);
    }

    /// `Action::DigestState`: the state vote's digest of the state after `cid` (the last
    /// instance executed), streamed into the hash (no copy, nothing written), for the core.
    pub fn digest_state<S: Service>(&self, cid: u64, executor: &Executor<S>) {
        if executor.executed_instances() != cid + 1 {
            // A fetched state installed after the vote started (which ends the vote), or a
            // runtime bug: without the digest the vote ends unaudited at its deadline.
            warn!(
                instance = cid,
                executed = executor.executed_instances(),
                "state digest asked for another instance than the last executed: skipped"
            );
            return;
        }
        let started = std::time::Instant::now();
        let digest = executor.checkpoint_digest();
        info!(
            instance = cid,
            ms = started.elapsed().as_millis() as u64,
            "state hashed for the state vote"
        );
        // An error: the consensus thread has stopped (the replica is stopping).
        let _ = self.consensus_tx.send(ConsensusEvent::StateDigest {
            cid: tagma_wire::ConsensusId(cid),
            digest,
        });
    }

    /// `Action::CheckpointNow`: the fresh checkpoint a peer the state vote contradicted
    /// repairs from, of the state after `cid` or, if this thread executed further meanwhile
    /// (a state installed before the request reached it), after the last instance executed;
    /// whatever the staggered points say. Waits for a checkpoint still being written rather
    /// than skip this one.
    pub fn checkpoint_now<S: Service>(&self, cid: u64, executor: &Executor<S>) {
        let Some(last) = executor.executed_instances().checked_sub(1) else {
            return;
        };
        if last < cid {
            // Cannot happen: the core asks after its last delivery, which this thread
            // executed first. The peer's repair then waits for a staggered checkpoint.
            warn!(
                instance = cid,
                executed = executor.executed_instances(),
                "fresh checkpoint asked for an instance not executed yet: skipped"
            );
            return;
        }
        if self.last_queued.get() == Some(last) {
            // Taken at this replica's staggered point already.
            return;
        }
        self.checkpoint(last, executor);
    }

    fn checkpoint<S: Service>(&self, cid: u64, executor: &Executor<S>) {
        self.last_queued.set(Some(cid));
        let started = std::time::Instant::now();
        let state = executor.checkpoint_deferred();
        let job = CheckpointJob {
            cid,
            state,
            taken_ms: started.elapsed().as_millis() as u64,
        };
        // This thread is the only sender: an error means the checkpoint thread has ended
        // (the replica is stopping). A full queue (only for `checkpoint_now`) waits.
        if self.checkpoint_tx.send(job).is_err() {
            debug!(instance = cid, "checkpoint thread gone: checkpoint dropped");
        }
    }
}

impl DurableExec {
    /// Validates and installs a fetched state (see `tagma_core::transfer`): the stored
    /// checkpoint must have the source's digest; it is installed and the proven decisions
    /// after it replayed, comparing the state's digest at each voucher's instance; with fewer
    /// than `matches_needed` matches everything is rolled back. Once accepted, the fetched
    /// file becomes the durable checkpoint, and the decisions after it are returned for the
    /// log (the consensus thread hands them to the storage thread before any later
    /// instance). `Err`: the state is installed but could not be made durable (fatal).
    pub fn install<S: Service>(
        &mut self,
        executor: &mut Executor<S>,
        state: &StateToInstall,
    ) -> Result<(InstallOutcome, Option<StorageEvent>), String> {
        let rejected =
            |reason: String| Ok((InstallOutcome::Rejected { reason }, None::<StorageEvent>));
        let target = state.target();
        // Checked before the fetched bytes are read (install_fetched checks it again).
        if let Err(reason) = executor.can_install_through(target) {
            return rejected(reason);
        }
        let started = std::time::Instant::now();
        // A joining replica's replay from the initial state fetched no checkpoint.
        let bytes = match state.checkpoint {
            None => Bytes::new(),
            Some(_) => match self.store.read_incoming() {
                Ok(b) => Bytes::from(b),
                Err(e) => return rejected(format!("cannot read the fetched checkpoint: {e}")),
            },
        };
        let read_ms = started.elapsed().as_millis();
        match executor.install_fetched(
            &bytes,
            state.checkpoint.as_ref(),
            &state.log,
            &state.voucher_checkpoints(),
            state.matches_needed,
        ) {
            Ok(matched) => info!(
                source = %state.source,
                matched,
                needed = state.matches_needed,
                "fetched state validated"
            ),
            Err(reason) => {
                self.store.remove_incoming();
                return rejected(format!("state from replica {}: {reason}", state.source));
            }
        }
        let validated_ms = started.elapsed().as_millis();
        // Durable before the core goes on: the fetched checkpoint (already on disk: it only
        // gets its header and checksum), then the decisions after it in the log.
        if let Some(checkpoint) = state.checkpoint {
            if let Err(e) =
                self.store
                    .promote_incoming(checkpoint.cid.0, bytes.len(), &checkpoint.digest.0)
            {
                return Err(format!("cannot store the installed checkpoint: {e}"));
            }
            if self
                .consensus_tx
                .send(ConsensusEvent::Checkpointed(checkpoint))
                .is_err()
            {
                return Err("the consensus thread stopped".into());
            }
        }
        info!(
            read_ms,
            validate_ms = validated_ms - read_ms,
            store_ms = started.elapsed().as_millis() - validated_ms,
            "fetched state installed"
        );
        // The instances after the checkpoint become durable with the storage thread's sync
        // (its `Durable` event).
        let event = StorageEvent::Installed {
            checkpoint: state.checkpoint.map(|c| c.cid.0),
            entries: state.log.clone(),
            repair: state.repair,
        };
        let outcome = InstallOutcome::Installed {
            last: target,
            timestamp_ms: executor.last_timestamp_ms(),
            sessions: executor.sessions(),
            view: executor.members().cloned(),
        };
        Ok((outcome, Some(event)))
    }
}

/// Logs the decisions of a state installed by state transfer: those after what the log
/// already holds; if the log does not reach the installed checkpoint, or the state repairs
/// one the state vote contradicted, it restarts after it (without a checkpoint — a replay
/// from the initial state — the log continues).
fn log_installed(
    log: &mut Log,
    checkpoint: Option<u64>,
    entries: &[DecidedInstance],
    repair: bool,
) -> Result<(), tagma_storage::StorageError> {
    let from = match (log.last_cid(), checkpoint) {
        (Some(last), Some(c)) if last >= c && !repair => last + 1,
        (last, None) => last.map_or(0, |l| l + 1),
        (_, Some(c)) => {
            log.reset_after(c)?;
            c + 1
        }
    };
    for d in entries.iter().filter(|d| d.cid.0 >= from) {
        log.append(d.cid.0, &d.to_bytes())?;
    }
    log.sync()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagma_wire::{Collect, Digest, Epoch, Regency};

    fn collect(cid: u64, value: &'static [u8]) -> Collect {
        Collect {
            replica: ReplicaId(1),
            regency: Regency(0),
            cid: ConsensusId(cid),
            write_quorum: Some((Epoch(0), Digest([7; 32]))),
            write_set: vec![(Epoch(0), Bytes::from_static(value))],
        }
    }

    #[test]
    fn a_vote_record_holds_the_votes_of_several_instances_and_rejects_damage() {
        let votes = [collect(4, b"four"), collect(5, b"five")];
        let encoded: Vec<Bytes> = votes.iter().map(|c| c.to_bytes()).collect();
        let record: Vec<&[u8]> = encoded.iter().map(|b| &b[..]).collect();
        let mut buf = Vec::new();
        encode_votes(&mut buf, &record);
        assert_eq!(decode_votes(&buf), Some(votes.to_vec()));
        encode_votes(&mut buf, &[]);
        assert_eq!(decode_votes(&buf), Some(vec![]));
        encode_votes(&mut buf, &record);
        for cut in 0..buf.len() {
            assert_eq!(decode_votes(&buf[..cut]), None, "cut at {cut}");
        }
        buf.push(0);
        assert_eq!(decode_votes(&buf), None, "trailing bytes");
    }

    #[test]
    fn a_regency_marker_never_stands_for_an_instance_votes() {
        let in_regency = |cid: u64, value: &'static [u8], regency: u32| Collect {
            regency: Regency(regency),
            ..collect(cid, value)
        };
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = VoteStore::open(dir.path()).unwrap();
        let mut writer = VoteWriter::new(store, &[], 0).unwrap();
        writer.add(1, &in_regency(10, b"ten", 0));
        writer.add(2, &in_regency(11, b"eleven", 1));
        writer.write_record(true, 0).unwrap();
        // Votes on an instance that is logged before the next (unsynced) record: that record
        // holds only the regency marker, at the first instance not logged (10).
        writer.add(3, &in_regency(9, b"nine", 1));
        writer.write_record(false, 10).unwrap();
        let marker = decode_votes(&writer.buf).unwrap();
        assert_eq!(marker.len(), 1);
        assert_eq!(
            (marker[0].cid, marker[0].regency),
            (ConsensusId(10), Regency(1))
        );
        // After a restart the marker does not replace instance 10's votes.
        let restored = read_back(dir.path());
        let (store, _) = VoteStore::open(dir.path()).unwrap();
        let restarted = VoteWriter::new(store, &restored, 0).unwrap();
        assert_eq!(
            decode_votes(&restarted.buf),
            Some(vec![
                in_regency(10, b"ten", 0),
                in_regency(11, b"eleven", 1)
            ])
        );
    }

    /// What `recover` reads back: every valid record's collects, newest record first.
    fn read_back(dir: &Path) -> Vec<Collect> {
        let (_, stored) = VoteStore::open(dir).unwrap();
        stored
            .iter()
            .flat_map(|v| decode_votes(&v.payload).unwrap())
            .collect()
    }

    #[test]
    fn an_unsynced_record_holds_only_the_votes_changed_since_the_last_synced_one() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = VoteStore::open(dir.path()).unwrap();
        let mut writer = VoteWriter::new(store, &[], 0).unwrap();
        writer.add(1, &collect(4, b"four"));
        writer.write_record(true, 0).unwrap();
        assert_eq!(decode_votes(&writer.buf), Some(vec![collect(4, b"four")]));
        // A WRITE on the next instance while instance 4 waits for the log: only 5 is
        // written, and both are read back.
        writer.add(2, &collect(5, b"five"));
        writer.write_record(false, 0).unwrap();
        assert_eq!(decode_votes(&writer.buf), Some(vec![collect(5, b"five")]));
        assert_eq!(
            read_back(dir.path()),
            vec![collect(5, b"five"), collect(4, b"four")]
        );
        // A second unsynced record overwrites the first: it holds everything changed since
        // the synced one.
        writer.add(3, &collect(6, b"six"));
        writer.write_record(false, 0).unwrap();
        assert_eq!(
            decode_votes(&writer.buf),
            Some(vec![collect(5, b"five"), collect(6, b"six")])
        );
        assert_eq!(
            read_back(dir.path()),
            vec![collect(5, b"five"), collect(6, b"six"), collect(4, b"four")]
        );
        // After a restart from these records (the newest an unsynced one), the writer first
        // writes every restored instance back as one synced record: the next write goes to
        // the file that holds the synced record with instance 4.
        {
            let restored = read_back(dir.path());
            let (store, _) = VoteStore::open(dir.path()).unwrap();
            let restarted = VoteWriter::new(store, &restored, 0).unwrap();
            let all = vec![collect(4, b"four"), collect(5, b"five"), collect(6, b"six")];
            assert_eq!(decode_votes(&restarted.buf), Some(all.clone()));
            let (_, stored) = VoteStore::open(dir.path()).unwrap();
            assert_eq!(decode_votes(&stored[0].payload), Some(all));
        }
        // A synced record holds every instance not yet logged (4 is, now).
        writer.write_record(true, 5).unwrap();
        assert_eq!(
            decode_votes(&writer.buf),
            Some(vec![collect(5, b"five"), collect(6, b"six")])
        );
    }
}
