//! The Mod-SMaRt normal case: PROPOSE → WRITE → ACCEPT → decide, the leader's batches, and
//! the commit of every decision.
//!
//! Instances run one at a time. The leader of the regency (the first member for regency 0)
//! proposes instance `next_cid` only when the previous one has decided, sends PROPOSE to the
//! others and handles its proposal as if received. BFT: a valid PROPOSE → WRITE; a write
//! quorum of matching WRITEs → ACCEPT; an accept quorum of matching ACCEPTs, with the PROPOSE
//! value at hand → decide. CFT: a valid PROPOSE → ACCEPT; an accept quorum → decide. Votes
//! may arrive before the PROPOSE: they are counted per hash and re-checked when the PROPOSE
//! arrives. Messages for later instances are buffered (bounded) and replayed, in arrival
//! order, when their instance becomes current. The state of an instance is kept per epoch
//! (= regency), so a leader change starts a new epoch of the same instance.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_wire::{
    Accept, Batch, ConsensusId, DecidedInstance, Decode, Digest, Encode, Epoch, PeerMessage,
    Propose, ReplicaId, RequestEnvelope, Signature, Vote,
};

use super::{
    Replica,
    action::{Action, Decision},
    input::{PeerInput, PreparedBatch},
    instance::{Instance, ProposalSlot},
};
use crate::{
    error::{ProposalFault, Rejection},
    proof::sign_accept,
    quorum::Mode,
};

/// Votes are kept for epochs at most this far above the installed regency.
pub(super) const FUTURE_EPOCHS_MAX: u32 = 16;

impl Replica {
    /// Keeps a proven decision for forwarding (after the last one kept).
    pub(super) fn record_proven(&mut self, decided: DecidedInstance) {
        let hash = tagma_crypto::digest(&decided.batch);
        let signatures = decided.proof.accepts.iter().copied().collect();
        self.decisions.record(
            decided.cid,
            decided.proof.epoch,
            hash,
            decided.batch.clone(),
            signatures,
            Some(decided.proof),
        );
    }

    /// A forwarded request: like a client request, but an already-ordered one is ignored
    /// (the forwarding replica is not the client and needs no reply).
    pub(super) fn on_forward(
        &mut self,
        request: RequestEnvelope,
        authentic: bool,
    ) -> Result<(), Rejection> {
        if !authentic {
            return Err(Rejection::Unauthentic);
        }
        self.clients.admit(request).map(|_| ())
    }

    /// Routes a consensus message by instance: older → stale (late ACCEPT signatures are
    /// kept for proofs), later → buffered, current → handled now.
    pub(super) fn on_consensus_input(
        &mut self,
        from: ReplicaId,
        input: PeerInput,
    ) -> Result<(), Rejection> {
        let (cid, epoch) = match &input {
            PeerInput::Propose { cid, epoch, .. }
            | PeerInput::UndecodablePropose { cid, epoch } => (*cid, *epoch),
            PeerInput::Write(v) => (v.cid, v.epoch),
            PeerInput::Accept(a) => (a.vote.cid, a.vote.epoch),
            _ => unreachable!("non-consensus inputs are routed by on_peer"),
        };
        let next = self.instance.cid;
        if cid < next {
            if let PeerInput::Accept(a) = &input {
                self.decisions.add_signature(from, &a.vote, a.signature);
            }
            return Err(Rejection::Stale { cid });
        }
        if cid > next {
            self.note_ahead(from, cid);
            tracing::trace!(%from, %cid, "buffering a message for a later instance");
            return self.future.push(next, cid, from, input);
        }
        if self.log_lags() {
            // The instance is held until the log catches up (`durable_log`): its messages
            // wait with those of later instances.
            return self.future.push(next, cid, from, input);
        }
        // Votes of the current regency and of later ones (bounded) are kept: a replica that
        // installs a regency late must not lose them. Earlier epochs are frozen.
        self.note_epoch(from, epoch);
        let current = self.epoch();
        if epoch < current || epoch.0 > current.0.saturating_add(FUTURE_EPOCHS_MAX) {
            return Err(Rejection::Stale { cid });
        }
        match input {
            PeerInput::Propose { batch, .. } if epoch == current => {
                self.on_propose(from, epoch, Some(batch))
            }
            PeerInput::UndecodablePropose { .. } if epoch == current => {
                self.on_propose(from, epoch, None)
            }
            PeerInput::Propose { .. } | PeerInput::UndecodablePropose { .. } => {
                Err(Rejection::Stale { cid })
            }
            PeerInput::Write(vote) => {
                self.on_write(from, vote);
                Ok(())
            }
            PeerInput::Accept(accept) => {
                self.on_accept(from, accept);
                Ok(())
            }
            _ => unreachable!("non-consensus inputs are routed by on_peer"),
        }
    }

