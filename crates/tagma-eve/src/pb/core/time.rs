//! Time: heartbeats, the takeover of a silent primary, a primary going on alone without
//! its backup, batches sent again for a token that went missing, and giving up on a silent
//! or slow joiner.

use tagma_wire::{EveBatch, EveMessage};

use super::{PbCore, Role};

impl PbCore {
    pub(super) fn on_tick(&mut self, now_ms: u64) {
        let silent = now_ms.saturating_sub(self.last_heard_ms) >= self.cfg.takeover_ms;
        match self.role() {
            Role::Joining => {
                if silent && self.offer.is_none() {
                    // Ask again (the other server may have been down).
                    self.last_heard_ms = now_ms;
                    let view = self.view;
                    self.send(now_ms, EveMessage::Join { view });
                }
                return;
            }
            Role::Backup if silent => self.take_over(now_ms),
            Role::Primary if self.peer_alive && silent => {
                // The backup is gone: serve alone (if it comes back, it joins).
                self.go_alone(now_ms, false);
            }
            Role::Primary if self.peer_alive && self.token_overdue(now_ms) => {
                // The backup is heard but a token is missing: a message was lost. Send the
                // batches still unanswered again (the backup answers each with its token).
                self.awaiting_since_ms = Some(now_ms);
                let committed = self.peer_committed;
                let unanswered: Vec<(EveBatch, bool)> = (self.records.values())
                    .filter(|r| r.theirs.is_none())
                    .map(|r| (r.batch.clone(), r.sequential))
                    .collect();
                for (batch, sequential) in unanswered {
                    self.send_batch(now_ms, batch, sequential, committed);
                }
            }
            Role::Primary if silent && self.offer.is_some() => {
                // The joiner went silent: give up serving it.
                self.offer = None;
                self.last_heard_ms = now_ms;
                self.forget_settled();
                self.propose(now_ms);
            }
            _ => {}
        }
        if now_ms.saturating_sub(self.last_sent_ms) >= self.cfg.heartbeat_ms {
            // The primary's COMMIT names only batches whose tokens matched.
            let committed = match self.role() {
                Role::Primary => self.peer_committed,
                _ => self.committed,
            };
            let view = self.view;
            self.send(now_ms, EveMessage::Commit { view, committed });
        }
        if self.offer.as_ref().is_some_and(|o| o.seq.is_some())
            && self.records.values().filter(|r| r.committed).count() > self.cfg.catch_up_max
        {
            // The joiner fetches too slowly for the batches kept for it: offer anew.
            self.offer_state(now_ms);
        }
    }

    /// Backup: the primary fell silent (or restarted); every batch executed here commits
    /// and this server serves the next view.
    pub(super) fn take_over(&mut self, now_ms: u64) {
        self.stats.takeovers += 1;
        self.view += 1;
        debug_assert_eq!(self.role(), Role::Primary);
        self.last_heard_ms = now_ms;
        self.go_alone(now_ms, true);
    }

    /// Whether the backup's token for the oldest batch executed here and not committed is
    /// later than `takeover_ms`.
    fn token_overdue(&self, now_ms: u64) -> bool {
        self.awaiting_since_ms
            .is_some_and(|since| now_ms.saturating_sub(since) >= self.cfg.takeover_ms)
    }
}
