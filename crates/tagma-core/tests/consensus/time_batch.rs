//! Time-only batches: a leader orders a batch with no request once the service's due time
//! passes, one per due time until its execution is reported; followers accept an empty batch
//! only if it advances the agreed time.

use tagma_core::{Input, Mode, Replica};
use tagma_wire::ConsensusId;

use crate::harness::*;

fn due(replica: &mut Replica, now_ms: u64, executed_through: Option<u64>, due_ms: Option<u64>) {
    replica
        .handle(
            now_ms,
            Input::ServiceDue {
                executed_through: executed_through.map(ConsensusId),
                due_ms,
            },
        )
        .unwrap();
}

#[test]
fn a_leader_orders_one_time_only_batch_per_due_time_once_it_passes() {
    let mut leader = bft(0);
    due(&mut leader, 10, None, Some(100));
    assert!(!proposes(&drain(&mut leader)), "not due yet");
    assert!(leader.next_timeout_ms().is_some_and(|t| t <= 100));
    leader.tick(99);
    assert!(!proposes(&drain(&mut leader)));

    leader.tick(100);
    let (_, hash, batch) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    assert!(batch.requests.is_empty());
    assert_eq!(batch.timestamp_ms, 100);
    assert_eq!(leader.stats().time_batches_proposed, 1);
    assert_eq!(
        complete_on_leader(&mut leader, 0, hash),
        vec![accept(0, hash), deliver(0, hash, batch)]
    );

    // Decided but not yet executed: the due time reported before it still stands, and no
    // second time-only batch follows.
    leader.tick(200);
    assert!(!proposes(&drain(&mut leader)));
    // Its execution is reported, with a due time already passed: the next one leaves at once,
    // its timestamp after the last decided one.
    due(&mut leader, 200, Some(0), Some(150));
    let (_, hash, batch) = take_proposal(&drain(&mut leader), 1, Mode::Bft);
    assert!(batch.requests.is_empty());
    assert_eq!(batch.timestamp_ms, 200);
    complete_on_leader(&mut leader, 1, hash);
    due(&mut leader, 300, Some(1), None);
    leader.tick(10_000);
    assert!(!proposes(&drain(&mut leader)), "nothing due");
    assert_eq!(leader.stats().time_batches_proposed, 2);
}

#[test]
fn a_request_waiting_goes_in_a_batch_of_its_own_kind_and_a_follower_never_orders_time() {
    let mut leader = bft(0);
    due(&mut leader, 10, None, Some(5));
    // Due already, but a request waits too: it is proposed (carrying the time with it).
    let mut leader_with_request = bft(0);
    leader_with_request.receive_request(10, req(1, 1)).unwrap();
    due(&mut leader_with_request, 10, None, Some(5));
    let (_, _, batch) = take_proposal(&drain(&mut leader_with_request), 0, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 1)]);
    assert_eq!(leader_with_request.stats().time_batches_proposed, 0);
    // The plain leader proposed the time-only batch when told.
    let (_, _, batch) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    assert!(batch.requests.is_empty());

    let mut follower = bft(1);
    due(&mut follower, 10, None, Some(5));
    follower.tick(1_000);
    assert!(!proposes(&drain(&mut follower)));
    assert_eq!(follower.stats().time_batches_proposed, 0);
}

#[test]
fn a_follower_decides_a_time_only_batch_that_advances_the_agreed_time() {
    let mut follower = bft(1);
    decide_on_follower(&mut follower, 0, &batch_of(5, vec![req(1, 1)]));
    decide_on_follower(&mut follower, 1, &batch_of(6, vec![]));
}

#[test]
fn an_older_report_than_one_taken_changes_nothing() {
    let mut leader = bft(0);
    due(&mut leader, 10, Some(3), None);
    // A report from before instance 3 executed (delayed behind an installed state).
    due(&mut leader, 20, Some(1), Some(15));
    leader.tick(50);
    assert!(!proposes(&drain(&mut leader)));
}

