//! Unordered requests that every replica answers for itself (a replica's own share of a
//! sealed secret, say): the request goes to every member of the view, and each member's
//! first reply is collected as it is — no voting, no fallback to ordered execution, no
//! retransmission — until every connected member answered, the caller has enough, or the
//! timeout passes. The replies are as trustworthy as the replicas that sent them: the caller
//! checks each one itself.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_wire::{ReplicaId, Reply, RequestKind, RequestSeq};

use super::links::Members;
use super::{Inner, Proxy};
use crate::error::ClientError;
use crate::locking::lock;

/// One collecting invocation in flight: the members it went to and where their replies go.
pub(super) struct EachCall {
    members: Arc<Members>,
    /// The members whose reply was taken: a replica's later replies are dropped, so a faulty
    /// one cannot crowd out the others.
    answered: Vec<ReplicaId>,
    tx: crossbeam_channel::Sender<(ReplicaId, Bytes)>,
}

/// Each replica's answer, in member order.
pub type EachReply = Vec<(ReplicaId, Result<Bytes, ClientError>)>;

impl Proxy {
    /// Sends `request` unordered to every replica of the view and returns each one's reply
    /// as it came, in member order, once every connected replica answered or `timeout`
    /// passed; a replica that did not answer (or is not connected) has
    /// [`ClientError::NoAnswer`]. Replies are not voted on: each may differ, and each is as
    /// trustworthy as its replica. The request takes one of the `outstanding_max` slots
    /// while it runs.
    pub fn invoke_unordered_each(
        &self,
        request: Bytes,
        timeout: Duration,
    ) -> Result<EachReply, ClientError> {
        self.invoke_unordered_each_until(request, timeout, |_| false)
    }

    /// [`Proxy::invoke_unordered_each`] that returns as soon as `enough` says the replies so
    /// far (in arrival order) are enough; it is asked again after every reply.
    pub fn invoke_unordered_each_until(
        &self,
        request: Bytes,
        timeout: Duration,
        mut enough: impl FnMut(&[(ReplicaId, Bytes)]) -> bool,
    ) -> Result<EachReply, ClientError> {
        let inner = &self.inner;
        inner.check_size(&request)?;
        inner.acquire_slot(false, false)?;
        let seq = RequestSeq(inner.next_seq[1].fetch_add(1, Ordering::Relaxed));
        let members = inner.members();
        let frame = inner.build_frame(&members, RequestKind::Unordered, seq, request);
        let (tx, rx) = crossbeam_channel::bounded(members.links.len().max(1));
        lock(&inner.each_calls).insert(
            seq,
            EachCall {
                members: members.clone(),
                answered: Vec::with_capacity(members.links.len()),
                tx,
            },
        );
        let mut waiting = 0;
        for link in &members.links {
            if link.is_connected() {
                link.send(&frame);
                waiting += 1;
            }
        }
        let deadline = Instant::now() + timeout;
        let mut got: Vec<(ReplicaId, Bytes)> = Vec::with_capacity(waiting);
        let mut satisfied = false;
        while got.len() < waiting && !inner.closed.load(Ordering::Relaxed) {
            let Ok((from, payload)) = rx.recv_deadline(deadline) else {
                break;
            };
            got.push((from, payload));
            if enough(&got) {
                satisfied = true;
                break;
            }
        }
        lock(&inner.each_calls).remove(&seq);
        inner.release_slot(None);
        let after_ms = timeout.as_millis() as u64;
        Ok(members
            .links
            .iter()
            .map(|link| {
                let id = link.info.id;
                let answer = match got.iter().position(|(from, _)| *from == id) {
                    Some(at) => Ok(got[at].1.clone()),
                    None if !link.is_connected() => Err(ClientError::NoAnswer {
                        replica: id.0,
                        reason: "not connected".into(),
                    }),
                    None if satisfied => Err(ClientError::NoAnswer {
                        replica: id.0,
                        reason: "not waited for: enough replies came first".into(),
                    }),
                    None => Err(ClientError::NoAnswer {
                        replica: id.0,
                        reason: format!("no reply within {after_ms} ms"),
                    }),
                };
                (id, answer)
            })
            .collect())
    }
}

impl Inner {
    /// Hands an unordered reply to the collecting invocation it answers; false if it answers
    /// none (then it is voted on as usual).
    pub(super) fn on_each_reply(&self, from: ReplicaId, reply: &Reply) -> bool {
        let mut calls = lock(&self.each_calls);
        let Some(call) = calls.get_mut(&reply.seq) else {
            return false;
        };
        if call.members.contains(from) && !call.answered.contains(&from) {
            call.answered.push(from);
            // One slot per member: never full for a first reply.
            let _ = call.tx.try_send((from, reply.payload.clone()));
        }
        true
    }
}
