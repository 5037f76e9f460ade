//! What one node delivered on one topic: the highest counter delivered from each
//! publisher, one word per publisher by node id (0: none), the word's top bit marking the
//! publishers whose last delivered message is a barrier entry (a direct predecessor of the
//! node's next message).
//!
//! A receiver reads this array once for every barrier entry of every message, at random
//! places, so its size is what the receiver's caches hold of it. Words are therefore as
//! narrow as the counters allow: 8 bits while every counter is below 2^7 (a topic's first
//! 127 messages from each publisher), 16 bits below 2^15, 32 bits below 2^31, 64 bits
//! otherwise (counters stay below 2^63). The array widens when a counter no longer fits (to
//! each width at most once); it never narrows.

use crate::causal::MsgId;
use crate::causal::barrier::{Entry, Ids, with_ids};
use crate::cube::NodeId;

/// Counters stay below this: the top bit of a 64-bit word is the barrier mark.
pub(super) const COUNTER_LIMIT: u64 = 1 << 63;

/// A word of the array: a counter below [`Word::LIMIT`] and the barrier mark.
trait Word: Copy + Eq {
    /// Counters below this fit.
    const LIMIT: u64;
    fn new(counter: u64, in_barrier: bool) -> Self;
    fn counter(self) -> u64;
    fn in_barrier(self) -> bool;
}

macro_rules! word {
    ($t:ty) => {
        impl Word for $t {
            const LIMIT: u64 = 1 << (<$t>::BITS - 1);

            #[inline(always)]
            fn new(counter: u64, in_barrier: bool) -> $t {
                debug_assert!(counter < Self::LIMIT, "the array widens first");
                counter as $t | if in_barrier { 1 << (<$t>::BITS - 1) } else { 0 }
            }

            #[inline(always)]
            fn counter(self) -> u64 {
                u64::from(self & !(1 << (<$t>::BITS - 1)))
            }

            #[inline(always)]
            fn in_barrier(self) -> bool {
                self >> (<$t>::BITS - 1) != 0
            }
        }
    };
}

word!(u8);
word!(u16);
word!(u32);
word!(u64);

/// The highest delivered counter and barrier mark of each publisher, by node id.
#[derive(Clone, Debug)]
pub(super) enum Counters {
    Tiny(Vec<u8>),
    Narrow(Vec<u16>),
    Medium(Vec<u32>),
    Wide(Vec<u64>),
}

/// Runs `$body` with `$words` bound to the array, whatever its width.
macro_rules! with_words {
    ($counters:expr, $words:ident => $body:expr) => {
        match $counters {
            Counters::Tiny($words) => $body,
            Counters::Narrow($words) => $body,
            Counters::Medium($words) => $body,
            Counters::Wide($words) => $body,
        }
    };
}

impl Default for Counters {
    fn default() -> Self {
        Counters::Tiny(Vec::new())
    }
}

impl Counters {
    /// The highest counter delivered from `source`.
    pub(super) fn get(&self, source: NodeId) -> u64 {
        with_words!(self, words => counter_of(words, source))
    }

    /// Records `counter` (below [`COUNTER_LIMIT`]) as `source`'s highest delivered, a
    /// barrier entry or not; widens the words first if it does not fit.
    pub(super) fn set(&mut self, source: NodeId, counter: u64, in_barrier: bool) {
        debug_assert!(counter < COUNTER_LIMIT, "counters are checked on receipt");
        self.widen_for(counter);
        with_words!(self, words => set(words, source, counter, in_barrier))
    }

    /// Every publisher that delivered any: its node id, highest counter and barrier mark.
    #[cfg(test)]
    fn entries(&self) -> Vec<(NodeId, u64, bool)> {
        self.collect(|source, counter, marked| Some((source, counter, marked)))
    }

    /// What `f` makes of each publisher that delivered any (node id, highest counter,
    /// barrier mark), in node order, those it keeps.
    pub(super) fn collect<T>(&self, mut f: impl FnMut(NodeId, u64, bool) -> Option<T>) -> Vec<T> {
        with_words!(self, words => (words.iter().enumerate())
            .filter(|(_, w)| w.counter() > 0)
            .filter_map(|(i, w)| f(NodeId(i as u32), w.counter(), w.in_barrier()))
            .collect())
    }

