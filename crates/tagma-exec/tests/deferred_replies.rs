//! Deferred replies: a service answers a request later than its execution, from a later
//! request or from the agreed time passing, and the executor caches and returns each late
//! reply like any other.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tagma_exec::{Context, Executor, LateReply, Service, ServiceError};
use tagma_wire::{
    Batch, ClientId, ConsensusId, Digest, Request, RequestAuth, RequestEnvelope, RequestKind,
    RequestSeq, ViewId,
};

/// A gate: `wait:<deadline>` blocks until `open` or until the agreed time reaches the
/// deadline (then it is answered `timeout`); `open` answers every waiter `opened` and says
/// how many it released.
#[derive(Default)]
struct Gate {
    waiting: Vec<(ClientId, RequestSeq, u64)>,
}

impl Service for Gate {
    fn execute_ordered(&mut self, _request: &Bytes, _ctx: &Context) -> Bytes {
        unreachable!("the executor calls execute_ordered_run")
    }
    fn execute_ordered_run(
        &mut self,
        requests: &[(Bytes, Context)],
        late: &mut Vec<LateReply>,
    ) -> Vec<Option<Bytes>> {
        requests
            .iter()
            .map(|(request, ctx)| {
                if let Some(deadline) = request.strip_prefix(b"wait:") {
                    let deadline = std::str::from_utf8(deadline).unwrap().parse().unwrap();
                    self.waiting.push((ctx.client, ctx.seq, deadline));
                    None
                } else {
                    let released = self.waiting.len();
                    for (client, seq, _) in self.waiting.drain(..) {
                        late.push(LateReply {
                            client,
                            seq,
                            payload: Bytes::from_static(b"opened"),
                        });
                    }
                    Some(Bytes::from(format!("released {released}")))
                }
            })
            .collect()
    }
    fn advance_time(&mut self, timestamp_ms: u64, late: &mut Vec<LateReply>) {
        self.waiting.retain(|(client, seq, deadline)| {
            let due = *deadline <= timestamp_ms;
            if due {
                late.push(LateReply {
                    client: *client,
                    seq: *seq,
                    payload: Bytes::from_static(b"timeout"),
                });
            }
            !due
        });
    }
    fn next_due_ms(&self) -> Option<u64> {
        self.waiting.iter().map(|w| w.2).min()
    }
    fn execute_unordered(&self, _request: &Bytes, _ctx: &Context) -> Bytes {
        Bytes::from(format!("{} waiting", self.waiting.len()))
    }
    fn snapshot(&self) -> Bytes {
        let mut out = BytesMut::new();
        for (client, seq, deadline) in &self.waiting {
            out.put_u64_le(client.0);
            out.put_u64_le(seq.0);
            out.put_u64_le(*deadline);
        }
        out.freeze()
    }
    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError> {
        if !snapshot.len().is_multiple_of(24) {
            return Err(ServiceError::InvalidSnapshot("not whole waiters".into()));
        }
        let mut b = snapshot.clone();
        self.waiting.clear();
        while b.has_remaining() {
            self.waiting.push((
                ClientId(b.get_u64_le()),
                RequestSeq(b.get_u64_le()),
                b.get_u64_le(),
            ));
        }
        Ok(())
    }
    fn state_digest(&self) -> Digest {
        Digest(*blake3::hash(&self.snapshot()).as_bytes())
    }
}

fn request(client: u64, seq: u64, payload: &str) -> RequestEnvelope {
    RequestEnvelope {
        request: Request {
            client: ClientId(client),
            seq: RequestSeq(seq),
            kind: RequestKind::Ordered,
            view: ViewId(0),
            payload: Bytes::from(payload.to_owned()),
        },
        auth: RequestAuth::Macs(Vec::new()),
    }
}

fn batch(timestamp_ms: u64, requests: Vec<RequestEnvelope>) -> Batch {
    Batch {
        timestamp_ms,
        seed: 7,
        requests,
    }
}

