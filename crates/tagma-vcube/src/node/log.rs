//! A topic's log of delivered messages, kept to answer fetches and anti-entropy: the last
//! `log_max` deliveries in delivery order. Logging and evicting touch only the ends of a
//! ring buffer; the rare lookups by id ([`Log::find`]) walk the log once for a whole batch.

use std::collections::VecDeque;

use crate::causal::MsgId;
use crate::fast::FastMap;
use crate::message::Data;

/// A delivered message kept for repair.
pub(super) struct Logged {
    pub(super) data: Data,
    pub(super) delivered_ms: u64,
}

/// The delivered messages a node keeps on one topic, in delivery order.
#[derive(Default)]
pub(super) struct Log {
    entries: VecDeque<Logged>,
}

impl Log {
    /// Logs a delivered message, dropping the oldest beyond `max` entries.
    pub(super) fn push(&mut self, logged: Logged, max: usize) {
        self.entries.push_back(logged);
        while self.entries.len() > max {
            self.entries.pop_front();
        }
    }

    /// The logged messages of `ids`, in the order of `ids`, each once (those not logged left
    /// out).
    pub(super) fn find(&self, ids: &[MsgId]) -> Vec<&Logged> {
        let mut wanted: FastMap<MsgId, usize> = FastMap::default();
        for (k, id) in ids.iter().enumerate() {
            wanted.entry(*id).or_insert(k);
        }
        let mut found: Vec<(usize, &Logged)> = (self.entries.iter())
            .filter_map(|l| wanted.get(&l.data.id()).map(|&k| (k, l)))
            .collect();
        found.sort_unstable_by_key(|(k, _)| *k);
        found.into_iter().map(|(_, l)| l).collect()
    }

    /// The logged messages, in delivery order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Logged> {
        self.entries.iter()
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::cube::NodeId;
    use crate::message::{Published, TopicId};

    fn id(source: u32, counter: u64) -> MsgId {
        MsgId::new(NodeId(source), counter)
    }

    fn logged(source: u32, counter: u64) -> Logged {
        Logged {
            data: Data::new(
                Published::new(TopicId(0), id(source, counter), vec![], Bytes::new()),
                0,
            ),
            delivered_ms: counter,
        }
    }

    fn found(log: &Log, ids: &[MsgId]) -> Vec<MsgId> {
        log.find(ids).into_iter().map(|l| l.data.id()).collect()
    }

    #[test]
    fn the_log_keeps_the_last_entries_and_finds_them_in_the_order_asked() {
        let mut log = Log::default();
        for k in 1..=5 {
            log.push(logged(k as u32 % 2, k), 3);
        }
        let kept: Vec<MsgId> = log.iter().map(|l| l.data.id()).collect();
        assert_eq!(kept, vec![id(1, 3), id(0, 4), id(1, 5)]);
        assert_eq!(
            found(&log, &[id(1, 5), id(0, 2), id(1, 3), id(1, 5)]),
            vec![id(1, 5), id(1, 3)],
            "evicted ids are left out, an id asked twice is found once"
        );
        log.clear();
        assert_eq!(found(&log, &[id(1, 5)]), vec![]);
    }
}
