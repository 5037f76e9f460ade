//! How a replica starts ([`Start`]): fresh, from what its disk held, or as a member a view
//! change added. [`Replica::new`] takes it, so nothing reaches the core before it knows.

use tagma_crypto::IdentityKey;
use tagma_wire::{
    CheckpointInfo, ClientId, Collect, ConsensusId, DecidedInstance, RequestSeq, View,
};

use super::{Replica, ReplicaParams};

/// How a replica starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// A replica without durable state: it orders at once, from instance 0.
    Fresh,
    /// A durable replica: what its disk held (possibly nothing). It runs the start-up
    /// synchronisation before ordering.
    Recovered(Recovered),
    /// A replica that a view change added (its parameters carry that view) and that has no
    /// state: it fetches a checkpoint and the decisions after it by state transfer before
    /// taking part, because the history before it joined was decided in views it does not
    /// know (the executor, started in the configuration's initial view, replays and checks
    /// it).
    Joining,
}

/// What a durable replica's disk held when it started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The state recovered from the newest checkpoint and the log after it (`None`: the disk
    /// held no decision).
    pub resume: Option<Resume>,
    /// This replica's durable checkpoints, oldest first (it serves them to replicas that
    /// fetch state).
    pub checkpoints: Vec<CheckpointInfo>,
    /// The votes read back from its vote records ([`super::Action::PersistVote`]). Votes on
    /// instances already decided are ignored. For the others this replica writes no other
    /// value in an epoch where it wrote one, votes for no other value in an epoch up to one
    /// where it saw a write quorum, reports them in its collects, and as leader proposes that
    /// value again.
    pub votes: Vec<Collect>,
}

/// Where the state recovered from a disk stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    /// Every instance up to `last` is executed (the checkpoint and the log after it).
    pub last: ConsensusId,
    /// The timestamp of the batch of `last`.
    pub timestamp_ms: u64,
    /// The client sessions the executed instances leave (a retransmission is answered from
    /// the reply cache, never ordered again).
    pub sessions: Vec<(ClientId, RequestSeq)>,
    /// The newest logged decisions with their proofs, oldest first, kept for decision
    /// forwarding.
    pub recent: Vec<DecidedInstance>,
    /// The view the recovered state ends in, when the executor keeps members (a view change
    /// executed before the crash): instance `last + 1` runs in it.
    pub view: Option<View>,
}

impl Replica {
    /// A replica core with the parameters of its view, its identity key, and how it starts,
    /// at `now_ms`. Drain [`Replica::poll_action`] right after: a recovered or joining
    /// replica starts talking to its peers at once.
    ///
    /// Panics if the parameters contradict each other (members not ascending, one key or
    /// address per member, this replica a member with `key`): that is a bug of the caller,
    /// whose configuration was validated before.
    pub fn new(params: ReplicaParams, key: IdentityKey, start: Start, now_ms: u64) -> Self {
        let mut replica = Replica::build(params, key);
        replica.set_now(now_ms);
        match start {
            Start::Fresh => {}
            Start::Joining => replica.start_joining(),
            Start::Recovered(recovered) => {
                let mut before_own_view = false;
                if let Some(resume) = recovered.resume {
                    let last = resume.last;
                    let view = resume.view.clone();
                    replica.resume(resume);
                    if let Some(view) = view {
                        before_own_view = view.id < replica.params.view;
                        replica.adopt_view(last, view);
                    }
                }
                for checkpoint in recovered.checkpoints {
                    replica.on_checkpoint_written(checkpoint);
                }
                replica.restore_votes(recovered.votes);
                replica.start_startup();
                if before_own_view {
                    // A replica a view change added, whose disk holds only a state from before
                    // that change: the decisions from there to the change carry proofs of
                    // views it knows no checker of. It fetches them as a joining replica does
                    // (the executor verifies each under the view then in effect).
                    replica.start_joining();
                }
            }
        }
        replica
    }
}
