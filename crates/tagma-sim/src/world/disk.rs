//! The simulated disk of a durable replica: the log and checkpoints written and flushed, votes
//! flushed when the core asks, what a crash keeps (torn tails, damaged or lying disks, judged by
//! the real segment reader), recovery from it, and installing a fetched state.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use tagma_core::{
    Input, Mode, Recovered, Resume,
    transfer::{InstallOutcome, StateToInstall},
};
use tagma_wire::{Batch, Collect, ConsensusId, DecidedInstance, Decode, Encode, Reply};

use crate::world::{Event, Phase, World, crash::SentVote, executor::new_executor, order_seed};

/// A correct replica's simulated disk: its newest checkpoint and every decided instance with
/// its proof (the ones before the checkpoint are kept for forwarding to replicas that are
/// behind, as the node keeps the last `decisions_kept`), and its newest votes. As in the node,
/// a decided instance is appended unflushed and a flush completes a few milliseconds later;
/// the instance's replies leave at once (the votes its accepters flushed before their ACCEPTs
/// hold it meanwhile), and an ACCEPT waits for the flush of its vote. A crash loses everything
/// in memory (consensus state, regency, pending requests); of the unflushed records, a prefix
/// may survive, ending in a torn one, and an unflushed vote may survive too. In BFT runs it may also damage the
/// disk (a corrupt checkpoint, one flipped byte in a flushed record, or a checkpoint that lies
/// under valid checksums), for at most f replicas counting the Byzantine ones. What survives is decided by the real segment reader on the
/// log's real bytes (see [`World::crash_disk`]).
#[derive(Default)]
pub(super) struct Disk {
    pub(super) checkpoint: Option<(u64, Bytes)>,
    /// The checkpoint before it, still served to state transfers (as the node keeps two).
    pub(super) previous: Option<(u64, Bytes)>,
    pub(super) log: Vec<DecidedInstance>,
    pub(super) unflushed: Vec<DecidedInstance>,
    /// A checkpoint taken at an unflushed instance: written with the flush that makes that
    /// instance's log record durable, lost with it in a crash (as the node's checkpoint
    /// thread waits for the log). A checkpoint durable before its instance's record would
    /// leave the replica, after a crash of all, ahead of every proof (regression seed 2095).
    pub(super) pending_checkpoint: Option<(u64, Bytes)>,
    /// The votes flushed, by instance: the newest of every instance not in the log when they
    /// were flushed (as the node's vote records hold them), with the highest regency always.
    pub(super) votes: BTreeMap<u64, Collect>,
    /// Votes written but not flushed yet (the newest per instance): they become durable (and
    /// an ACCEPT behind them may leave) with the vote flush the core asks for
    /// (`Action::WriteVotes`); a crash before that may or may not leave them on disk.
    pub(super) unflushed_votes: BTreeMap<u64, Collect>,
    pub(super) log_flush_scheduled: bool,
    pub(super) vote_flush_scheduled: bool,
    pub(super) damaged: bool,
    /// The WRITEs and ACCEPTs sent in this life whose instance the flushed log does not hold
    /// yet: a crash checks that the flushed votes hold them.
    pub(super) sent_votes: BTreeSet<SentVote>,
    /// The newest instance reported durable to the core in this life (`LogDurable`): a crash
    /// checks that the flushed log or checkpoint holds it.
    pub(super) reported_durable: Option<u64>,
    /// A fetched state was installed and the log records after its checkpoint are not flushed
    /// yet (a crash point); `Some(true)`: the state repairs one the state vote contradicted.
    pub(super) installed_unflushed: Option<bool>,
    /// The last instance of a state installed since the last flush: the next flush reports
    /// it durable even when no record follows the checkpoint (as the node's log thread
    /// publishes an installed state's position).
    pub(super) installed_through: Option<u64>,
}

/// Instances between two checkpoints of one replica in durable runs (staggered over the
/// replicas; small, so runs checkpoint, truncate the log and recover from checkpoints).
pub(super) const CHECKPOINT_PERIOD_PER_REPLICA: u64 = 2;

