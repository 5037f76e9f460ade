//! Whole clusters in memory, driven in virtual time: every request ordered exactly once and in
//! the same order everywhere, with a reordering network, a silent or crashed follower, and
//! crashed or faulty leaders replaced by the leader change the replicas' own timers start.

use tagma_core::{Mode, ProposalFault};
use tagma_wire::{ConsensusId, Encode, PeerMessage};

use crate::harness::cluster::Cluster;
use crate::harness::*;

#[test]
fn bft_cluster_orders_every_request_once() {
    let mut cluster = Cluster::new(Mode::Bft, 4, 1);
    cluster.run_workload(5, 60);
    cluster.check(5, 60);
    assert!(cluster.delivered[0].len() > 1);
}

#[test]
fn bft_cluster_with_reordering_network() {
    for seed in 1..=5 {
        let mut cluster = Cluster::new(Mode::Bft, 4, seed);
        cluster.reorder = true;
        cluster.run_workload(6, 50);
        cluster.check(6, 50);
    }
}

#[test]
fn cft_cluster_orders_every_request_once() {
    for reorder in [false, true] {
        let mut cluster = Cluster::new(Mode::Cft, 3, 7);
        cluster.reorder = reorder;
        cluster.run_workload(5, 60);
        cluster.check(5, 60);
    }
}

#[test]
fn bft_cluster_decides_with_a_silent_follower() {
    let mut cluster = Cluster::new(Mode::Bft, 4, 3);
    cluster.silent.insert(r(3));
    cluster.run_workload(4, 50);
    // The silent follower still hears everything, so it agrees too.
    cluster.check(4, 50);

    let mut cluster = Cluster::new(Mode::Bft, 4, 4);
    cluster.crashed.insert(r(2));
    cluster.reorder = true;
    cluster.run_workload(4, 50);
    cluster.check(4, 50);
    assert!(cluster.delivered[2].is_empty());
}

#[test]
fn cft_cluster_decides_with_a_crashed_follower() {
    let mut cluster = Cluster::new(Mode::Cft, 3, 5);
    cluster.crashed.insert(r(2));
    cluster.run_workload(4, 50);
    cluster.check(4, 50);
}

#[test]
fn a_crashed_leader_is_replaced_and_every_request_completes() {
    for (mode, n) in [(Mode::Bft, 4), (Mode::Cft, 3)] {
        for seed in 1..=4 {
            let mut cluster = Cluster::new(mode, n, seed);
            cluster.lenient = true;
            cluster.reorder = seed % 2 == 0;
            cluster.crashed.insert(r(0)); // the leader of regency 0
            cluster.run_workload(4, 15);
            assert!(
                cluster.delivered[1].is_empty(),
                "nothing decides without a leader"
            );
            cluster.run_with_timers(120_000);
            cluster.check(4, 15);
            cluster.assert_new_leader(r(0));
        }
    }
}

#[test]
fn a_leader_crashing_mid_instance_never_breaks_agreement() {
    for (mode, n) in [(Mode::Bft, 4), (Mode::Cft, 3)] {
        let mut crashes = 0;
        for seed in 1..=12 {
            let mut cluster = Cluster::new(mode, n, seed);
            cluster.lenient = true;
            cluster.reorder = true;
            // Crash the leader at a different point of the run for every seed.
            cluster.crash_at = Some((5 + 11 * seed as usize, r(0)));
            cluster.run_workload(4, 12);
            // One more request per client, so a crashed leader must be replaced even when it
            // crashed after everything else was decided.
            for c in 1..=4 {
                cluster.client_request(req(c, 13));
            }
            cluster.run_with_timers(300_000);
            cluster.check(4, 13);
            if cluster.crashed.contains(&r(0)) {
                crashes += 1;
                // Whatever the crash interrupted, requests sent now need a new leader.
                for c in 1..=4 {
                    cluster.client_request(req(c, 14));
                }
                cluster.run_with_timers(cluster.now_ms + 300_000);
                cluster.check(4, 14);
                cluster.assert_new_leader(r(0));
            }
        }
        assert!(
            crashes >= 8,
            "only {crashes} of 12 runs crashed the leader ({mode})"
        );
    }
}

#[test]
fn two_leaders_crash_one_after_the_other_with_f_2() {
    // n = 7, f = 2: the leader of regency 0 crashes, then the leader of regency 1 crashes
    // while it leads; regency 2's leader finishes the work.
    for seed in 1..=3 {
        let mut cluster = Cluster::new(Mode::Bft, 7, seed);
        cluster.lenient = true;
        cluster.reorder = seed == 2;
        cluster.crashed.insert(r(0));
        cluster.run_workload(3, 8);
        cluster.run_with_timers(cluster.now_ms + 5_000);
        cluster.crashed.insert(r(1));
        for c in 1..=3 {
            cluster.client_request(req(c, 9));
        }
        cluster.run_with_timers(600_000);
        cluster.check(3, 9);
        cluster.assert_new_leader(r(1));
    }
}

#[test]
fn invalid_proposals_change_the_leader_and_are_never_executed() {
    // Replica 0 (the leader) proposes a replayed request after its first batch: every
    // correct replica rejects it, suspects the leader, and regency 1 orders the rest.
    let mut cluster = Cluster::new(Mode::Bft, 4, 9);
    cluster.lenient = true;
    cluster.client_request(req(1, 1));
    cluster.run_until_quiet();
    assert_eq!(cluster.delivered[1].len(), 1);
    let replay = batch_of(cluster.now_ms, vec![req(1, 1)]);
    let bytes = replay.to_bytes();
    for to in 1..4 {
        cluster.network.push_back((
            r(0),
            r(to),
            PeerMessage::Propose(tagma_wire::Propose {
                cid: ConsensusId(1),
                epoch: E0,
                batch: bytes.clone(),
            }),
        ));
    }
    cluster.run_until_quiet();
    cluster.crashed.insert(r(0)); // it stays silent afterwards
    for i in 1..4 {
        assert!(matches!(
            cluster.replicas[i].suspected_leader_fault(),
            Some((_, ProposalFault::Replayed { .. }))
        ));
    }
    cluster.client_request(req(1, 2));
    cluster.run_with_timers(60_000);
    cluster.check(1, 2);
    cluster.assert_new_leader(r(0));
}
