use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tagma_wire::{
    Batch, ClientId, ConsensusId, Digest, Reply, Request, RequestAuth, RequestEnvelope,
    RequestKind, RequestSeq, ViewId,
};

use crate::conformance::check_service;
use crate::{Context, Executor, Service, ServiceError, request_seed};

/// Deliberate defects for proving that the conformance suite catches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flaw {
    None,
    /// Replies include a process-global counter (non-deterministic across instances).
    GlobalCounterInReply,
    /// The snapshot drops the last log byte.
    LossySnapshot,
    /// Unordered execution bumps a counter that is part of the digest.
    MutatingUnordered,
    /// `install_snapshot` indexes without bounds checks.
    PanickingInstall,
}

static GLOBAL: AtomicU64 = AtomicU64::new(0);

/// Appends every request (and its context's seed and timestamp) to a log.
struct LogService {
    log: Vec<u8>,
    reads: Cell<u64>,
    flaw: Flaw,
}

impl LogService {
    fn new(flaw: Flaw) -> Self {
        LogService {
            log: Vec::new(),
            reads: Cell::new(0),
            flaw,
        }
    }
}

impl Service for LogService {
    fn execute_ordered(&mut self, request: &Bytes, ctx: &Context) -> Bytes {
        self.log.extend_from_slice(request);
        self.log.extend_from_slice(&ctx.seed.to_le_bytes());
        self.log.extend_from_slice(&ctx.timestamp_ms.to_le_bytes());
        let mut reply = (self.log.len() as u64).to_le_bytes().to_vec();
        if self.flaw == Flaw::GlobalCounterInReply {
            reply.extend_from_slice(&GLOBAL.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        }
        Bytes::from(reply)
    }
    fn execute_unordered(&self, request: &Bytes, _ctx: &Context) -> Bytes {
        if self.flaw == Flaw::MutatingUnordered {
            self.reads.set(self.reads.get() + 1);
        }
        let count = self.log.windows(request.len().max(1)).count();
        Bytes::from((count as u64).to_le_bytes().to_vec())
    }
    fn snapshot(&self) -> Bytes {
        let mut out = vec![1u8];
        let mut log = self.log.clone();
        if self.flaw == Flaw::LossySnapshot {
            log.pop();
        }
        out.extend_from_slice(&log);
        Bytes::from(out)
    }
    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError> {
        if self.flaw == Flaw::PanickingInstall {
            // Deliberately unchecked.
            let version = snapshot[0];
            let _ = snapshot[1];
            if version != 1 {
                return Err(ServiceError::InvalidSnapshot("bad version".into()));
            }
        }
        match snapshot.split_first() {
            Some((1, rest)) => {
                self.log = rest.to_vec();
                Ok(())
            }
            Some(_) => Err(ServiceError::InvalidSnapshot("bad version".into())),
            None => Err(ServiceError::InvalidSnapshot("empty".into())),
        }
    }
    fn state_digest(&self) -> Digest {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&self.log);
        hasher.update(&self.reads.get().to_le_bytes());
        Digest(hasher.finalize().into())
    }
}

fn workload() -> Vec<Bytes> {
    (0..40u32)
        .map(|i| Bytes::from(format!("req-{i}-{}", i * i % 7)))
        .collect()
}

#[test]
fn conformance_accepts_correct_service() {
    check_service(|| LogService::new(Flaw::None), &workload()).unwrap();
    check_service(|| LogService::new(Flaw::None), &[]).unwrap();
    check_service(
        || LogService::new(Flaw::None),
        &[Bytes::from_static(b"one")],
    )
    .unwrap();
}

#[test]
fn conformance_rejects_nondeterministic_replies() {
    let err =
        check_service(|| LogService::new(Flaw::GlobalCounterInReply), &workload()).unwrap_err();
    assert!(err.contains("determinism"), "{err}");
}

#[test]
fn conformance_rejects_lossy_snapshot() {
    let err = check_service(|| LogService::new(Flaw::LossySnapshot), &workload()).unwrap_err();
    assert!(err.contains("snapshot"), "{err}");
}

#[test]
fn conformance_rejects_mutating_unordered() {
    let err = check_service(|| LogService::new(Flaw::MutatingUnordered), &workload()).unwrap_err();
    assert!(err.contains("unordered"), "{err}");
}

