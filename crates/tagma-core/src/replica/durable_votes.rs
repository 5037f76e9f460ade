//! Durable consensus votes: the collect a durable replica writes before its WRITE, ACCEPT or
//! installed regency leaves, when its vote records are written and flushed, and the votes it
//! reads back after a restart.

use bytes::Bytes;
use tagma_wire::{Collect, Digest, Epoch};

use super::{Replica, action::Action};

/// A replica's votes on one instance, read back from its disk after a crash.
///
/// An accepted value binds beyond its epoch until a SYNC covers the instance: a restarted
/// replica resumes at its log's end, which may lag behind instances it accepted (replies
/// leave before the log flush), so its collects understate where it was, and a leader
/// change can synchronise an earlier instance and then propose afresh for this one. In
/// Mod-SMaRt without crashes the quorum intersection puts an accepter's collect at this
/// instance into every SYNC that precedes a fresh proposal for it; here the restored claim
/// stands in for it (CFT: both accepters of a replied value crash, one
/// comes back with its log two instances behind, the leader change covers only the first).
#[derive(Default, Debug)]
pub(super) struct RecoveredVotes {
    /// The highest epoch in which it saw a write quorum (and may have accepted), and for what.
    pub(super) accepted: Option<(Epoch, Digest)>,
    /// The values it wrote: (epoch, hash, value).
    pub(super) writes: Vec<(Epoch, Digest, Bytes)>,
    /// A SYNC for this instance was taken since the restart (its value choice saw n − f
    /// collects, and this replica follows it).
    pub(super) synchronised: bool,
}

impl RecoveredVotes {
    /// The accepted value that still binds this replica in `epoch`: the one accepted in that
    /// epoch or a later one, or in any earlier one while no SYNC covered the instance.
    pub(super) fn binding(&self, epoch: Epoch) -> Option<Digest> {
        self.accepted
            .filter(|(e, _)| epoch <= *e || !self.synchronised)
            .map(|(_, h)| h)
    }

    /// Whether voting for `hash` in `epoch` could contradict these votes: another value
    /// written in that epoch, or another value accepted that still binds (above).
    pub(super) fn forbids(&self, epoch: Epoch, hash: Digest) -> bool {
        self.binding(epoch).is_some_and(|h| h != hash)
            || self
                .writes
                .iter()
                .any(|(e, h, _)| *e == epoch && *h != hash)
    }

    /// What this replica, as leader of `epoch`, may propose: `Err` if nothing (a binding
    /// value whose bytes it does not hold: a leader change will settle it), `Ok(Some)` the
    /// only value (the binding one, or else the one it wrote in this epoch), `Ok(None)`
    /// anything.
    pub(super) fn value_to_propose(&self, epoch: Epoch) -> Result<Option<&Bytes>, ()> {
        let value_of = |hash: Digest| {
            self.writes
                .iter()
                .find(|(_, h, _)| *h == hash)
                .map(|(_, _, v)| v)
        };
        match self.binding(epoch) {
            Some(h) => value_of(h).map(Some).ok_or(()),
            None => Ok(self
                .writes
                .iter()
                .find(|(e, _, _)| *e == epoch)
                .map(|(_, _, v)| v)),
        }
    }
}

impl Replica {
    /// The vote-flush policy, after every input: the votes persisted by it go into one
    /// record ([`Action::WriteVotes`]), flushed if a WRITE, an ACCEPT or an installed regency
    /// waits for them. A record nothing waits for (its epoch ended first) is written without a
    /// flush: no message depends on it, and the next flush covers it.
    pub(super) fn write_votes_after_input(&mut self) {
        if !self.params.durable {
            return;
        }
        let flush = self
            .awaits_vote()
            .is_some_and(|seq| seq > self.votes_flush_asked);
        if self.votes_issued > self.votes_written || flush {
            self.actions.push_back(Action::WriteVotes {
                flush,
                next: self.instance.cid,
            });
            self.votes_written = self.votes_issued;
            if flush {
                self.votes_flush_asked = self.votes_written;
            }
        }
    }

