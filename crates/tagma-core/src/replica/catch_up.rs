//! Catch-up by decision forwarding: noticing that this replica is behind, asking peers for the
//! decisions it missed (with their proofs), answering such requests, and the idle probe.

use std::collections::BTreeMap;

use tagma_wire::{ConsensusId, DecidedInstance, PeerMessage, ReplicaId};

use super::{Replica, action::Action};
use crate::error::Rejection;

/// Forwarded decisions kept for later instances while catching up.
pub(super) const FUTURE_DECISIONS_MAX: usize = 64;

/// Catch-up (decision forwarding): detects that this replica is behind and
/// asks the others for the decided instances it missed.
#[derive(Default)]
pub(super) struct CatchUp {
    /// The highest instance each peer sent a consensus message for.
    pub(super) highest_seen: BTreeMap<ReplicaId, ConsensusId>,
    /// When f+1 peers were first seen ahead (`None`: not behind).
    pub(super) behind_since_ms: Option<u64>,
    pub(super) next_request_ms: u64,
    /// Verified decisions for instances after the next one.
    pub(super) future: BTreeMap<ConsensusId, DecidedInstance>,
    /// The end (exclusive) of the run of decisions last requested.
    pub(super) requested_until: ConsensusId,
    /// Rotates catch-up requests over the peers that are ahead.
    pub(super) rotation: usize,
    pub(super) state_transfer_signalled: bool,
    /// Forwarded decisions that came after this replica already had them, since it last
    /// caught up: each doubles the catch-up gap (up to a quarter of a request timeout), so
    /// a replica that processes decisions slower than the gap stops re-requesting runs it
    /// is still working through.
    pub(super) duplicates: u32,
    /// The wait before the next request is the long one for peers merely early on the next
    /// instance (`note_ahead`): shortened to the catch-up gap once f+1 peers show they
    /// decided further.
    pub(super) waiting_early: bool,
}

/// A replica that decided nothing for this many request timeouts asks the others where they
/// are (`Position`), so one that missed the last decisions before the load stopped catches
/// up without waiting for the next request (nothing else it receives names a later
/// instance).
pub(super) const IDLE_PROBE_TIMEOUTS: u64 = 2;

impl Replica {
    /// A peer sent a message for a later instance: if f+1 peers are ahead, we are behind.
    pub(super) fn note_ahead(&mut self, from: ReplicaId, cid: ConsensusId) {
        let seen = self.catch_up.highest_seen.entry(from).or_insert(cid);
        *seen = (*seen).max(cid);
        let next = self.instance.cid;
        let one_correct = self.params.quorums.one_correct();
        if self.peers_beyond(next.0) >= one_correct {
            self.maybe_start_state_transfer();
        }
        if self.peers_beyond(next.0) < one_correct {
            return;
        }
        // Messages for the next instance routinely arrive a little early; wait a quarter
        // period before asking. Enough peers (one of them correct) at least two instances
        // ahead have decided one this replica has not even seen proposed: ask after a short
        // gap (a restarted replica stalled 0.5 s after its state transfer when it waited the
        // quarter period here), also when the quarter period already runs (a replica that
        // had just caught up would otherwise wait it out while the others run on).
        let decided_further = self.peers_beyond(next.0.saturating_add(1)) >= one_correct;
        if self.catch_up.behind_since_ms.is_none() {
            let wait = if decided_further {
                self.catch_up_gap_ms()
            } else {
                self.catch_up_wait_max_ms()
            };
            self.catch_up.behind_since_ms = Some(self.now_ms);
            self.catch_up.next_request_ms = self.now_ms + wait;
            self.catch_up.waiting_early = !decided_further;
        } else if self.catch_up.waiting_early && decided_further {
            self.catch_up.waiting_early = false;
            self.catch_up.next_request_ms = self
                .catch_up
                .next_request_ms
                .min(self.now_ms + self.catch_up_gap_ms());
        }
    }

