//! Client-side reply voting, sans-IO: a reply is accepted once `quorum` distinct
//! replicas sent byte-identical payloads; and view following ([`ViewFollower`]).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use tagma_config::{Mode, Quorums};
use tagma_wire::{Digest, Encode, ReplicaId, View, ViewId};

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

/// Follows the cluster's view from the replicas' reports (`ReplicaMessage::CurrentView`,
/// sent when a request named an older view): a client moves to a newer view once enough
/// members of its current view reported the very same one that one of them must be correct
/// (f+1 in BFT, one in CFT). Sans-IO: the proxy and the simulator both use it.
#[derive(Debug, Clone)]
pub struct ViewFollower {
    mode: Mode,
    view: ViewId,
    members: BTreeSet<ReplicaId>,
    quorums: Quorums,
    /// Newer views reported, by id and content, with the members that reported them.
    reports: BTreeMap<(ViewId, Digest), BTreeSet<ReplicaId>>,
}

impl ViewFollower {
    pub fn new(mode: Mode, view: &View) -> Self {
        ViewFollower {
            mode,
            view: view.id,
            members: view.members.iter().map(|m| m.id).collect(),
            quorums: Quorums::new(mode, view.members.len(), view.f as usize),
            reports: BTreeMap::new(),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The view requests go in.
    pub fn view(&self) -> ViewId {
        self.view
    }

    /// The current view's quorums (reply voting).
    pub fn quorums(&self) -> Quorums {
        self.quorums
    }

    pub fn is_member(&self, replica: ReplicaId) -> bool {
        self.members.contains(&replica)
    }

    /// Replica `from` reported `view`; returns it when the client moves to it. Reports from
    /// non-members, of older views, or of views that cannot tolerate their f are ignored.
    pub fn report(&mut self, from: ReplicaId, view: &View) -> Option<View> {
        if view.id <= self.view
            || !self.members.contains(&from)
            || view.members.len() < self.mode.replicas_needed(view.f as usize)
        {
            return None;
        }
        let key = (view.id, tagma_crypto::digest(&view.to_bytes()));
        let reporters = self.reports.entry(key).or_default();
        reporters.insert(from);
        if reporters.len() < self.quorums.one_correct() {
            return None;
        }
        *self = ViewFollower::new(self.mode, view);
        Some(view.clone())
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

    fn view(id: u32, ids: &[u32], f: u32) -> View {
        View {
            id: ViewId(id),
            f,
            members: ids
                .iter()
                .map(|i| tagma_wire::ViewMember {
                    id: ReplicaId(*i),
                    addr: format!("h:{i}"),
                    key: tagma_wire::PublicKey([*i as u8; 32]),
                })
                .collect(),
        }
    }

    #[test]
    fn a_view_is_followed_once_one_correct_member_must_have_reported_it() {
        let mut f = ViewFollower::new(Mode::Bft, &view(0, &[0, 1, 2, 3, 4], 1));
        let next = view(1, &[0, 1, 2, 3], 1);
        // A non-member, an older view, and one member are not enough (f + 1 = 2 needed).
        assert_eq!(f.report(ReplicaId(9), &next), None);
        assert_eq!(f.report(ReplicaId(1), &view(0, &[1, 2, 3, 4], 1)), None);
        assert_eq!(f.report(ReplicaId(1), &next), None);
        assert_eq!(f.report(ReplicaId(1), &next), None, "the same member twice");
        // Another member reporting a different view of the same id does not add up.
        assert_eq!(f.report(ReplicaId(2), &view(1, &[0, 1, 2, 4], 1)), None);
        // A view that cannot tolerate its f is never followed.
        assert_eq!(f.report(ReplicaId(3), &view(1, &[0, 1, 2], 1)), None);
        assert_eq!(f.report(ReplicaId(3), &next), Some(next.clone()));
        assert_eq!(f.view(), ViewId(1));
        assert!(!f.is_member(ReplicaId(4)));
        assert_eq!(f.quorums().n, 4);
        // CFT: one report suffices.
        let mut c = ViewFollower::new(Mode::Cft, &view(0, &[0, 1, 2, 3], 1));
        assert!(c.report(ReplicaId(0), &view(1, &[0, 1, 2], 1)).is_some());
    }
}
