//! Following the cluster's views: moving requests to a newer view the replicas report, asking
//! for the installed view, and a new client's bootstrap from the administrator's signed
//! history.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tagma_wire::{ClientMessage, Encode, ReplicaId};
use tracing::debug;

use super::call::voter;
use super::links::{members_of, send_all};
use super::{Inner, Proxy};
use crate::error::ClientError;
use crate::locking::lock;
use crate::voting::ViewFollower;

impl Proxy {
    /// Asks every connected replica for the view it installed (as far as it executed) and
    /// returns the newest view that enough replicas report for one of them to be correct (f+1
    /// in BFT, one in CFT) — waiting, until `timeout`, for the answers that could still
    /// change it (a replica that does not answer costs nothing once the others settle it).
    /// Requests then go in it.
    pub fn current_view(&self, timeout: Duration) -> Result<tagma_wire::View, ClientError> {
        let inner = &self.inner;
        let asked = inner
            .members()
            .links
            .iter()
            .filter(|l| l.is_connected())
            .count();
        let (tx, rx) = crossbeam_channel::bounded(asked.max(1) * 2);
        lock(&inner.view_queries).push(tx);
        inner.send_all(&ClientMessage::ViewQuery.to_bytes());
        let started = Instant::now();
        let deadline = started + timeout;
        let needed = lock(&inner.follower).quorums().one_correct();
        let mut reports: HashMap<ReplicaId, tagma_wire::View> = HashMap::new();
        while reports.len() < asked && !settled(&reports, asked - reports.len(), needed) {
            match rx.recv_deadline(deadline) {
                Ok((from, view)) => {
                    reports.insert(from, view);
                }
                Err(_) => break,
            }
        }
        drop(rx);
        let Some(view) = newest_vouched(&reports, needed).cloned() else {
            return Err(ClientError::Timeout {
                after_ms: started.elapsed().as_millis() as u64,
                replies: reports.len(),
                quorum: needed,
            });
        };
        let newer = {
            let mut follower = lock(&inner.follower);
            let newer = view.id > follower.view();
            if newer {
                *follower = ViewFollower::new(follower.mode(), &view);
            }
            newer
        };
        if newer {
            inner.move_to_view(&view);
        }
        Ok(view)
    }
}

/// The newest view at least `needed` replicas report.
fn newest_vouched(
    reports: &HashMap<ReplicaId, tagma_wire::View>,
    needed: usize,
) -> Option<&tagma_wire::View> {
    let mut best: Option<&tagma_wire::View> = None;
    for view in reports.values() {
        let agreeing = reports.values().filter(|v| *v == view).count();
        if agreeing >= needed && best.is_none_or(|b| view.id > b.id) {
            best = Some(view);
        }
    }
    best
}

/// Whether `remaining` more answers can no longer change [`newest_vouched`]: no view newer
/// than it, reported yet or not, can reach `needed` reports with them.
fn settled(
    reports: &HashMap<ReplicaId, tagma_wire::View>,
    remaining: usize,
    needed: usize,
) -> bool {
    if remaining >= needed {
        return false;
    }
    let best = newest_vouched(reports, needed).map(|v| v.id);
    reports.values().all(|view| {
        let agreeing = reports.values().filter(|v| *v == view).count();
        best.is_some_and(|b| view.id <= b) || agreeing + remaining < needed
    })
}

impl Inner {
    /// Asks the connected replicas for the administrator's signed history and replays each
    /// from the configured view `initial` ([`tagma_config::view::replay`]): the newest view a
    /// valid history leads to, if newer than `initial`. A faulty replica can only send an
    /// older (shorter) history, never a view the administrator did not sign.
    pub(super) fn bootstrap_view(
        &self,
        initial: &tagma_wire::View,
        admin: &tagma_wire::PublicKey,
    ) -> Option<tagma_wire::View> {
        let links = self
            .members()
            .links
            .iter()
            .filter(|l| l.is_connected())
            .count();
        let (tx, rx) = crossbeam_channel::bounded(links.max(1) * 2);
        lock(&self.history_queries).push(tx.clone());
        self.send_all(&ClientMessage::ViewHistoryQuery.to_bytes());
        let deadline = Instant::now() + self.connect_timeout.max(Duration::from_millis(500));
        let mut best: Option<tagma_wire::View> = None;
        let mut answered = std::collections::BTreeSet::new();
        while answered.len() < links {
            let Ok((from, history)) = rx.recv_deadline(deadline) else {
                break;
            };
            answered.insert(from);
            match tagma_config::view::replay(initial, admin, self.mode, &history) {
                Ok(view) if best.as_ref().is_none_or(|b| view.id > b.id) => best = Some(view),
                Ok(_) => {}
                Err(e) => debug!("replica {from} sent a view history that does not replay: {e}"),
            }
        }
        lock(&self.history_queries).retain(|t| !t.same_channel(&tx));
        best.filter(|v| v.id > initial.id)
    }

