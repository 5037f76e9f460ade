//! Log back-pressure: a durable leader proposes an instance only once the previous one is on
//! its disk, and a durable replica decides at most [`LOG_LAG_MAX`] instances beyond its log
//! (a replica whose disk stalls falls behind and catches up later, rather than queueing
//! without bound).

use tagma_wire::ConsensusId;

use super::{Replica, action::Action};

pub use crate::config::LOG_LAG_MAX;

/// How often "the log caught up" is logged at info level at most.
const LOG_CAUGHT_UP_NOTE_MS: u64 = 10_000;

impl Replica {
    /// A durable replica's runtime reports that every instance up to `cid` it delivered is on
    /// its disk (after the flush; instances a fetched state covers count too).
    pub(super) fn on_log_durable(&mut self, cid: ConsensusId) {
        // A report that leaves the leader waiting is answered by a new announcement.
        self.log_wait_announced = None;
        if self.durable_through.is_some_and(|d| d >= cid) {
            return;
        }
        let lagged = self.log_lags();
        self.durable_through = Some(cid);
        if lagged && !self.log_lags() {
            let now = self.now_ms;
            if self
                .log_caught_up_noted_ms
                .is_none_or(|at| now >= at.saturating_add(LOG_CAUGHT_UP_NOTE_MS))
            {
                self.log_caught_up_noted_ms = Some(now);
                tracing::info!(next = %self.instance.cid, logged = %cid, "the log caught up: ordering again (further catch-ups within 10 s are logged at debug)");
            } else {
                tracing::debug!(next = %self.instance.cid, logged = %cid, "the log caught up: ordering again");
            }
            // The request timers stood still while the log lagged: a full period from now.
            self.clients.restart_timers(self.now_ms);
        }
        self.settle();
    }

    /// Whether this durable replica's log lags [`LOG_LAG_MAX`] instances or more behind its
    /// decisions: it then holds the instance in progress.
    pub(super) fn log_lags(&self) -> bool {
        let logged_below = self.durable_through.map_or(0, |d| d.0 + 1);
        self.params.durable && self.instance.cid.0 >= logged_below.saturating_add(LOG_LAG_MAX)
    }

    /// Storage back-pressure: a durable leader proposes instance c only once c−1 is on its
    /// own disk, so ordering never runs ahead of the log, and the requests that arrive while
    /// the log flushes join the next batch instead of making one more instance (one more flush,
    /// one more round of messages on every replica). `Some(c−1)` while a proposal waits for
    /// it (requests are pending); the runtime then gives [`Input::LogDurable`](super::Input::LogDurable) when the
    /// flush completes.
    pub(super) fn awaits_durable(&self) -> Option<ConsensusId> {
        let previous = ConsensusId(self.instance.cid.0.checked_sub(1)?);
        (self.params.durable
            && self.is_leader()
            && self.durable_through.is_none_or(|d| d < previous)
            && self.last_decided.is_some_and(|d| d >= previous)
            && self.clients.pending_total() > 0)
            .then_some(previous)
    }

    /// After every input: a durable leader whose next proposal waits for the log, or a
    /// durable replica whose log lags ([`Replica::log_lags`]), says which instance it waits
    /// for, once per instance ([`Action::AwaitLogDurable`]).
    pub(super) fn announce_log_wait(&mut self) {
        let lag = self
            .log_lags()
            .then(|| ConsensusId(self.instance.cid.0 - LOG_LAG_MAX));
        let Some(cid) = self.awaits_durable().max(lag) else {
            return;
        };
        if self.log_wait_announced != Some(cid) {
            self.log_wait_announced = Some(cid);
            self.actions.push_back(Action::AwaitLogDurable { cid });
        }
    }
}
