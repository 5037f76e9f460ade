//! The state vote after a restart (DDS's REINIT with checkpoint hashes, in Bessani et al.: On
//! the Efficiency of Durable State Machine Replication): a durable BFT replica compares the
//! digest of its recovered state with its peers' votes and checkpoints, orders once f+1 peers
//! confirm it (or the vote is inconclusive), repairs it by state transfer once f+1 contradict
//! it, and writes the fresh checkpoint a contradicted peer repairs from.

use tagma_core::transfer::InstallOutcome;
use tagma_core::{Action, Mode, PeerInput, Rejection, Replica};
use tagma_wire::{ClientId, ConsensusId, Digest, PeerMessage, RequestSeq};

use crate::harness::*;

/// Replica `from`'s vote in the state vote, handled by `replica` at `at`: the digest (byte)
/// of its state after instance `cid`.
fn vote_from(replica: &mut Replica, at: u64, from: u32, cid: u64, digest: u8) {
    replica
        .receive(
            at,
            r(from),
            PeerInput::StateVote {
                cid: ConsensusId(cid),
                digest: Digest([digest; 32]),
            },
        )
        .unwrap();
}

/// A durable BFT replica 3 restarted at instance 3 (its checkpoint of instance 0 and the log
/// after it) whose peers are all at 3 too: it catches up, asks for the digest of its state
/// after instance 2 (0xaa…) and, once it has it, for its peers' votes.
fn audited_restart() -> Replica {
    let mut r3 = restarted_at_3_with_peers_at(3);
    assert!(
        r3.is_starting_up(),
        "the state vote holds the synchronisation"
    );
    assert_eq!(
        drain(&mut r3),
        vec![Action::DigestState {
            cid: ConsensusId(2)
        }]
    );
    // A peer's query before the digest is known is answered without a vote, and the peer
    // gets the vote (before a new offer) once it is.
    query_from(&mut r3, 102, 1, 3);
    assert_eq!(
        drain(&mut r3),
        vec![Action::Send {
            to: r(1),
            msg: PeerMessage::StateOffer {
                checkpoint: Some(ckp_info(0, 0xee)),
                next: ConsensusId(3)
            }
        }]
    );
    r3.report_state_digest(102, 2, Digest([0xaa; 32]));
    assert_eq!(
        drain(&mut r3),
        vec![
            Action::Broadcast(PeerMessage::StateQuery {
                next: ConsensusId(3)
            }),
            Action::Send {
                to: r(1),
                msg: PeerMessage::StateVote {
                    cid: ConsensusId(2),
                    digest: Digest([0xaa; 32])
                }
            },
            Action::Send {
                to: r(1),
                msg: PeerMessage::StateOffer {
                    checkpoint: Some(ckp_info(0, 0xee)),
                    next: ConsensusId(3)
                }
            }
        ]
    );
    r3
}

/// f+1 peers hold the same state at the instance (by their votes, or a checkpoint there):
/// confirmed, the replica orders; a peer voted for another state, so it writes the fresh
/// checkpoint that peer will repair from meanwhile.
#[test]
fn the_state_vote_confirms_a_state_that_f_plus_one_peers_hold() {
    let mut r3 = audited_restart();
    // One peer (possibly faulty) disagrees: not enough either way.
    vote_from(&mut r3, 103, 0, 2, 0xbb);
    vote_from(&mut r3, 103, 1, 2, 0xaa);
    // A vote on another instance counts for nothing.
    vote_from(&mut r3, 103, 2, 1, 0xaa);
    assert!(r3.is_starting_up());
    drain(&mut r3);
    // Replica 2 did not restart, and checkpointed that instance.
    offer_from(&mut r3, 104, 2, Some((2, 0xaa)), 3);
    assert!(!r3.is_starting_up());
    assert_eq!(r3.stats().state_votes_contradicted, 0);
    assert!(drain(&mut r3).contains(&Action::CheckpointNow {
        cid: ConsensusId(2)
    }));
    // It goes on answering with its vote (a peer restarted beside it may still vote).
    query_from(&mut r3, 105, 0, 3);
    assert!(drain(&mut r3).contains(&Action::Send {
        to: r(0),
        msg: PeerMessage::StateVote {
            cid: ConsensusId(2),
            digest: Digest([0xaa; 32])
        }
    }));
}

