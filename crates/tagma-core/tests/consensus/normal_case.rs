//! The normal case (PROPOSE → WRITE → ACCEPT → decide; CFT skips WRITE): what the leader
//! proposes and how it batches, the proposals a follower refuses and why, client admission
//! and flow control, and the bounded buffer of messages for later instances. The exact
//! actions of the basic flows are in the scenario files (`normal-*.txt`).

use tagma_core::{Action, Mode, PeerInput, ProposalFault, Rejection, Replica};
use tagma_wire::{
    ClientId, ConsensusId, Encode, PeerMessage, Regency, RequestKind, RequestSeq, Stop, ViewId,
};

use crate::harness::*;

#[test]
fn bft_leader_proposes_next_request_after_decision() {
    let mut leader = bft(0);
    leader.receive_request(1, req(1, 1)).unwrap();
    let (_, hash, batch) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    assert_eq!(
        complete_on_leader(&mut leader, 0, hash),
        vec![accept(0, hash), deliver(0, hash, batch)]
    );
    leader.receive_request(2, req(1, 2)).unwrap();
    let (_, _, batch1) = take_proposal(&drain(&mut leader), 1, Mode::Bft);
    assert_eq!(ids(&batch1), vec![(1, 2)]);
}

#[test]
fn leader_batch_seeds_are_deterministic_and_timestamps_monotonic() {
    let run = || {
        let mut leader = bft(0);
        let mut seeds = Vec::new();
        let mut timestamps = Vec::new();
        // The clock goes backwards at cid 1: the timestamp must not.
        for (cid, now) in [(0u64, 100u64), (1, 50), (2, 200)] {
            leader.receive_request(now, req(1, cid + 1)).unwrap();
            let (_, hash, batch) = take_proposal(&drain(&mut leader), cid, Mode::Bft);
            seeds.push(batch.seed);
            timestamps.push(batch.timestamp_ms);
            complete_on_leader(&mut leader, cid, hash);
        }
        (seeds, timestamps)
    };
    let (seeds, timestamps) = run();
    assert_eq!(run().0, seeds);
    assert_eq!(timestamps, vec![100, 100, 200]);
    assert!(seeds[0] != seeds[1] && seeds[1] != seeds[2]);
}

/// `input` from the leader (replica 0) is refused as an invalid proposal of `cid` with
/// `fault`, and the follower suspects the leader at once.
fn assert_invalid(follower: &mut Replica, cid: u64, input: PeerInput, fault: ProposalFault) {
    assert_eq!(
        follower.receive(1, r(0), input),
        Err(Rejection::InvalidProposal {
            from: r(0),
            cid: ConsensusId(cid),
            fault: fault.clone(),
        })
    );
    // No WRITE, no ACCEPT: the fault is recorded and the leader suspected at once (STOP for
    // the next regency; the follower has no pending request to attach).
    let stop = Action::Broadcast(PeerMessage::Stop(Stop {
        regency: Regency(1),
        requests: vec![],
    }));
    assert_eq!(drain(follower), vec![stop]);
    assert_eq!(
        follower.suspected_leader_fault(),
        Some(&(ConsensusId(cid), fault))
    );
}

#[test]
fn replayed_request_in_a_proposal_is_invalid() {
    let mut follower = bft(1);
    decide_on_follower(&mut follower, 0, &batch_of(1, vec![req(1, 1)]));
    let (input, hash) = propose(1, &batch_of(2, vec![req(2, 1), req(1, 1)]));
    assert_invalid(
        &mut follower,
        1,
        input,
        ProposalFault::Replayed {
            client: ClientId(1),
            seq: RequestSeq(1),
        },
    );
    // Even a quorum of votes for it does not make this replica vote or decide.
    for from in [0, 2, 3] {
        follower
            .receive(1, r(from), PeerInput::Write(vote(1, hash)))
            .unwrap();
        follower
            .receive(1, r(from), PeerInput::Accept(acc_by(from, vote(1, hash))))
            .unwrap();
    }
    assert_eq!(drain(&mut follower), vec![]);
    assert_eq!(follower.next_cid(), ConsensusId(1));
}

