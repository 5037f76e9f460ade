//! Messages from the other server: batches, tokens, commits and rollbacks, and the
//! routing of joins and tree queries.

use std::collections::HashSet;

use tagma_wire::{ClientId, EveBatch, EveMessage, RequestSeq};

use super::{PbCore, Record, Role};
use crate::stage::Work;
use crate::token::TokenProof;

impl PbCore {
    pub(super) fn on_peer(&mut self, now_ms: u64, message: EveMessage) {
        let view = match &message {
            EveMessage::ExecuteBatch { view, .. }
            | EveMessage::Token { view, .. }
            | EveMessage::Commit { view, .. }
            | EveMessage::Rollback { view, .. }
            | EveMessage::Join { view }
            | EveMessage::StateOffer { view, .. }
            | EveMessage::Joined { view, .. } => Some(*view),
            EveMessage::TreeQuery { .. } | EveMessage::TreeNodes { .. } => None,
        };
        if let Some(view) = view {
            if view > self.view && !self.joining && !matches!(message, EveMessage::Join { .. }) {
                // The other server serves a later view: this one was taken over.
                self.view = view;
                self.step_down(now_ms);
                return;
            }
            if view >= self.view {
                self.last_heard_ms = now_ms;
            }
        } else {
            self.last_heard_ms = now_ms;
        }
        let from_backup = matches!(
            message,
            EveMessage::Token { view, .. } | EveMessage::Commit { view, .. } if view == self.view
        );
        if from_backup && self.role() == Role::Primary && !self.peer_alive && self.offer.is_none() {
            // The backup is back, or was cut off: it gets the state afresh.
            self.offer_state(now_ms);
            return;
        }
        match message {
            EveMessage::ExecuteBatch {
                view,
                run,
                committed,
                sequential,
                batch,
            } => {
                if view == self.view && run == self.run && self.role() == Role::Backup {
                    self.take_batch(now_ms, batch, sequential);
                    self.peer_committed = self.peer_committed.max(committed);
                    self.commit_up_to(self.peer_committed);
                }
            }
            EveMessage::Token {
                view,
                run,
                seq,
                token,
            } => {
                if view == self.view && run == self.run && self.role() == Role::Primary {
                    if let Some(record) = self.records.get_mut(&seq) {
                        record.theirs = Some(token);
                    }
                    self.settle(now_ms);
                }
            }
            EveMessage::Commit { view, committed } => {
                if view == self.view && self.role() == Role::Backup {
                    self.peer_committed = self.peer_committed.max(committed);
                    self.commit_up_to(self.peer_committed);
                }
            }
            EveMessage::Rollback { view, run, seq } => {
                if view == self.view && self.role() == Role::Backup && run > self.run {
                    self.run = run;
                    self.work(Work::Rollback);
                    // Every uncommitted batch runs again: the executor keeps only
                    // committed ones.
                    debug_assert!(seq > self.committed, "commits come before a rollback");
                    self.execute_again(self.committed + 1, false);
                }
            }
            EveMessage::Join { view } => self.on_join(now_ms, view),
            EveMessage::StateOffer {
                view,
                run,
                seq,
                token,
                root,
                proof,
                sessions,
            } => {
                if view >= self.view && self.role() != Role::Primary {
                    self.view = view;
                    self.run = run;
                    self.joining = true;
                    self.peer_alive = false;
                    self.records.clear();
                    self.intake.queue.clear();
                    self.intake.pending.clear();
                    self.committed = seq;
                    self.peer_committed = seq;
                    self.next_seq = seq + 1;
                    self.sessions.import(sessions);
                    self.work(Work::Rollback);
                    self.work(Work::Fetch {
                        seq,
                        token,
                        root,
                        proof: proof.map(TokenProof::from_wire),
                    });
                }
            }
            EveMessage::TreeQuery { seq, prefixes } => {
                if self.role() == Role::Primary {
                    self.work(Work::AnswerTreeQuery { seq, prefixes });
                }
            }
            EveMessage::TreeNodes { seq, nodes } => {
                if self.joining {
                    self.work(Work::TreeNodes { seq, nodes });
                }
            }
            EveMessage::Joined { view, seq } => self.on_joined(now_ms, view, seq),
        }
    }

    /// Backup: takes the next batch from the primary and executes it.
    pub(super) fn take_batch(&mut self, now_ms: u64, batch: EveBatch, sequential: bool) {
        if batch.seq > self.next_seq {
            // A batch went missing (the link dropped it): fetch the state afresh.
            self.step_down(now_ms);
            return;
        }
        if batch.seq < self.next_seq {
            // Sent again: the primary did not get the token (a message was lost).
            if let Some(record) = self.records.get(&batch.seq)
                && let Some((token, _)) = &record.mine
            {
                let message = EveMessage::Token {
                    view: self.view,
                    run: self.run,
                    seq: batch.seq,
                    token: *token,
                };
                self.send(now_ms, message);
            }
            return;
        }
        self.next_seq += 1;
        for request in &batch.requests {
            self.intake.pending.insert((request.client, request.seq));
        }
        let taken: HashSet<(ClientId, RequestSeq)> =
            batch.requests.iter().map(|r| (r.client, r.seq)).collect();
        self.intake
            .queue
            .retain(|r| !taken.contains(&(r.client, r.seq)));
        self.work(Work::Execute {
            run: self.run,
            batch: batch.clone(),
            sequential,
        });
        self.records.insert(
            batch.seq,
            Record {
                batch,
                mine: None,
                theirs: None,
                committed: false,
                sequential,
            },
        );
    }
}
