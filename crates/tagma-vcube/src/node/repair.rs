//! What the tree cannot deliver, repair brings: a message lost with a relay that crashed,
//! sent to a node while it was suspected, or published before a node joined.
//!
//! - **Fetch**: a buffered message that has waited `fetch_after_ms` for a predecessor makes
//!   the node ask for the predecessor — its publisher if believed correct, otherwise a
//!   subscriber — at most once per `fetch_after_ms`, with at most `repair_batch_max` asks
//!   outstanding per topic (a counter far ahead names more missing messages than any
//!   buffer holds; the next batch is asked for as the answers deliver).
//! - **Anti-entropy**: every `sync_ms` the node sends what it delivered on each topic
//!   (one counter per publisher) to one subscriber, the first eligible node of its
//!   clusters in turn; the peer answers with the logged messages the node lacks that it
//!   delivered more than `sync_grace_ms` ago (younger ones may still be on their way down
//!   the tree), or with a snapshot when the node lacks more than its log holds.
//! - **Snapshots**: a joining node asks a subscriber for the topic's state and the counters
//!   it covers, and installs it; a snapshot is installed only if it covers everything the
//!   node delivered, so nothing delivered is lost.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::{Action, MEMBERSHIP, Node};
use crate::causal::MsgId;
use crate::cube::NodeId;
use crate::message::{Data, Message, TopicId, TopicSnapshot};
use crate::store::Store;

impl<S: Store> Node<S> {
    /// A repair message (an answer to a fetch or an anti-entropy request): not relayed.
    pub(super) fn on_repair(&mut self, now_ms: u64, data: Data) {
        if !self.cube.contains(data.id().source) {
            self.stats.rejected += 1;
            return;
        }
        self.take(now_ms, data, true);
    }

    /// The first eligible subscriber of `topic` in cluster `start`, `start + 1`, … (wrapping).
    fn peer(&self, topic: TopicId, start: u32) -> Option<NodeId> {
        let d = self.cube.dimension();
        (0..d)
            .map(|k| (start + k) % d + 1)
            .find_map(|s| self.cube.first_in(self.me, s, |j| self.eligible(topic, j)))
    }

    pub(super) fn fetch_missing(&mut self, now_ms: u64) {
        let before = now_ms.saturating_sub(self.config.fetch_after_ms);
        let mut asks: BTreeMap<(TopicId, NodeId), Vec<MsgId>> = BTreeMap::new();
        let topics: Vec<TopicId> = self.topics.keys().copied().collect();
        for topic in topics {
            let t = self.topics.get_mut(&topic).expect("listed");
            // Asks older than `fetch_after_ms` may be repeated: they are forgotten. One
            // batch is outstanding at a time; the next goes out as the answers deliver.
            t.fetched.retain(|_, at| *at > before);
            let room = (self.config.repair_batch_max).saturating_sub(t.fetched.len());
            let t = &self.topics[&topic];
            let missing = t
                .causal
                .missing(before, room, |id| !t.fetched.contains_key(&id));
            // Asked of a subscriber when the publisher is not eligible: the same one for all.
            let mut subscriber = None;
            for id in missing {
                let to = if self.eligible(topic, id.source) {
                    Some(id.source)
                } else {
                    *subscriber.get_or_insert_with(|| self.peer(topic, self.sync_round))
                };
                if let Some(to) = to {
                    asks.entry((topic, to)).or_default().push(id);
                    let t = self.topics.get_mut(&topic).expect("listed");
                    t.fetched.insert(id, now_ms);
                }
            }
        }
        for ((topic, to), ids) in asks {
            self.stats.fetches_sent += 1;
            self.send(
                to,
                Message::Fetch {
                    topic,
                    ids: ids.into(),
                },
            );
        }
    }

    pub(super) fn on_fetch(&mut self, from: NodeId, topic: TopicId, ids: &[MsgId]) {
        let Some(t) = self.topics.get(&topic) else {
            self.stats.rejected += 1;
            return;
        };
        let asked = &ids[..ids.len().min(self.config.repair_batch_max)];
        let found: Vec<Data> = (t.log.find(asked).into_iter())
            .map(|l| l.data.clone())
            .collect();
        for data in found {
            self.stats.repairs_sent += 1;
            self.send(from, Message::Data { data, repair: true });
        }
    }

    pub(super) fn sync(&mut self, _now_ms: u64) {
        self.sync_round = self.sync_round.wrapping_add(1);
        // The membership topic changes rarely: it is compared every fourth round.
        let membership = self.sync_round.is_multiple_of(4);
        let topics: Vec<TopicId> = (self.topics.iter())
            .filter(|(k, t)| t.joining.is_none() && (membership || **k != MEMBERSHIP))
            .map(|(k, _)| *k)
            .collect();
        for topic in topics {
            let Some(to) = self.peer(topic, self.sync_round) else {
                continue;
            };
            let delivered = self.topics[&topic].causal.delivered();
            self.send(
                to,
                Message::SyncRequest {
                    topic,
                    delivered: delivered.into(),
                },
            );
        }
    }

