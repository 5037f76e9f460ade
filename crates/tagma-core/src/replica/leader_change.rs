//! Leader change (Mod-SMaRt's synchronization phase): STOP, STOPDATA and SYNC, the collects
//! and the value choice they feed.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_wire::{
    Batch, Collect, ConsensusId, DecidedInstance, Decode, Digest, Epoch, PeerMessage, Regency,
    ReplicaId, RequestEnvelope, SignedCollect, Stop, StopData, Sync, collect_signing_bytes,
};

use super::{Replica, action::Action, input::PreparedBatch, instance::ProposalSlot};
use crate::{
    error::{ProposalFault, Rejection},
    value_choice,
    value_choice::{Choice, Normalized},
};

/// Requests carried in one STOP, at most.
pub(super) const STOP_REQUESTS_MAX: usize = 64;

/// Values kept in a collect's write set: the most recent writes. Enough for safety — once a
/// value may have been decided, every later epoch writes that same value, so it is always
/// among the newest — and it bounds the size of STOPDATA and SYNC.
pub const WRITE_SET_MAX: usize = 2;

/// Leader-change state (Mod-SMaRt's synchronization phase).
#[derive(Default)]
pub(super) struct LeaderChange {
    /// The regency this replica asked for (`> regency` while a change is in progress).
    pub(super) next_regency: Regency,
    /// The highest regency each replica sent a STOP for (this replica included).
    pub(super) stops: BTreeMap<ReplicaId, Regency>,
    /// Our STOP, retransmitted until the regency is installed.
    pub(super) own_stop: Option<Stop>,
    pub(super) stop_retransmit_ms: Option<u64>,
    /// Installed the regency, waiting for its SYNC.
    pub(super) waiting_sync: bool,
    pub(super) sync_deadline_ms: Option<u64>,
    /// Regencies that ended without a decision in a row (doubles the SYNC timeout).
    pub(super) failed_regencies: u32,
    /// New leader: the STOPDATAs of the current regency (own included).
    pub(super) stopdata: BTreeMap<ReplicaId, StopData>,
    /// STOPDATAs for a later regency this replica will lead, received before it installed
    /// it (the latest per sender).
    pub(super) early_stopdata: BTreeMap<ReplicaId, StopData>,
    /// A SYNC whose last decided instance is ahead of us: applied once we caught up.
    pub(super) pending: Option<Finalise>,
    /// The highest epoch each peer sent a consensus message in (to notice a regency that
    /// was installed without us, e.g. while this replica was down).
    pub(super) epochs_seen: BTreeMap<ReplicaId, Epoch>,
    /// Durable replicas: an installed regency whose record (`PersistVote` `seq`) is not on
    /// disk yet; its STOPDATA (or, as leader, its own collect and SYNC) waits for it.
    pub(super) held_install: Option<(u64, Regency)>,
}

/// The outcome of a verified SYNC, applied by [`Replica::finalise`].
#[derive(Clone, Debug)]
pub(super) struct Finalise {
    pub(super) last_decided: Option<DecidedInstance>,
    pub(super) current_cid: ConsensusId,
    /// The value for `current_cid` in the new epoch (`None`: the leader proposes normally).
    pub(super) value: Option<(Bytes, bool)>,
    pub(super) proposal_authentic: bool,
    /// This replica's own collect, at `current_cid`, was among those the value was chosen
    /// from (so were its restored votes on that instance).
    pub(super) own_collect_counted: bool,
}

impl Replica {
    /// An invalid proposal from the leader: suspect it at once (Mod-SMaRt
    /// step 2) — a correct leader never proposes one.
    pub(super) fn suspect_leader(&mut self, cid: ConsensusId, fault: ProposalFault) {
        tracing::debug!(leader = %self.leader(), %cid, ?fault, "invalid proposal from the leader");
        self.leader_fault = Some((cid, fault));
        self.suspect(self.clients.head_requests(STOP_REQUESTS_MAX));
    }

    /// This replica suspects the current leader: ask for the next regency (once per change).
    pub(super) fn suspect(&mut self, requests: Vec<RequestEnvelope>) {
        if self.leader_change.next_regency > self.regency {
            return; // a change is already under way; its STOP is being retransmitted
        }
        self.start_stop(Regency(self.regency.0.saturating_add(1)), requests);
    }

    /// Sends STOP(`regency`) to all and records it (Mod-SMaRt: STOP(next regency, requests)).
    pub(super) fn start_stop(&mut self, regency: Regency, requests: Vec<RequestEnvelope>) {
        debug_assert!(regency > self.regency);
        if regency <= self.leader_change.next_regency
            && self.leader_change.next_regency > self.regency
        {
            return;
        }
        self.leader_change.next_regency = regency;
        let stop = Stop { regency, requests };
        self.actions
            .push_back(Action::Broadcast(PeerMessage::Stop(stop.clone())));
        self.leader_change.own_stop = Some(stop);
        self.leader_change.stop_retransmit_ms = Some(self.now_ms + self.params.request_timeout_ms);
        self.leader_change.stops.insert(self.params.me, regency);
        self.check_stops();
    }

