//! Quorum arithmetic of execute-verify replication, in one place.
//!
//! `u` is the number of faulty replicas the system stays live with; `r` the number of
//! commission faults (replicas that lie) it stays safe with, `r ≥ u` being the usual case.
//! Then `n_E = u + max(u, r) + 1` executors and `n_V = 2u + r + 1` verifiers (which may
//! share processes with the executors); a token is agreed on when `max(u, r) + 1` executors
//! sent it (at least one of them correct, and enough that a correct executor is among any
//! `n_E − u` that answer); verifiers move on with `n_V − u` matching messages; an executor
//! acts on `r + 1` matching responses of verifiers. With `r = 0` (`n_E = 2u + 1`) the same
//! rules mask concurrency bugs instead of lies: a race manifested on a minority of
//! executors is outvoted and repaired.

use crate::error::EveError;
use crate::token::Token;

/// The faults a deployment tolerates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resilience {
    /// Faulty replicas tolerated for liveness.
    pub u: usize,
    /// Commission (lying) faults tolerated for safety.
    pub r: usize,
}

impl Resilience {
    pub fn new(u: usize, r: usize) -> Result<Self, EveError> {
        if u == 0 {
            return Err(EveError::Resilience { u, r });
        }
        Ok(Resilience { u, r })
    }

    /// `n_E`: executors.
    pub fn executors(self) -> usize {
        self.u + self.u.max(self.r) + 1
    }

    /// `n_V`: verifiers.
    pub fn verifiers(self) -> usize {
        2 * self.u + self.r + 1
    }

    /// Matching tokens (VERIFYs) that agree on a batch: `max(u, r) + 1`.
    pub fn token_quorum(self) -> usize {
        self.u.max(self.r) + 1
    }

    /// Matching PREPAREs, COMMITs or view-change messages a verifier waits for: `n_V − u`.
    pub fn verifier_quorum(self) -> usize {
        self.verifiers() - self.u
    }

    /// Matching VERIFY-RESPONSEs an executor acts on: `r + 1`.
    pub fn response_quorum(self) -> usize {
        self.r + 1
    }
}

/// What the tokens executors sent for one batch say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// `token` was sent by at least the quorum (`matching` executors).
    Agreed { token: Token, matching: usize },
    /// No token reached the quorum.
    Diverged,
}

/// The token that at least `quorum` of `tokens` name, if one does (with `2 · quorum >
/// tokens.len()` at most one can).
pub fn agree(tokens: &[Token], quorum: usize) -> Agreement {
    let mut best: Option<(Token, usize)> = None;
    for token in tokens {
        let matching = tokens.iter().filter(|t| *t == token).count();
        if best.is_none_or(|(_, m)| matching > m) {
            best = Some((*token, matching));
        }
    }
    match best {
        Some((token, matching)) if matching >= quorum.max(1) => {
            Agreement::Agreed { token, matching }
        }
        _ => Agreement::Diverged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_u_and_r() {
        let bft = Resilience::new(1, 1).unwrap();
        assert_eq!((bft.executors(), bft.verifiers()), (3, 4));
        assert_eq!(
            (
                bft.token_quorum(),
                bft.verifier_quorum(),
                bft.response_quorum()
            ),
            (2, 3, 2)
        );
        // Concurrency-bug masking: r = 0, n_E = 2u + 1.
        let masking = Resilience::new(1, 0).unwrap();
        assert_eq!((masking.executors(), masking.token_quorum()), (3, 2));
        let strong = Resilience::new(1, 3).unwrap();
        assert_eq!((strong.executors(), strong.verifiers()), (5, 6));
        assert_eq!(
            Resilience::new(0, 1),
            Err(EveError::Resilience { u: 0, r: 1 })
        );
    }

    #[test]
    fn agreement_needs_the_quorum() {
        let a = Token([1; 32]);
        let b = Token([2; 32]);
        assert_eq!(
            agree(&[a, b, a], 2),
            Agreement::Agreed {
                token: a,
                matching: 2
            }
        );
        assert_eq!(agree(&[a, b], 2), Agreement::Diverged);
        assert_eq!(agree(&[], 2), Agreement::Diverged);
        assert_eq!(
            agree(&[a], 0),
            Agreement::Agreed {
                token: a,
                matching: 1
            }
        );
    }
}