    /// How long a replica known to be behind waits for decisions before asking (again):
    /// a fiftieth of the request timeout (20 ms by default), well above the gaps inside a
    /// run of decisions, doubled for every duplicate decision received since it last caught
    /// up (it asked again while still working through a run), up to a quarter timeout.
    pub(super) fn catch_up_gap_ms(&self) -> u64 {
        let base = (self.params.request_timeout_ms / 50).max(1);
        base.saturating_mul(1u64 << self.catch_up.duplicates.min(16))
            .min(self.catch_up_wait_max_ms())
    }

    /// The longest a replica known to be behind waits before asking for decisions: a
    /// quarter of the request timeout.
    pub(super) fn catch_up_wait_max_ms(&self) -> u64 {
        (self.params.request_timeout_ms / 4).max(1)
    }

    /// How many peers sent a consensus message for an instance after `cid`.
    pub(super) fn peers_beyond(&self, cid: u64) -> usize {
        self.catch_up
            .highest_seen
            .values()
            .filter(|c| c.0 > cid)
            .count()
    }

    pub(super) fn maybe_request_decisions(&mut self) {
        if (self.catch_up.behind_since_ms.is_some() || self.leader_change.pending.is_some())
            && self.now_ms >= self.catch_up.next_request_ms
        {
            self.request_decisions(false);
        }
    }

    /// Asks for the run of decisions starting at the next instance: from one peer known to
    /// be ahead (rotating on retries), or from everyone when none is known or `broadcast`.
    /// Retried by the catch-up timer until the run arrives.
    pub(super) fn request_decisions(&mut self, broadcast: bool) {
        let cid = self.instance.cid;
        self.catch_up.behind_since_ms.get_or_insert(self.now_ms);
        self.catch_up.waiting_early = false;
        self.catch_up.next_request_ms = self.now_ms + (self.params.request_timeout_ms / 2).max(1);
        self.catch_up.requested_until = ConsensusId(cid.0 + FUTURE_DECISIONS_MAX as u64);
        let ahead: Vec<ReplicaId> = self
            .catch_up
            .highest_seen
            .iter()
            .filter(|(_, c)| **c > cid)
            .map(|(r, _)| *r)
            .collect();
        let msg = PeerMessage::DecisionRequest { cid };
        if broadcast || ahead.is_empty() {
            self.actions.push_back(Action::Broadcast(msg));
        } else {
            let to = ahead[self.catch_up.rotation % ahead.len()];
            self.catch_up.rotation = self.catch_up.rotation.wrapping_add(1);
            self.actions.push_back(Action::Send { to, msg });
        }
        self.maybe_start_state_transfer();
    }

    /// Signals (and, when durable, starts) state transfer once the (f+1)-th highest position
    /// the peers claim is further ahead than they keep decisions in memory.
    pub(super) fn maybe_start_state_transfer(&mut self) {
        if self.log_lags() {
            // A fetched state would wait for the same log before this replica goes on: it
            // fetches once the log has caught up, if it is still that far behind.
            return;
        }
        let cid = self.instance.cid;
        // The (f+1)-th highest claim: at least one correct replica is that far ahead.
        let mut claims: Vec<ConsensusId> = self.catch_up.highest_seen.values().copied().collect();
        claims.sort_unstable_by(|a, b| b.cmp(a));
        let furthest = claims
            .get(self.params.quorums.one_correct() - 1)
            .copied()
            .unwrap_or(cid);
        if furthest.0.saturating_sub(cid.0) > self.params.decisions_kept as u64
            && !self.catch_up.state_transfer_signalled
        {
            self.catch_up.state_transfer_signalled = true;
            let known_decided = ConsensusId(furthest.0.saturating_sub(1));
            self.actions.push_back(Action::StateTransferNeeded {
                next_cid: cid,
                known_decided,
            });
            if self.fetch.is_none() {
                tracing::info!(next = %cid, decided_elsewhere = %known_decided, "too far behind for decision forwarding: starting state transfer");
                self.start_fetch(false, false);
            }
        }
    }

