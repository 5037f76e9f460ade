//! The later state check: a durable BFT replica whose state vote after a restart was
//! inconclusive compares its state with its peers' checkpoints as it executes through their
//! instances, until f+1 of them confirm it or f+1 contradict it (then it fetches theirs).
//!
//! A replica that restarts alone finds its peers past the instance it votes on: nobody votes
//! there, and the vote ends inconclusive. Its state may still be wrong (a disk that returned a
//! wrong state under valid checksums). Rather than stay silently diverged, it goes on ordering
//! with its state marked unconfirmed (`CoreStats::state_unconfirmed`), and:
//! - asks its peers for their newest checkpoint (`StateQuery`, answered by an offer);
//! - expects each peer's next checkpoint one checkpoint period after the one it offered, hashes
//!   its own state right after executing that instance (`Action::DigestState` after the
//!   `Deliver`), and asks that peer again once it has;
//! - counts a peer whose checkpoint at an instance it hashed has its digest as a match, one
//!   with another digest as a contradiction.
//!
//! One correct peer's checkpoint at any instance determines the state there, so f+1 matches
//! (one of them correct) confirm the state, and f+1 contradictions prove it wrong: the replica
//! then stops taking part (its votes and decisions are refused: `Rejection::RepairingState`)
//! and fetches the state at its position from the others (state transfer in repair mode).
//! Any state installed by state transfer (validated by f+1 replicas' digests) ends the check.

use std::collections::{BTreeMap, BTreeSet};

use tagma_wire::{CheckpointInfo, ConsensusId, Digest, PeerMessage, ReplicaId};

use super::{Replica, action::Action};
use crate::quorum::Mode;

/// Own digests kept while a check runs (the newest; one per peer checkpoint instance hashed).
pub(super) const STATE_CHECK_DIGESTS_MAX: usize = 64;

/// A running check (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct StateCheck {
    /// This replica's state digest after each instance it hashed for the check.
    own: BTreeMap<ConsensusId, Digest>,
    /// The instance of each undecided peer's next checkpoint.
    expected: BTreeMap<ReplicaId, ConsensusId>,
    /// Digests asked for (`Action::DigestState`) and not answered yet.
    hashing: BTreeSet<ConsensusId>,
    matches: BTreeSet<ReplicaId>,
    contradictions: BTreeSet<ReplicaId>,
    /// When the undecided peers are asked for their checkpoints again.
    query_ms: u64,
    /// f+1 peers contradicted the state: it is being fetched, and this replica takes no part
    /// in ordering meanwhile.
    repairing: bool,
}

impl Replica {
    /// The state vote after a restart ended inconclusive: the check starts (durable BFT
    /// replicas with the state vote and a known checkpoint period).
    pub(super) fn start_state_check(&mut self) {
        let p = &self.params;
        if !(p.durable && p.state_vote && p.quorums.mode == Mode::Bft && p.checkpoint_period > 0) {
            return;
        }
        tracing::warn!(
            next = %self.instance.cid,
            "state unconfirmed: ordering on, checking it against the peers' checkpoints as they come"
        );
        self.state_check = Some(StateCheck {
            query_ms: self.now_ms,
            ..StateCheck::default()
        });
        self.query_state_check();
    }

    /// Whether the check found the state wrong and ordering waits for the repair.
    pub(super) fn state_check_holds(&self) -> bool {
        self.state_check.as_ref().is_some_and(|c| c.repairing)
    }

    /// A peer's offer (its newest checkpoint) while the check runs.
    pub(super) fn state_check_offer(
        &mut self,
        from: ReplicaId,
        checkpoint: Option<CheckpointInfo>,
    ) {
        let (next, period) = (self.instance.cid, self.params.checkpoint_period);
        let Some(check) = self.state_check.as_mut() else {
            return;
        };
        if check.repairing || check.matches.contains(&from) || check.contradictions.contains(&from)
        {
            return;
        }
        let Some(c) = checkpoint else {
            return;
        };
        if let Some(own) = check.own.get(&c.cid) {
            if *own == c.digest {
                check.matches.insert(from);
            } else {
                tracing::warn!(peer = %from, cid = %c.cid, "state check: a peer's checkpoint contradicts this replica's state");
                check.contradictions.insert(from);
            }
            check.expected.remove(&from);
            self.weigh_state_check();
            return;
        }
        // Its next checkpoint at or after the next instance this replica executes.
        let at = if c.cid >= next {
            c.cid
        } else {
            let behind = next.0 - c.cid.0;
            ConsensusId(c.cid.0 + behind.div_ceil(period) * period)
        };
        check.expected.insert(from, at);
    }

