//! The simulated clients: closed-loop operations of the run's workload, retransmission (a
//! deferred reply is waited for like any other), the unordered-read fallback, reply voting,
//! and what the checks read of each completed operation: the history the linearizability
//! checker reads (key-value runs), the coordination service's ledger (space runs).

use bytes::Bytes;
use tagma_client::Voter;
use tagma_kv::KvReply;
use tagma_wire::{
    ClientId, ReplicaId, Reply, Request, RequestAuth, RequestEnvelope, RequestKind, RequestSeq,
};

use crate::{
    client::{
        Attempt, Call, Outstanding, RETRANSMIT_MS, THINK_MS_MAX, UNORDERED_TIMEOUT_MS, Workload,
    },
    kv_client::{seen_after, to_ret},
    linearizability::Entry,
    scenario::ClientFault,
    world::{Event, Phase, Wake, World},
};

impl World {
    pub(super) fn client_index(&self, id: ClientId) -> Option<usize> {
        let i = id.principal().checked_sub(100)? as usize;
        (i < self.clients.len() && self.clients[i].id == id).then_some(i)
    }

    pub(super) fn wake_client(&mut self, c: usize, at_ms: u64, wake: Wake) {
        self.clients[c].token += 1;
        let token = self.clients[c].token;
        self.schedule(
            at_ms,
            Event::ClientWake {
                client: c,
                token,
                wake,
            },
        );
    }

    pub(super) fn on_client_wake(&mut self, c: usize, token: u64, wake: Wake) {
        if token != self.clients[c].token {
            return;
        }
        match wake {
            Wake::Start => self.start_op(c),
            Wake::Retransmit => {
                self.count("client_retransmissions");
                self.send_attempt(c, false);
            }
            Wake::UnorderedTimeout => self.fall_back_to_ordered(c, "timeout"),
        }
    }

    pub(super) fn start_op(&mut self, c: usize) {
        let client = &self.clients[c];
        if client.out.is_some() {
            return;
        }
        if matches!(self.phase, Phase::Liveness { .. })
            && (!client.is_correct()
                || client.liveness_left == Some(0) && !self.lying_disk_unconfirmed())
        {
            return;
        }
        let unordered_p = self.sc.unordered_p;
        let correct = self.clients[c].is_correct();
        let (call, history, unordered) = match &mut self.clients[c].workload {
            Workload::Kv(kv) => {
                let (op, model, unordered) = kv.next_op(&mut self.rng, unordered_p);
                let history = match model {
                    Some((key, m)) if correct => {
                        let h = self.histories.entry(key.clone()).or_default();
                        h.push(Entry {
                            op: m,
                            invoke: self.step,
                            response: None,
                        });
                        Some((key, h.len() - 1))
                    }
                    _ => None,
                };
                (Call::Kv(op), history, unordered)
            }
            Workload::Space(space) if correct => {
                let (call, unordered) = space.next_call(&mut self.rng, &self.sc.space, unordered_p);
                self.issue_space_call(&call);
                (Call::Space(call), None, unordered)
            }
            Workload::Space(space) => {
                let call = space.next_faulty_call(&mut self.rng, &self.sc.space);
                (Call::Space(call), None, false)
            }
        };
        let client = &mut self.clients[c];
        let attempt = if unordered {
            client.last_useq += 1;
            Attempt::Unordered(RequestSeq(client.last_useq))
        } else {
            client.last_seq += 1;
            Attempt::Ordered(RequestSeq(client.last_seq))
        };
        client.out = Some(Outstanding {
            call,
            history,
            attempt,
            voter: {
                let q = self.client_views[c].quorums();
                Voter::new(q.reply_quorum(true), q.n)
            },
            started_ms: self.now_ms,
        });
        self.send_attempt(c, true);
    }

    pub(super) fn envelope(&self, c: usize, attempt: &Attempt, payload: Bytes) -> RequestEnvelope {
        let (seq, kind) = match attempt {
            Attempt::Ordered(s) => (*s, RequestKind::Ordered),
            Attempt::Unordered(s) => (*s, RequestKind::Unordered),
        };
        RequestEnvelope {
            request: Request {
                client: self.clients[c].id,
                seq,
                kind,
                view: self.client_views[c].view(),
                payload,
            },
            // Authentication is simulated: the network stage checks the request digest
            // against the requests clients issued.
            auth: RequestAuth::Macs(Vec::new()),
        }
    }