#[test]
fn out_of_sequence_request_is_invalid() {
    let mut follower = bft(1);
    let (input, _) = propose(0, &batch_of(1, vec![req(1, 2)]));
    assert_invalid(
        &mut follower,
        0,
        input,
        ProposalFault::OutOfSequence {
            client: ClientId(1),
            seq: RequestSeq(2),
            expected: RequestSeq(1),
        },
    );
}

#[test]
fn oversized_batches_are_invalid() {
    let mut follower = bft(1);
    let too_many: Vec<_> = (1..=17).map(|client| req(client, 1)).collect();
    let (input, _) = propose(0, &batch_of(1, too_many));
    assert_invalid(
        &mut follower,
        0,
        input,
        ProposalFault::TooManyRequests { count: 17 },
    );

    let big: Vec<_> = (1..=16).map(|client| req_sized(client, 1, 1024)).collect();
    let batch = batch_of(1, big);
    let bytes = batch.to_bytes().len();
    assert!(bytes > 16 * 1024);
    let mut p = params(Mode::Bft, 4, 1);
    p.batch_bytes_max = 16 * 1024;
    let mut small = replica(p);
    let (input, _) = propose(0, &batch);
    assert_invalid(&mut small, 0, input, ProposalFault::TooManyBytes { bytes });
    // A batch with no request that does not advance the agreed time.
    let mut follower = bft(1);
    decide_on_follower(&mut follower, 0, &batch_of(5, vec![req(1, 1)]));
    let (input, _) = propose(1, &batch_of(5, vec![]));
    assert_invalid(&mut follower, 1, input, ProposalFault::Empty);
}

#[test]
fn undecodable_propose_from_the_leader_is_invalid() {
    let mut follower = bft(1);
    let input = PeerInput::UndecodablePropose {
        cid: ConsensusId(0),
        epoch: E0,
    };
    assert_invalid(&mut follower, 0, input.clone(), ProposalFault::Undecodable);
    // A different PROPOSE after it is an equivocation; the same again is ignored.
    assert_eq!(follower.receive(1, r(0), input), Ok(()));
    let (valid, _) = propose(0, &batch_of(1, vec![req(1, 1)]));
    assert_eq!(
        follower.receive(1, r(0), valid),
        Err(Rejection::Equivocation {
            from: r(0),
            cid: ConsensusId(0)
        })
    );
}

#[test]
fn timestamp_must_not_regress() {
    let mut follower = bft(1);
    decide_on_follower(&mut follower, 0, &batch_of(100, vec![req(1, 1)]));
    let (input, _) = propose(1, &batch_of(99, vec![req(1, 2)]));
    assert_invalid(
        &mut follower,
        1,
        input,
        ProposalFault::TimestampRegressed {
            timestamp_ms: 99,
            previous_ms: 100,
        },
    );
}

#[test]
fn bad_requests_in_a_proposal_are_invalid() {
    let mut unordered = req(1, 1);
    unordered.request.kind = RequestKind::Unordered;
    let mut wrong_view = req(1, 1);
    wrong_view.request.view = ViewId(1);
    let cases = [
        (
            unordered,
            ProposalFault::UnorderedRequest {
                client: ClientId(1),
                seq: RequestSeq(1),
            },
        ),
        (
            wrong_view,
            ProposalFault::WrongView {
                client: ClientId(1),
                seq: RequestSeq(1),
            },
        ),
        (
            req_sized(1, 1, 1025),
            ProposalFault::RequestTooLarge {
                client: ClientId(1),
                seq: RequestSeq(1),
                bytes: 1025,
            },
        ),
    ];
    for (request, fault) in cases {
        let mut follower = bft(1);
        let (input, _) = propose(0, &batch_of(1, vec![request]));
        assert_invalid(&mut follower, 0, input, fault);
    }
}