#[test]
fn conformance_rejects_panicking_install() {
    let err = check_service(|| LogService::new(Flaw::PanickingInstall), &workload()).unwrap_err();
    assert!(err.contains("panicked"), "{err}");
}

/// Echoes the context it was given, for checking what the executor passes.
struct EchoService {
    executed: u64,
}

fn encode_ctx(request: &Bytes, ctx: &Context) -> Bytes {
    let mut out = Vec::new();
    out.extend_from_slice(&ctx.client.0.to_le_bytes());
    out.extend_from_slice(&ctx.seq.0.to_le_bytes());
    out.extend_from_slice(&ctx.cid.map_or(u64::MAX, |c| c.0).to_le_bytes());
    out.extend_from_slice(&ctx.timestamp_ms.to_le_bytes());
    out.extend_from_slice(&ctx.seed.to_le_bytes());
    out.extend_from_slice(request);
    Bytes::from(out)
}

impl Service for EchoService {
    fn execute_ordered(&mut self, request: &Bytes, ctx: &Context) -> Bytes {
        self.executed += 1;
        encode_ctx(request, ctx)
    }
    fn execute_unordered(&self, request: &Bytes, ctx: &Context) -> Bytes {
        encode_ctx(request, ctx)
    }
    fn snapshot(&self) -> Bytes {
        Bytes::from(self.executed.to_le_bytes().to_vec())
    }
    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError> {
        let bytes: [u8; 8] = snapshot[..]
            .try_into()
            .map_err(|_| ServiceError::InvalidSnapshot("length".into()))?;
        self.executed = u64::from_le_bytes(bytes);
        Ok(())
    }
    fn state_digest(&self) -> Digest {
        Digest(blake3::hash(&self.executed.to_le_bytes()).into())
    }
}

fn request(client: u64, seq: u64, kind: RequestKind, payload: &'static [u8]) -> RequestEnvelope {
    RequestEnvelope {
        request: Request {
            client: ClientId(client),
            seq: RequestSeq(seq),
            kind,
            view: ViewId(0),
            payload: Bytes::from_static(payload),
        },
        auth: RequestAuth::Macs(Vec::new()),
    }
}

fn batch(requests: Vec<RequestEnvelope>) -> Batch {
    Batch {
        timestamp_ms: 1234,
        seed: 99,
        requests,
    }
}

#[test]
fn executes_batches_in_order_and_caches_replies() {
    let mut exec = Executor::new(EchoService { executed: 0 }, ViewId(3), 4, 16);
    assert_eq!(exec.executed_instances(), 0);
    let replies = exec.execute_batch(
        ConsensusId(0),
        &batch(vec![
            request(1, 1, RequestKind::Ordered, b"a"),
            request(2, 1, RequestKind::Ordered, b"b"),
            request(1, 2, RequestKind::Ordered, b"c"),
        ]),
    );
    assert_eq!(replies.len(), 3);
    for (i, (reply, (client, seq, payload))) in replies
        .iter()
        .zip([(1, 1, &b"a"[..]), (2, 1, b"b"), (1, 2, b"c")])
        .enumerate()
    {
        let ctx = Context {
            client: ClientId(client),
            seq: RequestSeq(seq),
            cid: Some(ConsensusId(0)),
            timestamp_ms: 1234,
            seed: request_seed(99, i),
        };
        assert_eq!(
            reply,
            &Reply {
                client: ClientId(client),
                seq: RequestSeq(seq),
                kind: RequestKind::Ordered,
                view: ViewId(3),
                payload: encode_ctx(&Bytes::from_static(payload), &ctx),
            }
        );
        assert_eq!(
            exec.cached_reply(ClientId(client), RequestSeq(seq))
                .as_ref(),
            Some(reply)
        );
    }
    assert_eq!(exec.executed_instances(), 1);
    assert_eq!(exec.executed_requests(), 3);
    assert_eq!(exec.service.executed, 3);

    // An empty batch still advances the instance counter.
    assert!(
        exec.execute_batch(ConsensusId(1), &batch(vec![]))
            .is_empty()
    );
    assert_eq!(exec.executed_instances(), 2);
    assert_eq!(exec.executed_requests(), 3);
    assert!(exec.cached_reply(ClientId(1), RequestSeq(3)).is_none());

    exec.set_view(ViewId(4));
    assert_eq!(exec.view(), ViewId(4));
    let replies = exec.execute_batch(
        ConsensusId(2),
        &batch(vec![request(1, 3, RequestKind::Ordered, b"d")]),
    );
    assert_eq!(replies[0].view, ViewId(4));
    assert_eq!(exec.state_digest(), exec.service.state_digest());
}

