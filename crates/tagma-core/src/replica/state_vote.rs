//! The state vote after a restart: a durable BFT replica compares the digest of its recovered
//! state with its peers' and repairs it by state transfer when f+1 of them contradict it.

use std::collections::BTreeMap;

use tagma_wire::{CheckpointInfo, ConsensusId, Digest, PeerMessage, ReplicaId};

use super::{Replica, action::Action};
use crate::quorum::Mode;

/// DDS's state vote (REINIT with checkpoint hashes, install what enough replicas
/// agree on, then a fresh checkpoint everywhere), done after the start-up synchronisation
/// has caught up: every durable replica that restarts computes the digest a checkpoint of
/// the state after the last instance decided (`cid`) would have — streamed into the hash,
/// nothing written (`Action::DigestState`) — and compares it with its peers' votes
/// (`StateVote`) and the checkpoints they offer at that instance. Checksums catch a torn or
/// corrupted disk; this catches one whose wrong content passes them (a lying disk, a bug
/// that wrote a wrong state): a replica whose recovered state f+1 peers contradict with one
/// digest fetches theirs by state transfer (one of them is correct), instead of serving and
/// checkpointing a wrong state; a confirmed replica orders at once and, if a peer's vote
/// contradicted it, writes DDS's fresh checkpoint meanwhile (`Action::CheckpointNow`), which
/// is what that peer fetches.
/// After a restart of every replica all of them stand at the same instance and vote there; a
/// replica restarting alone finds the others past it (nothing to compare: inconclusive,
/// logged). BFT only: CFT assumes disks that fail detectably.
#[derive(Debug)]
pub(super) struct StateVoteRound {
    /// The instance voted on.
    pub(super) cid: ConsensusId,
    /// This replica's digest of its state there, once computed.
    pub(super) own: Option<Digest>,
    /// What each peer offered: its newest checkpoint and its next instance.
    pub(super) offers: BTreeMap<ReplicaId, (Option<CheckpointInfo>, ConsensusId)>,
    /// When the query goes again to the peers whose answer settles nothing yet.
    pub(super) query_ms: u64,
    /// When the vote gives up (inconclusive).
    pub(super) deadline_ms: u64,
}

#[derive(Debug)]
pub(super) enum StateVoteStage {
    NotStarted,
    Running(StateVoteRound),
    /// Contradicted: the state is being fetched (the synchronisation ends once it is
    /// installed).
    Repairing,
    /// Concluded (or not needed): the synchronisation may end.
    Done,
}

/// This replica's vote in the state vote: the digest of its state after instance `cid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OwnStateVote {
    pub(super) cid: ConsensusId,
    pub(super) digest: Digest,
    pub(super) stage: OwnVoteStage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OwnVoteStage {
    /// Cast, the verdict pending: sent to the peers that query this replica.
    Cast,
    /// Confirmed or inconclusive: still sent; a peer's vote that contradicts it asks for the
    /// fresh checkpoint that peer repairs from (`true` once asked: once per vote).
    Stands { checkpoint_asked: bool },
    /// f+1 peers contradicted it: no longer offered, but sent with each query of the repair
    /// fetch (a peer that missed it would not write the checkpoint the fetch needs).
    Contradicted,
}

/// What the peers' votes (and checkpoints) say about this replica's digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StateVoteVerdict {
    /// f+1 peers hold the same state: one of them is correct.
    Confirmed,
    /// f+1 peers hold one other state: this replica's is wrong.
    Contradicted,
    /// Every peer has moved past the instance or answered, or the time is up.
    Inconclusive,
}

/// The state vote gives up after this many request timeouts (hashing a large state takes a while
/// on every replica).
pub(super) const STATE_VOTE_WAIT_TIMEOUTS: u64 = 5;

/// Once this replica's digest is computed, the peers' votes are awaited this many request
/// timeouts at most.
pub(super) const STATE_VOTE_PEER_WAIT_TIMEOUTS: u64 = 2;