/// Peers past the instance (a replica restarting alone) will never checkpoint there: the
/// vote is inconclusive and the replica orders; until then, unsettled peers are asked again.
#[test]
fn the_state_vote_is_inconclusive_when_the_peers_are_past_the_instance() {
    let mut r3 = audited_restart();
    offer_from(&mut r3, 103, 0, Some((0, 0xcc)), 9);
    offer_from(&mut r3, 103, 1, Some((1, 0xcc)), 3);
    assert!(r3.is_starting_up(), "replica 1 may still vote there");
    let due = r3.next_timeout_ms().unwrap();
    r3.tick(due);
    let asked = state_queries(drain(&mut r3));
    assert_eq!(asked.len(), 2, "replicas 1 and 2, not 0: {asked:?}");
    offer_from(&mut r3, due + 1, 1, Some((1, 0xcc)), 4);
    offer_from(&mut r3, due + 1, 2, None, 7);
    assert!(!r3.is_starting_up());
    assert_eq!(r3.stats().state_votes_contradicted, 0);
}

/// f+1 peers agree on another state: this replica's disk lied. It fetches their state at its
/// own position (a repair), installs it, and only then orders.
#[test]
fn a_state_that_f_plus_one_peers_contradict_is_fetched_again() {
    let mut r3 = audited_restart();
    vote_from(&mut r3, 103, 0, 2, 0xbb);
    vote_from(&mut r3, 103, 1, 2, 0xbb);
    assert!(r3.is_starting_up());
    assert_eq!(r3.stats().state_votes_contradicted, 1);
    // It fetches the state: the fetch starts with a state query to every peer.
    assert_eq!(
        drain(&mut r3),
        vec![
            // Its vote goes to every peer: the confirmed ones write the checkpoint it fetches.
            Action::Broadcast(PeerMessage::StateVote {
                cid: ConsensusId(2),
                digest: Digest([0xaa; 32])
            }),
            Action::Broadcast(PeerMessage::StateQuery {
                next: ConsensusId(3)
            })
        ]
    );
    // Its contradicted vote is no longer given.
    query_from(&mut r3, 104, 2, 3);
    assert!(!drain(&mut r3).iter().any(|a| matches!(
        a,
        Action::Send {
            msg: PeerMessage::StateVote { .. },
            ..
        }
    )));
    // The peers' fresh checkpoints, written after their own votes confirmed their state:
    // until they are there, nothing can be fetched.
    for from in [0, 1, 2] {
        offer_from(&mut r3, 104, from, Some((0, 0xee)), 3);
    }
    assert!(!drain(&mut r3).iter().any(|a| matches!(
        a,
        Action::Send {
            msg: PeerMessage::ChunkRequest { .. },
            ..
        }
    )));
    let due = r3.next_timeout_ms().unwrap();
    r3.tick(due);
    drain(&mut r3);
    for from in [0, 1, 2] {
        offer_from(&mut r3, due + 1, from, Some((2, 0xbb)), 3);
    }
    let chunk = drain(&mut r3)
        .into_iter()
        .find_map(|a| match a {
            Action::Send {
                to,
                msg: PeerMessage::ChunkRequest { cid, offset, len },
            } => Some((to, cid, offset, len)),
            _ => None,
        })
        .expect("the checkpoint is fetched from a source");
    assert_eq!((chunk.1, chunk.2, chunk.3), (ConsensusId(2), 0, 16));
    let install = deliver_checkpoint(&mut r3, 105, chunk.0, 2);
    assert!(install.repair);
    assert_eq!(install.target(), ConsensusId(2));
    assert_eq!(install.matches_needed, 2);
    assert!(r3.is_starting_up(), "not before it is installed");
    r3.report_state_installed(
        106,
        InstallOutcome::Installed {
            last: ConsensusId(2),
            timestamp_ms: 2,
            sessions: vec![(ClientId(9), RequestSeq(3))],
            view: None,
        },
    );
    assert!(!r3.is_starting_up());
    // The repaired checkpoint replaces the lying one it offers.
    r3.report_checkpoint(106, ckp_info(2, 0xbb));
    query_from(&mut r3, 107, 0, 0);
    assert!(drain(&mut r3).contains(&Action::Send {
        to: r(0),
        msg: PeerMessage::StateOffer {
            checkpoint: Some(ckp_info(2, 0xbb)),
            next: ConsensusId(3)
        }
    }));
}