#[test]
#[should_panic(expected = "out of order")]
fn out_of_order_instance_panics() {
    let mut exec = Executor::new(EchoService { executed: 0 }, ViewId(0), 4, 16);
    exec.execute_batch(ConsensusId(1), &batch(vec![]));
}

#[test]
#[cfg(not(debug_assertions))]
fn unordered_requests_in_batch_are_skipped() {
    let mut exec = Executor::new(EchoService { executed: 0 }, ViewId(0), 4, 16);
    let replies = exec.execute_batch(
        ConsensusId(0),
        &batch(vec![
            request(1, 1, RequestKind::Unordered, b"x"),
            request(1, 1, RequestKind::Ordered, b"y"),
        ]),
    );
    assert_eq!(replies.len(), 1);
    assert_eq!(exec.executed_requests(), 1);
}

#[test]
fn unordered_execution() {
    let exec = Executor::new(EchoService { executed: 0 }, ViewId(2), 4, 16);
    let payload = Bytes::from_static(b"q");
    let reply = exec.execute_unordered(ClientId(5), RequestSeq(9), &payload, 777);
    let ctx = Context {
        client: ClientId(5),
        seq: RequestSeq(9),
        cid: None,
        timestamp_ms: 777,
        seed: 0,
    };
    assert_eq!(
        reply,
        Reply {
            client: ClientId(5),
            seq: RequestSeq(9),
            kind: RequestKind::Unordered,
            view: ViewId(2),
            payload: encode_ctx(&payload, &ctx),
        }
    );
    assert_eq!(exec.executed_requests(), 0);
    assert!(exec.cached_reply(ClientId(5), RequestSeq(9)).is_none());
}

#[test]
fn request_seed_is_deterministic_and_spread() {
    assert_eq!(request_seed(42, 3), request_seed(42, 3));
    let seeds: std::collections::HashSet<u64> = (0..1000).map(|i| request_seed(42, i)).collect();
    assert_eq!(seeds.len(), 1000);
    assert_ne!(request_seed(42, 0), request_seed(43, 0));
    assert_ne!(request_seed(0, 0), 0);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "unordered request in the batch")]
fn unordered_request_in_batch_trips_debug_assertion() {
    let mut exec = Executor::new(EchoService { executed: 0 }, ViewId(0), 4, 16);
    exec.execute_batch(
        ConsensusId(0),
        &batch(vec![request(1, 1, RequestKind::Unordered, b"x")]),
    );
}

/// Replies restored from a checkpoint hold their own bytes: a slice would keep the whole
/// checkpoint alive for as long as a reply of a client that never comes back stays cached.
#[test]
fn restored_replies_share_no_bytes_with_the_checkpoint() {
    let mut a = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    a.execute_batch(
        ConsensusId(0),
        &batch(vec![request(1, 1, RequestKind::Ordered, b"payload")]),
    );
    let ckp = a.checkpoint();
    let mut b = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    b.restore(&ckp).unwrap();
    let reply = b.cached_reply(ClientId(1), RequestSeq(1)).expect("cached");
    assert_eq!(reply, a.cached_reply(ClientId(1), RequestSeq(1)).unwrap());
    let start = ckp.as_ptr() as usize;
    let at = reply.payload.as_ptr() as usize;
    assert!(
        !(start..start + ckp.len()).contains(&at),
        "the reply is a slice of the checkpoint"
    );
}