impl Replica {
    /// Whether the state vote still holds the start-up synchronisation (see [`StateVoteRound`]). The
    /// first time the synchronisation could end, it starts: the digest of the state after the
    /// last instance decided (the newest checkpoint's, if it is there).
    pub(super) fn state_vote_pending(&mut self) -> bool {
        let votes_on_state =
            self.params.durable && self.params.state_vote && self.params.quorums.mode == Mode::Bft;
        let last = self.last_decided;
        let timeout = self.params.request_timeout_ms.max(1);
        let now = self.now_ms;
        let fetching = self.fetch.is_some();
        let Some(r) = self.startup.as_mut() else {
            return false;
        };
        match &r.state_vote {
            StateVoteStage::Done => return false,
            StateVoteStage::Repairing if r.repaired => {
                r.state_vote = StateVoteStage::Done;
                return false;
            }
            StateVoteStage::Repairing => {
                if !fetching {
                    // The fetch was dropped without installing anything: the contradicted
                    // state must not be ordered on.
                    self.catch_up.state_transfer_signalled = true;
                    self.start_fetch(false, true);
                }
                return true;
            }
            StateVoteStage::Running(_) => {}
            StateVoteStage::NotStarted => {
                let Some(cid) = last.filter(|_| votes_on_state) else {
                    // Nothing decided yet (a new cluster) or no state vote (CFT, no disk).
                    r.state_vote = StateVoteStage::Done;
                    return false;
                };
                r.state_vote = StateVoteStage::Running(StateVoteRound {
                    cid,
                    own: None,
                    offers: BTreeMap::new(),
                    query_ms: u64::MAX,
                    deadline_ms: now + STATE_VOTE_WAIT_TIMEOUTS * timeout,
                });
                tracing::info!(%cid, "start-up synchronisation caught up: hashing the state for the state vote");
                match self.served.back().copied().filter(|c| c.cid == cid) {
                    Some(held) => self.cast_state_vote(cid, held.digest),
                    None => self.actions.push_back(Action::DigestState { cid }),
                }
            }
        }
        self.weigh_state_votes()
    }

    /// This replica's digest for the state vote is known: it asks every peer for theirs, and
    /// answers the peers that asked for its own before it was there.
    pub(super) fn cast_state_vote(&mut self, cid: ConsensusId, digest: Digest) {
        let timeout = self.params.request_timeout_ms.max(1);
        let (now, next) = (self.now_ms, self.instance.cid);
        let Some(startup) = self.startup.as_mut() else {
            return;
        };
        let StateVoteStage::Running(a) = &mut startup.state_vote else {
            return;
        };
        let asked = &mut startup.asked;
        if a.cid != cid || a.own.is_some() {
            return;
        }
        a.own = Some(digest);
        a.query_ms = now + (timeout / 2).max(1);
        // The peers hash theirs at the same time: a peer not done within two timeouts of
        // this one is not taking part (it did not restart, and sits at the same instance).
        a.deadline_ms = a
            .deadline_ms
            .min(now + STATE_VOTE_PEER_WAIT_TIMEOUTS * timeout);
        self.own_state_vote = Some(OwnStateVote {
            cid,
            digest,
            stage: OwnVoteStage::Cast,
        });
        let asked = std::mem::take(asked);
        self.actions
            .push_back(Action::Broadcast(PeerMessage::StateQuery { next }));
        for to in asked {
            self.answer_state_query(to);
        }
    }

    /// A peer's vote in the state vote: kept while this replica synchronises. One that
    /// contradicts this replica's standing vote (also after the synchronisation) asks for
    /// the fresh checkpoint that peer will repair from.
    pub(super) fn on_state_vote(&mut self, from: ReplicaId, cid: ConsensusId, digest: Digest) {
        if self
            .own_state_vote
            .is_some_and(|v| v.cid == cid && v.digest != digest)
        {
            self.fresh_checkpoint_for_repair(from);
        }
        if let Some(r) = self.startup.as_mut() {
            r.votes.insert(from, (cid, digest));
            self.progress_startup();
        }
    }

    /// DDS's fresh checkpoint after the state vote, taken only when a peer needs it: once this
    /// replica's vote stands and a peer's vote contradicts it (that peer fetches the state
    /// from f+1 replicas' checkpoints at or past the vote's instance). Once per vote; not
    /// when a checkpoint at or past that instance is already offered. Without a
    /// contradiction each replica's own checkpoint and log already hold its state.
    pub(super) fn fresh_checkpoint_for_repair(&mut self, peer: ReplicaId) {
        let Some(OwnStateVote {
            cid,
            stage: OwnVoteStage::Stands { checkpoint_asked },
            ..
        }) = self.own_state_vote.as_mut()
        else {
            return;
        };
        if *checkpoint_asked {
            return;
        }
        *checkpoint_asked = true;
        let cid = *cid;
        if self.served.back().is_some_and(|c| c.cid >= cid) {
            return;
        }
        let Some(last) = self.last_decided else {
            return;
        };
        tracing::info!(%peer, vote = %cid, checkpoint = %last, "a peer's state vote contradicts this replica's standing vote: fresh checkpoint for its repair");
        self.actions.push_back(Action::CheckpointNow { cid: last });
    }

