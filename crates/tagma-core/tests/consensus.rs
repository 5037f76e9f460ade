//! Mod-SMaRt: exact actions per input in the normal case, rejections, and whole in-memory
//! clusters — including crashed leaders replaced by the synchronization phase, driven by the
//! core's own timers in virtual time.
//!
//! Authentication is the network stage's job: requests carry an empty MAC vector and batches
//! are marked authentic (or not) by hand.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use tagma_core::view::sign_change;
use tagma_core::{
    Action, Decision, Mode, PeerInput, PreparedBatch, ProposalFault, Quorums, Rejection, Replica,
    ReplicaParams,
};
use tagma_wire::{
    Accept, Batch, ClientId, Collect, ConsensusId, Decode, Digest, Encode, Epoch, PeerMessage,
    Regency, ReplicaId, Request, RequestAuth, RequestEnvelope, RequestKind, RequestSeq, Signature,
    Stop, View, ViewChange, ViewId, ViewMember, ViewOp, Vote,
};

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

const E0: Epoch = Epoch(0);

fn r(id: u32) -> ReplicaId {
    ReplicaId(id)
}

fn params(mode: Mode, n: u32, me: u32) -> ReplicaParams {
    ReplicaParams {
        me: r(me),
        members: (0..n).map(r).collect(),
        quorums: Quorums::new(
            mode,
            n as usize,
            match mode {
                Mode::Bft => (n as usize - 1) / 3,
                Mode::Cft => (n as usize - 1) / 2,
            },
        ),
        view: ViewId(0),
        batch_size_max: 16,
        batch_bytes_max: 64 << 10,
        request_bytes_max: 1024,
        client_pending_max: 100,
        pending_requests_max: 10_000,
        clients_max: 1000,
        future_messages_max: 1000,
        request_timeout_ms: 1000,
        seed: u64::from(me),
        member_keys: (0..n).map(|i| key(i).public()).collect(),
        decisions_kept: 64,
        state_transfer: false,
        state_vote: true,
        chunk_bytes: 1 << 20,
        state_bytes_max: 1 << 30,
        member_addrs: (0..n).map(addr).collect(),
        admin_key: Some(admin().public()),
    }
}

fn addr(id: u32) -> String {
    format!("127.0.0.1:{}", 7000 + id)
}

/// The administrator, who signs view changes.
fn admin() -> tagma_crypto::IdentityKey {
    tagma_crypto::IdentityKey::from_seed([0xad; 32])
}

fn key(id: u32) -> tagma_crypto::IdentityKey {
    tagma_crypto::IdentityKey::from_seed([id as u8 + 1; 32])
}

fn replica(p: ReplicaParams) -> Replica {
    let k = key(p.me.0);
    Replica::new(p, k)
}

/// An ACCEPT as replica `from` signs it (BFT replicas check the signatures a decision
/// rests on).
fn acc_by(from: u32, vote: Vote) -> Accept {
    Accept {
        vote,
        signature: tagma_core::proof::sign_accept(&key(from), &vote),
    }
}

/// An ACCEPT with a zero signature: for expected actions (see `unsigned`) and for inputs
/// that are rejected before any signature matters.
fn acc(vote: Vote) -> Accept {
    Accept {
        vote,
        signature: Signature([0; 64]),
    }
}

/// Replaces signatures in `action` by zeros, so expected actions need no keys.
fn unsigned(action: Action) -> Action {
    match action {
        Action::Broadcast(PeerMessage::Accept(a)) => {
            Action::Broadcast(PeerMessage::Accept(acc(a.vote)))
        }
        other => other,
    }
}

fn bft(me: u32) -> Replica {
    replica(params(Mode::Bft, 4, me))
}

fn cft(me: u32) -> Replica {
    replica(params(Mode::Cft, 3, me))
}

fn req(client: u64, seq: u64) -> RequestEnvelope {
    req_sized(client, seq, 8)
}

fn req_sized(client: u64, seq: u64, payload_bytes: usize) -> RequestEnvelope {
    RequestEnvelope {
        request: Request {
            client: ClientId(client),
            seq: RequestSeq(seq),
            kind: RequestKind::Ordered,
            view: ViewId(0),
            payload: Bytes::from(vec![seq as u8; payload_bytes]),
        },
        auth: RequestAuth::Macs(vec![]),
    }
}

/// What the network stage hands the core for a received PROPOSE.
fn verified(bytes: &Bytes) -> PreparedBatch {
    PreparedBatch {
        bytes: bytes.clone(),
        hash: tagma_crypto::digest(bytes),
        batch: Batch::decode(bytes).expect("a leader's batch decodes"),
        authentic: true,
    }
}

fn batch_of(timestamp_ms: u64, requests: Vec<RequestEnvelope>) -> Batch {
    Batch {
        timestamp_ms,
        seed: 0,
        requests,
    }
}

/// A PROPOSE input for `batch`, as the network stage would deliver it.
fn propose(cid: u64, batch: &Batch) -> (PeerInput, Digest) {
    let bytes = batch.to_bytes();
    let verified = verified(&bytes);
    let hash = verified.hash;
    (
        PeerInput::Propose {
            cid: ConsensusId(cid),
            epoch: E0,
            batch: verified,
        },
        hash,
    )
}

fn vote(cid: u64, hash: Digest) -> Vote {
    Vote {
        cid: ConsensusId(cid),
        epoch: E0,
        hash,
    }
}

fn drain(replica: &mut Replica) -> Vec<Action> {
    std::iter::from_fn(|| replica.poll_action())
        .map(unsigned)
        .collect()
}

fn write(cid: u64, hash: Digest) -> Action {
    Action::Broadcast(PeerMessage::Write(vote(cid, hash)))
}

fn accept(cid: u64, hash: Digest) -> Action {
    Action::Broadcast(PeerMessage::Accept(acc(vote(cid, hash))))
}

fn deliver(cid: u64, hash: Digest, batch: Batch) -> Action {
    Action::Deliver(Decision {
        cid: ConsensusId(cid),
        epoch: E0,
        hash,
        batch,
        logged: None,
    })
}

/// The PROPOSE a leader broadcast as the first of `actions`; checks that the rest is exactly
/// its own vote (`Write` in BFT, `Accept` in CFT).
fn take_proposal(actions: &[Action], cid: u64, mode: Mode) -> (Bytes, Digest, Batch) {
    let actions = &sent(actions);
    assert_eq!(actions.len(), 2, "PROPOSE then own vote: {actions:?}");
    let Action::Broadcast(PeerMessage::Propose(p)) = &actions[0] else {
        panic!("expected a PROPOSE, got {:?}", actions[0]);
    };
    assert_eq!((p.cid, p.epoch), (ConsensusId(cid), E0));
    let v = verified(&p.batch);
    let own_vote = match mode {
        Mode::Bft => write(cid, v.hash),
        Mode::Cft => accept(cid, v.hash),
    };
    assert_eq!(actions[1], own_vote);
    (p.batch.clone(), v.hash, v.batch)
}

/// `actions` without the votes persisted (durable replicas).
fn sent(actions: &[Action]) -> Vec<Action> {
    actions
        .iter()
        .filter(|a| !matches!(a, Action::PersistVote { .. }))
        .cloned()
        .collect()
}

fn ids(batch: &Batch) -> Vec<(u64, u64)> {
    batch
        .requests
        .iter()
        .map(|e| (e.request.client.0, e.request.seq.0))
        .collect()
}

/// Completes instance `cid` on a BFT replica holding the proposal: WRITEs and ACCEPTs from
/// replicas 1 and 2 (the leader 0 is assumed to be the replica itself or to have voted).
fn complete_on_leader(leader: &mut Replica, cid: u64, hash: Digest) -> Vec<Action> {
    for from in [1, 2] {
        leader
            .handle_peer(0, r(from), PeerInput::Write(vote(cid, hash)))
            .unwrap();
    }
    for from in [1, 2] {
        leader
            .handle_peer(0, r(from), PeerInput::Accept(acc_by(from, vote(cid, hash))))
            .unwrap();
    }
    drain(leader)
}

// ---------------------------------------------------------------------------------------------
// Exact actions, one input at a time
// ---------------------------------------------------------------------------------------------

#[test]
fn bft_leader_proposes_votes_and_decides() {
    let mut leader = bft(0);
    assert_eq!(leader.leader(), r(0));
    leader.handle_client_request(5, req(1, 1)).unwrap();
    let actions = drain(&mut leader);
    let (_, hash, batch) = take_proposal(&actions, 0, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 1)]);
    assert_eq!(batch.timestamp_ms, 5);
    // While cid 0 runs, a new request waits.
    leader.handle_client_request(6, req(2, 1)).unwrap();
    assert_eq!(drain(&mut leader), vec![]);
    assert_eq!(leader.stats().pending_requests, 2);

    leader
        .handle_peer(7, r(1), PeerInput::Write(vote(0, hash)))
        .unwrap();
    assert_eq!(drain(&mut leader), vec![]);
    leader
        .handle_peer(7, r(2), PeerInput::Write(vote(0, hash)))
        .unwrap();
    assert_eq!(drain(&mut leader), vec![accept(0, hash)]);
    leader
        .handle_peer(7, r(3), PeerInput::Write(vote(0, hash)))
        .unwrap();
    assert_eq!(drain(&mut leader), vec![]);
    leader
        .handle_peer(8, r(1), PeerInput::Accept(acc_by(1, vote(0, hash))))
        .unwrap();
    assert_eq!(drain(&mut leader), vec![]);
    leader
        .handle_peer(8, r(3), PeerInput::Accept(acc_by(3, vote(0, hash))))
        .unwrap();
    // Decided; the waiting request is proposed at once as cid 1.
    let actions = drain(&mut leader);
    assert_eq!(actions[0], deliver(0, hash, batch.clone()));
    let (_, _, batch1) = take_proposal(&actions[1..], 1, Mode::Bft);
    assert_eq!(ids(&batch1), vec![(2, 1)]);
    assert_eq!(batch1.timestamp_ms, 8);
    assert_eq!(leader.next_cid(), ConsensusId(1));
    let stats = leader.stats();
    assert_eq!(
        (
            stats.decided_instances,
            stats.decided_requests,
            stats.proposals_sent
        ),
        (1, 1, 2)
    );
    assert_eq!(stats.pending_requests, 1);
}

#[test]
fn bft_leader_proposes_next_request_after_decision() {
    let mut leader = bft(0);
    leader.handle_client_request(1, req(1, 1)).unwrap();
    let (_, hash, batch) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    assert_eq!(
        complete_on_leader(&mut leader, 0, hash),
        vec![accept(0, hash), deliver(0, hash, batch)]
    );
    leader.handle_client_request(2, req(1, 2)).unwrap();
    let (_, _, batch1) = take_proposal(&drain(&mut leader), 1, Mode::Bft);
    assert_eq!(ids(&batch1), vec![(1, 2)]);
}