/// A checkpoint carries everything: an executor restored from it continues exactly like the
/// one that took it (position, sessions, cached replies, service state), and a damaged one is
/// refused.
#[test]
fn checkpoint_restores_the_whole_executor() {
    let mut a = Executor::new(EchoService { executed: 0 }, ViewId(2), 2, 16);
    for cid in 0..3u64 {
        a.execute_batch(
            ConsensusId(cid),
            &batch(vec![
                request(1, 2 * cid + 1, RequestKind::Ordered, b"x"),
                request(1, 2 * cid + 2, RequestKind::Ordered, b"y"),
                request(7, cid + 1, RequestKind::Ordered, b"z"),
            ]),
        );
    }
    let ckp = a.checkpoint();
    let mut b = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    b.restore(&ckp).unwrap();
    assert_eq!(b.executed_instances(), 3);
    assert_eq!(b.executed_requests(), 9);
    assert_eq!(b.view(), ViewId(2));
    assert_eq!(b.last_timestamp_ms(), 1234);
    assert_eq!(
        b.sessions(),
        vec![(ClientId(1), RequestSeq(6)), (ClientId(7), RequestSeq(3))]
    );
    assert_eq!(b.sessions(), a.sessions());
    assert_eq!(b.state_digest(), a.state_digest());
    for (client, seq) in [(1, 5), (1, 6), (7, 2), (7, 3), (1, 4)] {
        assert_eq!(
            b.cached_reply(ClientId(client), RequestSeq(seq)),
            a.cached_reply(ClientId(client), RequestSeq(seq)),
            "reply {client}/{seq}"
        );
    }
    assert!(b.cached_reply(ClientId(1), RequestSeq(5)).is_some());
    assert!(
        b.cached_reply(ClientId(1), RequestSeq(4)).is_none(),
        "2 per client"
    );
    assert_eq!(b.checkpoint(), ckp, "a checkpoint is a fixed point");
    let deferred = a.checkpoint_deferred();
    assert!(!deferred.is_frozen(), "EchoService does not freeze");
    assert_eq!(
        deferred.finish(),
        ckp,
        "a deferred checkpoint is the same bytes"
    );
    assert_eq!(
        a.checkpoint_digest(),
        crate::checkpoint_digest(&ckp),
        "the streamed digest is the checkpoint's"
    );
    let next = batch(vec![request(7, 4, RequestKind::Ordered, b"w")]);
    assert_eq!(
        a.execute_batch(ConsensusId(3), &next),
        b.execute_batch(ConsensusId(3), &next)
    );
    // Truncations and a wrong version are refused, never a panic.
    for cut in [0, 1, 10, 28, 36, 48, ckp.len() - 1] {
        let mut c = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
        assert!(c.restore(&ckp.slice(..cut)).is_err(), "cut at {cut}");
    }
    let mut wrong = ckp.to_vec();
    wrong[0] = 9;
    assert!(b.restore(&Bytes::from(wrong)).is_err());
}

/// Instances `0..n` of a history: instance `cid` carries `per_instance` requests of client 1.
fn history(n: u64, per_instance: u64) -> Vec<(ConsensusId, Batch)> {
    (0..n)
        .map(|cid| {
            let requests = (0..per_instance)
                .map(|i| request(1, cid * per_instance + i + 1, RequestKind::Ordered, b"op"))
                .collect();
            (ConsensusId(cid), batch(requests))
        })
        .collect()
}

fn decided(cid: ConsensusId, b: &Batch) -> tagma_wire::DecidedInstance {
    tagma_wire::DecidedInstance {
        cid,
        batch: tagma_wire::Encode::to_bytes(b),
        proof: tagma_wire::DecisionProof {
            epoch: tagma_wire::Epoch(0),
            accepts: vec![],
        },
    }
}

/// How a source or voucher announces the checkpoint `state` of instance `cid`.
fn info(cid: u64, state: &[u8]) -> tagma_wire::CheckpointInfo {
    tagma_wire::CheckpointInfo {
        cid: ConsensusId(cid),
        len: state.len() as u64,
        digest: crate::checkpoint_digest(state),
    }
}

