//! The verifiers' decision of the asynchronous BFT deployment: which token each batch
//! commits with, or that it rolls back.
//!
//! Executors send VERIFY(view, n, token, previous) after executing batch `n`: the token
//! and the token of batch `n − 1` it was computed after. The verifiers put every VERIFY in
//! one order (their agreement; this module is the deterministic state machine each of them
//! runs over that order) and decide batch by batch:
//!
//! - a VERIFY counts for batch `n` only once batch `n − 1` committed, and only if it names
//!   the token `n − 1` committed with (or, for batch 1, the initial state's token);
//! - `max(u, r) + 1` matching VERIFYs commit `n` with their token;
//! - once `n_E − u` executors voted for `n` and no token can reach the quorum with the votes
//!   still missing, or `n` stays undecided for `timeout_ms` of agreed time after its first
//!   vote, `n` rolls back: the view goes up by one (the primary rotates), and executors roll
//!   back to `n − 1` and execute `n` again in order.
//!
//! - `max(u, r) + 1` executors complaining that the view makes no progress (its primary
//!   is silent, or sends nothing they can execute) roll the next batch back the same way:
//!   the primary rotates.
//!
//! - In the extra protection mode (concurrency-bug masking), once `after_batches` batches in
//!   a row committed with no token differing (when they committed, or arriving late), a
//!   batch waits up to `wait_ms`
//!   for all `n_E` tokens: all equal commit it, any different rolls it back (it runs again
//!   in order, where no race can manifest), and after the wait the quorum commits it as
//!   usual.
//!
//! Each decision answers every VERIFY of its batch (a VERIFY-RESPONSE; executors act on
//! `r + 1` matching ones). A VERIFY of a decided batch is answered at once; one of an older
//! view is answered with the view in force, so its executor rolls back and follows.

use std::collections::BTreeMap;

use crate::quorum::Resilience;
use crate::token::Token;

/// What the verifiers decided for a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Batch `seq` committed with `token`.
    Commit { seq: u64, token: Token },
    /// Batch `seq` rolls back: executors return to batch `seq − 1` and execute `seq` in
    /// order in `view`.
    Rollback { seq: u64, view: u64 },
}

/// The extra protection mode: after `after_batches` batches in a row in agreement, wait up
/// to `wait_ms` for every executor's token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protection {
    pub after_batches: u64,
    pub wait_ms: u64,
}

/// A VERIFY, as the verifiers' order delivers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verify {
    /// The executor that sent it (0..n_E).
    pub executor: u32,
    pub view: u64,
    pub seq: u64,
    pub token: Token,
    pub previous: Token,
}

/// What answering a VERIFY takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Now: the batch is decided, or the VERIFY is of another view.
    Now(Decision),
    /// Later, with the decision of batch `seq` (the VERIFY waits for it).
    Later { seq: u64 },
    /// Never: the VERIFY is malformed (an executor outside 0..n_E, batch 0, or a batch
    /// further ahead of the last committed one than the verifiers keep votes for).
    Refused,
}

/// The votes of one batch not yet decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Tally {
    /// Each executor's first vote in the current view: token and the token before it.
    votes: BTreeMap<u32, (Token, Token)>,
    /// The agreed time of the first vote.
    first_vote_ms: u64,
}

/// The verifiers' state (the same on every correct verifier).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verification {
    resilience: Resilience,
    genesis: Token,
    timeout_ms: u64,
    view: u64,
    /// Committed tokens of the latest batches (`kept` of them), by number.
    committed: BTreeMap<u64, Token>,
    /// The last committed batch.
    last: u64,
    kept: usize,
    tallies: BTreeMap<u64, Tally>,
    /// Executors that complained about the current view.
    complaints: std::collections::BTreeSet<u32>,
    protection: Option<Protection>,
    /// Batches in a row committed with no token differing (in the tally, or arriving late).
    streak: u64,
}

