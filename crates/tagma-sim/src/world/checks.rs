//! The invariants checked while a seed runs (agreement, order, validity on every delivery; at
//! most one reply to a request from each correct replica's execution) and at its end
//! (liveness, per-key linearizability, the coordination service's workload, equal state
//! digests).

use std::collections::BTreeMap;

use tagma_wire::{Batch, Digest, Encode, Reply};

use crate::{
    linearizability::{self, LinError},
    world::World,
};

impl World {
    /// After a correct replica first delivered `cid` with `hash`: a Byzantine replica's
    /// (honest) core that decided it otherwise from valid ACCEPTs breaks agreement too.
    pub(super) fn check_byzantine_decisions(&mut self, cid: u64, hash: Digest) {
        for r in 0..self.nodes.len() {
            if let Some(other) = self.nodes[r].byz_decided.get(&cid).filter(|h| **h != hash) {
                let msg = format!(
                    "Byzantine replica {r}'s core decided {other:?} for cid {cid} from valid ACCEPTs, the correct replicas {hash:?}"
                );
                self.violation("agreement", msg);
            }
        }
    }

    /// Agreement, total order (prefix) and validity, on every delivery of a correct replica.
    pub(super) fn check_delivery(&mut self, r: usize, cid: u64, hash: Digest, batch: &Batch) {
        let expected = self.nodes[r].delivered;
        if cid != expected {
            self.violation(
                "order",
                format!("replica {r} delivered cid {cid}, expected cid {expected}"),
            );
            return;
        }
        let encoded_hash = tagma_crypto::digest(&batch.to_bytes());
        if encoded_hash != hash {
            self.violation(
                "decision_hash",
                format!("replica {r} cid {cid}: delivered hash {hash:?} is not the batch's hash {encoded_hash:?}"),
            );
            return;
        }
        match self.decided.get(cid as usize) {
            Some(first) if *first != hash => {
                let first = *first;
                self.violation(
                    "agreement",
                    format!("replica {r} delivered {hash:?} for cid {cid}, another correct replica {first:?}"),
                );
                return;
            }
            Some(_) => {}
            None => {
                debug_assert_eq!(self.decided.len() as u64, cid);
                self.decided.push(hash);
                self.check_byzantine_decisions(cid, hash);
                self.record_agreed(batch);
            }
        }
        for envelope in &batch.requests {
            let req = &envelope.request;
            if !req.kind.is_ordered() {
                self.violation(
                    "validity",
                    format!(
                        "replica {r} cid {cid}: unordered request {}/{} in a batch",
                        req.client, req.seq
                    ),
                );
                return;
            }
            if !self.issued.contains(&tagma_crypto::request_digest(req)) {
                self.violation(
                    "validity",
                    format!(
                        "replica {r} cid {cid}: request {}/{} was never issued by its client",
                        req.client, req.seq
                    ),
                );
                return;
            }
            if self.nodes[r]
                .executed
                .insert((req.client, req.seq), cid)
                .is_some()
            {
                self.violation(
                    "validity",
                    format!(
                        "replica {r} cid {cid}: request {}/{} executed twice",
                        req.client, req.seq
                    ),
                );
                return;
            }
        }
        self.nodes[r].delivered += 1;
    }

    /// Correct replica `r` executed `batch` as instance `cid` and gave `replies`: each request
    /// is answered at most once in a replica's life (a deferred reply included), whatever
    /// leader changes, crashes and state transfers came between.
    pub(super) fn check_replies(&mut self, r: usize, cid: u64, batch: &Batch, replies: &[Reply]) {
        for reply in replies {
            let key = (reply.client, reply.seq);
            if let Some(first) = self.nodes[r].replied.insert(key, cid) {
                let msg = format!(
                    "replica {r} answered {}/{} at cid {cid}, and at cid {first} before",
                    reply.client, reply.seq
                );
                return self.violation("reply_once", msg);
            }
        }
        self.record_answers(batch, replies);
    }

    pub(super) fn all_correct_done(&self) -> bool {
        !self.lying_disk_unconfirmed()
            && self
                .clients
                .iter()
                .filter(|c| c.is_correct())
                .all(|c| c.liveness_left == Some(0) && c.out.is_none())
    }

    /// A running replica whose disk lied still has its state unconfirmed: the liveness phase
    /// goes on (its clients keep ordering) until the later state check repairs it. A replica
    /// the newest view leaves out is not waited for, whether or not it knows: the members
    /// answer it nothing more, so nothing repairs it.
    pub(super) fn lying_disk_unconfirmed(&self) -> bool {
        (0..self.nodes.len()).any(|r| {
            let n = &self.nodes[r];
            n.lying_disk && !n.crashed && !n.left() && n.byz.is_none() && !self.removed(r)
        })
    }

