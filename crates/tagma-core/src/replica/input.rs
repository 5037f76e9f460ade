//! Everything the core learns: [`Input`], the one argument of [`Replica::handle`]; and what the
//! network stage hands it for a peer's message ([`PeerInput`], with PROPOSE batches decoded,
//! hashed and authenticated: [`PreparedBatch`]).

use bytes::Bytes;
use tagma_wire::{
    Accept, Batch, CheckpointInfo, ConsensusId, DecidedInstance, Decode, Digest, Epoch,
    PeerMessage, ReplicaId, RequestEnvelope, Stop, StopData, Sync, Vote,
};

use crate::transfer::{InstallOutcome, TransferInput};

/// One input to the core, given with the current time to [`Replica::handle`]. Inputs the
/// driver reports in answer to an [`Action`] name that action.
///
/// [`Replica::handle`]: super::Replica::handle
/// [`Action`]: super::Action
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// An ordered request that arrived on an authenticated client connection (its
    /// authentication already checked).
    ClientRequest(RequestEnvelope),
    /// A message from the authenticated peer `from`, as the network stage prepared it
    /// ([`PeerInput::from_message`]).
    Peer { from: ReplicaId, input: PeerInput },
    /// Timers may be due: given once [`Replica::next_timeout_ms`] has passed (an early tick
    /// fires nothing).
    ///
    /// [`Replica::next_timeout_ms`]: super::Replica::next_timeout_ms
    Tick,
    /// Durable replicas: every delivered instance up to `cid` is in the log, flushed
    /// (instances a fetched state covers count too). Awaited after
    /// [`Action::AwaitLogDurable`](super::Action::AwaitLogDurable); may be given at any time.
    LogDurable(ConsensusId),
    /// Durable replicas: the votes of every [`Action::PersistVote`](super::Action::PersistVote)
    /// up to `seq` are flushed (the answer to
    /// [`Action::WriteVotes`](super::Action::WriteVotes)` { flush: true }`).
    VotesDurable { seq: u64 },
    /// A checkpoint of this replica was written durably: it is offered to replicas that
    /// fetch state from now on.
    CheckpointWritten(CheckpointInfo),
    /// The answer to [`Action::DigestState`](super::Action::DigestState): the digest a
    /// checkpoint of the state after `cid` would have.
    StateDigest { cid: ConsensusId, digest: Digest },
    /// The verdict on [`Action::InstallState`](super::Action::InstallState).
    StateInstalled(InstallOutcome),
    /// What an [`Action::ReadLog`](super::Action::ReadLog) for `to` did not use: its `count`
    /// less the entries sent, its `bytes_max` less their bytes. It goes back to the peer's
    /// answer budget; without it the whole reservation counts as spent.
    LogServed {
        to: ReplicaId,
        unused: super::Allowance,
    },
    /// After executing through `executed_through` (`None`: nothing yet), the service next has
    /// work at agreed time `due_ms` (`None`: nothing due). While this replica leads and no
    /// request waits, it orders a batch carrying only the time once `due_ms` has passed. May
    /// be given at any time; only the newest report counts.
    ServiceDue {
        executed_through: Option<ConsensusId>,
        due_ms: Option<u64>,
    },
}

/// A PROPOSE's batch as prepared by the network stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedBatch {
    /// The encoded batch exactly as received.
    pub bytes: Bytes,
    /// BLAKE3 of `bytes`.
    pub hash: Digest,
    /// `bytes` decoded.
    pub batch: Batch,
    /// Whether every request's authentication (this replica's MAC entry, or the signature)
    /// verified.
    pub authentic: bool,
}

/// A consensus input from an authenticated peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerInput {
    Propose {
        cid: ConsensusId,
        epoch: Epoch,
        batch: PreparedBatch,
    },
    /// A PROPOSE whose batch could not be decoded.
    UndecodablePropose {
        cid: ConsensusId,
        epoch: Epoch,
    },
    Write(Vote),
    /// A signed ACCEPT; its signature is checked by the core only when a decision rests on
    /// it (2f per instance in BFT, never per request), so ACCEPTs beyond the quorum cost no
    /// verification.
    Accept(Accept),
    /// STOP; the network stage has dropped requests whose authentication failed.
    Stop(Stop),
    StopData(StopData),
    /// SYNC, with whether every request of its fresh proposal authenticated.
    Sync {
        sync: Sync,
        proposal_authentic: bool,
    },
    DecisionRequest {
        cid: ConsensusId,
    },
    Decision(DecidedInstance),
    /// A peer's start-up position ([`PeerMessage::Position`]).
    Position {
        next: ConsensusId,
        reply: bool,
    },
    /// A forwarded request, with whether its authentication verified.
    Forward {
        request: RequestEnvelope,
        authentic: bool,
    },
    /// A state-transfer message.
    Transfer(TransferInput),
    /// A peer's vote in the state vote after a restart ([`PeerMessage::StateVote`]).
    StateVote {
        cid: ConsensusId,
        digest: Digest,
    },
}