    pub(super) fn on_stop(&mut self, from: ReplicaId, stop: Stop) -> Result<(), Rejection> {
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
        let entry = self.leader_change.stops.entry(from).or_insert(stop.regency);
        *entry = (*entry).max(stop.regency);
        self.check_stops();
        Ok(())
    }

    /// Replicas that asked for regency `regency` or a later one.
    pub(super) fn stops_at_least(&self, regency: Regency) -> usize {
        self.leader_change
            .stops
            .values()
            .filter(|r| **r >= regency)
            .count()
    }

    /// STOP thresholds: join a change that f+1 replicas want (one faulty replica cannot force
    /// one); install it once n−f replicas want it.
    pub(super) fn check_stops(&mut self) {
        let q = self.params.quorums;
        let floor = self.leader_change.next_regency.max(self.regency);
        let wanted: Vec<Regency> = self
            .leader_change
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
        let next = self.leader_change.next_regency;
        if next > self.regency && self.stops_at_least(next) >= q.stop_install() {
            self.install(next);
        }
    }

    /// Installs `regency`: freezes the earlier epochs, sends STOPDATA to the new leader, and
    /// waits for its SYNC.
    pub(super) fn install(&mut self, regency: Regency) {
        self.enter_regency(regency);
        self.leader_change.waiting_sync = true;
        let backoff = 1u64 << self.leader_change.failed_regencies.min(6);
        self.leader_change.sync_deadline_ms =
            Some(self.now_ms + self.params.request_timeout_ms * backoff);
        if self.params.durable {
            // Durable: the regency goes to disk (in the collect's `regency`) before this
            // replica says anything in it, so that after a crash it never votes in an
            // earlier epoch than one whose synchronisation counted it (epochs are compared
            // across restarts).
            let seq = self.persist_votes();
            if seq > self.votes_durable {
                self.leader_change.held_install = Some((seq, regency));
                return;
            }
        }
        self.finish_install(regency);
    }