    /// After each delivery: the state is hashed right after an instance where a peer's
    /// checkpoint is expected.
    pub(super) fn state_check_after_delivery(&mut self, cid: ConsensusId) {
        let Some(check) = self.state_check.as_mut() else {
            return;
        };
        if check.repairing
            || check.own.contains_key(&cid)
            || check.hashing.contains(&cid)
            || !check.expected.values().any(|c| *c == cid)
        {
            return;
        }
        check.hashing.insert(cid);
        self.actions.push_back(Action::DigestState { cid });
    }

    /// The runtime's digest of the state after `cid`, if the check asked for it; true if it
    /// did.
    pub(super) fn state_check_digest(&mut self, cid: ConsensusId, digest: Digest) -> bool {
        let timeout = self.params.request_timeout_ms.max(1);
        let now = self.now_ms;
        let Some(check) = self.state_check.as_mut() else {
            return false;
        };
        if !check.hashing.remove(&cid) {
            return false;
        }
        check.own.insert(cid, digest);
        while check.own.len() > STATE_CHECK_DIGESTS_MAX {
            check.own.pop_first();
        }
        // The peers checkpoint that instance about now: ask them once they had time to.
        check.query_ms = check.query_ms.min(now + timeout / 2);
        true
    }

    /// On every tick: the undecided peers are asked again when the time has come; a repair
    /// whose fetch was dropped without installing anything starts again.
    pub(super) fn state_check_tick(&mut self) {
        if self.state_check_holds() && self.fetch.is_none() {
            self.catch_up.state_transfer_signalled = true;
            self.start_fetch(false, true);
            return;
        }
        if self
            .state_check
            .as_ref()
            .is_some_and(|c| !c.repairing && c.query_ms <= self.now_ms)
        {
            self.query_state_check();
        }
    }

    /// When the check next asks its peers (`None`: no check, or it waits for a repair).
    pub(super) fn state_check_deadline_ms(&self) -> Option<u64> {
        self.state_check
            .as_ref()
            .filter(|c| !c.repairing)
            .map(|c| c.query_ms)
    }

    /// Asks each undecided peer for its newest checkpoint: those not heard from yet, and those
    /// whose expected checkpoint this replica has hashed.
    fn query_state_check(&mut self) {
        let (now, next, me) = (self.now_ms, self.instance.cid, self.params.me);
        let timeout = self.params.request_timeout_ms.max(1);
        let Some(check) = self.state_check.as_mut() else {
            return;
        };
        check.query_ms = now + timeout;
        let ask: Vec<ReplicaId> = self
            .params
            .members
            .iter()
            .copied()
            .filter(|p| *p != me)
            .filter(|p| !check.matches.contains(p) && !check.contradictions.contains(p))
            .filter(|p| {
                check
                    .expected
                    .get(p)
                    .is_none_or(|at| check.own.contains_key(at))
            })
            .collect();
        for to in ask {
            self.actions.push_back(Action::Send {
                to,
                msg: PeerMessage::StateQuery { next },
            });
        }
    }

    /// f+1 matches confirm the state; f+1 contradictions start the repair.
    fn weigh_state_check(&mut self) {
        let one_correct = self.params.quorums.one_correct();
        let Some(check) = self.state_check.as_mut() else {
            return;
        };
        if check.matches.len() >= one_correct {
            tracing::info!(
                matches = check.matches.len(),
                "state check: f+1 peers' checkpoints confirm this replica's state"
            );
            self.stats.state_checks_confirmed += 1;
            self.state_check = None;
        } else if check.contradictions.len() >= one_correct && !check.repairing {
            tracing::warn!(
                contradictions = check.contradictions.len(),
                next = %self.instance.cid,
                "state check: f+1 peers' checkpoints contradict this replica's state; this replica stops ordering and fetches theirs"
            );
            check.repairing = true;
            self.stats.state_checks_contradicted += 1;
            // Started later if a fetch is installing (`state_check_tick`).
            self.start_repair();
        }
    }

    /// A state installed by state transfer (vouched for by f+1 replicas) ends the check.
    pub(super) fn end_state_check_on_install(&mut self) {
        if self.state_check.take().is_some() {
            tracing::info!("state check ended: a fetched state replaced this replica's");
        }
    }
}