/// CFT replicas and replicas that decided nothing yet skip the state vote.
#[test]
fn no_state_vote_in_cft_or_before_anything_was_decided() {
    let mut fresh = restart(
        durable_params(Mode::Bft, 4, 3, true),
        None,
        vec![],
        vec![],
        0,
    );
    for from in [0, 1, 2] {
        fresh.receive(1, r(from), position(0, true)).unwrap();
    }
    assert!(!fresh.is_starting_up());
    assert!(!hashes_or_checkpoints(&mut fresh));
    let log = decided_run(3);
    let resume = resumed(2, 2, &[(ClientId(9), RequestSeq(3))], log);
    let mut c2 = restart(
        durable_params(Mode::Cft, 3, 2, true),
        Some(resume),
        vec![],
        vec![],
        0,
    );
    for from in [0, 1] {
        c2.receive(1, r(from), position(3, true)).unwrap();
    }
    assert!(!c2.is_starting_up());
    assert!(!hashes_or_checkpoints(&mut c2));
}

/// While the vote runs, decisions are not committed (the vote is on the state at its
/// instance); catch-up asks for them once it ends.
#[test]
fn no_decision_is_committed_while_the_state_vote_runs() {
    let mut r3 = audited_restart();
    let next = decided_run(4).pop().unwrap();
    assert_eq!(
        r3.receive(103, r(0), PeerInput::Decision(next)),
        Err(Rejection::StartingUp)
    );
    assert!(
        !drain(&mut r3)
            .iter()
            .any(|a| matches!(a, Action::Deliver(_)))
    );
}

/// Without a contradicting vote no fresh checkpoint is written (each replica's own checkpoint
/// and log hold its state); a contradicting vote that arrives after the vote ended asks for
/// one at the current position, once.
#[test]
fn the_fresh_checkpoint_is_written_only_for_a_peer_the_vote_contradicts() {
    let mut r3 = audited_restart();
    vote_from(&mut r3, 103, 0, 2, 0xaa);
    vote_from(&mut r3, 103, 1, 2, 0xaa);
    assert!(!r3.is_starting_up());
    assert!(!hashes_or_checkpoints(&mut r3));
    // A vote on another instance, or for the same state: nothing.
    vote_from(&mut r3, 104, 2, 1, 0xbb);
    vote_from(&mut r3, 104, 2, 2, 0xaa);
    assert!(!hashes_or_checkpoints(&mut r3));
    vote_from(&mut r3, 105, 2, 2, 0xbb);
    assert_eq!(
        drain(&mut r3),
        vec![Action::CheckpointNow {
            cid: ConsensusId(2)
        }]
    );
    vote_from(&mut r3, 106, 0, 2, 0xbb);
    assert!(drain(&mut r3).is_empty(), "once per vote");
}

/// A vote that ends inconclusive still stands: f+1 peers that outvote another replica may
/// each end inconclusive (here replica 2 did not restart and never votes), and that replica
/// repairs from their fresh checkpoints.
#[test]
fn an_inconclusive_vote_still_writes_the_checkpoint_a_contradicted_peer_needs() {
    let mut r3 = audited_restart();
    vote_from(&mut r3, 103, 0, 2, 0xbb);
    vote_from(&mut r3, 103, 1, 2, 0xaa);
    offer_from(&mut r3, 103, 2, Some((0, 0xee)), 3);
    assert!(r3.is_starting_up());
    drain(&mut r3);
    while r3.is_starting_up() {
        let now = r3.next_timeout_ms().unwrap();
        r3.tick(now);
        assert!(now < 100_000, "the vote ends");
    }
    assert!(drain(&mut r3).contains(&Action::CheckpointNow {
        cid: ConsensusId(2)
    }));
}
