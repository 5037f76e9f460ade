//! Durable votes: the votes a durable replica reads back after a crash bind it (it writes and
//! accepts no other value, reports them in a leader change, proposes the value again as
//! leader) and keep it in the regency it had installed. What a replica writes and when it
//! flushes, and the leader's wait for its log, are in the scenario files (`durable-*.txt`,
//! `vote-flush-*.txt`, `log-*.txt`).

use tagma_core::{Action, Mode, PeerInput, Replica};
use tagma_wire::{
    Batch, ClientId, Collect, ConsensusId, DecidedInstance, DecisionProof, Encode, Epoch,
    PeerMessage, Regency, RequestSeq, Stop,
};

use crate::harness::*;

/// A durable BFT replica `me` (no state vote) restarted with nothing decided and `votes`
/// read back from its disk, past its start-up synchronisation.
fn restarted_with_votes(me: u32, votes: Vec<Collect>) -> Replica {
    let mut replica = restart(
        durable_params(Mode::Bft, 4, me, false),
        None,
        vec![],
        votes,
        0,
    );
    finish_startup(&mut replica, 1);
    replica
}

#[test]
fn a_vote_restored_after_a_crash_binds_the_replica_to_its_value() {
    let v = batch_of(3, vec![req(1, 1)]);
    let w = batch_of(4, vec![req(2, 1)]);
    let hash_v = tagma_crypto::digest(&v.to_bytes());
    // Replica 1 saw a write quorum for v in epoch 0 (and may have accepted it).
    let restored = Collect {
        replica: r(1),
        regency: Regency(0),
        cid: ConsensusId(0),
        write_quorum: Some((E0, hash_v)),
        write_set: vec![(E0, v.to_bytes())],
    };
    // A follower votes for no other value in that epoch, and for the same one as usual.
    let mut follower = restarted_with_votes(1, vec![restored.clone()]);
    let (input_w, _) = propose(0, &w);
    follower.receive(3, r(0), input_w).unwrap();
    assert_eq!(drain(&mut follower), vec![], "no WRITE for another value");
    let mut follower = restarted_with_votes(1, vec![restored.clone()]);
    let (input_v, _) = propose(0, &v);
    follower.receive(3, r(0), input_v).unwrap();
    assert_eq!(
        sent(&drain_durable(&mut follower, 3)),
        vec![write(0, hash_v)]
    );

    // A leader proposes the restored value again as soon as it orders, whatever requests
    // are waiting.
    let mut leader = restart(
        durable_params(Mode::Bft, 4, 0, false),
        None,
        vec![],
        vec![restored.clone()],
        0,
    );
    leader.receive_request(0, req(2, 1)).unwrap();
    let started = finish_startup(&mut leader, 1);
    let (bytes, hash, _) = take_proposal(&flushed(&mut leader, 1, started), 0, Mode::Bft);
    assert_eq!((bytes, hash), (v.to_bytes(), hash_v));

    // Votes for instances already decided are ignored.
    let mut later = restart(
        durable_params(Mode::Bft, 4, 1, false),
        Some(resumed(0, 3, &[], vec![])),
        vec![],
        vec![restored.clone()],
        0,
    );
    finish_startup(&mut later, 1);
    let (input, hash) = propose(1, &w);
    later.receive(3, r(0), input).unwrap();
    assert_eq!(sent(&drain_durable(&mut later, 3)), vec![write(1, hash)]);

    // In a leader change the vote is reported: the collect of the STOPDATA claims a write
    // quorum for the value in its epoch, with the value.
    let mut follower = restarted_with_votes(2, vec![restored]);
    let stop = Stop {
        regency: Regency(1),
        requests: vec![],
    };
    for from in [0, 1, 3] {
        let _ = follower.receive(5, r(from), PeerInput::Stop(stop.clone()));
    }
    // The regency is installed, and recorded on disk before this replica says anything in
    // it: the STOPDATA waits for that record.
    assert_eq!(follower.regency(), Regency(1));
    let actions = drain(&mut follower);
    let recorded = persisted(&actions);
    assert_eq!(recorded.len(), 1, "{actions:?}");
    assert_eq!(recorded[0].2, Regency(1));
    assert!(
        !actions.iter().any(|a| matches!(
            a,
            Action::Send {
                msg: PeerMessage::StopData(_),
                ..
            }
        )),
        "no STOPDATA before the regency is durable: {actions:?}"
    );
    assert!(
        actions.contains(&write_votes(true, 0)),
        "the record is flushed at once: {actions:?}"
    );
    follower.report_votes_durable(6, recorded[0].0);
    let stopdata = drain(&mut follower)
        .into_iter()
        .find_map(|a| match a {
            Action::Send {
                msg: PeerMessage::StopData(d),
                ..
            } => Some(d),
            _ => None,
        })
        .expect("STOPDATA sent to the new leader");
    let collect = stopdata.collect.collect;
    assert_eq!(collect.write_quorum, Some((E0, hash_v)));
    assert_eq!(collect.write_set, vec![(E0, v.to_bytes())]);
}