    /// A replica refused a request of an older view and reported the installed one (or
    /// answered a view query). Once the follower moves (f+1 members reported the same newer
    /// view), requests go in it, to its members, voted on with its quorums.
    pub(super) fn on_current_view(&self, from: ReplicaId, view: tagma_wire::View) {
        lock(&self.view_queries).retain(|tx| tx.try_send((from, view.clone())).is_ok());
        let Some(view) = lock(&self.follower).report(from, &view) else {
            return;
        };
        self.move_to_view(&view);
    }

    /// Requests go in `view` from now on, to its members (links to new members connect on
    /// the next maintenance tick; links to replicas no longer members close); pending ones
    /// are rebuilt in it, voted on afresh, and sent again.
    pub(super) fn move_to_view(&self, view: &tagma_wire::View) {
        let members = {
            let mut current = self
                .members
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if view.id <= current.view {
                return;
            }
            let next = match members_of(
                &self.key,
                self.mode,
                self.readonly,
                self.reply_quorum,
                view,
                Some(&current),
            ) {
                Ok(m) => Arc::new(m),
                Err(e) => {
                    tracing::warn!("cannot follow view {}: {e}", view.id);
                    return;
                }
            };
            for link in &current.links {
                if !next.links.iter().any(|l| Arc::ptr_eq(l, link)) {
                    link.close();
                }
            }
            *current = next.clone();
            self.leader.reset(&next);
            next
        };
        tracing::info!(
            client = self.client.0,
            view = view.id.0,
            members = view.members.len(),
            "the cluster installed a new view: requests follow it"
        );
        let mut resend = Vec::new();
        for ((kind, seq), call) in lock(&self.calls).iter_mut() {
            call.frame = self.build_frame(&members, *kind, *seq, call.payload.clone());
            call.voter = voter(&members, *kind);
            call.members = members.clone();
            call.last_sent = Instant::now();
            call.spread = true;
            resend.push(call.frame.clone());
        }
        for frame in resend {
            send_all(&members, &frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use tagma_wire::{View, ViewId};

    use super::*;

    fn view(id: u32) -> View {
        View {
            id: ViewId(id),
            f: 1,
            members: Vec::new(),
        }
    }

    fn reports(views: &[(u32, u32)]) -> HashMap<ReplicaId, View> {
        views
            .iter()
            .map(|(replica, id)| (ReplicaId(*replica), view(*id)))
            .collect()
    }

    #[test]
    fn the_answers_settle_once_the_missing_ones_cannot_vouch_for_a_newer_view() {
        // f + 1 = 2 reports vouch; one of four replicas has not answered.
        let same = reports(&[(0, 3), (1, 3), (2, 3)]);
        assert_eq!(newest_vouched(&same, 2).map(|v| v.id), Some(ViewId(3)));
        assert!(settled(&same, 1, 2));
        // Two missing answers could vouch for a view nobody reported yet.
        assert!(!settled(&reports(&[(0, 3), (1, 3)]), 2, 2));
        // One report of a newer view: the missing answer could make it the newest vouched.
        let split = reports(&[(0, 3), (1, 3), (2, 4)]);
        assert_eq!(newest_vouched(&split, 2).map(|v| v.id), Some(ViewId(3)));
        assert!(!settled(&split, 1, 2));
        // An older view with one report cannot change the answer.
        assert!(settled(&reports(&[(0, 3), (1, 3), (2, 2)]), 1, 2));
        // Nothing vouched for and nothing can be: settled (no view).
        let scattered = reports(&[(0, 1), (1, 2), (2, 3)]);
        assert_eq!(newest_vouched(&scattered, 2), None);
        assert!(settled(&scattered, 0, 2));
        assert!(!settled(&scattered, 1, 2));
    }
}
