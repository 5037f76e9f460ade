//! The maintenance thread: requests the guessed leader left unanswered sent to every member,
//! retransmissions, unordered fallbacks on timeout, invocation timeouts and reconnections,
//! every quarter of a retransmission period (at most 50 ms).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use tagma_wire::RequestKind;

use super::Inner;
use crate::error::ClientError;
use crate::locking::lock;

impl Inner {
    /// Starts the maintenance thread; it ends once the proxy is closed or dropped.
    pub(super) fn spawn_maintenance(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        thread::Builder::new()
            .name(format!("tagma-client-{:x}", self.client.0))
            .spawn(move || maintenance_loop(weak))
            .expect("spawn client maintenance thread");
    }

    /// Retransmissions, unordered fallbacks on timeout, invocation timeouts, reconnection.
    pub(super) fn maintain(self: &Arc<Self>) {
        let now = Instant::now();
        let members = self.members();
        for link in &members.links {
            let due = lock(&link.last_attempt)
                .is_none_or(|t| now.duration_since(t) >= self.reconnect_delay);
            // The attempt runs on its own thread: a replica that never answers the handshake
            // holds up neither retransmissions nor the other links.
            if due && !link.is_connected() {
                self.start_connect(link, None);
            }
        }
        let mut resend = Vec::new();
        let mut expired = Vec::new();
        let mut fallback = Vec::new();
        let spread_after = self.leader.spread_after(self.spread_most);
        {
            let mut calls = lock(&self.calls);
            let keys: Vec<_> = calls.keys().copied().collect();
            for key in keys {
                let call = calls.get_mut(&key).expect("present");
                if !call.abandoned && now.duration_since(call.first_sent) >= call.timeout {
                    call.abandoned = true;
                    let (replies, quorum) = (call.voter.replies(), call.voter.quorum());
                    let after_ms = call.timeout.as_millis() as u64;
                    expired.push((call.slot.clone(), after_ms, replies, quorum));
                }
                if now.duration_since(call.last_sent) >= self.retransmit {
                    if key.0 == RequestKind::Unordered {
                        fallback.push(calls.remove(&key).expect("present"));
                    } else {
                        call.last_sent = now;
                        call.spread = true;
                        resend.push(call.frame.clone());
                    }
                } else if !call.spread && now.duration_since(call.first_sent) >= spread_after {
                    // The guessed leader has not answered soon: every member gets it, and
                    // their request timers watch the leader.
                    call.spread = true;
                    resend.push(call.frame.clone());
                }
            }
        }
        for frame in resend {
            self.send_all(&frame);
        }
        for call in fallback {
            self.fall_back_to_ordered(call);
        }
        for (slot, after_ms, replies, quorum) in expired {
            slot.complete(Err(ClientError::Timeout {
                after_ms,
                replies,
                quorum,
            }));
        }
    }
}

fn maintenance_loop(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if strong.closed.load(Ordering::Relaxed) {
            return;
        }
        let tick =
            (strong.retransmit / 4).clamp(Duration::from_millis(5), Duration::from_millis(50));
        strong.maintain();
        drop(strong);
        thread::sleep(tick);
    }
}
