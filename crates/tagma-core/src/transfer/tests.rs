//! Unit tests of the fetching side: plans, windows, proofs, stalls, refusals.

use super::*;
use crate::proof::ProofChecker;
use tagma_crypto::IdentityKey;
use tagma_wire::{DecisionProof, Digest, Epoch, PeerMessage, Vote, accept_signing_bytes};

const CHUNK: u32 = 10;

fn keys() -> Vec<IdentityKey> {
    (0..4u8)
        .map(|i| IdentityKey::from_seed([i + 1; 32]))
        .collect()
}

fn checker() -> ProofChecker {
    let members: Vec<ReplicaId> = (0..4).map(ReplicaId).collect();
    let public: Vec<_> = keys().iter().map(IdentityKey::public).collect();
    ProofChecker::new(&members, &public, 3)
}

/// A decision of `cid` signed by replicas 0..3 (a BFT n = 4 accept quorum).
fn proven(cid: u64) -> DecidedInstance {
    signed_by(cid, Bytes::from(format!("batch {cid}")), &keys()[..3])
}

/// A decision of `cid` deciding `batch`, with ACCEPTs signed by `signers` as replicas
/// 0, 1, ….
fn signed_by(cid: u64, batch: Bytes, signers: &[IdentityKey]) -> DecidedInstance {
    let vote = Vote {
        cid: ConsensusId(cid),
        epoch: Epoch(0),
        hash: tagma_crypto::digest(&batch),
    };
    let accepts = signers
        .iter()
        .enumerate()
        .map(|(i, k)| (ReplicaId(i as u32), k.sign(&accept_signing_bytes(&vote))))
        .collect();
    DecidedInstance {
        cid: ConsensusId(cid),
        batch,
        proof: DecisionProof {
            epoch: Epoch(0),
            accepts,
        },
    }
}

fn ckp(cid: u64, len: u64) -> CheckpointInfo {
    CheckpointInfo {
        cid: ConsensusId(cid),
        len,
        digest: Digest([cid as u8; 32]),
    }
}

fn fetch(out: &mut Vec<FetchOut>) -> Fetch {
    let params = FetchParams {
        me: ReplicaId(3),
        peers: 3,
        one_correct: 2,
        chunk_bytes: CHUNK,
        state_bytes_max: 1 << 20,
        timeout_ms: 100,
        joining: false,
        repair: false,
    };
    Fetch::start(params, ConsensusId(0), 0, out)
}

/// `out` is exactly a new round of offers asked for.
fn asks_for_offers(out: &[FetchOut]) -> bool {
    matches!(out, [FetchOut::Broadcast(PeerMessage::StateQuery { .. })])
}