/// Decisions kept in memory in durable runs: fewer than a checkpoint period, so state
/// transfer is exercised.
pub(super) const DURABLE_DECISIONS_KEPT: usize = 8;

/// State-transfer chunk size in the simulator: small, so a checkpoint takes several chunks.
pub(super) const SIM_CHUNK_BYTES: u32 = 512;

/// Chance that a durable replica that installs a fetched state during the faults crashes
/// before the log records after the state's checkpoint are flushed (and restarts soon).
pub(super) const INSTALL_CRASH_P: f64 = 0.5;

/// Chance that a crash damages a durable replica's disk (BFT runs, within the f budget).
pub(super) const DISK_DAMAGE_P: f64 = 0.2;

/// Chance that a crash leaves part of a durable replica's unflushed log bytes on disk (whole
/// records and a torn one).
pub(super) const TEAR_P: f64 = 0.5;

/// How a checkpoint is named in state-transfer offers (as the node names it).
pub(super) fn checkpoint_info(cid: u64, state: &[u8]) -> tagma_wire::CheckpointInfo {
    tagma_wire::CheckpointInfo {
        cid: ConsensusId(cid),
        len: state.len() as u64,
        digest: tagma_exec::checkpoint_digest(state),
    }
}

impl World {
    /// A durable restart: the replica's memory is gone; its executor is rebuilt from its disk
    /// exactly as the node does (checkpoint, log replay), and what the core resumes with is
    /// returned (`None` after a violation).
    pub(super) fn recover_from_disk(&mut self, r: usize) -> Option<Recovered> {
        let node = &mut self.nodes[r];
        let disk = node.disk.as_ref().expect("a durable replica");
        let mut exec = new_executor(
            self.sc.service,
            &self.membership,
            order_seed(self.sc.seed, r),
        );
        if let Some((cid, state)) = &disk.checkpoint
            && let Err(e) = exec.restore(state)
        {
            let msg = format!("replica {r}: its checkpoint of cid {cid} does not restore: {e}");
            self.violation("recovery", msg);
            return None;
        }
        let after = disk.checkpoint.as_ref().map_or(0, |(cid, _)| cid + 1);
        for decided in disk.log.iter().filter(|d| d.cid.0 >= after) {
            let batch = Batch::decode(&decided.batch).expect("a logged batch decodes");
            exec.execute_batch(decided.cid, &batch);
        }
        let next = exec.executed_instances();
        let resume = next.checked_sub(1).map(|last| {
            let kept = node.params.decisions_kept;
            Resume {
                last: ConsensusId(last),
                timestamp_ms: exec.last_timestamp_ms(),
                sessions: exec.sessions(),
                recent: disk.log[disk.log.len().saturating_sub(kept)..].to_vec(),
                // A view change on the disk (checkpointed or replayed) is the one to order in.
                view: exec.members().cloned(),
            }
        });
        debug_assert!(node.delivered >= next, "the disk holds no future");
        // Instances lost with the unflushed tail (or the whole damaged disk) are decided again:
        // forget that they were executed.
        node.delivered = next;
        node.executed.retain(|_, cid| *cid < next);
        node.replied.retain(|_, cid| *cid < next);
        let recovered = Recovered {
            resume,
            checkpoints: (disk.previous.iter().chain(&disk.checkpoint))
                .map(|(cid, state)| checkpoint_info(*cid, state))
                .collect(),
            votes: disk.votes.values().cloned().collect(),
        };
        node.exec = exec;
        node.regency = 0;
        node.incoming.clear();
        Some(recovered)
    }

