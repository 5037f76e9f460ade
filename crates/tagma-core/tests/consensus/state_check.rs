//! The later state check: a durable BFT replica whose state vote after a restart was
//! inconclusive orders with its state unconfirmed, hashes its state after the instances where
//! its peers' next checkpoints fall, and compares: f+1 matching checkpoints confirm it, f+1
//! contradicting ones stop its ordering and start a repair by state transfer.

use tagma_core::{Action, Mode, PeerInput, Rejection, Replica, ReplicaParams};
use tagma_wire::{ClientId, ConsensusId, DecidedInstance, Digest, PeerMessage, RequestSeq};

use crate::harness::*;

/// Checkpoint period of the replicas in these tests.
const PERIOD: u64 = 4;

/// A durable BFT replica 3 restarted at instance 3 whose peers are all past instance 2: its
/// state vote there is inconclusive and the check starts, asking every peer for its newest
/// checkpoint. Returns it with the decisions of instances 0..12.
fn unconfirmed_restart() -> (Replica, Vec<DecidedInstance>) {
    let (mut r3, log) = restart_voting();
    r3.report_state_digest(102, 2, Digest([0xaa; 32]));
    drain(&mut r3);
    assert_eq!(r3.stats().state_unconfirmed, 0, "the vote runs");
    // Every peer is past instance 2 and has no checkpoint there.
    offer_from(&mut r3, 103, 0, Some((0, 0xcc)), 9);
    offer_from(&mut r3, 103, 1, Some((1, 0xcc)), 4);
    offer_from(&mut r3, 103, 2, None, 7);
    assert!(!r3.is_starting_up());
    assert_eq!(r3.stats().state_unconfirmed, 1, "inconclusive: unconfirmed");
    let asked = state_queries(drain(&mut r3));
    assert_eq!(asked.len(), 3, "every peer is asked: {asked:?}");
    (r3, log)
}

/// A durable BFT replica 3 restarted at instance 3, every peer at 3 too: its state vote on
/// instance 2 runs (it has asked for its state's digest). Returns it with the decisions of
/// instances 0..12.
fn restart_voting() -> (Replica, Vec<DecidedInstance>) {
    let log = decided_run(12);
    let resume = resumed(2, 2, &[(ClientId(9), RequestSeq(3))], log[..3].to_vec());
    let params = ReplicaParams {
        checkpoint_period: PERIOD,
        ..durable_params(Mode::Bft, 4, 3, true)
    };
    let mut r3 = restart(params, Some(resume), vec![ckp_info(0, 0xee)], vec![], 100);
    drain(&mut r3);
    for from in [0, 1, 2] {
        r3.receive(101, r(from), position(3, true)).unwrap();
    }
    assert_eq!(
        drain(&mut r3),
        vec![Action::DigestState {
            cid: ConsensusId(2)
        }]
    );
    (r3, log)
}

/// The peers' newest checkpoints: replica 2's at 0 (its next one at 4), replica 0's at 1 (next
/// at 5), replica 1's at 2 (next at 6). Then instances 3..=6 arrive; the replica hashes its
/// state right after 4, 5 and 6, and reports each digest (0x40 + instance).
fn execute_through_the_peers_checkpoints(r3: &mut Replica, log: &[DecidedInstance]) {
    offer_from(r3, 104, 2, Some((0, 0x01)), 4);
    offer_from(r3, 104, 0, Some((1, 0x01)), 4);
    offer_from(r3, 104, 1, Some((2, 0x01)), 4);
    assert_eq!(r3.stats().state_unconfirmed, 1);
    for d in &log[3..7] {
        r3.receive(105, r(0), PeerInput::Decision(d.clone()))
            .unwrap();
    }
    let actions = drain(r3);
    let order: Vec<String> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Deliver(d) => Some(format!("deliver {}", d.cid.0)),
            Action::DigestState { cid } => Some(format!("digest {}", cid.0)),
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        [
            "deliver 3",
            "deliver 4",
            "digest 4",
            "deliver 5",
            "digest 5",
            "deliver 6",
            "digest 6"
        ]
    );
    for cid in 4..=6u64 {
        r3.report_state_digest(106, cid, Digest([0x40 + cid as u8; 32]));
    }
    drain(r3);
}

