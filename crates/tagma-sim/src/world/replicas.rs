//! Driving the simulated replicas: inputs to each core, the actions it asks for, its timer,
//! restarts, and client requests and replies at the replica.

use bytes::Bytes;
use tagma_core::{Action, Allowance, Input, Replica, Start};
use tagma_wire::{
    ClientId, DecidedInstance, Encode, PeerMessage, ReplicaId, Reply, RequestEnvelope, RequestKind,
};

use crate::{
    byzantine::FloodContext,
    scenario::Behaviour,
    world::{
        Event, World,
        disk::{Disk, SIM_CHUNK_BYTES},
        service_due::DueReport,
    },
};

impl World {
    pub(super) fn restart(&mut self, r: usize) {
        if !self.nodes[r].crashed || self.nodes[r].dormant {
            return;
        }
        self.note(b'C', r as u64, 0, &[], || format!("replica {r} restarts"));
        self.nodes[r].crashed = false;
        self.nodes[r].timer_at = None;
        if self.nodes[r].disk.as_ref().is_some_and(|d| d.damaged) {
            // The checksums caught the damage: the state is set aside and the replica
            // starts empty, fetching what it misses from the others.
            self.note(b'C', r as u64, 3, &[], || {
                format!("replica {r} finds its disk damaged and starts empty")
            });
            self.count("disk_discarded");
            self.nodes[r].disk = Some(Disk::default());
        }
        if self.nodes[r].disk.is_some() {
            let Some(recovered) = self.recover_from_disk(r) else {
                return;
            };
            self.count("durable_restarts");
            let node = &self.nodes[r];
            let empty = node
                .disk
                .as_ref()
                .is_some_and(|d| d.checkpoint.is_none() && d.log.is_empty());
            if node.joiner && empty {
                // A joiner that crashed before it had any state joins again.
                self.count("joiners_restarted_empty");
                self.start_core(r, Start::Joining);
            } else {
                self.start_core(r, Start::Recovered(recovered));
            }
        }
        self.arm_timer(r);
    }

    /// Gives replica `r` one input, then carries out every action it produced.
    pub(super) fn replica_input(&mut self, r: usize, input: Input) {
        let now = self.now_ms;
        let refused = self.nodes[r].core.stats().answers_refused;
        if let Err(rejection) = self.nodes[r].core.handle(now, input) {
            self.count(&format!("rejected_{}", rejection.reason()));
            if let tagma_core::Rejection::InvalidProposal {
                fault: tagma_core::ProposalFault::TimestampAhead { .. },
                ..
            } = &rejection
            {
                self.count("proposals_timestamped_ahead");
            }
            self.note(b'X', r as u64, 0, rejection.reason().as_bytes(), || {
                format!("replica {r} rejects: {rejection:?}")
            });
        }
        let refused = self.nodes[r].core.stats().answers_refused - refused;
        if refused > 0 {
            self.count_by("answers_refused", refused);
        }
        self.carry_out_actions(r);
    }

    /// Builds replica `r`'s core anew (a restart or a joiner's start), then carries out what
    /// it asks for at once.
    pub(super) fn start_core(&mut self, r: usize, start: Start) {
        let node = &mut self.nodes[r];
        node.core = Replica::new(node.params.clone(), node.key.clone(), start, self.now_ms);
        // A new core numbers its votes from 1 again, answers with a fresh budget, and knows
        // no due time of the service.
        node.last_vote_seq = 0;
        node.due = DueReport::fresh();
        self.forget_answers(r);
        self.carry_out_actions(r);
    }

    /// Carries out every action replica `r` queued, then re-arms its timer.
    pub(super) fn carry_out_actions(&mut self, r: usize) {
        while let Some(action) = self.nodes[r].core.poll_action() {
            self.carry_out(r, action);
            if !self.violations.is_empty() {
                return;
            }
        }
        let stats = self.nodes[r].core.stats();
        if self.nodes[r].lying_disk
            && stats.state_votes_confirmed + stats.state_checks_confirmed > 0
        {
            let msg = format!(
                "replica {r}'s state vote or check confirmed the state its disk lied about"
            );
            return self.violation("state_vote", msg);
        }
        // As the node's execution thread after every event: the core hears of a new due time.
        self.report_due(r);
        self.arm_timer(r);
    }

    pub(super) fn arm_timer(&mut self, r: usize) {
        let node = &self.nodes[r];
        if node.crashed {
            return;
        }
        let Some(deadline) = node.core.next_timeout_ms() else {
            return;
        };
        let at = deadline.max(self.now_ms);
        if node.timer_at.is_none_or(|t| at < t) {
            self.nodes[r].timer_at = Some(at);
            self.schedule(at, Event::ReplicaTimer(r as u32));
        }
    }