    /// Takes the barrier out: its entries, by node id, and the marks cleared, in one pass.
    pub(super) fn take_barrier(&mut self) -> Vec<MsgId> {
        with_words!(self, words => take_barrier(words))
    }

    /// Marks every publisher's last delivered message as a barrier entry.
    pub(super) fn mark_all(&mut self) {
        with_words!(self, words => {
            for w in words.iter_mut().filter(|w| w.counter() > 0) {
                *w = Word::new(w.counter(), true);
            }
        })
    }

    /// The first predecessor of `id` not delivered: its publisher's previous message, then
    /// its barrier from entry `checked` on. `checked` moves past the entries found
    /// delivered (deliveries only grow, so each entry is checked once).
    pub(super) fn first_missing(
        &self,
        id: MsgId,
        barrier: Ids,
        checked: &mut usize,
    ) -> Option<MsgId> {
        with_words!(self, words => with_ids!(barrier, ids => first_missing(words, id, ids, checked)))
    }

    /// Records `id`, whose predecessors `barrier` are delivered, as delivered and as a
    /// barrier entry; the entries of `barrier` that are still their publisher's last
    /// delivered message leave the barrier (`id` covers them).
    pub(super) fn deliver(&mut self, id: MsgId, barrier: Ids) {
        debug_assert!(
            id.counter < COUNTER_LIMIT,
            "counters are checked on receipt"
        );
        self.widen_for(id.counter);
        with_words!(self, words => with_ids!(barrier, ids => deliver(words, id, ids)))
    }

    /// Widens the words so that `counter` fits.
    fn widen_for(&mut self, counter: u64) {
        match self {
            Counters::Tiny(words) if counter >= u8::LIMIT => {
                let wider: Vec<u16> = widened(words);
                *self = Counters::Narrow(wider);
                self.widen_for(counter);
            }
            Counters::Narrow(words) if counter >= u16::LIMIT => {
                let wider: Vec<u32> = widened(words);
                *self = Counters::Medium(wider);
                self.widen_for(counter);
            }
            Counters::Medium(words) if counter >= u32::LIMIT => {
                *self = Counters::Wide(widened(words));
            }
            _ => {}
        }
    }
}

/// The same counters and marks in wider words.
fn widened<N: Word, W: Word>(words: &[N]) -> Vec<W> {
    (words.iter())
        .map(|w| W::new(w.counter(), w.in_barrier()))
        .collect()
}

#[inline(always)]
fn counter_of<W: Word>(words: &[W], source: NodeId) -> u64 {
    words.get(source.0 as usize).map_or(0, |w| w.counter())
}

fn set<W: Word>(words: &mut Vec<W>, source: NodeId, counter: u64, in_barrier: bool) {
    let i = source.0 as usize;
    if i >= words.len() {
        words.resize(i + 1, W::new(0, false));
    }
    words[i] = W::new(counter, in_barrier);
}

fn take_barrier<W: Word>(words: &mut [W]) -> Vec<MsgId> {
    let mut barrier = Vec::new();
    for (i, w) in words.iter_mut().enumerate() {
        if w.in_barrier() {
            let counter = w.counter();
            *w = W::new(counter, false);
            barrier.push(MsgId {
                source: NodeId(i as u32),
                counter,
            });
        }
    }
    barrier
}

fn first_missing<W: Word, E: Entry>(
    words: &[W],
    id: MsgId,
    barrier: &[E],
    checked: &mut usize,
) -> Option<MsgId> {
    if id.counter > 1 && counter_of(words, id.source) < id.counter - 1 {
        return Some(MsgId {
            source: id.source,
            counter: id.counter - 1,
        });
    }
    // The position stays in a register while the loop runs.
    let mut at = *checked;
    let missing = loop {
        let Some(p) = barrier.get(at).map(|e| e.id()) else {
            break None;
        };
        if counter_of(words, p.source) < p.counter {
            break Some(p);
        }
        at += 1;
    };
    *checked = at;
    missing
}