    /// Whether the newest view a correct replica installed leaves replica `r` out.
    pub(super) fn removed(&self, r: usize) -> bool {
        self.views
            .values()
            .next_back()
            .is_some_and(|v| !v.members.iter().any(|m| m.id.0 as usize == r))
    }

    pub(super) fn fail_liveness(&mut self, why: &str) {
        let mut detail = format!("{why} at {} ms;", self.now_ms);
        for c in self.clients.iter().filter(|c| c.is_correct()) {
            if let Some(out) = &c.out {
                detail.push_str(&format!(
                    " client {} waits for {:?} {:?} since {} ms ({} replies);",
                    c.index,
                    out.attempt,
                    out.call,
                    out.started_ms,
                    out.voter.replies()
                ));
            } else if c.liveness_left != Some(0) {
                detail.push_str(&format!(
                    " client {} has {:?} ops left;",
                    c.index, c.liveness_left
                ));
            }
        }
        for (r, node) in self.nodes.iter().enumerate() {
            let due = node
                .exec
                .next_due_ms()
                .map_or(String::new(), |t| format!(" due {t}"));
            detail.push_str(&format!(
                " r{r}: next_cid {} regency {}{due}{}{};",
                node.core.next_cid(),
                node.regency,
                if node.crashed { " crashed" } else { "" },
                if node.byz.is_some() { " byzantine" } else { "" }
            ));
        }
        self.note(b'L', 0, 0, detail.as_bytes(), || {
            format!("LIVENESS FAILURE: {detail}")
        });
        self.liveness_failure = Some(detail);
    }

    pub(super) fn final_checks(&mut self) {
        if !self.violations.is_empty() {
            return;
        }
        let histories = std::mem::take(&mut self.histories);
        for (key, history) in &histories {
            match linearizability::check(history, None) {
                Ok(()) => {}
                Err(LinError::Inconclusive) => self.count("linearizability_inconclusive"),
                Err(LinError::NotLinearizable) => {
                    let key = String::from_utf8_lossy(key).into_owned();
                    self.violation(
                        "linearizability",
                        format!(
                            "key {key}: history of {} operations is not linearizable: {history:?}",
                            history.len()
                        ),
                    );
                    return;
                }
            }
        }
        self.histories = histories;
        if self.sc.service == crate::options::SimService::Space {
            self.final_space_checks();
            if !self.violations.is_empty() {
                return;
            }
        }
        // The only view a correct replica may install is the administrator's.
        if let Some(plan) = self.sc.reconfig.clone() {
            let ops = [self.plan_op(&plan)];
            let expected = tagma_core::view::apply(&self.membership.view, &ops, self.sc.mode)
                .expect("the plan's change applies");
            for view in self.views.values() {
                if *view != expected {
                    let msg = format!(
                        "view {} installed is {view:?}, the administrator signed {expected:?}",
                        view.id
                    );
                    self.violation("view", msg);
                    return;
                }
            }
        }
        for r in 0..self.nodes.len() {
            let stats = self.nodes[r].core.stats();
            for (name, n) in [
                ("state_checks_confirmed", stats.state_checks_confirmed),
                ("state_checks_contradicted", stats.state_checks_contradicted),
                ("states_unconfirmed_at_end", stats.state_unconfirmed),
            ] {
                if n > 0 {
                    *self.counters.entry(name.to_string()).or_default() += n;
                }
            }
        }
        // A replica whose disk lied is repaired by now, or says that its state is unconfirmed:
        // never silently diverged.
        for r in 0..self.nodes.len() {
            let node = &self.nodes[r];
            if !node.lying_disk || node.crashed || node.left() {
                continue;
            }
            if node.core.is_starting_up() || node.core.stats().state_unconfirmed > 0 {
                self.count("lying_disks_unconfirmed_at_end");
                continue;
            }
            let msg = format!(
                "replica {r}'s disk lied, its state was not replaced, and it does not report it unconfirmed"
            );
            self.violation("state_check", msg);
            return;
        }
        // Correct replicas at the same execution position hold the same state.
        let mut by_position: BTreeMap<u64, (usize, Digest)> = BTreeMap::new();
        for r in 0..self.nodes.len() {
            if self.nodes[r].byz.is_some() || self.nodes[r].lying_disk {
                continue;
            }
            let pos = self.nodes[r].exec.executed_instances();
            let digest = self.nodes[r].exec.state_digest();
            match by_position.get(&pos) {
                Some(&(other, d)) if d != digest => {
                    self.violation(
                        "state",
                        format!("replicas {other} and {r} executed {pos} instances but hold different states"),
                    );
                    return;
                }
                Some(_) => {}
                None => {
                    by_position.insert(pos, (r, digest));
                }
            }
        }
    }
}