#[test]
fn a_fetched_state_installs_only_when_enough_vouchers_match_and_rolls_back_otherwise() {
    // The correct replicas' history, with checkpoints at 4 (the source's), 7 and 9 (vouchers).
    let good = history(12, 2);
    let mut a = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    let mut at = std::collections::BTreeMap::new();
    for (cid, b) in &good {
        a.execute_batch(*cid, b);
        at.insert(cid.0, a.checkpoint());
    }
    let vouchers = [info(7, &at[&7]), info(9, &at[&9])];
    let log: Vec<_> = good[5..=9].iter().map(|(c, b)| decided(*c, b)).collect();
    // A lagging replica at instance 2.
    let mut b = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    for (cid, batch) in &good[..2] {
        b.execute_batch(*cid, batch);
    }
    let before = b.checkpoint();
    // A faulty source's checkpoint: a well-formed state at instance 4, but not the one the
    // history leads to. It installs, but the correct vouchers disagree: rolled back.
    let mut liar = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    for (cid, batch) in history(5, 3) {
        liar.execute_batch(cid, &batch);
    }
    let lie = liar.checkpoint();
    let err = b
        .install_fetched(&lie, Some(&info(4, &lie)), &log, &vouchers, 2)
        .unwrap_err();
    assert!(err.contains("only 1 of the source and 2 vouchers"), "{err}");
    assert_eq!(b.checkpoint(), before, "the previous state is back");
    // With f = 2 (f + 1 = 3 matches needed), the lying source and a colluding voucher are
    // not enough.
    let mut lying_history = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    lying_history.restore(&lie).unwrap();
    for (cid, batch) in &good[5..=7] {
        lying_history.execute_batch(*cid, batch);
    }
    let colluding = [info(7, &lying_history.checkpoint()), vouchers[1]];
    assert!(
        b.install_fetched(&lie, Some(&info(4, &lie)), &log, &colluding, 3)
            .is_err()
    );
    assert_eq!(b.checkpoint(), before);
    // A log with a hole, and a checkpoint at another instance than announced, are refused.
    let holed: Vec<_> = log.iter().filter(|d| d.cid.0 != 6).cloned().collect();
    assert!(
        b.install_fetched(&at[&4], Some(&info(4, &at[&4])), &holed, &vouchers, 2)
            .unwrap_err()
            .contains("skips")
    );
    assert!(
        b.install_fetched(&at[&4], Some(&info(5, &at[&4])), &log, &vouchers, 2)
            .is_err()
    );
    // Bytes that are not what the source announced are refused before anything changes.
    let mut tampered = at[&4].to_vec();
    tampered[0] ^= 1;
    assert!(
        b.install_fetched(
            &Bytes::from(tampered),
            Some(&info(4, &at[&4])),
            &log,
            &vouchers,
            2
        )
        .unwrap_err()
        .contains("does not match")
    );
    assert_eq!(b.checkpoint(), before);
    // The correct source: the vouchers match, the state is the history's at instance 9.
    assert_eq!(
        b.install_fetched(&at[&4], Some(&info(4, &at[&4])), &log, &vouchers, 2),
        Ok(2)
    );
    assert_eq!(b.checkpoint(), at[&9]);
    // Once at instance 9, a state that ends before it is refused untouched: installing it
    // would go back in time (the replica caught up while the state was fetched).
    let early = &log[..2];
    assert!(
        b.install_fetched(&at[&4], Some(&info(4, &at[&4])), early, &vouchers[..0], 1)
            .unwrap_err()
            .contains("already executed beyond instance 6")
    );
    assert_eq!(b.checkpoint(), at[&9]);
    // A voucher whose checkpoint is at the source's own instance vouches by its digest (a
    // state that needs no log at all can be validated).
    let mut c = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    let same = [info(4, &at[&4])];
    assert_eq!(
        c.install_fetched(&at[&4], Some(&info(4, &at[&4])), &[], &same, 2),
        Ok(2)
    );
    assert_eq!(c.checkpoint(), at[&4]);
    let other = [tagma_wire::CheckpointInfo {
        cid: ConsensusId(4),
        ..info(4, &lie)
    }];
    assert!(
        c.install_fetched(&at[&4], Some(&info(4, &at[&4])), &[], &other, 2)
            .is_err()
    );
    assert_eq!(b.executed_instances(), 10);
    assert_eq!(b.state_digest(), {
        let mut c = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
        c.restore(&at[&9]).unwrap();
        c.state_digest()
    });
}