#[test]
fn a_follower_refuses_a_batch_timestamped_further_ahead_of_its_clock_than_the_skew_allows() {
    use tagma_core::{ProposalFault, Rejection};
    let mut p = params(Mode::Bft, 4, 1);
    p.clock_skew_max_ms = 1_000;
    let mut follower = replica(p.clone());
    let (input, _) = propose(0, &batch_of(2_001, vec![req(1, 1)]));
    assert_eq!(
        follower.receive(1_000, r(0), input),
        Err(Rejection::InvalidProposal {
            from: r(0),
            cid: ConsensusId(0),
            fault: ProposalFault::TimestampAhead {
                timestamp_ms: 2_001,
                local_ms: 1_000,
            },
        })
    );
    // At the bound it is taken.
    let mut follower = replica(p);
    let (input, _) = propose(0, &batch_of(2_000, vec![req(1, 1)]));
    follower.receive(1_000, r(0), input).unwrap();
    assert!(matches!(
        drain(&mut follower).as_slice(),
        [tagma_core::Action::Broadcast(
            tagma_wire::PeerMessage::Write(_)
        )]
    ));
}

/// The STOPs `actions` broadcast, by regency.
fn stops(actions: &[tagma_core::Action]) -> Vec<u32> {
    actions
        .iter()
        .filter_map(|a| match a {
            tagma_core::Action::Broadcast(tagma_wire::PeerMessage::Stop(s)) => Some(s.regency.0),
            _ => None,
        })
        .collect()
}

#[test]
fn a_replica_suspects_the_leader_when_the_agreed_time_stands_still_past_the_due_time() {
    // The harness's request timeout is 1 s: the watch fires 2 s after the due time.
    let mut follower = bft(1);
    decide_on_follower(&mut follower, 0, &batch_of(5, vec![req(1, 1)]));
    due(&mut follower, 10, Some(0), Some(100));
    assert!(follower.next_timeout_ms().is_some_and(|t| t <= 2_100));
    // A time-only batch's instance stalls (the leader's PROPOSE alone, no quorum of WRITEs):
    // no request is there whose timer would expire.
    let (input, _) = propose(1, &batch_of(100, vec![]));
    follower.receive(100, r(0), input).unwrap();
    drain(&mut follower);
    follower.tick(2_099);
    assert!(stops(&drain(&mut follower)).is_empty());
    follower.tick(2_100);
    assert_eq!(stops(&drain(&mut follower)), vec![1]);
    assert_eq!(follower.stats().due_suspicions, 1);
    // The watch keeps going while the due time stands.
    assert!(follower.next_timeout_ms().is_some_and(|t| t <= 4_100));
}

#[test]
fn the_watch_moves_with_each_report_and_stops_with_the_due_time() {
    let mut follower = bft(1);
    due(&mut follower, 10, None, Some(100));
    // The agreed time moved past it: the service reports its next due time, then none.
    due(&mut follower, 1_500, None, Some(3_000));
    follower.tick(2_100);
    assert!(stops(&drain(&mut follower)).is_empty());
    due(&mut follower, 2_000, None, None);
    follower.tick(10_000);
    assert!(stops(&drain(&mut follower)).is_empty());
    assert_eq!(follower.stats().due_suspicions, 0);
}

#[test]
fn a_replica_whose_agreed_time_passed_the_due_time_does_not_suspect() {
    let mut follower = bft(1);
    due(&mut follower, 10, None, Some(100));
    // Instance 0, timestamped past the due time, is decided; its execution (which answers
    // what was due) is not reported yet.
    decide_on_follower(&mut follower, 0, &batch_of(150, vec![req(1, 1)]));
    follower.tick(2_100);
    assert!(stops(&drain(&mut follower)).is_empty());
    assert_eq!(follower.stats().due_suspicions, 0);
}
