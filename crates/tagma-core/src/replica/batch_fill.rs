//! Adaptive batch filling: a leader holds its next proposal, for at most
//! `batch_fill_wait_ms`, until most of the requests it can expect soon are waiting.
//!
//! The messages and signatures of a consensus instance cost the same whatever its batch
//! holds, so on replicas that saturate their cores larger batches mean less CPU per request:
//! more throughput and, with clients that wait for each answer, lower latency too. Proposing
//! the moment the previous instance decides takes only what arrived while it ran; the clients
//! whose requests it decided send their next ones a round trip later, after their replies.
//! So the leader expects what waits now plus as many requests as the last decided batch held,
//! and proposes once 7/8 of that waits. A hold never starts while nothing waits (time-only
//! batches go at once), and never outlasts `batch_fill_wait_ms` (plus the resolution of the
//! runtime's ticks): a hold that runs out proposes what has arrived, and the next proposal
//! goes at once, so a load that fell (or clients that do not wait for their answers) pays
//! the wait on at most every other instance.

use tagma_wire::ConsensusId;

use super::Replica;

/// The part of the expected requests a leader waits for: 7/8. Waiting for all of them would
/// let the slowest client's round trip set the pace of every instance.
const FILL_EIGHTHS: usize = 7;

/// The leader's hold on its next proposal.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct BatchFill {
    /// Requests of the last decided batch.
    pub(super) last_batch_requests: usize,
    /// The hold on the instance in progress, if the leader holds its proposal.
    holding: Option<Hold>,
    /// The instance after a hold that ran out: its proposal goes at once.
    skip: Option<ConsensusId>,
}

#[derive(Clone, Copy, Debug)]
struct Hold {
    cid: ConsensusId,
    since_ms: u64,
    /// Waiting requests that end the hold.
    target: usize,
}

impl Replica {
    /// Whether the leader holds the proposal of the instance in progress to let its batch
    /// fill (see the module's comment). Called only when it could propose now.
    pub(super) fn holds_batch_to_fill(&mut self) -> bool {
        let wait_ms = self.params.batch_fill_wait_ms;
        let pending = self.clients.pending_total();
        let cid = self.instance.cid;
        if wait_ms == 0 || pending == 0 || self.batch_fill.skip == Some(cid) {
            self.batch_fill.holding = None;
            return false;
        }
        let held = self.batch_fill.holding.filter(|hold| hold.cid == cid);
        let hold = held.unwrap_or_else(|| {
            let expected = pending + self.batch_fill.last_batch_requests;
            Hold {
                cid,
                since_ms: self.now_ms,
                target: (expected * FILL_EIGHTHS / 8).min(self.params.batch_size_max),
            }
        });
        self.batch_fill.holding = None;
        if pending >= hold.target {
            self.stats.batch_holds_filled += u64::from(held.is_some());
            return false;
        }
        if self.now_ms >= hold.since_ms.saturating_add(wait_ms) {
            self.stats.batch_holds_expired += 1;
            self.batch_fill.skip = Some(cid.next());
            return false;
        }
        self.batch_fill.holding = Some(hold);
        true
    }

    /// When a held proposal must go, whatever has arrived by then. Not once that time is
    /// reached: the tick then proposes, or, if something else holds proposals back (a leader
    /// change, the log), the next chance to propose does it at once — a deadline already
    /// passed must not make the runtime tick without end.
    pub(super) fn batch_fill_deadline_ms(&self) -> Option<u64> {
        let hold = self.batch_fill.holding?;
        let deadline = hold.since_ms.saturating_add(self.params.batch_fill_wait_ms);
        (hold.cid == self.instance.cid && self.is_leader() && deadline > self.now_ms)
            .then_some(deadline)
    }
}