    pub(super) fn on_replica_timer(&mut self, r: usize) {
        if self.nodes[r].crashed {
            return; // frozen; re-armed on restart
        }
        if self.nodes[r].timer_at == Some(self.now_ms) {
            self.nodes[r].timer_at = None;
        }
        let due = self.nodes[r]
            .core
            .next_timeout_ms()
            .is_some_and(|t| t <= self.now_ms);
        if !due {
            self.arm_timer(r);
            return;
        }
        self.note(b'T', r as u64, 0, &[], || format!("replica {r} tick"));
        self.replica_input(r, Input::Tick);
        // A timer that is still due right after its tick would spin at one instant.
        if self.nodes[r]
            .core
            .next_timeout_ms()
            .is_some_and(|t| t <= self.now_ms)
        {
            self.count("core_timer_not_advanced");
            self.nodes[r].timer_at = Some(self.now_ms + 1);
            self.schedule(self.now_ms + 1, Event::ReplicaTimer(r as u32));
        }
    }

    pub(super) fn carry_out(&mut self, r: usize, action: Action) {
        match action {
            Action::Broadcast(msg) => {
                let dests: Vec<ReplicaId> = (0..self.nodes.len() as u32)
                    .filter(|&d| d as usize != r)
                    .map(ReplicaId)
                    .collect();
                self.send_peer(r, &dests, msg);
            }
            Action::Send { to, msg } => {
                self.note_answer(r, to, &msg);
                self.send_peer(r, &[to], msg);
            }
            Action::Deliver(decision) => {
                let (cid, hash) = (decision.cid, decision.hash);
                if self.nodes[r].exec.covers(cid) {
                    // The executor skips it (`execute_decided`); agreement still holds for it.
                    self.count("deliveries_covered_by_installed_state");
                    if let Some(first) = self.decided.get(cid.0 as usize).filter(|h| **h != hash)
                        && self.nodes[r].byz.is_none()
                    {
                        let msg = format!(
                            "replica {r} delivered {hash:?} for cid {cid} (covered by its installed state), another correct replica {first:?}"
                        );
                        self.violation("agreement", msg);
                    }
                    return;
                }
                self.note(b'D', r as u64, cid.0, &hash.0, || {
                    format!(
                        "replica {r} delivers cid {cid} epoch {} ({} requests, {hash:?})",
                        decision.epoch,
                        decision.batch.requests.len()
                    )
                });
                if self.nodes[r].byz.is_none() {
                    self.check_delivery(r, cid.0, hash, &decision.batch);
                    if !self.violations.is_empty() {
                        return;
                    }
                } else {
                    if let Some(first) = self.decided.get(cid.0 as usize).filter(|h| **h != hash) {
                        let msg = format!(
                            "Byzantine replica {r}'s core decided {hash:?} for cid {cid} from valid ACCEPTs, the correct replicas {first:?}"
                        );
                        self.violation("agreement", msg);
                        return;
                    }
                    let node = &mut self.nodes[r];
                    node.byz_decided.insert(cid.0, hash);
                    if let Some(byz) = node.byz.as_mut() {
                        byz.on_decided(&decision.batch);
                    }
                }
                // Checked first: an out-of-order delivery is an order violation, not a panic
                // of the executor. (Covered deliveries returned above.)
                let replies = self.nodes[r].exec.execute_batch(cid, &decision.batch);
                if decision.batch.requests.is_empty() {
                    self.nodes[r].due.executed_time_batch();
                }
                if self.nodes[r].byz.is_none() {
                    self.check_replies(r, cid.0, &decision.batch, &replies);
                    if !self.violations.is_empty() {
                        return;
                    }
                }
                let node = &mut self.nodes[r];
                if let Some(byz) = node.byz.as_mut()
                    && byz.has(Behaviour::LyingState)
                {
                    byz.remember_state(cid.0, node.exec.checkpoint());
                }
                let replies = self.log_to_disk(r, cid, decision.logged, replies);
                for reply in replies {
                    self.send_reply(r, reply);
                }
            }
            Action::ResendReply { client, seq } => {
                if let Some(reply) = self.nodes[r].exec.cached_reply(client, seq) {
                    self.send_reply(r, reply);
                } else {
                    self.count("resend_reply_not_cached");
                }
            }
            Action::RegencyInstalled { regency, leader } => {
                self.note(b'R', r as u64, regency.0 as u64, &[], || {
                    format!("replica {r} installs regency {regency} (leader {leader})")
                });
                self.count("regencies_installed");
                let node = &mut self.nodes[r];
                node.regency = node.regency.max(regency.0);
                if let Some(byz) = node.byz.as_mut() {
                    byz.on_regency(regency);
                }
            }
            Action::ViewInstalled { cid, view, member } => {
                self.note(b'V', r as u64, view.id.0 as u64, &[], || {
                    let ids: Vec<u32> = view.members.iter().map(|m| m.id.0).collect();
                    format!(
                        "replica {r} installs view {} after cid {cid}: members {ids:?}, f = {}",
                        view.id, view.f
                    )
                });
                self.count("view_installs");
                if view.f as usize != self.sc.f {
                    self.count("f_changes_installed");
                }
                if self.nodes[r].byz.is_none() {
                    match self.views.get(&view.id) {
                        Some(v) if *v != view => {
                            let msg = format!(
                                "replica {r} installed view {} as {view:?}, another correct replica as {v:?}",
                                view.id
                            );
                            self.violation("view", msg);
                            return;
                        }
                        Some(_) => {}
                        None => {
                            if let Some(j) = view
                                .members
                                .iter()
                                .map(|m| m.id.0 as usize)
                                .find(|j| self.nodes[*j].dormant)
                            {
                                let at = self.now_ms + 1;
                                self.schedule(at, Event::StartJoiner(j as u32));
                            }
                            self.views.insert(view.id, view);
                        }
                    }
                }
                if !member {
                    self.count("replicas_left");
                }
            }
            Action::ReadChunk {
                to,
                cid,
                offset,
                len,
            } => {
                let Some(disk) = self.nodes[r].disk.as_ref() else {
                    return;
                };
                let held = disk
                    .checkpoint
                    .iter()
                    .chain(&disk.previous)
                    .find(|(c, _)| *c == cid.0);
                let Some((_, state)) = held else {
                    // As the node's transfer thread: an empty chunk says it is gone.
                    self.count("chunk_of_dropped_checkpoint");
                    let data = Bytes::new();
                    let msg = PeerMessage::Chunk { cid, offset, data };
                    self.note_answer(r, to, &msg);
                    self.send_peer(r, &[to], msg);
                    return;
                };
                let data = state.slice(offset as usize..offset as usize + len as usize);
                self.count("chunks_served");
                let msg = PeerMessage::Chunk { cid, offset, data };
                self.note_answer(r, to, &msg);
                self.send_peer(r, &[to], msg);
            }
            Action::ReadLog {
                to,
                from,
                count,
                bytes_max,
            } => {
                let entries: Vec<DecidedInstance> = self.nodes[r]
                    .disk
                    .iter()
                    .flat_map(|disk| &disk.log)
                    .filter(|d| d.cid >= from && d.cid.0 < from.0 + u64::from(count))
                    .cloned()
                    .collect();
                let mut sent = Allowance::default();
                for d in entries {
                    let msg = PeerMessage::LogEntry(d);
                    let bytes = msg.encoded_len() as u64;
                    if sent.bytes + bytes > bytes_max {
                        break;
                    }
                    sent.messages += 1;
                    sent.bytes += bytes;
                    self.note_answer(r, to, &msg);
                    self.send_peer(r, &[to], msg);
                }
                let unused = Allowance {
                    messages: u64::from(count).saturating_sub(sent.messages),
                    bytes: bytes_max.saturating_sub(sent.bytes),
                };
                self.replica_input(r, Input::LogServed { to, unused });
            }
            Action::PersistVote { seq, votes } => {
                self.nodes[r].last_vote_seq = seq;
                if let Some(disk) = self.nodes[r].disk.as_mut() {
                    // Written (a process crash keeps it) with the `WriteVotes` that follows.
                    disk.unflushed_votes.insert(votes.cid.0, votes);
                }
            }
            Action::WriteVotes { flush, .. } => {
                if !flush {
                    return;
                }
                let incarnation = self.nodes[r].incarnation;
                let Some(disk) = self.nodes[r].disk.as_mut() else {
                    unreachable!("only durable replicas (with a disk) write votes");
                };
                if !disk.vote_flush_scheduled {
                    disk.vote_flush_scheduled = true;
                    let at = self.now_ms + self.rng.range(0, 4);
                    let replica = r as u32;
                    self.schedule(
                        at,
                        Event::VoteFlush {
                            replica,
                            incarnation,
                        },
                    );
                }
            }
            Action::AwaitLogDurable { .. } => {
                // The log's flushes are scheduled as records are written, and each reports
                // `LogDurable`.
                self.count("log_waits");
            }
            Action::SendCurrentView { client, view } => self.send_current_view(r, client, view),
            Action::StoreChunk { offset, data, .. } => {
                let incoming = &mut self.nodes[r].incoming;
                if offset == 0 {
                    incoming.clear();
                }
                debug_assert_eq!(incoming.len() as u64, offset, "chunks are stored in order");
                incoming.extend_from_slice(&data);
            }
            Action::InstallState(state) => self.install_state(r, state),
            Action::DigestState { cid } => {
                // The state vote's digest of the recovered state (computed at once).
                let digest = {
                    let node = &self.nodes[r];
                    debug_assert_eq!(node.delivered, cid.0 + 1, "the last instance delivered");
                    node.exec.checkpoint_digest()
                };
                self.count("state_digests");
                self.replica_input(r, Input::StateDigest { cid, digest });
            }
            Action::CheckpointNow { cid } => {
                // The fresh checkpoint a peer the state vote contradicted repairs from, of the
                // state now, written with the next flush (as the node's checkpoint thread waits
                // for the log).
                let node = &mut self.nodes[r];
                debug_assert!(node.delivered > cid.0, "asked after its delivery");
                let Some(last) = node.delivered.checked_sub(1) else {
                    return;
                };
                let state = node.exec.checkpoint();
                let Some(disk) = node.disk.as_mut() else {
                    return;
                };
                disk.pending_checkpoint = Some((last, state));
                self.count("fresh_checkpoints");
                self.schedule_log_flush(r);
            }
            Action::StateTransferNeeded {
                next_cid,
                known_decided,
            } => {
                self.count("state_transfer_needed");
                self.note(b'S', r as u64, next_cid.0, &[], || {
                    format!(
                        "replica {r} needs state transfer (next {next_cid}, known {known_decided})"
                    )
                });
            }
        }
    }