#[test]
fn a_durable_leader_proposes_only_once_its_previous_instance_is_on_disk() {
    let mut p = params(Mode::Bft, 4, 0);
    p.state_transfer = true;
    let mut leader = replica(p);
    leader.handle_client_request(1, req(1, 1)).unwrap();
    let (_, hash, _) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    leader.handle_client_request(2, req(2, 1)).unwrap();
    // Its own ACCEPT waits for its vote on disk (see the next test).
    let mut actions = complete_on_leader(&mut leader, 0, hash);
    leader.note_votes_durable(2);
    actions.extend(drain(&mut leader));
    assert!(
        matches!(actions.last(), Some(Action::Deliver(d)) if d.cid == ConsensusId(0)),
        "cid 0 is decided: {actions:?}"
    );
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Broadcast(PeerMessage::Propose(_)))),
        "no proposal before cid 0 is on the leader's disk: {actions:?}"
    );
    assert_eq!(leader.awaits_durable(), Some(ConsensusId(0)));
    // Requests arriving meanwhile join the waiting batch.
    leader.handle_client_request(3, req(3, 1)).unwrap();
    assert_eq!(drain(&mut leader), vec![]);
    leader.note_durable(ConsensusId(0));
    let (_, _, batch1) = take_proposal(&drain(&mut leader), 1, Mode::Bft);
    assert_eq!(ids(&batch1), vec![(2, 1), (3, 1)]);
    assert_eq!(leader.awaits_durable(), None, "cid 1 runs");
    // A stale report changes nothing.
    leader.note_durable(ConsensusId(0));
    assert_eq!(drain(&mut leader), vec![]);

    // Followers never wait for their disk to vote.
    let mut p = params(Mode::Bft, 4, 1);
    p.state_transfer = true;
    let mut follower = replica(p);
    follower.handle_client_request(1, req(1, 1)).unwrap();
    assert_eq!(follower.awaits_durable(), None);
}

fn durable(mode: Mode, n: u32, me: u32) -> Replica {
    let mut p = params(mode, n, me);
    p.state_transfer = true;
    replica(p)
}

/// The votes persisted by `actions`: (seq, cid, regency, write quorum claimed, values
/// written).
type Persisted = (
    u64,
    u64,
    Regency,
    Option<(Epoch, Digest)>,
    Vec<(Epoch, Bytes)>,
);

fn persisted(actions: &[Action]) -> Vec<Persisted> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::PersistVote { seq, votes, .. } => Some((
                *seq,
                votes.cid.0,
                votes.regency,
                votes.write_quorum,
                votes.write_set.clone(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn a_durable_replica_accepts_only_once_the_accepted_value_is_on_its_disk() {
    // BFT: the value written is persisted, and the WRITE leaves at once; the write quorum
    // is persisted too, and the ACCEPT leaves only when the runtime reports it durable.
    let mut follower = durable(Mode::Bft, 4, 1);
    let batch = batch_of(3, vec![req(1, 1)]);
    let (input, hash) = propose(0, &batch);
    follower.handle_peer(3, r(0), input).unwrap();
    let actions = drain(&mut follower);
    let written = vec![(E0, batch.to_bytes())];
    let r0 = Regency(0);
    assert_eq!(persisted(&actions), vec![(1, 0, r0, None, written.clone())]);
    assert_eq!(actions[1], write(0, hash), "{actions:?}");
    assert_eq!(follower.awaits_vote(), None, "a WRITE waits for nothing");
    follower
        .handle_peer(3, r(0), PeerInput::Write(vote(0, hash)))
        .unwrap();
    follower
        .handle_peer(3, r(2), PeerInput::Write(vote(0, hash)))
        .unwrap();
    let actions = drain(&mut follower);
    assert_eq!(
        persisted(&actions),
        vec![(2, 0, r0, Some((E0, hash)), written.clone())],
        "{actions:?}"
    );
    assert_eq!(
        actions.len(),
        1,
        "no ACCEPT before the vote is durable: {actions:?}"
    );
    assert_eq!(follower.awaits_vote(), Some(2));
    follower.note_votes_durable(1);
    assert_eq!(
        drain(&mut follower),
        vec![],
        "only the WRITE's votes are durable"
    );
    // More WRITEs neither persist again nor send the ACCEPT.
    follower
        .handle_peer(3, r(3), PeerInput::Write(vote(0, hash)))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![]);
    follower.note_votes_durable(2);
    assert_eq!(drain(&mut follower), vec![accept(0, hash)]);
    assert_eq!(follower.awaits_vote(), None);
    follower.note_votes_durable(2);
    assert_eq!(
        drain(&mut follower),
        vec![],
        "a repeated report changes nothing"
    );

    // CFT: the PROPOSE is the quorum step; its ACCEPT waits the same way.
    let mut follower = durable(Mode::Cft, 3, 1);
    let (input, hash) = propose(0, &batch);
    follower.handle_peer(3, r(0), input).unwrap();
    let actions = drain(&mut follower);
    assert_eq!(
        persisted(&actions),
        vec![(1, 0, r0, Some((E0, hash)), written)]
    );
    assert_eq!(actions.len(), 1, "{actions:?}");
    follower.note_votes_durable(1);
    assert_eq!(drain(&mut follower), vec![accept(0, hash)]);
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
    let mut follower = durable(Mode::Bft, 4, 1);
    follower.restore_votes([restored.clone()]);
    let (input_w, _) = propose(0, &w);
    follower.handle_peer(3, r(0), input_w).unwrap();
    assert_eq!(drain(&mut follower), vec![], "no WRITE for another value");
    let mut follower = durable(Mode::Bft, 4, 1);
    follower.restore_votes([restored.clone()]);
    let (input_v, _) = propose(0, &v);
    follower.handle_peer(3, r(0), input_v).unwrap();
    assert_eq!(sent(&drain(&mut follower)), vec![write(0, hash_v)]);

    // A leader proposes the restored value again, whatever requests are waiting.
    let mut leader = durable(Mode::Bft, 4, 0);
    leader.restore_votes([restored.clone()]);
    leader.handle_client_request(1, req(2, 1)).unwrap();
    let (bytes, hash, _) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    assert_eq!((bytes, hash), (v.to_bytes(), hash_v));

    // Votes for instances already decided are ignored.
    let mut later = durable(Mode::Bft, 4, 1);
    later.resume(ConsensusId(0), 3, &[], []);
    later.restore_votes([restored.clone()]);
    let (input, hash) = propose(1, &w);
    later.handle_peer(3, r(0), input).unwrap();
    assert_eq!(sent(&drain(&mut later)), vec![write(1, hash)]);

    // In a leader change the vote is reported: the collect of the STOPDATA claims a write
    // quorum for the value in its epoch, with the value.
    let mut follower = durable(Mode::Bft, 4, 2);
    follower.restore_votes([restored]);
    let stop = Stop {
        regency: Regency(1),
        requests: vec![],
    };
    for from in [0, 1, 3] {
        let _ = follower.handle_peer(5, r(from), PeerInput::Stop(stop.clone()));
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
    assert_eq!(follower.awaits_vote(), Some(recorded[0].0));
    follower.note_votes_durable(recorded[0].0);
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
    let mut follower = durable(Mode::Bft, 4, 1);
    follower.restore_votes([before_crash.clone()]);
    assert_eq!(follower.regency(), Regency(5));
    drain(&mut follower);
    // Regency 0's leader is ignored; regency 5's leader (replica 1, itself) does not propose.
    let (input, _) = propose(0, &v);
    let _ = follower.handle_peer(3, r(0), input);
    assert!(sent(&drain(&mut follower)).is_empty());
    follower.handle_client_request(4, req(2, 1)).unwrap();
    assert!(
        !proposes(&drain(&mut follower)),
        "no proposal in a regency whose SYNC it forgot"
    );
    // A replica that restarts in regency 0 (no leader change before the crash) goes on at
    // once.
    let mut leader = durable(Mode::Bft, 4, 0);
    leader.restore_votes([]);
    leader.handle_client_request(1, req(1, 1)).unwrap();
    assert!(proposes(&drain(&mut leader)));
    // So does one whose last recovered decision was made in the regency it restores: that
    // regency's synchronisation was over (it bound an instance already decided here).
    let mut leader = durable(Mode::Bft, 4, 1);
    let decided = tagma_wire::DecidedInstance {
        cid: ConsensusId(0),
        batch: v.to_bytes(),
        proof: tagma_wire::DecisionProof {
            epoch: Epoch(5),
            accepts: vec![],
        },
    };
    leader.resume(ConsensusId(0), 3, &[], [decided]);
    leader.restore_votes([Collect {
        cid: ConsensusId(1),
        ..before_crash.clone()
    }]);
    assert_eq!(leader.regency(), Regency(5));
    drain(&mut leader);
    leader.handle_client_request(4, req(2, 1)).unwrap();
    let proposal = drain(&mut leader).into_iter().find_map(|a| match a {
        Action::Broadcast(PeerMessage::Propose(p)) => Some((p.cid, p.epoch)),
        _ => None,
    });
    assert_eq!(proposal, Some((ConsensusId(1), Epoch(5))));
}

/// A value accepted before a crash binds the replica in later epochs too, until a SYNC
/// covers its instance: after a restart its log may end before instances it accepted, so a
/// leader change can synchronise an earlier instance and then propose afresh for this one
/// (found in review, CFT: both accepters of a replied value crashed, one came back with its
/// log two instances behind, and the leader change covered only the first).
#[test]
fn a_restored_accept_binds_later_epochs_until_a_sync_covers_its_instance() {
    let u = batch_of(3, vec![req(1, 1)]);
    let w = batch_of(3, vec![req(2, 1)]);
    let hash_u = tagma_crypto::digest(&u.to_bytes());
    // Instance 0 decided in regency 1 (restored, so no leader change is awaited); instance
    // 1 accepted with u in epoch 0, before regency 1.
    let restart = |me: u32| {
        let mut replica = durable(Mode::Cft, 3, me);
        let decided = tagma_wire::DecidedInstance {
            cid: ConsensusId(0),
            batch: batch_of(1, vec![req(9, 1)]).to_bytes(),
            proof: tagma_wire::DecisionProof {
                epoch: Epoch(1),
                accepts: vec![],
            },
        };
        replica.resume(
            ConsensusId(0),
            1,
            &[(ClientId(9), RequestSeq(1))],
            [decided],
        );
        replica.restore_votes([
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
        ]);
        assert_eq!(replica.regency(), Regency(1));
        drain(&mut replica);
        replica
    };
    let propose_in_1 = |batch: &Batch| PeerInput::Propose {
        cid: ConsensusId(1),
        epoch: Epoch(1),
        batch: verified(&batch.to_bytes()),
    };
    // A follower takes no other value in epoch 1...
    let mut follower = restart(2);
    follower.handle_peer(5, r(1), propose_in_1(&w)).unwrap();
    let actions = drain(&mut follower);
    assert!(
        persisted(&actions).is_empty() && sent(&actions).is_empty(),
        "{actions:?}"
    );
    // ...but votes for u.
    let mut follower = restart(2);
    follower.handle_peer(5, r(1), propose_in_1(&u)).unwrap();
    assert_eq!(persisted(&drain(&mut follower)).len(), 1);
    follower.note_votes_durable(1);
    let voted = sent(&drain(&mut follower));
    assert!(
        matches!(&voted[..], [Action::Broadcast(PeerMessage::Accept(a))] if a.vote.hash == hash_u && a.vote.epoch == Epoch(1)),
        "{voted:?}"
    );
    // As leader of regency 1 it proposes u again, not the requests waiting.
    let mut leader = restart(1);
    leader.handle_client_request(6, req(2, 1)).unwrap();
    let proposal = drain(&mut leader).into_iter().find_map(|a| match a {
        Action::Broadcast(PeerMessage::Propose(p)) => Some((p.cid, p.epoch, p.batch)),
        _ => None,
    });
    assert_eq!(proposal, Some((ConsensusId(1), Epoch(1), u.to_bytes())));
}

#[test]
fn bft_follower_writes_accepts_and_delivers() {
    let mut follower = bft(1);
    let batch = batch_of(3, vec![req(1, 1), req(2, 1)]);
    let (input, hash) = propose(0, &batch);
    follower.handle_peer(3, r(0), input).unwrap();
    assert_eq!(drain(&mut follower), vec![write(0, hash)]);
    follower
        .handle_peer(3, r(0), PeerInput::Write(vote(0, hash)))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![]);
    follower
        .handle_peer(3, r(2), PeerInput::Write(vote(0, hash)))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![accept(0, hash)]);
    follower
        .handle_peer(3, r(0), PeerInput::Accept(acc_by(0, vote(0, hash))))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![]);
    follower
        .handle_peer(3, r(3), PeerInput::Accept(acc_by(3, vote(0, hash))))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![deliver(0, hash, batch)]);
    assert_eq!(follower.next_cid(), ConsensusId(1));
    // A follower never proposes.
    follower.handle_client_request(4, req(3, 1)).unwrap();
    assert_eq!(drain(&mut follower), vec![]);
}

