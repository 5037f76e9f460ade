//! Adaptive batch filling: a leader with `batch_fill_wait_ms` holds its next proposal until
//! 7/8 of the requests it expects wait (what waited when the hold began plus the size of the
//! last decided batch), or until the wait runs out; after a hold that ran out it proposes at
//! once.

use tagma_core::{Action, Mode, Replica, ReplicaParams};
use tagma_wire::{Batch, Digest, PeerMessage};

use crate::harness::*;

/// The PROPOSE for `cid` among `actions`, as (hash, batch).
fn proposal_in(actions: &[Action], cid: u64) -> Option<(Digest, Batch)> {
    actions.iter().find_map(|a| match a {
        Action::Broadcast(PeerMessage::Propose(p)) if p.cid.0 == cid => {
            let v = prepared(&p.batch);
            Some((v.hash, v.batch))
        }
        _ => None,
    })
}

fn leader_filling(wait_ms: u64) -> Replica {
    replica(ReplicaParams {
        batch_fill_wait_ms: wait_ms,
        ..params(Mode::Bft, 4, 0)
    })
}

/// The leader decides its first batch: eight requests from clients 1..=8 (no hold: the
/// last decided batch held nothing).
fn after_a_batch_of_eight(leader: &mut Replica) {
    for client in 1..=8 {
        leader.receive_request(10, req(client, 1)).unwrap();
    }
    let actions = drain(leader);
    let (_, hash, batch) = take_proposal(&actions, 0, Mode::Bft);
    assert_eq!(batch.requests.len(), 1, "the first request went at once");
    // The seven others wait for instance 1, proposed once instance 0 decides.
    let (hash, batch) = proposal_in(&complete_on_leader(leader, 0, hash), 1).unwrap();
    assert_eq!(batch.requests.len(), 7);
    assert!(proposal_in(&complete_on_leader(leader, 1, hash), 2).is_none());
}

#[test]
fn a_leader_holds_its_proposal_until_most_of_the_expected_requests_wait() {
    let mut leader = leader_filling(2);
    after_a_batch_of_eight(&mut leader);
    // One request waits; 7 were in the last batch: 7/8 of 8 = 7 make the batch.
    leader.receive_request(20, req(1, 2)).unwrap();
    assert!(!proposes(&drain(&mut leader)), "held for the batch to fill");
    assert_eq!(
        leader.next_timeout_ms(),
        Some(22),
        "held until the wait runs out"
    );
    for client in 2..=6 {
        leader.receive_request(21, req(client, 2)).unwrap();
        assert!(!proposes(&drain(&mut leader)), "{client} of 7 wait");
    }
    leader.receive_request(21, req(7, 2)).unwrap();
    let (_, _, batch) = take_proposal(&drain(&mut leader), 2, Mode::Bft);
    assert_eq!(batch.requests.len(), 7, "proposed as soon as 7 wait");
    assert_eq!(leader.stats().batch_holds_filled, 1);
    assert_eq!(leader.stats().batch_holds_expired, 0);
}

#[test]
fn a_hold_that_runs_out_proposes_what_arrived_and_the_next_proposal_goes_at_once() {
    let mut leader = leader_filling(2);
    after_a_batch_of_eight(&mut leader);
    leader.receive_request(20, req(1, 2)).unwrap();
    leader.receive_request(20, req(2, 2)).unwrap();
    leader.tick(21);
    assert!(!proposes(&drain(&mut leader)), "still within the wait");
    leader.tick(22);
    let (_, hash, batch) = take_proposal(&drain(&mut leader), 2, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 2), (2, 2)]);
    assert_eq!(leader.stats().batch_holds_expired, 1);
    assert!(proposal_in(&complete_on_leader(&mut leader, 2, hash), 3).is_none());
    // Next instance: no hold, though fewer than 7/8 of (1 + 2) would ask for one.
    leader.receive_request(23, req(3, 2)).unwrap();
    let (_, hash, batch) = take_proposal(&drain(&mut leader), 3, Mode::Bft);
    assert_eq!(ids(&batch), vec![(3, 2)]);
    assert!(proposal_in(&complete_on_leader(&mut leader, 3, hash), 4).is_none());
    // The one after may hold again, but 1 waiting + 1 in the last batch expects 2, and 7/8
    // of 2 is 1: at once.
    leader.receive_request(24, req(4, 2)).unwrap();
    assert!(proposes(&drain(&mut leader)));
    assert_eq!(leader.stats().batch_holds_expired, 1);
    assert_eq!(leader.next_timeout_ms().filter(|t| *t < 1000), None);
}

#[test]
fn without_a_fill_wait_or_with_nothing_waiting_a_leader_never_holds() {
    let mut leader = leader_filling(0);
    after_a_batch_of_eight(&mut leader);
    leader.receive_request(20, req(1, 2)).unwrap();
    let (_, _, batch) = take_proposal(&drain(&mut leader), 2, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 2)]);
    assert_eq!(leader.stats().batch_holds_filled, 0);
    assert_eq!(leader.stats().batch_holds_expired, 0);

    // Nothing waiting after a large batch: no hold, no timer for one.
    let mut idle = leader_filling(2);
    after_a_batch_of_eight(&mut idle);
    idle.tick(100);
    assert!(!proposes(&drain(&mut idle)));
    assert_eq!(idle.stats().batch_holds_expired, 0);
}

#[test]
fn a_follower_never_holds_and_arms_no_fill_timer() {
    let mut follower = replica(ReplicaParams {
        batch_fill_wait_ms: 2,
        ..params(Mode::Bft, 4, 1)
    });
    // A decided batch of eight: a leader in its place would now hold for seven requests.
    let eight = batch_of(1, (1..=8).map(|client| req(client, 1)).collect());
    decide_on_follower(&mut follower, 0, &eight);
    follower.receive_request(10, req(1, 2)).unwrap();
    assert!(!proposes(&drain(&mut follower)));
    assert!(
        follower.next_timeout_ms().is_some_and(|t| t >= 1000),
        "only the request timer"
    );
}

#[test]
fn a_hold_past_its_deadline_never_names_a_time_already_passed() {
    let mut leader = leader_filling(2);
    after_a_batch_of_eight(&mut leader);
    leader.receive_request(20, req(1, 2)).unwrap();
    assert_eq!(leader.next_timeout_ms(), Some(22));
    // An input after the deadline that proposes nothing (refused: it claims to come from the
    // leader itself): the runtime must not be told to tick at a time already passed, which
    // would make it tick without end while something held proposals back.
    assert!(leader.receive(23, r(0), position(3, false)).is_err());
    assert!(!proposes(&drain(&mut leader)));
    assert!(
        leader.next_timeout_ms().is_none_or(|t| t > 23),
        "a deadline already passed: {:?}",
        leader.next_timeout_ms()
    );
    // The next chance to propose takes it, whatever has arrived.
    leader.tick(24);
    let (_, _, batch) = take_proposal(&drain(&mut leader), 2, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 2)]);
}
