//! Invocation and voting: building and authenticating a request's frame, sending it to the
//! view's members, and voting on the replies (an unordered read that cannot be decided is
//! re-issued as an ordered request).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_wire::{
    ClientMessage, Encode, ReplicaId, ReplicaMessage, Request, RequestAuth, RequestEnvelope,
    RequestKind, RequestSeq,
};
use tracing::debug;

use super::Inner;
use super::call::{Call, voter};
use super::links::{Link, Members, send_all};
use crate::error::ClientError;
use crate::future::Slot;
use crate::locking::lock;

impl Inner {
    /// The request in the view of `members`, authenticated for its members.
    pub(super) fn build_frame(
        &self,
        members: &Members,
        kind: RequestKind,
        seq: RequestSeq,
        payload: Bytes,
    ) -> Bytes {
        let request = Request {
            client: self.client,
            seq,
            kind,
            view: members.view,
            payload,
        };
        let digest = tagma_crypto::request_digest(&request);
        let auth = if self.signed {
            RequestAuth::Signature(self.key.sign(digest.as_bytes()))
        } else {
            RequestAuth::Macs(members.auth.tags(&digest))
        };
        ClientMessage::Request(RequestEnvelope { request, auth }).to_bytes()
    }

    pub(super) fn start_call(
        &self,
        payload: Bytes,
        kind: RequestKind,
        ordered_seq: Option<super::OrderedSeq>,
        timeout: Duration,
        slot: Arc<Slot>,
    ) {
        debug_assert_eq!(
            ordered_seq.is_some(),
            kind.is_ordered(),
            "ordered calls, and only they, come with the sequence number their slot took"
        );
        let seq = ordered_seq.map_or_else(
            || RequestSeq(self.next_seq[1].fetch_add(1, Ordering::Relaxed)),
            |o| o.seq,
        );
        let members = self.members();
        let frame = self.build_frame(&members, kind, seq, payload.clone());
        let leader = self.leader_link(&members, kind);
        let now = Instant::now();
        let call = Call {
            payload,
            frame: frame.clone(),
            voter: voter(&members, kind),
            members: members.clone(),
            first_sent: now,
            timeout,
            last_sent: now,
            slot,
            ordered_seq,
            abandoned: false,
            spread: leader.is_none(),
        };
        lock(&self.calls).insert((kind, seq), call);
        match leader {
            Some(leader) => {
                leader.send(&frame);
                // A connection that never carried this client's request gets it too: the
                // replica sends replies where the client's requests arrive.
                for link in &members.links {
                    if !Arc::ptr_eq(link, &leader) {
                        link.send_if_unrouted(&frame);
                    }
                }
            }
            None => send_all(&members, &frame),
        }
        // The client may have moved to another view between the snapshot and the insertion
        // (`move_to_view` rebuilds only the calls it finds): rebuild this one.
        let now_members = self.members();
        if now_members.view != members.view {
            let frame = {
                let mut calls = lock(&self.calls);
                let Some(call) = calls.get_mut(&(kind, seq)) else {
                    return;
                };
                if call.members.view == now_members.view {
                    return;
                }
                call.frame = self.build_frame(&now_members, kind, seq, call.payload.clone());
                call.voter = voter(&now_members, kind);
                call.members = now_members.clone();
                call.spread = true;
                call.frame.clone()
            };
            send_all(&now_members, &frame);
        }
    }

    /// The link to the guessed leader, when a request of `kind` goes to it first: ordered
    /// requests of a leader-first proxy whose guessed leader is connected.
    fn leader_link(&self, members: &Members, kind: RequestKind) -> Option<Arc<Link>> {
        if !self.leader_first || kind != RequestKind::Ordered {
            return None;
        }
        let id = self.leader.leader(members)?;
        let link = members.links.iter().find(|l| l.info.id == id)?;
        link.is_connected().then(|| link.clone())
    }

    pub(super) fn finish(&self, call: Call, result: Result<Bytes, ClientError>) {
        call.slot.complete(result);
        self.release_slot(call.ordered_seq);
    }

    /// An unordered read that cannot be decided is re-issued as an ordered request, keeping
    /// the caller's future.
    pub(super) fn fall_back_to_ordered(&self, call: Call) {
        debug!(
            client = self.client.0,
            "unordered replies disagree or time out: retrying ordered"
        );
        let seq = self.next_ordered_seq();
        self.start_call(
            call.payload,
            RequestKind::Ordered,
            Some(seq),
            call.timeout,
            call.slot,
        );
    }

    pub(super) fn send_all(&self, frame: &Bytes) {
        send_all(&self.members(), frame);
    }

    pub(super) fn on_reply(&self, from: ReplicaId, msg: ReplicaMessage) {
        let reply = match msg {
            ReplicaMessage::Reply(r) => r,
            ReplicaMessage::StateInfo(info) => {
                if let Some(tx) = lock(&self.queries).remove(&info.nonce) {
                    let _ = tx.send(info);
                }
                return;
            }
            ReplicaMessage::CurrentView(view) => {
                self.on_current_view(from, view);
                return;
            }
            ReplicaMessage::ViewHistory(history) => {
                lock(&self.history_queries)
                    .retain(|tx| tx.try_send((from, history.clone())).is_ok());
                return;
            }
            ReplicaMessage::Leader(hint) => {
                self.leader.on_hint(from, hint, &self.members());
                return;
            }
        };
        if reply.client != self.client {
            return;
        }
        if reply.kind == RequestKind::Unordered && self.on_each_reply(from, &reply) {
            return;
        }
        let key = (reply.kind, reply.seq);
        let mut calls = lock(&self.calls);
        let Some(call) = calls.get_mut(&key) else {
            return;
        };
        if !call.members.contains(from) {
            // Only the members of the view the request went in vote (checked under the lock
            // that `move_to_view` takes to move the call).
            return;
        }
        if let Some(result) = call.voter.add(from, reply.payload) {
            let call = calls.remove(&key).expect("present");
            drop(calls);
            if reply.kind == RequestKind::Ordered && call.timeout == self.invoke_timeout {
                // Calls whose reply may come long after their execution (a blocked take)
                // say nothing of the leader's latency.
                self.leader.observe(call.first_sent.elapsed());
            }
            self.finish(call, Ok(result));
        } else if call.voter.exhausted() {
            let call = calls.remove(&key).expect("present");
            drop(calls);
            if reply.kind == RequestKind::Unordered {
                self.fall_back_to_ordered(call);
            } else {
                let (replies, quorum) = (call.voter.replies(), call.voter.quorum());
                self.finish(call, Err(ClientError::NoQuorum { replies, quorum }));
            }
        }
    }
}
