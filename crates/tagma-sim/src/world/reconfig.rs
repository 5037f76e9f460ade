//! Reconfiguration in the simulator: the administrator's signed view change (a forged one first
//! in half the runs), the joiner it adds, and clients following the new view.

use tagma_client::Voter;
use tagma_core::{Start, view::sign_change};
use tagma_crypto::IdentityKey;
use tagma_wire::{
    ClientId, Encode, ReplicaId, Request, RequestAuth, RequestEnvelope, RequestKind, RequestSeq,
    ViewId,
};

use crate::{
    client::RETRANSMIT_MS,
    world::{Event, World},
};

/// The principal of the administrator's client (not one of the simulated clients).
pub(super) const ADMIN_PRINCIPAL: u32 = 99;

/// How often the administrator sends its view change before giving up.
pub(super) const RECONFIG_SENDS_MAX: u32 = 8;

/// A simulated replica's executor: the key-value service, judging view changes as the core
/// does.
/// How a join plan's replica `i` is added.
pub(super) fn joiner_member(i: usize, key: &IdentityKey) -> tagma_wire::ViewMember {
    tagma_wire::ViewMember {
        id: ReplicaId(i as u32),
        addr: format!("sim:{i}"),
        key: key.public(),
    }
}

impl World {
    /// The administrator's view change (removing the plan's replica), preceded by a forged
    /// one in half the plans, sent to every replica like a client request; resent until a
    /// correct replica installed a view.
    pub(super) fn send_view_change(&mut self) {
        let Some(plan) = self.sc.reconfig.clone() else {
            return;
        };
        if !self.views.is_empty() || self.reconfig_sends >= RECONFIG_SENDS_MAX {
            return;
        }
        self.reconfig_sends += 1;
        let ops = vec![self.plan_op(&plan)];
        let mut changes = Vec::new();
        if plan.forged_first {
            // Another removal, so a forgery that went through would show in the view.
            let forger = IdentityKey::from_seed([0x66; 32]);
            let other = (plan.remove + 1) % self.nodes.len() as u32;
            let forged = vec![tagma_wire::ViewOp::Remove(ReplicaId(other))];
            changes.push(sign_change(&forger, ViewId(0), forged));
        }
        changes.push(sign_change(&self.admin, ViewId(0), ops));
        let sends = self.reconfig_sends;
        let what = match (plan.join, plan.set_f) {
            (Some(j), _) => format!("add replica {j}"),
            (None, Some(f)) => format!("set f to {f}"),
            (None, None) => format!("remove replica {}", plan.remove),
        };
        self.note(b'V', plan.remove as u64, sends as u64, &[], || {
            format!("administrator asks to {what} (send {sends})")
        });
        for (i, change) in changes.into_iter().enumerate() {
            let envelope = RequestEnvelope {
                request: Request {
                    client: ClientId::new(ADMIN_PRINCIPAL, 1),
                    seq: RequestSeq(i as u64 + 1),
                    kind: RequestKind::Reconfigure,
                    view: ViewId(0),
                    payload: change.to_bytes(),
                },
                auth: RequestAuth::Macs(Vec::new()),
            };
            self.issued
                .insert(tagma_crypto::request_digest(&envelope.request));
            for r in 0..self.nodes.len() as u32 {
                if self.client_link_cut(r) || self.rng.chance(self.net.drop_p) {
                    continue;
                }
                let at = self.now_ms + self.delay();
                self.schedule(
                    at,
                    Event::Request {
                        client: usize::MAX,
                        to: r,
                        envelope: envelope.clone(),
                    },
                );
            }
        }
        let again = self.now_ms + RETRANSMIT_MS;
        self.schedule(again, Event::Reconfigure);
    }

    /// The administrator's operation in `plan`.
    pub(super) fn plan_op(&self, plan: &crate::scenario::ReconfigPlan) -> tagma_wire::ViewOp {
        match (plan.join, plan.set_f) {
            (Some(j), _) => {
                tagma_wire::ViewOp::Add(joiner_member(j as usize, &self.nodes[j as usize].key))
            }
            (None, Some(f)) => tagma_wire::ViewOp::SetF(f),
            (None, None) => tagma_wire::ViewOp::Remove(ReplicaId(plan.remove)),
        }
    }

    /// The lowest f of the run (a plan may lower it): the fault budgets use it.
    pub(super) fn f_floor(&self) -> usize {
        let lowered = self.sc.reconfig.as_ref().and_then(|p| p.set_f);
        lowered.map_or(self.sc.f, |f| (f as usize).min(self.sc.f))
    }

    /// A correct replica installed the view that adds dormant replica `j`: it starts, in that
    /// view, and fetches its state (as `tagma replica --join` does once the members accept
    /// it).
    pub(super) fn start_joiner(&mut self, j: usize) {
        if !self.nodes[j].dormant {
            return;
        }
        self.nodes[j].dormant = false;
        self.nodes[j].crashed = false;
        self.count("joiners_started");
        self.note(b'J', j as u64, 0, &[], || {
            format!("replica {j} starts joining")
        });
        self.start_core(j, Start::Joining);
    }

    /// A replica reports the installed view to client `c`: once one correct replica must be
    /// among those reporting the same newer view (f+1 in BFT, one in CFT), the client moves to
    /// it and retransmits its request there.
    pub(super) fn on_client_view(&mut self, c: usize, from: u32, view: tagma_wire::View) {
        let Some(view) = self.client_views[c].report(ReplicaId(from), &view) else {
            return;
        };
        self.note(b'v', c as u64, view.id.0 as u64, &[], || {
            format!(
                "client {c} moves to view {} ({} members)",
                view.id,
                view.members.len()
            )
        });
        self.count("client_view_changes");
        let q = self.client_views[c].quorums();
        if let Some(out) = self.clients[c].out.as_mut() {
            out.voter = Voter::new(q.reply_quorum(true), q.n);
            self.send_attempt(c, false);
        }
    }
}
