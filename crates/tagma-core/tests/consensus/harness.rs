//! What every consensus test builds on: replica parameters and keys, requests and batches, the
//! inputs a peer or the driver gives ([`Feed`]), the actions expected back, and the start-up
//! of a replica recovered from a disk ([`restart`], [`finish_startup`]).
//!
//! Authentication is the network stage's job: requests carry an empty MAC vector and batches
//! are marked authentic (or not) by hand.

pub mod cluster;

use bytes::Bytes;
use tagma_core::transfer::{self, TransferInput};
use tagma_core::{
    Action, AnswerBudget, Decision, Input, Mode, PeerInput, PreparedBatch, Quorums, Recovered,
    Rejection, Replica, ReplicaParams, Resume, Start,
};
use tagma_wire::{
    Accept, Batch, CheckpointInfo, ClientId, Collect, ConsensusId, DecidedInstance, Decode, Digest,
    Encode, Epoch, PeerMessage, Regency, ReplicaId, Request, RequestAuth, RequestEnvelope,
    RequestKind, RequestSeq, Signature, ViewId, Vote,
};

pub const E0: Epoch = Epoch(0);

pub fn r(id: u32) -> ReplicaId {
    ReplicaId(id)
}

/// A view of `n` replicas `0..n` in `mode` with the largest `f` it tolerates; no durable state.
pub fn params(mode: Mode, n: u32, me: u32) -> ReplicaParams {
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
        // Proposals go at once (the batch-fill tests set a wait).
        batch_fill_wait_ms: 0,
        request_bytes_max: 1024,
        client_pending_max: 100,
        pending_requests_max: 10_000,
        clients_max: 1000,
        future_messages_max: 1000,
        request_timeout_ms: 1000,
        clock_skew_max_ms: 1_000_000,
        seed: u64::from(me),
        member_keys: (0..n).map(|i| key(i).public()).collect(),
        decisions_kept: 64,
        durable: false,
        state_vote: true,
        checkpoint_period: 100,
        chunk_bytes: 1 << 20,
        state_bytes_max: 1 << 30,
        member_addrs: (0..n).map(addr).collect(),
        admin_key: Some(admin().public()),
        answer_budget: AnswerBudget::for_limits(64 << 10, 1 << 20),
    }
}

/// [`params`] of a replica with durable state, with or without the state vote after a restart.
pub fn durable_params(mode: Mode, n: u32, me: u32, state_vote: bool) -> ReplicaParams {
    ReplicaParams {
        durable: true,
        state_vote,
        ..params(mode, n, me)
    }
}

pub fn addr(id: u32) -> String {
    format!("127.0.0.1:{}", 7000 + id)
}

/// The administrator, who signs view changes.
pub fn admin() -> tagma_crypto::IdentityKey {
    tagma_crypto::IdentityKey::from_seed([0xad; 32])
}

pub fn key(id: u32) -> tagma_crypto::IdentityKey {
    tagma_crypto::IdentityKey::from_seed([id as u8 + 1; 32])
}

/// A fresh replica (nothing on disk, or no disk) started at time 0.
pub fn replica(p: ReplicaParams) -> Replica {
    let k = key(p.me.0);
    Replica::new(p, k, Start::Fresh, 0)
}

pub fn bft(me: u32) -> Replica {
    replica(params(Mode::Bft, 4, me))
}

/// A fresh durable replica (its disk empty, as in a new cluster: no start-up synchronisation).
pub fn durable(mode: Mode, n: u32, me: u32) -> Replica {
    replica(durable_params(mode, n, me, true))
}

/// A replica restarted at `now_ms` from what its disk held: the state after `resume`, its
/// `checkpoints` and its `votes`. It starts the start-up synchronisation at once (its
/// POSITION query is the first action to drain).
pub fn restart(
    p: ReplicaParams,
    resume: Option<Resume>,
    checkpoints: Vec<CheckpointInfo>,
    votes: Vec<Collect>,
    now_ms: u64,
) -> Replica {
    let k = key(p.me.0);
    let recovered = Recovered {
        resume,
        checkpoints,
        votes,
    };
    Replica::new(p, k, Start::Recovered(recovered), now_ms)
}

