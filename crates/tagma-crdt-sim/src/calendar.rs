//! The mail on its way to one chunk of nodes and not yet in order: a calendar queue, in
//! buckets by arrival time, shared by the chunk's nodes.
//!
//! Mail comes in when a window of the run ends ([`crate::engine`]), from every chunk and
//! not in the order it arrives. A message sent at or after a window's start arrives at
//! least the link's least delay later (the window's horizon), so before the chunk runs a
//! window, [`Calendar::take_before`] hands out every message arriving before the horizon —
//! no message still to be sent can arrive before them — for the nodes to put in order
//! ([`crate::inbox`]).
//!
//! One calendar per chunk rather than one per node: taking a window's mail in appends to
//! the ends of a few buckets, which stay in the processor's caches, where buckets per node
//! would put each message at a place of its own in memory. Taking mail out looks only at
//! the buckets that end before the horizon and the one bucket it falls in, not at every
//! message still on its way.

use std::collections::VecDeque;

use crate::inbox::Mail;

/// The shortest bucket: a link with (almost) no delay would make buckets too many.
const BUCKET_MIN_US: u64 = 1_000;

/// Mail on its way to a chunk's nodes, by arrival time.
pub struct Calendar<M> {
    /// The width of a bucket.
    bucket_us: u64,
    /// `buckets[k]` holds the mail arriving in bucket `first_bucket + k` (from
    /// `(first_bucket + k) * bucket_us` on).
    buckets: VecDeque<Vec<Mail<M>>>,
    first_bucket: u64,
    /// Emptied buckets, to use again.
    spare: Vec<Vec<Mail<M>>>,
    /// Mail in `buckets`.
    len: usize,
}

impl<M> Calendar<M> {
    /// A calendar whose buckets span `bucket_us` (at least a millisecond): best at the least
    /// delay from sending a message to its arrival, which a window's horizon moves by.
    pub fn new(bucket_us: u64) -> Calendar<M> {
        Calendar {
            bucket_us: bucket_us.max(BUCKET_MIN_US),
            buckets: VecDeque::new(),
            first_bucket: 0,
            spare: Vec::new(),
            len: 0,
        }
    }

    /// Mail not taken out yet.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `mail`, which arrives no earlier than the horizon of the last
    /// [`Calendar::take_before`].
    pub fn push(&mut self, mail: Mail<M>) {
        let bucket = mail.arrive_us / self.bucket_us;
        if self.len == 0 {
            // Nothing waits: the buckets start at this one.
            self.first_bucket = bucket;
        }
        while bucket < self.first_bucket {
            // Earlier than any waiting mail.
            let spare = self.spare.pop().unwrap_or_default();
            self.buckets.push_front(spare);
            self.first_bucket -= 1;
        }
        let k = (bucket - self.first_bucket) as usize;
        while self.buckets.len() <= k {
            let spare = self.spare.pop().unwrap_or_default();
            self.buckets.push_back(spare);
        }
        self.buckets[k].push(mail);
        self.len += 1;
    }

    /// Moves to `out`, in no particular order, every message arriving before `horizon_us`.
    pub fn take_before(&mut self, horizon_us: u64, out: &mut Vec<Mail<M>>) {
        if self.len == 0 {
            return;
        }
        let last = horizon_us / self.bucket_us;
        // Whole buckets before the horizon's own.
        while self.first_bucket < last
            && let Some(mut bucket) = self.buckets.pop_front()
        {
            self.first_bucket += 1;
            self.len -= bucket.len();
            out.append(&mut bucket);
            self.spare.push(bucket);
        }
        // The part of the horizon's bucket before it.
        if self.first_bucket == last
            && let Some(bucket) = self.buckets.front_mut()
        {
            let mut k = 0;
            while k < bucket.len() {
                if bucket[k].arrive_us < horizon_us {
                    out.push(bucket.swap_remove(k));
                    self.len -= 1;
                } else {
                    k += 1;
                }
            }
        }
        if self.len == 0 {
            // Nothing waits: keep the buckets' room for later.
            for mut bucket in self.buckets.drain(..) {
                bucket.clear();
                self.spare.push(bucket);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tagma_vcube::NodeId;

    use super::*;

    #[test]
    fn mail_comes_out_once_the_horizon_passes_its_arrival_and_not_before() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut calendar = Calendar::new(2_000);
        let mut waiting: Vec<(u64, u64)> = Vec::new();
        let (mut seq, mut start) = (0, 0);
        for _ in 0..300 {
            // A window: mail sent from its start arrives from its horizon on.
            let horizon = start + 1_500;
            for _ in 0..rng.usize(0..6) {
                seq += 1;
                let arrive_us = horizon + rng.u64(0..20_000);
                calendar.push(Mail {
                    to: NodeId(rng.u32(0..4)),
                    seq,
                    from: NodeId(0),
                    arrive_us,
                    message: (),
                });
                waiting.push((arrive_us, seq));
            }
            start += rng.u64(1..1_500);
            let horizon = start + 1_500;
            let mut out = Vec::new();
            calendar.take_before(horizon, &mut out);
            let mut got: Vec<(u64, u64)> = out.iter().map(|m| (m.arrive_us, m.seq)).collect();
            got.sort_unstable();
            waiting.sort_unstable();
            let due = waiting.partition_point(|m| m.0 < horizon);
            let expected: Vec<(u64, u64)> = waiting.drain(..due).collect();
            assert_eq!(got, expected);
            assert_eq!(calendar.len(), waiting.len());
        }
    }
}
