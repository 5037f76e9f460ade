//! Log back-pressure: a durable leader proposes an instance only once the previous one is on
//! its disk.

use tagma_wire::ConsensusId;

use super::{Replica, action::Action};

impl Replica {
    /// A durable replica's runtime reports that every instance up to `cid` it delivered is on
    /// its disk (after the flush; instances a fetched state covers count too).
    pub(super) fn on_log_durable(&mut self, cid: ConsensusId) {
        // A report that leaves the leader waiting is answered by a new announcement.
        self.log_wait_announced = None;
        if self.durable_through.is_some_and(|d| d >= cid) {
            return;
        }
        self.durable_through = Some(cid);
        self.try_propose();
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

    /// After every input: a durable leader whose next proposal waits for the log says so,
    /// once per instance ([`Action::AwaitLogDurable`]).
    pub(super) fn announce_log_wait(&mut self) {
        let Some(cid) = self.awaits_durable() else {
            return;
        };
        if self.log_wait_announced != Some(cid) {
            self.log_wait_announced = Some(cid);
            self.actions.push_back(Action::AwaitLogDurable { cid });
        }
    }
}