/// The state recovered from a disk whose last executed instance is `last` (its batch's
/// timestamp `timestamp_ms`), with the client sessions it leaves and the newest logged
/// decisions.
pub fn resumed(
    last: u64,
    timestamp_ms: u64,
    sessions: &[(ClientId, RequestSeq)],
    recent: Vec<DecidedInstance>,
) -> Resume {
    Resume {
        last: ConsensusId(last),
        timestamp_ms,
        sessions: sessions.to_vec(),
        recent,
        view: None,
    }
}

/// Ends the start-up synchronisation of a restarted replica the way the protocol does: every
/// peer answers its query with its position `next` (the replica's own, so nothing is caught
/// up). Without a state vote (CFT, `state_vote` off, or nothing decided) that ends it; the
/// actions it took are returned, its own POSITION announcements (query, then answer) first.
pub fn finish_startup(replica: &mut Replica, now_ms: u64) -> Vec<Action> {
    let next = replica.next_cid().0;
    let me = replica.me();
    let peers: Vec<ReplicaId> = replica
        .view()
        .members
        .iter()
        .map(|m| m.id)
        .filter(|id| *id != me)
        .collect();
    drain(replica);
    for from in peers {
        replica
            .receive(now_ms, from, position(next, true))
            .expect("a peer's position is taken");
    }
    assert!(
        !replica.is_starting_up(),
        "the start-up synchronisation ends once every peer is heard at its position"
    );
    let mut actions = drain(replica);
    for reply in [false, true] {
        assert_eq!(
            actions.remove(0),
            Action::Broadcast(PeerMessage::Position {
                next: ConsensusId(next),
                reply
            }),
            "its position is announced when the synchronisation ends"
        );
    }
    actions
}

/// The inputs of a test, each through [`Replica::handle`], named for what they are.
pub trait Feed {
    /// A client's request on an authenticated connection.
    fn receive_request(&mut self, now_ms: u64, request: RequestEnvelope) -> Result<(), Rejection>;
    /// A message from peer `from`, as the network stage prepared it.
    fn receive(&mut self, now_ms: u64, from: ReplicaId, input: PeerInput) -> Result<(), Rejection>;
    /// The timer tick at `now_ms`.
    fn tick(&mut self, now_ms: u64);
    /// The driver reports the vote records up to `seq` flushed.
    fn report_votes_durable(&mut self, now_ms: u64, seq: u64);
    /// The driver reports a checkpoint written.
    fn report_checkpoint(&mut self, now_ms: u64, info: CheckpointInfo);
    /// The driver reports the log flushed through instance `cid`.
    fn report_log_durable(&mut self, now_ms: u64, cid: u64);
    /// The driver's answer to `DigestState`.
    fn report_state_digest(&mut self, now_ms: u64, cid: u64, digest: Digest);
    /// The driver's verdict on `InstallState`.
    fn report_state_installed(
        &mut self,
        now_ms: u64,
        outcome: tagma_core::transfer::InstallOutcome,
    );
}

impl Feed for Replica {
    fn receive_request(&mut self, now_ms: u64, request: RequestEnvelope) -> Result<(), Rejection> {
        self.handle(now_ms, Input::ClientRequest(request))
    }
    fn receive(&mut self, now_ms: u64, from: ReplicaId, input: PeerInput) -> Result<(), Rejection> {
        self.handle(now_ms, Input::Peer { from, input })
    }
    fn tick(&mut self, now_ms: u64) {
        self.handle(now_ms, Input::Tick)
            .expect("a tick is never refused");
    }
    fn report_votes_durable(&mut self, now_ms: u64, seq: u64) {
        self.handle(now_ms, Input::VotesDurable { seq })
            .expect("a durability report is never refused");
    }
    fn report_log_durable(&mut self, now_ms: u64, cid: u64) {
        self.handle(now_ms, Input::LogDurable(ConsensusId(cid)))
            .expect("a durability report is never refused");
    }
    fn report_checkpoint(&mut self, now_ms: u64, info: CheckpointInfo) {
        self.handle(now_ms, Input::CheckpointWritten(info))
            .expect("a checkpoint report is never refused");
    }
    fn report_state_digest(&mut self, now_ms: u64, cid: u64, digest: Digest) {
        self.handle(
            now_ms,
            Input::StateDigest {
                cid: ConsensusId(cid),
                digest,
            },
        )
        .expect("a digest is never refused");
    }
    fn report_state_installed(
        &mut self,
        now_ms: u64,
        outcome: tagma_core::transfer::InstallOutcome,
    ) {
        self.handle(now_ms, Input::StateInstalled(outcome))
            .expect("an install verdict is never refused");
    }
}

