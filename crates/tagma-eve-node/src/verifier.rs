//! The verifiers of the asynchronous BFT deployment as a replicated service: tagma's ordering
//! core puts the executors' VERIFYs in one order on every verifier (its agreement is the
//! verifiers' PREPARE and COMMIT, its leader change their view change), and this service
//! runs [`Verification`] over that order.
//!
//! A VERIFY is an ordered request of an executor (a client principal the service knows as
//! executor `i`) whose payload is [`encode_verify`](tagma_eve::verify::encode_verify)'s; a
//! complaint that the view makes no progress
//! ([`encode_complaint`](tagma_eve::verify::encode_complaint)) is answered at once with the
//! view in force or the last committed batch. Its reply is the decision of its
//! batch (VERIFY-RESPONSE, [`Decision::encode`]): at once if the batch is decided, else
//! deferred until it is; executors act on `r + 1` matching replies, the client library's
//! Byzantine reply quorum when `r = f`. A batch undecided for the timeout rolls back in the
//! agreed time, even when no executor sends anything.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_eve::verify::{Answer, Decision, Verification, VerifierRequest, Verify, decode_request};
use tagma_exec::{Context, LateReply, Service, ServiceError};
use tagma_wire::{ClientId, Digest, RequestSeq};

/// The reply to a VERIFY that is not one (a client that is no executor, a malformed
/// payload): it is never answered with a decision.
pub const REFUSED: &[u8] = b"refused";

/// A VERIFY waiting for its batch's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Waiting {
    client: ClientId,
    seq: RequestSeq,
    batch: u64,
}

/// The verifiers' replicated service.
pub struct VerifierService {
    verification: Verification,
    /// Client principal → executor number.
    executors: BTreeMap<u32, u32>,
    waiting: Vec<Waiting>,
}

impl VerifierService {
    /// Verification of the executors whose client principals are `executor_principals` (in
    /// executor order).
    pub fn new(verification: Verification, executor_principals: &[u32]) -> Self {
        VerifierService {
            verification,
            executors: (executor_principals.iter().enumerate())
                .map(|(i, p)| (*p, i as u32))
                .collect(),
            waiting: Vec::new(),
        }
    }

    /// Answers the VERIFYs the decisions settle.
    fn answer(&mut self, decisions: &[Decision], late: &mut Vec<LateReply>) {
        for decision in decisions {
            let settles = |w: &Waiting| match decision {
                Decision::Commit { seq, .. } => w.batch == *seq,
                // A rollback drops every vote: every VERIFY waiting learns the new view.
                Decision::Rollback { .. } => true,
            };
            let payload = Bytes::from(decision.encode());
            let (settled, still): (Vec<Waiting>, Vec<Waiting>) =
                self.waiting.drain(..).partition(settles);
            self.waiting = still;
            late.extend(settled.into_iter().map(|w| LateReply {
                client: w.client,
                seq: w.seq,
                payload: payload.clone(),
            }));
        }
    }

    fn one(&mut self, request: &Bytes, ctx: &Context, late: &mut Vec<LateReply>) -> Option<Bytes> {
        let refused = Some(Bytes::from_static(REFUSED));
        let Some(&executor) = self.executors.get(&ctx.client.principal()) else {
            return refused;
        };
        let (view, seq, token, previous) = match decode_request(request) {
            Ok(VerifierRequest::Verify {
                view,
                seq,
                token,
                previous,
            }) => (view, seq, token, previous),
            Ok(VerifierRequest::Query { seq }) => {
                let answer = self.verification.query(seq);
                return self.reply(answer, ctx);
            }
            Ok(VerifierRequest::Complain { view }) => {
                let (answer, decisions) = self.verification.complain(executor, view);
                self.answer(&decisions, late);
                return Some(Bytes::from(answer.encode()));
            }
            Err(_) => return refused,
        };
        let verify = Verify {
            executor,
            view,
            seq,
            token,
            previous,
        };
        let (answer, decisions) = self.verification.verify(verify, ctx.timestamp_ms);
        let reply = self.reply(answer, ctx);
        self.answer(&decisions, late);
        reply
    }

    /// The reply to a request answered with `answer`: now, never (refused), or once its
    /// batch is decided (the request waits).
    fn reply(&mut self, answer: Answer, ctx: &Context) -> Option<Bytes> {
        match answer {
            Answer::Now(decision) => Some(Bytes::from(decision.encode())),
            Answer::Refused => Some(Bytes::from_static(REFUSED)),
            Answer::Later { seq: batch } => {
                self.waiting.push(Waiting {
                    client: ctx.client,
                    seq: ctx.seq,
                    batch,
                });
                None
            }
        }
    }
}

impl Service for VerifierService {
    fn execute_ordered(&mut self, request: &Bytes, ctx: &Context) -> Bytes {
        // Without deferral (a caller that cannot take late replies), a waiting VERIFY is
        // answered with the last decision made.
        let mut late = Vec::new();
        let reply = self.one(request, ctx, &mut late);
        reply.unwrap_or_else(|| {
            let (seq, token) = self.verification.last_committed();
            Bytes::from(Decision::Commit { seq, token }.encode())
        })
    }

    fn execute_ordered_run(
        &mut self,
        requests: &[(Bytes, Context)],
        late: &mut Vec<LateReply>,
    ) -> Vec<Option<Bytes>> {
        requests
            .iter()
            .map(|(request, ctx)| self.one(request, ctx, late))
            .collect()
    }

    fn advance_time(&mut self, timestamp_ms: u64, late: &mut Vec<LateReply>) {
        let decisions = self.verification.advance_time(timestamp_ms);
        self.answer(&decisions, late);
    }