#[test]
fn votes_before_the_propose_are_counted_when_it_arrives() {
    let mut follower = bft(1);
    let batch = batch_of(3, vec![req(1, 1)]);
    let (input, hash) = propose(0, &batch);
    let other = tagma_crypto::digest(b"another value");
    for from in [0, 2] {
        follower
            .handle_peer(1, r(from), PeerInput::Write(vote(0, hash)))
            .unwrap();
    }
    // Votes for another hash are kept but never count for ours.
    follower
        .handle_peer(1, r(3), PeerInput::Write(vote(0, other)))
        .unwrap();
    follower
        .handle_peer(1, r(3), PeerInput::Accept(acc_by(3, vote(0, other))))
        .unwrap();
    follower
        .handle_peer(1, r(0), PeerInput::Accept(acc_by(0, vote(0, hash))))
        .unwrap();
    // A second vote from the same sender does not count twice.
    follower
        .handle_peer(1, r(0), PeerInput::Accept(acc_by(0, vote(0, hash))))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![]);
    follower.handle_peer(2, r(0), input).unwrap();
    assert_eq!(drain(&mut follower), vec![write(0, hash), accept(0, hash)]);
    follower
        .handle_peer(2, r(2), PeerInput::Accept(acc_by(2, vote(0, hash))))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![deliver(0, hash, batch)]);
}

#[test]
fn write_quorum_for_another_value_sends_no_accept() {
    let mut follower = bft(1);
    let (input, hash) = propose(0, &batch_of(3, vec![req(1, 1)]));
    let other = tagma_crypto::digest(b"another value");
    follower.handle_peer(1, r(0), input).unwrap();
    assert_eq!(drain(&mut follower), vec![write(0, hash)]);
    for from in [0, 2, 3] {
        follower
            .handle_peer(1, r(from), PeerInput::Write(vote(0, other)))
            .unwrap();
        follower
            .handle_peer(1, r(from), PeerInput::Accept(acc_by(from, vote(0, other))))
            .unwrap();
    }
    assert_eq!(drain(&mut follower), vec![]);
    assert_eq!(follower.next_cid(), ConsensusId(0));
}

#[test]
fn cft_follower_accepts_without_write_and_decides_on_a_majority() {
    let mut follower = cft(1);
    let batch = batch_of(3, vec![req(1, 1)]);
    let (input, hash) = propose(0, &batch);
    follower.handle_peer(3, r(0), input).unwrap();
    assert_eq!(drain(&mut follower), vec![accept(0, hash)]);
    // WRITEs mean nothing in CFT.
    follower
        .handle_peer(3, r(2), PeerInput::Write(vote(0, hash)))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![]);
    follower
        .handle_peer(3, r(0), PeerInput::Accept(acc_by(0, vote(0, hash))))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![deliver(0, hash, batch)]);
}

#[test]
fn cft_leader_decides_with_one_accept() {
    let mut leader = cft(0);
    leader.handle_client_request(1, req(1, 1)).unwrap();
    let (_, hash, batch) = take_proposal(&drain(&mut leader), 0, Mode::Cft);
    leader
        .handle_peer(2, r(2), PeerInput::Accept(acc_by(2, vote(0, hash))))
        .unwrap();
    assert_eq!(drain(&mut leader), vec![deliver(0, hash, batch)]);
}

#[test]
fn leader_batch_seeds_are_deterministic_and_timestamps_monotonic() {
    let run = || {
        let mut leader = bft(0);
        let mut seeds = Vec::new();
        let mut timestamps = Vec::new();
        // The clock goes backwards at cid 1: the timestamp must not.
        for (cid, now) in [(0u64, 100u64), (1, 50), (2, 200)] {
            leader.handle_client_request(now, req(1, cid + 1)).unwrap();
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

// ---------------------------------------------------------------------------------------------
// Rejections
// ---------------------------------------------------------------------------------------------

#[test]
fn propose_from_a_non_leader_is_rejected() {
    let mut follower = bft(1);
    let (input, _) = propose(0, &batch_of(1, vec![req(1, 1)]));
    assert_eq!(
        follower.handle_peer(1, r(2), input.clone()),
        Err(Rejection::NotFromLeader { from: r(2) })
    );
    assert_eq!(drain(&mut follower), vec![]);
    // The real leader's copy is still taken.
    follower.handle_peer(1, r(0), input).unwrap();
    assert_eq!(drain(&mut follower).len(), 1);
}

#[test]
fn equivocation_keeps_the_first_proposal() {
    let mut follower = bft(1);
    let first = batch_of(1, vec![req(1, 1)]);
    let (input, hash) = propose(0, &first);
    let (second, _) = propose(0, &batch_of(1, vec![req(2, 1)]));
    follower.handle_peer(1, r(0), input.clone()).unwrap();
    assert_eq!(drain(&mut follower), vec![write(0, hash)]);
    assert_eq!(
        follower.handle_peer(1, r(0), second),
        Err(Rejection::Equivocation {
            from: r(0),
            cid: ConsensusId(0)
        })
    );
    // An identical copy is ignored.
    assert_eq!(follower.handle_peer(1, r(0), input), Ok(()));
    assert_eq!(drain(&mut follower), vec![]);
    for from in [0, 2] {
        follower
            .handle_peer(1, r(from), PeerInput::Write(vote(0, hash)))
            .unwrap();
    }
    for from in [0, 2] {
        follower
            .handle_peer(1, r(from), PeerInput::Accept(acc_by(from, vote(0, hash))))
            .unwrap();
    }
    assert_eq!(
        drain(&mut follower),
        vec![accept(0, hash), deliver(0, hash, first)]
    );
}

/// Decides `batch` as cid `cid` on a BFT follower (replica 1).
fn decide_on_follower(follower: &mut Replica, cid: u64, batch: &Batch) {
    let (input, hash) = propose(cid, batch);
    follower.handle_peer(1, r(0), input).unwrap();
    for from in [0, 2] {
        follower
            .handle_peer(1, r(from), PeerInput::Write(vote(cid, hash)))
            .unwrap();
        follower
            .handle_peer(1, r(from), PeerInput::Accept(acc_by(from, vote(cid, hash))))
            .unwrap();
    }
    let actions = drain(follower);
    assert_eq!(actions.last(), Some(&deliver(cid, hash, batch.clone())));
}

fn assert_invalid(follower: &mut Replica, cid: u64, input: PeerInput, fault: ProposalFault) {
    assert_eq!(
        follower.handle_peer(1, r(0), input),
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
            .handle_peer(1, r(from), PeerInput::Write(vote(1, hash)))
            .unwrap();
        follower
            .handle_peer(1, r(from), PeerInput::Accept(acc_by(from, vote(1, hash))))
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
fn unauthentic_batch_waits_for_vouchers_instead_of_blaming_the_leader() {
    // A faulty client can corrupt this replica's entry of its MAC authenticator: the
    // proposal is not voted for, and the leader is not suspected…
    let mut follower = bft(1);
    let batch = batch_of(1, vec![req(1, 1)]);
    let (mut input, hash) = propose(0, &batch);
    if let PeerInput::Propose { batch, .. } = &mut input {
        batch.authentic = false;
    }
    assert_eq!(
        follower.handle_peer(1, r(0), input),
        Err(Rejection::InvalidProposal {
            from: r(0),
            cid: ConsensusId(0),
            fault: ProposalFault::Unauthentic,
        })
    );
    assert_eq!(drain(&mut follower), vec![]);
    assert_eq!(follower.suspected_leader_fault(), None);
    // …until f+1 = 2 other replicas vouch for it with their WRITEs (a correct one verified
    // it): then it WRITEs, and with the quorum (3) it ACCEPTs.
    follower
        .handle_peer(2, r(0), PeerInput::Write(vote(0, hash)))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![]);
    follower
        .handle_peer(2, r(2), PeerInput::Write(vote(0, hash)))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![write(0, hash), accept(0, hash)]);
    follower
        .handle_peer(3, r(0), PeerInput::Accept(acc_by(0, vote(0, hash))))
        .unwrap();
    follower
        .handle_peer(3, r(2), PeerInput::Accept(acc_by(2, vote(0, hash))))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![deliver(0, hash, batch)]);
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
    let mut follower = bft(1);
    let (input, _) = propose(0, &batch_of(1, vec![]));
    assert_invalid(&mut follower, 0, input, ProposalFault::Empty);
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
    assert_eq!(follower.handle_peer(1, r(0), input), Ok(()));
    let (valid, _) = propose(0, &batch_of(1, vec![req(1, 1)]));
    assert_eq!(
        follower.handle_peer(1, r(0), valid),
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
            follower.handle_peer(1, r(9), input),
            Err(Rejection::NotAMember { from: r(9) })
        );
    }
    assert_eq!(drain(&mut follower), vec![]);
    assert_eq!(follower.clients().pending_total(), 0);
}

#[test]
fn retransmitted_delivered_request_gets_its_reply_resent() {
    let mut leader = bft(0);
    leader.handle_client_request(1, req(1, 1)).unwrap();
    let (_, hash, _) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    complete_on_leader(&mut leader, 0, hash);
    leader.handle_client_request(2, req(1, 1)).unwrap();
    assert_eq!(
        drain(&mut leader),
        vec![Action::ResendReply {
            client: ClientId(1),
            seq: RequestSeq(1)
        }]
    );
    // A late forward of it is silently ignored.
    leader
        .handle_peer(
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
        leader.handle_peer(
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
        .handle_peer(
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
        follower.handle_client_request(0, unordered),
        Err(Rejection::NotOrdered)
    );
    let mut wrong_view = req(1, 1);
    wrong_view.request.view = ViewId(7);
    assert_eq!(
        follower.handle_client_request(0, wrong_view),
        Err(Rejection::WrongView { view: ViewId(7) })
    );
    assert_eq!(
        follower.handle_client_request(0, req_sized(1, 1, 1025)),
        Err(Rejection::RequestTooLarge {
            bytes: 1025,
            max: 1024
        })
    );
    follower.handle_client_request(0, req(1, 1)).unwrap();
    assert_eq!(
        follower.handle_client_request(0, req(1, 1)),
        Err(Rejection::Duplicate {
            client: ClientId(1),
            seq: RequestSeq(1)
        })
    );
    follower.handle_client_request(0, req(1, 2)).unwrap();
    assert_eq!(
        follower.handle_client_request(0, req(1, 3)),
        Err(Rejection::SequenceTooFarAhead {
            client: ClientId(1),
            seq: RequestSeq(3)
        })
    );
    follower.handle_client_request(0, req(2, 1)).unwrap();
    assert_eq!(
        follower.handle_client_request(0, req(3, 1)),
        Err(Rejection::Overloaded)
    );
    assert_eq!(follower.stats().pending_requests, 3);
    assert_eq!(drain(&mut follower), vec![]);
    // A decision frees room.
    decide_on_follower(&mut follower, 0, &batch_of(1, vec![req(1, 1), req(2, 1)]));
    assert_eq!(follower.stats().pending_requests, 1);
    follower.handle_client_request(0, req(1, 3)).unwrap();
    follower.handle_client_request(0, req(3, 1)).unwrap();
}

#[test]
fn future_votes_are_used_once_their_instance_starts() {
    let mut follower = bft(1);
    let batch0 = batch_of(1, vec![req(1, 1)]);
    let batch1 = batch_of(2, vec![req(1, 2)]);
    let (propose0, h0) = propose(0, &batch0);
    let (propose1, h1) = propose(1, &batch1);
    // Everything about cid 1 arrives first, votes before the PROPOSE.
    follower
        .handle_peer(1, r(0), PeerInput::Write(vote(1, h1)))
        .unwrap();
    follower
        .handle_peer(1, r(0), PeerInput::Accept(acc_by(0, vote(1, h1))))
        .unwrap();
    follower.handle_peer(1, r(0), propose1).unwrap();
    follower
        .handle_peer(1, r(2), PeerInput::Write(vote(1, h1)))
        .unwrap();
    follower
        .handle_peer(1, r(2), PeerInput::Accept(acc_by(2, vote(1, h1))))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![]);
    assert_eq!(follower.stats().future_messages_buffered, 5);

    follower.handle_peer(2, r(0), propose0).unwrap();
    assert_eq!(drain(&mut follower), vec![write(0, h0)]);
    for from in [0, 2] {
        follower
            .handle_peer(2, r(from), PeerInput::Write(vote(0, h0)))
            .unwrap();
    }
    assert_eq!(drain(&mut follower), vec![accept(0, h0)]);
    follower
        .handle_peer(2, r(0), PeerInput::Accept(acc_by(0, vote(0, h0))))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![]);
    follower
        .handle_peer(2, r(2), PeerInput::Accept(acc_by(2, vote(0, h0))))
        .unwrap();
    assert_eq!(
        drain(&mut follower),
        vec![
            deliver(0, h0, batch0),
            write(1, h1),
            accept(1, h1),
            deliver(1, h1, batch1),
        ]
    );
    assert_eq!(follower.next_cid(), ConsensusId(2));
    assert_eq!(follower.stats().future_messages_buffered, 0);
}

#[test]
fn future_buffer_is_bounded() {
    let mut p = params(Mode::Bft, 4, 1);
    p.future_messages_max = 6; // two per other member
    let mut follower = replica(p);
    let h = tagma_crypto::digest(b"x");
    let w = |cid| PeerInput::Write(vote(cid, h));
    follower.handle_peer(0, r(0), w(1)).unwrap();
    follower.handle_peer(0, r(0), w(2)).unwrap();
    // One sender cannot take more than its share.
    assert_eq!(
        follower.handle_peer(0, r(0), w(3)),
        Err(Rejection::FutureBufferFull)
    );
    for from in [2, 3] {
        follower.handle_peer(0, r(from), w(1)).unwrap();
        follower.handle_peer(0, r(from), w(2)).unwrap();
    }
    assert_eq!(follower.stats().future_messages_buffered, 6);
    assert_eq!(
        follower.handle_peer(0, r(2), w(1)),
        Err(Rejection::FutureBufferFull)
    );
    // Too far ahead is refused whatever the room.
    let mut follower = replica(params(Mode::Bft, 4, 1));
    assert_eq!(
        follower.handle_peer(0, r(0), w(1001)),
        Err(Rejection::FutureBufferFull)
    );
    follower.handle_peer(0, r(0), w(1000)).unwrap();
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
            follower.handle_peer(1, r(3), input),
            Err(Rejection::Stale {
                cid: ConsensusId(0)
            })
        );
    }
    assert_eq!(drain(&mut follower), vec![]);
}