    /// Mod-SMaRt step 2: a PROPOSE for the current instance and epoch (`None`: undecodable).
    pub(super) fn on_propose(
        &mut self,
        from: ReplicaId,
        epoch: Epoch,
        batch: Option<PreparedBatch>,
    ) -> Result<(), Rejection> {
        let cid = self.instance.cid;
        if from != self.leader() {
            return Err(Rejection::NotFromLeader { from });
        }
        if self.leader_change.waiting_sync {
            // The new leader's SYNC comes first on the same link; a PROPOSE before it is stale.
            return Err(Rejection::Stale { cid });
        }
        let hash = batch.as_ref().map(|b| b.hash);
        // Only the first PROPOSE of an epoch is taken; an identical copy is ignored.
        if let Some(first) = self.instance.epoch_mut(epoch).proposal.hash() {
            return if first == hash {
                Ok(())
            } else {
                Err(Rejection::Equivocation { from, cid })
            };
        }
        let verdict = match &batch {
            None => Err(ProposalFault::Undecodable),
            Some(b) => self
                .clients
                .validate_proposal(
                    &b.batch,
                    b.bytes.len(),
                    true,
                    self.last_decided_timestamp_ms,
                )
                .and_then(|()| self.check_timestamp_ahead(&b.batch)),
        };
        match (verdict, batch) {
            (Ok(()), Some(b)) if b.authentic => {
                self.take_proposal(epoch, b);
                Ok(())
            }
            (Ok(()), Some(b)) => {
                // Mod-SMaRt with MAC authenticators: a request this replica cannot
                // authenticate may still be genuine (a faulty client can corrupt one entry of
                // its authenticator). Wait for f+1 vouchers instead of blaming the leader.
                self.instance.epoch_mut(epoch).proposal = ProposalSlot::Unauthenticated(b);
                self.check_quorums(epoch);
                Err(Rejection::InvalidProposal {
                    from,
                    cid,
                    fault: ProposalFault::Unauthentic,
                })
            }
            (Err(fault), _) => {
                self.instance.epoch_mut(epoch).proposal = ProposalSlot::Invalid(hash);
                self.suspect_leader(cid, fault.clone());
                Err(Rejection::InvalidProposal { from, cid, fault })
            }
            (Ok(()), None) => unreachable!("an undecodable proposal never validates"),
        }
    }

    /// A fresh PROPOSE's timestamp may be at most `clock_skew_max_ms` ahead of this replica's
    /// clock. Judged on the local clock, so correct replicas may judge a proposal near the
    /// bound differently; that costs at most a leader change, never agreement, and only
    /// fresh proposals are judged so (a value chosen in a leader change or a proven decision
    /// is not).
    fn check_timestamp_ahead(&self, batch: &tagma_wire::Batch) -> Result<(), ProposalFault> {
        let bound = self.now_ms.saturating_add(self.params.clock_skew_max_ms);
        if batch.timestamp_ms > bound {
            return Err(ProposalFault::TimestampAhead {
                timestamp_ms: batch.timestamp_ms,
                local_ms: self.now_ms,
            });
        }
        Ok(())
    }

    /// A valid proposal becomes the value of the epoch: vote for it (WRITE in BFT, ACCEPT in
    /// CFT), then check whether votes that came before it complete a quorum.
    pub(super) fn take_proposal(&mut self, epoch: Epoch, batch: PreparedBatch) {
        let state = self.instance.epoch_mut(epoch);
        debug_assert!(matches!(
            state.proposal,
            ProposalSlot::Empty | ProposalSlot::Unauthenticated(_)
        ));
        state.proposal = ProposalSlot::Valid(batch);
        self.vote_for_proposal(epoch);
        self.check_quorums(epoch);
    }