    /// Weighs the offers (see [`StateVoteRound`]); true while the vote goes on. A contradicted state
    /// is fetched from the others (state transfer in repair mode).
    pub(super) fn weigh_state_votes(&mut self) -> bool {
        let one_correct = self.params.quorums.one_correct();
        let (now, next, me) = (self.now_ms, self.instance.cid, self.params.me);
        let timeout = self.params.request_timeout_ms.max(1);
        let Some(r) = self.startup.as_mut() else {
            return false;
        };
        let StateVoteStage::Running(a) = &mut r.state_vote else {
            return false;
        };
        let Some(own) = a.own else {
            if now < a.deadline_ms {
                return true;
            }
            tracing::warn!(cid = %a.cid, "state vote: this replica's state was not hashed in time; ordering without it");
            r.state_vote = StateVoteStage::Done;
            self.start_state_check();
            return false;
        };
        let mut matches = 0;
        let mut others: BTreeMap<Digest, usize> = BTreeMap::new();
        let mut open = Vec::new();
        for peer in self.params.members.iter().filter(|m| **m != me) {
            // A peer's vote there, or its checkpoint there (a peer that did not restart may
            // have checkpointed that instance).
            let offer = a.offers.get(peer);
            let digest = r
                .votes
                .get(peer)
                .filter(|(cid, _)| *cid == a.cid)
                .map(|(_, d)| *d)
                .or_else(|| match offer {
                    Some((Some(c), _)) if c.cid == a.cid => Some(c.digest),
                    _ => None,
                });
            match (digest, offer) {
                (Some(d), _) if d == own => matches += 1,
                (Some(d), _) => *others.entry(d).or_default() += 1,
                // Past the instance: it will not vote there.
                (None, Some((Some(c), _))) if c.cid > a.cid => {}
                (None, Some((_, peer_next))) if *peer_next > next => {}
                _ => open.push(*peer),
            }
        }
        let verdict = if matches >= one_correct {
            StateVoteVerdict::Confirmed
        } else if others.values().any(|n| *n >= one_correct) {
            StateVoteVerdict::Contradicted
        } else if open.is_empty() || now >= a.deadline_ms {
            StateVoteVerdict::Inconclusive
        } else {
            if now >= a.query_ms {
                a.query_ms = now + (timeout / 2).max(1);
                for to in open {
                    self.actions.push_back(Action::Send {
                        to,
                        msg: PeerMessage::StateQuery { next },
                    });
                }
            }
            return true;
        };
        let cid = a.cid;
        match verdict {
            StateVoteVerdict::Confirmed | StateVoteVerdict::Inconclusive => {
                if verdict == StateVoteVerdict::Confirmed {
                    self.stats.state_votes_confirmed += 1;
                    tracing::info!(%cid, matches, "state vote: the recovered state is confirmed");
                } else {
                    tracing::info!(%cid, matches, "state vote inconclusive (too few peers voted at this instance: the others are past it)");
                }
                r.state_vote = StateVoteStage::Done;
                // Its vote stands, inconclusive too: f+1 peers that outvote another one may
                // each end inconclusive, and that one repairs from their fresh checkpoints.
                let contradicted_by = r
                    .votes
                    .iter()
                    .find(|(_, (c, d))| *c == cid && *d != own)
                    .map(|(peer, _)| *peer);
                self.own_state_vote = Some(OwnStateVote {
                    cid,
                    digest: own,
                    stage: OwnVoteStage::Stands {
                        checkpoint_asked: false,
                    },
                });
                if let Some(peer) = contradicted_by {
                    self.fresh_checkpoint_for_repair(peer);
                }
                if verdict == StateVoteVerdict::Inconclusive {
                    self.start_state_check();
                }
                false
            }
            StateVoteVerdict::Contradicted => {
                tracing::warn!(%cid, matches, "state vote: f+1 replicas hold another state at this instance; this replica's disk returned a wrong state: fetching theirs");
                r.state_vote = StateVoteStage::Repairing;
                self.stats.state_votes_contradicted += 1;
                // The peers learn of it with every query of the repair fetch (`fetch_actions`):
                // those whose vote stands write the fresh checkpoint it repairs from.
                self.own_state_vote = Some(OwnStateVote {
                    cid,
                    digest: own,
                    stage: OwnVoteStage::Contradicted,
                });
                // Started later if a fetch is installing (`state_vote_pending`, stage
                // `Repairing`).
                self.start_repair();
                true
            }
        }
    }

    /// The start-up synchronisation's state vote: a peer's offer (ignored when no vote runs).
    pub(super) fn note_state_offer(
        &mut self,
        from: ReplicaId,
        checkpoint: Option<CheckpointInfo>,
        next: ConsensusId,
    ) {
        if let Some(startup) = self.startup.as_mut()
            && let StateVoteStage::Running(a) = &mut startup.state_vote
        {
            a.offers.insert(from, (checkpoint, next));
            self.progress_startup();
        }
    }

    /// Whether the state vote is running or repairing: decisions are not committed then (the
    /// vote is on the state at the instance it started at, and a repair replaces that one).
    pub(super) fn state_vote_holds(&self) -> bool {
        self.startup.as_ref().is_some_and(|s| {
            matches!(
                s.state_vote,
                StateVoteStage::Running(_) | StateVoteStage::Repairing
            )
        })
    }

    /// The runtime's answer to [`Action::DigestState`]: the digest a checkpoint of the state
    /// after `cid` would have. It is this replica's vote in the state vote (see [`StateVoteRound`]).
    pub(super) fn on_state_digest(&mut self, cid: ConsensusId, digest: Digest) {
        if self.state_check_digest(cid, digest) {
            return;
        }
        self.cast_state_vote(cid, digest);
        self.progress_startup();
    }
}