#[test]
fn non_member_messages_are_rejected() {
    let mut follower = bft(1);
    let (input, hash) = propose(0, &batch_of(1, vec![req(1, 1)]));
    for input in [
        input,
        PeerInput::Write(vote(0, hash)),
        PeerInput::Accept(acc(vote(0, hash))),
        PeerInput::Forward {
            request: req(1, 1),
            authentic: true,
        },
    ] {
        assert_eq!(
            follower.receive(1, r(9), input),
            Err(Rejection::NotAMember { from: r(9) })
        );
    }
    assert_eq!(drain(&mut follower), vec![]);
    assert_eq!(follower.clients().pending_total(), 0);
}

#[test]
fn retransmitted_delivered_request_gets_its_reply_resent() {
    let mut leader = bft(0);
    leader.receive_request(1, req(1, 1)).unwrap();
    let (_, hash, _) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    complete_on_leader(&mut leader, 0, hash);
    leader.receive_request(2, req(1, 1)).unwrap();
    assert_eq!(
        drain(&mut leader),
        vec![Action::ResendReply {
            client: ClientId(1),
            seq: RequestSeq(1)
        }]
    );
    // A late forward of it is silently ignored.
    leader
        .receive(
            2,
            r(1),
            PeerInput::Forward {
                request: req(1, 1),
                authentic: true,
            },
        )
        .unwrap();
    assert_eq!(drain(&mut leader), vec![]);
}

#[test]
fn forwarded_requests_are_proposed_if_authentic() {
    let mut leader = bft(0);
    assert_eq!(
        leader.receive(
            1,
            r(2),
            PeerInput::Forward {
                request: req(1, 1),
                authentic: false,
            }
        ),
        Err(Rejection::Unauthentic)
    );
    assert_eq!(drain(&mut leader), vec![]);
    leader
        .receive(
            1,
            r(2),
            PeerInput::Forward {
                request: req(1, 1),
                authentic: true,
            },
        )
        .unwrap();
    let (_, _, batch) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 1)]);
}

#[test]
fn client_request_admission_and_flow_control() {
    let mut p = params(Mode::Bft, 4, 1);
    p.client_pending_max = 2;
    p.pending_requests_max = 3;
    let mut follower = replica(p);
    let mut unordered = req(1, 1);
    unordered.request.kind = RequestKind::Unordered;
    assert_eq!(
        follower.receive_request(0, unordered),
        Err(Rejection::NotOrdered)
    );
    let mut wrong_view = req(1, 1);
    wrong_view.request.view = ViewId(7);
    assert_eq!(
        follower.receive_request(0, wrong_view),
        Err(Rejection::WrongView { view: ViewId(7) })
    );
    assert_eq!(
        follower.receive_request(0, req_sized(1, 1, 1025)),
        Err(Rejection::RequestTooLarge {
            bytes: 1025,
            max: 1024
        })
    );
    follower.receive_request(0, req(1, 1)).unwrap();
    assert_eq!(
        follower.receive_request(0, req(1, 1)),
        Err(Rejection::Duplicate {
            client: ClientId(1),
            seq: RequestSeq(1)
        })
    );
    follower.receive_request(0, req(1, 2)).unwrap();
    assert_eq!(
        follower.receive_request(0, req(1, 3)),
        Err(Rejection::SequenceTooFarAhead {
            client: ClientId(1),
            seq: RequestSeq(3)
        })
    );
    follower.receive_request(0, req(2, 1)).unwrap();
    assert_eq!(
        follower.receive_request(0, req(3, 1)),
        Err(Rejection::Overloaded)
    );
    assert_eq!(follower.stats().pending_requests, 3);
    assert_eq!(drain(&mut follower), vec![]);
    // A decision frees room.
    decide_on_follower(&mut follower, 0, &batch_of(1, vec![req(1, 1), req(2, 1)]));
    assert_eq!(follower.stats().pending_requests, 1);
    follower.receive_request(0, req(1, 3)).unwrap();
    follower.receive_request(0, req(3, 1)).unwrap();
}

