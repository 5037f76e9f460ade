//! Client-side reply voting (SPEC §2), sans-IO: a reply is accepted once `quorum` distinct
//! replicas sent byte-identical payloads.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_wire::ReplicaId;

/// Votes of the replicas on one request's reply.
#[derive(Debug, Clone)]
pub struct Voter {
    quorum: usize,
    n: usize,
    /// First reply of each replica (later ones from the same replica are ignored, so one
    /// replica can never vote twice).
    replies: BTreeMap<ReplicaId, Bytes>,
}

impl Voter {
    pub fn new(quorum: usize, n: usize) -> Self {
        assert!(
            quorum >= 1 && quorum <= n,
            "reply quorum {quorum} impossible with n = {n}"
        );
        Voter {
            quorum,
            n,
            replies: BTreeMap::new(),
        }
    }

    /// Records `from`'s reply; returns the accepted payload once a quorum matches.
    pub fn add(&mut self, from: ReplicaId, payload: Bytes) -> Option<Bytes> {
        if self.replies.contains_key(&from) {
            return None;
        }
        let matching = self.replies.values().filter(|p| **p == payload).count() + 1;
        self.replies.insert(from, payload.clone());
        (matching >= self.quorum).then_some(payload)
    }

    /// True when no payload can reach the quorum any more, even if every silent replica
    /// answers (the replies disagree).
    pub fn exhausted(&self) -> bool {
        let best = self
            .replies
            .values()
            .map(|p| self.replies.values().filter(|q| *q == p).count())
            .max()
            .unwrap_or(0);
        best + (self.n - self.replies.len()) < self.quorum
    }

    pub fn replies(&self) -> usize {
        self.replies.len()
    }

    pub fn quorum(&self) -> usize {
        self.quorum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn bft_f_plus_one_matching() {
        let mut v = Voter::new(2, 4);
        assert_eq!(v.add(ReplicaId(0), b("x")), None);
        assert_eq!(v.add(ReplicaId(1), b("y")), None);
        assert_eq!(v.add(ReplicaId(2), b("x")), Some(b("x")));
    }

    #[test]
    fn a_replica_votes_once() {
        let mut v = Voter::new(2, 4);
        assert_eq!(v.add(ReplicaId(3), b("evil")), None);
        assert_eq!(v.add(ReplicaId(3), b("evil")), None);
        assert_eq!(v.replies(), 1);
    }

    #[test]
    fn cft_one_reply_suffices() {
        let mut v = Voter::new(1, 3);
        assert_eq!(v.add(ReplicaId(2), b("ok")), Some(b("ok")));
    }

    #[test]
    fn exhausted_when_replies_disagree() {
        let mut v = Voter::new(3, 4);
        v.add(ReplicaId(0), b("a"));
        v.add(ReplicaId(1), b("b"));
        assert!(!v.exhausted());
        v.add(ReplicaId(2), b("c"));
        assert!(v.exhausted(), "best 1 + 1 silent < 3");
    }
}
