//! Consensus messages for instances after the current one, buffered (bounded) and replayed
//! when their instance becomes current.

use std::collections::BTreeMap;

use tagma_wire::{ConsensusId, ReplicaId};

use super::input::PeerInput;
use crate::error::Rejection;

/// Consensus messages for instances after the current one, replayed in arrival order when
/// their instance becomes current. Bounded in total by `future_messages_max`, in distance
/// (at most `future_messages_max` instances ahead), and per sender (an equal share of the
/// total among the other members, so one faulty peer cannot crowd out the others).
pub(super) struct FutureBuffer {
    pub(super) by_cid: BTreeMap<ConsensusId, Vec<(ReplicaId, PeerInput)>>,
    pub(super) per_sender: BTreeMap<ReplicaId, usize>,
    pub(super) len: usize,
    pub(super) len_max: usize,
    pub(super) per_sender_max: usize,
}

impl FutureBuffer {
    pub(super) fn new(len_max: usize, members: usize) -> Self {
        FutureBuffer {
            by_cid: BTreeMap::new(),
            per_sender: BTreeMap::new(),
            len: 0,
            len_max,
            per_sender_max: Self::share(len_max, members),
        }
    }

    pub(super) fn push(
        &mut self,
        current: ConsensusId,
        cid: ConsensusId,
        from: ReplicaId,
        input: PeerInput,
    ) -> Result<(), Rejection> {
        // The current instance's own messages too, while it is held (`durable_log`).
        debug_assert!(cid >= current);
        let sender_len = self.per_sender.get(&from).copied().unwrap_or(0);
        if cid.0 - current.0 > self.len_max as u64
            || self.len >= self.len_max
            || sender_len >= self.per_sender_max
        {
            return Err(Rejection::FutureBufferFull);
        }
        self.by_cid.entry(cid).or_default().push((from, input));
        self.per_sender.insert(from, sender_len + 1);
        self.len += 1;
        Ok(())
    }

    /// Keeps only messages from senders `keep` accepts, with the per-sender share recomputed
    /// for a view of `members` replicas.
    pub(super) fn retain_senders(&mut self, keep: &impl Fn(&ReplicaId) -> bool, members: usize) {
        for msgs in self.by_cid.values_mut() {
            msgs.retain(|(from, _)| keep(from));
        }
        self.by_cid.retain(|_, msgs| !msgs.is_empty());
        self.per_sender.retain(|r, _| keep(r));
        self.len = self.per_sender.values().sum();
        self.per_sender_max = Self::share(self.len_max, members);
    }

    /// What one sender may buffer: peers do not send to themselves, so `len_max` is shared
    /// among the others.
    pub(super) fn share(len_max: usize, members: usize) -> usize {
        len_max.div_ceil(members.saturating_sub(1).max(1))
    }

    /// Drops the messages of instances before `cid` (decided without them).
    pub(super) fn discard_below(&mut self, cid: ConsensusId) {
        let keep = self.by_cid.split_off(&cid);
        let dropped = std::mem::replace(&mut self.by_cid, keep);
        for (from, _) in dropped.into_values().flatten() {
            let n = self.per_sender.get_mut(&from).expect("sender counted");
            *n -= 1;
            if *n == 0 {
                self.per_sender.remove(&from);
            }
            self.len -= 1;
        }
    }

    /// Removes and returns the messages of instance `cid`, in arrival order.
    pub(super) fn take(&mut self, cid: ConsensusId) -> Vec<(ReplicaId, PeerInput)> {
        debug_assert!(
            self.by_cid.first_key_value().is_none_or(|(c, _)| *c >= cid),
            "messages of a past instance left in the buffer"
        );
        let messages = self.by_cid.remove(&cid).unwrap_or_default();
        for (from, _) in &messages {
            let n = self.per_sender.get_mut(from).expect("sender counted");
            *n -= 1;
            if *n == 0 {
                self.per_sender.remove(from);
            }
        }
        self.len -= messages.len();
        messages
    }
}
