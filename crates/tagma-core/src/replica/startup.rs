//! Start-up synchronisation: a durable replica that (re)starts orders nothing until it knows
//! where its peers are and has caught up with them.

use std::collections::{BTreeMap, BTreeSet};

use tagma_wire::{Accept, ConsensusId, Digest, PeerMessage, Propose, ReplicaId, Vote};

use super::{
    Replica,
    action::Action,
    answer_budget::AnswerKind,
    instance::{Instance, ProposalSlot},
    start::Resume,
    state_vote::StateVoteStage,
};
use crate::quorum::Mode;

/// Start-up synchronisation (as in BFT-SMaRt's recovery and DDS): a replica that (re)starts with
/// durable state does not order until it knows where the others are and has caught up to
/// the highest position it heard, so replicas that all restarted converge on the highest
/// durable instance instead of deciding it again differently.
#[derive(Debug)]
pub(super) struct Startup {
    /// The `next` instance each peer reported.
    pub(super) heard: BTreeMap<ReplicaId, ConsensusId>,
    /// Until then every peer's position is awaited; after it, n − f (this replica's own
    /// included) are enough.
    pub(super) deadline_ms: u64,
    /// When the position goes again to the peers not heard from.
    pub(super) retransmit_ms: u64,
    /// The state vote that ends it on a durable BFT replica (see [`StateVoteRound`]).
    pub(super) state_vote: StateVoteStage,
    /// Peers that asked for this replica's checkpoint while it synchronised: they get its
    /// vote once it has one (they may be voting too).
    pub(super) asked: BTreeSet<ReplicaId>,
    /// The peers' votes in the state vote (kept from before this replica's own starts).
    pub(super) votes: BTreeMap<ReplicaId, (ConsensusId, Digest)>,
    /// The repair's state is installed (see [`StateVoteStage::Repairing`]).
    pub(super) repaired: bool,
}

/// Start-up synchronisation waits this many request timeouts for every peer's position
/// before settling for n − f, and twice as long for catching up before giving up on it.
pub(super) const STARTUP_WAIT_TIMEOUTS: u64 = 5;

impl Replica {
    /// Recovery from durable storage, before any input (see [`Resume`]). The next instance it
    /// orders is `last + 1`; peers ahead of it are caught up with as after any lag.
    pub(super) fn resume(&mut self, resume: Resume) {
        let Resume {
            last,
            timestamp_ms,
            sessions,
            recent,
            ..
        } = resume;
        debug_assert!(
            self.last_decided.is_none() && self.instance.cid == ConsensusId(0),
            "resume before any decision"
        );
        self.instance = Instance::new(last.next());
        self.last_decided = Some(last);
        self.arm_idle_probe();
        self.durable_through = Some(last);
        self.last_decided_timestamp_ms = timestamp_ms;
        self.clients.restore_sessions(&sessions);
        for decided in recent {
            self.record_proven(decided);
        }
    }

    /// Starts the start-up synchronisation (after [`Replica::resume`], or on a replica that
    /// keeps durable state and starts empty): tells every peer where this replica is and
    /// orders nothing until [`Replica::is_starting_up`] turns false.
    pub(super) fn start_startup(&mut self) {
        if self.left {
            // Recovered into a view without this replica: it only serves (see
            // `serve_after_leaving`).
            return;
        }

        let timeout = self.params.request_timeout_ms.max(1);
        self.startup = Some(Startup {
            heard: BTreeMap::new(),
            deadline_ms: self.now_ms + STARTUP_WAIT_TIMEOUTS * timeout,
            retransmit_ms: self.now_ms + timeout / 2,
            state_vote: StateVoteStage::NotStarted,
            asked: BTreeSet::new(),
            votes: BTreeMap::new(),
            repaired: false,
        });
        tracing::info!(next = %self.instance.cid, "start-up synchronisation: asking the others where they are");
        self.actions
            .push_back(Action::Broadcast(PeerMessage::Position {
                next: self.instance.cid,
                reply: false,
            }));
        self.progress_startup();
    }

    /// Whether the start-up synchronisation is still running (nothing is ordered then).
    pub fn is_starting_up(&self) -> bool {
        self.startup.is_some()
    }