// ---------------------------------------------------------------------------------------------
// Proposer: batch limits and fairness
// ---------------------------------------------------------------------------------------------

#[test]
fn proposer_respects_batch_size_max_and_round_robin() {
    let mut p = params(Mode::Bft, 4, 0);
    p.batch_size_max = 3;
    let mut leader = replica(p);
    leader.handle_client_request(0, req(1, 1)).unwrap();
    let (_, mut hash, batch) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 1)]);
    for seq in 2..=5 {
        leader.handle_client_request(0, req(1, seq)).unwrap();
    }
    for seq in 1..=2 {
        leader.handle_client_request(0, req(2, seq)).unwrap();
    }
    leader.handle_client_request(0, req(3, 1)).unwrap();
    // Client 4's requests wait behind a gap.
    leader.handle_client_request(0, req(4, 2)).unwrap();
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
    leader
        .handle_client_request(0, req_sized(1, 1, 1024))
        .unwrap();
    let (bytes, hash, _) = take_proposal(&drain(&mut leader), 0, Mode::Bft);
    assert!(bytes.len() <= 2600);
    for client in 2..=4 {
        leader
            .handle_client_request(0, req_sized(client, 1, 1024))
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

// ---------------------------------------------------------------------------------------------
// Whole clusters in memory
// ---------------------------------------------------------------------------------------------

/// A tiny deterministic generator for the cluster loop's choices.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

struct Cluster {
    replicas: Vec<Replica>,
    /// (from, to, message) in flight.
    network: VecDeque<(ReplicaId, ReplicaId, PeerMessage)>,
    delivered: Vec<Vec<Decision>>,
    /// Views installed, per replica: (instance, view, still a member).
    views: Vec<Vec<(ConsensusId, View, bool)>>,
    /// Replicas whose outgoing messages are dropped.
    silent: BTreeSet<ReplicaId>,
    /// Replicas that receive nothing either (crashed).
    crashed: BTreeSet<ReplicaId>,
    /// Deliver network messages in a random order instead of FIFO.
    reorder: bool,
    rng: Rng,
    now_ms: u64,
    /// Leader change makes some rejections normal (votes of a replaced leader, …).
    lenient: bool,
    /// Crash this replica once this many messages were delivered.
    crash_at: Option<(usize, ReplicaId)>,
    steps: usize,
}

impl Cluster {
    fn new(mode: Mode, n: u32, seed: u64) -> Self {
        let replicas: Vec<_> = (0..n).map(|me| replica(params(mode, n, me))).collect();
        Cluster {
            delivered: vec![Vec::new(); replicas.len()],
            views: vec![Vec::new(); replicas.len()],
            replicas,
            network: VecDeque::new(),
            silent: BTreeSet::new(),
            crashed: BTreeSet::new(),
            reorder: false,
            rng: Rng(seed),
            now_ms: 0,
            lenient: false,
            crash_at: None,
            steps: 0,
        }
    }

    fn collect(&mut self, i: usize) {
        let from = self.replicas[i].me();
        while let Some(action) = self.replicas[i].poll_action() {
            match action {
                Action::Broadcast(msg) => {
                    for to in (0..self.replicas.len() as u32).map(r) {
                        if to != from {
                            self.send(from, to, msg.clone());
                        }
                    }
                }
                Action::Send { to, msg } => self.send(from, to, msg),
                Action::Deliver(decision) => {
                    let expected = self.delivered[i].len() as u64;
                    assert_eq!(
                        decision.cid,
                        ConsensusId(expected),
                        "replica {i} out of order"
                    );
                    self.delivered[i].push(decision);
                }
                Action::ViewInstalled { cid, view, member } => {
                    self.views[i].push((cid, view, member));
                }
                Action::RegencyInstalled { .. } | Action::StateTransferNeeded { .. } => {}
                Action::ResendReply { .. } => {}
                // Without durable state (`state_transfer: false`) none of these occur.
                a @ (Action::ReadChunk { .. }
                | Action::PersistVote { .. }
                | Action::ReadLog { .. }
                | Action::StoreChunk { .. }
                | Action::CheckpointNow { .. }
                | Action::DigestState { .. }
                | Action::InstallState(_)) => {
                    panic!("state transfer action without durability: {a:?}")
                }
            }
        }
    }

    fn send(&mut self, from: ReplicaId, to: ReplicaId, msg: PeerMessage) {
        if !self.silent.contains(&from) && !self.crashed.contains(&from) {
            self.network.push_back((from, to, msg));
        }
    }

    fn client_request(&mut self, request: RequestEnvelope) {
        self.now_ms += 1;
        for i in 0..self.replicas.len() {
            if self.crashed.contains(&r(i as u32)) {
                continue;
            }
            // A follower may already have ordered it (ResendReply): that is fine.
            self.replicas[i]
                .handle_client_request(self.now_ms, request.clone())
                .unwrap();
            self.collect(i);
        }
    }

    /// Delivers one network message; false if none is in flight.
    fn step(&mut self) -> bool {
        let index = if self.reorder && !self.network.is_empty() {
            self.rng.below(self.network.len())
        } else {
            0
        };
        let Some((from, to, msg)) = self.network.remove(index) else {
            return false;
        };
        self.steps += 1;
        if let Some((at, who)) = self.crash_at
            && self.steps >= at
        {
            self.crashed.insert(who);
            self.crash_at = None;
        }
        if self.crashed.contains(&to) || self.crashed.contains(&from) {
            return true;
        }
        self.now_ms += 1;
        let input = PeerInput::from_message(msg, |_| true).expect("a consensus message");
        let i = to.0 as usize;
        match self.replicas[i].handle_peer(self.now_ms, from, input) {
            // Late votes of decided instances are normal.
            Ok(()) | Err(Rejection::Stale { .. }) => {}
            Err(_) if self.lenient => {}
            Err(other) => panic!("replica {i} rejected a message from {from}: {other:?}"),
        }
        self.collect(i);
        true
    }

    fn run_until_quiet(&mut self) {
        while self.step() {}
    }

    fn live(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|i| !self.crashed.contains(&r(*i as u32)))
            .collect()
    }

    /// Delivers messages and fires the replicas' timers in virtual time until nothing is in
    /// flight and no timer is due before `until_ms`.
    fn run_with_timers(&mut self, until_ms: u64) {
        loop {
            self.run_until_quiet();
            let due = self
                .live()
                .into_iter()
                .filter_map(|i| self.replicas[i].next_timeout_ms())
                .min();
            match due {
                Some(t) if t <= until_ms => {
                    self.now_ms = self.now_ms.max(t);
                    for i in self.live() {
                        if self.replicas[i]
                            .next_timeout_ms()
                            .is_some_and(|t| t <= self.now_ms)
                        {
                            self.replicas[i].handle_tick(self.now_ms);
                            self.collect(i);
                        }
                    }
                }
                _ => return,
            }
        }
    }

    /// `clients` clients each send `per_client` requests to all replicas, interleaved with
    /// network steps; then the network drains.
    fn run_workload(&mut self, clients: u64, per_client: u64) {
        let mut next_seq: BTreeMap<u64, u64> = (1..=clients).map(|c| (c, 1)).collect();
        while !next_seq.is_empty() {
            if self.rng.below(3) == 0 {
                let keys: Vec<u64> = next_seq.keys().copied().collect();
                let client = keys[self.rng.below(keys.len())];
                let seq = next_seq[&client];
                self.client_request(req(client, seq));
                if seq == per_client {
                    next_seq.remove(&client);
                } else {
                    next_seq.insert(client, seq + 1);
                }
            } else {
                self.step();
            }
        }
        self.run_until_quiet();
    }

    /// All live replicas decided the same sequence, containing every request exactly once,
    /// per-client sequence numbers in order.
    fn check(&self, clients: u64, per_client: u64) {
        let live: Vec<usize> = (0..self.replicas.len())
            .filter(|i| !self.crashed.contains(&r(*i as u32)))
            .collect();
        let reference = &self.delivered[live[0]];
        for &i in &live {
            assert_eq!(&self.delivered[i], reference, "replica {i} diverged");
            assert_eq!(self.replicas[i].stats().pending_requests, 0);
        }
        let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
        for decision in reference {
            assert!(!decision.batch.requests.is_empty());
            assert!(decision.batch.requests.len() <= 16);
            for e in &decision.batch.requests {
                let last = seen.entry(e.request.client.0).or_insert(0);
                assert_eq!(e.request.seq.0, *last + 1, "client order broken");
                *last += 1;
            }
        }
        let want: BTreeMap<u64, u64> = (1..=clients).map(|c| (c, per_client)).collect();
        assert_eq!(seen, want, "every request exactly once");
        let timestamps: Vec<u64> = reference.iter().map(|d| d.batch.timestamp_ms).collect();
        assert!(timestamps.windows(2).all(|w| w[0] <= w[1]));
    }
}

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

