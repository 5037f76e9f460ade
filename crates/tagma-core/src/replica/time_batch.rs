//! Time-only batches: the leader orders a batch with no request, carrying only the agreed
//! time, when the service has something due by then (a wait timing out, a lease running out)
//! and no request comes to order. Without it the agreed time stands still while clients are
//! quiet, and nothing due would ever happen.
//!
//! The driver reports, after executing, when the service next has work
//! ([`Input::ServiceDue`](super::Input::ServiceDue)); the replica keeps the newest report.
//! While it leads, once that time passes with nothing to propose, it proposes an empty batch
//! timestamped strictly after the last decided one, then waits for the report of an
//! execution at or beyond that instance before proposing another, so one due time yields one
//! time-only batch. Followers accept an empty batch only if its timestamp advances the agreed
//! time (`Clients::validate_proposal`), so a leader cannot fill the log with batches that
//! change nothing.
//!
//! No request timer covers a time-only batch: if the leader does not order one (it is faulty,
//! or its instance stalled), no client request is there to expire. So every replica also
//! watches the due time: when the agreed time (the last decided batch's timestamp) has not
//! reached it twice the request timeout after it passed (as a request's timer expires twice
//! before it suspects), the replica suspects the leader, and looks again every two timeouts
//! while the due time stands.

use bytes::Bytes;
use tagma_wire::{Batch, ConsensusId, Encode};

use super::{Replica, leader_change::STOP_REQUESTS_MAX};

/// What the driver last reported about the service's next due time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ServiceDue {
    /// When the service next has work, if ever (agreed time, ms).
    due_ms: Option<u64>,
    /// The last instance executed when the report was made.
    executed_through: Option<ConsensusId>,
    /// The instance of the last time-only batch this replica proposed, until an execution at
    /// or beyond it is reported.
    proposed_in: Option<ConsensusId>,
    /// When this replica next looks whether the agreed time stands still past the due time
    /// ([`Replica::check_due`]).
    suspect_at_ms: Option<u64>,
}

impl Replica {
    /// [`Input::ServiceDue`](super::Input::ServiceDue): the service's next due time as of the
    /// execution of `executed_through`.
    pub(super) fn on_service_due(
        &mut self,
        executed_through: Option<ConsensusId>,
        due_ms: Option<u64>,
    ) {
        let patience_ms = 2 * self.params.request_timeout_ms;
        let now_ms = self.now_ms;
        let due = &mut self.service_due;
        if executed_through < due.executed_through {
            // A report older than one already taken (an installed state moved past it).
            return;
        }
        due.suspect_at_ms = due_ms.map(|t| t.max(now_ms).saturating_add(patience_ms));
        due.due_ms = due_ms;
        due.executed_through = executed_through;
        if due
            .proposed_in
            .is_some_and(|cid| executed_through >= Some(cid))
        {
            due.proposed_in = None;
        }
        self.settle();
    }

    /// The leader's time-only batch, if the service's due time has passed and no earlier
    /// time-only batch is still to be executed.
    pub(super) fn time_batch(&mut self) -> Option<(Bytes, Batch)> {
        let due = self.service_due;
        if due.proposed_in.is_some() || due.due_ms.is_none_or(|t| t > self.now_ms) {
            return None;
        }
        let batch = Batch {
            timestamp_ms: self
                .now_ms
                .max(self.last_decided_timestamp_ms.saturating_add(1)),
            seed: self.rng.next_u64(),
            requests: Vec::new(),
        };
        self.service_due.proposed_in = Some(self.instance.cid);
        self.stats.time_batches_proposed += 1;
        Some((batch.to_bytes(), batch))
    }

    /// When the leader is to look again for a time-only batch: the service's due time while
    /// this replica leads and it is still ahead.
    pub(super) fn time_batch_deadline_ms(&self) -> Option<u64> {
        let due = self.service_due;
        if !self.is_leader() || due.proposed_in.is_some() {
            return None;
        }
        due.due_ms.filter(|t| *t > self.now_ms)
    }

    /// The due time's watch ([`Replica::check_due`]): when it fires next.
    pub(super) fn due_watch_deadline_ms(&self) -> Option<u64> {
        self.service_due.suspect_at_ms
    }

    /// On a tick: if the agreed time (the last decided batch's timestamp) has not reached the
    /// service's due time twice the request timeout after it passed, suspect the leader (a
    /// faulty leader that never orders the time, or a time-only batch whose instance
    /// stalled). Not while this replica starts up, catches up, fetches or repairs its state,
    /// or its own log holds it back.
    pub(super) fn check_due(&mut self, now_ms: u64) {
        let due = self.service_due;
        let (Some(at), Some(due_ms)) = (due.suspect_at_ms, due.due_ms) else {
            return;
        };
        if at > now_ms {
            return;
        }
        let patience_ms = 2 * self.params.request_timeout_ms;
        self.service_due.suspect_at_ms = Some(now_ms.saturating_add(patience_ms));
        if self.last_decided_timestamp_ms >= due_ms
            || self.startup.is_some()
            || self.catch_up.behind_since_ms.is_some()
            || self.fetch.is_some()
            || self.state_check_holds()
            || self.log_lags()
        {
            return;
        }
        tracing::debug!(leader = %self.leader(), cid = %self.instance.cid, due_ms, "the agreed time stands still past the service's due time: suspecting the leader");
        self.stats.due_suspicions += 1;
        self.suspect(self.clients.head_requests(STOP_REQUESTS_MAX));
    }
}