    pub(super) fn on_position(&mut self, from: ReplicaId, next: ConsensusId, reply: bool) {
        if !reply && self.answer_position(from) {
            // The peer asks (it is starting, or probing): what it refused before it answers
            // again may be resent. A query refused for the answer budget changes nothing.
            self.resent_to.remove(&from);
        } else if reply && next == self.instance.cid && self.startup.is_none() {
            // The peer works on this instance too, and may have missed what this replica
            // sent for it (it refused consensus messages while it synchronised after a
            // restart, and announces its position when done).
            self.resend_own_messages(from);
        }
        if next > self.instance.cid {
            // The peer has decided up to `next − 1`: it is ahead.
            let seen = self.catch_up.highest_seen.entry(from).or_insert(next);
            *seen = (*seen).max(next);
            self.maybe_start_state_transfer();
            // Enough replicas ahead that one is correct: fetch what they decided (an idle
            // probe's answer; during recovery the start-up synchronisation does this).
            let ahead = self
                .catch_up
                .highest_seen
                .values()
                .filter(|c| **c > self.instance.cid)
                .count();
            if self.startup.is_none()
                && self.fetch.is_none()
                && ahead >= self.params.quorums.one_correct()
            {
                self.request_decisions_if_due();
            }
        }
        if let Some(r) = self.startup.as_mut() {
            r.heard.insert(from, next);
            self.progress_startup();
        }
    }

    /// Sends `to` again what this replica sent for the instance in progress in the current
    /// epoch: as leader its PROPOSE, then its WRITE and ACCEPT. Identical copies of messages
    /// of this incarnation (never anything a crash made it forget), so nothing changes for a
    /// peer that already has them.
    pub(super) fn resend_own_messages(&mut self, to: ReplicaId) {
        if self.leader_change.waiting_sync || self.left {
            return;
        }
        let (cid, epoch, me) = (self.instance.cid, self.epoch(), self.params.me);
        // Once per peer, instance and epoch (a peer's repeated positions cannot make this
        // replica send its batch again and again), unless the peer queries again; and within
        // the peer's answer budget (queries and announcements repeated at will cannot
        // either).
        if self.resent_to.get(&to) == Some(&(cid, epoch)) {
            return;
        }
        let leader = self.is_leader();
        let Some(state) = self.instance.epochs.get(&epoch) else {
            self.resent_to.insert(to, (cid, epoch));
            return;
        };
        let ProposalSlot::Valid(b) = &state.proposal else {
            self.resent_to.insert(to, (cid, epoch));
            return;
        };
        let mut msgs = Vec::new();
        if leader {
            msgs.push(PeerMessage::Propose(Propose {
                cid,
                epoch,
                batch: b.bytes.clone(),
            }));
        }
        let vote = Vote {
            cid,
            epoch,
            hash: b.hash,
        };
        if state.write_out && self.params.quorums.mode == Mode::Bft {
            msgs.push(PeerMessage::Write(vote));
        }
        if let Some((_, signature)) = state
            .accept_signatures
            .get(&me)
            .filter(|_| state.accept_sent)
        {
            msgs.push(PeerMessage::Accept(Accept {
                vote,
                signature: *signature,
            }));
        }
        if self.answer(to, AnswerKind::Position, msgs) {
            self.resent_to.insert(to, (cid, epoch));
        }
    }

    /// Answers `to`'s position query with this replica's position, within the peer's answer
    /// budget; true if answered.
    pub(super) fn answer_position(&mut self, to: ReplicaId) -> bool {
        let msg = PeerMessage::Position {
            next: self.instance.cid,
            reply: true,
        };
        self.answer(to, AnswerKind::Position, vec![msg])
    }

    /// The next time the start-up synchronisation has something to do on its own: resend
    /// the position to peers not heard from, settle for n − f at the deadline, give up
    /// catching up after twice that. Only future times (a past one would spin the timer).
    pub(super) fn startup_timer(&self) -> Option<u64> {
        let r = self.startup.as_ref()?;
        let now = self.now_ms;
        let others = self.params.members.len() - 1;
        let give_up = r.deadline_ms + STARTUP_WAIT_TIMEOUTS * self.params.request_timeout_ms;
        // Retransmissions go on while a peer is unheard (never in the past: a due one is
        // sent at the next tick); the deadlines matter only until they pass.
        let retransmit = (r.heard.len() < others).then(|| r.retransmit_ms.max(now + 1));
        let ahead = |t: u64| (t > now).then_some(t);
        let state_vote = match &r.state_vote {
            StateVoteStage::Running(a) if a.own.is_some() => {
                [ahead(a.query_ms), ahead(a.deadline_ms)]
            }
            StateVoteStage::Running(a) => [None, ahead(a.deadline_ms)],
            _ => [None, None],
        };
        [retransmit, ahead(r.deadline_ms), ahead(give_up)]
            .into_iter()
            .chain(state_vote)
            .flatten()
            .min()
    }

