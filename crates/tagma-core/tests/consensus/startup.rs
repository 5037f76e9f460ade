//! Start-up synchronisation: a replica started from its disk (`Start::Recovered`) refuses
//! votes until it knows its peers' positions (n − f after a deadline) and has caught up to the
//! highest one a correct replica vouches for; then it announces its position, and peers on its
//! instance resend what it refused. The state vote that may end it is in `state_vote`.

use tagma_core::{Action, Mode, PeerInput, Rejection, Replica, Resume};
use tagma_wire::{ClientId, ConsensusId, PeerMessage, Regency, RequestSeq, Stop};

use crate::harness::*;

/// Durable replica `me` of `n` in `mode` (no state vote) restarted at `now_ms` from a disk that
/// held `resume` (nothing decided: `None`).
fn restarted(mode: Mode, n: u32, me: u32, resume: Option<Resume>, now_ms: u64) -> Replica {
    restart(
        durable_params(mode, n, me, false),
        resume,
        vec![],
        vec![],
        now_ms,
    )
}

/// A replica that ordered instances 0..=2, then resumed from its log: it orders instance 3
/// next, answers retransmissions of delivered requests from the reply cache (never orders
/// them again), forwards its logged decisions, and logs what it decides next.
#[test]
fn a_resumed_replica_continues_after_its_durable_state() {
    // Decide 0..=2 on a leader, keeping what its durable log would hold.
    let mut before = bft(0);
    let mut logged = Vec::new();
    for cid in 0..3u64 {
        before.receive_request(cid, req(1, cid + 1)).unwrap();
        let (_, hash, _) = take_proposal(&drain_durable(&mut before, cid), cid, Mode::Bft);
        let done = complete_on_leader(&mut before, cid, hash);
        assert!(
            done.iter()
                .any(|a| matches!(a, Action::Deliver(d) if d.cid.0 == cid))
        );
        let decided = before.decided_instance(ConsensusId(cid)).unwrap();
        assert_eq!(decided.proof.accepts.len(), 3, "the quorum's signatures");
        logged.push(decided);
    }

    let resume = resumed(2, 2, &[(ClientId(1), RequestSeq(3))], logged.clone());
    let mut after = restarted(Mode::Bft, 4, 0, Some(resume), 0);
    assert_eq!(after.next_cid(), ConsensusId(3));
    assert_eq!(finish_startup(&mut after, 5), vec![]);
    // A retransmission of a request ordered before the crash: a cached reply, not an order.
    after.receive_request(10, req(1, 3)).unwrap();
    assert_eq!(
        drain(&mut after),
        vec![Action::ResendReply {
            client: ClientId(1),
            seq: RequestSeq(3)
        }]
    );
    // The next request of that client is ordered in instance 3.
    after.receive_request(11, req(1, 4)).unwrap();
    let (_, hash, batch) = take_proposal(&drain_durable(&mut after, 11), 3, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 4)]);
    let actions = complete_on_leader(&mut after, 3, hash);
    let seq = persisted(&actions)
        .last()
        .expect("the write quorum is persisted")
        .0;
    after.report_votes_durable(12, seq);
    // Polled as they come (`drain` strips the proof each decision carries for the log).
    let decided = std::iter::from_fn(|| after.poll_action())
        .find_map(|a| match a {
            Action::Deliver(d) => Some(d),
            _ => None,
        })
        .expect("instance 3 is decided once its ACCEPT is out");
    assert_eq!(decided.cid, ConsensusId(3));
    assert_eq!(
        Some(decided.logged),
        after.decided_instance(ConsensusId(3)),
        "delivered with its proof, for the log"
    );
    // A lagging peer asking for a logged decision gets it, with its proof.
    after
        .receive(
            20,
            r(2),
            PeerInput::DecisionRequest {
                cid: ConsensusId(1),
            },
        )
        .unwrap();
    let forwarded: Vec<_> = drain(&mut after)
        .into_iter()
        .filter_map(|a| match a {
            Action::Send {
                to,
                msg: PeerMessage::Decision(d),
            } => Some((to, d)),
            _ => None,
        })
        .collect();
    assert!(
        forwarded
            .iter()
            .any(|(to, d)| *to == r(2) && d.cid == ConsensusId(1) && *d == logged[1]),
        "{forwarded:?}"
    );
}

