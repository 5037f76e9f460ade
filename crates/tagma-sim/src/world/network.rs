//! The simulated network between replicas: delays, drops, duplicates, partitions and bad MACs;
//! Byzantine rewrites of outgoing messages; the network stage each receiver runs (the core's
//! own conversion).

use bytes::Bytes;
use tagma_core::{Input, PeerInput};
use tagma_wire::{Decode, Encode, PeerMessage, ReplicaId, RequestEnvelope};

use crate::{
    byzantine::Out,
    scenario::Behaviour,
    world::{
        Event, World,
        describe::{describe, message_counter},
        disk::checkpoint_info,
        executor::{lie_request, new_executor},
    },
};

impl World {
    pub(super) fn on_peer(&mut self, from: u32, to: u32, bytes: Bytes, bad_mac: bool) {
        let r = to as usize;
        if self.nodes[r].crashed {
            self.count("peer_lost_crashed");
            return;
        }
        if bad_mac {
            self.count("peer_bad_mac_dropped");
            self.note(b'M', from as u64, to as u64, &[], || {
                format!("{from}→{to}: bad MAC, dropped")
            });
            return;
        }
        let msg = match PeerMessage::decode(&bytes) {
            Ok(m) => m,
            Err(e) => {
                self.count("peer_undecodable");
                self.note(b'U', from as u64, to as u64, &[], || {
                    format!("{from}→{to}: undecodable: {e}")
                });
                return;
            }
        };
        self.count(message_counter(&msg));
        self.note(b'p', from as u64, to as u64, &bytes, || {
            format!("{from}→{to}: {}", describe(&msg))
        });
        if let Some(byz) = self.nodes[r].byz.as_mut() {
            byz.on_received(&msg);
            if let PeerMessage::StateOffer { checkpoint, .. } = &msg {
                byz.note_offer(ReplicaId(from), *checkpoint);
            }
        }
        if self.nodes[r]
            .byz
            .as_ref()
            .is_some_and(|b| b.has(Behaviour::LyingState))
        {
            self.lie_about_state(r, from, &msg);
        }
        // The simulated replicas never join (no view exchange to answer).
        let Some(input) = self.network_stage(msg) else {
            return;
        };
        let from = ReplicaId(from);
        self.replica_input(r, Input::Peer { from, input });
    }

    /// The checkpoint `truth` plus a write nobody ordered: well-formed, with the same
    /// instance, sessions and timestamp (what a lying source serves, and a lying disk holds).
    pub(super) fn with_a_lie(&self, truth: &Bytes) -> Option<Bytes> {
        let mut liar = new_executor(self.sc.service, &self.membership, 0);
        liar.restore(truth).ok()?;
        liar.execute_unordained(&lie_request(self.sc.service));
        Some(liar.checkpoint())
    }

    /// [`Behaviour::LyingState`]: asked for state, replica `r` prepares a wrong checkpoint —
    /// its own state plus a write nobody ordered, well-formed and under its true digest, at
    /// an instance it has executed — and serves its chunks when asked.
    pub(super) fn lie_about_state(&mut self, r: usize, from: u32, msg: &PeerMessage) {
        match msg {
            PeerMessage::StateQuery { next } => {
                // The lowest of its past states the asker could use: likely the chosen source.
                let Some((cid, truth)) = self.nodes[r]
                    .byz
                    .as_ref()
                    .and_then(|b| b.state_at_or_after(next.0.saturating_sub(1)))
                else {
                    return;
                };
                let Some(state) = self.with_a_lie(&truth) else {
                    return;
                };
                let info = checkpoint_info(cid, &state);
                if let Some(byz) = self.nodes[r].byz.as_mut() {
                    byz.set_state_lie(info, state);
                }
            }
            PeerMessage::ChunkRequest { cid, offset, len } => {
                let chunk = self.nodes[r]
                    .byz
                    .as_ref()
                    .and_then(|b| b.state_lie_chunk(*cid, *offset, *len));
                if let Some(data) = chunk {
                    let msg = PeerMessage::Chunk {
                        cid: *cid,
                        offset: *offset,
                        data,
                    };
                    self.send_peer(r, &[ReplicaId(from)], msg);
                }
            }
            _ => {}
        }
    }

    pub(super) fn authentic(&self, r: &RequestEnvelope) -> bool {
        self.issued
            .contains(&tagma_crypto::request_digest(&r.request))
    }

    pub(super) fn all_authentic(&self, requests: &[RequestEnvelope]) -> bool {
        requests.iter().all(|r| self.authentic(r))
    }

    /// What a replica's network stage hands the core for a decoded peer message: the core's
    /// own conversion, with request authentication decided against the requests the clients
    /// really issued.
    pub(super) fn network_stage(&self, msg: PeerMessage) -> Option<PeerInput> {
        PeerInput::from_message(msg, |requests| self.all_authentic(requests))
    }

    pub(super) fn send_peer(&mut self, from: usize, dests: &[ReplicaId], msg: PeerMessage) {
        let outs: Vec<Out> = match self.nodes[from].byz.as_mut() {
            Some(byz) => byz.rewrite(&mut self.rng, &mut self.exercised, dests, msg),
            None => {
                self.note_sent_vote(from, &msg);
                // Honest: encode once for every receiver.
                let bytes = msg.to_bytes();
                for &to in dests {
                    self.transmit_peer(from as u32, to.0, bytes.clone(), 0, false);
                }
                return;
            }
        };
        for out in outs {
            let bytes = out.msg.to_bytes();
            self.transmit_peer(
                from as u32,
                out.to.0,
                bytes,
                out.extra_delay_ms,
                out.bad_mac,
            );
        }
    }

    pub(super) fn link_cut(&self, a: u32, b: u32) -> bool {
        self.partitions_active.iter().any(|&i| {
            let cut = &self.sc.partitions[i].cut;
            cut.contains(&a) != cut.contains(&b)
        })
    }

    /// Clients live outside every partition.
    pub(super) fn client_link_cut(&self, replica: u32) -> bool {
        self.partitions_active
            .iter()
            .any(|&i| self.sc.partitions[i].cut.contains(&replica))
    }

    pub(super) fn delay(&mut self) -> u64 {
        self.rng.range(self.net.delay_min_ms, self.net.delay_max_ms)
    }

    /// The network between replicas: partitions, loss, corruption, delay (hence reordering),
    /// duplication.
    pub(super) fn transmit_peer(
        &mut self,
        from: u32,
        to: u32,
        bytes: Bytes,
        extra_delay_ms: u64,
        bad_mac: bool,
    ) {
        if from != to && self.link_cut(from, to) {
            self.count("net_partitioned");
            return;
        }
        if self.rng.chance(self.net.drop_p) {
            self.count("net_dropped");
            return;
        }
        let bad_mac = bad_mac || self.rng.chance(self.net.corrupt_p);
        let copies = if self.rng.chance(self.net.duplicate_p) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = self.now_ms + self.delay() + extra_delay_ms;
            self.schedule(
                at,
                Event::Peer {
                    from,
                    to,
                    bytes: bytes.clone(),
                    bad_mac,
                },
            );
        }
    }
}