    /// Sends this replica's vote for the epoch's (valid) proposal.
    pub(super) fn vote_for_proposal(&mut self, epoch: Epoch) {
        let cid = self.instance.cid;
        let me = self.params.me;
        let mode = self.params.quorums.mode;
        let state = self.instance.epoch_mut(epoch);
        let ProposalSlot::Valid(batch) = &state.proposal else {
            unreachable!("voting for a valid proposal")
        };
        let hash = batch.hash;
        if self
            .recovered_votes
            .get(&cid)
            .is_some_and(|r| r.forbids(epoch, hash))
        {
            tracing::info!(%cid, %epoch, "not voting: before a crash this replica voted for another value of this instance, in this epoch, or accepted one that no SYNC has superseded since");
            return;
        }
        let state = self.instance.epoch_mut(epoch);
        debug_assert!(!state.write_sent, "voted twice for one epoch");
        state.write_sent = true;
        match mode {
            // Mod-SMaRt: valid PROPOSE → WRITE.
            Mode::Bft => {
                let fresh = state.writes.add(me, hash);
                debug_assert!(fresh, "own WRITE counted twice");
                if self.params.durable {
                    // Durable: the value written goes to disk before the WRITE leaves, so
                    // that after a crash this replica still vouches for it in its collects
                    // and never writes another value in this epoch.
                    let seq = self.persist_votes();
                    self.instance.epoch_mut(epoch).write_seq = seq;
                }
                self.release_write(epoch);
            }
            // CFT has no WRITE step: valid PROPOSE → ACCEPT (`check_quorums`, which every
            // caller runs next).
            Mode::Cft => {}
        }
    }

    /// BFT: broadcasts this replica's WRITE for the epoch once its record is durable (at once
    /// without durability); the write counted already.
    pub(super) fn release_write(&mut self, epoch: Epoch) {
        if self.params.quorums.mode != Mode::Bft {
            return; // CFT has no WRITE step
        }
        let cid = self.instance.cid;
        let votes_durable = self.votes_durable;
        let state = self.instance.epoch_mut(epoch);
        if !state.write_sent || state.write_out || state.write_seq > votes_durable {
            return;
        }
        let ProposalSlot::Valid(batch) = &state.proposal else {
            return;
        };
        let hash = batch.hash;
        state.write_out = true;
        self.actions
            .push_back(Action::Broadcast(PeerMessage::Write(Vote {
                cid,
                epoch,
                hash,
            })));
    }

    /// Signs, counts and broadcasts this replica's ACCEPT.
    pub(super) fn send_accept(&mut self, epoch: Epoch, hash: Digest) {
        let vote = Vote {
            cid: self.instance.cid,
            epoch,
            hash,
        };
        let signature = sign_accept(&self.key, &vote);
        let me = self.params.me;
        let state = self.instance.epoch_mut(epoch);
        debug_assert!(!state.accept_sent, "ACCEPT sent twice in one epoch");
        state.accept_sent = true;
        let fresh = state.accepts.add(me, hash);
        debug_assert!(fresh, "own ACCEPT counted twice");
        state.accept_signatures.insert(me, (hash, signature));
        self.actions
            .push_back(Action::Broadcast(PeerMessage::Accept(Accept {
                vote,
                signature,
            })));
    }

    pub(super) fn on_write(&mut self, from: ReplicaId, vote: Vote) {
        if self.params.quorums.mode == Mode::Cft {
            // CFT has no WRITE step; a WRITE is meaningless here.
            return;
        }
        if self
            .instance
            .epoch_mut(vote.epoch)
            .writes
            .add(from, vote.hash)
        {
            self.check_quorums(vote.epoch);
        }
    }

    pub(super) fn on_accept(&mut self, from: ReplicaId, accept: Accept) {
        let vote = accept.vote;
        let state = self.instance.epoch_mut(vote.epoch);
        if state.accepts.add(from, vote.hash) {
            state
                .accept_signatures
                .insert(from, (vote.hash, accept.signature));
            self.check_quorums(vote.epoch);
        }
    }

