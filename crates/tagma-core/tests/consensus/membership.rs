//! Membership: views installed by ordered, signed view changes at the same instance on every
//! replica, requests of an older view, a removed leader handing over, changes that do not
//! apply, and decisions proven under the view they were decided in.

use tagma_core::view::sign_change;
use tagma_core::{Action, Mode, Rejection};
use tagma_wire::{
    ClientId, Encode, RequestEnvelope, RequestKind, ViewChange, ViewId, ViewMember, ViewOp,
};

use crate::harness::cluster::Cluster;
use crate::harness::*;

fn in_view(mut request: RequestEnvelope, view: u32) -> RequestEnvelope {
    request.request.view = ViewId(view);
    request
}

/// An ordered view change from the administrator's client (principal 9).
fn reconfig(seq: u64, view: u32, change: ViewChange) -> RequestEnvelope {
    let mut request = in_view(req(9 << 32, seq), view);
    request.request.kind = RequestKind::Reconfigure;
    request.request.payload = change.to_bytes();
    request
}

fn added(id: u32) -> ViewOp {
    ViewOp::Add(ViewMember {
        id: r(id),
        addr: addr(id),
        key: key(id).public(),
    })
}

#[test]
fn a_signed_view_change_installs_at_the_same_instance_everywhere_and_a_removed_leader_hands_over() {
    let mut c = Cluster::new(Mode::Bft, 4, 11);
    c.client_request(req(1, 1));
    c.run_until_quiet();
    // Add replica 4 (not running): n = 5, f = 1, so 4 ACCEPTs decide — the four suffice.
    let add = sign_change(&admin(), ViewId(0), vec![added(4)]);
    c.client_request(reconfig(1, 0, add));
    c.run_until_quiet();
    let installed = c.views[0].clone();
    assert_eq!(installed.len(), 1);
    let (cid, view, member) = &installed[0];
    assert!(*member);
    assert_eq!((view.id, view.members.len(), view.f), (ViewId(1), 5, 1));
    for i in 0..4 {
        assert_eq!(
            c.views[i], installed,
            "replica {i} installed the same view at the same instance"
        );
        assert_eq!(c.delivered[i].len() as u64, cid.0 + 1);
    }
    // Requests of the old view are refused now, and their client is told the new view;
    // requests of the new one are ordered.
    assert_eq!(
        c.replicas[1].receive_request(c.now_ms, req(2, 1)),
        Err(Rejection::WrongView { view: ViewId(0) })
    );
    assert_eq!(
        drain(&mut c.replicas[1]),
        vec![Action::SendCurrentView {
            client: ClientId(2),
            view: view.clone(),
        }]
    );
    c.client_request(in_view(req(1, 2), 1));
    c.run_until_quiet();
    assert!(c.delivered.iter().all(|d| d.len() as u64 == cid.0 + 2));
    // A change signed by another key, or for a view no longer installed, changes nothing.
    let forged = sign_change(&key(1), ViewId(1), vec![ViewOp::Remove(r(3))]);
    let stale = sign_change(&admin(), ViewId(0), vec![ViewOp::Remove(r(3))]);
    c.client_request(reconfig(2, 1, forged));
    c.client_request(reconfig(3, 1, stale));
    c.run_until_quiet();
    assert!(
        c.views.iter().all(|v| v.len() == 1),
        "refused changes install nothing"
    );
    // Remove the leader (replica 0): replicas 1..3 install view 2 and replica 1 leads at once,
    // in the same regency; replica 0 leaves and takes no more input.
    assert_eq!(c.replicas[1].leader(), r(0));
    let regency = c.replicas[1].regency();
    let remove = sign_change(&admin(), ViewId(1), vec![ViewOp::Remove(r(0))]);
    c.client_request(reconfig(4, 1, remove));
    c.run_until_quiet();
    for i in 0..4 {
        let (_, view, member) = c.views[i].last().unwrap();
        assert_eq!(view.id, ViewId(2));
        assert_eq!(*member, i != 0, "replica {i}");
    }
    assert_eq!(c.views[1][1].0, c.views[0][1].0, "same instance");
    for i in 1..4 {
        assert_eq!(c.replicas[i].leader(), r(1));
        assert_eq!(
            c.replicas[i].regency(),
            regency,
            "no leader change was needed"
        );
    }
    assert_eq!(
        c.replicas[0].receive_request(c.now_ms, in_view(req(1, 3), 2)),
        Err(Rejection::NotMember)
    );
    assert_eq!(c.replicas[0].next_timeout_ms(), None);
    c.crashed.insert(r(0));
    // Members 1, 2, 3 and the absent 4: n = 4, f = 1, 3 ACCEPTs decide.
    let before = c.delivered[1].len();
    c.client_request(in_view(req(1, 3), 2));
    c.run_until_quiet();
    for i in 1..4 {
        assert_eq!(
            c.delivered[i].len(),
            before + 1,
            "replica {i} ordered in view 2"
        );
        assert_eq!(c.replicas[i].stats().views_installed, 2);
    }
}

