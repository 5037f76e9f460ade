//! A durable replica whose log stalls: it decides at most `LOG_LAG_MAX` instances beyond
//! what its runtime reported in the log, then holds the instance in progress (no vote, no
//! decision, no request timer firing) until the log catches up, and goes on from the
//! messages it kept for it.

use tagma_core::{Action, LOG_LAG_MAX, Mode, PeerInput, Replica};
use tagma_wire::{ConsensusId, PeerMessage};

use crate::harness::*;

/// Replica 0 proposes instance `cid` to the CFT follower at `now_ms`; the follower's vote
/// is reported durable if it asks for it. Returns every action the follower took.
fn propose_to(follower: &mut Replica, cid: u64, now_ms: u64) -> Vec<Action> {
    let batch = batch_of(now_ms, vec![req(1, cid + 1)]);
    let (input, _) = propose(cid, &batch);
    follower.receive(now_ms, r(0), input).unwrap();
    let mut actions = drain(follower);
    if let Some(seq) = actions.iter().find_map(|a| match a {
        Action::PersistVote { seq, .. } => Some(*seq),
        _ => None,
    }) {
        follower.report_votes_durable(now_ms, seq);
        actions.extend(drain(follower));
    }
    actions
}

/// Replica `from`'s ACCEPT of replica 0's proposal for `cid` (made at `now_ms`).
fn accept_from(follower: &mut Replica, from: u32, cid: u64, now_ms: u64) -> Vec<Action> {
    let batch = batch_of(now_ms, vec![req(1, cid + 1)]);
    let (_, hash) = propose(cid, &batch);
    let accept = PeerInput::Accept(acc_by(from, vote(cid, hash)));
    follower.receive(now_ms, r(from), accept).unwrap();
    drain(follower)
}

fn delivered(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Deliver(d) => Some(d.cid.0),
            _ => None,
        })
        .collect()
}

#[test]
fn a_replica_whose_log_stalls_holds_the_instance_beyond_its_lag_and_goes_on_once_it_catches_up() {
    let mut follower = durable(Mode::Cft, 3, 1);
    // Nothing reported in the log: it decides LOG_LAG_MAX instances; deciding the last one,
    // it says which instance the log must hold for it to go on.
    let mut last = Vec::new();
    for cid in 0..LOG_LAG_MAX {
        let now = 10 + cid;
        let actions = propose_to(&mut follower, cid, now);
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, Action::Broadcast(PeerMessage::Accept(_)))),
            "instance {cid}: ACCEPT: {actions:?}"
        );
        last = accept_from(&mut follower, 0, cid, now);
        assert_eq!(delivered(&last), [cid]);
    }
    assert_eq!(
        last.last(),
        Some(&Action::AwaitLogDurable {
            cid: ConsensusId(0)
        }),
        "{last:?}"
    );
    // The next one is held: no vote, no decision (the others' ACCEPTs are a quorum).
    let held = LOG_LAG_MAX;
    let now = 10 + held;
    let actions = propose_to(&mut follower, held, now);
    assert_eq!(actions, [], "the instance beyond the lag is held");
    let mut actions = accept_from(&mut follower, 0, held, now);
    actions.extend(accept_from(&mut follower, 2, held, now));
    assert_eq!(actions, [], "nothing decided while the log lags");
    assert_eq!(follower.next_cid(), ConsensusId(held));
    // A request it holds meanwhile neither is forwarded nor suspects the leader: this
    // replica cannot tell a slow leader from its own slow disk.
    follower.receive_request(now, req(7, 1)).unwrap();
    drain(&mut follower);
    for t in 1..=3 {
        follower.tick(now + t * 1001);
        let actions = drain(&mut follower);
        assert!(
            !actions.iter().any(|a| matches!(
                a,
                Action::Broadcast(PeerMessage::Forward(_) | PeerMessage::Stop(_))
            )),
            "no forward, no STOP while the log lags: {actions:?}"
        );
    }
    // Both peers say they are far ahead, further than decision forwarding reaches: it
    // fetches no state while its log lags (the state would wait for the same log).
    for from in [0, 2] {
        follower
            .receive(now, r(from), position(held + 1000, true))
            .unwrap();
    }
    let actions = drain(&mut follower);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::StateTransferNeeded { .. })),
        "no state transfer while the log lags: {actions:?}"
    );
    // The log holds instance 0: the held instance goes on from the PROPOSE and ACCEPTs kept
    // for it and is decided; the next one waits for instance 1 in the log.
    follower.report_log_durable(now + 4000, 0);
    let actions = drain(&mut follower);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::PersistVote { .. })),
        "it votes on the held instance: {actions:?}"
    );
    assert_eq!(delivered(&actions), [held], "{actions:?}");
    assert_eq!(
        actions.last(),
        Some(&Action::AwaitLogDurable {
            cid: ConsensusId(1)
        }),
        "{actions:?}"
    );
    assert_eq!(follower.next_cid(), ConsensusId(held + 1));
}