fn answers(replies: &[tagma_wire::Reply]) -> Vec<(u64, u64, String)> {
    replies
        .iter()
        .map(|r| {
            (
                r.client.0,
                r.seq.0,
                String::from_utf8(r.payload.to_vec()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_deferred_reply_is_given_once_by_the_request_that_releases_it_and_cached() {
    let mut exec = Executor::new(Gate::default(), ViewId(0), 4, 100);
    let replies = exec.execute_batch(
        ConsensusId(0),
        &batch(
            10,
            vec![request(1, 1, "wait:1000"), request(2, 1, "wait:2000")],
        ),
    );
    assert!(replies.is_empty(), "both requests wait");
    assert_eq!(exec.executed_requests(), 2);
    assert_eq!(exec.cached_reply(ClientId(1), RequestSeq(1)), None);
    assert_eq!(exec.next_due_ms(), Some(1000));

    let replies = exec.execute_batch(ConsensusId(1), &batch(20, vec![request(3, 1, "open")]));
    assert_eq!(
        answers(&replies),
        vec![
            (3, 1, "released 2".into()),
            (1, 1, "opened".into()),
            (2, 1, "opened".into()),
        ]
    );
    let cached = exec.cached_reply(ClientId(2), RequestSeq(1)).unwrap();
    assert_eq!(cached.payload, Bytes::from_static(b"opened"));
    assert_eq!(cached.kind, RequestKind::Ordered);
    assert_eq!(exec.next_due_ms(), None);
    // Nothing waits any more: a later open releases nobody.
    let replies = exec.execute_batch(ConsensusId(2), &batch(30, vec![request(3, 2, "open")]));
    assert_eq!(answers(&replies), vec![(3, 2, "released 0".into())]);
}

#[test]
fn the_agreed_time_of_a_batch_times_waits_out_before_its_requests_run_even_in_an_empty_batch() {
    let mut exec = Executor::new(Gate::default(), ViewId(0), 4, 100);
    exec.execute_batch(
        ConsensusId(0),
        &batch(
            10,
            vec![request(1, 1, "wait:100"), request(2, 1, "wait:200")],
        ),
    );
    // A time-only batch at 150: the first wait times out, the second still waits.
    let replies = exec.execute_batch(ConsensusId(1), &batch(150, vec![]));
    assert_eq!(answers(&replies), vec![(1, 1, "timeout".into())]);
    assert_eq!(exec.next_due_ms(), Some(200));
    // At 250 the second times out before the batch's open runs, which releases nobody.
    let replies = exec.execute_batch(ConsensusId(2), &batch(250, vec![request(3, 1, "open")]));
    assert_eq!(
        answers(&replies),
        vec![(2, 1, "timeout".into()), (3, 1, "released 0".into())]
    );
    assert_eq!(exec.executed_instances(), 3);
}

#[test]
fn waiting_requests_survive_a_checkpoint_and_their_late_replies_survive_in_the_cache() {
    let mut exec = Executor::new(Gate::default(), ViewId(0), 4, 100);
    exec.execute_batch(ConsensusId(0), &batch(10, vec![request(1, 1, "wait:500")]));
    let checkpoint = exec.checkpoint();

    let mut restored = Executor::new(Gate::default(), ViewId(0), 4, 100);
    restored.restore(&checkpoint).unwrap();
    assert_eq!(restored.state_digest(), exec.state_digest());
    assert_eq!(restored.next_due_ms(), Some(500));
    let replies = restored.execute_batch(ConsensusId(1), &batch(20, vec![request(2, 1, "open")]));
    assert_eq!(
        answers(&replies),
        vec![(2, 1, "released 1".into()), (1, 1, "opened".into())]
    );
    let mut again = Executor::new(Gate::default(), ViewId(0), 4, 100);
    again.restore(&restored.checkpoint()).unwrap();
    assert_eq!(
        again
            .cached_reply(ClientId(1), RequestSeq(1))
            .map(|r| r.payload),
        Some(Bytes::from_static(b"opened"))
    );
}