/// Start-up synchronisation: a restarted leader orders nothing until it knows every peer's
/// position; then it proposes the next instance.
#[test]
fn a_recovering_leader_waits_for_every_position_before_ordering() {
    let log = decided_run(3);
    let resume = resumed(2, 2, &[(ClientId(9), RequestSeq(3))], log);
    let mut r0 = restarted(Mode::Bft, 4, 0, Some(resume), 100);
    assert!(r0.is_starting_up());
    assert_eq!(
        drain(&mut r0),
        vec![Action::Broadcast(PeerMessage::Position {
            next: ConsensusId(3),
            reply: false
        })]
    );
    r0.receive_request(101, req(1, 1)).unwrap();
    assert!(!proposes(&drain(&mut r0)), "no proposal while recovering");
    for from in [1, 2] {
        r0.receive(102, r(from), position(3, false)).unwrap();
    }
    let actions = drain(&mut r0);
    assert!(!proposes(&actions), "replica 3 is not heard yet");
    // Each position that asked is answered with this replica's own.
    assert!(actions.contains(&Action::Send {
        to: r(1),
        msg: PeerMessage::Position {
            next: ConsensusId(3),
            reply: true
        }
    }));
    r0.receive(103, r(3), position(3, true)).unwrap();
    assert!(!r0.is_starting_up());
    let mut actions = drain_durable(&mut r0, 103);
    // Done: it asks and announces its position (peers on instance 3 resend what it
    // refused), then proposes.
    for reply in [false, true] {
        assert_eq!(
            actions.remove(0),
            Action::Broadcast(PeerMessage::Position {
                next: ConsensusId(3),
                reply
            })
        );
    }
    let (_, _, batch) = take_proposal(&actions, 3, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 1)]);
    // A peer that reports the same instance later (it ended its own synchronisation) gets
    // the PROPOSE and the leader's WRITE again.
    r0.receive(104, r(1), position(3, true)).unwrap();
    let resent = drain(&mut r0);
    assert_eq!(resent.len(), 2, "{resent:?}");
    assert!(
        matches!(&resent[0], Action::Send { to, msg: PeerMessage::Propose(p) } if *to == r(1) && p.cid == ConsensusId(3))
    );
    assert!(
        matches!(&resent[1], Action::Send { to, msg: PeerMessage::Write(v) } if *to == r(1) && v.cid == ConsensusId(3))
    );
    // Once per instance: a repeated position gets nothing more...
    r0.receive(105, r(1), position(3, true)).unwrap();
    assert_eq!(drain(&mut r0), vec![]);
    // ...but replica 1 was still synchronising (that position answered the leader's query)
    // and refused them: its end-of-recovery query and announcement get them once more.
    r0.receive(106, r(1), position(3, false)).unwrap();
    assert_eq!(
        drain(&mut r0),
        vec![Action::Send {
            to: r(1),
            msg: PeerMessage::Position {
                next: ConsensusId(3),
                reply: true
            }
        }]
    );
    r0.receive(106, r(1), position(3, true)).unwrap();
    assert_eq!(drain(&mut r0), resent);
}