fn sends(out: &[FetchOut]) -> Vec<(ReplicaId, PeerMessage)> {
    out.iter()
        .filter_map(|o| match o {
            FetchOut::Send { to, msg } => Some((*to, msg.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn the_plan_takes_the_lowest_checkpoint_and_ignores_one_inflated_position() {
    let mut out = Vec::new();
    let mut f = fetch(&mut out);
    assert!(asks_for_offers(&out));
    out.clear();
    f.on_offer(
        ReplicaId(0),
        Some(ckp(100, 25)),
        ConsensusId(150),
        1,
        &mut out,
    );
    f.on_offer(
        ReplicaId(1),
        Some(ckp(120, 25)),
        ConsensusId(151),
        1,
        &mut out,
    );
    assert!(out.is_empty(), "waits for every peer (or the timeout)");
    // A Byzantine replica claims to be far ahead, with a low checkpoint.
    f.on_offer(
        ReplicaId(2),
        Some(ckp(80, 25)),
        ConsensusId(1_000_000),
        1,
        &mut out,
    );
    let sent = sends(&out);
    // Chunks from the source (the lowest checkpoint, 3 chunks of 10 bytes for 25).
    let chunks: Vec<_> = sent
        .iter()
        .filter(|(_, m)| matches!(m, PeerMessage::ChunkRequest { .. }))
        .collect();
    assert_eq!(chunks.len(), 3);
    assert!(chunks.iter().all(|(to, _)| *to == ReplicaId(2)));
    // The target is the f+1-th highest position (150), not the inflated one: the log
    // 81..=150 comes from the others, in runs.
    let logs: Vec<_> = sent
        .iter()
        .filter_map(|(to, m)| match m {
            PeerMessage::LogRequest { from, count } => Some((*to, from.0, *count)),
            _ => None,
        })
        .collect();
    assert_eq!(logs, vec![(ReplicaId(1), 81, 64), (ReplicaId(1), 145, 6)]);
    assert!(f.wants(ConsensusId(150)) && !f.wants(ConsensusId(151)) && !f.wants(ConsensusId(80)));
}

#[test]
fn chunks_are_taken_in_order_from_the_source_only_and_complete_the_fetch() {
    let mut out = Vec::new();
    let mut f = fetching_from_0(&mut out);
    let data = |n: usize| Bytes::from(vec![7u8; n]);
    assert_eq!(
        f.on_chunk(ReplicaId(1), ConsensusId(50), 0, data(10), 2, &mut out),
        Err("chunk of another checkpoint"),
        "only the source sends chunks"
    );
    assert_eq!(
        f.on_chunk(ReplicaId(0), ConsensusId(50), 10, data(10), 2, &mut out),
        Err("chunk out of order")
    );
    assert_eq!(
        f.on_chunk(ReplicaId(0), ConsensusId(50), 0, data(9), 2, &mut out),
        Err("chunk of the wrong length")
    );
    for (offset, len) in [(0, 10), (10, 10)] {
        f.on_chunk(
            ReplicaId(0),
            ConsensusId(50),
            offset,
            data(len),
            2,
            &mut out,
        )
        .unwrap();
    }
    assert!(!f.is_installing());
    f.on_chunk(ReplicaId(0), ConsensusId(50), 20, data(5), 2, &mut out)
        .unwrap();
    let install = out.iter().find_map(|o| match o {
        FetchOut::Install(s) => Some(s.clone()),
        _ => None,
    });
    let install = install.expect("complete: no log is needed at the checkpoint itself");
    assert_eq!(install.source, ReplicaId(0));
    assert_eq!(install.target(), ConsensusId(50));
    assert_eq!(install.vouchers.len(), 2);
    assert_eq!(install.matches_needed, 2);
    assert!(f.is_installing() && f.deadline_ms().is_none());
    let stored: u64 = out
        .iter()
        .filter_map(|o| match o {
            FetchOut::StoreChunk { data, .. } => Some(data.len() as u64),
            _ => None,
        })
        .sum();
    assert_eq!(stored, 25);
}

#[test]
fn log_entries_need_valid_proofs_and_the_range() {
    let mut out = Vec::new();
    let mut f = fetch(&mut out);
    for r in 0..3 {
        f.on_offer(ReplicaId(r), Some(ckp(10, 5)), ConsensusId(13), 1, &mut out);
    }
    let checker = checker();
    let mut forged = proven(11);
    forged.batch = Bytes::from_static(b"another batch");
    assert_eq!(
        f.on_log_entry(forged, &checker, 2, &mut out),
        Err("log entry with an invalid proof")
    );
    assert_eq!(
        f.on_log_entry(proven(13), &checker, 2, &mut out),
        Err("log entry outside the range fetched")
    );
    f.on_chunk(
        ReplicaId(0),
        ConsensusId(10),
        0,
        Bytes::from(vec![1u8; 5]),
        2,
        &mut out,
    )
    .unwrap();
    // The checkpoint is complete: an empty chunk is no progress (a faulty source cannot
    // keep a fetch whose log stalls from moving on).
    assert_eq!(
        f.on_chunk(ReplicaId(0), ConsensusId(10), 5, Bytes::new(), 2, &mut out),
        Err("checkpoint already complete")
    );
    f.on_log_entry(proven(12), &checker, 2, &mut out).unwrap();
    assert!(!f.is_installing(), "11 is still missing");
    f.on_log_entry(proven(11), &checker, 2, &mut out).unwrap();
    let Some(FetchOut::Install(state)) = out.last() else {
        panic!("complete: {out:?}");
    };
    let cids: Vec<u64> = state.log.iter().map(|d| d.cid.0).collect();
    assert_eq!(cids, vec![11, 12]);
}

#[test]
fn entries_after_a_view_change_are_held_for_the_executor_to_verify() {
    use tagma_wire::{Encode, Request, RequestAuth, RequestEnvelope, RequestKind, ViewId};
    let mut out = Vec::new();
    let mut f = fetch(&mut out);
    for r in 0..3 {
        f.on_offer(ReplicaId(r), Some(ckp(10, 5)), ConsensusId(13), 1, &mut out);
    }
    let checker = checker();
    // Instance 11 orders a view change (proven in this replica's view); 12 was decided in
    // the next view, by keys this replica's checker does not know.
    let reconfigure = tagma_wire::Batch {
        timestamp_ms: 1,
        seed: 0,
        requests: vec![RequestEnvelope {
            request: Request {
                client: ClientId(9),
                seq: RequestSeq(1),
                kind: RequestKind::Reconfigure,
                view: ViewId(0),
                payload: Bytes::from_static(b"change"),
            },
            auth: RequestAuth::Macs(vec![]),
        }],
    };
    let strangers: Vec<IdentityKey> = (0..3u8)
        .map(|i| IdentityKey::from_seed([100 + i; 32]))
        .collect();
    let later = || signed_by(12, Bytes::from_static(b"batch 12"), &strangers);
    // Without the change held, such a proof is refused.
    assert_eq!(
        f.on_log_entry(later(), &checker, 2, &mut out),
        Err("log entry with an invalid proof")
    );
    f.on_log_entry(
        signed_by(11, reconfigure.to_bytes(), &keys()[..3]),
        &checker,
        2,
        &mut out,
    )
    .unwrap();
    f.on_log_entry(later(), &checker, 2, &mut out).unwrap();
    f.on_chunk(
        ReplicaId(0),
        ConsensusId(10),
        0,
        Bytes::from(vec![1u8; 5]),
        2,
        &mut out,
    )
    .unwrap();
    let Some(FetchOut::Install(state)) = out.last() else {
        panic!("complete: {out:?}");
    };
    let cids: Vec<u64> = state.log.iter().map(|d| d.cid.0).collect();
    assert_eq!(cids, vec![11, 12]);
}

#[test]
fn stalls_re_request_then_another_source_is_tried() {
    let mut out = Vec::new();
    let mut f = fetch(&mut out);
    for r in 0..3 {
        f.on_offer(
            ReplicaId(r),
            Some(ckp(40 + u64::from(r), 25)),
            ConsensusId(60),
            1,
            &mut out,
        );
    }
    let source = |out: &[FetchOut]| chunk_requests(out).first().map(|(to, _)| *to);
    assert_eq!(source(&out), Some(ReplicaId(0)));
    // The source stays silent: chunks are asked for again on each timeout...
    for t in 1..=STALL_TIMEOUTS as u64 {
        out.clear();
        f.tick(1 + t * 100, &mut out);
        assert_eq!(
            source(&out),
            Some(ReplicaId(0)),
            "re-requested at stall {t}"
        );
    }
    // ...then the attempt is abandoned for fresh offers and the next source.
    out.clear();
    f.tick(1 + (STALL_TIMEOUTS as u64 + 1) * 100, &mut out);
    assert!(asks_for_offers(&out));
    out.clear();
    for r in 0..3 {
        f.on_offer(
            ReplicaId(r),
            Some(ckp(40 + u64::from(r), 25)),
            ConsensusId(60),
            700,
            &mut out,
        );
    }
    assert_eq!(source(&out), Some(ReplicaId(1)));
    // A state the runtime rejects also moves on.
    let data = Bytes::from(vec![0u8; 10]);
    for offset in [0, 10] {
        f.on_chunk(
            ReplicaId(1),
            ConsensusId(41),
            offset,
            data.clone(),
            701,
            &mut out,
        )
        .unwrap();
    }
    f.on_chunk(
        ReplicaId(1),
        ConsensusId(41),
        20,
        data.slice(..5),
        701,
        &mut out,
    )
    .unwrap();
    let checker = checker();
    for cid in 42..=59 {
        f.on_log_entry(proven(cid), &checker, 702, &mut out)
            .unwrap();
    }
    assert!(f.is_installing());
    out.clear();
    f.rejected(703, &mut out);
    assert_eq!(f.deadline_ms(), Some(703 + 100));
    assert!(asks_for_offers(&out));
    assert!(!f.is_installing());
}

/// A plan fetching `ckp(50, 25)` from replica 0 (chunks of 10 bytes at 0, 10, 20).
fn fetching_from_0(out: &mut Vec<FetchOut>) -> Fetch {
    let mut f = fetch(out);
    for r in 0..3 {
        f.on_offer(ReplicaId(r), Some(ckp(50, 25)), ConsensusId(51), 1, out);
    }
    out.clear();
    f
}

fn chunk_requests(out: &[FetchOut]) -> Vec<(ReplicaId, u64)> {
    sends(out)
        .into_iter()
        .filter_map(|(to, m)| match m {
            PeerMessage::ChunkRequest { offset, .. } => Some((to, offset)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_lost_chunk_is_asked_for_again_at_once_and_once_per_gap() {
    let mut out = Vec::new();
    let mut f = fetching_from_0(&mut out);
    let data = |n: usize| Bytes::from(vec![7u8; n]);
    // The chunk at 0 was lost: the next one shows the gap.
    assert_eq!(
        f.on_chunk(ReplicaId(0), ConsensusId(50), 10, data(10), 2, &mut out),
        Err("chunk out of order")
    );
    let zero = ReplicaId(0);
    assert_eq!(
        chunk_requests(&out),
        vec![(zero, 0), (zero, 10), (zero, 20)]
    );
    out.clear();
    // The chunks in flight behind the lost one do not ask again.
    assert_eq!(
        f.on_chunk(ReplicaId(0), ConsensusId(50), 20, data(5), 2, &mut out),
        Err("chunk out of order")
    );
    assert!(out.is_empty());
    // The answers to the new requests complete the fetch, without waiting for a stall.
    for (offset, len) in [(0, 10), (10, 10), (20, 5)] {
        f.on_chunk(zero, ConsensusId(50), offset, data(len), 3, &mut out)
            .unwrap();
    }
    assert!(f.is_installing());
    // A duplicate asks for nothing.
    out.clear();
    let mut g = fetching_from_0(&mut out);
    g.on_chunk(zero, ConsensusId(50), 0, data(10), 2, &mut out)
        .unwrap();
    out.clear();
    assert_eq!(
        g.on_chunk(zero, ConsensusId(50), 0, data(10), 2, &mut out),
        Err("chunk out of order")
    );
    assert!(chunk_requests(&out).is_empty());
}

#[test]
fn an_empty_chunk_from_the_source_asks_for_fresh_offers_at_once() {
    let mut out = Vec::new();
    let mut f = fetching_from_0(&mut out);
    // From another replica it is nothing (a late refusal of an earlier attempt's request).
    f.on_chunk(ReplicaId(1), ConsensusId(50), 0, Bytes::new(), 2, &mut out)
        .unwrap();
    assert!(out.is_empty());
    // From the source: it released the checkpoint. Fresh offers now, not after
    // STALL_TIMEOUTS request timeouts.
    f.on_chunk(ReplicaId(0), ConsensusId(50), 0, Bytes::new(), 2, &mut out)
        .unwrap();
    assert!(asks_for_offers(&out));
    out.clear();
    for r in 0..3 {
        f.on_offer(
            ReplicaId(r),
            Some(ckp(50, 25)),
            ConsensusId(51),
            3,
            &mut out,
        );
    }
    assert_eq!(
        chunk_requests(&out).first(),
        Some(&(ReplicaId(1), 0)),
        "the next attempt takes the next source"
    );
    // A second refusal within a request timeout waits for the tick (a faulty source's
    // refusals must not make every replica answer a round of offers per round trip).
    out.clear();
    f.on_chunk(ReplicaId(1), ConsensusId(50), 0, Bytes::new(), 4, &mut out)
        .unwrap();
    assert!(out.is_empty());
    // The refusals of the rest of the window add nothing either.
    f.on_chunk(ReplicaId(1), ConsensusId(50), 10, Bytes::new(), 4, &mut out)
        .unwrap();
    assert!(out.is_empty());
    f.tick(3 + 100, &mut out);
    assert!(asks_for_offers(&out));
    out.clear();
    // Offers of the refused checkpoints again: neither is taken as the source; replica
    // 0's newer one is.
    f.on_offer(
        ReplicaId(0),
        Some(ckp(56, 25)),
        ConsensusId(60),
        104,
        &mut out,
    );
    f.on_offer(
        ReplicaId(1),
        Some(ckp(50, 25)),
        ConsensusId(60),
        104,
        &mut out,
    );
    f.on_offer(
        ReplicaId(2),
        Some(ckp(58, 25)),
        ConsensusId(60),
        104,
        &mut out,
    );
    assert_eq!(chunk_requests(&out).first(), Some(&(ReplicaId(0), 0)));
}

#[test]
fn extreme_offers_and_entries_do_not_overflow() {
    let mut out = Vec::new();
    let mut f = fetch(&mut out);
    f.on_offer(
        ReplicaId(0),
        Some(ckp(u64::MAX, 5)),
        ConsensusId(u64::MAX),
        1,
        &mut out,
    );
    f.on_offer(
        ReplicaId(1),
        Some(ckp(10, 5)),
        ConsensusId(2_000),
        1,
        &mut out,
    );
    f.on_offer(
        ReplicaId(2),
        Some(ckp(12, 5)),
        ConsensusId(2_000),
        1,
        &mut out,
    );
    assert!(
        sends(&out)
            .iter()
            .any(|(to, m)| *to == ReplicaId(1) && matches!(m, PeerMessage::ChunkRequest { .. })),
        "the checkpoint at u64::MAX is no candidate: replica 1's is the source"
    );
    // A proven entry far beyond the window, then the window's own: no underflow.
    let checker = checker();
    f.on_log_entry(proven(1_500), &checker, 2, &mut out)
        .unwrap();
    out.clear();
    for cid in 11..300 {
        f.on_log_entry(proven(cid), &checker, 2, &mut out).unwrap();
    }
    // Requests go on past the entries that arrived ahead of the window.
    let furthest = sends(&out)
        .iter()
        .filter_map(|(_, m)| match m {
            PeerMessage::LogRequest { from, .. } => Some(from.0),
            _ => None,
        })
        .max();
    assert!(furthest.is_some_and(|c| c >= 300), "{furthest:?}");
    assert!(f.wants(ConsensusId(300)) && !f.wants(ConsensusId(1_500)));
    f.tick(1_000, &mut out);
}

#[test]
fn no_plan_without_enough_checkpoints_to_vouch() {
    let mut out = Vec::new();
    let mut f = fetch(&mut out);
    out.clear();
    // Only one replica has a checkpoint: nobody could vouch for it (f + 1 = 2 needed).
    f.on_offer(ReplicaId(0), Some(ckp(30, 5)), ConsensusId(40), 1, &mut out);
    f.on_offer(ReplicaId(1), None, ConsensusId(40), 1, &mut out);
    f.on_offer(ReplicaId(2), None, ConsensusId(40), 1, &mut out);
    assert!(sends(&out).is_empty());
    f.tick(200, &mut out);
    assert!(asks_for_offers(&out));
}

/// The decisions a fetch at `next` (joining or not) asks for first, given offers of
/// checkpoints 11, 13 and 15 by peers at 18: (asked peer, from).
fn first_log_request(next: u64, joining: bool) -> Option<(ReplicaId, u64)> {
    let params = FetchParams {
        me: ReplicaId(3),
        peers: 3,
        one_correct: 2,
        chunk_bytes: CHUNK,
        state_bytes_max: 1 << 20,
        timeout_ms: 100,
        joining,
        repair: false,
    };
    let mut out = Vec::new();
    let mut f = Fetch::start(params, ConsensusId(next), 0, &mut out);
    out.clear();
    for (peer, cid) in [(0, 11), (1, 13), (2, 15)] {
        f.on_offer(
            ReplicaId(peer),
            Some(ckp(cid, 5)),
            ConsensusId(18),
            1,
            &mut out,
        );
    }
    assert!(
        !sends(&out)
            .iter()
            .any(|(_, m)| matches!(m, PeerMessage::ChunkRequest { .. })),
        "no checkpoint at or after {next} is vouched for"
    );
    sends(&out).into_iter().find_map(|(to, m)| match m {
        PeerMessage::LogRequest { from, .. } => Some((to, from.0)),
        _ => None,
    })
}

#[test]
fn a_joining_replica_with_a_state_replays_from_it_when_no_checkpoint_is_vouched_for() {
    // At 16, only checkpoint 15 is not behind, and nobody vouches for it: a replica that
    // can judge the decisions catches up by them instead.
    assert_eq!(first_log_request(16, false), None);
    // A joining replica restarted with a state (before the view that added it) cannot: it
    // fetches the decisions from 16 from a peer whose log holds them, and its executor
    // replays and verifies them from its own state.
    let (peer, from) = first_log_request(16, true).expect("a plan from its own state");
    assert_eq!(from, 16);
    assert!(peer.0 < 3);
}