// ---------------------------------------------------------------------------------------------
// Leader change (synchronization phase), driven by request timers in virtual time
// ---------------------------------------------------------------------------------------------

fn assert_new_leader(cluster: &Cluster, not: ReplicaId) {
    for i in cluster.live() {
        let replica = &cluster.replicas[i];
        assert!(
            replica.regency().0 >= 1,
            "replica {i} never changed regency"
        );
        assert_ne!(
            replica.leader(),
            not,
            "replica {i} still follows the crashed leader"
        );
    }
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
            assert_new_leader(&cluster, r(0));
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
                assert_new_leader(&cluster, r(0));
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
        assert_new_leader(&cluster, r(1));
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
    assert_new_leader(&cluster, r(0));
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

#[test]
fn a_replica_far_behind_asks_for_decisions_at_once_and_one_just_behind_waits() {
    // f+1 = 2 peers vote on the next instance: routine (they may simply be early), so the
    // follower waits a quarter of the request timeout before asking for decisions.
    let hash = tagma_crypto::digest(b"v");
    let mut early = bft(3);
    for from in [0, 1] {
        let _ = early.handle_peer(100, r(from), PeerInput::Write(vote(1, hash)));
    }
    assert_eq!(early.next_timeout_ms(), Some(100 + 1000 / 4));
    // f+1 peers vote two or more instances ahead: they decided one this replica never saw
    // proposed, so it asks after the short catch-up gap (a fiftieth of the timeout).
    let mut behind = bft(3);
    for (from, cid) in [(0, 5), (1, 2)] {
        let _ = behind.handle_peer(100, r(from), PeerInput::Write(vote(cid, hash)));
    }
    assert_eq!(behind.next_timeout_ms(), Some(100 + 1000 / 50));
    drain(&mut behind);
    behind.handle_tick(100 + 1000 / 50);
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
    let _ = one.handle_peer(100, r(0), PeerInput::Write(vote(9, hash)));
    let _ = one.handle_peer(100, r(1), PeerInput::Write(vote(1, hash)));
    assert_eq!(one.next_timeout_ms(), Some(100 + 1000 / 4));
}

/// A replica waiting the quarter period because f+1 peers are on its next instance (maybe
/// merely early) asks after the short gap as soon as f+1 peers show they decided further: a
/// replica that had just caught up after its state transfer waited the quarter period out
/// while the others ran on (0.5 s in `tagma bench state-transfer`, stop 23).
#[test]
fn the_quarter_wait_shortens_once_f_plus_1_peers_show_they_decided_further() {
    let hash = tagma_crypto::digest(b"v");
    let mut early = bft(3);
    for from in [0, 1] {
        let _ = early.handle_peer(100, r(from), PeerInput::Write(vote(1, hash)));
    }
    assert_eq!(early.next_timeout_ms(), Some(100 + 1000 / 4));
    // One peer further is not enough (it may lie).
    let _ = early.handle_peer(110, r(0), PeerInput::Write(vote(2, hash)));
    assert_eq!(early.next_timeout_ms(), Some(100 + 1000 / 4));
    // The second one is: the short gap from now.
    let _ = early.handle_peer(120, r(1), PeerInput::Write(vote(3, hash)));
    assert_eq!(early.next_timeout_ms(), Some(120 + 1000 / 50));
    // Later messages do not push it further out.
    let _ = early.handle_peer(130, r(0), PeerInput::Write(vote(4, hash)));
    assert_eq!(early.next_timeout_ms(), Some(120 + 1000 / 50));
}

#[test]
fn a_run_that_ends_short_is_asked_again_after_the_gap_which_duplicates_lengthen() {
    let log = decided_run(3);
    let hash = tagma_crypto::digest(b"v");
    let mut laggard = bft(3);
    for from in [0, 1] {
        let _ = laggard.handle_peer(100, r(from), PeerInput::Write(vote(5, hash)));
    }
    laggard.handle_tick(120); // asks for the run from instance 0 (64 decisions)
    assert_eq!(laggard.next_timeout_ms(), Some(120 + 1000 / 2));
    // Instance 0 arrives and no more: asked again one gap (1000 / 50) after it.
    laggard
        .handle_peer(130, r(0), PeerInput::Decision(log[0].clone()))
        .unwrap();
    assert_eq!(laggard.next_cid(), ConsensusId(1));
    assert_eq!(laggard.next_timeout_ms(), Some(130 + 20));
    // A duplicate (it asked again while that run was still coming) doubles the gap.
    assert!(matches!(
        laggard.handle_peer(131, r(1), PeerInput::Decision(log[0].clone())),
        Err(Rejection::Stale { .. })
    ));
    laggard
        .handle_peer(132, r(0), PeerInput::Decision(log[1].clone()))
        .unwrap();
    assert_eq!(laggard.next_timeout_ms(), Some(132 + 40));
}

#[test]
fn an_accept_with_a_bad_signature_does_not_count_toward_a_decision() {
    // Replica 3 (faulty) sends an ACCEPT whose signature is garbage: the follower must not
    // decide on it (it could not prove the decision later), only once a third valid one comes.
    let mut follower = bft(1);
    let batch = batch_of(1, vec![req(1, 1)]);
    let (input, hash) = propose(0, &batch);
    follower.handle_peer(1, r(0), input).unwrap();
    for from in [0, 2] {
        follower
            .handle_peer(2, r(from), PeerInput::Write(vote(0, hash)))
            .unwrap();
    }
    drain(&mut follower);
    follower
        .handle_peer(3, r(0), PeerInput::Accept(acc_by(0, vote(0, hash))))
        .unwrap();
    follower
        .handle_peer(3, r(3), PeerInput::Accept(acc(vote(0, hash))))
        .unwrap();
    assert_eq!(
        drain(&mut follower),
        vec![],
        "no decision on a forged signature"
    );
    follower
        .handle_peer(4, r(2), PeerInput::Accept(acc_by(2, vote(0, hash))))
        .unwrap();
    assert_eq!(drain(&mut follower), vec![deliver(0, hash, batch)]);
}

#[test]
fn an_adopted_regency_takes_no_propose_for_the_synchronised_instance() {
    // Replica 2 missed the leader change to regency 1 (whose leader is replica 1), SYNC
    // included. When f+1 = 2 peers vote in epoch 1 it adopts regency 1, but must not vote on
    // a PROPOSE for its current instance in that epoch: the SYNC may have bound another value.
    let mut follower = bft(2);
    let other = tagma_crypto::digest(b"some value");
    let vote1 = Vote {
        cid: ConsensusId(0),
        epoch: Epoch(1),
        hash: other,
    };
    follower
        .handle_peer(1, r(0), PeerInput::Write(vote1))
        .unwrap();
    assert_eq!(follower.regency(), Regency(0), "one peer is not enough");
    follower
        .handle_peer(1, r(3), PeerInput::Write(vote1))
        .unwrap();
    assert_eq!(follower.regency(), Regency(1), "f+1 peers: adopted");
    assert_eq!(follower.leader(), r(1));
    drain(&mut follower);
    let batch = batch_of(1, vec![req(1, 1)]);
    let bytes = batch.to_bytes();
    let propose = PeerInput::Propose {
        cid: ConsensusId(0),
        epoch: Epoch(1),
        batch: verified(&bytes),
    };
    assert_eq!(
        follower.handle_peer(2, r(1), propose),
        Err(Rejection::Stale {
            cid: ConsensusId(0)
        }),
        "no vote without the SYNC"
    );
    assert_eq!(
        drain(&mut follower),
        vec![],
        "no WRITE in the adopted epoch"
    );
}

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
    let result = follower.handle_peer(
        1,
        r(3),
        PeerInput::from_message(PeerMessage::Sync(sync), |_| true).expect("a consensus message"),
    );
    assert!(
        matches!(result, Err(Rejection::InvalidSync { .. })),
        "{result:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Recovery from durable storage
// ---------------------------------------------------------------------------------------------

/// A replica that ordered instances 0..=2, then resumed from its log: it orders instance 3
/// next, answers retransmissions of delivered requests from the reply cache (never orders
/// them again), forwards its logged decisions, and logs what it decides next.
#[test]
fn a_resumed_replica_continues_after_its_durable_state() {
    // Decide 0..=2 on a leader, keeping what its durable log would hold.
    let mut before = bft(0);
    let mut logged = Vec::new();
    for cid in 0..3u64 {
        before.handle_client_request(cid, req(1, cid + 1)).unwrap();
        let (_, hash, _) = take_proposal(&drain(&mut before), cid, Mode::Bft);
        let done = complete_on_leader(&mut before, cid, hash);
        assert!(
            done.iter()
                .any(|a| matches!(a, Action::Deliver(d) if d.cid.0 == cid))
        );
        let decided = before.decided_instance(ConsensusId(cid)).unwrap();
        assert_eq!(decided.proof.accepts.len(), 3, "the quorum's signatures");
        logged.push(decided);
    }

    let mut after = bft(0);
    after.resume(
        ConsensusId(2),
        2,
        &[(ClientId(1), RequestSeq(3))],
        logged.clone(),
    );
    assert_eq!(after.next_cid(), ConsensusId(3));
    // A retransmission of a request ordered before the crash: a cached reply, not an order.
    after.handle_client_request(10, req(1, 3)).unwrap();
    assert_eq!(
        drain(&mut after),
        vec![Action::ResendReply {
            client: ClientId(1),
            seq: RequestSeq(3)
        }]
    );
    // The next request of that client is ordered in instance 3.
    after.handle_client_request(11, req(1, 4)).unwrap();
    let (_, hash, batch) = take_proposal(&drain(&mut after), 3, Mode::Bft);
    assert_eq!(ids(&batch), vec![(1, 4)]);
    complete_on_leader(&mut after, 3, hash);
    assert_eq!(
        after.decided_instance(ConsensusId(3)).unwrap().cid,
        ConsensusId(3)
    );
    // A lagging peer asking for a logged decision gets it, with its proof.
    after
        .handle_peer(
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

/// Decides instances `0..count` on a fresh BFT leader and returns what its log would hold.
fn decided_run(count: u64) -> Vec<tagma_wire::DecidedInstance> {
    let mut leader = bft(0);
    (0..count)
        .map(|cid| {
            leader.handle_client_request(cid, req(9, cid + 1)).unwrap();
            let (_, hash, _) = take_proposal(&drain(&mut leader), cid, Mode::Bft);
            complete_on_leader(&mut leader, cid, hash);
            leader.decided_instance(ConsensusId(cid)).unwrap()
        })
        .collect()
}

fn position(next: u64, reply: bool) -> PeerInput {
    PeerInput::Position {
        next: ConsensusId(next),
        reply,
    }
}

fn proposes(actions: &[Action]) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::Broadcast(PeerMessage::Propose(_))))
}

/// Start-up synchronisation: a restarted leader orders nothing until it knows every peer's
/// position; then it proposes the next instance.
#[test]
fn a_recovering_leader_waits_for_every_position_before_ordering() {
    let log = decided_run(3);
    let mut r0 = bft(0);
    r0.resume(ConsensusId(2), 2, &[(ClientId(9), RequestSeq(3))], log);
    r0.start_startup_sync(100);
    assert!(r0.is_starting_up());
    assert_eq!(
        drain(&mut r0),
        vec![Action::Broadcast(PeerMessage::Position {
            next: ConsensusId(3),
            reply: false
        })]
    );
    r0.handle_client_request(101, req(1, 1)).unwrap();
    assert!(!proposes(&drain(&mut r0)), "no proposal while recovering");
    for from in [1, 2] {
        r0.handle_peer(102, r(from), position(3, false)).unwrap();
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
    r0.handle_peer(103, r(3), position(3, true)).unwrap();
    assert!(!r0.is_starting_up());
    let mut actions = drain(&mut r0);
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
    r0.handle_peer(104, r(1), position(3, true)).unwrap();
    let resent = drain(&mut r0);
    assert_eq!(resent.len(), 2, "{resent:?}");
    assert!(
        matches!(&resent[0], Action::Send { to, msg: PeerMessage::Propose(p) } if *to == r(1) && p.cid == ConsensusId(3))
    );
    assert!(
        matches!(&resent[1], Action::Send { to, msg: PeerMessage::Write(v) } if *to == r(1) && v.cid == ConsensusId(3))
    );
    // Once per instance: a repeated position gets nothing more...
    r0.handle_peer(105, r(1), position(3, true)).unwrap();
    assert_eq!(drain(&mut r0), vec![]);
    // ...but replica 1 was still synchronising (that position answered the leader's query)
    // and refused them: its end-of-recovery query and announcement get them once more.
    r0.handle_peer(106, r(1), position(3, false)).unwrap();
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
    r0.handle_peer(106, r(1), position(3, true)).unwrap();
    assert_eq!(drain(&mut r0), resent);
}

/// The highest durable instance wins: a restarted leader behind a peer fetches the decision
/// it misses (with its proof) before proposing, instead of deciding that instance anew.
#[test]
fn a_recovering_leader_catches_up_to_the_highest_position_first() {
    let log = decided_run(3);
    let mut r0 = bft(0);
    r0.resume(
        ConsensusId(1),
        1,
        &[(ClientId(9), RequestSeq(2))],
        log[..2].to_vec(),
    );
    r0.start_startup_sync(100);
    drain(&mut r0);
    r0.handle_client_request(101, req(1, 1)).unwrap();
    r0.handle_peer(102, r(1), position(3, false)).unwrap();
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
        r0.handle_peer(103, r(from), position(2, true)).unwrap();
    }
    assert!(r0.is_starting_up(), "still behind replica 1");
    assert!(!proposes(&drain(&mut r0)));
    r0.handle_peer(104, r(1), PeerInput::Decision(log[2].clone()))
        .unwrap();
    let actions = drain(&mut r0);
    assert!(!r0.is_starting_up());
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Deliver(d) if d.cid == ConsensusId(2)))
    );
    let proposal = actions
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
    let mut r0 = bft(0);
    r0.start_startup_sync(0);
    drain(&mut r0);
    r0.handle_client_request(1, req(1, 1)).unwrap();
    for from in [1, 2] {
        r0.handle_peer(2, r(from), position(0, true)).unwrap();
    }
    assert!(r0.is_starting_up());
    // Retransmissions go to the silent peer only.
    r0.handle_tick(600);
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
    r0.handle_tick(deadline);
    assert!(!r0.is_starting_up());
    assert!(proposes(&drain(&mut r0)));
}