    pub(super) fn retransmit_position(&mut self) {
        let Some(r) = self.startup.as_mut() else {
            return;
        };
        if self.now_ms < r.retransmit_ms {
            return;
        }
        r.retransmit_ms = self.now_ms + (self.params.request_timeout_ms / 2).max(1);
        let unheard: Vec<ReplicaId> = self
            .params
            .members
            .iter()
            .filter(|m| **m != self.params.me && !r.heard.contains_key(m))
            .copied()
            .collect();
        for to in unheard {
            self.actions.push_back(Action::Send {
                to,
                msg: PeerMessage::Position {
                    next: self.instance.cid,
                    reply: false,
                },
            });
        }
    }

    /// Ends the start-up synchronisation once every peer's position is known (n − f after
    /// the deadline) and this replica has caught up to the highest of them; asks for the
    /// decisions it misses meanwhile.
    pub(super) fn progress_startup(&mut self) {
        let Some(r) = &self.startup else {
            return;
        };
        let others = self.params.members.len() - 1;
        let enough = others - self.params.quorums.f.min(others);
        let past_deadline = self.now_ms >= r.deadline_ms;
        // After the deadline, n − f positions are enough: an instance decided before the crash
        // that no replica heard holds in its log is still held by the votes its accepters
        // persisted (see `Action::PersistVote`), and any n − f replicas include one of them.
        let heard_enough = r.heard.len() >= others || (past_deadline && r.heard.len() >= enough);
        // Positions, highest first. The highest may be a Byzantine replica's claim; the
        // (f+1)-th highest is held by a correct replica, which can prove every decision up to
        // it (it keeps its last decisions with their proofs), so that one is always awaited.
        // In CFT every position is a correct replica's.
        let mut positions: Vec<ConsensusId> = r.heard.values().copied().collect();
        positions.sort_unstable_by(|a, b| b.cmp(a));
        let highest = positions.first().copied().unwrap_or(ConsensusId(0));
        let vouched = match self.params.quorums.mode {
            Mode::Cft => highest,
            Mode::Bft => positions
                .get(self.params.quorums.f)
                .copied()
                .unwrap_or(ConsensusId(0)),
        };
        let give_up_at = r.deadline_ms + STARTUP_WAIT_TIMEOUTS * self.params.request_timeout_ms;
        if self.instance.cid < vouched
            && let Some(r) = self.startup.as_mut()
            && let StateVoteStage::Running(a) = &r.state_vote
        {
            // Correct replicas decided past the instance of the vote meanwhile: they will not
            // checkpoint there, and this replica must catch up. Its state is unconfirmed, as
            // after any inconclusive vote: the later state check compares it with the peers'
            // checkpoints as it executes through their instances.
            tracing::info!(cid = %a.cid, "state vote inconclusive: the others moved past its instance");
            r.state_vote = StateVoteStage::Done;
            self.own_state_vote = None;
            self.start_state_check();
        }
        let Some(r) = &self.startup else {
            return;
        };
        let behind = self.instance.cid < highest;
        let must_wait = self.instance.cid < vouched || self.now_ms < give_up_at;
        if behind && must_wait {
            if self.now_ms >= self.catch_up.next_request_ms
                || self.instance.cid >= self.catch_up.requested_until
            {
                self.request_decisions(false);
            }
            return;
        }
        if !heard_enough {
            return;
        }
        let heard = r.heard.len();
        if self.state_vote_pending() {
            return;
        }
        if behind {
            tracing::warn!(next = %self.instance.cid, highest_heard = %highest, "start-up synchronisation: no replica proved the highest position claimed (at most f replicas claim it); ordering anyway");
        }
        tracing::info!(next = %self.instance.cid, heard, "start-up synchronisation done: ordering");
        self.startup = None;
        // Peers on the same instance resend what this replica refused meanwhile. First a
        // query, which lifts their once-per-instance limit on resends to this replica: a
        // resend they made while it still refused (answering its answer to their own
        // start-up query) must not swallow this announcement (found in `tagma bench
        // state-transfer`: the leader's PROPOSE, refused by two replicas still synchronising,
        // waited for a request timeout after a restart of every replica).
        for reply in [false, true] {
            self.actions
                .push_back(Action::Broadcast(PeerMessage::Position {
                    next: self.instance.cid,
                    reply,
                }));
        }
        self.clients.restart_timers(self.now_ms);
        self.settle();
    }
}