    /// State transfer: validates and installs a fetched state as the node does (digest of
    /// the stored checkpoint, replay, vouchers), checking every replayed decision like a
    /// delivery; then the durable checkpoint of the installed state replaces the log.
    pub(super) fn install_state(&mut self, r: usize, state: StateToInstall) {
        let bytes = Bytes::from(std::mem::take(&mut self.nodes[r].incoming));
        let target = state.target();
        let node = &mut self.nodes[r];
        let outcome = match node.exec.install_fetched(
            &bytes,
            state.checkpoint.as_ref(),
            &state.log,
            &state.voucher_checkpoints(),
            state.matches_needed,
        ) {
            Ok(_) => InstallOutcome::Installed {
                last: target,
                timestamp_ms: node.exec.last_timestamp_ms(),
                sessions: node.exec.sessions(),
                view: node.exec.members().cloned(),
            },
            Err(reason) => InstallOutcome::Rejected { reason },
        };
        if let InstallOutcome::Installed { .. } = &outcome {
            self.count("state_transfers");
            if std::mem::take(&mut self.nodes[r].lying_disk) {
                // The state its disk lied about is replaced by one f+1 replicas vouched for.
                self.count("lying_disks_replaced");
                if self.nodes[r].core.stats().state_checks_contradicted > 0 {
                    self.count("lying_disks_replaced_after_a_state_check");
                }
            }
            if self.nodes[r].joiner {
                self.count("joiner_states_installed");
            }
            self.note(b'T', r as u64, target.0, &[], || {
                format!(
                    "replica {r} installs state up to cid {target} (checkpoint {:?} from replica {}, {} vouchers)",
                    state.checkpoint.map(|c| c.cid.0),
                    state.source,
                    state.vouchers.len()
                )
            });
            // The checkpointed instances are checked as the state's; the replayed ones as
            // deliveries (agreement, validity, exactly once).
            let delivered = self.nodes[r].delivered;
            self.nodes[r].delivered = delivered.max(state.checkpoint.map_or(0, |c| c.cid.0 + 1));
            for decided in state.log.iter().filter(|d| d.cid.0 >= delivered) {
                let batch = Batch::decode(&decided.batch).expect("installed batches decode");
                let hash = tagma_crypto::digest(&decided.batch);
                self.check_delivery(r, decided.cid.0, hash, &batch);
                if !self.violations.is_empty() {
                    return;
                }
            }
            self.store_installed(r, &state, bytes);
        } else {
            self.count("state_transfers_rejected");
        }
        self.replica_input(r, Input::StateInstalled(outcome));
    }

    /// The steps that make an installed state durable, as the node takes them
    /// (`ExecStorage::install`, then `log_installed` on the storage thread), each its own
    /// crash point: the fetched checkpoint becomes the durable checkpoint at once (it is
    /// already on disk: the node only seals it); the decisions after it are appended to the
    /// log unflushed — after what the log holds, or in a log restarted after the checkpoint
    /// when the log does not reach it or the state repairs a contradicted one — and become
    /// durable with the next flush, which reports `LogDurable`. A crash in between recovers
    /// the replica at the checkpoint.
    fn store_installed(&mut self, r: usize, state: &StateToInstall, fetched: Bytes) {
        let Some(disk) = self.nodes[r].disk.as_mut() else {
            return;
        };
        let info = state.checkpoint;
        if let Some(c) = info {
            let previous = disk.checkpoint.replace((c.cid.0, fetched));
            // A repair's earlier checkpoints came from its lying disk.
            disk.previous = if state.repair { None } else { previous };
        }
        // Taken at an instance the installed state passed: never written.
        disk.pending_checkpoint = None;
        let last = disk.unflushed.last().or(disk.log.last()).map(|d| d.cid.0);
        let from = match (last, info.map(|c| c.cid.0)) {
            (Some(last), Some(c)) if last >= c && !state.repair => last + 1,
            (last, None) => last.map_or(0, |l| l + 1),
            (_, Some(c)) => {
                disk.log.clear();
                disk.unflushed.clear();
                // The log restarts: what was reported durable of the old one is gone.
                disk.reported_durable = None;
                c + 1
            }
        };
        disk.unflushed
            .extend(state.log.iter().filter(|d| d.cid.0 >= from).cloned());
        disk.installed_unflushed = Some(state.repair);
        let through = state.log.last().map(|d| d.cid.0).or(info.map(|c| c.cid.0));
        disk.installed_through = disk.installed_through.max(through);
        self.schedule_log_flush(r);
        if self.phase == Phase::Faults && self.rng.chance(INSTALL_CRASH_P) {
            // Crash before the log records are flushed (the crash point this event leaves),
            // and come back soon.
            self.nodes[r].crash_point_armed = true;
            let at = self.now_ms + self.rng.range(20, 300);
            self.schedule(at, Event::Restart(r as u32));
        }
        if let Some(info) = info {
            // As the node: the fetched checkpoint is durable before the core hears the verdict.
            self.replica_input(r, Input::CheckpointWritten(info));
        }
    }