    /// Issues an [`Action::PersistVote`] of this replica's votes on the instance in progress;
    /// returns its sequence number.
    pub(super) fn persist_votes(&mut self) -> u64 {
        self.votes_issued += 1;
        let votes = self.collect();
        self.actions.push_back(Action::PersistVote {
            seq: self.votes_issued,
            votes,
        });
        self.votes_issued
    }

    /// A durable replica's runtime reports that its votes up to [`Action::PersistVote`]
    /// `seq` are on disk: the ACCEPTs waiting for them may go.
    pub(super) fn on_votes_durable(&mut self, seq: u64) {
        if seq <= self.votes_durable {
            return;
        }
        debug_assert!(
            seq <= self.votes_issued,
            "a vote reported durable before it was issued"
        );
        self.votes_durable = seq;
        if let Some((held, regency)) = self.leader_change.held_install
            && held <= seq
        {
            self.leader_change.held_install = None;
            if regency == self.regency && self.leader_change.waiting_sync {
                self.finish_install(regency);
            }
        }
        let epoch = self.epoch();
        self.release_write(epoch);
        self.check_quorums(epoch);
    }

    /// `Some(seq)` while a WRITE, an ACCEPT or an installed regency waits for the vote
    /// [`Action::PersistVote`] `seq`; the runtime then gives
    /// [`Input::VotesDurable`](super::Input::VotesDurable) when it is on disk.
    pub(super) fn awaits_vote(&self) -> Option<u64> {
        if let Some((seq, _)) = self.leader_change.held_install {
            return Some(seq);
        }
        let state = self.instance.epochs.get(&self.epoch())?;
        if !state.accept_sent && state.accept_seq > self.votes_durable {
            return Some(state.accept_seq);
        }
        (state.write_sent && !state.write_out && state.write_seq > self.votes_durable)
            .then_some(state.write_seq)
    }

    /// Restart: the votes read back from this replica's disk ([`Action::PersistVote`]), after
    /// [`Replica::resume`] (if anything was recovered) and before
    /// [`Replica::start_startup`]. Votes on instances already decided are ignored. On the
    /// others this replica writes no other value in an epoch where it wrote one, votes for
    /// no other value in an epoch up to one where it saw a write quorum, reports them in its
    /// collects, and as leader proposes that value again.
    pub(super) fn restore_votes(&mut self, votes: impl IntoIterator<Item = Collect>) {
        let votes: Vec<Collect> = votes.into_iter().collect();
        // The regency it had installed (and voted in) before the crash: it goes on from
        // there, never voting again in an earlier epoch. As after adopting a regency whose
        // SYNC it did not see, it takes no PROPOSE (and proposes nothing) for the instance
        // in progress until a decision made in that regency arrives or a new leader change:
        // it may have forgotten what that regency's synchronisation bound. Unless its last
        // recovered decision was made in that very regency: its leader proposed in it only
        // after its SYNC, so the instance the SYNC bound is at most that one, decided here.
        if let Some(regency) = votes.iter().map(|c| c.regency).max()
            && regency > self.regency
        {
            let synchronised = self
                .last_decided
                .and_then(|cid| self.decisions.epoch_of(cid))
                .is_some_and(|epoch| epoch == Epoch(regency.0));
            tracing::info!(%regency, synchronised, "regency from before the restart restored");
            self.enter_regency(regency);
            if !synchronised {
                self.leader_change.waiting_sync = true;
                self.leader_change.sync_deadline_ms = None;
            }
        }
        for collect in votes {
            if collect.cid < self.instance.cid {
                continue;
            }
            tracing::info!(cid = %collect.cid, write_quorum = ?collect.write_quorum.map(|(e, _)| e), writes = collect.write_set.len(), "votes from before the restart restored");
            let slot = self.recovered_votes.entry(collect.cid).or_default();
            if let Some((epoch, hash)) = collect.write_quorum
                && slot.accepted.is_none_or(|(e, _)| e < epoch)
            {
                slot.accepted = Some((epoch, hash));
            }
            for (epoch, value) in collect.write_set {
                let hash = tagma_crypto::digest(&value);
                if !slot.writes.iter().any(|(e, _, _)| *e == epoch) {
                    slot.writes.push((epoch, hash, value));
                }
            }
        }
    }
}