#[test]
fn f_plus_one_peers_checkpoints_that_match_confirm_the_state() {
    let (mut r3, log) = unconfirmed_restart();
    execute_through_the_peers_checkpoints(&mut r3, &log);
    // The peers are asked again once they had time to write those checkpoints.
    let due = r3.next_timeout_ms().unwrap();
    r3.tick(due);
    assert_eq!(state_queries(drain(&mut r3)).len(), 3);
    offer_from(&mut r3, due + 1, 2, Some((4, 0x44)), 8);
    assert_eq!(r3.stats().state_unconfirmed, 1, "one match is not enough");
    offer_from(&mut r3, due + 1, 0, Some((5, 0x45)), 8);
    assert_eq!(r3.stats().state_unconfirmed, 0);
    assert_eq!(r3.stats().state_checks_confirmed, 1);
    assert_eq!(r3.stats().state_checks_contradicted, 0);
    // Ordering goes on as before: the next decision is delivered.
    r3.receive(due + 2, r(0), PeerInput::Decision(log[7].clone()))
        .unwrap();
    assert!(
        drain(&mut r3)
            .iter()
            .any(|a| matches!(a, Action::Deliver(d) if d.cid.0 == 7))
    );
}

#[test]
fn one_contradicting_peer_leaves_the_state_unconfirmed() {
    let (mut r3, log) = unconfirmed_restart();
    execute_through_the_peers_checkpoints(&mut r3, &log);
    // One faulty peer contradicts, one correct one confirms: not settled.
    offer_from(&mut r3, 2000, 2, Some((4, 0x99)), 8);
    offer_from(&mut r3, 2000, 0, Some((5, 0x45)), 8);
    assert_eq!(r3.stats().state_unconfirmed, 1);
    assert_eq!(r3.stats().state_checks_contradicted, 0);
    // The third peer settles it.
    offer_from(&mut r3, 2001, 1, Some((6, 0x46)), 8);
    assert_eq!(r3.stats().state_unconfirmed, 0);
    assert_eq!(r3.stats().state_checks_confirmed, 1);
}

#[test]
fn f_plus_one_peers_checkpoints_that_contradict_stop_ordering_and_start_a_repair() {
    let (mut r3, log) = unconfirmed_restart();
    execute_through_the_peers_checkpoints(&mut r3, &log);
    offer_from(&mut r3, 2000, 2, Some((4, 0x99)), 8);
    offer_from(&mut r3, 2000, 1, Some((6, 0x98)), 8);
    assert_eq!(r3.stats().state_checks_contradicted, 1);
    assert_eq!(
        r3.stats().state_unconfirmed,
        1,
        "unconfirmed until repaired"
    );
    // The repair fetch starts: a state query to every peer.
    assert!(
        drain(&mut r3).contains(&Action::Broadcast(PeerMessage::StateQuery {
            next: ConsensusId(7)
        }))
    );
    // Meanwhile it takes no part in ordering.
    assert_eq!(
        r3.receive(2001, r(0), PeerInput::Decision(log[7].clone())),
        Err(Rejection::RepairingState)
    );
    let (propose_7, hash) = propose(7, &batch_of(7, vec![req(1, 1)]));
    assert_eq!(
        r3.receive(2001, r(0), propose_7),
        Err(Rejection::RepairingState)
    );
    assert_eq!(
        r3.receive(2001, r(0), PeerInput::Write(vote(7, hash))),
        Err(Rejection::RepairingState)
    );
    assert!(!drain(&mut r3).iter().any(|a| matches!(
        a,
        Action::Deliver(_) | Action::Broadcast(PeerMessage::Write(_))
    )),);
}

/// The others decide past the instance of the vote while this replica is still starting up
/// (a leader change it slept through ends, say): start-up abandons the vote, and the state is
/// unconfirmed and checked as after any inconclusive vote, never trusted silently.
#[test]
fn a_vote_the_others_decide_past_during_start_up_leaves_the_state_unconfirmed() {
    let (mut r3, _) = restart_voting();
    assert_eq!(r3.stats().state_unconfirmed, 0, "the vote runs");
    for from in [0, 1, 2] {
        r3.receive(102, r(from), position(9, true)).unwrap();
    }
    assert_eq!(
        r3.stats().state_unconfirmed,
        1,
        "the vote was abandoned: the state is unconfirmed"
    );
    assert_eq!(
        state_queries(drain(&mut r3)).len(),
        3,
        "the check asks every peer for its newest checkpoint"
    );
}
