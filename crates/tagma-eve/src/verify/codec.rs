//! Byte layouts of the verification: a VERIFY as an executor sends it (the payload of an
//! ordered request to the verifiers), a decision as they answer it, and the verifiers' whole
//! state (their snapshot). Integers are little-endian; decoding checks every length and
//! rejects trailing bytes, and never panics.

use std::collections::BTreeMap;

use thiserror::Error;

use super::{Decision, Tally, Verification};
use crate::quorum::Resilience;
use crate::token::Token;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum VerifyCodecError {
    #[error("truncated")]
    Truncated,
    #[error("{0} trailing bytes")]
    Trailing(usize),
    #[error("unknown tag {0}")]
    Tag(u8),
    #[error("invalid: {0}")]
    Invalid(&'static str),
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], VerifyCodecError> {
        if self.0.len() < N {
            return Err(VerifyCodecError::Truncated);
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, VerifyCodecError> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, VerifyCodecError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, VerifyCodecError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn token(&mut self) -> Result<Token, VerifyCodecError> {
        Ok(Token(self.take()?))
    }
    /// A count of elements of at least `min` bytes each, checked against what remains.
    fn count(&mut self, min: usize) -> Result<usize, VerifyCodecError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.0.len() {
            return Err(VerifyCodecError::Truncated);
        }
        Ok(n)
    }
    fn finish(self) -> Result<(), VerifyCodecError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(VerifyCodecError::Trailing(n)),
        }
    }
}

const VERIFY: u8 = 1;
const COMPLAIN: u8 = 2;
const QUERY: u8 = 3;

/// What an executor asks of the verifiers (the payload of its ordered request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifierRequest {
    /// VERIFY(view, batch, token, token of the batch before).
    Verify {
        view: u64,
        seq: u64,
        token: Token,
        previous: Token,
    },
    /// The executor sees no progress in `view`.
    Complain { view: u64 },
    /// Which token did batch `seq` commit with? (An executor checking a state offered to
    /// it.)
    Query { seq: u64 },
}

/// A VERIFY's payload: tag `u8` 1, view `u64`, batch `u64`, token, previous token.
pub fn encode_verify(view: u64, seq: u64, token: Token, previous: Token) -> Vec<u8> {
    let mut out = Vec::with_capacity(81);
    out.push(VERIFY);
    out.extend_from_slice(&view.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&token.0);
    out.extend_from_slice(&previous.0);
    out
}

/// A complaint's payload: tag `u8` 2, view `u64`.
pub fn encode_complaint(view: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    out.push(COMPLAIN);
    out.extend_from_slice(&view.to_le_bytes());
    out
}

/// A query's payload: tag `u8` 3, batch `u64`.
pub fn encode_query(seq: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    out.push(QUERY);
    out.extend_from_slice(&seq.to_le_bytes());
    out
}

/// Decodes an executor's request to the verifiers.
pub fn decode_request(bytes: &[u8]) -> Result<VerifierRequest, VerifyCodecError> {
    let mut r = Reader(bytes);
    let request = match r.u8()? {
        VERIFY => VerifierRequest::Verify {
            view: r.u64()?,
            seq: r.u64()?,
            token: r.token()?,
            previous: r.token()?,
        },
        COMPLAIN => VerifierRequest::Complain { view: r.u64()? },
        QUERY => VerifierRequest::Query { seq: r.u64()? },
        tag => return Err(VerifyCodecError::Tag(tag)),
    };
    r.finish()?;
    Ok(request)
}

const COMMIT: u8 = 1;
const ROLLBACK: u8 = 2;