    fn next_due_ms(&self) -> Option<u64> {
        self.verification.next_due_ms()
    }

    /// The view in force and the last committed batch.
    fn execute_unordered(&self, _request: &Bytes, _ctx: &Context) -> Bytes {
        let (seq, token) = self.verification.last_committed();
        let mut out = self.verification.view().to_le_bytes().to_vec();
        out.extend_from_slice(&Decision::Commit { seq, token }.encode());
        Bytes::from(out)
    }

    /// The verification's state, then the waiting VERIFYs (client, request, batch).
    fn snapshot(&self) -> Bytes {
        let state = self.verification.encode();
        let mut out = Vec::with_capacity(state.len() + 8 + self.waiting.len() * 24);
        out.extend_from_slice(&(state.len() as u64).to_le_bytes());
        out.extend_from_slice(&state);
        for w in &self.waiting {
            out.extend_from_slice(&w.client.0.to_le_bytes());
            out.extend_from_slice(&w.seq.0.to_le_bytes());
            out.extend_from_slice(&w.batch.to_le_bytes());
        }
        Bytes::from(out)
    }

    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError> {
        let bad = |what: &str| ServiceError::InvalidSnapshot(what.to_string());
        let len = snapshot
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
            .ok_or_else(|| bad("truncated"))?;
        let state =
            (snapshot.get(8..8usize.saturating_add(len))).ok_or_else(|| bad("truncated"))?;
        let verification = Verification::decode(state).map_err(|e| bad(&e.to_string()))?;
        let rest = &snapshot[8 + len..];
        if !rest.len().is_multiple_of(24) {
            return Err(bad("waiting VERIFYs"));
        }
        let word = |c: &[u8]| u64::from_le_bytes(c.try_into().expect("8 bytes"));
        self.waiting = rest
            .chunks_exact(24)
            .map(|c| Waiting {
                client: ClientId(word(&c[..8])),
                seq: RequestSeq(word(&c[8..16])),
                batch: word(&c[16..24]),
            })
            .collect();
        self.verification = verification;
        Ok(())
    }

    fn state_digest(&self) -> Digest {
        Digest(*blake3::hash(&self.snapshot()).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use tagma_eve::verify::encode_verify;
    use tagma_eve::{Resilience, Token};
    use tagma_exec::conformance::check_service;

    use super::*;

    fn service() -> VerifierService {
        let v = Verification::new(Resilience::new(1, 1).unwrap(), Token([0; 32]), 1_000, 64);
        VerifierService::new(v, &[10, 11, 12])
    }

    fn ctx(principal: u32, seq: u64, timestamp_ms: u64) -> Context {
        Context {
            client: ClientId::new(principal, 0),
            seq: RequestSeq(seq),
            cid: None,
            timestamp_ms,
            seed: 0,
        }
    }

    fn verify(seq: u64, token: u8) -> Bytes {
        Bytes::from(encode_verify(0, seq, Token([token; 32]), Token([0; 32])))
    }

    #[test]
    fn a_verify_is_answered_when_its_batch_commits_and_at_once_after() {
        let mut s = service();
        let mut late = Vec::new();
        let replies = s.execute_ordered_run(
            &[(verify(1, 1), ctx(10, 1, 5)), (verify(1, 1), ctx(12, 1, 5))],
            &mut late,
        );
        let commit = Bytes::from(
            Decision::Commit {
                seq: 1,
                token: Token([1; 32]),
            }
            .encode(),
        );
        // The first waits, the second commits the batch and answers both.
        assert_eq!(replies, vec![None, None]);
        assert_eq!(late.len(), 2);
        assert!(late.iter().all(|l| l.payload == commit));
        let mut late = Vec::new();
        let replies = s.execute_ordered_run(&[(verify(1, 9), ctx(11, 1, 6))], &mut late);
        assert_eq!(replies, vec![Some(commit)]);
        // A client that is no executor is refused.
        let replies = s.execute_ordered_run(&[(verify(2, 1), ctx(99, 1, 6))], &mut late);
        assert_eq!(replies, vec![Some(Bytes::from_static(REFUSED))]);
    }

    #[test]
    fn an_undecided_batch_rolls_back_in_agreed_time_and_the_service_conforms() {
        let mut s = service();
        let mut late = Vec::new();
        s.execute_ordered_run(&[(verify(1, 1), ctx(10, 1, 100))], &mut late);
        assert_eq!(s.next_due_ms(), Some(1_100));
        s.advance_time(1_100, &mut late);
        assert_eq!(late.len(), 1);
        assert_eq!(
            Decision::decode(&late[0].payload).unwrap(),
            Decision::Rollback { seq: 1, view: 1 }
        );
        // Snapshots round-trip with waiting VERIFYs in them.
        let mut s = service();
        s.execute_ordered_run(&[(verify(1, 1), ctx(10, 1, 0))], &mut Vec::new());
        let mut other = service();
        other.install_snapshot(&s.snapshot()).unwrap();
        assert_eq!(other.state_digest(), s.state_digest());
        assert!(
            other
                .install_snapshot(&Bytes::from_static(b"junk"))
                .is_err()
        );
        // The suite's ordered requests all come from principal 1: one executor, whose votes
        // alone never commit, so its VERIFYs wait and roll back in agreed time.
        let conforming = || {
            let v = Verification::new(Resilience::new(1, 1).unwrap(), Token([0; 32]), 50, 64);
            VerifierService::new(v, &[1])
        };
        let workload: Vec<Bytes> = (1..40).map(|i| verify(i / 3 + 1, (i % 2) as u8)).collect();
        check_service(conforming, &workload).unwrap();
    }
}