    /// Mod-SMaRt steps 3–4, for the value of the PROPOSE this replica holds: a write quorum →
    /// ACCEPT (BFT); an accept quorum → decide. Votes for other hashes never count. An
    /// unverified proposal is voted for once f+1 others vouch for it.
    pub(super) fn check_quorums(&mut self, epoch: Epoch) {
        if epoch != self.epoch() {
            return; // votes of a later regency wait until it is installed
        }
        let quorums = self.params.quorums;
        let me = self.params.me;
        let state = self.instance.epoch_mut(epoch);
        let (hash, unverified) = match &state.proposal {
            ProposalSlot::Valid(b) => (b.hash, false),
            ProposalSlot::Unauthenticated(b) => (b.hash, true),
            _ => return,
        };
        if unverified {
            let vouchers = match quorums.mode {
                Mode::Bft => state.writes.count_except(hash, me),
                Mode::Cft => state.accepts.count_except(hash, me),
            };
            let decided = state.accepts.count(hash) >= quorums.accept_quorum();
            if vouchers < quorums.one_correct() && !decided {
                return;
            }
            let ProposalSlot::Unauthenticated(b) = std::mem::take(&mut state.proposal) else {
                unreachable!()
            };
            state.proposal = ProposalSlot::Valid(b);
            self.vote_for_proposal(epoch);
        }
        let durable = self.params.durable;
        let state = self.instance.epoch_mut(epoch);
        let quorum_step = match quorums.mode {
            // Mod-SMaRt: quorum of WRITEs → ACCEPT.
            Mode::Bft => state.writes.count(hash) >= quorums.write_quorum(),
            // CFT: the vote for the proposal is the ACCEPT.
            Mode::Cft => true,
        };
        // Only for a proposal this replica voted for.
        if state.write_sent && !state.accept_sent && quorum_step {
            if durable && state.accept_seq == 0 {
                // Durable replicas: the write quorum goes to disk first, and the ACCEPT waits
                // for it, so a crash never makes this replica forget the value.
                // Set first: the record (`collect`) claims the write quorum from now on.
                state.accept_seq = self.votes_issued + 1;
                let seq = self.persist_votes();
                debug_assert_eq!(self.instance.epoch_mut(epoch).accept_seq, seq);
            }
            if self.instance.epoch_mut(epoch).accept_seq <= self.votes_durable {
                self.send_accept(epoch, hash);
            }
        }
        if self.instance.epoch_mut(epoch).accepts.count(hash) >= quorums.accept_quorum()
            && self.accept_quorum_verified(epoch, hash)
        {
            // Mod-SMaRt: quorum of ACCEPTs → decided.
            self.decide(epoch);
        }
    }

    /// BFT: before deciding, check the signatures of the ACCEPTs the decision rests on
    /// (once per vote, never per request); a vote with a bad signature is dropped. A correct
    /// replica can therefore always prove its last decision in STOPDATA — otherwise a leader
    /// change could not see that the instance was decided and might replace its value. In CFT
    /// (no Byzantine replicas) signatures are taken as valid.
    pub(super) fn accept_quorum_verified(&mut self, epoch: Epoch, hash: Digest) -> bool {
        if self.params.quorums.mode == Mode::Cft {
            return true;
        }
        let cid = self.instance.cid;
        let me = self.params.me;
        let checker = &self.checker;
        let state = self.instance.epoch_mut(epoch);
        let vote = Vote { cid, epoch, hash };
        let unchecked: Vec<(ReplicaId, Signature)> = state
            .accept_signatures
            .iter()
            .filter(|(from, (h, _))| {
                *h == hash && **from != me && !state.verified_accepts.contains(from)
            })
            .map(|(from, (_, sig))| (*from, *sig))
            .collect();
        for (from, sig) in unchecked {
            if checker.valid_accept(from, &vote, &sig) {
                state.verified_accepts.insert(from);
            } else {
                tracing::warn!(%from, %cid, "ACCEPT with an invalid signature: vote dropped");
                state.accept_signatures.remove(&from);
                state.accepts.remove(from);
            }
        }
        state.accepts.count(hash) >= self.params.quorums.accept_quorum()
    }

