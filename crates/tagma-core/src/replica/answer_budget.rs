//! The answer budget: how much work answering one peer may cost this replica per period.
//!
//! Some peer messages are requests whose answer is larger than the request, or several
//! messages: a position query (answered with this replica's position, and an announcement at
//! the same instance with this replica's PROPOSE, WRITE and ACCEPT again), a decision or log
//! request (a run of up to 64 decisions with their proofs), a state query (an offer, and a
//! state vote) and a chunk request (a chunk of a checkpoint, read from disk). A peer that
//! repeats such a request, a faulty one or a restarting one, would make a correct replica
//! spend bandwidth and CPU without bound. Each kind of answer therefore has an allowance per
//! peer and per period ([`AnswerBudget`]); an answer that would exceed it is not sent (a run
//! of decisions is cut short there) and counted in [`CoreStats::answers_refused`]. A correct
//! peer that is refused asks again (its catch-up, state transfer and start-up retries are
//! timer-driven), and gets its answer in a later period.
//!
//! Periods are per peer: one starts with the first answer charged after the previous one
//! ended, so in any interval of one period a peer gets at most twice the allowance.
//!
//! [`CoreStats::answers_refused`]: super::CoreStats::answers_refused

use std::collections::BTreeMap;

use tagma_wire::{PeerMessage, ReplicaId};

use super::{Replica, action::Action};
use crate::transfer::LOG_RUN;

/// The default period of the answer budget.
pub const ANSWER_PERIOD_MS: u64 = 1_000;
/// Default allowance of answers to position queries per peer and period: a restarting peer
/// queries every half request timeout, an idle one every two timeouts.
pub const POSITION_ANSWERS_MAX: u64 = 16;
/// Default bytes of answers to position queries per peer and period, in largest batches:
/// each resend carries at most one PROPOSE.
pub const POSITION_ANSWER_BATCHES_MAX: u64 = 4;
/// Default forwarded or logged decisions per peer and period, in runs of [`LOG_RUN`].
pub const DECISION_ANSWER_RUNS_MAX: u64 = 64;
/// Default bytes of forwarded or logged decisions per peer and period, in largest batches.
pub const DECISION_ANSWER_BATCHES_MAX: u64 = 256;
/// Default state offers and chunks per peer and period.
pub const STATE_ANSWERS_MAX: u64 = 1_024;
/// Default bytes of state offers and chunks per peer and period, in chunks: above the
/// measured state-transfer throughput, so that a fetch from a correct source is not slowed.
pub const STATE_ANSWER_CHUNKS_MAX: u64 = 512;

/// What one kind of answer may cost per peer and period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allowance {
    pub messages: u64,
    pub bytes: u64,
}

/// The kinds of answers, each with its own allowance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerKind {
    /// The answer to a position query, and this replica's PROPOSE, WRITE and ACCEPT resent to
    /// a peer that announces it works on the same instance.
    Position,
    /// Decisions forwarded to a peer catching up, or read from the log for it (decision and
    /// log requests).
    Decisions,
    /// State offers (and this replica's state vote) and checkpoint chunks.
    State,
}

/// How much work answering one peer may cost per period, by kind of answer (see the module
/// documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerBudget {
    pub period_ms: u64,
    pub positions: Allowance,
    pub decisions: Allowance,
    pub state: Allowance,
}

impl AnswerBudget {
    /// The defaults, scaled to the largest batch and the state-transfer chunk.
    pub fn for_limits(batch_bytes_max: usize, chunk_bytes: u32) -> Self {
        let batch = batch_bytes_max as u64;
        AnswerBudget {
            period_ms: ANSWER_PERIOD_MS,
            positions: Allowance {
                messages: POSITION_ANSWERS_MAX,
                bytes: POSITION_ANSWER_BATCHES_MAX * batch,
            },
            decisions: Allowance {
                messages: DECISION_ANSWER_RUNS_MAX * u64::from(LOG_RUN),
                bytes: DECISION_ANSWER_BATCHES_MAX * batch,
            },
            state: Allowance {
                messages: STATE_ANSWERS_MAX,
                bytes: STATE_ANSWER_CHUNKS_MAX * u64::from(chunk_bytes),
            },
        }
    }

    pub fn allowance(&self, kind: AnswerKind) -> Allowance {
        match kind {
            AnswerKind::Position => self.positions,
            AnswerKind::Decisions => self.decisions,
            AnswerKind::State => self.state,
        }
    }
}

/// What one peer was answered in its current period.
#[derive(Clone, Copy, Debug, Default)]
struct Spent {
    start_ms: u64,
    by_kind: [Allowance; 3],
}

