//! The answer budget: a peer that repeats requests whose answers cost this replica more than
//! the request (position queries and announcements, decision and log requests, state queries,
//! chunk requests) gets at most its allowance per period; the excess is refused and counted,
//! and the next period answers again.

use tagma_core::transfer::TransferInput;
use tagma_core::{Action, Allowance, AnswerBudget, Input, Mode, PeerInput, Replica, ReplicaParams};
use tagma_wire::{ConsensusId, PeerMessage, ReplicaId};

use crate::harness::*;

const PERIOD_MS: u64 = 1_000;
const UNLIMITED: Allowance = Allowance {
    messages: u64::MAX,
    bytes: u64::MAX,
};

fn with_budget(p: ReplicaParams, budget: AnswerBudget) -> ReplicaParams {
    ReplicaParams {
        answer_budget: budget,
        ..p
    }
}

fn budget(positions: Allowance, decisions: Allowance, state: Allowance) -> AnswerBudget {
    AnswerBudget {
        period_ms: PERIOD_MS,
        positions,
        decisions,
        state,
    }
}

/// The messages sent to `to` among `actions`.
fn sent_to(actions: &[Action], to: ReplicaId) -> Vec<PeerMessage> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send { to: t, msg } if *t == to => Some(msg.clone()),
            _ => None,
        })
        .collect()
}

/// A BFT leader (replica 0 of 4) that decided instances `0..count`.
fn leader_that_decided(p: ReplicaParams, count: u64) -> Replica {
    let mut leader = replica(p);
    for cid in 0..count {
        leader.receive_request(cid, req(9, cid + 1)).unwrap();
        let (_, hash, _) = take_proposal(&drain(&mut leader), cid, Mode::Bft);
        complete_on_leader(&mut leader, cid, hash);
    }
    leader
}

#[test]
fn repeated_position_queries_get_the_batch_resent_only_within_the_allowance() {
    let positions = Allowance {
        messages: 16,
        bytes: u64::MAX,
    };
    let p = with_budget(
        params(Mode::Bft, 4, 0),
        budget(positions, UNLIMITED, UNLIMITED),
    );
    let mut leader = replica(p);
    leader.receive_request(0, req(1, 1)).unwrap();
    take_proposal(&drain(&mut leader), 0, Mode::Bft);
    // Peer 3 asks where the leader is and announces instance 0, a hundred times: each pair
    // would have the leader send its position, its PROPOSE and its WRITE again.
    for _ in 0..100 {
        let _ = leader.receive(10, r(3), position(0, false));
        let _ = leader.receive(10, r(3), position(0, true));
    }
    let sent = sent_to(&drain(&mut leader), r(3));
    let proposes = sent
        .iter()
        .filter(|m| matches!(m, PeerMessage::Propose(_)))
        .count();
    assert_eq!(sent.len(), 16, "the allowance, and no more");
    assert_eq!(
        proposes, 5,
        "a position answered and a resend (PROPOSE, WRITE) fit 5 times"
    );
    assert!(leader.stats().answers_refused >= 100 - 6);
    // The next period answers again: a peer that restarted still gets what it missed.
    let _ = leader.receive(10 + PERIOD_MS, r(3), position(0, false));
    let _ = leader.receive(10 + PERIOD_MS, r(3), position(0, true));
    let sent = sent_to(&drain(&mut leader), r(3));
    assert!(
        sent.iter().any(|m| matches!(m, PeerMessage::Propose(_))),
        "resent in the next period"
    );
}

#[test]
fn repeated_decision_requests_are_answered_within_the_allowance_and_again_next_period() {
    let decisions = Allowance {
        messages: 100,
        bytes: u64::MAX,
    };
    let p = with_budget(
        params(Mode::Bft, 4, 0),
        budget(UNLIMITED, decisions, UNLIMITED),
    );
    let mut leader = leader_that_decided(p, 64);
    drain(&mut leader);
    let ask = PeerInput::DecisionRequest {
        cid: ConsensusId(0),
    };
    for _ in 0..10 {
        leader.receive(100, r(3), ask.clone()).unwrap();
    }
    let sent = sent_to(&drain(&mut leader), r(3));
    // The first run whole (64), the second cut short where the allowance ends.
    assert_eq!(sent.len(), 100);
    assert!(sent.iter().all(|m| matches!(m, PeerMessage::Decision(_))));
    assert_eq!(leader.stats().answers_refused, 9);
    // The same peer (or another one) catching up in the next period gets its run.
    leader.receive(100 + PERIOD_MS, r(3), ask.clone()).unwrap();
    assert_eq!(sent_to(&drain(&mut leader), r(3)).len(), 64);
    // Every peer has an allowance of its own.
    leader.receive(100, r(2), ask).unwrap();
    assert_eq!(sent_to(&drain(&mut leader), r(2)).len(), 64);
}

#[test]
fn a_log_read_reserves_what_is_left_and_what_it_did_not_use_comes_back() {
    let decisions = Allowance {
        messages: 100,
        bytes: 10_000,
    };
    let p = ReplicaParams {
        decisions_kept: 8,
        ..with_budget(
            params(Mode::Bft, 4, 0),
            budget(UNLIMITED, decisions, UNLIMITED),
        )
    };
    let mut leader = leader_that_decided(p, 20);
    drain(&mut leader);
    let ask = PeerInput::DecisionRequest {
        cid: ConsensusId(0),
    };
    let read = |count: u32, bytes_max: u64| Action::ReadLog {
        to: r(3),
        from: ConsensusId(0),
        count,
        bytes_max,
    };
    // Instance 0 is no longer in memory: the runtime reads it, within the bytes left.
    leader.receive(100, r(3), ask.clone()).unwrap();
    assert_eq!(drain(&mut leader), vec![read(64, 10_000)]);
    // Nothing left: refused.
    leader.receive(100, r(3), ask.clone()).unwrap();
    assert_eq!(drain(&mut leader), vec![]);
    assert_eq!(leader.stats().answers_refused, 1);
    // The runtime sent 4 entries of 1,000 bytes: the rest comes back.
    let unused = Allowance {
        messages: 60,
        bytes: 6_000,
    };
    leader
        .handle(100, Input::LogServed { to: r(3), unused })
        .unwrap();
    leader.receive(100, r(3), ask).unwrap();
    assert_eq!(drain(&mut leader), vec![read(64, 6_000)]);
}

#[test]
fn repeated_state_queries_and_chunk_requests_are_answered_within_the_allowance() {
    let state = Allowance {
        messages: 4,
        bytes: u64::MAX,
    };
    let p = with_budget(
        durable_params(Mode::Bft, 4, 0, true),
        budget(UNLIMITED, UNLIMITED, state),
    );
    let mut server = replica(p);
    server.report_checkpoint(0, ckp_info(5, 7));
    let chunk = TransferInput::ChunkRequest {
        cid: ConsensusId(5),
        offset: 0,
        len: 16,
    };
    for _ in 0..10 {
        server
            .receive(100, r(3), PeerInput::Transfer(chunk.clone()))
            .unwrap();
    }
    let reads = drain(&mut server)
        .into_iter()
        .filter(|a| matches!(a, Action::ReadChunk { .. }))
        .count();
    assert_eq!(reads, 4);
    let query = TransferInput::Query {
        next: ConsensusId(0),
    };
    for _ in 0..10 {
        server
            .receive(100, r(2), PeerInput::Transfer(query.clone()))
            .unwrap();
    }
    assert_eq!(sent_to(&drain(&mut server), r(2)).len(), 4);
    assert_eq!(server.stats().answers_refused, 12);
}
