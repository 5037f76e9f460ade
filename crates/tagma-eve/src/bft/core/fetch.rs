//! State transfer between executors: serving the committed state to an executor that
//! fetches it, and fetching it (from one donor after another until a fetch checks out).

use tagma_wire::{Digest, EveBatch, EveMessage};

use super::{Action, ExecutorCore, Fetch, Offer};
use crate::stage::Work;
use crate::token::{Token, TokenProof};

impl ExecutorCore {
    pub(super) fn on_snapshot(
        &mut self,
        seq: u64,
        token: Digest,
        root: Digest,
        proof: Option<TokenProof>,
    ) {
        let sessions = self.sessions.export();
        for to in std::mem::take(&mut self.askers) {
            let message = EveMessage::StateOffer {
                view: self.view,
                run: 0,
                seq,
                token,
                root,
                proof: proof.map(TokenProof::to_wire),
                sessions: sessions.clone(),
            };
            self.actions.push_back(Action::Send { to, message });
        }
    }

    /// Starts fetching the committed state: what was executed after the last committed
    /// batch is discarded (its records run again after the fetch).
    pub(super) fn start_fetch(&mut self, now_ms: u64) {
        if self.fetch.is_some() {
            return;
        }
        self.stats.fetches += 1;
        self.run += 1;
        self.missing_since_ms = None;
        for record in self.records.values_mut() {
            record.mine = None;
        }
        self.work(Work::Rollback, None);
        self.ask_donor(now_ms);
    }

    /// Asks the next executor, in turn, for its committed state.
    fn ask_donor(&mut self, now_ms: u64) {
        let n = self.cfg.resilience.executors() as u32;
        let donor = (self.cfg.me + self.donor_turn) % n;
        self.donor_turn = self.donor_turn % (n - 1) + 1;
        self.fetch = Some(Fetch {
            donor,
            since_ms: now_ms,
            offered: None,
            unchecked: None,
        });
        let view = self.view;
        self.actions.push_back(Action::Send {
            to: donor,
            message: EveMessage::Join { view },
        });
    }

    /// The fetch failed or its donor is silent: ask the next executor.
    pub(super) fn next_donor(&mut self, now_ms: u64, failed: bool) {
        if self.fetch.is_none() {
            return;
        }
        if failed {
            self.stats.fetches_failed += 1;
        }
        self.ask_donor(now_ms);
    }

    pub(super) fn on_offer(&mut self, now_ms: u64, from: u32, offer: Offer) {
        let Some(fetch) = self.fetch.as_mut() else {
            return;
        };
        if fetch.donor != from || fetch.offered.is_some() || fetch.unchecked.is_some() {
            return;
        }
        if offer.seq <= self.committed {
            // Nothing newer than what this executor has: the next donor, in time.
            return;
        }
        if self.decided.contains_key(&offer.seq) {
            fetch.unchecked = Some(offer);
            self.check_offer(now_ms);
        } else {
            // Only a state the verifiers decided is taken: ask them about this one.
            let seq = offer.seq;
            fetch.unchecked = Some(offer);
            self.actions.push_back(Action::Query { seq });
        }
    }

    /// Takes the offer waiting for its batch's decided token once it is known: fetches it
    /// if the tokens match (the stage checks the root and proof against the token, and
    /// every node against its parent), asks the next donor if they do not.
    pub(super) fn check_offer(&mut self, now_ms: u64) {
        let Some(fetch) = self.fetch.as_mut() else {
            return;
        };
        let Some(offer) = fetch.unchecked.as_ref() else {
            return;
        };
        let Some(decided) = self.decided.get(&offer.seq) else {
            return;
        };
        if *decided != Token(offer.token.0) {
            self.next_donor(now_ms, true);
            return;
        }
        let offer = fetch.unchecked.take().expect("checked above");
        let donor = fetch.donor;
        fetch.offered = Some((offer.seq, *decided, offer.sessions));
        self.work(
            Work::Fetch {
                seq: offer.seq,
                token: offer.token,
                root: offer.root,
                proof: offer.proof.map(TokenProof::from_wire),
            },
            Some(donor),
        );
    }

    pub(super) fn on_installed(&mut self, now_ms: u64, seq: u64) {
        let Some(fetch) = self.fetch.take() else {
            return;
        };
        let Some((offered, token, sessions)) = fetch.offered else {
            return;
        };
        if offered != seq {
            return;
        }
        // The token decided for the batch when the offer was taken (the decisions kept may
        // have moved on since).
        self.committed = seq;
        self.committed_token = token;
        self.last_progress_ms = now_ms;
        self.sessions.import(sessions);
        self.decided = self.decided.split_off(&(seq + 1));
        self.responses = self.responses.split_off(&(seq + 1));
        // The records after the fetched state run again; those it covers are done.
        let later = self.records.split_off(&(seq + 1));
        for record in std::mem::take(&mut self.records).into_values() {
            for r in &record.batch.requests {
                self.intake.pending.remove(&(r.client, r.seq));
            }
        }
        self.records = later;
        if self.records.keys().next().is_some_and(|&s| s != seq + 1) {
            self.requeue_records();
        }
        self.next_seq = self.next_seq.max(seq + 1);
        if self.records.is_empty() {
            self.next_seq = seq + 1;
        }
        let run = self.run;
        let again: Vec<(EveBatch, bool)> = (self.records.values())
            .map(|r| (r.batch.clone(), r.sequential))
            .collect();
        for (batch, sequential) in again {
            self.work(
                Work::Execute {
                    run,
                    batch,
                    sequential,
                },
                None,
            );
        }
        self.advance(now_ms);
    }
}