    /// Sends the current attempt (`first`: the first send of this attempt, where a faulty
    /// client misbehaves) and arms the retransmission or unordered timer.
    pub(super) fn send_attempt(&mut self, c: usize, first: bool) {
        let Some(out) = self.clients[c].out.as_ref() else {
            return;
        };
        let attempt = out.attempt.clone();
        let envelope = self.envelope(c, &attempt, out.call.encode());
        self.issued
            .insert(tagma_crypto::request_digest(&envelope.request));
        let n = self.nodes.len() as u32;
        let mut targets: Vec<(u32, RequestEnvelope)> =
            (0..n).map(|r| (r, envelope.clone())).collect();
        let fault = self.clients[c].fault;
        if first && matches!(attempt, Attempt::Ordered(_)) {
            match fault {
                Some(ClientFault::OneFollower) => {
                    let r = 1 + self.rng.below(n as u64 - 1) as u32;
                    targets.retain(|(t, _)| *t == r);
                    *self.exercised.entry("client_one_follower").or_default() += 1;
                }
                Some(ClientFault::Equivocate) => {
                    let alt_payload = match &self.clients[c].workload {
                        Workload::Kv(kv) => kv.equivocation(&mut self.rng).encode(),
                        Workload::Space(space) => space.equivocation(&mut self.rng).payload,
                    };
                    let alt = self.envelope(c, &attempt, alt_payload);
                    self.issued
                        .insert(tagma_crypto::request_digest(&alt.request));
                    let mut order: Vec<u32> = (0..n).collect();
                    self.rng.shuffle(&mut order);
                    for &r in &order[..order.len() / 2] {
                        targets[r as usize].1 = alt.clone();
                    }
                    *self.exercised.entry("client_equivocate").or_default() += 1;
                }
                None => {}
            }
        }
        for (r, env) in targets {
            if self.client_link_cut(r) || self.rng.chance(self.net.drop_p) {
                self.count("request_lost");
                continue;
            }
            let at = self.now_ms + self.delay();
            self.schedule(
                at,
                Event::Request {
                    client: c,
                    to: r,
                    envelope: env,
                },
            );
        }
        let (timeout, wake) = match attempt {
            Attempt::Ordered(_) => (RETRANSMIT_MS + self.rng.below(100), Wake::Retransmit),
            Attempt::Unordered(_) => (UNORDERED_TIMEOUT_MS, Wake::UnorderedTimeout),
        };
        self.wake_client(c, self.now_ms + timeout, wake);
    }

    pub(super) fn on_reply(&mut self, c: usize, from: u32, reply: Reply) {
        self.note(b'r', c as u64, from as u64, &reply.payload, || {
            format!(
                "replica {from} → client {c}: {:?} seq {}",
                reply.kind, reply.seq
            )
        });
        if !self.client_views[c].is_member(ReplicaId(from)) {
            // Not a member of the view this client is in: its reply does not count.
            return;
        }
        let Some(out) = self.clients[c].out.as_mut() else {
            return;
        };
        let matches = match out.attempt {
            Attempt::Ordered(s) => reply.kind == RequestKind::Ordered && reply.seq == s,
            Attempt::Unordered(s) => reply.kind == RequestKind::Unordered && reply.seq == s,
        };
        if !matches {
            return;
        }
        if let Some(payload) = out.voter.add(ReplicaId(from), reply.payload) {
            self.complete(c, payload);
        } else if matches!(out.attempt, Attempt::Unordered(_)) && out.voter.exhausted() {
            self.fall_back_to_ordered(c, "replies disagree");
        }
    }

    pub(super) fn fall_back_to_ordered(&mut self, c: usize, why: &str) {
        let client = &mut self.clients[c];
        let Some(out) = client.out.as_mut() else {
            return;
        };
        client.last_seq += 1;
        out.attempt = Attempt::Ordered(RequestSeq(client.last_seq));
        let q = self.client_views[c].quorums();
        out.voter = Voter::new(q.reply_quorum(true), q.n);
        self.count("unordered_fallbacks");
        self.note(b'F', c as u64, 0, why.as_bytes(), || {
            format!("client {c}: unordered read falls back to ordered ({why})")
        });
        self.send_attempt(c, false);
    }

    pub(super) fn complete(&mut self, c: usize, payload: Bytes) {
        let Some(out) = self.clients[c].out.take() else {
            return;
        };
        let elapsed_ms = self.now_ms - out.started_ms;
        self.note(b'K', c as u64, 0, &payload, || {
            format!("client {c} completes {:?} after {elapsed_ms} ms", out.call)
        });
        self.count("ops_completed");
        if let Some((key, idx)) = out.history {
            let op = self.histories[&key][idx].op;
            let result = KvReply::decode(&payload)
                .map_err(|e| format!("undecodable reply: {e}"))
                .and_then(|reply| to_ret(&op, &reply));
            match result {
                Ok(ret) => {
                    self.histories.get_mut(&key).expect("history")[idx].response =
                        Some((self.step, ret));
                    if let Workload::Kv(kv) = &mut self.clients[c].workload {
                        kv.last_seen.insert(key, seen_after(&op, &ret));
                    }
                }
                Err(e) => {
                    self.violation("client_reply", format!("client {c} {:?}: {e}", out.call));
                    return;
                }
            }
        }
        if let Call::Space(call) = &out.call {
            self.complete_space(c, call, &out.attempt, &payload);
            if !self.violations.is_empty() {
                return;
            }
        }
        let client = &mut self.clients[c];
        client.completed += 1;
        if let Some(left) = client.liveness_left.as_mut() {
            *left = left.saturating_sub(1);
            if *left == 0 && !self.lying_disk_unconfirmed() {
                return;
            }
        }
        let at = self.now_ms + self.rng.range(0, THINK_MS_MAX);
        self.wake_client(c, at, Wake::Start);
    }
}