impl Decision {
    /// Tag `u8` (1 commit, 2 rollback), batch `u64`, then the token (commit) or view `u64`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(41);
        match self {
            Decision::Commit { seq, token } => {
                out.push(COMMIT);
                out.extend_from_slice(&seq.to_le_bytes());
                out.extend_from_slice(&token.0);
            }
            Decision::Rollback { seq, view } => {
                out.push(ROLLBACK);
                out.extend_from_slice(&seq.to_le_bytes());
                out.extend_from_slice(&view.to_le_bytes());
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Decision, VerifyCodecError> {
        let mut r = Reader(bytes);
        let decision = match r.u8()? {
            COMMIT => Decision::Commit {
                seq: r.u64()?,
                token: r.token()?,
            },
            ROLLBACK => Decision::Rollback {
                seq: r.u64()?,
                view: r.u64()?,
            },
            tag => return Err(VerifyCodecError::Tag(tag)),
        };
        r.finish()?;
        Ok(decision)
    }
}

impl Verification {
    /// The whole state: u, r, genesis, timeout, view, last, kept, the committed tokens, the
    /// tallies (batch, first vote time, votes: executor, token, previous), the executors
    /// that complained about the view, the protection mode and the unanimous streak.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for n in [self.resilience.u as u64, self.resilience.r as u64] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&self.genesis.0);
        for n in [self.timeout_ms, self.view, self.last, self.kept as u64] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&(self.committed.len() as u32).to_le_bytes());
        for (seq, token) in &self.committed {
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&token.0);
        }
        out.extend_from_slice(&(self.tallies.len() as u32).to_le_bytes());
        for (seq, tally) in &self.tallies {
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&tally.first_vote_ms.to_le_bytes());
            out.extend_from_slice(&(tally.votes.len() as u32).to_le_bytes());
            for (executor, (token, previous)) in &tally.votes {
                out.extend_from_slice(&executor.to_le_bytes());
                out.extend_from_slice(&token.0);
                out.extend_from_slice(&previous.0);
            }
        }
        out.extend_from_slice(&(self.complaints.len() as u32).to_le_bytes());
        for executor in &self.complaints {
            out.extend_from_slice(&executor.to_le_bytes());
        }
        match self.protection {
            None => out.push(0),
            Some(p) => {
                out.push(1);
                out.extend_from_slice(&p.after_batches.to_le_bytes());
                out.extend_from_slice(&p.wait_ms.to_le_bytes());
            }
        }
        out.extend_from_slice(&self.streak.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Verification, VerifyCodecError> {
        let mut r = Reader(bytes);
        let (u, rr) = (r.u64()? as usize, r.u64()? as usize);
        let resilience =
            Resilience::new(u, rr).map_err(|_| VerifyCodecError::Invalid("resilience"))?;
        let genesis = r.token()?;
        let (timeout_ms, view, last, kept) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let mut committed = BTreeMap::new();
        for _ in 0..r.count(40)? {
            committed.insert(r.u64()?, r.token()?);
        }
        let mut tallies = BTreeMap::new();
        for _ in 0..r.count(20)? {
            let seq = r.u64()?;
            let first_vote_ms = r.u64()?;
            let mut votes = BTreeMap::new();
            for _ in 0..r.count(68)? {
                votes.insert(r.u32()?, (r.token()?, r.token()?));
            }
            tallies.insert(
                seq,
                Tally {
                    votes,
                    first_vote_ms,
                },
            );
        }
        let mut complaints = std::collections::BTreeSet::new();
        for _ in 0..r.count(4)? {
            complaints.insert(r.u32()?);
        }
        let protection = match r.u8()? {
            0 => None,
            1 => Some(super::Protection {
                after_batches: r.u64()?,
                wait_ms: r.u64()?,
            }),
            _ => return Err(VerifyCodecError::Invalid("protection flag")),
        };
        let streak = r.u64()?;
        r.finish()?;
        let kept = usize::try_from(kept).map_err(|_| VerifyCodecError::Invalid("kept"))?;
        let v = Verification {
            resilience,
            genesis,
            timeout_ms,
            view,
            committed,
            last,
            kept: kept.max(1),
            tallies,
            complaints,
            protection,
            streak,
        };
        if v.last > 0 && v.token_of(v.last).is_none() {
            return Err(VerifyCodecError::Invalid(
                "the last committed token is missing",
            ));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Verify;
    use super::*;

    #[test]
    fn the_state_verifies_and_decisions_decode_to_themselves_and_noise_is_refused() {
        let mut v = Verification::new(Resilience::new(1, 1).unwrap(), Token([0; 32]), 500, 8)
            .with_protection(super::super::Protection {
                after_batches: 3,
                wait_ms: 20,
            });
        let vote = |executor, seq, token: u8, previous: u8| Verify {
            executor,
            view: 0,
            seq,
            token: Token([token; 32]),
            previous: Token([previous; 32]),
        };
        v.verify(vote(0, 1, 1, 0), 3);
        v.verify(vote(1, 1, 1, 0), 3);
        v.verify(vote(0, 2, 2, 1), 4);
        v.complain(2, 0);
        let bytes = v.encode();
        assert_eq!(Verification::decode(&bytes).unwrap(), v);
        for d in [
            Decision::Commit {
                seq: 7,
                token: Token([5; 32]),
            },
            Decision::Rollback { seq: 7, view: 3 },
        ] {
            assert_eq!(Decision::decode(&d.encode()).unwrap(), d);
        }
        let payload = encode_verify(1, 2, Token([3; 32]), Token([4; 32]));
        assert_eq!(
            decode_request(&payload).unwrap(),
            VerifierRequest::Verify {
                view: 1,
                seq: 2,
                token: Token([3; 32]),
                previous: Token([4; 32])
            }
        );
        assert_eq!(
            decode_request(&encode_complaint(7)).unwrap(),
            VerifierRequest::Complain { view: 7 }
        );
        assert_eq!(
            decode_request(&encode_query(9)).unwrap(),
            VerifierRequest::Query { seq: 9 }
        );
        assert!(decode_request(&[4, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        // Every prefix, and a byte more, is refused without a panic.
        for cut in 0..bytes.len() {
            assert!(Verification::decode(&bytes[..cut]).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Verification::decode(&longer).is_err());
        assert!(decode_request(&payload[..80]).is_err());
        assert!(Decision::decode(&[9]).is_err());
    }
}