/// Epochs are compared across restarts (a restored vote of epoch 5 must not look newer than
/// a decision made after the restart): a replica goes on in the regency it had installed,
/// and, having forgotten what that regency's synchronisation bound, takes no PROPOSE for the
/// instance in progress until a decision of that regency arrives or a new leader change.
#[test]
fn a_restarted_replica_goes_on_in_the_regency_it_had_installed() {
    let v = batch_of(3, vec![req(1, 1)]);
    let before_crash = Collect {
        replica: r(1),
        regency: Regency(5),
        cid: ConsensusId(0),
        write_quorum: None,
        write_set: vec![],
    };
    let mut follower = restarted_with_votes(1, vec![before_crash.clone()]);
    assert_eq!(follower.regency(), Regency(5));
    // Regency 0's leader is ignored; regency 5's leader (replica 1, itself) does not propose.
    let (input, _) = propose(0, &v);
    let _ = follower.receive(3, r(0), input);
    assert!(sent(&drain(&mut follower)).is_empty());
    follower.receive_request(4, req(2, 1)).unwrap();
    assert!(
        !proposes(&drain(&mut follower)),
        "no proposal in a regency whose SYNC it forgot"
    );
    // A replica that restarts in regency 0 (no leader change before the crash) goes on at
    // once.
    let mut leader = restarted_with_votes(0, vec![]);
    leader.receive_request(1, req(1, 1)).unwrap();
    assert!(proposes(&drain(&mut leader)));
    // So does one whose last recovered decision was made in the regency it restores: that
    // regency's synchronisation was over (it bound an instance already decided here).
    let decided = DecidedInstance {
        cid: ConsensusId(0),
        batch: v.to_bytes(),
        proof: DecisionProof {
            epoch: Epoch(5),
            accepts: vec![],
        },
    };
    let mut leader = restart(
        durable_params(Mode::Bft, 4, 1, false),
        Some(resumed(0, 3, &[], vec![decided])),
        vec![],
        vec![Collect {
            cid: ConsensusId(1),
            ..before_crash.clone()
        }],
        0,
    );
    assert_eq!(leader.regency(), Regency(5));
    finish_startup(&mut leader, 1);
    leader.receive_request(4, req(2, 1)).unwrap();
    let proposal = drain(&mut leader).into_iter().find_map(|a| match a {
        Action::Broadcast(PeerMessage::Propose(p)) => Some((p.cid, p.epoch)),
        _ => None,
    });
    assert_eq!(proposal, Some((ConsensusId(1), Epoch(5))));
}

/// A value accepted before a crash binds the replica in later epochs too, until a SYNC
/// covers its instance: after a restart its log may end before instances it accepted, so a
/// leader change can synchronise an earlier instance and then propose afresh for this one
/// (in CFT, when both accepters of a replied value crash and one comes back with its log two
/// instances behind, a leader change may cover only the first).
#[test]
fn a_restored_accept_binds_later_epochs_until_a_sync_covers_its_instance() {
    let u = batch_of(3, vec![req(1, 1)]);
    let w = batch_of(3, vec![req(2, 1)]);
    let hash_u = tagma_crypto::digest(&u.to_bytes());
    // Instance 0 decided in regency 1 (restored, so no leader change is awaited); instance
    // 1 accepted with u in epoch 0, before regency 1.
    let restarted = |me: u32| {
        let decided = DecidedInstance {
            cid: ConsensusId(0),
            batch: batch_of(1, vec![req(9, 1)]).to_bytes(),
            proof: DecisionProof {
                epoch: Epoch(1),
                accepts: vec![],
            },
        };
        let resume = resumed(0, 1, &[(ClientId(9), RequestSeq(1))], vec![decided]);
        let votes = vec![
            Collect {
                replica: r(me),
                regency: Regency(0),
                cid: ConsensusId(1),
                write_quorum: Some((E0, hash_u)),
                write_set: vec![(E0, u.to_bytes())],
            },
            Collect {
                replica: r(me),
                regency: Regency(1),
                cid: ConsensusId(1),
                write_quorum: None,
                write_set: vec![],
            },
        ];
        let replica = restart(
            durable_params(Mode::Cft, 3, me, true),
            Some(resume),
            vec![],
            votes,
            0,
        );
        assert_eq!(replica.regency(), Regency(1));
        replica
    };
    let propose_in_1 = |batch: &Batch| PeerInput::Propose {
        cid: ConsensusId(1),
        epoch: Epoch(1),
        batch: prepared(&batch.to_bytes()),
    };
    // A follower takes no other value in epoch 1...
    let mut follower = restarted(2);
    finish_startup(&mut follower, 1);
    follower.receive(5, r(1), propose_in_1(&w)).unwrap();
    let actions = drain(&mut follower);
    assert!(
        persisted(&actions).is_empty() && sent(&actions).is_empty(),
        "{actions:?}"
    );
    // ...but votes for u.
    let mut follower = restarted(2);
    finish_startup(&mut follower, 1);
    follower.receive(5, r(1), propose_in_1(&u)).unwrap();
    let actions = drain(&mut follower);
    let recorded = persisted(&actions);
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        flushes(&actions),
        1,
        "the ACCEPT waits for the flush: {actions:?}"
    );
    assert!(sent(&actions).is_empty(), "{actions:?}");
    follower.report_votes_durable(6, recorded[0].0);
    let voted = sent(&drain(&mut follower));
    assert!(
        matches!(&voted[..], [Action::Broadcast(PeerMessage::Accept(a))] if a.vote.hash == hash_u && a.vote.epoch == Epoch(1)),
        "{voted:?}"
    );
    // As leader of regency 1 it proposes u again as soon as it orders, not the requests
    // waiting.
    let mut leader = restarted(1);
    leader.receive_request(0, req(2, 1)).unwrap();
    let proposal = finish_startup(&mut leader, 1)
        .into_iter()
        .find_map(|a| match a {
            Action::Broadcast(PeerMessage::Propose(p)) => Some((p.cid, p.epoch, p.batch)),
            _ => None,
        });
    assert_eq!(proposal, Some((ConsensusId(1), Epoch(1), u.to_bytes())));
}
