//! A parallel replica's executor gives the replies, checkpoints and digests of sequential
//! execution, with view changes in the middle of batches executed while nothing runs.

use bytes::Bytes;
use tagma_exec::Executor;
use tagma_parallel::list::{ListOp, ListService};
use tagma_parallel::{Classify, Group, Groups, ParallelReplica, ParallelState, Policy, Scheduler};
use tagma_wire::{
    Batch, ClientId, ConsensusId, Encode, GroupEnvelope, Request, RequestAuth, RequestEnvelope,
    RequestKind, RequestSeq, ViewId,
};

fn request(client: u64, seq: u64, kind: RequestKind, payload: Bytes) -> RequestEnvelope {
    RequestEnvelope {
        request: Request {
            client: ClientId(client),
            seq: RequestSeq(seq),
            kind,
            view: ViewId(0),
            payload,
        },
        auth: RequestAuth::Macs(Vec::new()),
    }
}

/// Batches mixing reads and writes of the list, with a view change (refused here: no
/// membership) in the middle of every third batch.
fn batches(wrap: bool) -> Vec<Batch> {
    let mut seq = 0;
    (0..12u64)
        .map(|b| {
            let mut requests = Vec::new();
            for i in 0..40u64 {
                seq += 1;
                let op = match (b * 40 + i) % 7 {
                    0 => ListOp::Add(1_000 + (b * 40 + i) as i64),
                    1 => ListOp::Remove((b * 40 + i) as i64 % 300),
                    2 | 3 => ListOp::Get(((b * 13 + i * 7) % 300) as i64),
                    _ => ListOp::Contains(((b * 17 + i * 3) % 400) as i64),
                };
                let group = if op.writes() { Group::All } else { Group::None };
                let payload = if wrap {
                    GroupEnvelope {
                        group,
                        op: op.encode(),
                    }
                    .to_bytes()
                } else {
                    op.encode()
                };
                requests.push(request(1 + i % 3, seq, RequestKind::Ordered, payload));
                if b % 3 == 1 && i == 20 {
                    seq += 1;
                    requests.push(request(
                        9,
                        seq,
                        RequestKind::Reconfigure,
                        Bytes::from_static(b"x"),
                    ));
                }
            }
            Batch {
                timestamp_ms: 1_000 + b,
                seed: b,
                requests,
            }
        })
        .collect()
}

fn replica(policy: Policy, classify: Classify) -> Executor<ParallelReplica<ListService>> {
    let threads = if policy == Policy::Sequential { 1 } else { 3 };
    Executor::new(
        ParallelReplica::new(
            ListService::with_entries(300),
            Scheduler::new(policy, threads, Groups::default()),
            classify,
        ),
        ViewId(0),
        8,
        64,
    )
}

#[test]
fn parallel_replicas_execute_like_the_sequential_one() {
    for classify in [Classify::Service, Classify::Groups] {
        let wrap = classify == Classify::Groups;
        let mut reference = replica(Policy::Sequential, classify);
        let mut barrier = replica(Policy::Barrier, classify);
        let mut graph = replica(Policy::Graph, classify);
        for (cid, batch) in batches(wrap).iter().enumerate() {
            let cid = ConsensusId(cid as u64);
            let want = reference.execute_batch(cid, batch);
            assert_eq!(
                barrier.execute_batch(cid, batch),
                want,
                "barrier, {classify:?}"
            );
            assert_eq!(graph.execute_batch(cid, batch), want, "graph, {classify:?}");
        }
        assert_eq!(graph.checkpoint(), reference.checkpoint());
        assert_eq!(barrier.checkpoint(), reference.checkpoint());
        assert_eq!(graph.state_digest(), reference.state_digest());
        // A checkpoint restores into a fresh parallel replica.
        let mut restored = replica(Policy::Graph, classify);
        restored.restore(&graph.checkpoint()).unwrap();
        assert_eq!(restored.state_digest(), reference.state_digest());
    }
}

#[test]
fn list_snapshots_round_trip_and_refuse_garbage() {
    let list = ListService::with_entries(50);
    let mut other = ListService::with_entries(3);
    other.install_snapshot(&list.snapshot()).unwrap();
    assert_eq!(
        tagma_parallel::ParallelService::digest(&other),
        tagma_parallel::ParallelService::digest(&list)
    );
    assert!(
        other
            .install_snapshot(&Bytes::from_static(b"\x05\0\0\0\0\0\0\0"))
            .is_err()
    );
    assert!(
        other
            .install_snapshot(&Bytes::from_static(b"\x01"))
            .is_err()
    );
    // Unordered requests only read.
    let reply = other.execute_unordered(&ListOp::Add(1).encode());
    assert_eq!(reply[0], 0xff);
}

#[test]
fn a_group_that_understates_the_conflicts_is_not_trusted() {
    // A faulty client sends every write as conflict-free. Trusted, its groups would let the
    // replicas run conflicting requests in different orders; they are checked against the
    // service's own classification, so every replica stays equal to sequential execution.
    let liar = || -> Vec<Batch> {
        batches(false)
            .into_iter()
            .map(|mut b| {
                for r in &mut b.requests {
                    if r.request.kind == RequestKind::Ordered {
                        r.request.payload = GroupEnvelope {
                            group: Group::None,
                            op: r.request.payload.clone(),
                        }
                        .to_bytes();
                    }
                }
                b
            })
            .collect()
    };
    let mut reference = replica(Policy::Sequential, Classify::Groups);
    let mut shuffled = Executor::new(
        ParallelReplica::new(
            ListService::with_entries(300),
            Scheduler::new(Policy::Shuffled { seed: 5 }, 1, Groups::default()),
            Classify::Groups,
        ),
        ViewId(0),
        8,
        64,
    );
    for (cid, batch) in liar().iter().enumerate() {
        let cid = ConsensusId(cid as u64);
        assert_eq!(
            shuffled.execute_batch(cid, batch),
            reference.execute_batch(cid, batch)
        );
    }
    assert_eq!(shuffled.checkpoint(), reference.checkpoint());
}