/// The highest durable instance wins: a restarted leader behind a peer fetches the decision
/// it misses (with its proof) before proposing, instead of deciding that instance anew.
#[test]
fn a_recovering_leader_catches_up_to_the_highest_position_first() {
    let log = decided_run(3);
    let resume = resumed(1, 1, &[(ClientId(9), RequestSeq(2))], log[..2].to_vec());
    let mut r0 = restarted(Mode::Bft, 4, 0, Some(resume), 100);
    drain(&mut r0);
    r0.receive_request(101, req(1, 1)).unwrap();
    r0.receive(102, r(1), position(3, false)).unwrap();
    let asked = drain(&mut r0);
    assert!(
        asked.contains(&Action::Send {
            to: r(1),
            msg: PeerMessage::DecisionRequest {
                cid: ConsensusId(2)
            }
        }),
        "{asked:?}"
    );
    for from in [2, 3] {
        r0.receive(103, r(from), position(2, true)).unwrap();
    }
    assert!(r0.is_starting_up(), "still behind replica 1");
    assert!(!proposes(&drain(&mut r0)));
    r0.receive(104, r(1), PeerInput::Decision(log[2].clone()))
        .unwrap();
    let actions = drain(&mut r0);
    assert!(!r0.is_starting_up());
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Deliver(d) if d.cid == ConsensusId(2)))
    );
    // A durable leader proposes once the instance it caught up with is in its log.
    assert!(
        actions.contains(&Action::AwaitLogDurable {
            cid: ConsensusId(2)
        }),
        "{actions:?}"
    );
    assert!(!proposes(&actions));
    r0.report_log_durable(105, 2);
    let proposal = drain(&mut r0)
        .iter()
        .find_map(|a| match a {
            Action::Broadcast(PeerMessage::Propose(p)) => Some(p.cid),
            _ => None,
        })
        .expect("proposes once caught up");
    assert_eq!(proposal, ConsensusId(3));
}

/// A peer that never answers does not block recovery forever: after the deadline, n − f
/// positions (this replica's own included) are enough.
#[test]
fn recovery_settles_for_n_minus_f_positions_after_the_deadline() {
    let mut r0 = restarted(Mode::Bft, 4, 0, None, 0);
    drain(&mut r0);
    r0.receive_request(1, req(1, 1)).unwrap();
    for from in [1, 2] {
        r0.receive(2, r(from), position(0, true)).unwrap();
    }
    assert!(r0.is_starting_up());
    // Retransmissions go to the silent peer only.
    r0.tick(600);
    assert_eq!(
        drain(&mut r0),
        vec![Action::Send {
            to: r(3),
            msg: PeerMessage::Position {
                next: ConsensusId(0),
                reply: false
            }
        }]
    );
    let deadline = r0.next_timeout_ms().unwrap().max(5 * 1000);
    r0.tick(deadline);
    assert!(!r0.is_starting_up());
    assert!(proposes(&drain(&mut r0)));
}

/// A recovering replica lost the votes it cast before its crash: it casts none and reports
/// no collect until recovery ends; in CFT (quorums of f+1) it waits for every peer, however
/// long.
#[test]
fn a_recovering_replica_does_not_vote_and_settles_for_n_minus_f_after_the_deadline() {
    let mut r1 = restarted(Mode::Cft, 3, 1, None, 0);
    drain(&mut r1);
    let batch = batch_of(1, vec![req(1, 1)]);
    let (input, _) = propose(0, &batch);
    assert_eq!(
        r1.receive(1, r(0), input).unwrap_err(),
        Rejection::StartingUp
    );
    let stop = Stop {
        regency: Regency(1),
        requests: vec![],
    };
    assert_eq!(
        r1.receive(1, r(2), PeerInput::Stop(stop)).unwrap_err(),
        Rejection::StartingUp
    );
    assert!(drain(&mut r1).is_empty(), "no vote, no STOP, no STOPDATA");
    r1.receive(2, r(0), position(0, true)).unwrap();
    // Before the deadline every peer is awaited; after it, n − f positions (its own and
    // replica 0's) are enough, in CFT too: the votes persisted by the replicas that accepted
    // an instance hold it for a leader change.
    r1.tick(100);
    assert!(r1.is_starting_up());
    r1.tick(60_000);
    assert!(!r1.is_starting_up());
    // It announces that it is done, so that peers on its instance resend what it refused.
    assert!(
        drain(&mut r1).contains(&Action::Broadcast(PeerMessage::Position {
            next: ConsensusId(0),
            reply: true,
        }))
    );
}
