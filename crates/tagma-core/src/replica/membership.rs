//! Views: judging ordered view changes, installing a view, proofs judged under the view they
//! were decided in, and what a replica that left still serves.

use tagma_wire::{Batch, ConsensusId, DecidedInstance, Digest, ReplicaId, RequestKind, View};

use super::{
    Replica, action::Action, future_buffer::FutureBuffer, input::PeerInput,
    leader_change::LeaderChange,
};
use crate::{error::Rejection, proof::ProofChecker, transfer::TransferInput};

/// Checkers of past views kept to judge decisions of those views (leader changes right after a
/// view change carry the last decision of the view before).
pub(super) const PAST_CHECKERS_KEPT: usize = 4;

impl Replica {
    /// The view that the view changes ordered in `batch` install, judged in order against the
    /// installed view exactly as the executor judges them (`None`: no change installs one).
    pub(super) fn judge_view_changes(&self, batch: &Batch) -> Option<View> {
        let mut changes = batch
            .requests
            .iter()
            .filter(|e| e.request.kind == RequestKind::Reconfigure)
            .peekable();
        changes.peek()?;
        let mut membership = self.params.membership();
        let before = membership.view.id;
        for change in changes {
            if let Err(e) = membership.apply_change(&change.request.payload) {
                tracing::warn!(client = %change.request.client, seq = %change.request.seq, "view change refused: {e}");
            }
        }
        (membership.view.id != before).then_some(membership.view)
    }

    /// A replica that left the view takes part in nothing, but still answers what others may
    /// need from it: its position, the decisions it holds (with their proofs) and its state.
    /// After every replica stopped, a decision may be durable only at a replica that has since
    /// left — the one that ordered its own removal — and the others must be able to learn it.
    pub(super) fn serve_after_leaving(
        &mut self,
        now_ms: u64,
        from: ReplicaId,
        input: PeerInput,
    ) -> Result<(), Rejection> {
        self.set_now(now_ms);
        if from == self.params.me {
            return Err(Rejection::FromSelf);
        }
        // Only the serving side runs: no buffered message is replayed, nothing is settled.
        match input {
            PeerInput::Position { reply: false, .. } => {
                self.answer_position(from);
                Ok(())
            }
            PeerInput::DecisionRequest { cid } => {
                self.on_decision_request(from, cid);
                Ok(())
            }
            PeerInput::Transfer(
                t @ (TransferInput::Query { .. }
                | TransferInput::ChunkRequest { .. }
                | TransferInput::LogRequest { .. }),
            ) => self.on_transfer(from, t),
            _ => Err(Rejection::NotMember),
        }
    }

    /// The runtime's copy of the view moved ahead of the core's without the core deciding the
    /// change: after recovery from disk ([`Replica::resume`]) or a state installed by state
    /// transfer, the executor's view (checkpointed and replayed) is the one to order in from
    /// instance `cid + 1` on. An older or equal view is ignored.
    pub(super) fn adopt_view(&mut self, cid: ConsensusId, view: View) {
        if view.id > self.params.view {
            self.install_view(cid, view);
        }
    }

    /// Instance `cid` installed `view`: the next instance runs in it. Everything counted or
    /// verified against the old members goes: buffered messages and catch-up decisions from
    /// replicas that left, and the state of a leader change or start-up synchronisation in
    /// progress is kept only for members. The leader is the new view's member for the
    /// installed regency, so removing the leader hands leadership over at once.
    pub(super) fn install_view(&mut self, cid: ConsensusId, view: View) {
        debug_assert!(view.id > self.params.view, "views only move forward");
        let member = view.members.iter().any(|m| m.id == self.params.me);
        let old_leader = self.leader();
        // Proofs of instances decided so far are judged by the view they were decided in.
        self.decisions.seal_proofs(&self.checker);
        self.params.set_view(&view);
        let ending = std::mem::replace(
            &mut self.checker,
            ProofChecker::new(
                &self.params.members,
                &self.params.member_keys,
                self.params.quorums.accept_quorum(),
            ),
        );
        self.past_checkers.push_back((cid.next(), ending));
        while self.past_checkers.len() > PAST_CHECKERS_KEPT {
            self.past_checkers.pop_front();
        }
        let members = self.params.members.clone();
        let keep = |r: &ReplicaId| members.contains(r);
        self.future.retain_senders(&keep, self.params.members.len());
        // Verified against the old members' keys and quorums: fetched again when needed.
        self.catch_up.future.clear();
        self.catch_up.highest_seen.retain(|r, _| keep(r));
        self.leader_change.stops.retain(|r, _| keep(r));
        self.leader_change.stopdata.retain(|r, _| keep(r));
        self.leader_change.early_stopdata.retain(|r, _| keep(r));
        self.leader_change.epochs_seen.retain(|r, _| keep(r));
        self.leader_change.pending = None;
        if let Some(startup) = self.startup.as_mut() {
            startup.heard.retain(|r, _| keep(r));
        }
        self.clients.set_view(view.id);
        // A fetch planned with the old members' offers, vouchers and f starts again if needed.
        // One the runtime is installing keeps going until its verdict: a new fetch would
        // store its chunks over the ones being read.
        if !self
            .fetch
            .as_ref()
            .is_some_and(crate::transfer::Fetch::is_installing)
        {
            self.fetch = None;
            self.catch_up.state_transfer_signalled = false;
        }
        if !member {
            // Nothing of the ordering goes on: no buffered vote is replayed, no leader change
            // or catch-up continues, no request is proposed.
            self.future =
                FutureBuffer::new(self.params.future_messages_max, self.params.members.len());
            self.catch_up.highest_seen.clear();
            self.leader_change = LeaderChange::default();
            self.startup = None;
            self.clients.drop_pending();
        }
        self.stats.views_installed += 1;
        tracing::info!(%cid, view = %view.id, n = view.members.len(), f = view.f, leader = %self.leader(), member, "view installed");
        if self.leader() != old_leader {
            self.actions.push_back(Action::RegencyInstalled {
                regency: self.regency,
                leader: self.leader(),
            });
        }
        self.left = !member;
        self.actions
            .push_back(Action::ViewInstalled { cid, view, member });
    }

    /// Checks a decision's proof under the view it was decided in: this view's checker, or
    /// one of the last views' for an instance decided before the last change. An instance
    /// this replica has already decided is also accepted — with the hash it decided, if it
    /// still keeps it — as it changes nothing here (a replica that joined knows no checker of
    /// the views before it, and one restarted from a checkpoint keeps no decision before).
    /// Returns the batch hash.
    pub(super) fn check_decided(&self, d: &DecidedInstance) -> Option<Digest> {
        if let Some(hash) = self.check_proof(d) {
            return Some(hash);
        }
        let hash = tagma_crypto::digest(&d.batch);
        (d.cid < self.instance.cid && self.decisions.hash_of(d.cid).is_none_or(|h| h == hash))
            .then_some(hash)
    }

    /// Checks a decision's proof under the view it was decided in (this view's checker, or
    /// the one of the view, among the last few, whose successor started after it). Only a
    /// real proof counts: what this replica forwards (a STOPDATA's claim that ends up in the
    /// leader's SYNC) must convince replicas that have not decided it.
    pub(super) fn check_proof(&self, d: &DecidedInstance) -> Option<Digest> {
        if let Some(hash) = self.checker.check(d) {
            return Some(hash);
        }
        // The oldest kept view whose successor started after `d`: the view `d` was decided in.
        let (_, checker) = self
            .past_checkers
            .iter()
            .rev()
            .take_while(|(next_view_from, _)| d.cid < *next_view_from)
            .last()?;
        checker.check(d)
    }
}