impl Verification {
    /// Verification of executors tolerating `resilience`, from the initial state whose token
    /// is `genesis`; a batch undecided `timeout_ms` after its first vote rolls back; the
    /// tokens of the last `kept` committed batches answer late VERIFYs, and votes are kept
    /// for at most `kept` batches past the last committed one.
    pub fn new(resilience: Resilience, genesis: Token, timeout_ms: u64, kept: usize) -> Self {
        Verification {
            resilience,
            genesis,
            timeout_ms,
            view: 0,
            committed: BTreeMap::new(),
            last: 0,
            kept: kept.max(1),
            tallies: BTreeMap::new(),
            complaints: Default::default(),
            protection: None,
            streak: 0,
        }
    }

    /// The same, in the extra protection mode.
    pub fn with_protection(mut self, protection: Protection) -> Self {
        self.protection = Some(protection);
        self
    }

    /// The protection in force now: set, and `after_batches` unanimous batches in a row.
    fn protecting(&self) -> Option<Protection> {
        self.protection.filter(|p| self.streak >= p.after_batches)
    }

    pub fn view(&self) -> u64 {
        self.view
    }

    /// The last committed batch and its token.
    pub fn last_committed(&self) -> (u64, Token) {
        (self.last, self.token_of(self.last).unwrap_or(self.genesis))
    }

    fn token_of(&self, seq: u64) -> Option<Token> {
        if seq == 0 {
            return Some(self.genesis);
        }
        self.committed.get(&seq).copied()
    }

    /// Takes a VERIFY at agreed time `now_ms`; returns how to answer it and the decisions
    /// it brought (each answers every VERIFY waiting for its batch).
    pub fn verify(&mut self, v: Verify, now_ms: u64) -> (Answer, Vec<Decision>) {
        let ahead = v.seq.saturating_sub(self.last) > self.kept as u64;
        if v.executor as usize >= self.resilience.executors() || v.seq == 0 || ahead {
            return (Answer::Refused, Vec::new());
        }
        if v.seq <= self.last {
            if self.token_of(v.seq).is_some_and(|t| t != v.token) {
                // A late token that differs: the executors are not in agreement.
                self.streak = 0;
            }
            let decided = match self.token_of(v.seq) {
                Some(token) => Decision::Commit { seq: v.seq, token },
                // Committed so long ago that its token is gone: the executor is far behind
                // and must fetch the state; the newest decision tells it where to go.
                None => Decision::Commit {
                    seq: self.last,
                    token: self.last_committed().1,
                },
            };
            return (Answer::Now(decided), Vec::new());
        }
        if v.view != self.view {
            // An executor of another view: it rolls back to the last committed batch and
            // follows the view in force.
            let rollback = Decision::Rollback {
                seq: self.last + 1,
                view: self.view,
            };
            return (Answer::Now(rollback), Vec::new());
        }
        let tally = self.tallies.entry(v.seq).or_insert_with(|| Tally {
            votes: BTreeMap::new(),
            first_vote_ms: now_ms,
        });
        tally
            .votes
            .entry(v.executor)
            .or_insert((v.token, v.previous));
        (Answer::Later { seq: v.seq }, self.decide(now_ms))
    }

    /// Executor `executor` complains that `view` makes no progress; enough complaints of
    /// the current view roll the next batch back into the next view. Returns the answer to
    /// the complaint — the view in force (a rollback into it) when the complaint is of
    /// another view or brought the rollback, else the last committed batch, so that an
    /// executor that fell behind learns where to fetch — and the decisions it brought.
    pub fn complain(&mut self, executor: u32, view: u64) -> (Decision, Vec<Decision>) {
        let (last, token) = self.last_committed();
        let in_force = Decision::Rollback {
            seq: last + 1,
            view: self.view,
        };
        if view != self.view || executor as usize >= self.resilience.executors() {
            return (in_force, Vec::new());
        }
        self.complaints.insert(executor);
        if self.complaints.len() >= self.resilience.token_quorum() {
            let rollback = self.roll_back(last + 1);
            (rollback, vec![rollback])
        } else {
            (Decision::Commit { seq: last, token }, Vec::new())
        }
    }

