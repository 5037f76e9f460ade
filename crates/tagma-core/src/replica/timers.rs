//! Timers: what the core does when [`Replica::next_timeout_ms`] passes.

use tagma_wire::{PeerMessage, Regency};

use super::{Replica, action::Action, leader_change::STOP_REQUESTS_MAX};
use crate::transfer::Fetch;

impl Replica {
    /// Timers whose deadline passed: the idle flush of votes, request timers (first expiry
    /// forwards the request to all replicas, the second suspects the leader), the watch on
    /// the service's due time (`time_batch`), STOP
    /// retransmission, the SYNC timeout, catch-up requests, the start-up synchronisation's and
    /// state transfer's retries.
    pub(super) fn on_tick(&mut self, now_ms: u64) {
        if self.left {
            return;
        }
        self.set_now(now_ms);
        if self.log_lags() && self.clients.next_deadline_ms().is_some_and(|t| t <= now_ms) {
            // Holding the instance in progress, this replica cannot tell a slow leader from
            // its own slow disk: its request timers stand still (restarted once the log
            // catches up) instead of forwarding requests and suspecting the leader.
            self.clients.restart_timers(now_ms);
        }
        let mut expired = self.clients.take_expired(now_ms);
        if self.state_check_holds() {
            // Not ordering on a state known to be wrong: no request timer may forward or
            // suspect while it is repaired.
            expired.clear();
        }
        self.state_check_tick();
        if self.startup.is_some() {
            // Not ordering yet: no request timer may forward or suspect meanwhile (they
            // restart when recovery ends).
            expired.clear();
            self.retransmit_position();
            self.progress_startup();
        } else if self.idle_probe_ms.is_some_and(|t| t <= now_ms) {
            self.arm_idle_probe();
            self.actions
                .push_back(Action::Broadcast(PeerMessage::Position {
                    next: self.instance.cid,
                    reply: false,
                }));
        }
        let mut suspect = Vec::new();
        for e in expired {
            if e.forwarded_before {
                suspect.push(e.request);
            } else {
                // Mod-SMaRt: first expiry → forward to all (the client may have skipped some).
                self.actions
                    .push_back(Action::Broadcast(PeerMessage::Forward(e.request)));
            }
        }
        if !suspect.is_empty() {
            tracing::debug!(leader = %self.leader(), requests = suspect.len(), "request timers expired twice: suspecting the leader");
            self.suspect(suspect);
            // This replica may simply have fallen behind while the others went quiet (nothing
            // it receives then names a later instance): ask everyone for the next decision.
            self.request_decisions(true);
        }
        self.check_due(now_ms);
        if self
            .leader_change
            .stop_retransmit_ms
            .is_some_and(|t| t <= now_ms)
            && let Some(stop) = self.leader_change.own_stop.clone()
        {
            self.actions
                .push_back(Action::Broadcast(PeerMessage::Stop(stop)));
            self.leader_change.stop_retransmit_ms = Some(now_ms + self.params.request_timeout_ms);
        }
        if self
            .leader_change
            .sync_deadline_ms
            .is_some_and(|t| t <= now_ms)
        {
            // The new leader did not synchronise in time: move on to the next one.
            tracing::debug!(regency = %self.regency, "no SYNC in time: suspecting the new leader");
            self.leader_change.sync_deadline_ms = None;
            self.leader_change.failed_regencies += 1;
            self.start_stop(
                Regency(self.regency.0.saturating_add(1)),
                self.clients.head_requests(STOP_REQUESTS_MAX),
            );
        }
        self.maybe_request_decisions();
        if let Some(fetch) = self.fetch.as_mut() {
            let mut out = Vec::new();
            fetch.tick(now_ms, &mut out);
            self.fetch_actions(out);
        }
        self.settle();
    }

    /// The earliest time at which [`Input::Tick`](super::Input::Tick) must be given, if any
    /// timer is armed.
    pub fn next_timeout_ms(&self) -> Option<u64> {
        if self.left {
            return None;
        }
        let catch_up = self
            .catch_up
            .behind_since_ms
            .map(|_| self.catch_up.next_request_ms);
        let startup = self.startup_timer();
        let fetch = self.fetch.as_ref().and_then(Fetch::deadline_ms);
        [
            self.idle_probe_ms.filter(|_| self.startup.is_none()),
            self.clients.next_deadline_ms(),
            self.leader_change.stop_retransmit_ms,
            self.leader_change.sync_deadline_ms,
            catch_up,
            startup,
            fetch,
            self.state_check_deadline_ms(),
            self.time_batch_deadline_ms(),
            self.due_watch_deadline_ms(),
            self.batch_fill_deadline_ms(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}