/// The core delivers the instances decided while a state was fetched, also those the
/// installed state covers: `execute_decided` skips those and executes the next one; without
/// an install it skips nothing.
#[test]
fn execute_decided_skips_the_deliveries_an_installed_state_covers() {
    let good = history(5, 1);
    // Without an install every delivery is executed, as `execute_batch` would.
    let mut a = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    let mut plain = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    let mut at = std::collections::BTreeMap::new();
    let mut replies = std::collections::BTreeMap::new();
    for (cid, b) in &good {
        let executed = a
            .execute_decided(*cid, b)
            .expect("nothing installed: executed");
        assert_eq!(executed, plain.execute_batch(*cid, b));
        at.insert(cid.0, a.checkpoint());
        replies.insert(cid.0, executed);
    }
    assert_eq!(a.executed_instances(), 5);
    // A replica executes instance 0, then installs the state after instance 2 that it
    // fetched meanwhile; the core then delivers 1 and 2 (decided while it fetched), and 3.
    let mut b = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    assert_eq!(
        b.execute_decided(good[0].0, &good[0].1),
        Some(replies[&0].clone())
    );
    let vouchers = [info(2, &at[&2])];
    assert_eq!(
        b.install_fetched(&at[&2], Some(&info(2, &at[&2])), &[], &vouchers, 2),
        Ok(2)
    );
    for (cid, batch) in &good[1..=2] {
        assert_eq!(
            b.execute_decided(*cid, batch),
            None,
            "instance {cid:?} is covered"
        );
        assert_eq!(b.checkpoint(), at[&2], "a skipped delivery changes nothing");
    }
    assert_eq!(
        b.execute_decided(good[3].0, &good[3].1),
        Some(replies[&3].clone()),
        "the first instance after the installed state is executed"
    );
    assert_eq!(b.checkpoint(), at[&3]);
    assert_eq!(b.executed_instances(), 4);
}

fn member(id: u32) -> tagma_wire::ViewMember {
    tagma_wire::ViewMember {
        id: tagma_wire::ReplicaId(id),
        addr: format!("127.0.0.1:{}", 7000 + id),
        key: tagma_crypto::IdentityKey::from_seed([id as u8 + 1; 32]).public(),
    }
}

fn membership(admin: &tagma_crypto::IdentityKey) -> tagma_core::view::Membership {
    tagma_core::view::Membership {
        view: tagma_wire::View {
            id: ViewId(0),
            f: 1,
            members: (0..4).map(member).collect(),
        },
        admin: Some(admin.public()),
        mode: tagma_core::Mode::Bft,
        history: Vec::new(),
    }
}

fn reconfigure(client: u64, seq: u64, change: tagma_wire::ViewChange) -> RequestEnvelope {
    let mut r = request(client, seq, RequestKind::Reconfigure, b"");
    r.request.payload = tagma_wire::Encode::to_bytes(&change);
    r
}

fn outcome(reply: &Reply) -> tagma_wire::ReconfigureOutcome {
    <tagma_wire::ReconfigureOutcome as tagma_wire::Decode>::decode(&reply.payload).unwrap()
}

