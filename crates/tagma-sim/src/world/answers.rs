//! What correct replicas send in answer to each peer, measured per period against their answer
//! budget (the `answer_budget` invariant), and the budget the simulated replicas get.

use tagma_core::{Allowance, AnswerBudget};
use tagma_wire::{Encode, PeerMessage, ReplicaId};

use crate::world::{World, disk::SIM_CHUNK_BYTES};

/// The simulated replicas' answer budget: smaller than the defaults, so that the answer floods
/// of [`Behaviour::AnswerFlood`](crate::Behaviour::AnswerFlood) reach it and the legitimate
/// catch-up, state transfer and start-up synchronisation of correct replicas run close to it.
pub(super) fn sim_answer_budget() -> AnswerBudget {
    AnswerBudget {
        period_ms: 1_000,
        positions: Allowance {
            messages: 16,
            bytes: 256 << 10,
        },
        decisions: Allowance {
            messages: 4 * u64::from(tagma_core::transfer::LOG_RUN),
            bytes: 1 << 20,
        },
        state: Allowance {
            messages: 64,
            bytes: 64 * u64::from(SIM_CHUNK_BYTES),
        },
    }
}

/// The kinds of answers, as the core budgets them (index into [`AnswerWindow::by_kind`]).
fn answer_kind(msg: &PeerMessage) -> Option<usize> {
    match msg {
        PeerMessage::Position { reply: true, .. }
        | PeerMessage::Propose(_)
        | PeerMessage::Write(_)
        | PeerMessage::Accept(_) => Some(0),
        PeerMessage::Decision(_) | PeerMessage::LogEntry(_) => Some(1),
        PeerMessage::StateOffer { .. }
        | PeerMessage::StateVote { .. }
        | PeerMessage::Chunk { .. } => Some(2),
        _ => None,
    }
}

/// What one correct replica sent one peer point to point in one period of the simulation's
/// clock (periods aligned on multiples of the budget's period).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct AnswerWindow {
    period: u64,
    by_kind: [Allowance; 3],
}

impl World {
    /// Replica `r` sends `msg` to `to` alone (not a broadcast): if `r` is correct and `msg` is
    /// an answer (a position, a resent PROPOSE/WRITE/ACCEPT, a decision, a log entry, a state
    /// offer or vote, a chunk), it counts against `to` in the current period. The core's
    /// periods per peer are as long and never overlap, so a period here meets at most two of
    /// them: more than twice the allowance breaks the answer budget.
    pub(super) fn note_answer(&mut self, r: usize, to: ReplicaId, msg: &PeerMessage) {
        if self.nodes[r].byz.is_some() {
            return;
        }
        let Some(kind) = answer_kind(msg) else {
            return;
        };
        let budget = self.nodes[r].params.answer_budget;
        let period = self.now_ms / budget.period_ms.max(1);
        let window = self.answers.entry((r as u32, to.0)).or_default();
        if window.period != period {
            *window = AnswerWindow {
                period,
                ..AnswerWindow::default()
            };
        }
        let spent = &mut window.by_kind[kind];
        spent.messages += 1;
        spent.bytes += msg.encoded_len() as u64;
        let spent = *spent;
        self.maximum("answer_messages_per_peer_period_max", spent.messages);
        self.maximum("answer_bytes_per_peer_period_max", spent.bytes);
        let allowed = [budget.positions, budget.decisions, budget.state][kind];
        if spent.messages > 2 * allowed.messages || spent.bytes > 2 * allowed.bytes {
            let msg = format!(
                "replica {r} sent replica {to} {} messages, {} bytes of answers of kind {kind} in the period from {} ms (allowance per period: {} messages, {} bytes)",
                spent.messages,
                spent.bytes,
                period * budget.period_ms,
                allowed.messages,
                allowed.bytes
            );
            self.violation("answer_budget", msg);
        }
    }

    /// A new core for replica `r` starts with a fresh budget.
    pub(super) fn forget_answers(&mut self, r: usize) {
        self.answers.retain(|(from, _), _| *from != r as u32);
    }

    /// Keeps the largest value seen under `name`.
    pub(super) fn maximum(&mut self, name: &str, value: u64) {
        let m = self.maxima.entry(name.to_string()).or_default();
        *m = (*m).max(value);
    }
}