/// A recovering replica lost the votes it cast before its crash: it casts none and reports
/// no collect until recovery ends; in CFT (quorums of f+1) it waits for every peer, however
/// long.
#[test]
fn a_recovering_replica_does_not_vote_and_settles_for_n_minus_f_after_the_deadline() {
    let mut r1 = cft(1);
    r1.start_startup_sync(0);
    drain(&mut r1);
    let batch = batch_of(1, vec![req(1, 1)]);
    let (input, _) = propose(0, &batch);
    assert_eq!(
        r1.handle_peer(1, r(0), input).unwrap_err(),
        Rejection::StartingUp
    );
    let stop = Stop {
        regency: Regency(1),
        requests: vec![],
    };
    assert_eq!(
        r1.handle_peer(1, r(2), PeerInput::Stop(stop)).unwrap_err(),
        Rejection::StartingUp
    );
    assert!(drain(&mut r1).is_empty(), "no vote, no STOP, no STOPDATA");
    r1.handle_peer(2, r(0), position(0, true)).unwrap();
    // Before the deadline every peer is awaited; after it, n − f positions (its own and
    // replica 0's) are enough, in CFT too: the votes persisted by the replicas that accepted
    // an instance hold it for a leader change.
    r1.handle_tick(100);
    assert!(r1.is_starting_up());
    r1.handle_tick(60_000);
    assert!(!r1.is_starting_up());
    // It announces that it is done, so that peers on its instance resend what it refused.
    assert!(
        drain(&mut r1).contains(&Action::Broadcast(PeerMessage::Position {
            next: ConsensusId(0),
            reply: true,
        }))
    );
}

// ---------------------------------------------------------------------------------------------
// Reconfiguration
// ---------------------------------------------------------------------------------------------

fn in_view(mut request: RequestEnvelope, view: u32) -> RequestEnvelope {
    request.request.view = ViewId(view);
    request
}

/// An ordered view change from the administrator's client (principal 9).
fn reconfig(seq: u64, view: u32, change: ViewChange) -> RequestEnvelope {
    let mut request = in_view(req(9 << 32, seq), view);
    request.request.kind = RequestKind::Reconfigure;
    request.request.payload = change.to_bytes();
    request
}

fn added(id: u32) -> ViewOp {
    ViewOp::Add(ViewMember {
        id: r(id),
        addr: addr(id),
        key: key(id).public(),
    })
}

