//! The service under the executor, as replicas run it: a blocked `in` is answered by a later
//! batch's `out` or by a batch that carries only the time, each late reply is cached for
//! retransmissions, and a checkpoint carries waiting operations across a restore.

mod common;

use bytes::Bytes;
use common::*;
use tagma_exec::Executor;
use tagma_space::{SpaceReply, SpaceRequest};
use tagma_space_service::SpaceService;
use tagma_wire::{
    Batch, ClientId, ConsensusId, Reply, Request, RequestAuth, RequestEnvelope, RequestKind,
    RequestSeq, ViewId,
};

fn envelope(principal: u32, seq: u64, request: SpaceRequest) -> RequestEnvelope {
    RequestEnvelope {
        request: Request {
            client: client(principal),
            seq: RequestSeq(seq),
            kind: RequestKind::Ordered,
            view: ViewId(0),
            payload: request.encode(),
        },
        auth: RequestAuth::Macs(Vec::new()),
    }
}

fn batch(timestamp_ms: u64, requests: Vec<RequestEnvelope>) -> Batch {
    Batch {
        timestamp_ms,
        seed: 1,
        requests,
    }
}

fn answers(replies: &[Reply]) -> Vec<(ClientId, u64, SpaceReply)> {
    replies
        .iter()
        .map(|r| (r.client, r.seq.0, decode(&r.payload)))
        .collect()
}

fn payload(reply: Option<Reply>) -> Option<Bytes> {
    reply.map(|r| r.payload)
}

#[test]
fn late_replies_leave_in_the_batch_that_gives_them_and_are_cached() {
    let mut exec = Executor::new(SpaceService::default(), ViewId(0), 8, 100);
    let replies = exec.execute_batch(
        ConsensusId(0),
        &batch(
            1_000,
            vec![
                envelope(1, 1, create("q")),
                envelope(2, 1, in_("q", "(\"job\", *)", 500)),
                envelope(3, 1, in_("q", "(\"job\", *)", 800)),
            ],
        ),
    );
    assert_eq!(answers(&replies), vec![(client(1), 1, SpaceReply::Created)]);
    assert_eq!(exec.next_due_ms(), Some(1_500));
    assert_eq!(exec.cached_reply(client(2), RequestSeq(1)), None);

    let replies = exec.execute_batch(
        ConsensusId(1),
        &batch(1_100, vec![envelope(1, 2, out("q", "(\"job\", 7)"))]),
    );
    let answered = answers(&replies);
    assert_eq!(answered.len(), 2);
    assert!(matches!(answered[0].2, SpaceReply::Inserted(_)));
    assert_eq!(answered[1].0, client(2));
    assert_eq!(found(&answered[1].2).tuple, tuple("(\"job\", 7)"));
    assert_eq!(
        payload(exec.cached_reply(client(2), RequestSeq(1))),
        Some(replies[1].payload.clone())
    );

    // 3's in times out in a batch that carries only the time.
    let checkpoint = exec.checkpoint();
    let replies = exec.execute_batch(ConsensusId(2), &batch(1_800, vec![]));
    assert_eq!(
        answers(&replies),
        vec![(client(3), 1, SpaceReply::TimedOut)]
    );
    assert_eq!(exec.next_due_ms(), None);

    // A replica restored from the checkpoint before it gives the same late reply.
    let mut restored = Executor::new(SpaceService::default(), ViewId(0), 8, 100);
    restored.restore(&checkpoint).unwrap();
    assert_eq!(restored.next_due_ms(), Some(1_800));
    let again = restored.execute_batch(ConsensusId(2), &batch(1_800, vec![]));
    assert_eq!(again, replies);
    assert_eq!(restored.state_digest(), exec.state_digest());
    assert_eq!(
        payload(restored.cached_reply(client(3), RequestSeq(1))),
        Some(replies[0].payload.clone())
    );
}
