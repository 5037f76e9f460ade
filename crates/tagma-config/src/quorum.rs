//! All quorum arithmetic, in one place (the thresholds of Mod-SMaRt: Sousa, Bessani: From
//! Byzantine Consensus to BFT State Machine Replication: A Latency-Optimal Transformation).
//!
//! BFT-SMaRt's rule is "strictly more than q" with q = ⌊(n+f)/2⌋ (BFT) or ⌊n/2⌋ (CFT); here
//! every threshold is expressed as the *size* of the quorum, i.e. q+1.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Fault model of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Byzantine faults: n ≥ 3f+1, PROPOSE → WRITE → ACCEPT.
    #[default]
    Bft,
    /// Crash faults only: n ≥ 2f+1, PROPOSE → ACCEPT.
    Cft,
}

impl Mode {
    /// Fewest replicas that tolerate `f` faults in this mode.
    pub const fn replicas_needed(self, f: usize) -> usize {
        match self {
            Mode::Bft => 3 * f + 1,
            Mode::Cft => 2 * f + 1,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Bft => "bft",
            Mode::Cft => "cft",
        })
    }
}

/// Quorum sizes for a view of `n` replicas tolerating `f` faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quorums {
    pub mode: Mode,
    pub n: usize,
    pub f: usize,
}

impl Quorums {
    pub fn new(mode: Mode, n: usize, f: usize) -> Self {
        assert!(
            n >= mode.replicas_needed(f),
            "n = {n} cannot tolerate f = {f} in {mode} mode"
        );
        Quorums { mode, n, f }
    }

    /// Matching WRITEs needed before sending ACCEPT (BFT only): ⌊(n+f)/2⌋+1 = ⌈(n+f+1)/2⌉.
    pub fn write_quorum(&self) -> usize {
        debug_assert_eq!(self.mode, Mode::Bft);
        (self.n + self.f) / 2 + 1
    }

    /// Matching ACCEPTs needed to decide: the Byzantine quorum (BFT) or a majority (CFT).
    pub fn accept_quorum(&self) -> usize {
        match self.mode {
            Mode::Bft => (self.n + self.f) / 2 + 1,
            Mode::Cft => self.n / 2 + 1,
        }
    }

    /// Matching replies a client needs: f+1 (BFT) / 1 (CFT); with unordered reads
    /// enabled, ⌊(n+f)/2⌋+1 (BFT) / ⌊n/2⌋+1 (CFT) for every request.
    pub fn reply_quorum(&self, readonly_requests: bool) -> usize {
        match (self.mode, readonly_requests) {
            (Mode::Bft, false) => self.f + 1,
            (Mode::Cft, false) => 1,
            (Mode::Bft, true) => (self.n + self.f) / 2 + 1,
            (Mode::Cft, true) => self.n / 2 + 1,
        }
    }

    /// Replies that must agree for an unordered read to be accepted (same as
    /// [`Quorums::reply_quorum`] with read-only requests enabled).
    pub fn unordered_reply_quorum(&self) -> usize {
        self.reply_quorum(true)
    }

    /// STOPs that make a replica join a leader change: f+1 (BFT), 1 (CFT).
    pub fn stop_join(&self) -> usize {
        match self.mode {
            Mode::Bft => self.f + 1,
            Mode::Cft => 1,
        }
    }

    /// STOPs that install a new regency: n−f.
    pub fn stop_install(&self) -> usize {
        self.n - self.f
    }

    /// Replicas whose common claim must be believed because at least one of them is correct:
    /// f+1 in BFT; in CFT every replica is correct, so one is enough.
    pub fn one_correct(&self) -> usize {
        match self.mode {
            Mode::Bft => self.f + 1,
            Mode::Cft => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bft_quorums_match_the_paper() {
        let q = Quorums::new(Mode::Bft, 4, 1);
        assert_eq!((q.write_quorum(), q.accept_quorum()), (3, 3));
        assert_eq!(q.reply_quorum(false), 2);
        assert_eq!(q.reply_quorum(true), 3);
        assert_eq!((q.stop_join(), q.stop_install()), (2, 3));
        let q = Quorums::new(Mode::Bft, 7, 2);
        assert_eq!(
            (
                q.accept_quorum(),
                q.reply_quorum(false),
                q.reply_quorum(true)
            ),
            (5, 3, 5)
        );
        let q = Quorums::new(Mode::Bft, 10, 3);
        assert_eq!(q.accept_quorum(), 7);
        // n = 5, f = 1 (more replicas than needed): ⌈(n+f+1)/2⌉ = 4.
        assert_eq!(Quorums::new(Mode::Bft, 5, 1).accept_quorum(), 4);
    }

    #[test]
    fn cft_quorums_are_majorities() {
        let q = Quorums::new(Mode::Cft, 3, 1);
        assert_eq!(q.accept_quorum(), 2);
        assert_eq!((q.reply_quorum(false), q.reply_quorum(true)), (1, 2));
        assert_eq!(Quorums::new(Mode::Cft, 5, 2).accept_quorum(), 3);
        // One crash-faulty replica's claim is trustworthy in CFT; f+1 are needed in BFT.
        assert_eq!(Quorums::new(Mode::Cft, 3, 1).one_correct(), 1);
        assert_eq!(Quorums::new(Mode::Bft, 4, 1).one_correct(), 2);
    }

    #[test]
    fn any_two_bft_quorums_share_a_correct_replica() {
        for f in 1..=4 {
            for n in 3 * f + 1..=3 * f + 4 {
                let q = Quorums::new(Mode::Bft, n, f).accept_quorum();
                assert!(2 * q > n + f, "n={n} f={f} q={q}");
                assert!(q <= n - f, "quorum reachable with f silent replicas");
            }
        }
    }

    #[test]
    #[should_panic]
    fn rejects_too_few_replicas() {
        Quorums::new(Mode::Bft, 3, 1);
    }
}