#[test]
fn view_changes_that_do_not_apply_leave_the_view_and_f_grows_only_with_enough_members() {
    let mut c = Cluster::new(Mode::Cft, 3, 5);
    // CFT n = 3: f = 2 needs 5 replicas.
    let too_high = sign_change(&admin(), ViewId(0), vec![ViewOp::SetF(2)]);
    c.client_request(reconfig(1, 0, too_high));
    c.run_until_quiet();
    assert!(c.views.iter().all(Vec::is_empty));
    assert_eq!(
        c.delivered[0].len(),
        1,
        "the refused change was still ordered"
    );
    // Two replicas (absent) and f = 2 in one change: n = 5, f = 2, and the three running
    // replicas are a CFT majority (3 of 5).
    let grow = sign_change(
        &admin(),
        ViewId(0),
        vec![added(3), added(4), ViewOp::SetF(2)],
    );
    c.client_request(reconfig(2, 0, grow));
    c.run_until_quiet();
    for i in 0..3 {
        let (_, view, member) = c.views[i].last().unwrap();
        assert!(*member);
        assert_eq!((view.members.len(), view.f), (5, 2));
    }
    c.client_request(in_view(req(1, 1), 1));
    c.run_until_quiet();
    assert!(c.delivered.iter().all(|d| d.len() == 3));
}

/// A leader change right after a view change that added a replica: the SYNC carries the last
/// decided instance — the one that ordered the change — whose proof holds under the view it
/// was decided in (3 of 5 in CFT), not under the new one (4 of 6). It must be judged by the
/// view of its instance, or every leader change after an addition fails.
#[test]
fn a_leader_change_right_after_an_addition_accepts_the_previous_views_proof() {
    let mut c = Cluster::new(Mode::Cft, 5, 21);
    c.crashed.insert(r(5)); // added, never started: messages to it are lost
    c.client_request(req(1, 1));
    c.run_until_quiet();
    let add = sign_change(&admin(), ViewId(0), vec![added(5)]);
    c.client_request(reconfig(1, 0, add));
    c.run_until_quiet();
    for i in 0..5 {
        let (_, view, _) = c.views[i].last().expect("view 1 installed");
        assert_eq!((view.id, view.members.len(), view.f), (ViewId(1), 6, 2));
    }
    let before = c.delivered[1].len();
    // The leader crashes; replicas 1..4 are a CFT majority of 6 (replica 5 never runs).
    c.crashed.insert(r(0));
    c.lenient = true; // forwarded and retransmitted requests meet duplicates
    c.client_request(in_view(req(1, 2), 1));
    c.run_with_timers(c.now_ms + 60_000);
    for i in 1..5 {
        assert_eq!(
            c.delivered[i].len(),
            before + 1,
            "replica {i} ordered in view 1 after the leader change"
        );
        assert_ne!(c.replicas[i].leader(), r(0));
    }
}

/// The `PeerMessage::StateQuery` broadcasts among `actions`.
fn state_queries_sent(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::Broadcast(tagma_wire::PeerMessage::StateQuery { .. })
            )
        })
        .count()
}

#[test]
fn an_added_replica_restarted_from_a_state_before_its_addition_fetches_what_follows() {
    // Replica 4, added by view 1, restarts from a disk whose state ends at instance 3, still
    // in view 0: the decisions after it carry view 0's proofs, which its core (in view 1)
    // cannot judge. It fetches them as a joining replica does.
    let mut p = durable_params(Mode::Bft, 4, 0, true);
    let genesis = p.membership();
    let view1 = tagma_core::view::apply(&genesis.view, &[added(4)], Mode::Bft).unwrap();
    p.me = r(4);
    p.set_view(&view1);
    let mut before = resumed(3, 30, &[], Vec::new());
    before.view = Some(genesis.view.clone());
    let mut joiner = restart(p.clone(), Some(before), Vec::new(), Vec::new(), 100);
    assert_eq!(state_queries_sent(&drain(&mut joiner)), 1);

    // One whose state reaches view 1 catches up by decisions as any restarted replica.
    let mut after = resumed(9, 90, &[], Vec::new());
    after.view = Some(view1);
    let mut member = restart(p, Some(after), Vec::new(), Vec::new(), 100);
    assert_eq!(state_queries_sent(&drain(&mut member)), 0);
}