    /// Durable runs: the decided instance is appended unflushed (its replies leave at once, as
    /// in the node: the accepters' votes hold the decision until the log does); at the
    /// replica's staggered point, a checkpoint is taken, written with the next flush. Returns
    /// the replies, to send now.
    pub(super) fn log_to_disk(
        &mut self,
        r: usize,
        cid: ConsensusId,
        decided: DecidedInstance,
        replies: Vec<Reply>,
    ) -> Vec<Reply> {
        let n = self.nodes.len();
        let node = &mut self.nodes[r];
        let Some(disk) = node.disk.as_mut() else {
            return replies;
        };
        disk.unflushed.push(decided);

        let period = CHECKPOINT_PERIOD_PER_REPLICA * n as u64;
        let checkpoint = tagma_storage::checkpoint_due(cid.0, r, n, period);
        if checkpoint {
            disk.pending_checkpoint = Some((cid.0, node.exec.checkpoint()));
        }
        if checkpoint {
            self.count("checkpoints");
        }
        self.schedule_log_flush(r);
        replies
    }

    /// A durable replica wrote something unflushed: its next flush comes within 0–3 ms (one
    /// pending at a time; it flushes everything written before it runs).
    pub(super) fn schedule_log_flush(&mut self, r: usize) {
        let Some(disk) = self.nodes[r].disk.as_mut() else {
            return;
        };
        if !disk.log_flush_scheduled {
            disk.log_flush_scheduled = true;
            let at = self.now_ms + self.rng.range(0, 4);
            let (replica, incarnation) = (r as u32, self.nodes[r].incarnation);
            self.schedule(
                at,
                Event::LogFlush {
                    replica,
                    incarnation,
                },
            );
        }
    }

    /// A flush completes: the unflushed records and vote are durable.
    pub(super) fn log_flush(&mut self, r: usize) {
        if self.nodes[r].crashed {
            return;
        }
        let Some(disk) = self.nodes[r].disk.as_mut() else {
            return;
        };
        disk.log_flush_scheduled = false;
        let flushed = std::mem::take(&mut disk.unflushed);
        // An installed state counts up to its last instance, records after its checkpoint
        // or not.
        let installed = disk.installed_through.take().map(ConsensusId);
        let last = flushed.last().map(|d| d.cid).max(installed);
        disk.log.extend(flushed);
        disk.installed_unflushed = None;
        if let Some(cid) = last {
            disk.sent_votes.retain(|v| v.cid > cid);
            disk.reported_durable = Some(cid.0);
        }
        let checkpoint = disk.pending_checkpoint.take();
        let info = checkpoint
            .as_ref()
            .map(|(cid, state)| checkpoint_info(*cid, state));
        if let Some(checkpoint) = checkpoint {
            disk.previous = disk.checkpoint.replace(checkpoint);
        }
        if let Some(info) = info {
            // Through the input path: during the start-up synchronisation this checkpoint
            // may be the state vote's fresh one, and the core then asks its peers.
            self.replica_input(r, Input::CheckpointWritten(info));
        }
        if let Some(cid) = last {
            self.count("log_flushes");
            self.replica_input(r, Input::LogDurable(cid));
        }
    }

