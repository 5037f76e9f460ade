//! The state of the consensus instance in progress: per epoch, the PROPOSE taken and the
//! WRITE and ACCEPT votes counted.

use std::collections::BTreeMap;

use tagma_wire::{ConsensusId, Digest, Epoch, ReplicaId, Signature};

use super::input::PreparedBatch;

/// The state of one consensus instance, per epoch.
pub(super) struct Instance {
    pub(super) cid: ConsensusId,
    pub(super) epochs: BTreeMap<Epoch, EpochState>,
}

impl Instance {
    pub(super) fn new(cid: ConsensusId) -> Self {
        Instance {
            cid,
            epochs: BTreeMap::new(),
        }
    }
    pub(super) fn epoch_mut(&mut self, epoch: Epoch) -> &mut EpochState {
        self.epochs.entry(epoch).or_default()
    }
}

/// One epoch of an instance: the PROPOSE taken and the votes received.
#[derive(Default)]
pub(super) struct EpochState {
    pub(super) proposal: ProposalSlot,
    pub(super) writes: Votes,
    pub(super) accepts: Votes,
    /// ACCEPT signatures received (unverified) with the hash each signed.
    pub(super) accept_signatures: BTreeMap<ReplicaId, (Digest, Signature)>,
    /// Senders whose ACCEPT signature was checked and found valid.
    pub(super) verified_accepts: std::collections::BTreeSet<ReplicaId>,
    /// This replica has voted for the proposal (WRITE in BFT, ACCEPT in CFT): its own WRITE
    /// counts (the message itself may still wait for its record: `write_seq`).
    pub(super) write_sent: bool,
    /// Durable BFT replicas: the [`Action::PersistVote`] that records the value this replica
    /// writes in this epoch (0: none); its WRITE leaves once that record is durable.
    pub(super) write_seq: u64,
    /// The WRITE message has left (durable BFT replicas hold it until `write_seq` is durable).
    pub(super) write_out: bool,
    /// This replica has sent (and counted) its ACCEPT.
    pub(super) accept_sent: bool,
    /// Durable replicas: the [`Action::PersistVote`] that records the write quorum this
    /// replica accepts in this epoch (0: none issued yet); the ACCEPT leaves once it is
    /// durable.
    pub(super) accept_seq: u64,
}

/// The first PROPOSE of an epoch; only the first is ever taken.
#[derive(Default)]
pub(super) enum ProposalSlot {
    #[default]
    Empty,
    Valid(PreparedBatch),
    /// Valid except that this replica could not verify a request's authentication (its MAC
    /// entry may have been corrupted by a faulty client). It is not voted for until f+1
    /// other replicas vouch for it (then a correct one verified it), and is decided if a
    /// quorum accepts it.
    Unauthenticated(PreparedBatch),
    /// Rejected; the hash of its batch (`None`: undecodable).
    Invalid(Option<Digest>),
}

impl ProposalSlot {
    pub(super) fn is_empty(&self) -> bool {
        matches!(self, ProposalSlot::Empty)
    }
    /// `None` when empty; otherwise the hash of the PROPOSE taken (`Some(None)`: undecodable).
    pub(super) fn hash(&self) -> Option<Option<Digest>> {
        match self {
            ProposalSlot::Empty => None,
            ProposalSlot::Valid(b) | ProposalSlot::Unauthenticated(b) => Some(Some(b.hash)),
            ProposalSlot::Invalid(h) => Some(*h),
        }
    }
}

/// Votes of one kind in one epoch: the first vote of each sender counts, tallied per hash.
#[derive(Default)]
pub(super) struct Votes {
    pub(super) by_sender: BTreeMap<ReplicaId, Digest>,
    pub(super) tally: BTreeMap<Digest, usize>,
}

impl Votes {
    /// Counts `from`'s vote; false if `from` already voted (its first vote stands).
    pub(super) fn add(&mut self, from: ReplicaId, hash: Digest) -> bool {
        if self.by_sender.contains_key(&from) {
            return false;
        }
        self.by_sender.insert(from, hash);
        *self.tally.entry(hash).or_default() += 1;
        debug_assert_eq!(
            self.tally.values().sum::<usize>(),
            self.by_sender.len(),
            "a vote counted twice"
        );
        true
    }
    pub(super) fn count(&self, hash: Digest) -> usize {
        self.tally.get(&hash).copied().unwrap_or(0)
    }
    /// Votes for `hash` from senders other than `me`.
    pub(super) fn count_except(&self, hash: Digest, me: ReplicaId) -> usize {
        self.count(hash) - usize::from(self.by_sender.get(&me) == Some(&hash))
    }
    /// Withdraws `from`'s vote (its signature did not verify).
    pub(super) fn remove(&mut self, from: ReplicaId) {
        if let Some(hash) = self.by_sender.remove(&from) {
            let n = self.tally.get_mut(&hash).expect("tallied");
            *n -= 1;
            if *n == 0 {
                self.tally.remove(&hash);
            }
        }
    }
}