    pub(super) fn on_byz_tick(&mut self, r: usize) {
        let peers: Vec<ReplicaId> = (0..self.nodes.len() as u32)
            .filter(|&d| d as usize != r)
            .map(ReplicaId)
            .collect();
        let flood = FloodContext {
            next: self.nodes[r].core.next_cid(),
            chunk_bytes: SIM_CHUNK_BYTES,
        };
        if let Some(byz) = self.nodes[r].byz.as_mut() {
            let outs = byz.tick(&mut self.rng, &mut self.exercised, &peers, flood);
            for out in outs {
                let bytes = out.msg.to_bytes();
                self.transmit_peer(r as u32, out.to.0, bytes, out.extra_delay_ms, out.bad_mac);
            }
            let at = self.now_ms + self.rng.range(100, 400);
            self.schedule(at, Event::ByzTick(r as u32));
        }
    }

    pub(super) fn on_request(&mut self, client: usize, to: u32, envelope: RequestEnvelope) {
        let r = to as usize;
        if self.nodes[r].crashed || self.nodes[r].left() {
            // A replica removed from the view stops serving, reads included.
            return;
        }
        let req = &envelope.request;
        self.note(
            b'q',
            client as u64,
            to as u64,
            &tagma_crypto::request_digest(req).0,
            || {
                format!(
                    "client {client} → replica {to}: {:?} seq {}",
                    req.kind, req.seq
                )
            },
        );
        if req.kind == RequestKind::Unordered {
            let reply = self.nodes[r].exec.execute_unordered(
                req.client,
                req.seq,
                &req.payload,
                self.now_ms,
            );
            self.send_reply(r, reply);
            return;
        }
        self.replica_input(r, Input::ClientRequest(envelope));
    }