    /// A vote flush completes: the votes written become durable. A record keeps the votes of
    /// the instances not in the log yet, and the highest regency (as the node's records do).
    pub(super) fn vote_flush(&mut self, r: usize) {
        if self.nodes[r].crashed {
            return;
        }
        let seq = self.nodes[r].last_vote_seq;
        let Some(disk) = self.nodes[r].disk.as_mut() else {
            return;
        };
        disk.vote_flush_scheduled = false;
        let logged_below = disk.log.last().map_or(0, |d| d.cid.0 + 1);
        disk.votes.append(&mut disk.unflushed_votes);
        let newest = disk
            .votes
            .values()
            .max_by_key(|c| (c.regency, c.cid))
            .cloned();
        disk.votes.retain(|cid, _| *cid >= logged_below);
        if let Some(newest) = newest
            && disk.votes.values().all(|c| c.regency < newest.regency)
        {
            disk.votes.insert(newest.cid.0, newest);
        }
        self.count("vote_flushes");
        self.replica_input(r, Input::VotesDurable { seq });
    }

    /// A durable replica crashes: its unflushed records are lost — except that the kernel may have written some of them out already: a
    /// prefix of the unflushed bytes may survive, ending in a torn record. In BFT runs, within
    /// the f budget shared with the Byzantine replicas, the crash may also damage the disk:
    /// all of it (a checkpoint that fails its checksum), one byte of one flushed log record, or
    /// the newest checkpoint, rewritten with a state nobody ordered under a valid digest (a
    /// lying disk, which only the state vote can catch).
    /// What survives is what the real segment reader (`tagma_storage::read_segment`) makes of
    /// the resulting bytes: a torn tail is cut off, a bad record followed by good ones is
    /// corruption and sets the whole disk aside.
    pub(super) fn crash_disk(&mut self, r: usize) {
        let budget = self.f_floor().saturating_sub(self.sc.byzantine.len());
        let damage = self.sc.mode == Mode::Bft
            && self.disk_damage_count < budget
            && self.rng.chance(DISK_DAMAGE_P);
        // Damage is to the whole disk or to one flushed record; a torn write hits the unflushed.
        let flip_record = damage && self.rng.chance(0.5);
        let tear = self.rng.chance(TEAR_P);
        let Some(disk) = self.nodes[r].disk.as_ref() else {
            return;
        };
        let survivors = if tear {
            self.rng.below(disk.unflushed.len() as u64 + 1) as usize
        } else {
            0
        };
        let flip = (flip_record && !disk.log.is_empty()).then(|| self.rng.index(disk.log.len()));
        // Half of the whole-disk damage is a lying disk instead (a coin of its own, so that
        // the main stream, and with it every other seed, stays as it was): the newest
        // checkpoint holds a state nobody ordered under a valid digest and checksum, which
        // no check of the disk can catch; the state vote after the restart has to.
        let lie = (damage && !flip_record && self.disk_coin(r))
            .then(|| disk.checkpoint.clone())
            .flatten()
            .and_then(|(cid, truth)| Some((cid, self.with_a_lie(&truth)?)));
        let image = self.disk_image(r, survivors, tear, flip);
        let disk = self.nodes[r].disk.as_mut().expect("checked above");
        let lied = lie.is_some();
        if let Some(lie) = lie {
            disk.checkpoint = Some(lie);
        }
        disk.pending_checkpoint = None;
        disk.installed_unflushed = None;
        disk.installed_through = None;
        disk.log_flush_scheduled = false;
        disk.vote_flush_scheduled = false;
        // Unflushed votes may have reached the disk anyway: then the restarted replica claims
        // a vote whose ACCEPT it never sent, which must be harmless.
        let vote_survived = tear && !disk.unflushed_votes.is_empty();
        let mut unflushed_votes = std::mem::take(&mut disk.unflushed_votes);
        if tear {
            disk.votes.append(&mut unflushed_votes);
        }
        let first_cid = disk
            .log
            .first()
            .or(disk.unflushed.first())
            .map_or(0, |d| d.cid.0);
        let (records, end) = tagma_storage::read_segment(&image, first_cid, true);
        let mut kept = Vec::with_capacity(records.len());
        for (cid, payload) in records {
            match DecidedInstance::decode(&Bytes::copy_from_slice(payload)) {
                Ok(d) if d.cid.0 == cid => kept.push(d),
                _ => {
                    let msg = format!("replica {r}: logged record {cid} reads back otherwise");
                    return self.violation("disk", msg);
                }
            }
        }
        let corrupt = matches!(end, tagma_storage::SegmentEnd::Corrupt { .. });
        if corrupt && flip.is_none() {
            let msg = format!("replica {r}: a crash's torn tail was judged corrupt: {end:?}");
            return self.violation("disk", msg);
        }
        let flushed = disk.log.len();
        let unflushed_lost = disk.unflushed.len().saturating_sub(survivors);
        disk.unflushed.clear();
        disk.log = kept;
        let disk_damaged = damage && !flip_record && !lied;
        let newly_damaged = (disk_damaged || corrupt) && !disk.damaged;
        disk.damaged |= disk_damaged || corrupt;
        let cut_flushed = disk.log.len() < flushed && !corrupt;
        if unflushed_lost > 0 {
            self.count("unflushed_records_lost");
        }
        if vote_survived {
            self.count("unflushed_votes_survived");
        }
        if survivors > 0 {
            self.count("unflushed_records_survived");
        }
        if matches!(end, tagma_storage::SegmentEnd::Torn { .. }) {
            self.count("torn_tails_cut");
        }
        if corrupt {
            self.count("corrupt_logs_detected");
        }
        if cut_flushed {
            // A damaged last record reads as a torn tail: a flushed instance is gone.
            self.count("flushed_records_cut");
        }
        if lied {
            self.nodes[r].lying_disk = true;
            self.count("lying_disks");
        }
        if flip.is_some() || newly_damaged || lied {
            self.disk_damage_count += 1;
        }
        if newly_damaged {
            self.count("disks_damaged");
        }
    }

