//! The conformance suite on services that defer replies: it drives them through runs and the
//! agreed time's advance, accepts a correct one, and catches a late reply given twice, waiting
//! requests a snapshot forgets, and waits that never time out.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tagma_exec::conformance::check_service;
use tagma_exec::{Context, LateReply, Service, ServiceError};
use tagma_wire::{ClientId, Digest, RequestSeq};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    /// `open` answers the waiting requests but keeps them, so a later `open` answers again.
    AnswersTwice,
    /// The snapshot leaves the waiting requests out.
    ForgetsWaiters,
    /// The agreed time's advance times nothing out, though `next_due_ms` says it would.
    NeverTimesOut,
}

/// `wait:<ms>` waits until an `open` (answered `opened`) or until the agreed time passes its
/// deadline (answered `timeout`); `open` answers every waiting request; anything else is
/// answered `ok`.
struct Latch {
    /// By deadline, then arrival.
    waiting: BTreeMap<(u64, u64), (ClientId, RequestSeq)>,
    arrivals: u64,
    flaw: Flaw,
}

impl Latch {
    fn new(flaw: Flaw) -> Self {
        Latch {
            waiting: BTreeMap::new(),
            arrivals: 0,
            flaw,
        }
    }
}

fn late(client: ClientId, seq: RequestSeq, payload: &'static [u8]) -> LateReply {
    LateReply {
        client,
        seq,
        payload: Bytes::from_static(payload),
    }
}

impl Service for Latch {
    fn execute_ordered(&mut self, _request: &Bytes, _ctx: &Context) -> Bytes {
        unreachable!("the suite calls execute_ordered_run")
    }

    fn execute_ordered_run(
        &mut self,
        requests: &[(Bytes, Context)],
        out: &mut Vec<LateReply>,
    ) -> Vec<Option<Bytes>> {
        let mut replies = Vec::new();
        for (request, ctx) in requests {
            if let Some(ms) = request.strip_prefix(b"wait:") {
                let ms: u64 = std::str::from_utf8(ms).unwrap().parse().unwrap();
                self.arrivals += 1;
                self.waiting.insert(
                    (ctx.timestamp_ms + ms, self.arrivals),
                    (ctx.client, ctx.seq),
                );
                replies.push(None);
            } else if request.as_ref() == b"open" {
                for (client, seq) in self.waiting.values() {
                    out.push(late(*client, *seq, b"opened"));
                }
                if self.flaw != Flaw::AnswersTwice {
                    self.waiting.clear();
                }
                replies.push(Some(Bytes::from_static(b"opened them")));
            } else {
                replies.push(Some(Bytes::from_static(b"ok")));
            }
        }
        replies
    }

    fn advance_time(&mut self, timestamp_ms: u64, out: &mut Vec<LateReply>) {
        if self.flaw == Flaw::NeverTimesOut {
            return;
        }
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > timestamp_ms {
                break;
            }
            let (client, seq) = entry.remove();
            out.push(late(client, seq, b"timeout"));
        }
    }

    fn next_due_ms(&self) -> Option<u64> {
        self.waiting.keys().next().map(|(deadline, _)| *deadline)
    }

    fn execute_unordered(&self, _request: &Bytes, _ctx: &Context) -> Bytes {
        Bytes::from(self.waiting.len().to_string())
    }

    fn snapshot(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_u64_le(self.arrivals);
        if self.flaw != Flaw::ForgetsWaiters {
            for ((deadline, arrival), (client, seq)) in &self.waiting {
                out.put_u64_le(*deadline);
                out.put_u64_le(*arrival);
                out.put_u64_le(client.0);
                out.put_u64_le(seq.0);
            }
        }
        out.freeze()
    }

    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError> {
        if snapshot.len() < 8 || !(snapshot.len() - 8).is_multiple_of(32) {
            return Err(ServiceError::InvalidSnapshot("not whole records".into()));
        }
        let mut b = snapshot.clone();
        self.arrivals = b.get_u64_le();
        self.waiting.clear();
        while b.has_remaining() {
            let key = (b.get_u64_le(), b.get_u64_le());
            self.waiting
                .insert(key, (ClientId(b.get_u64_le()), RequestSeq(b.get_u64_le())));
        }
        Ok(())
    }

    fn state_digest(&self) -> Digest {
        Digest(*blake3::hash(&self.snapshot()).as_bytes())
    }
}

fn workload() -> Vec<Bytes> {
    (0..60u32)
        .map(|i| match i % 6 {
            0 | 3 => Bytes::from(format!("wait:{}", 10 + i * 3)),
            1 => Bytes::from_static(b"wait:100000"),
            // Waiting requests remain at the middle, where the suite takes its snapshot.
            4 if i == 10 || i == 46 => Bytes::from_static(b"open"),
            _ => Bytes::from_static(b"tick"),
        })
        .collect()
}

#[test]
fn a_service_that_defers_replies_correctly_passes() {
    check_service(|| Latch::new(Flaw::None), &workload()).unwrap();
}

#[test]
fn a_late_reply_given_twice_is_caught() {
    let err = check_service(|| Latch::new(Flaw::AnswersTwice), &workload()).unwrap_err();
    assert!(err.contains("deferred replies"), "{err}");
}

#[test]
fn waiting_requests_a_snapshot_forgets_are_caught() {
    let err = check_service(|| Latch::new(Flaw::ForgetsWaiters), &workload()).unwrap_err();
    assert!(err.contains("snapshot"), "{err}");
}

#[test]
fn waits_that_never_time_out_are_caught() {
    // The time-only batches run at the due time the service gives, which never passes:
    // the waits stay deferred for ever, and the suite says so.
    let err = check_service(|| Latch::new(Flaw::NeverTimesOut), &workload()).unwrap_err();
    assert!(err.contains("next_due_ms"), "{err}");
}