#[test]
fn view_changes_are_judged_and_answered_by_the_executor_never_by_the_service() {
    use tagma_core::view::sign_change;
    use tagma_wire::{ReconfigureOutcome, ViewOp};
    let admin = tagma_crypto::IdentityKey::from_seed([9; 32]);
    let mut exec = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16)
        .with_membership(membership(&admin));
    let add = sign_change(&admin, ViewId(0), vec![ViewOp::Add(member(4))]);
    let replayed = add.clone();
    let forged = sign_change(
        &tagma_crypto::IdentityKey::from_seed([10; 32]),
        ViewId(1),
        vec![ViewOp::Remove(tagma_wire::ReplicaId(0))],
    );
    let replies = exec.execute_batch(
        ConsensusId(0),
        &batch(vec![
            request(1, 1, RequestKind::Ordered, b"a"),
            reconfigure(7, 1, add),
            reconfigure(7, 2, replayed),
            reconfigure(7, 3, forged),
        ]),
    );
    assert_eq!(
        exec.service.executed, 1,
        "only the ordinary request reached the service"
    );
    let ReconfigureOutcome::Installed(view) = outcome(&replies[1]) else {
        panic!(
            "the administrator's change is installed: {:?}",
            outcome(&replies[1])
        );
    };
    assert_eq!((view.id, view.members.len()), (ViewId(1), 5));
    assert_eq!(
        (replies[1].kind, replies[1].view),
        (RequestKind::Reconfigure, ViewId(1))
    );
    assert!(
        matches!(outcome(&replies[2]), ReconfigureOutcome::Refused(r) if r.contains("view 0 but view 1"))
    );
    assert!(
        matches!(outcome(&replies[3]), ReconfigureOutcome::Refused(r) if r.contains("signature"))
    );
    assert_eq!(exec.members(), Some(&view));
    assert_eq!(
        exec.cached_reply(ClientId(7), RequestSeq(3)),
        Some(replies[3].clone())
    );
    // The members travel with the checkpoint, and so does the signed history behind them.
    let ckp = exec.checkpoint();
    let mut other = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16)
        .with_membership(membership(&admin));
    other.restore(&ckp).unwrap();
    assert_eq!(other.members(), Some(&view));
    assert_eq!(other.checkpoint(), ckp);
    assert_eq!(other.view_history().len(), 1);
    assert_eq!(
        tagma_core::view::replay(
            &membership(&admin).view,
            &admin.public(),
            tagma_core::Mode::Bft,
            other.view_history()
        ),
        Ok(view.clone())
    );
    // A version-2 checkpoint (members, no history) restores with no history.
    use tagma_wire::Encode;
    let view_bytes = view.to_bytes();
    let history_at = ckp
        .windows(view_bytes.len())
        .position(|w| w == &view_bytes[..])
        .expect("the view is in the checkpoint")
        + view_bytes.len();
    let change_len = exec.view_history()[0].to_bytes().len();
    let v2: Vec<u8> = [
        &[2u8][..],
        &ckp[1..history_at],
        &ckp[history_at + 4 + 4 + change_len..],
    ]
    .concat();
    let mut older = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16)
        .with_membership(membership(&admin));
    older.restore(&Bytes::from(v2)).unwrap();
    assert_eq!(older.members(), Some(&view));
    assert!(older.view_history().is_empty());
    // An executor without a membership refuses changes, and refuses a checkpoint with members.
    let mut bare = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16);
    let err = bare.restore(&ckp).unwrap_err().to_string();
    assert!(err.contains("without a membership"), "{err}");
    let change = sign_change(&admin, ViewId(0), vec![ViewOp::Add(member(4))]);
    let replies = bare.execute_batch(ConsensusId(0), &batch(vec![reconfigure(7, 1, change)]));
    assert!(
        matches!(outcome(&replies[0]), ReconfigureOutcome::Refused(r) if r.contains("without a membership"))
    );
    // A version-1 checkpoint (before views had members) still restores, keeping the
    // configured members: here one of a fresh executor (no sessions, no replies), whose view
    // section is the single byte at 37.
    let v3 = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16).checkpoint();
    assert_eq!((v3[0], v3[37]), (3, 0));
    let v1: Vec<u8> = [&[1u8][..], &v3[1..37], &v3[38..]].concat();
    let mut upgraded = Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16)
        .with_membership(membership(&admin));
    upgraded.restore(&Bytes::from(v1)).unwrap();
    assert_eq!(upgraded.members(), Some(&membership(&admin).view));
    assert_eq!(bare.members(), None);
}

/// A decided instance whose proof carries ACCEPTs signed by `signers` (member keys).
fn signed(cid: u64, b: &Batch, signers: &[u32]) -> tagma_wire::DecidedInstance {
    let bytes = tagma_wire::Encode::to_bytes(b);
    let vote = tagma_wire::Vote {
        cid: ConsensusId(cid),
        epoch: tagma_wire::Epoch(0),
        hash: tagma_crypto::digest(&bytes),
    };
    let accepts = signers
        .iter()
        .map(|i| {
            let key = tagma_crypto::IdentityKey::from_seed([*i as u8 + 1; 32]);
            (
                tagma_wire::ReplicaId(*i),
                tagma_core::proof::sign_accept(&key, &vote),
            )
        })
        .collect();
    tagma_wire::DecidedInstance {
        cid: ConsensusId(cid),
        batch: bytes,
        proof: tagma_wire::DecisionProof {
            epoch: tagma_wire::Epoch(0),
            accepts,
        },
    }
}

