//! Which replica a proxy sends ordered requests to first: its guess of the leader.
//!
//! A request authenticated for every member reaches the others anyway, relayed in the
//! leader's PROPOSE, so sending it to the leader alone saves each follower a frame to read,
//! authenticate and keep, and the client three of its four frames (PBFT's clients do the
//! same). The guess starts at the first member (regency 0's leader) and changes when replicas
//! report another leader ([`LeaderHint`]): when the latest reports of `hint_quorum` members
//! (f + 1 in BFT, so that the f faulty ones cannot steer it alone; one in CFT) name the same
//! leader of the same regency. The latest report counts, not the highest regency: a cluster
//! restarted from its disks may be back at an earlier regency.
//! When the guessed leader itself names another, the guess is dropped and requests go to every
//! member until a quorum of reports names the leader (the guessed replica forwarding requests
//! to the real leader would otherwise keep the client on it, every request waiting a request
//! timeout). A wrong guess costs time, never safety: a request the guessed leader leaves
//! unanswered for [`LeaderGuess::spread_after`] goes to every member, which is what every
//! request did before, and the replicas' request timers take it from there.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tagma_wire::{LeaderHint, ReplicaId, ViewId};

use super::links::Members;

/// A request unanswered for this many smoothed latencies goes to every member.
const SPREAD_LATENCIES: u32 = 4;
/// ... but never sooner than this (a quick leader's short latencies would otherwise make a
/// scheduling hiccup look like a dead leader).
pub(super) const SPREAD_AFTER_MIN: Duration = Duration::from_millis(50);

/// No guess: requests go to every member.
const UNKNOWN: u64 = u64::MAX;

/// The proxy's guess of the leader, the replicas' latest reports, and the smoothed latency of
/// ordered calls.
pub(super) struct LeaderGuess {
    /// The guessed leader's id, or [`UNKNOWN`] (read on every send without a lock).
    leader: AtomicU64,
    /// The view the guess belongs to, and every member's latest report.
    reports: std::sync::Mutex<Reports>,
    /// Smoothed latency of answered ordered calls, µs (an exponential moving average; racy
    /// updates lose a sample at worst).
    latency_us: AtomicU64,
}

#[derive(Default)]
struct Reports {
    view: ViewId,
    latest: BTreeMap<ReplicaId, LeaderHint>,
}

impl LeaderGuess {
    /// Regency 0's leader of `members`' view.
    pub(super) fn new(members: &Members) -> Self {
        let guess = LeaderGuess {
            leader: AtomicU64::new(UNKNOWN),
            reports: std::sync::Mutex::new(Reports::default()),
            latency_us: AtomicU64::new(0),
        };
        guess.reset(members);
        guess
    }

    /// Starts over in `members`' view: its first member, until replicas report another.
    pub(super) fn reset(&self, members: &Members) {
        let mut reports = crate::locking::lock(&self.reports);
        *reports = Reports {
            view: members.view,
            ..Reports::default()
        };
        let first = members
            .links
            .first()
            .map_or(UNKNOWN, |l| l.info.id.0.into());
        self.leader.store(first, Ordering::Relaxed);
    }

    /// The guessed leader, if it is a member of `members`' view.
    pub(super) fn leader(&self, members: &Members) -> Option<ReplicaId> {
        let id = self.leader.load(Ordering::Relaxed);
        let id = ReplicaId(u32::try_from(id).ok()?);
        members.contains(id).then_some(id)
    }

    /// Member `from` reports `hint`; the guess moves once the latest reports of
    /// `members.hint_quorum` members of the current view name the same leader and regency, and
    /// is dropped when the guessed leader names another.
    pub(super) fn on_hint(&self, from: ReplicaId, hint: LeaderHint, members: &Members) {
        if hint.view != members.view || !members.contains(from) || !members.contains(hint.leader) {
            return;
        }
        let mut reports = crate::locking::lock(&self.reports);
        if reports.view != members.view {
            return; // a reset for another view is under way
        }
        reports.latest.insert(from, hint);
        let agreeing = (reports.latest.values())
            .filter(|h| h.regency == hint.regency && h.leader == hint.leader)
            .count();
        let leader = u64::from(hint.leader.0);
        let guessed = self.leader.load(Ordering::Relaxed);
        if guessed == u64::from(from.0) && leader != guessed {
            self.leader.store(UNKNOWN, Ordering::Relaxed);
        }
        if agreeing >= members.hint_quorum && self.leader.load(Ordering::Relaxed) != leader {
            self.leader.store(leader, Ordering::Relaxed);
            tracing::debug!(
                regency = hint.regency.0,
                leader = hint.leader.0,
                "replicas report a new leader: ordered requests go to it first"
            );
        }
    }

    /// An ordered call was answered `latency` after it was first sent.
    pub(super) fn observe(&self, latency: Duration) {
        let sample = latency.as_micros().min(u128::from(u32::MAX)) as u64;
        let old = self.latency_us.load(Ordering::Relaxed);
        let new = if old == 0 {
            sample
        } else {
            old - old / 8 + sample / 8
        };
        self.latency_us.store(new, Ordering::Relaxed);
    }