#[test]
fn future_buffer_is_bounded() {
    let mut p = params(Mode::Bft, 4, 1);
    p.future_messages_max = 6; // two per other member
    let mut follower = replica(p);
    let h = tagma_crypto::digest(b"x");
    let w = |cid| PeerInput::Write(vote(cid, h));
    follower.receive(0, r(0), w(1)).unwrap();
    follower.receive(0, r(0), w(2)).unwrap();
    // One sender cannot take more than its share.
    assert_eq!(
        follower.receive(0, r(0), w(3)),
        Err(Rejection::FutureBufferFull)
    );
    for from in [2, 3] {
        follower.receive(0, r(from), w(1)).unwrap();
        follower.receive(0, r(from), w(2)).unwrap();
    }
    assert_eq!(follower.stats().future_messages_buffered, 6);
    assert_eq!(
        follower.receive(0, r(2), w(1)),
        Err(Rejection::FutureBufferFull)
    );
    // Too far ahead is refused whatever the room.
    let mut follower = replica(params(Mode::Bft, 4, 1));
    assert_eq!(
        follower.receive(0, r(0), w(1001)),
        Err(Rejection::FutureBufferFull)
    );
    follower.receive(0, r(0), w(1000)).unwrap();
}

#[test]
fn stale_messages_are_rejected() {
    let mut follower = bft(1);
    let batch = batch_of(1, vec![req(1, 1)]);
    decide_on_follower(&mut follower, 0, &batch);
    let (input, hash) = propose(0, &batch);
    for input in [
        input,
        PeerInput::Write(vote(0, hash)),
        PeerInput::Accept(acc(vote(0, hash))),
    ] {
        assert_eq!(
            follower.receive(1, r(3), input),
            Err(Rejection::Stale {
                cid: ConsensusId(0)
            })
        );
    }
    assert_eq!(drain(&mut follower), vec![]);
}

#[test]
fn proposer_respects_batch_size_max_and_round_robin() {
    let mut p = params(Mode::Bft, 4, 0);
    p.batch_size_max = 3;
    let mut leader = replica(p);
    leader.receive_request(0, req(1, 1)).unwrap();
    let (_, mut hash, batch) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 1)]);
    for seq in 2..=5 {
        leader.receive_request(0, req(1, seq)).unwrap();
    }
    for seq in 1..=2 {
        leader.receive_request(0, req(2, seq)).unwrap();
    }
    leader.receive_request(0, req(3, 1)).unwrap();
    // Client 4's requests wait behind a gap.
    leader.receive_request(0, req(4, 2)).unwrap();
    assert_eq!(drain(&mut leader), vec![]);
    let expected = [
        vec![(2, 1), (3, 1), (1, 2)],
        vec![(2, 2), (1, 3), (1, 4)],
        vec![(1, 5)],
    ];
    for (i, want) in expected.iter().enumerate() {
        let cid = i as u64;
        let actions = complete_on_leader(&mut leader, cid, hash);
        let (_, next_hash, next) = take_proposal(&actions[2..], cid + 1, Mode::Bft);
        assert_eq!(&ids(&next), want, "batch of cid {}", cid + 1);
        hash = next_hash;
    }
    let actions = complete_on_leader(&mut leader, 3, hash);
    assert_eq!(actions.len(), 2, "nothing left to propose: {actions:?}");
    assert_eq!(leader.stats().pending_requests, 1);
}

#[test]
fn proposer_respects_batch_bytes_max() {
    let mut p = params(Mode::Bft, 4, 0);
    p.batch_bytes_max = 2600; // room for two 1 KiB requests, not three
    let mut leader = replica(p);
    leader.receive_request(0, req_sized(1, 1, 1024)).unwrap();
    let (bytes, hash, _) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    assert!(bytes.len() <= 2600);
    for client in 2..=4 {
        leader
            .receive_request(0, req_sized(client, 1, 1024))
            .unwrap();
    }
    let actions = complete_on_leader(&mut leader, 0, hash);
    let (bytes, hash, batch) = take_proposal(&actions[2..], 1, Mode::Bft);
    assert_eq!(ids(&batch), vec![(2, 1), (3, 1)]);
    assert!(bytes.len() <= 2600);
    let actions = complete_on_leader(&mut leader, 1, hash);
    let (_, _, batch) = take_proposal(&actions[2..], 2, Mode::Bft);
    assert_eq!(ids(&batch), vec![(4, 1)]);
}