#[test]
fn fetched_decisions_are_proven_under_the_view_of_their_instance() {
    use tagma_core::view::sign_change;
    use tagma_wire::{ReplicaId, ViewOp};
    let admin = tagma_crypto::IdentityKey::from_seed([9; 32]);
    // Five members (BFT, f = 1: 4 ACCEPTs decide); instance 2 removes replica 4 (then 3 do).
    let mut five = membership(&admin);
    five.view.members.push(member(4));
    let new = || {
        Executor::new(EchoService { executed: 0 }, ViewId(0), 2, 16).with_membership(five.clone())
    };
    let remove = sign_change(&admin, ViewId(0), vec![ViewOp::Remove(ReplicaId(4))]);
    let batches = [
        batch(vec![request(1, 1, RequestKind::Ordered, b"a")]),
        batch(vec![request(1, 2, RequestKind::Ordered, b"b")]),
        batch(vec![reconfigure(7, 1, remove)]),
        batch(vec![request(1, 3, RequestKind::Ordered, b"c")]),
        batch(vec![request(1, 4, RequestKind::Ordered, b"d")]),
    ];
    let mut a = new();
    let mut at = Vec::new();
    for (cid, b) in batches.iter().enumerate() {
        a.execute_batch(ConsensusId(cid as u64), b);
        at.push(a.checkpoint());
    }
    let ckp = &at[1];
    // Instance 2 in view 0 (4 signers); 3 and 4 in view 1 (3 signers suffice there).
    let log = vec![
        signed(2, &batches[2], &[0, 1, 2, 3]),
        signed(3, &batches[3], &[0, 1, 2]),
        signed(4, &batches[4], &[1, 2, 3]),
    ];
    let mut b = new();
    assert_eq!(
        b.install_fetched(ckp, Some(&info(1, ckp)), &log, &[], 1),
        Ok(1)
    );
    assert_eq!(b.checkpoint(), at[4]);
    assert_eq!(b.members().map(|v| v.id), Some(ViewId(1)));
    // Three signers do not prove an instance of view 0.
    let mut weak = log.clone();
    weak[0] = signed(2, &batches[2], &[0, 1, 2]);
    let mut c = new();
    let before = c.checkpoint();
    let err = c
        .install_fetched(ckp, Some(&info(1, ckp)), &weak, &[], 1)
        .unwrap_err();
    assert!(err.contains("instance 2 does not hold in view 0"), "{err}");
    assert_eq!(c.checkpoint(), before, "rolled back");
    // A signer that left with the change does not count in view 1.
    let mut stale = log.clone();
    stale[1] = signed(3, &batches[3], &[0, 1, 4]);
    let err = c
        .install_fetched(ckp, Some(&info(1, ckp)), &stale, &[], 1)
        .unwrap_err();
    assert!(err.contains("instance 3 does not hold in view 1"), "{err}");
    // A joining replica replays the whole history from the initial state when no replica
    // has a checkpoint yet: every proof is checked from view 0 on.
    let whole = [
        vec![
            signed(0, &batches[0], &[0, 1, 2, 3]),
            signed(1, &batches[1], &[0, 1, 2, 4]),
        ],
        log.clone(),
    ]
    .concat();
    let mut joiner = new();
    let empty = Bytes::new();
    assert_eq!(joiner.install_fetched(&empty, None, &whole, &[], 1), Ok(1));
    assert_eq!(joiner.checkpoint(), at[4]);
    assert_eq!(joiner.members().map(|v| v.id), Some(ViewId(1)));
    // Not from an executor that has executed anything, and not with a weak proof.
    let err = joiner
        .install_fetched(&empty, None, &whole[..4], &[], 1)
        .unwrap_err();
    assert!(err.contains("already executed beyond instance 3"), "{err}");
    // From an executor that has executed some of it (a joining replica restarted with the
    // state its disk held), the replay starts where it stands, and nowhere else.
    let mut partial = new();
    partial.execute_batch(ConsensusId(0), &batches[0]);
    let err = partial
        .install_fetched(&empty, None, &whole, &[], 1)
        .unwrap_err();
    assert!(
        err.contains("starts where this executor stands (instance 1)"),
        "{err}"
    );
    let err = partial
        .install_fetched(&empty, None, &whole[2..], &[], 1)
        .unwrap_err();
    assert!(err.contains("instance 1"), "{err}");
    assert_eq!(
        partial.install_fetched(&empty, None, &whole[1..], &[], 1),
        Ok(1)
    );
    assert_eq!(partial.checkpoint(), at[4]);
    assert_eq!(partial.members().map(|v| v.id), Some(ViewId(1)));
    let mut forged = whole.clone();
    forged[0] = signed(0, &batches[0], &[0, 1, 2]);
    let mut d = new();
    let err = d
        .install_fetched(&empty, None, &forged, &[], 1)
        .unwrap_err();
    assert!(err.contains("instance 0 does not hold in view 0"), "{err}");
    assert_eq!(d.executed_instances(), 0, "rolled back");
}