/// An ACCEPT as replica `from` signs it (BFT replicas check the signatures a decision
/// rests on).
pub fn acc_by(from: u32, vote: Vote) -> Accept {
    Accept {
        vote,
        signature: tagma_core::proof::sign_accept(&key(from), &vote),
    }
}

/// An ACCEPT with a zero signature: for expected actions (see `unsigned`) and for inputs
/// that are rejected before any signature matters.
pub fn acc(vote: Vote) -> Accept {
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
        Action::Deliver(decision) => Action::Deliver(unlogged(decision)),
        other => other,
    }
}

/// A delivered decision without the signatures of the proof it carries for the runtime's
/// log (whichever ACCEPT signatures this replica gathered), after checking that the proof is
/// of its own instance, batch and epoch: every decision reaches the log with its proof.
pub fn unlogged(mut decision: Decision) -> Decision {
    let logged = &mut decision.logged;
    assert!(
        logged.cid == decision.cid
            && logged.batch == decision.batch.to_bytes()
            && logged.proof.epoch == decision.epoch,
        "the decision of {} reaches the log with its proof: {logged:?}",
        decision.cid
    );
    logged.proof.accepts.clear();
    decision
}

pub fn req(client: u64, seq: u64) -> RequestEnvelope {
    req_sized(client, seq, 8)
}