    /// The current instance decided the value of `epoch` by voting.
    pub(super) fn decide(&mut self, epoch: Epoch) {
        let cid = self.instance.cid;
        let mut instance = std::mem::replace(&mut self.instance, Instance::new(cid.next()));
        let state = instance
            .epochs
            .remove(&epoch)
            .expect("deciding epoch exists");
        let ProposalSlot::Valid(value) = state.proposal else {
            unreachable!("only a valid proposal is decided")
        };
        let signatures = state
            .accept_signatures
            .into_iter()
            .filter(|(_, (h, _))| *h == value.hash)
            .map(|(from, (_, sig))| (from, sig))
            .collect();
        self.commit(
            cid,
            epoch,
            value.hash,
            value.bytes,
            value.batch,
            signatures,
            None,
        );
    }

    /// Records a decision of the current instance (by voting or from a verified proof), hands
    /// it to execution, advances the client sessions, and starts the next instance.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit(
        &mut self,
        cid: ConsensusId,
        epoch: Epoch,
        hash: Digest,
        bytes: Bytes,
        batch: Batch,
        signatures: BTreeMap<ReplicaId, Signature>,
        proof: Option<tagma_wire::DecisionProof>,
    ) {
        // An instance decides once: its state is replaced before this is called and every
        // later message for it is `Stale`, so no cid is ever decided with two hashes.
        match self.last_decided {
            Some(last) => debug_assert_eq!(last.next(), cid, "decisions out of order"),
            None => debug_assert_eq!(cid, ConsensusId(0), "first decision is not instance 0"),
        }
        if self.instance.cid == cid {
            self.instance = Instance::new(cid.next());
        }
        debug_assert_eq!(self.instance.cid, cid.next());
        // Buffered messages for this instance (decided here from a proof, without them) are
        // obsolete.
        self.future.discard_below(cid.next());
        self.recovered_votes.retain(|c, _| *c > cid);
        self.last_decided = Some(cid);
        self.arm_idle_probe();
        self.last_decided_timestamp_ms = self.last_decided_timestamp_ms.max(batch.timestamp_ms);
        self.clients.on_decided(cid, &batch);
        self.decisions
            .record(cid, epoch, hash, bytes, signatures, proof);
        self.stats.decided_instances += 1;
        self.stats.decided_requests += batch.requests.len() as u64;
        self.batch_fill.last_batch_requests = batch.requests.len();
        self.leader_change.failed_regencies = 0;
        if self.leader_change.waiting_sync && epoch >= self.epoch() {
            // Decided in the installed regency: its SYNC completed elsewhere (this replica
            // missed it); later instances are proposed normally.
            self.leader_change.waiting_sync = false;
            self.leader_change.sync_deadline_ms = None;
        }
        // Peers working on the next instance are not ahead; peers beyond it are.
        if self
            .catch_up
            .highest_seen
            .values()
            .filter(|c| **c > cid.next())
            .count()
            < self.params.quorums.one_correct()
        {
            self.catch_up.behind_since_ms = None;
            self.catch_up.duplicates = 0;
            self.catch_up.state_transfer_signalled = false;
            // Caught up by other means: a fetch not yet handed over is pointless.
            if self.fetch.as_ref().is_some_and(|f| !f.is_installing()) {
                tracing::info!(%cid, "caught up while fetching state: state transfer abandoned");
                self.fetch = None;
            }
        }
        tracing::debug!(%cid, %epoch, requests = batch.requests.len(), "decided");
        // Taken now: by the time the runtime logs it, more decisions may have pushed it out
        // of the bounded decision log.
        let logged = self
            .decisions
            .as_decided(cid)
            .expect("the decision log keeps at least the newest decision");
        let new_view = self.judge_view_changes(&batch);
        self.actions.push_back(Action::Deliver(Decision {
            cid,
            epoch,
            hash,
            batch,
            logged,
        }));
        self.state_check_after_delivery(cid);
        if let Some(view) = new_view {
            self.install_view(cid, view);
        }
    }

    /// Decides the current instance from a verified proof (catch-up or SYNC).
    pub(super) fn commit_proven(&mut self, decided: DecidedInstance, hash: Digest) -> bool {
        debug_assert_eq!(decided.cid, self.instance.cid);
        let Ok(batch) = Batch::decode(&decided.batch) else {
            // A quorum signed it, so correct replicas decoded it: only a hash collision could
            // bring us here.
            tracing::error!(cid = %decided.cid, "a proven batch does not decode");
            return false;
        };
        self.stats.decisions_forwarded_in += 1;
        let signatures = decided.proof.accepts.iter().copied().collect();
        self.commit(
            decided.cid,
            decided.proof.epoch,
            hash,
            decided.batch,
            batch,
            signatures,
            Some(decided.proof),
        );
        true
    }

    /// After every input: apply forwarded decisions and buffered messages of the instance
    /// that became current, a pending SYNC, and let the leader propose, until nothing moves
    /// or the log lags too far behind.
    pub(super) fn settle(&mut self) {
        // A replica whose log lags holds the instance in progress (`durable_log`): what it
        // kept for it is applied once the log catches up.
        if self.left || self.log_lags() {
            return;
        }
        loop {
            let cid = self.instance.cid;
            if let Some(decided) = self.catch_up.future.remove(&cid) {
                let hash = tagma_crypto::digest(&decided.batch);
                self.commit_proven(decided, hash);
                continue;
            }
            self.catch_up.future.retain(|c, _| *c > cid);
            for (from, input) in self.future.take(cid) {
                if let Err(rejection) = self.on_consensus_input(from, input) {
                    tracing::trace!(%from, %cid, reason = rejection.reason(), "buffered message rejected");
                }
            }
            if self.instance.cid != cid {
                continue;
            }
            if let Some(pending) = self.leader_change.pending.take() {
                self.finalise(pending);
                if self.instance.cid != cid {
                    continue;
                }
            }
            self.try_propose();
            if self.instance.cid == cid {
                return;
            }
        }
    }

    /// Mod-SMaRt step 1 (leader): propose the next batch if no instance is in progress and a
    /// request is waiting.
    pub(super) fn try_propose(&mut self) {
        let epoch = self.epoch();
        if !self.is_leader()
            || self.startup.is_some()
            || self.state_check_holds()
            || self.leader_change.waiting_sync
            || self.leader_change.pending.is_some()
            || !self.instance.epoch_mut(epoch).proposal.is_empty()
            || self.awaits_durable().is_some()
        {
            return;
        }
        let cid = self.instance.cid;
        // A value this replica voted for before a crash, in this epoch or a later one, is
        // the only one it may vote for: propose it again.
        let recovered = match self
            .recovered_votes
            .get(&cid)
            .map(|r| r.value_to_propose(epoch))
        {
            Some(Err(())) => return,
            Some(Ok(value)) => value,
            None => None,
        }
        .and_then(|value| Some((value.clone(), Batch::decode(value).ok()?)));
        if recovered.is_none() && self.holds_batch_to_fill() {
            return;
        }
        let Some((bytes, batch)) = recovered.or_else(|| self.build_batch()) else {
            return;
        };
        let hash = tagma_crypto::digest(&bytes);
        tracing::debug!(%cid, %epoch, requests = batch.requests.len(), bytes = bytes.len(), "proposing");
        self.actions
            .push_back(Action::Broadcast(PeerMessage::Propose(Propose {
                cid,
                epoch,
                batch: bytes.clone(),
            })));
        self.stats.proposals_sent += 1;
        // The leader handles its own PROPOSE as received (it does not send it to itself).
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

    /// The leader's next batch, encoded, or `None` if nothing can be proposed.
    pub(super) fn build_batch(&mut self) -> Option<(Bytes, Batch)> {
        let requests = self.clients.select_batch();
        if requests.is_empty() {
            return self.time_batch();
        }
        let batch = Batch {
            timestamp_ms: self.now_ms.max(self.last_decided_timestamp_ms),
            seed: self.rng.next_u64(),
            requests,
        };
        let bytes = batch.to_bytes();
        assert!(
            bytes.len() <= self.params.batch_bytes_max,
            "batch of {} bytes exceeds batch_bytes_max = {}: the size estimate in clients.rs is too small",
            bytes.len(),
            self.params.batch_bytes_max
        );
        debug_assert_eq!(
            self.clients.validate_proposal(
                &batch,
                bytes.len(),
                true,
                self.last_decided_timestamp_ms
            ),
            Ok(()),
            "the leader built an invalid batch"
        );
        Some((bytes, batch))
    }
}