    /// An even coin for replica `r`'s crash now, outside the main random stream.
    pub(super) fn disk_coin(&self, r: usize) -> bool {
        let mut state = self.sc.seed ^ self.step.rotate_left(17) ^ (r as u64).rotate_left(41);
        crate::rng::splitmix64(&mut state) & 1 == 0
    }

    /// The bytes of replica `r`'s log as a crash leaves them: its flushed records, the first
    /// `survivors` unflushed ones, with `tear` the beginning of the next one (or of garbage),
    /// and with `flip` one byte of that flushed record changed.
    pub(super) fn disk_image(
        &mut self,
        r: usize,
        survivors: usize,
        tear: bool,
        flip: Option<usize>,
    ) -> Vec<u8> {
        let disk = self.nodes[r].disk.as_ref().expect("a durable replica");
        let mut image = Vec::new();
        let mut flip_at = None;
        for (i, d) in disk
            .log
            .iter()
            .chain(&disk.unflushed[..survivors])
            .enumerate()
        {
            let start = image.len();
            tagma_storage::encode_record(&mut image, d.cid.0, &d.to_bytes());
            if flip == Some(i) {
                flip_at = Some((start, image.len()));
            }
        }
        let partial = disk.unflushed.get(survivors).filter(|_| tear).map(|d| {
            let mut record = Vec::new();
            tagma_storage::encode_record(&mut record, d.cid.0, &d.to_bytes());
            record
        });
        if let Some((start, end)) = flip_at {
            let at = start + self.rng.index(end - start);
            image[at] ^= 1 << self.rng.below(8);
        }
        if let Some(record) = partial {
            let cut = 1 + self.rng.index(record.len() - 1);
            image.extend_from_slice(&record[..cut]);
            if self.rng.chance(0.5) {
                // The torn write left garbage in its last sector.
                let at = image.len() - 1 - self.rng.index(cut.min(512));
                image[at] ^= 0x5a;
            }
        }
        // The preallocated rest of the segment.
        image.resize(image.len() + 64, 0);
        image
    }
}