pub fn req_sized(client: u64, seq: u64, payload_bytes: usize) -> RequestEnvelope {
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
pub fn prepared(bytes: &Bytes) -> PreparedBatch {
    PreparedBatch {
        bytes: bytes.clone(),
        hash: tagma_crypto::digest(bytes),
        batch: Batch::decode(bytes).expect("a leader's batch decodes"),
        authentic: true,
    }
}

pub fn batch_of(timestamp_ms: u64, requests: Vec<RequestEnvelope>) -> Batch {
    Batch {
        timestamp_ms,
        seed: 0,
        requests,
    }
}

/// A PROPOSE input for `batch`, as the network stage would deliver it.
pub fn propose(cid: u64, batch: &Batch) -> (PeerInput, Digest) {
    let bytes = batch.to_bytes();
    let prepared = prepared(&bytes);
    let hash = prepared.hash;
    (
        PeerInput::Propose {
            cid: ConsensusId(cid),
            epoch: E0,
            batch: prepared,
        },
        hash,
    )
}

pub fn vote(cid: u64, hash: Digest) -> Vote {
    Vote {
        cid: ConsensusId(cid),
        epoch: E0,
        hash,
    }
}

pub fn position(next: u64, reply: bool) -> PeerInput {
    PeerInput::Position {
        next: ConsensusId(next),
        reply,
    }
}

/// Every action queued, in order, signatures zeroed (see `unsigned`).
pub fn drain(replica: &mut Replica) -> Vec<Action> {
    std::iter::from_fn(|| replica.poll_action())
        .map(unsigned)
        .collect()
}

/// Drains a durable replica as a driver whose vote flushes complete at once: every flush it
/// asks for is reported (at `now_ms`) and what that releases follows in the same list.
pub fn drain_durable(replica: &mut Replica, now_ms: u64) -> Vec<Action> {
    let actions = drain(replica);
    flushed(replica, now_ms, actions)
}

/// `actions` (drained from a durable replica) followed by what reporting their vote flushes
/// durable at `now_ms` releases, until no flush is left unreported.
pub fn flushed(replica: &mut Replica, now_ms: u64, mut all: Vec<Action>) -> Vec<Action> {
    let mut reported = 0;
    loop {
        let newest = persisted(&all).iter().map(|p| p.0).max().unwrap_or(0);
        if flushes(&all) == 0 || newest <= reported {
            return all;
        }
        reported = newest;
        replica.report_votes_durable(now_ms, newest);
        all.extend(drain(replica));
    }
}

pub fn write(cid: u64, hash: Digest) -> Action {
    Action::Broadcast(PeerMessage::Write(vote(cid, hash)))
}

pub fn accept(cid: u64, hash: Digest) -> Action {
    Action::Broadcast(PeerMessage::Accept(acc(vote(cid, hash))))
}

/// A decision as the harness compares it (see [`unlogged`]).
pub fn deliver(cid: u64, hash: Digest, batch: Batch) -> Action {
    let logged = tagma_wire::DecidedInstance {
        cid: ConsensusId(cid),
        batch: batch.to_bytes(),
        proof: tagma_wire::DecisionProof {
            epoch: E0,
            accepts: vec![],
        },
    };
    Action::Deliver(Decision {
        cid: ConsensusId(cid),
        epoch: E0,
        hash,
        batch,
        logged,
    })
}

/// The vote record write a durable replica asks for after an input.
pub fn write_votes(flush: bool, next: u64) -> Action {
    Action::WriteVotes {
        flush,
        next: ConsensusId(next),
    }
}

/// The PROPOSE a leader broadcast as the first message of `actions`; checks that the other
/// messages are exactly its own vote (`Write` in BFT, `Accept` in CFT).
pub fn take_proposal(actions: &[Action], cid: u64, mode: Mode) -> (Bytes, Digest, Batch) {
    let actions = &sent(actions);
    assert_eq!(actions.len(), 2, "PROPOSE then own vote: {actions:?}");
    let Action::Broadcast(PeerMessage::Propose(p)) = &actions[0] else {
        panic!("expected a PROPOSE, got {:?}", actions[0]);
    };
    assert_eq!((p.cid, p.epoch), (ConsensusId(cid), E0));
    let v = prepared(&p.batch);
    let own_vote = match mode {
        Mode::Bft => write(cid, v.hash),
        Mode::Cft => accept(cid, v.hash),
    };
    assert_eq!(actions[1], own_vote);
    (p.batch.clone(), v.hash, v.batch)
}

/// `actions` without the vote records of durable replicas (the votes persisted, and their
/// writes).
pub fn sent(actions: &[Action]) -> Vec<Action> {
    actions
        .iter()
        .filter(|a| !matches!(a, Action::PersistVote { .. } | Action::WriteVotes { .. }))
        .cloned()
        .collect()
}

/// Whether `actions` hold a PROPOSE.
pub fn proposes(actions: &[Action]) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::Broadcast(PeerMessage::Propose(_))))
}

/// The flushes asked for in `actions` (`WriteVotes { flush: true, .. }`).
pub fn flushes(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::WriteVotes { flush: true, .. }))
        .count()
}

pub fn ids(batch: &Batch) -> Vec<(u64, u64)> {
    batch
        .requests
        .iter()
        .map(|e| (e.request.client.0, e.request.seq.0))
        .collect()
}

/// The votes persisted by `actions`: (seq, cid, regency, write quorum claimed, values
/// written).
pub type Persisted = (
    u64,
    u64,
    Regency,
    Option<(Epoch, Digest)>,
    Vec<(Epoch, Bytes)>,
);