#[test]
fn a_signed_view_change_installs_at_the_same_instance_everywhere_and_a_removed_leader_hands_over() {
    let mut c = Cluster::new(Mode::Bft, 4, 11);
    c.client_request(req(1, 1));
    c.run_until_quiet();
    // Add replica 4 (not running): n = 5, f = 1, so 4 ACCEPTs decide — the four suffice.
    let add = sign_change(&admin(), ViewId(0), vec![added(4)]);
    c.client_request(reconfig(1, 0, add));
    c.run_until_quiet();
    let installed = c.views[0].clone();
    assert_eq!(installed.len(), 1);
    let (cid, view, member) = &installed[0];
    assert!(*member);
    assert_eq!((view.id, view.members.len(), view.f), (ViewId(1), 5, 1));
    for i in 0..4 {
        assert_eq!(
            c.views[i], installed,
            "replica {i} installed the same view at the same instance"
        );
        assert_eq!(c.delivered[i].len() as u64, cid.0 + 1);
    }
    // Requests of the old view are refused now; requests of the new one are ordered.
    assert_eq!(
        c.replicas[1].handle_client_request(c.now_ms, req(2, 1)),
        Err(Rejection::WrongView { view: ViewId(0) })
    );
    c.client_request(in_view(req(1, 2), 1));
    c.run_until_quiet();
    assert!(c.delivered.iter().all(|d| d.len() as u64 == cid.0 + 2));
    // A change signed by another key, or for a view no longer installed, changes nothing.
    let forged = sign_change(&key(1), ViewId(1), vec![ViewOp::Remove(r(3))]);
    let stale = sign_change(&admin(), ViewId(0), vec![ViewOp::Remove(r(3))]);
    c.client_request(reconfig(2, 1, forged));
    c.client_request(reconfig(3, 1, stale));
    c.run_until_quiet();
    assert!(
        c.views.iter().all(|v| v.len() == 1),
        "refused changes install nothing"
    );
    // Remove the leader (replica 0): replicas 1..3 install view 2 and replica 1 leads at once,
    // in the same regency; replica 0 leaves and takes no more input.
    assert_eq!(c.replicas[1].leader(), r(0));
    let regency = c.replicas[1].regency();
    let remove = sign_change(&admin(), ViewId(1), vec![ViewOp::Remove(r(0))]);
    c.client_request(reconfig(4, 1, remove));
    c.run_until_quiet();
    for i in 0..4 {
        let (_, view, member) = c.views[i].last().unwrap();
        assert_eq!(view.id, ViewId(2));
        assert_eq!(*member, i != 0, "replica {i}");
    }
    assert_eq!(c.views[1][1].0, c.views[0][1].0, "same instance");
    for i in 1..4 {
        assert_eq!(c.replicas[i].leader(), r(1));
        assert_eq!(
            c.replicas[i].regency(),
            regency,
            "no leader change was needed"
        );
    }
    assert_eq!(
        c.replicas[0].handle_client_request(c.now_ms, in_view(req(1, 3), 2)),
        Err(Rejection::NotMember)
    );
    assert_eq!(c.replicas[0].next_timeout_ms(), None);
    c.crashed.insert(r(0));
    // Members 1, 2, 3 and the absent 4: n = 4, f = 1, 3 ACCEPTs decide.
    let before = c.delivered[1].len();
    c.client_request(in_view(req(1, 3), 2));
    c.run_until_quiet();
    for i in 1..4 {
        assert_eq!(
            c.delivered[i].len(),
            before + 1,
            "replica {i} ordered in view 2"
        );
        assert_eq!(c.replicas[i].stats().views_installed, 2);
    }
}

#[test]
fn view_changes_that_do_not_apply_leave_the_view_and_f_grows_only_with_enough_members() {
    let mut c = Cluster::new(Mode::Cft, 3, 5);
    // CFT n = 3: f = 2 needs 5 replicas.
    let too_high = sign_change(&admin(), ViewId(0), vec![ViewOp::SetF(2)]);
    c.client_request(reconfig(1, 0, too_high));
    c.run_until_quiet();
    assert!(c.views.iter().all(Vec::is_empty));
    assert_eq!(
        c.delivered[0].len(),
        1,
        "the refused change was still ordered"
    );
    // Two replicas (absent) and f = 2 in one change: n = 5, f = 2, and the three running
    // replicas are a CFT majority (3 of 5).
    let grow = sign_change(
        &admin(),
        ViewId(0),
        vec![added(3), added(4), ViewOp::SetF(2)],
    );
    c.client_request(reconfig(2, 0, grow));
    c.run_until_quiet();
    for i in 0..3 {
        let (_, view, member) = c.views[i].last().unwrap();
        assert!(*member);
        assert_eq!((view.members.len(), view.f), (5, 2));
    }
    c.client_request(in_view(req(1, 1), 1));
    c.run_until_quiet();
    assert!(c.delivered.iter().all(|d| d.len() == 3));
}

/// A leader change right after a view change that added a replica: the SYNC carries the last
/// decided instance — the one that ordered the change — whose proof holds under the view it
/// was decided in (3 of 5 in CFT), not under the new one (4 of 6). It must be judged by the
/// view of its instance, or every leader change fails (found by simulator seed 13, joins).
#[test]
fn a_leader_change_right_after_an_addition_accepts_the_previous_views_proof() {
    let mut c = Cluster::new(Mode::Cft, 5, 21);
    c.crashed.insert(r(5)); // added, never started: messages to it are lost
    c.client_request(req(1, 1));
    c.run_until_quiet();
    let add = sign_change(&admin(), ViewId(0), vec![added(5)]);
    c.client_request(reconfig(1, 0, add));
    c.run_until_quiet();
    for i in 0..5 {
        let (_, view, _) = c.views[i].last().expect("view 1 installed");
        assert_eq!((view.id, view.members.len(), view.f), (ViewId(1), 6, 2));
    }
    let before = c.delivered[1].len();
    // The leader crashes; replicas 1..4 are a CFT majority of 6 (replica 5 never runs).
    c.crashed.insert(r(0));
    c.lenient = true; // forwarded and retransmitted requests meet duplicates
    c.client_request(in_view(req(1, 2), 1));
    c.run_with_timers(c.now_ms + 60_000);
    for i in 1..5 {
        assert_eq!(
            c.delivered[i].len(),
            before + 1,
            "replica {i} ordered in view 1 after the leader change"
        );
        assert_ne!(c.replicas[i].leader(), r(0));
    }
}

// ---- the state vote after a restart (DDS's REINIT with checkpoint hashes) -----------------

fn ckp_info(cid: u64, digest: u8) -> tagma_wire::CheckpointInfo {
    tagma_wire::CheckpointInfo {
        cid: ConsensusId(cid),
        len: 16,
        digest: Digest([digest; 32]),
    }
}

/// Replica `from`'s answer to a state query, handled by `replica` at `at`: its newest
/// checkpoint, as (instance, digest byte), and its next instance.
fn offer_from(replica: &mut Replica, at: u64, from: u32, checkpoint: Option<(u64, u8)>, next: u64) {
    let checkpoint = checkpoint.map(|(cid, digest)| ckp_info(cid, digest));
    replica
        .handle_peer(
            at,
            r(from),
            PeerInput::Transfer(tagma_core::transfer::TransferInput::Offer {
                checkpoint,
                next: ConsensusId(next),
            }),
        )
        .unwrap();
}

/// Replica `from`'s state query (`next`: its next instance), handled by `replica` at `at`.
fn query_from(replica: &mut Replica, at: u64, from: u32, next: u64) {
    replica
        .handle_peer(
            at,
            r(from),
            PeerInput::Transfer(tagma_core::transfer::TransferInput::Query {
                next: ConsensusId(next),
            }),
        )
        .unwrap();
}

/// The one 16-byte chunk of checkpoint `cid` from `from`, completing a fetch: what the
/// replica hands over to install.
fn deliver_checkpoint(
    replica: &mut Replica,
    at: u64,
    from: ReplicaId,
    cid: u64,
) -> tagma_core::transfer::StateToInstall {
    replica
        .handle_peer(
            at,
            from,
            PeerInput::Transfer(tagma_core::transfer::TransferInput::Chunk {
                cid: ConsensusId(cid),
                offset: 0,
                data: Bytes::from_static(&[7; 16]),
            }),
        )
        .unwrap();
    drain(replica)
        .into_iter()
        .find_map(|a| match a {
            Action::InstallState(s) => Some(s),
            _ => None,
        })
        .expect("the fetched state is handed over to install")
}

/// Whether the replica asked (since the last drain) for its state's digest or a checkpoint.
fn hashes_or_checkpoints(replica: &mut Replica) -> bool {
    drain(replica)
        .iter()
        .any(|a| matches!(a, Action::CheckpointNow { .. } | Action::DigestState { .. }))
}

/// Replica `from`'s vote in the state vote, handled by `replica` at `at`: the digest (byte)
/// of its state after instance `cid`.
fn vote_from(replica: &mut Replica, at: u64, from: u32, cid: u64, digest: u8) {
    replica
        .handle_peer(
            at,
            r(from),
            PeerInput::StateVote {
                cid: ConsensusId(cid),
                digest: Digest([digest; 32]),
            },
        )
        .unwrap();
}

/// A durable BFT replica 3 restarted at instance 3 (its checkpoint of instance 0 and the log
/// after it), once its peers told it their position `next`.
fn restarted_at_3_with_peers_at(next: u64) -> Replica {
    let log = decided_run(3);
    let mut r3 = durable(Mode::Bft, 4, 3);
    r3.resume(ConsensusId(2), 2, &[(ClientId(9), RequestSeq(3))], log);
    r3.note_checkpoint(ckp_info(0, 0xee));
    r3.start_startup_sync(100);
    drain(&mut r3);
    for from in [0, 1, 2] {
        r3.handle_peer(101, r(from), position(next, true)).unwrap();
    }
    r3
}

/// A durable BFT replica 3 restarted at instance 3 (its checkpoint of instance 0 and the log
/// after it) whose peers are all at 3 too: it catches up, asks for the digest of its state
/// after instance 2 (0xaa…) and, once it has it, for its peers' votes.
fn audited_restart() -> Replica {
    let mut r3 = restarted_at_3_with_peers_at(3);
    assert!(
        r3.is_starting_up(),
        "the state vote holds the synchronisation"
    );
    assert_eq!(
        drain(&mut r3),
        vec![Action::DigestState {
            cid: ConsensusId(2)
        }]
    );
    // A peer's query before the digest is known is answered without a vote, and the peer
    // gets the vote (before a new offer) once it is.
    query_from(&mut r3, 102, 1, 3);
    assert_eq!(
        drain(&mut r3),
        vec![Action::Send {
            to: r(1),
            msg: PeerMessage::StateOffer {
                checkpoint: Some(ckp_info(0, 0xee)),
                next: ConsensusId(3)
            }
        }]
    );
    r3.note_state_digest(ConsensusId(2), Digest([0xaa; 32]));
    assert_eq!(
        drain(&mut r3),
        vec![
            Action::Broadcast(PeerMessage::StateQuery {
                next: ConsensusId(3)
            }),
            Action::Send {
                to: r(1),
                msg: PeerMessage::StateVote {
                    cid: ConsensusId(2),
                    digest: Digest([0xaa; 32])
                }
            },
            Action::Send {
                to: r(1),
                msg: PeerMessage::StateOffer {
                    checkpoint: Some(ckp_info(0, 0xee)),
                    next: ConsensusId(3)
                }
            }
        ]
    );
    r3
}

/// f+1 peers hold the same state at the instance (by their votes, or a checkpoint there):
/// confirmed, the replica orders; a peer voted for another state, so it writes the fresh
/// checkpoint that peer will repair from meanwhile.
#[test]
fn the_hash_vote_confirms_a_state_that_f_plus_one_peers_hold() {
    let mut r3 = audited_restart();
    // One peer (possibly faulty) disagrees: not enough either way.
    vote_from(&mut r3, 103, 0, 2, 0xbb);
    vote_from(&mut r3, 103, 1, 2, 0xaa);
    // A vote on another instance counts for nothing.
    vote_from(&mut r3, 103, 2, 1, 0xaa);
    assert!(r3.is_starting_up());
    drain(&mut r3);
    // Replica 2 did not restart, and checkpointed that instance.
    offer_from(&mut r3, 104, 2, Some((2, 0xaa)), 3);
    assert!(!r3.is_starting_up());
    assert_eq!(r3.stats().state_votes_contradicted, 0);
    assert!(drain(&mut r3).contains(&Action::CheckpointNow {
        cid: ConsensusId(2)
    }));
    // It goes on answering with its vote (a peer restarted beside it may still vote).
    query_from(&mut r3, 105, 0, 3);
    assert!(drain(&mut r3).contains(&Action::Send {
        to: r(0),
        msg: PeerMessage::StateVote {
            cid: ConsensusId(2),
            digest: Digest([0xaa; 32])
        }
    }));
}