    /// How long a request sent to the guessed leader alone waits before it goes to every
    /// member: a few smoothed latencies, at least [`SPREAD_AFTER_MIN`], at most `most` (the
    /// proxy passes the lesser of its retransmission period and half the replicas' request
    /// timeout, so that a request reaches the followers before a replica that is not the
    /// leader would forward it).
    pub(super) fn spread_after(&self, most: Duration) -> Duration {
        let smoothed = Duration::from_micros(self.latency_us.load(Ordering::Relaxed));
        (smoothed * SPREAD_LATENCIES).clamp(SPREAD_AFTER_MIN, most.max(SPREAD_AFTER_MIN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::links::tests::members_with;
    use tagma_wire::Regency;

    fn hint(view: u32, regency: u32, leader: u32) -> LeaderHint {
        LeaderHint {
            view: ViewId(view),
            regency: Regency(regency),
            leader: ReplicaId(leader),
        }
    }

    #[test]
    fn the_guess_starts_at_the_first_member_and_moves_on_a_quorum_of_reports() {
        let members = members_with(&[0, 1, 2, 3], 2);
        let guess = LeaderGuess::new(&members);
        assert_eq!(guess.leader(&members), Some(ReplicaId(0)));
        // One report (a faulty replica could send it) does not move it.
        guess.on_hint(ReplicaId(2), hint(0, 1, 1), &members);
        assert_eq!(guess.leader(&members), Some(ReplicaId(0)));
        // A second member naming the same leader of the same regency does.
        guess.on_hint(ReplicaId(3), hint(0, 1, 1), &members);
        assert_eq!(guess.leader(&members), Some(ReplicaId(1)));
        // Reports of another view or naming a non-member change nothing, nor one replica's
        // report of an older regency.
        guess.on_hint(ReplicaId(2), hint(7, 5, 3), &members);
        guess.on_hint(ReplicaId(3), hint(7, 5, 3), &members);
        guess.on_hint(ReplicaId(2), hint(0, 6, 9), &members);
        guess.on_hint(ReplicaId(3), hint(0, 6, 9), &members);
        guess.on_hint(ReplicaId(9), hint(0, 6, 2), &members);
        guess.on_hint(ReplicaId(0), hint(0, 0, 0), &members);
        assert_eq!(guess.leader(&members), Some(ReplicaId(1)));
        // A quorum of latest reports is believed even for an earlier regency (a cluster
        // restarted from its disks).
        guess.on_hint(ReplicaId(2), hint(0, 0, 0), &members);
        assert_eq!(guess.leader(&members), Some(ReplicaId(0)));
    }

    #[test]
    fn a_replica_cannot_vote_twice_by_repeating_itself() {
        let members = members_with(&[0, 1, 2, 3], 2);
        let guess = LeaderGuess::new(&members);
        guess.on_hint(ReplicaId(2), hint(0, 1, 1), &members);
        guess.on_hint(ReplicaId(2), hint(0, 1, 1), &members);
        assert_eq!(guess.leader(&members), Some(ReplicaId(0)));
        // Its later report replaces its earlier one.
        guess.on_hint(ReplicaId(2), hint(0, 2, 2), &members);
        guess.on_hint(ReplicaId(3), hint(0, 1, 1), &members);
        assert_eq!(guess.leader(&members), Some(ReplicaId(0)));
    }

    #[test]
    fn the_guessed_leader_naming_another_drops_the_guess_until_a_quorum_names_one() {
        let members = members_with(&[0, 1, 2, 3], 2);
        let guess = LeaderGuess::new(&members);
        // Others' single reports leave the guess alone...
        guess.on_hint(ReplicaId(2), hint(0, 1, 1), &members);
        assert_eq!(guess.leader(&members), Some(ReplicaId(0)));
        // ... the guessed leader's does not: requests go to every member.
        guess.on_hint(ReplicaId(0), hint(0, 2, 2), &members);
        assert_eq!(guess.leader(&members), None);
        guess.on_hint(ReplicaId(3), hint(0, 2, 2), &members);
        assert_eq!(guess.leader(&members), Some(ReplicaId(2)));
        // The guessed leader reporting itself (it never does) changes nothing.
        guess.on_hint(ReplicaId(2), hint(0, 2, 2), &members);
        assert_eq!(guess.leader(&members), Some(ReplicaId(2)));
    }

    #[test]
    fn a_reset_starts_over_in_the_new_view() {
        let members = members_with(&[0, 1, 2, 3], 2);
        let guess = LeaderGuess::new(&members);
        guess.on_hint(ReplicaId(2), hint(0, 1, 1), &members);
        guess.on_hint(ReplicaId(3), hint(0, 1, 1), &members);
        let next = members_with(&[1, 2, 3, 4], 2);
        guess.reset(&next);
        assert_eq!(guess.leader(&members), Some(ReplicaId(1)));
        assert_eq!(guess.leader(&next), Some(ReplicaId(1)));
        let other = members_with(&[5, 6, 7], 1);
        assert_eq!(guess.leader(&other), None);
    }

    #[test]
    fn requests_spread_after_a_few_latencies_within_bounds() {
        let members = members_with(&[0, 1, 2], 1);
        let guess = LeaderGuess::new(&members);
        let retransmit = Duration::from_millis(1000);
        assert_eq!(guess.spread_after(retransmit), SPREAD_AFTER_MIN);
        for _ in 0..64 {
            guess.observe(Duration::from_millis(40));
        }
        let after = guess.spread_after(retransmit);
        assert!(
            after > Duration::from_millis(150) && after <= Duration::from_millis(160),
            "{after:?}"
        );
        for _ in 0..64 {
            guess.observe(Duration::from_secs(5));
        }
        assert_eq!(guess.spread_after(retransmit), retransmit);
    }
}