/// What each peer was answered in its current period.
#[derive(Debug, Default)]
pub(super) struct AnswerLedger {
    spent: BTreeMap<ReplicaId, Spent>,
}

fn index(kind: AnswerKind) -> usize {
    match kind {
        AnswerKind::Position => 0,
        AnswerKind::Decisions => 1,
        AnswerKind::State => 2,
    }
}

impl AnswerLedger {
    /// What `peer` was answered so far in its period at `now_ms` (a new period once the last
    /// one ended; entries of periods that ended go, so the ledger holds at most the peers
    /// answered within one period).
    fn current(&mut self, budget: &AnswerBudget, now_ms: u64, peer: ReplicaId) -> &mut Spent {
        let period_ms = budget.period_ms.max(1);
        if !self.spent.contains_key(&peer) {
            self.spent
                .retain(|_, s| now_ms < s.start_ms.saturating_add(period_ms));
        }
        let spent = self.spent.entry(peer).or_insert(Spent {
            start_ms: now_ms,
            ..Spent::default()
        });
        if now_ms >= spent.start_ms.saturating_add(period_ms) {
            *spent = Spent {
                start_ms: now_ms,
                ..Spent::default()
            };
        }
        spent
    }

    /// What `peer` may still be answered with in this period.
    fn left(
        &mut self,
        budget: &AnswerBudget,
        now_ms: u64,
        peer: ReplicaId,
        kind: AnswerKind,
    ) -> Allowance {
        let allowed = budget.allowance(kind);
        let used = self.current(budget, now_ms, peer).by_kind[index(kind)];
        Allowance {
            messages: allowed.messages.saturating_sub(used.messages),
            bytes: allowed.bytes.saturating_sub(used.bytes),
        }
    }

    /// Charges `cost` to `peer` if it fits in what is left of its allowance; false (nothing
    /// charged) if not.
    fn charge(
        &mut self,
        budget: &AnswerBudget,
        now_ms: u64,
        peer: ReplicaId,
        kind: AnswerKind,
        cost: Allowance,
    ) -> bool {
        let left = self.left(budget, now_ms, peer, kind);
        if cost.messages > left.messages || cost.bytes > left.bytes {
            return false;
        }
        let used = &mut self.current(budget, now_ms, peer).by_kind[index(kind)];
        used.messages += cost.messages;
        used.bytes += cost.bytes;
        true
    }

    /// Gives back what a charge did not use (never below nothing charged).
    fn refund(&mut self, budget: &AnswerBudget, now_ms: u64, peer: ReplicaId, unused: Allowance) {
        let used = &mut self.current(budget, now_ms, peer).by_kind[index(AnswerKind::Decisions)];
        used.messages = used.messages.saturating_sub(unused.messages);
        used.bytes = used.bytes.saturating_sub(unused.bytes);
    }
}

/// The encoded size of a peer message (what sending it costs).
pub(super) fn cost_of<'a>(msgs: impl IntoIterator<Item = &'a PeerMessage>) -> Allowance {
    msgs.into_iter()
        .fold(Allowance::default(), |c, m| Allowance {
            messages: c.messages + 1,
            bytes: c.bytes + tagma_wire::Encode::encoded_len(m) as u64,
        })
}

impl Replica {
    /// Charges `cost` of a `kind` answer to `to`; false, counted as refused, when it does not
    /// fit in the peer's allowance for the period.
    pub(super) fn charge_answer(
        &mut self,
        to: ReplicaId,
        kind: AnswerKind,
        cost: Allowance,
    ) -> bool {
        let budget = self.params.answer_budget;
        if self.answers.charge(&budget, self.now_ms, to, kind, cost) {
            return true;
        }
        self.stats.answers_refused += 1;
        tracing::debug!(peer = %to, ?kind, "answer budget for the period spent: request not answered");
        false
    }

    /// Sends `msgs` to `to` as one answer of `kind` if it fits in the peer's allowance, else
    /// none of them (counted as refused); true if sent.
    pub(super) fn answer(
        &mut self,
        to: ReplicaId,
        kind: AnswerKind,
        msgs: Vec<PeerMessage>,
    ) -> bool {
        if !self.charge_answer(to, kind, cost_of(&msgs)) {
            return false;
        }
        for msg in msgs {
            self.actions.push_back(Action::Send { to, msg });
        }
        true
    }

    /// Sends `to` a run of decisions, each as one message, charged one at a time: the run is
    /// cut short (and counted as refused once) where the peer's allowance ends.
    pub(super) fn answer_run(&mut self, to: ReplicaId, run: impl IntoIterator<Item = PeerMessage>) {
        for msg in run {
            if !self.answer(to, AnswerKind::Decisions, vec![msg]) {
                return;
            }
        }
    }