fn deliver<W: Word, E: Entry>(words: &mut Vec<W>, id: MsgId, barrier: &[E]) {
    for b in barrier.iter().map(|e| e.id()) {
        if let Some(w) = words.get_mut(b.source.0 as usize)
            && w.in_barrier()
            && w.counter() == b.counter
        {
            *w = W::new(b.counter, false);
        }
    }
    set(words, id.source, id.counter, true);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causal::Barrier;

    fn id(source: u32, counter: u64) -> MsgId {
        MsgId::new(NodeId(source), counter)
    }

    #[test]
    fn words_widen_once_a_counter_does_not_fit_and_keep_counters_and_marks() {
        let mut c = Counters::default();
        c.set(NodeId(0), 3, true);
        c.set(NodeId(2), 127, false);
        assert!(matches!(c, Counters::Tiny(_)));
        c.set(NodeId(2), 128, false);
        assert!(matches!(c, Counters::Narrow(_)), "128 needs the eighth bit");
        assert_eq!(c.get(NodeId(0)), 3);
        assert_eq!(c.take_barrier(), vec![id(0, 3)]);
        c.set(NodeId(0), 3, true);
        c.set(NodeId(2), (1 << 15) - 1, false);
        assert!(matches!(c, Counters::Narrow(_)));
        c.deliver(id(1, 1 << 15), Ids::Wide(&[id(0, 3)]));
        assert!(matches!(c, Counters::Medium(_)));
        assert_eq!(
            c.entries(),
            vec![
                (NodeId(0), 3, false),
                (NodeId(1), 1 << 15, true),
                (NodeId(2), (1 << 15) - 1, false)
            ]
        );
        // From 8 straight to 64 bits.
        let mut d = Counters::default();
        d.set(NodeId(1), 7, true);
        d.set(NodeId(0), COUNTER_LIMIT - 1, false);
        assert!(matches!(d, Counters::Wide(_)));
        assert_eq!(d.get(NodeId(0)), COUNTER_LIMIT - 1);
        assert_eq!(d.take_barrier(), vec![id(1, 7)]);
        assert_eq!(d.take_barrier(), vec![]);
        d.mark_all();
        assert_eq!(d.take_barrier(), vec![id(0, COUNTER_LIMIT - 1), id(1, 7)]);
    }

    #[test]
    fn every_width_finds_the_same_first_missing_predecessor() {
        let ids = [id(0, 2), id(3, 1), id(5, 9)];
        let narrow = Barrier::from(ids.to_vec());
        assert!(matches!(narrow, Barrier::Narrow(_)));
        let barriers = [narrow.ids(), Ids::Wide(&ids)];
        for (width_of, barrier) in [1, 1 << 10, 1 << 20, 1 << 40]
            .into_iter()
            .flat_map(|w| barriers.map(|b| (w, b)))
        {
            let mut c = Counters::default();
            c.set(NodeId(7), width_of, false); // widens as far as needed
            c.set(NodeId(0), 2, true);
            c.set(NodeId(4), 4, false);
            let mut checked = 0;
            assert_eq!(
                c.first_missing(id(4, 6), barrier, &mut checked),
                Some(id(4, 5))
            );
            assert_eq!(checked, 0);
            assert_eq!(
                c.first_missing(id(4, 5), barrier, &mut checked),
                Some(id(3, 1))
            );
            assert_eq!(checked, 1);
            c.set(NodeId(3), 1, true);
            c.set(NodeId(5), 9, true);
            assert_eq!(c.first_missing(id(4, 5), barrier, &mut checked), None);
            assert_eq!(checked, 3);
            c.deliver(id(4, 5), barrier);
            let marked: Vec<MsgId> = (c.entries().into_iter())
                .filter(|e| e.2)
                .map(|(s, n, _)| MsgId::new(s, n))
                .collect();
            assert_eq!(marked, vec![id(4, 5)], "the message covers its barrier");
        }
    }
}