    /// `Action::SendCurrentView`: replica `r` tells a client the installed view.
    pub(super) fn send_current_view(&mut self, r: usize, client: ClientId, view: tagma_wire::View) {
        let Some(c) = self.client_index(client) else {
            return; // the administrator's client does not follow views
        };
        if !self.client_link_cut(r as u32) && !self.rng.chance(self.net.drop_p) {
            let at = self.now_ms + self.delay();
            let from = r as u32;
            self.schedule(
                at,
                Event::ClientView {
                    client: c,
                    from,
                    view,
                },
            );
        }
    }

    pub(super) fn send_reply(&mut self, r: usize, mut reply: Reply) {
        let Some(client) = self.client_index(reply.client) else {
            return;
        };
        if let Some(byz) = self.nodes[r].byz.as_ref() {
            let service = self.sc.service;
            match byz.rewrite_reply(&mut self.rng, &mut self.exercised, service, reply.payload) {
                Some(p) => reply.payload = p,
                None => return,
            }
        }
        if self.client_link_cut(r as u32) || self.rng.chance(self.net.drop_p) {
            self.count("reply_lost");
            return;
        }
        let at = self.now_ms + self.delay();
        self.schedule(
            at,
            Event::Reply {
                client,
                from: r as u32,
                reply,
            },
        );
    }
}
