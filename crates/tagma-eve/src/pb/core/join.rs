//! Joining: a server that (re)starts or learns of a later view fetches the committed state
//! from the primary, which offers it, answers its tree queries and then sends it every
//! later batch.

use tagma_wire::{Digest, EveBatch, EveMessage};

use super::{Offer, PbCore, Role};
use crate::stage::Work;
use crate::token::TokenProof;

impl PbCore {
    /// A server that learnt of a later view, or a backup that missed a batch: it fetches the
    /// state from the primary.
    pub(super) fn step_down(&mut self, now_ms: u64) {
        self.joining = true;
        self.peer_alive = false;
        self.offer = None;
        let view = self.view;
        self.send(now_ms, EveMessage::Join { view });
    }

    pub(super) fn on_join(&mut self, now_ms: u64, view: u64) {
        match self.role() {
            Role::Primary => {}
            Role::Backup => {
                // The primary restarted: what it held is gone; take over, then serve it.
                self.take_over(now_ms);
            }
            Role::Joining => {
                // Both servers restarted: server 0 serves what it holds.
                if self.cfg.me != 0 {
                    return;
                }
                self.joining = false;
                self.view = self.view.max(view) + 1;
                if self.role() != Role::Primary {
                    self.view += 1;
                }
            }
        }
        self.offer_state(now_ms);
    }

    /// Primary: starts serving a join with the committed state.
    pub(super) fn offer_state(&mut self, now_ms: u64) {
        self.stats.joins_served += 1;
        self.peer_alive = false;
        self.last_heard_ms = now_ms;
        let sessions = self.sessions.export();
        self.offer = Some(Offer {
            at: self.committed,
            seq: None,
            sessions,
        });
        self.work(Work::TakeSnapshot);
    }

    pub(super) fn on_snapshot(
        &mut self,
        now_ms: u64,
        seq: u64,
        token: Digest,
        root: Digest,
        proof: Option<TokenProof>,
    ) {
        if self.role() != Role::Primary {
            return;
        }
        let Some(offer) = self.offer.as_mut() else {
            return;
        };
        if offer.seq.is_some() {
            return;
        }
        debug_assert_eq!(
            seq, offer.at,
            "the snapshot is the state committed at the join"
        );
        offer.seq = Some(seq);
        let sessions = offer.sessions.clone();
        let view = self.view;
        self.send(
            now_ms,
            EveMessage::StateOffer {
                view,
                run: self.run,
                seq,
                token,
                root,
                proof: proof.map(TokenProof::to_wire),
                sessions,
            },
        );
        self.forget_settled();
        self.propose(now_ms);
    }

    pub(super) fn on_installed(&mut self, now_ms: u64, seq: u64) {
        if !self.joining || seq != self.committed {
            return;
        }
        self.joining = false;
        self.peer_alive = true;
        self.last_heard_ms = now_ms;
        let view = self.view;
        self.send(now_ms, EveMessage::Joined { view, seq });
    }

    /// Primary: the joiner installed the state of `seq`; it gets every later batch.
    pub(super) fn on_joined(&mut self, now_ms: u64, view: u64, seq: u64) {
        if view != self.view || self.role() != Role::Primary {
            return;
        }
        match self.offer.take() {
            Some(Offer { seq: Some(s), .. }) if s == seq => {}
            _ => return,
        }
        self.peer_alive = true;
        self.peer_committed = seq;
        // Each as this server ran it, so that a correct joiner computes the same token.
        let records: Vec<(EveBatch, bool)> = (self.records.values())
            .map(|r| (r.batch.clone(), r.sequential))
            .collect();
        for (batch, sequential) in records {
            self.send_batch(now_ms, batch, sequential, seq);
        }
        self.settle(now_ms);
    }
}
