//! Catch-up by decision forwarding: when a replica that fell behind asks its peers for the
//! decisions it missed (at once when f+1 peers show they decided further, after a quarter of
//! the request timeout when they may merely be early), how a short run is asked for again,
//! and a cut-off replica of a cluster catching up.

use tagma_core::{Action, Mode, PeerInput, Rejection};
use tagma_wire::{ConsensusId, PeerMessage};

use crate::harness::cluster::Cluster;
use crate::harness::*;

#[test]
fn a_replica_far_behind_asks_for_decisions_at_once_and_one_just_behind_waits() {
    // f+1 = 2 peers vote on the next instance: routine (they may simply be early), so the
    // follower waits a quarter of the request timeout before asking for decisions.
    let hash = tagma_crypto::digest(b"v");
    let mut early = bft(3);
    for from in [0, 1] {
        let _ = early.receive(100, r(from), PeerInput::Write(vote(1, hash)));
    }
    assert_eq!(early.next_timeout_ms(), Some(100 + 1000 / 4));
    // f+1 peers vote two or more instances ahead: they decided one this replica never saw
    // proposed, so it asks after the short catch-up gap (a fiftieth of the timeout).
    let mut behind = bft(3);
    for (from, cid) in [(0, 5), (1, 2)] {
        let _ = behind.receive(100, r(from), PeerInput::Write(vote(cid, hash)));
    }
    assert_eq!(behind.next_timeout_ms(), Some(100 + 1000 / 50));
    drain(&mut behind);
    behind.tick(100 + 1000 / 50);
    assert!(
        drain(&mut behind).iter().any(|a| matches!(
            a,
            Action::Send {
                msg: PeerMessage::DecisionRequest {
                    cid: ConsensusId(0)
                },
                ..
            } | Action::Broadcast(PeerMessage::DecisionRequest {
                cid: ConsensusId(0)
            })
        )),
        "the decision request goes out when the gap ends"
    );
    // One peer far ahead is not enough (it may lie): still the quarter period.
    let mut one = bft(3);
    let _ = one.receive(100, r(0), PeerInput::Write(vote(9, hash)));
    let _ = one.receive(100, r(1), PeerInput::Write(vote(1, hash)));
    assert_eq!(one.next_timeout_ms(), Some(100 + 1000 / 4));
}

/// A replica waiting the quarter period because f+1 peers are on its next instance (maybe
/// merely early) asks after the short gap as soon as f+1 peers show they decided further:
/// otherwise a replica that has just caught up after a state transfer waits the quarter
/// period out while the others run on.
#[test]
fn the_quarter_wait_shortens_once_f_plus_1_peers_show_they_decided_further() {
    let hash = tagma_crypto::digest(b"v");
    let mut early = bft(3);
    for from in [0, 1] {
        let _ = early.receive(100, r(from), PeerInput::Write(vote(1, hash)));
    }
    assert_eq!(early.next_timeout_ms(), Some(100 + 1000 / 4));
    // One peer further is not enough (it may lie).
    let _ = early.receive(110, r(0), PeerInput::Write(vote(2, hash)));
    assert_eq!(early.next_timeout_ms(), Some(100 + 1000 / 4));
    // The second one is: the short gap from now.
    let _ = early.receive(120, r(1), PeerInput::Write(vote(3, hash)));
    assert_eq!(early.next_timeout_ms(), Some(120 + 1000 / 50));
    // Later messages do not push it further out.
    let _ = early.receive(130, r(0), PeerInput::Write(vote(4, hash)));
    assert_eq!(early.next_timeout_ms(), Some(120 + 1000 / 50));
}

#[test]
fn a_run_that_ends_short_is_asked_again_after_the_gap_which_duplicates_lengthen() {
    let log = decided_run(3);
    let hash = tagma_crypto::digest(b"v");
    let mut laggard = bft(3);
    for from in [0, 1] {
        let _ = laggard.receive(100, r(from), PeerInput::Write(vote(5, hash)));
    }
    laggard.tick(120); // asks for the run from instance 0 (64 decisions)
    assert_eq!(laggard.next_timeout_ms(), Some(120 + 1000 / 2));
    // Instance 0 arrives and no more: asked again one gap (1000 / 50) after it.
    laggard
        .receive(130, r(0), PeerInput::Decision(log[0].clone()))
        .unwrap();
    assert_eq!(laggard.next_cid(), ConsensusId(1));
    assert_eq!(laggard.next_timeout_ms(), Some(130 + 20));
    // A duplicate (it asked again while that run was still coming) doubles the gap.
    assert!(matches!(
        laggard.receive(131, r(1), PeerInput::Decision(log[0].clone())),
        Err(Rejection::Stale { .. })
    ));
    laggard
        .receive(132, r(0), PeerInput::Decision(log[1].clone()))
        .unwrap();
    assert_eq!(laggard.next_timeout_ms(), Some(132 + 40));
}

#[test]
fn a_replica_that_missed_decisions_catches_up_by_forwarding() {
    // Replica 3 is cut off (receives nothing) while the others decide; once reconnected,
    // votes for later instances make it fetch the missing decisions with their proofs.
    let mut cluster = Cluster::new(Mode::Bft, 4, 11);
    cluster.crashed.insert(r(3));
    cluster.run_workload(3, 10);
    let decided = cluster.delivered[0].len();
    assert!(decided > 1);
    assert!(cluster.delivered[3].is_empty());
    cluster.crashed.remove(&r(3));
    cluster.lenient = true;
    for c in 1..=3 {
        cluster.client_request(req(c, 11));
    }
    cluster.run_with_timers(60_000);
    cluster.check(3, 11);
    assert_eq!(cluster.delivered[3], cluster.delivered[0]);
    assert!(cluster.replicas[3].stats().decisions_forwarded_in >= decided as u64);
}
