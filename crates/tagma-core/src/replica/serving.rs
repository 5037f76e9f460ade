//! The serving side of state transfer: this replica's durable checkpoints and its answers to
//! state queries.

use tagma_wire::{CheckpointInfo, PeerMessage, ReplicaId};

use super::{
    Replica,
    answer_budget::AnswerKind,
    state_vote::{OwnStateVote, OwnVoteStage},
};

impl Replica {
    /// The answer to a `StateQuery`: this replica's vote, if it has one (first, so that a
    /// peer weighing its vote never reads the offer of a position past the vote without it), then
    /// its newest checkpoint and position; within the peer's answer budget.
    pub(super) fn answer_state_query(&mut self, to: ReplicaId) {
        let mut msgs = Vec::new();
        if let Some(OwnStateVote {
            cid,
            digest,
            stage: OwnVoteStage::Cast | OwnVoteStage::Stands { .. },
        }) = self.own_state_vote
        {
            msgs.push(PeerMessage::StateVote { cid, digest });
        }
        msgs.push(PeerMessage::StateOffer {
            checkpoint: self.served.back().copied(),
            next: self.instance.cid,
        });
        self.answer(to, AnswerKind::State, msgs);
    }

    /// A durable checkpoint of this replica is written (the runtime reports each one): it is
    /// offered to replicas that need state from now on.
    /// A checkpoint of the same instance as the newest replaces it (a state repaired after
    /// the state vote, see [`StateVoteRound`]).
    pub(super) fn on_checkpoint_written(&mut self, info: CheckpointInfo) {
        match self.served.back_mut() {
            Some(c) if c.cid > info.cid => return,
            Some(c) if c.cid == info.cid => *c = info,
            _ => self.served.push_back(info),
        }
        while self.served.len() > 2 {
            self.served.pop_front();
        }
        // The runtime keeps the same two files: the newest is offered, the one before it is
        // still served to a fetch that started before the newest existed.
        debug_assert!(
            self.served.len() <= 2
                && self
                    .served
                    .iter()
                    .zip(self.served.iter().skip(1))
                    .all(|(a, b)| a.cid < b.cid),
            "served checkpoints out of order: {:?}",
            self.served
        );
        self.progress_startup();
    }
}