pub fn persisted(actions: &[Action]) -> Vec<Persisted> {
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

/// Completes instance `cid` on a BFT replica holding the proposal: WRITEs and ACCEPTs from
/// replicas 1 and 2 (the leader 0 is assumed to be the replica itself or to have voted).
pub fn complete_on_leader(leader: &mut Replica, cid: u64, hash: Digest) -> Vec<Action> {
    for from in [1, 2] {
        leader
            .receive(0, r(from), PeerInput::Write(vote(cid, hash)))
            .unwrap();
    }
    for from in [1, 2] {
        leader
            .receive(0, r(from), PeerInput::Accept(acc_by(from, vote(cid, hash))))
            .unwrap();
    }
    drain(leader)
}

/// Decides `batch` as cid `cid` on a BFT follower (replica 1).
pub fn decide_on_follower(follower: &mut Replica, cid: u64, batch: &Batch) {
    let (input, hash) = propose(cid, batch);
    follower.receive(1, r(0), input).unwrap();
    for from in [0, 2] {
        follower
            .receive(1, r(from), PeerInput::Write(vote(cid, hash)))
            .unwrap();
        follower
            .receive(1, r(from), PeerInput::Accept(acc_by(from, vote(cid, hash))))
            .unwrap();
    }
    let actions = drain(follower);
    assert_eq!(actions.last(), Some(&deliver(cid, hash, batch.clone())));
}

/// Decides instances `0..count` on a fresh BFT leader and returns what its log would hold.
pub fn decided_run(count: u64) -> Vec<DecidedInstance> {
    let mut leader = bft(0);
    (0..count)
        .map(|cid| {
            leader.receive_request(cid, req(9, cid + 1)).unwrap();
            let (_, hash, _) = take_proposal(&drain(&mut leader), cid, Mode::Bft);
            complete_on_leader(&mut leader, cid, hash);
            leader.decided_instance(ConsensusId(cid)).unwrap()
        })
        .collect()
}

/// The state queries sent to one peer among `actions`.
pub fn state_queries(actions: Vec<Action>) -> Vec<Action> {
    actions
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
        .collect()
}

pub fn ckp_info(cid: u64, digest: u8) -> CheckpointInfo {
    CheckpointInfo {
        cid: ConsensusId(cid),
        len: 16,
        digest: Digest([digest; 32]),
    }
}

// ---- state transfer and the state vote -----------------------------------------------------

/// Replica `from`'s answer to a state query, handled by `replica` at `at`: its newest
/// checkpoint, as (instance, digest byte), and its next instance.
pub fn offer_from(
    replica: &mut Replica,
    at: u64,
    from: u32,
    checkpoint: Option<(u64, u8)>,
    next: u64,
) {
    let checkpoint = checkpoint.map(|(cid, digest)| ckp_info(cid, digest));
    replica
        .receive(
            at,
            r(from),
            PeerInput::Transfer(TransferInput::Offer {
                checkpoint,
                next: ConsensusId(next),
            }),
        )
        .unwrap();
}

/// Replica `from`'s state query (`next`: its next instance), handled by `replica` at `at`.
pub fn query_from(replica: &mut Replica, at: u64, from: u32, next: u64) {
    replica
        .receive(
            at,
            r(from),
            PeerInput::Transfer(TransferInput::Query {
                next: ConsensusId(next),
            }),
        )
        .unwrap();
}

/// The one 16-byte chunk of checkpoint `cid` from `from`, completing a fetch: what the
/// replica hands over to install.
pub fn deliver_checkpoint(
    replica: &mut Replica,
    at: u64,
    from: ReplicaId,
    cid: u64,
) -> transfer::StateToInstall {
    replica
        .receive(
            at,
            from,
            PeerInput::Transfer(TransferInput::Chunk {
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
pub fn hashes_or_checkpoints(replica: &mut Replica) -> bool {
    drain(replica)
        .iter()
        .any(|a| matches!(a, Action::CheckpointNow { .. } | Action::DigestState { .. }))
}

/// A durable BFT replica 3 restarted at instance 3 (its checkpoint of instance 0 and the log
/// after it), once its peers told it their position `next`.
pub fn restarted_at_3_with_peers_at(next: u64) -> Replica {
    let log = decided_run(3);
    let resume = resumed(2, 2, &[(ClientId(9), RequestSeq(3))], log);
    let mut r3 = restart(
        durable_params(Mode::Bft, 4, 3, true),
        Some(resume),
        vec![ckp_info(0, 0xee)],
        vec![],
        100,
    );
    drain(&mut r3);
    for from in [0, 1, 2] {
        r3.receive(101, r(from), position(next, true)).unwrap();
    }
    r3
}