    /// What is left of `to`'s allowance for decisions read from the runtime's log: a
    /// [`Action::ReadLog`] of at most `count` decisions reserves it, and the runtime gives
    /// back what it did not send ([`Input::LogServed`](super::Input::LogServed)). `None`
    /// (counted as refused) when nothing is left.
    pub(super) fn reserve_log_read(&mut self, to: ReplicaId, count: u32) -> Option<Allowance> {
        let budget = self.params.answer_budget;
        let left = self
            .answers
            .left(&budget, self.now_ms, to, AnswerKind::Decisions);
        let reserve = Allowance {
            messages: left.messages.min(u64::from(count)),
            bytes: left
                .bytes
                .min(u64::from(count).saturating_mul(self.decision_bytes_bound())),
        };
        if reserve.messages == 0
            || reserve.bytes == 0
            || !self
                .answers
                .charge(&budget, self.now_ms, to, AnswerKind::Decisions, reserve)
        {
            self.stats.answers_refused += 1;
            return None;
        }
        Some(reserve)
    }

    /// The most a logged decision can take on the wire: a batch of the largest size and a
    /// proof with every member's signed ACCEPT.
    fn decision_bytes_bound(&self) -> u64 {
        const SIGNED_ACCEPT_BYTES: u64 = 4 + 64;
        const HEADER_BYTES: u64 = 64;
        self.params.batch_bytes_max as u64
            + SIGNED_ACCEPT_BYTES * self.params.members.len() as u64
            + HEADER_BYTES
    }

    /// [`Input::LogServed`](super::Input::LogServed): what a log read reserved and did not send
    /// goes back to the peer's allowance.
    pub(super) fn on_log_served(&mut self, to: ReplicaId, unused: Allowance) {
        let budget = self.params.answer_budget;
        self.answers.refund(&budget, self.now_ms, to, unused);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> AnswerBudget {
        AnswerBudget {
            period_ms: 100,
            positions: Allowance {
                messages: 2,
                bytes: 10,
            },
            decisions: Allowance {
                messages: 3,
                bytes: 1_000,
            },
            state: Allowance::default(),
        }
    }

    const P: ReplicaId = ReplicaId(1);
    const ONE: Allowance = Allowance {
        messages: 1,
        bytes: 4,
    };

    #[test]
    fn a_peer_gets_its_allowance_per_period_and_no_more() {
        let (b, mut l) = (budget(), AnswerLedger::default());
        assert!(l.charge(&b, 0, P, AnswerKind::Position, ONE));
        assert!(l.charge(&b, 10, P, AnswerKind::Position, ONE));
        // Messages left, bytes not.
        assert!(!l.charge(&b, 20, P, AnswerKind::Position, ONE));
        // Another kind, another peer: their own allowances.
        assert!(l.charge(&b, 20, P, AnswerKind::Decisions, ONE));
        assert!(l.charge(&b, 20, ReplicaId(2), AnswerKind::Position, ONE));
        assert!(!l.charge(&b, 20, P, AnswerKind::State, ONE));
        // The period ends 100 ms after its first charge.
        assert!(!l.charge(&b, 99, P, AnswerKind::Position, ONE));
        assert!(l.charge(&b, 100, P, AnswerKind::Position, ONE));
    }

    #[test]
    fn a_refund_gives_back_what_a_reservation_did_not_use() {
        let (b, mut l) = (budget(), AnswerLedger::default());
        let all = l.left(&b, 0, P, AnswerKind::Decisions);
        assert!(l.charge(&b, 0, P, AnswerKind::Decisions, all));
        assert!(!l.charge(&b, 1, P, AnswerKind::Decisions, ONE));
        l.refund(&b, 2, P, ONE);
        assert!(l.charge(&b, 3, P, AnswerKind::Decisions, ONE));
        // Never below nothing charged.
        l.refund(&b, 4, P, all);
        l.refund(&b, 4, P, all);
        assert_eq!(l.left(&b, 5, P, AnswerKind::Decisions), all);
    }

    #[test]
    fn periods_that_ended_leave_the_ledger() {
        let (b, mut l) = (budget(), AnswerLedger::default());
        for p in 0..50 {
            assert!(l.charge(
                &b,
                u64::from(p) * 100,
                ReplicaId(p),
                AnswerKind::Position,
                ONE
            ));
        }
        assert_eq!(l.spent.len(), 1);
    }
}
