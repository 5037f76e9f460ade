//! Leader change (STOP, STOPDATA, SYNC): what a replica makes of a SYNC that is invalid or
//! proposes something unreadable. A regency adopted without its SYNC is in the scenario
//! `leader-change-adopted-regency.txt`; whole clusters replacing crashed or faulty leaders, in
//! `clusters`; the regency a restarted replica goes on in, in `durable_votes`.

use std::cell::Cell;

use bytes::Bytes;
use tagma_core::{Action, PeerInput, Rejection};
use tagma_wire::{
    Batch, Collect, ConsensusId, Decode, Epoch, PeerMessage, Regency, SignedCollect, Stop, Sync,
    Vote, collect_signing_bytes,
};

use crate::harness::*;

#[test]
fn a_sync_for_the_highest_regency_does_not_panic() {
    let mut follower = bft(0);
    let sync = tagma_wire::Sync {
        regency: Regency(u32::MAX),
        last_decided: None,
        collects: vec![],
        proposal: Bytes::new(),
    };
    // The leader of regency u32::MAX in a 4-member view is replica 3.
    let result = follower.receive(
        1,
        r(3),
        PeerInput::from_message(PeerMessage::Sync(sync), |_| true).expect("a consensus message"),
    );
    assert!(
        matches!(result, Err(Rejection::InvalidSync { .. })),
        "{result:?}"
    );
}

/// Replica `from`'s signed collect for regency `regency`: nothing written or accepted in
/// instance `cid`.
fn empty_collect(from: u32, regency: Regency, cid: u64) -> SignedCollect {
    let collect = Collect {
        replica: r(from),
        regency,
        cid: ConsensusId(cid),
        write_quorum: None,
        write_set: vec![],
    };
    let signature = key(from).sign(&collect_signing_bytes(&collect));
    SignedCollect { collect, signature }
}

/// A SYNC whose fresh proposal does not decode is the new leader's fault, whatever the
/// network stage would say of requests it cannot even read: the stage
/// (`PeerInput::from_message`) judges such a proposal unauthentic without asking the
/// authenticator, and the replica suspects the new leader (STOP for the next regency) and
/// never votes for what it sent.
#[test]
fn a_sync_whose_fresh_proposal_does_not_decode_makes_the_new_leader_suspected() {
    let mut follower = bft(2);
    let stop = Stop {
        regency: Regency(1),
        requests: vec![],
    };
    // f+1 STOPs: it joins the change, and with its own STOP n − f install regency 1.
    for from in [0, 3] {
        follower
            .receive(1, r(from), PeerInput::Stop(stop.clone()))
            .unwrap();
    }
    assert_eq!(follower.regency(), Regency(1));
    assert_eq!(follower.leader(), r(1));
    assert!(
        drain(&mut follower).iter().any(|a| matches!(
            a,
            Action::Send {
                to,
                msg: PeerMessage::StopData(_)
            } if *to == r(1)
        )),
        "the follower waits for the SYNC of regency 1"
    );

    // The new leader's SYNC: n − f valid collects, none bound to a value (so its fresh
    // proposal would be the value of instance 0), and a proposal that is not a batch.
    let garbage = Bytes::from_static(b"not a batch");
    assert!(Batch::decode(&garbage).is_err());
    let sync = Sync {
        regency: Regency(1),
        last_decided: None,
        collects: [0, 1, 2]
            .map(|from| empty_collect(from, Regency(1), 0))
            .to_vec(),
        proposal: garbage.clone(),
    };
    let asked = Cell::new(false);
    let input = PeerInput::from_message(PeerMessage::Sync(sync), |_| {
        asked.set(true);
        true
    })
    .expect("a consensus message");
    assert!(
        matches!(
            input,
            PeerInput::Sync {
                proposal_authentic: false,
                ..
            }
        ),
        "{input:?}"
    );
    assert!(
        !asked.get(),
        "nothing to authenticate in bytes that do not decode"
    );

    follower.receive(2, r(1), input).unwrap();
    assert_eq!(
        drain(&mut follower),
        vec![Action::Broadcast(PeerMessage::Stop(Stop {
            regency: Regency(2),
            requests: vec![],
        }))],
        "the new leader is suspected at once, and nothing is voted for"
    );
    // Votes of the others for the undecodable value in the new epoch make it vote for nothing.
    let hash = tagma_crypto::digest(&garbage);
    let vote1 = Vote {
        cid: ConsensusId(0),
        epoch: Epoch(1),
        hash,
    };
    for from in [0, 1, 3] {
        let _ = follower.receive(3, r(from), PeerInput::Write(vote1));
        let _ = follower.receive(3, r(from), PeerInput::Accept(acc_by(from, vote1)));
    }
    let actions = drain(&mut follower);
    assert!(
        !actions.iter().any(|a| matches!(
            a,
            Action::Broadcast(PeerMessage::Write(_) | PeerMessage::Accept(_)) | Action::Deliver(_)
        )),
        "{actions:?}"
    );
    assert_eq!(follower.next_cid(), ConsensusId(0));
}