    /// Requests the next run only if the previous one is used up or its retry is due.
    pub(super) fn request_decisions_if_due(&mut self) {
        if self.instance.cid >= self.catch_up.requested_until
            || self.now_ms >= self.catch_up.next_request_ms
        {
            self.request_decisions(false);
        }
    }

    /// Answers a catch-up request with the run of consecutive decisions starting at `cid`
    /// that this replica can prove (at most `FUTURE_DECISIONS_MAX`, within the peer's answer
    /// budget); those no longer among the decisions kept in the core come from the runtime's
    /// log.
    pub(super) fn on_decision_request(&mut self, from: ReplicaId, cid: ConsensusId) {
        if cid < self.instance.cid && self.decisions.first_cid().is_none_or(|first| cid < first) {
            // No longer in the core's memory: the runtime reads it from its log.
            self.read_log(from, cid, FUTURE_DECISIONS_MAX as u32);
            return;
        }
        let mut run = Vec::new();
        for c in cid.0..cid.0.saturating_add(FUTURE_DECISIONS_MAX as u64) {
            let Some(d) = self.decisions.proven(ConsensusId(c), &self.checker) else {
                break;
            };
            run.push(PeerMessage::Decision(d));
        }
        self.answer_run(from, run);
    }

    /// Asks the runtime to send `to` up to `count` logged decisions from `from`, within what
    /// is left of the peer's answer budget.
    pub(super) fn read_log(&mut self, to: ReplicaId, from: ConsensusId, count: u32) {
        if let Some(reserved) = self.reserve_log_read(to, count) {
            self.actions.push_back(Action::ReadLog {
                to,
                from,
                count: reserved.messages as u32,
                bytes_max: reserved.bytes,
            });
        }
    }

    pub(super) fn on_decision(
        &mut self,
        from: ReplicaId,
        decided: DecidedInstance,
    ) -> Result<(), Rejection> {
        let next = self.instance.cid;
        if self.state_vote_holds() && decided.cid >= next {
            // Asked for again once the vote ends (catch-up).
            return Err(Rejection::StartingUp);
        }
        if self.state_check_holds() && decided.cid >= next {
            // Not on a state known to be wrong: asked for again after the repair.
            return Err(Rejection::RepairingState);
        }
        if decided.cid < next {
            if self.catch_up.behind_since_ms.is_some() {
                self.catch_up.duplicates = self.catch_up.duplicates.saturating_add(1);
            }
            return Err(Rejection::Stale { cid: decided.cid });
        }
        let Some(hash) = self.checker.check(&decided) else {
            return Err(Rejection::InvalidProof {
                from,
                cid: decided.cid,
            });
        };
        if decided.cid == next && !self.log_lags() {
            self.commit_proven(decided, hash);
        } else if self.catch_up.future.len() < FUTURE_DECISIONS_MAX {
            self.catch_up.future.insert(decided.cid, decided);
        }
        if self.catch_up.behind_since_ms.is_some() || self.leader_change.pending.is_some() {
            if self.instance.cid >= self.catch_up.requested_until {
                // Still behind and the requested run is used up: ask for the next one.
                self.request_decisions(false);
            } else if self.instance.cid > next {
                // A run ends short of what was asked when the peer had decided no further
                // when it answered (it goes on deciding meanwhile): once no decision has come
                // for a short gap, ask again rather than a quarter or half of a request
                // timeout later (a restarted replica stalled 0.5 s this way after its state
                // transfer). Decisions of one run arrive back to back, so the timer keeps
                // moving while they do; a replica slower than the gap re-asks for decisions
                // it has queued, and the duplicates lengthen the gap (`catch_up_gap_ms`).
                self.catch_up.next_request_ms = self.now_ms + self.catch_up_gap_ms();
            }
        }
        self.progress_startup();
        Ok(())
    }

    /// The idle probe is due [`IDLE_PROBE_TIMEOUTS`] request timeouts from now.
    pub(super) fn arm_idle_probe(&mut self) {
        self.idle_probe_ms =
            Some(self.now_ms + IDLE_PROBE_TIMEOUTS * self.params.request_timeout_ms);
    }
}