    pub(super) fn on_sync_request(
        &mut self,
        now_ms: u64,
        from: NodeId,
        topic: TopicId,
        theirs: &[(NodeId, u64)],
    ) {
        let Some(t) = self.topics.get(&topic) else {
            self.stats.rejected += 1;
            return;
        };
        if t.joining.is_some() {
            return;
        }
        // Their counters by node id (a later entry for a node replaces an earlier one);
        // nothing is delivered here from outside the cube, so a positive counter for a node
        // outside it is one this node's state does not cover.
        let n = self.cube.len() as usize;
        let mut known = vec![0u64; n];
        let mut foreign = false;
        for &(source, c) in theirs {
            match known.get_mut(source.0 as usize) {
                Some(k) => *k = c,
                None => foreign |= c > 0,
            }
        }
        let known_of = |source: NodeId| known.get(source.0 as usize).copied().unwrap_or(0);
        let has = |id: &MsgId| known_of(id.source) >= id.counter;
        // They lack more than the log holds: the first logged message of a publisher is
        // not the one after theirs.
        let mut oldest = vec![u64::MAX; n];
        for l in t.log.iter() {
            let id = l.data.id();
            if let Some(first) = oldest.get_mut(id.source.0 as usize) {
                *first = (*first).min(id.counter);
            }
        }
        let beyond_log = (t.causal.delivered().into_iter()).any(|(source, mine)| {
            let known = known_of(source);
            let first = match oldest.get(source.0 as usize) {
                Some(&first) if first != u64::MAX => first,
                _ => mine + 1,
            };
            mine > known && first > known + 1
        });
        let grace = now_ms.saturating_sub(self.config.sync_grace_ms);
        if beyond_log {
            let covers = !foreign
                && (known.iter().enumerate())
                    .all(|(i, &c)| t.causal.delivered_of(NodeId(i as u32)) >= c);
            if covers {
                self.send_snapshot(from, topic);
            }
            return;
        }
        // Sent by id, publisher by publisher.
        let mut lacking: Vec<&Data> = (t.log.iter())
            .filter(|l| l.delivered_ms <= grace && !has(&l.data.id()))
            .map(|l| &l.data)
            .collect();
        lacking.sort_unstable_by_key(|data| data.id());
        let lacking: Vec<Data> = (lacking.into_iter())
            .take(self.config.repair_batch_max)
            .cloned()
            .collect();
        for data in lacking {
            self.stats.repairs_sent += 1;
            self.send(from, Message::Data { data, repair: true });
        }
    }

    fn send_snapshot(&mut self, to: NodeId, topic: TopicId) {
        let Some(t) = self.topics.get(&topic) else {
            return;
        };
        let delivered = t.causal.delivered();
        let state = if topic == MEMBERSHIP {
            self.membership_snapshot()
        } else {
            self.store.snapshot(topic)
        };
        self.send(
            to,
            Message::Snapshot(Box::new(TopicSnapshot {
                topic,
                delivered,
                state,
            })),
        );
    }

    /// A joining topic asks for its snapshot (again, after `snapshot_retry_ms`); with no
    /// other subscriber, it starts from the empty state.
    pub(super) fn join_topics(&mut self, now_ms: u64) {
        let due: Vec<(TopicId, u32)> = (self.topics.iter())
            .filter_map(|(topic, t)| t.joining.map(|j| (*topic, j)))
            .filter(|(_, (asked, tries))| {
                *tries == 0 || now_ms >= asked + self.config.snapshot_retry_ms
            })
            .map(|(topic, (_, tries))| (topic, tries))
            .collect();
        for (topic, tries) in due {
            match self.peer(topic, tries) {
                Some(to) => {
                    self.send(to, Message::SnapshotRequest { topic });
                    let t = self.topics.get_mut(&topic).expect("listed");
                    t.joining = Some((now_ms, tries + 1));
                }
                None => self.install(now_ms, topic, &BTreeMap::new(), None),
            }
        }
    }

    pub(super) fn on_snapshot_request(&mut self, from: NodeId, topic: TopicId) {
        match self.topics.get(&topic) {
            Some(t) if t.joining.is_none() => self.send_snapshot(from, topic),
            _ => self.stats.rejected += 1,
        }
    }

    pub(super) fn on_snapshot(
        &mut self,
        now_ms: u64,
        topic: TopicId,
        delivered: &[(NodeId, u64)],
        state: &Bytes,
    ) {
        let Some(t) = self.topics.get(&topic) else {
            self.stats.rejected += 1;
            return;
        };
        let delivered: BTreeMap<NodeId, u64> = delivered.iter().copied().collect();
        if delivered.keys().any(|n| !self.cube.contains(*n)) {
            self.stats.rejected += 1;
            return;
        }
        // Only a snapshot covering everything delivered here replaces the state.
        let covers = (t.causal.delivered().into_iter())
            .all(|(source, mine)| delivered.get(&source).is_some_and(|&c| c >= mine));
        if !covers {
            return;
        }
        self.install(now_ms, topic, &delivered, Some(state));
    }

    fn install(
        &mut self,
        now_ms: u64,
        topic: TopicId,
        delivered: &BTreeMap<NodeId, u64>,
        state: Option<&Bytes>,
    ) {
        let refused = match state {
            Some(state) if topic == MEMBERSHIP => self.install_membership(state).is_err(),
            Some(state) => self.store.install(topic, state).is_err(),
            None => false,
        };
        if refused {
            self.stats.rejected += 1;
            return;
        }
        self.stats.snapshots_installed += 1;
        let t = self.topics.get_mut(&topic).expect("checked by the caller");
        t.joining = None;
        // The log answers only for what this node delivered itself.
        t.log.clear();
        let unblocked = t.causal.install(delivered);
        self.actions.push_back(Action::Installed {
            topic,
            delivered: delivered.iter().map(|(n, c)| (*n, *c)).collect(),
        });
        for d in unblocked {
            self.delivered_now(
                now_ms,
                Data {
                    hops: 0,
                    ..d.message
                },
            );
        }
    }
}