/// Peers past the instance (a replica restarting alone) will never checkpoint there: the
/// vote is inconclusive and the replica orders; until then, unsettled peers are asked again.
#[test]
fn the_hash_vote_is_inconclusive_when_the_peers_are_past_the_instance() {
    let mut r3 = audited_restart();
    offer_from(&mut r3, 103, 0, Some((0, 0xcc)), 9);
    offer_from(&mut r3, 103, 1, Some((1, 0xcc)), 3);
    assert!(r3.is_starting_up(), "replica 1 may still vote there");
    let due = r3.next_timeout_ms().unwrap();
    r3.handle_tick(due);
    let asked: Vec<Action> = drain(&mut r3)
        .into_iter()
        .filter(|a| {
            matches!(
                a,
                Action::Send {
                    msg: PeerMessage::StateQuery { .. },
                    ..
                }
            )
        })
        .collect();
    assert_eq!(asked.len(), 2, "replicas 1 and 2, not 0: {asked:?}");
    offer_from(&mut r3, due + 1, 1, Some((1, 0xcc)), 4);
    offer_from(&mut r3, due + 1, 2, None, 7);
    assert!(!r3.is_starting_up());
    assert_eq!(r3.stats().state_votes_contradicted, 0);
}

/// f+1 peers agree on another state: this replica's disk lied. It fetches their state at its
/// own position (a repair), installs it, and only then orders.
#[test]
fn a_state_that_f_plus_one_peers_contradict_is_fetched_again() {
    let mut r3 = audited_restart();
    vote_from(&mut r3, 103, 0, 2, 0xbb);
    vote_from(&mut r3, 103, 1, 2, 0xbb);
    assert!(r3.is_starting_up());
    assert_eq!(r3.stats().state_votes_contradicted, 1);
    assert!(r3.is_fetching_state());
    assert_eq!(
        drain(&mut r3),
        vec![
            // Its vote goes to every peer: the confirmed ones write the checkpoint it fetches.
            Action::Broadcast(PeerMessage::StateVote {
                cid: ConsensusId(2),
                digest: Digest([0xaa; 32])
            }),
            Action::Broadcast(PeerMessage::StateQuery {
                next: ConsensusId(3)
            })
        ]
    );
    // Its contradicted vote is no longer given.
    query_from(&mut r3, 104, 2, 3);
    assert!(!drain(&mut r3).iter().any(|a| matches!(
        a,
        Action::Send {
            msg: PeerMessage::StateVote { .. },
            ..
        }
    )));
    // The peers' fresh checkpoints, written after their own votes confirmed their state:
    // until they are there, nothing can be fetched.
    for from in [0, 1, 2] {
        offer_from(&mut r3, 104, from, Some((0, 0xee)), 3);
    }
    assert!(!drain(&mut r3).iter().any(|a| matches!(
        a,
        Action::Send {
            msg: PeerMessage::ChunkRequest { .. },
            ..
        }
    )));
    let due = r3.next_timeout_ms().unwrap();
    r3.handle_tick(due);
    drain(&mut r3);
    for from in [0, 1, 2] {
        offer_from(&mut r3, due + 1, from, Some((2, 0xbb)), 3);
    }
    let chunk = drain(&mut r3)
        .into_iter()
        .find_map(|a| match a {
            Action::Send {
                to,
                msg: PeerMessage::ChunkRequest { cid, offset, len },
            } => Some((to, cid, offset, len)),
            _ => None,
        })
        .expect("the checkpoint is fetched from a source");
    assert_eq!((chunk.1, chunk.2, chunk.3), (ConsensusId(2), 0, 16));
    let install = deliver_checkpoint(&mut r3, 105, chunk.0, 2);
    assert!(install.repair);
    assert_eq!(install.target(), ConsensusId(2));
    assert_eq!(install.matches_needed, 2);
    assert!(r3.is_starting_up(), "not before it is installed");
    r3.state_installed(
        106,
        tagma_core::transfer::InstallOutcome::Installed {
            last: ConsensusId(2),
            timestamp_ms: 2,
            sessions: vec![(ClientId(9), RequestSeq(3))],
            view: None,
        },
    );
    assert!(!r3.is_starting_up());
    // The repaired checkpoint replaces the lying one it offers.
    r3.note_checkpoint(ckp_info(2, 0xbb));
    query_from(&mut r3, 107, 0, 0);
    assert!(drain(&mut r3).contains(&Action::Send {
        to: r(0),
        msg: PeerMessage::StateOffer {
            checkpoint: Some(ckp_info(2, 0xbb)),
            next: ConsensusId(3)
        }
    }));
}

/// A chunk request for a checkpoint released since it was offered (two newer ones were
/// written) is answered with an empty chunk, which sends the fetcher to fresh offers at once
/// instead of waiting out its stall timeouts; a chunk of a checkpoint held is read.
#[test]
fn a_chunk_of_a_released_checkpoint_is_answered_with_an_empty_chunk() {
    let mut r0 = durable(Mode::Bft, 4, 0);
    for cid in [10, 20, 30] {
        r0.note_checkpoint(ckp_info(cid, cid as u8));
    }
    drain(&mut r0);
    let ask = |r0: &mut Replica, cid: u64| {
        r0.handle_peer(
            1,
            r(3),
            PeerInput::Transfer(tagma_core::transfer::TransferInput::ChunkRequest {
                cid: ConsensusId(cid),
                offset: 0,
                len: 16,
            }),
        )
    };
    ask(&mut r0, 10).unwrap();
    assert_eq!(
        drain(&mut r0),
        vec![Action::Send {
            to: r(3),
            msg: PeerMessage::Chunk {
                cid: ConsensusId(10),
                offset: 0,
                data: Bytes::new(),
            },
        }]
    );
    for held in [20, 30] {
        ask(&mut r0, held).unwrap();
        assert_eq!(
            drain(&mut r0),
            vec![Action::ReadChunk {
                to: r(3),
                cid: ConsensusId(held),
                offset: 0,
                len: 16,
            }]
        );
    }
}

/// CFT replicas and replicas that decided nothing yet skip the state vote.
#[test]
fn no_hash_vote_in_cft_or_before_anything_was_decided() {
    let mut fresh = durable(Mode::Bft, 4, 3);
    fresh.start_startup_sync(0);
    for from in [0, 1, 2] {
        fresh.handle_peer(1, r(from), position(0, true)).unwrap();
    }
    assert!(!fresh.is_starting_up());
    let log = decided_run(3);
    let mut c2 = durable(Mode::Cft, 3, 2);
    c2.resume(ConsensusId(2), 2, &[(ClientId(9), RequestSeq(3))], log);
    c2.start_startup_sync(0);
    for from in [0, 1] {
        c2.handle_peer(1, r(from), position(3, true)).unwrap();
    }
    assert!(!c2.is_starting_up());
    assert!(!hashes_or_checkpoints(&mut c2));
}

/// While the vote runs, decisions are not committed (the vote is on the state at its
/// instance); catch-up asks for them once it ends.
#[test]
fn no_decision_is_committed_while_the_hash_vote_runs() {
    let mut r3 = audited_restart();
    let next = decided_run(4).pop().unwrap();
    assert_eq!(
        r3.handle_peer(103, r(0), PeerInput::Decision(next)),
        Err(Rejection::StartingUp)
    );
    assert!(
        !drain(&mut r3)
            .iter()
            .any(|a| matches!(a, Action::Deliver(_)))
    );
}

/// A replica that fetches its state by state transfer while it synchronises (the others are
/// too far ahead) holds a state f+1 digests vouched for, not its disk's: no state vote.
#[test]
fn a_state_fetched_while_synchronising_is_not_voted_on() {
    let mut r3 = restarted_at_3_with_peers_at(500);
    assert!(
        r3.is_fetching_state(),
        "500 is too far ahead for decision forwarding"
    );
    for from in [0, 1, 2] {
        offer_from(&mut r3, 102, from, Some((499, 0xbb)), 500);
    }
    let chunk = drain(&mut r3)
        .into_iter()
        .find_map(|a| match a {
            Action::Send {
                to,
                msg: PeerMessage::ChunkRequest { .. },
            } => Some(to),
            _ => None,
        })
        .expect("the checkpoint is fetched");
    let install = deliver_checkpoint(&mut r3, 103, chunk, 499);
    assert!(!install.repair);
    r3.state_installed(
        104,
        tagma_core::transfer::InstallOutcome::Installed {
            last: ConsensusId(499),
            timestamp_ms: 2,
            sessions: vec![(ClientId(9), RequestSeq(3))],
            view: None,
        },
    );
    assert!(!r3.is_starting_up(), "ordering at once");
    assert!(!hashes_or_checkpoints(&mut r3));
}

/// Without a contradicting vote no fresh checkpoint is written (each replica's own checkpoint
/// and log hold its state); a contradicting vote that arrives after the vote ended asks for
/// one at the current position, once.
#[test]
fn the_fresh_checkpoint_is_written_only_for_a_peer_the_vote_contradicts() {
    let mut r3 = audited_restart();
    vote_from(&mut r3, 103, 0, 2, 0xaa);
    vote_from(&mut r3, 103, 1, 2, 0xaa);
    assert!(!r3.is_starting_up());
    assert!(!hashes_or_checkpoints(&mut r3));
    // A vote on another instance, or for the same state: nothing.
    vote_from(&mut r3, 104, 2, 1, 0xbb);
    vote_from(&mut r3, 104, 2, 2, 0xaa);
    assert!(!hashes_or_checkpoints(&mut r3));
    vote_from(&mut r3, 105, 2, 2, 0xbb);
    assert_eq!(
        drain(&mut r3),
        vec![Action::CheckpointNow {
            cid: ConsensusId(2)
        }]
    );
    vote_from(&mut r3, 106, 0, 2, 0xbb);
    assert!(drain(&mut r3).is_empty(), "once per vote");
}

/// A vote that ends inconclusive still stands: f+1 peers that outvote another replica may
/// each end inconclusive (here replica 2 did not restart and never votes), and that replica
/// repairs from their fresh checkpoints.
#[test]
fn an_inconclusive_vote_still_writes_the_checkpoint_a_contradicted_peer_needs() {
    let mut r3 = audited_restart();
    vote_from(&mut r3, 103, 0, 2, 0xbb);
    vote_from(&mut r3, 103, 1, 2, 0xaa);
    offer_from(&mut r3, 103, 2, Some((0, 0xee)), 3);
    assert!(r3.is_starting_up());
    drain(&mut r3);
    while r3.is_starting_up() {
        let now = r3.next_timeout_ms().unwrap();
        r3.handle_tick(now);
        assert!(now < 100_000, "the vote ends");
    }
    assert!(drain(&mut r3).contains(&Action::CheckpointNow {
        cid: ConsensusId(2)
    }));
}