impl PeerInput {
    /// Maps a received message to the core's input the way the network stage must:
    /// PROPOSE batches are decoded and hashed, and `authentic` is asked about the requests
    /// that need checking (a PROPOSE's batch, a forwarded request, each request of a STOP —
    /// unauthentic ones are dropped —, and a SYNC's fresh proposal). `None` for the view
    /// exchange of joining replicas ([`PeerMessage::ViewQuery`], [`PeerMessage::ViewInfo`]),
    /// which the runtime answers on the connection it came on, without the core.
    pub fn from_message(
        msg: PeerMessage,
        authentic: impl Fn(&[RequestEnvelope]) -> bool,
    ) -> Option<PeerInput> {
        Some(match msg {
            PeerMessage::Propose(p) => match Batch::decode(&p.batch) {
                Ok(batch) => {
                    let hash = tagma_crypto::digest(&p.batch);
                    let ok = authentic(&batch.requests);
                    PeerInput::Propose {
                        cid: p.cid,
                        epoch: p.epoch,
                        batch: PreparedBatch {
                            bytes: p.batch,
                            hash,
                            batch,
                            authentic: ok,
                        },
                    }
                }
                Err(_) => PeerInput::UndecodablePropose {
                    cid: p.cid,
                    epoch: p.epoch,
                },
            },
            PeerMessage::Write(v) => PeerInput::Write(v),
            PeerMessage::Accept(a) => PeerInput::Accept(a),
            PeerMessage::Forward(request) => {
                let ok = authentic(std::slice::from_ref(&request));
                PeerInput::Forward {
                    request,
                    authentic: ok,
                }
            }
            PeerMessage::Stop(mut stop) => {
                stop.requests.retain(|r| authentic(std::slice::from_ref(r)));
                PeerInput::Stop(stop)
            }
            PeerMessage::StopData(data) => PeerInput::StopData(data),
            PeerMessage::Sync(sync) => {
                let proposal_authentic = sync.proposal.is_empty()
                    || Batch::decode(&sync.proposal).is_ok_and(|b| authentic(&b.requests));
                PeerInput::Sync {
                    sync,
                    proposal_authentic,
                }
            }
            PeerMessage::DecisionRequest { cid } => PeerInput::DecisionRequest { cid },
            PeerMessage::Decision(d) => PeerInput::Decision(d),
            PeerMessage::Position { next, reply } => PeerInput::Position { next, reply },
            PeerMessage::StateQuery { next } => PeerInput::Transfer(TransferInput::Query { next }),
            PeerMessage::StateOffer { checkpoint, next } => {
                PeerInput::Transfer(TransferInput::Offer { checkpoint, next })
            }
            PeerMessage::ChunkRequest { cid, offset, len } => {
                PeerInput::Transfer(TransferInput::ChunkRequest { cid, offset, len })
            }
            PeerMessage::Chunk { cid, offset, data } => {
                PeerInput::Transfer(TransferInput::Chunk { cid, offset, data })
            }
            PeerMessage::LogRequest { from, count } => {
                PeerInput::Transfer(TransferInput::LogRequest { from, count })
            }
            PeerMessage::LogEntry(d) => PeerInput::Transfer(TransferInput::LogEntry(d)),
            PeerMessage::StateVote { cid, digest } => PeerInput::StateVote { cid, digest },
            PeerMessage::ViewQuery | PeerMessage::ViewInfo(_) => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use bytes::Bytes;
    use tagma_wire::{
        Batch, ClientId, Decode, Encode, PeerMessage, Regency, Request, RequestAuth,
        RequestEnvelope, RequestKind, RequestSeq, Sync, ViewId,
    };

    use super::PeerInput;

    fn sync_proposing(proposal: Bytes) -> PeerMessage {
        PeerMessage::Sync(Sync {
            regency: Regency(1),
            last_decided: None,
            collects: vec![],
            proposal,
        })
    }

    /// The `proposal_authentic` of the input `from_message` makes of `msg`, and whether it
    /// asked the authenticator (which says `verdict`).
    fn judged(msg: PeerMessage, verdict: bool) -> (bool, bool) {
        let asked = Cell::new(false);
        let input = PeerInput::from_message(msg, |_| {
            asked.set(true);
            verdict
        });
        match input {
            Some(PeerInput::Sync {
                proposal_authentic, ..
            }) => (proposal_authentic, asked.get()),
            other => panic!("a SYNC maps to PeerInput::Sync: {other:?}"),
        }
    }

    #[test]
    fn a_sync_whose_fresh_proposal_does_not_decode_is_unauthentic_without_asking() {
        let garbage = Bytes::from_static(b"not a batch");
        assert!(Batch::decode(&garbage).is_err());
        assert_eq!(judged(sync_proposing(garbage), true), (false, false));
    }

    #[test]
    fn a_sync_without_a_fresh_proposal_needs_no_authentication_and_one_with_a_batch_asks() {
        assert_eq!(judged(sync_proposing(Bytes::new()), false), (true, false));
        let batch = Batch {
            timestamp_ms: 1,
            seed: 0,
            requests: vec![RequestEnvelope {
                request: Request {
                    client: ClientId(1),
                    seq: RequestSeq(1),
                    kind: RequestKind::Ordered,
                    view: ViewId(0),
                    payload: Bytes::from_static(b"x"),
                },
                auth: RequestAuth::Macs(vec![]),
            }],
        }
        .to_bytes();
        assert_eq!(judged(sync_proposing(batch.clone()), true), (true, true));
        assert_eq!(judged(sync_proposing(batch), false), (false, true));
    }
}