    /// Which token batch `seq` committed with: at once if it did (the newest decision if its
    /// token is no longer kept), later with its decision if it is not decided yet.
    pub fn query(&self, seq: u64) -> Answer {
        if seq > self.last + self.kept as u64 {
            return Answer::Refused;
        }
        if seq > self.last {
            return Answer::Later { seq };
        }
        let decision = match self.token_of(seq) {
            Some(token) => Decision::Commit { seq, token },
            None => {
                let (seq, token) = self.last_committed();
                Decision::Commit { seq, token }
            }
        };
        Answer::Now(decision)
    }

    /// The agreed time reached `now_ms`: a batch undecided for `timeout_ms` rolls back.
    pub fn advance_time(&mut self, now_ms: u64) -> Vec<Decision> {
        let decided = self.decide(now_ms);
        if !decided.is_empty() {
            return decided;
        }
        let next = self.last + 1;
        match self.tallies.get(&next) {
            Some(t) if now_ms.saturating_sub(t.first_vote_ms) >= self.timeout_ms => {
                vec![self.roll_back(next)]
            }
            _ => Vec::new(),
        }
    }

    /// When [`Verification::advance_time`] next has something to do.
    pub fn next_due_ms(&self) -> Option<u64> {
        let tally = self.tallies.get(&(self.last + 1))?;
        let wait = self.protecting().map_or(self.timeout_ms, |p| p.wait_ms);
        Some(tally.first_vote_ms + wait.min(self.timeout_ms))
    }

    /// Decides what the votes in hand decide, batch after batch.
    fn decide(&mut self, now_ms: u64) -> Vec<Decision> {
        let mut decisions = Vec::new();
        loop {
            let next = self.last + 1;
            let Some(tally) = self.tallies.get(&next) else {
                break;
            };
            let previous = self
                .token_of(self.last)
                .expect("the last committed token is kept");
            // Votes computed after another history do not count for any token.
            let mut counts: BTreeMap<[u8; 32], usize> = BTreeMap::new();
            for (token, prev) in tally.votes.values() {
                if *prev == previous {
                    *counts.entry(token.0).or_default() += 1;
                }
            }
            let quorum = self.resilience.token_quorum();
            let voted = tally.votes.len();
            let all = self.resilience.executors();
            if let Some((token, count)) = counts.iter().find(|(_, c)| **c >= quorum) {
                let (token, count) = (Token(*token), *count);
                if let Some(p) = self.protecting()
                    && count < all
                {
                    if voted == all {
                        // A token differs: the batch runs again in order.
                        decisions.push(self.roll_back(next));
                        break;
                    }
                    if now_ms.saturating_sub(tally.first_vote_ms) < p.wait_ms {
                        break;
                    }
                }
                // In agreement so far: every vote in hand names the token.
                self.streak = if count == voted { self.streak + 1 } else { 0 };
                self.commit(next, token);
                decisions.push(Decision::Commit { seq: next, token });
                continue;
            }
            let missing = self.resilience.executors() - voted;
            let best = counts.values().copied().max().unwrap_or(0);
            let answered = voted >= self.resilience.executors() - self.resilience.u;
            if answered && best + missing < quorum {
                decisions.push(self.roll_back(next));
            }
            break;
        }
        decisions
    }

    fn commit(&mut self, seq: u64, token: Token) {
        debug_assert_eq!(seq, self.last + 1, "batches commit in order");
        self.tallies.remove(&seq);
        self.committed.insert(seq, token);
        self.last = seq;
        while self.committed.len() > self.kept {
            self.committed.pop_first();
        }
    }

    /// Batch `seq` (the next) rolls back: a new view, every vote of the old one dropped.
    fn roll_back(&mut self, seq: u64) -> Decision {
        debug_assert_eq!(seq, self.last + 1);
        self.view += 1;
        self.tallies.clear();
        self.complaints.clear();
        self.streak = 0;
        Decision::Rollback {
            seq,
            view: self.view,
        }
    }
}

mod codec;
pub use codec::{
    VerifierRequest, VerifyCodecError, decode_request, encode_complaint, encode_query,
    encode_verify,
};

#[cfg(test)]
mod tests;
