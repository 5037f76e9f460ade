//! One invocation in flight: its request frame, the voter on its replies, and the view it
//! was sent in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_wire::RequestKind;

use super::links::Members;
use crate::future::Slot;
use crate::voting::Voter;

pub(super) struct Call {
    pub(super) payload: Bytes,
    pub(super) frame: Bytes,
    pub(super) voter: Voter,
    /// The view the frame was built in: only its members' replies count.
    pub(super) members: Arc<Members>,
    pub(super) first_sent: Instant,
    /// How long the caller waits for the reply (the configured invocation timeout, longer
    /// for a request whose reply may come later than its execution).
    pub(super) timeout: Duration,
    pub(super) last_sent: Instant,
    pub(super) slot: Arc<Slot>,
    /// An ordered call's sequence number, and whether it holds the window of ordered
    /// requests in flight open below it until the call ends (`Inner::acquire_slot`).
    pub(super) ordered_seq: Option<super::OrderedSeq>,
    /// The caller was told the call timed out, but the request keeps being retransmitted:
    /// replicas order a client's requests by contiguous sequence numbers, so giving up on
    /// one would block every later request of this client. It still holds its
    /// `outstanding` slot, which bounds how many such requests can pile up.
    pub(super) abandoned: bool,
    /// The request went to every member (not only to the guessed leader).
    pub(super) spread: bool,
}

/// A fresh voter for a call of `kind` among `members`.
pub(super) fn voter(members: &Members, kind: RequestKind) -> Voter {
    let quorum = if kind.is_ordered() {
        members.ordered_quorum
    } else {
        members.unordered_quorum
    };
    Voter::new(quorum, members.links.len().max(quorum))
}