    /// The rest of [`Replica::install`], once the regency is durable: the STOPDATA to the new
    /// leader (as leader: its own, and the SYNC if enough arrived).
    pub(super) fn finish_install(&mut self, regency: Regency) {
        let leader = self.leader();
        let data = StopData {
            regency,
            last_decided: self.proven_last(),
            collect: self.signed_collect(),
        };
        if leader == self.params.me {
            self.leader_change.stopdata.insert(leader, data);
            let early = std::mem::take(&mut self.leader_change.early_stopdata);
            for (from, d) in early {
                if d.regency == regency {
                    let _ = self.on_stopdata(from, d);
                } else if d.regency > regency {
                    self.leader_change.early_stopdata.insert(from, d);
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

    /// The last decided instance with a verified proof, if one can be built.
    pub(super) fn proven_last(&mut self) -> Option<DecidedInstance> {
        let last = self.decisions.last_cid()?;
        self.decisions.proven(last, &self.checker)
    }

    /// This replica's signed collect for the instance in progress.
    pub(super) fn signed_collect(&self) -> SignedCollect {
        let collect = self.collect();
        let signature = self.key.sign(&collect_signing_bytes(&collect));
        SignedCollect { collect, signature }
    }

    /// This replica's collect for the instance in progress: the values it wrote and the
    /// highest epoch in which it saw a write quorum (and accepts or accepted), votes from
    /// before a crash included.
    pub(super) fn collect(&self) -> Collect {
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

    pub(super) fn valid_collect(&self, sc: &SignedCollect, regency: Regency) -> bool {
        let c = &sc.collect;
        c.regency == regency
            && self.params.members.contains(&c.replica)
            && c.write_set.windows(2).all(|w| w[0].0 < w[1].0)
            && self
                .checker
                .valid_signature(c.replica, &collect_signing_bytes(c), &sc.signature)
    }

    /// New leader: a STOPDATA for the installed regency.
    pub(super) fn on_stopdata(
        &mut self,
        from: ReplicaId,
        mut data: StopData,
    ) -> Result<(), Rejection> {
        if data.regency > self.regency && self.leader_of(data.regency) == self.params.me {
            let keep = self
                .leader_change
                .early_stopdata
                .get(&from)
                .is_none_or(|d| d.regency < data.regency);
            if keep {
                self.leader_change.early_stopdata.insert(from, data);
            }
            return Ok(());
        }
        if data.regency != self.regency || !self.is_leader() || !self.leader_change.waiting_sync {
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
        self.leader_change.stopdata.insert(from, data);
        if self.leader_change.held_install.is_none() {
            // (Otherwise `finish_install` tries once this replica's regency is durable.)
            self.try_sync();
        }
        Ok(())
    }

    /// The highest proven decision among STOPDATAs, the instance to synchronise, and the
    /// normalised collects.
    pub(super) fn sync_inputs<'a>(
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
    pub(super) fn sync_instance<'a>(
        last: impl Iterator<Item = &'a DecidedInstance>,
    ) -> ConsensusId {
        last.map(|d| d.cid.next()).max().unwrap_or(ConsensusId(0))
    }

    /// New leader: once n−f STOPDATAs are in and the value choice is sound, send SYNC.
    pub(super) fn try_sync(&mut self) {
        let q = self.params.quorums;
        if self.leader_change.stopdata.len() < q.stop_install() {
            return;
        }
        let collects: Vec<SignedCollect> = self
            .leader_change
            .stopdata
            .values()
            .map(|d| d.collect.clone())
            .collect();
        let lasts: Vec<DecidedInstance> = self
            .leader_change
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
        let choice = value_choice::choose(&q, &normalized);
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
        self.leader_change.stopdata.clear();
        let me = self.params.me;
        if let Err(r) = self.on_sync(me, sync, true) {
            tracing::error!(reason = r.reason(), "own SYNC rejected");
        }
    }

    /// A SYNC from the leader of `sync.regency`: re-check the evidence, then finalise.
    pub(super) fn on_sync(
        &mut self,
        from: ReplicaId,
        sync: Sync,
        proposal_authentic: bool,
    ) -> Result<(), Rejection> {
        let q = self.params.quorums;
        if from != self.leader_of(sync.regency) {
            return Err(Rejection::NotFromLeader { from });
        }
        if sync.regency < self.regency
            || (sync.regency == self.regency && !self.leader_change.waiting_sync)
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
        let value = match value_choice::choose(&q, &normalized) {
            Choice::Unsound => return invalid(self, "value choice not sound"),
            Choice::Bound { value, .. } => Some((value, false)),
            Choice::Unbound if sync.proposal.is_empty() => None,
            Choice::Unbound => Some((sync.proposal.clone(), true)),
        };
        if sync.regency > self.regency {
            // n−f valid collects prove that n−f replicas installed this regency.
            self.enter_regency(sync.regency);
        }
        self.leader_change.waiting_sync = false;
        self.leader_change.sync_deadline_ms = None;
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
    pub(super) fn note_epoch(&mut self, from: ReplicaId, epoch: Epoch) {
        if epoch <= self.epoch() {
            return;
        }
        let seen = self.leader_change.epochs_seen.entry(from).or_insert(epoch);
        *seen = (*seen).max(epoch);
        let one_correct = self.params.quorums.one_correct();
        let adopt = self
            .leader_change
            .epochs_seen
            .values()
            .copied()
            .filter(|e| *e > self.epoch())
            .filter(|e| {
                self.leader_change
                    .epochs_seen
                    .values()
                    .filter(|x| **x >= *e)
                    .count()
                    >= one_correct
            })
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
            self.leader_change.waiting_sync = true;
            self.leader_change.sync_deadline_ms = None;
        }
    }

    /// What every way of moving to a new regency does: older epochs are frozen (the
    /// installed regency is the lowest epoch this replica votes in), the leader-change
    /// bookkeeping of earlier regencies is dropped, and request timers restart so the new
    /// leader gets a full period.
    pub(super) fn enter_regency(&mut self, regency: Regency) {
        debug_assert!(regency > self.regency, "regencies only grow");
        self.regency = regency;
        self.leader_change.next_regency = regency;
        self.leader_change.stops.retain(|_, r| *r > regency);
        self.leader_change
            .epochs_seen
            .retain(|_, e| e.0 > regency.0);
        self.leader_change.own_stop = None;
        self.leader_change.stop_retransmit_ms = None;
        self.leader_change.stopdata.clear();
        self.leader_change.pending = None;
        self.clients.restart_timers(self.now_ms);
        self.stats.leader_changes += 1;
        let leader = self.leader();
        tracing::info!(%regency, %leader, cid = %self.instance.cid, "installed a new regency");
        self.actions
            .push_back(Action::RegencyInstalled { regency, leader });
    }

    /// Applies a verified SYNC: catch up to its last decided instance,
    /// then run the instance in progress in the new epoch with the chosen value.
    pub(super) fn finalise(&mut self, f: Finalise) {
        if self.log_lags() {
            // Held with the instance in progress until the log catches up (`settle`).
            self.leader_change.pending = Some(f);
            return;
        }
        if let Some(d) = &f.last_decided
            && d.cid >= self.instance.cid
        {
            if d.cid > self.instance.cid {
                // Behind by more than one: fetch the missing decisions first.
                tracing::debug!(next = %self.instance.cid, target = %d.cid, "behind the SYNC: catching up");
                self.leader_change.pending = Some(f);
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
        // (CFT: a restarted accepter behind by two instances).
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
            PreparedBatch {
                bytes,
                hash,
                batch,
                authentic: true,
            },
        );
    }
}
