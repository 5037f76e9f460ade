//! A VCube-Sync node, sans-IO: inputs (a message from a peer, the passing of time) go in
//! through [`Node::handle`] with the current time, publishes through [`Node::publish`], and
//! what the node does comes out of [`Node::poll_action`] — messages to send and operations
//! delivered. It never touches a socket, a clock or a random number generator, so a
//! network runtime and a discrete-event simulator drive the same code.
//!
//! A published message goes down the topic's tree ([`crate::tree`]) hop by hop over a
//! reliable channel: every tree message is acknowledged by its receiver and sent again
//! every `retransmit_ms` until it is; a receiver that stays silent for `ack_misses_max`
//! retransmissions is suspected, and the message goes to the next subscriber of its
//! cluster instead, as it does when the failure detector ([`crate::detector`]) suspects
//! it. A receiver gathers its acknowledgements and sends them at its next tick (or once
//! `ack_batch_max` have gathered), one message per sender for many tree messages: each tree
//! message is still acknowledged by id, only up to `tick_ms` later, which `retransmit_ms`
//! leaves room for. A node relays a message as soon as it receives it and delivers it in
//! causal order ([`crate::causal`]). Repair ([`repair`]) covers what the tree cannot:
//! predecessors a buffered message waits on too long are fetched, anti-entropy rounds
//! compare what two subscribers delivered, and a node that joins late (or fell behind what
//! its peers keep) installs a snapshot of the topic's state. Subscriptions change at run time
//! through a reserved topic every node belongs to ([`membership`]).

mod log;
mod membership;
mod repair;

pub use membership::MEMBERSHIP;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bit_set::BitSet;
use bytes::Bytes;
use smallvec::SmallVec;

use self::log::{Log, Logged};
use crate::causal::{Causal, Delivered, MsgId, Received};
use crate::cube::{Cube, NodeId};
use crate::detector::{Change, Detector, DetectorConfig};
use crate::error::VcubeError;
use crate::fast::FastMap;
use crate::message::{Data, Limits, Message, Published, TopicId};
use crate::store::Store;
use crate::tree::{clusters_below, relays};

/// How many acknowledgements ahead of the one taken care of their entries are looked up.
const ACK_LOOKAHEAD: usize = 4;

/// A node's settings (defaults in [`NodeConfig::default`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    pub detector: DetectorConfig,
    /// An unacknowledged tree message is sent again after this long.
    pub retransmit_ms: u64,
    /// Unacknowledged retransmissions after which the receiver is suspected.
    pub ack_misses_max: u32,
    /// Acknowledgements gathered (for every sender) that go out without waiting for the
    /// tick.
    pub ack_batch_max: usize,
    /// How often the node checks its retransmissions and repairs.
    pub tick_ms: u64,
    /// A buffered message waiting this long on a predecessor makes the node fetch it.
    pub fetch_after_ms: u64,
    /// Time between anti-entropy rounds (0: none).
    pub sync_ms: u64,
    /// Messages delivered less than this long ago are not sent by anti-entropy (they may
    /// still be on their way down the tree).
    pub sync_grace_ms: u64,
    /// A joining node asks another subscriber for the snapshot after this long.
    pub snapshot_retry_ms: u64,
    /// Buffered messages per topic.
    pub buffer_max: usize,
    /// Delivered messages kept per topic to answer fetches and anti-entropy.
    pub log_max: usize,
    /// Messages sent in one answer to a fetch or an anti-entropy request.
    pub repair_batch_max: usize,
    /// Tree messages awaiting acknowledgement; beyond, the oldest is given up (repair
    /// brings it where it is missing).
    pub in_flight_max: usize,
    /// This node's own publishes awaiting acknowledgement; beyond, publishing is refused.
    pub publish_pending_max: usize,
    pub limits: Limits,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            detector: DetectorConfig::default(),
            retransmit_ms: 500,
            ack_misses_max: 4,
            ack_batch_max: 1_024,
            tick_ms: 100,
            fetch_after_ms: 1_000,
            sync_ms: 2_000,
            sync_grace_ms: 2_000,
            snapshot_retry_ms: 1_000,
            buffer_max: 4_096,
            log_max: 1_024,
            repair_batch_max: 256,
            in_flight_max: 65_536,
            publish_pending_max: 1_024,
            limits: Limits::default(),
        }
    }
}

/// What the node does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Send {
        to: NodeId,
        message: Message,
    },
    /// An operation was delivered (and applied to the store), in causal order.
    Deliver {
        topic: TopicId,
        id: MsgId,
        hops: u8,
    },
    /// A snapshot of the topic was installed, covering these counters (the operations it
    /// unblocked are delivered after it).
    Installed {
        topic: TopicId,
        delivered: Vec<(NodeId, u64)>,
    },
}

/// An input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Message {
        from: NodeId,
        message: Message,
    },
    /// Time passed: timers that are due fire.
    Tick,
}

/// Counts of what the node did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    pub published: u64,
    pub delivered: u64,
    /// Tree messages received for a message already delivered or buffered.
    pub duplicates: u64,
    /// Repair messages received for a message already delivered or buffered.
    pub repair_duplicates: u64,
    pub retransmissions: u64,
    /// Tree messages re-sent to the next subscriber of a cluster.
    pub replacements: u64,
    pub repairs_sent: u64,
    pub fetches_sent: u64,
    pub snapshots_installed: u64,
    /// Messages refused (malformed, from outside the cube, for an unknown topic, buffer
    /// full).
    pub rejected: u64,
    pub given_up: u64,
}

/// A child a tree message awaits an acknowledgement from (16 bytes: every message in
/// flight holds one or two).
struct Child {
    sent_ms: u64,
    node: NodeId,
    /// The child's cluster (at most 20: a cube holds at most 2^20 nodes).
    cluster: u16,
    /// Retransmissions unacknowledged (saturating).
    misses: u16,
}

/// The children a tree message awaits acknowledgements from (most nodes relay a message to
/// one or two).
type Children = SmallVec<[Child; 2]>;

struct InFlight {
    data: Data,
    children: Children,
    /// Whether this node published it.
    own: bool,
    /// Whether the topic's causal order refused it (then only this entry tells that the
    /// message was seen).
    refused: bool,
}

struct Topic {
    causal: Causal<Data>,
    log: Log,
    /// When each missing predecessor was last fetched, for those fetched less than
    /// `fetch_after_ms` ago.
    fetched: BTreeMap<MsgId, u64>,
    /// A joining node: when it last asked for the snapshot, and how often.
    joining: Option<(u64, u32)>,
}

/// One VCube-Sync node.
pub struct Node<S: Store> {
    cube: Cube,
    me: NodeId,
    config: NodeConfig,
    detector: Detector,
    store: S,
    topics: BTreeMap<TopicId, Topic>,
    /// Who subscribes to each topic, in this node's view (node ids).
    subscribers: BTreeMap<TopicId, BitSet>,
    /// Tree messages awaiting acknowledgement (never walked in the map's order).
    in_flight: FastMap<(TopicId, MsgId), InFlight>,
    /// The keys of `in_flight` in the order they came, to give up the oldest first; keys
    /// acknowledged since stay until the queue is compacted.
    in_flight_order: VecDeque<(TopicId, MsgId)>,
    /// When tree messages are due for retransmission, in time order: every child awaiting
    /// an acknowledgement has an entry due when it is; entries of keys acknowledged since,
    /// or refreshed by a later entry, are skipped when they come up.
    retransmit_due: VecDeque<(u64, (TopicId, MsgId))>,
    own_pending: usize,
    /// Entries of `in_flight` the causal order refused.
    refused: usize,
    actions: VecDeque<Action>,
    /// Acknowledgements not sent yet: sender, topic, message, in the order received.
    acks: Vec<(NodeId, TopicId, MsgId)>,
    /// Room for what one received message delivers, kept between messages.
    delivered_scratch: Vec<Delivered<Data>>,
    next_tick_ms: u64,
    next_sync_ms: u64,
    sync_round: u32,
    stats: NodeStats,
}

impl<S: Store> Node<S> {
    /// Node `me` of `cube`, knowing who subscribes to what; `joining`: it starts without
    /// the topics' state and fetches a snapshot of each it subscribes to.
    pub fn new(
        cube: Cube,
        me: NodeId,
        config: NodeConfig,
        subscriptions: &BTreeMap<TopicId, BTreeSet<NodeId>>,
        store: S,
        joining: bool,
        now_ms: u64,
    ) -> Result<Node<S>, VcubeError> {
        cube.check(me)?;
        if config.retransmit_ms == 0 || config.tick_ms == 0 || config.buffer_max == 0 {
            return Err(VcubeError::Config(
                "retransmit_ms, tick_ms and buffer_max must be positive".into(),
            ));
        }
        for members in subscriptions.values() {
            for &j in members {
                cube.check(j)?;
            }
        }
        if subscriptions.contains_key(&MEMBERSHIP) {
            return Err(VcubeError::Config(format!(
                "topic {} is reserved for subscription changes",
                MEMBERSHIP.0
            )));
        }
        let mut node = Node {
            cube,
            me,
            config,
            detector: Detector::new(cube, me, config.detector, now_ms),
            store,
            topics: BTreeMap::new(),
            subscribers: (subscriptions.iter())
                .map(|(topic, members)| (*topic, members.iter().map(|j| j.0 as usize).collect()))
                .collect(),
            in_flight: FastMap::default(),
            in_flight_order: VecDeque::new(),
            retransmit_due: VecDeque::new(),
            own_pending: 0,
            refused: 0,
            actions: VecDeque::new(),
            acks: Vec::new(),
            delivered_scratch: Vec::new(),
            next_tick_ms: now_ms,
            next_sync_ms: now_ms + config.sync_ms,
            sync_round: 0,
            stats: NodeStats::default(),
        };
        let mine: Vec<TopicId> = (subscriptions.iter())
            .filter(|(_, members)| members.contains(&me))
            .map(|(t, _)| *t)
            .collect();
        for topic in mine.into_iter().chain([MEMBERSHIP]) {
            let fresh = node.fresh_topic(joining);
            node.topics.insert(topic, fresh);
        }
        Ok(node)
    }

    pub fn id(&self) -> NodeId {
        self.me
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn stats(&self) -> NodeStats {
        self.stats
    }

    pub fn detector(&self) -> &Detector {
        &self.detector
    }

    /// What this node delivered on `topic`: the highest counter of each publisher.
    pub fn delivered(&self, topic: TopicId) -> Option<Vec<(NodeId, u64)>> {
        self.topics.get(&topic).map(|t| t.causal.delivered())
    }

    /// Messages waiting for predecessors, over all topics.
    pub fn buffered(&self) -> usize {
        self.topics.values().map(|t| t.causal.buffered()).sum()
    }

    /// Whether a topic still awaits its snapshot.
    pub fn is_joining(&self, topic: TopicId) -> bool {
        self.topics.get(&topic).is_some_and(|t| t.joining.is_some())
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`Input::Tick`] next has work.
    pub fn next_timeout_ms(&self) -> u64 {
        self.next_tick_ms
            .min(self.detector.next_timeout_ms())
            .min(self.next_sync_ms)
    }

    fn send(&mut self, to: NodeId, message: Message) {
        self.actions.push_back(Action::Send { to, message });
    }

    fn eligible(&self, topic: TopicId, j: NodeId) -> bool {
        j != self.me
            && self.detector.is_correct(j)
            && (topic == MEMBERSHIP
                || (self.subscribers.get(&topic)).is_some_and(|s| s.contains(j.0 as usize)))
    }

    /// Publishes `payload` on `topic`: it is delivered here at once and sent down the tree.
    pub fn publish(
        &mut self,
        now_ms: u64,
        topic: TopicId,
        payload: Bytes,
    ) -> Result<MsgId, VcubeError> {
        if topic == MEMBERSHIP {
            return Err(VcubeError::NotSubscribed { topic: topic.0 });
        }
        self.publish_on(now_ms, topic, payload)
    }

    /// Publishes on any topic, the membership topic included.
    fn publish_on(
        &mut self,
        now_ms: u64,
        topic: TopicId,
        payload: Bytes,
    ) -> Result<MsgId, VcubeError> {
        let Some(t) = self.topics.get_mut(&topic) else {
            return Err(VcubeError::NotSubscribed { topic: topic.0 });
        };
        if t.joining.is_some() {
            return Err(VcubeError::Config(format!(
                "topic {} awaits its snapshot: publish once it is installed",
                topic.0
            )));
        }
        if payload.len() > self.config.limits.payload_bytes_max {
            return Err(VcubeError::TooLarge {
                bytes: payload.len(),
                max: self.config.limits.payload_bytes_max,
            });
        }
        if self.own_pending >= self.config.publish_pending_max {
            return Err(VcubeError::Backpressure {
                pending: self.own_pending,
                max: self.config.publish_pending_max,
            });
        }
        if t.causal.counters_exhausted() {
            return Err(VcubeError::CounterExhausted { topic: topic.0 });
        }
        let (id, barrier) = t.causal.publish();
        let data = Data::new(Published::new(topic, id, barrier, payload), 0);
        self.stats.published += 1;
        self.delivered_now(now_ms, data.clone());
        self.relay(now_ms, &data, None, true);
        Ok(id)
    }

    /// Takes an input at `now_ms`.
    pub fn handle(&mut self, now_ms: u64, input: Input) {
        match input {
            Input::Tick => self.tick(now_ms),
            Input::Message { from, message } => {
                if !self.cube.contains(from) || from == self.me {
                    self.stats.rejected += 1;
                    return;
                }
                self.on_message(now_ms, from, message);
            }
        }
    }

    fn on_message(&mut self, now_ms: u64, from: NodeId, message: Message) {
        match message {
            Message::Data { data, repair } => {
                if repair {
                    self.on_repair(now_ms, data);
                } else {
                    self.on_tree(now_ms, from, data);
                }
            }
            Message::Ack { topic, ids } => {
                for (k, &id) in ids.iter().enumerate() {
                    // Looking up the entry of an acknowledgement a few ahead starts reading
                    // it while this one is taken care of (the table outgrows the cache, and
                    // the reads then overlap: 0.94 of the time in runs alternating in both
                    // orders).
                    if let Some(&ahead) = ids.get(k + ACK_LOOKAHEAD) {
                        std::hint::black_box(self.in_flight.contains_key(&(topic, ahead)));
                    }
                    self.on_ack(topic, id, from);
                }
            }
            Message::Test => {
                let events = self.detector.events();
                self.send(
                    from,
                    Message::TestReply {
                        events: events.into(),
                    },
                );
            }
            Message::TestReply { events } => {
                let changes = self.detector.on_reply(from, &events);
                self.on_changes(now_ms, changes);
            }
            Message::SyncRequest { topic, delivered } => {
                self.on_sync_request(now_ms, from, topic, &delivered)
            }
            Message::Fetch { topic, ids } => self.on_fetch(from, topic, &ids),
            Message::SnapshotRequest { topic } => self.on_snapshot_request(from, topic),
            Message::Snapshot(s) => self.on_snapshot(now_ms, s.topic, &s.delivered, &s.state),
        }
    }

    /// A tree message from `from`: acknowledge, relay below the cluster it came from,
    /// deliver in causal order.
    fn on_tree(&mut self, now_ms: u64, from: NodeId, data: Data) {
        let (topic, id) = (data.topic(), data.id());
        if !self.cube.contains(id.source) {
            self.stats.rejected += 1;
            return;
        }
        self.ack(from, topic, id);
        let key = (topic, id);
        // On a subscribed topic the causal order knows what was seen, unless it refused it.
        let seen = match self.topics.get(&topic) {
            Some(t) => t.causal.has(id) || (self.refused > 0 && self.in_flight.contains_key(&key)),
            None => self.in_flight.contains_key(&key),
        };
        if seen {
            self.stats.duplicates += 1;
            return;
        }
        let data = Data {
            hops: data.hops.saturating_add(1),
            ..data
        };
        // A node that does not subscribe (its subscription ended, the sender's view is
        // older) still relays, so that the subscribers below it are not cut off.
        self.relay(now_ms, &data, Some(from), false);
        let subscribed = self.topics.contains_key(&topic);
        if !self.take(now_ms, data, false)
            && subscribed
            && let Some(f) = self.in_flight.get_mut(&key)
        {
            f.refused = true;
            self.refused += 1;
        }
    }

    /// Acknowledges a tree message from `to`: at the next tick, with the others gathered
    /// by then, or now if `ack_batch_max` have gathered.
    fn ack(&mut self, to: NodeId, topic: TopicId, id: MsgId) {
        self.acks.push((to, topic, id));
        if self.acks.len() >= self.config.ack_batch_max {
            self.send_acks();
        }
    }

    /// Sends the gathered acknowledgements: one message per sender and topic, in the order
    /// of senders, then topics, each naming its messages in the order received.
    fn send_acks(&mut self) {
        self.acks.sort_by_key(|&(to, topic, _)| (to, topic));
        for batch in self.acks.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let (to, topic, _) = batch[0];
            let ids = batch.iter().map(|&(_, _, id)| id).collect();
            self.actions.push_back(Action::Send {
                to,
                message: Message::Ack { topic, ids },
            });
        }
        self.acks.clear();
    }

    /// Takes a message into the topic's causal order; delivers what it unblocks. Whether
    /// the causal order holds it now (delivered or buffered, before or now).
    fn take(&mut self, now_ms: u64, data: Data, repair: bool) -> bool {
        let Some(t) = self.topics.get_mut(&data.topic()) else {
            if repair {
                self.stats.rejected += 1;
            }
            return false;
        };
        let id = data.id();
        let mut delivered = std::mem::take(&mut self.delivered_scratch);
        // A tree message comes here only when the causal order has not seen it.
        let received = if repair {
            t.causal.receive(id, data, now_ms, &mut delivered)
        } else {
            t.causal.receive_unseen(id, data, now_ms, &mut delivered)
        };
        match received {
            Ok(Received::Duplicate) => {
                if repair {
                    self.stats.repair_duplicates += 1;
                } else {
                    self.stats.duplicates += 1;
                }
            }
            Ok(Received::Taken) => {
                for d in delivered.drain(..) {
                    // What it unblocked counts no hops.
                    let hops = if d.id == id { d.message.hops } else { 0 };
                    self.delivered_now(now_ms, Data { hops, ..d.message });
                }
            }
            Err(_) => self.stats.rejected += 1,
        }
        self.delivered_scratch = delivered;
        received.is_ok()
    }

    /// A message is delivered here: apply, log, report.
    fn delivered_now(&mut self, now_ms: u64, data: Data) {
        let (topic, id, hops) = (data.topic(), data.id(), data.hops);
        if topic == MEMBERSHIP {
            self.apply_change(id, data.payload());
        } else {
            self.store.apply(topic, id, data.payload());
        }
        self.stats.delivered += 1;
        if let Some(t) = self.topics.get_mut(&topic) {
            if !t.fetched.is_empty() {
                t.fetched.remove(&id);
            }
            t.log.push(
                Logged {
                    data,
                    delivered_ms: now_ms,
                },
                self.config.log_max,
            );
        }
        if topic != MEMBERSHIP {
            self.actions.push_back(Action::Deliver { topic, id, hops });
        }
    }

    /// Sends `data` to the first eligible node of each cluster below the one it came from.
    fn relay(&mut self, now_ms: u64, data: &Data, from: Option<NodeId>, own: bool) {
        let clusters = clusters_below(&self.cube, self.me, from);
        let topic = data.topic();
        let children: Children = relays(&self.cube, self.me, clusters, |j| self.eligible(topic, j))
            .map(|(cluster, node)| Child {
                cluster: cluster as u16,
                node,
                sent_ms: now_ms,
                misses: 0,
            })
            .collect();
        if children.is_empty() {
            return;
        }
        for c in &children {
            self.send(
                c.node,
                Message::Data {
                    data: data.clone(),
                    repair: false,
                },
            );
        }
        let key = (topic, data.id());
        self.in_flight.insert(
            key,
            InFlight {
                data: data.clone(),
                children,
                own,
                refused: false,
            },
        );
        self.own_pending += usize::from(own);
        self.in_flight_order.push_back(key);
        self.retransmit_due
            .push_back((now_ms + self.config.retransmit_ms, key));
        while self.in_flight.len() > self.config.in_flight_max {
            let Some(old) = self.in_flight_order.pop_front() else {
                break;
            };
            if let Some(gone) = self.in_flight.remove(&old) {
                self.forget(&gone);
                self.stats.given_up += 1;
            }
        }
    }

    fn on_ack(&mut self, topic: TopicId, id: MsgId, from: NodeId) {
        let key = (topic, id);
        // Not the entry API: it would make room for a key that is absent (a late
        // acknowledgement), growing the table.
        let Some(f) = self.in_flight.get_mut(&key) else {
            return;
        };
        f.children.retain(|c| c.node != from);
        if f.children.is_empty()
            && let Some(done) = self.in_flight.remove(&key)
        {
            self.forget(&done);
        }
    }

    /// Counts an entry of `in_flight` out.
    fn forget(&mut self, gone: &InFlight) {
        self.own_pending -= usize::from(gone.own);
        self.refused -= usize::from(gone.refused);
    }

    fn tick(&mut self, now_ms: u64) {
        let (tests, changes) = self.detector.tick(now_ms);
        for j in tests {
            self.send(j, Message::Test);
        }
        self.on_changes(now_ms, changes);
        if now_ms >= self.next_tick_ms {
            self.next_tick_ms = now_ms + self.config.tick_ms;
            self.send_acks();
            self.retransmit(now_ms);
            self.fetch_missing(now_ms);
            self.join_topics(now_ms);
        }
        if now_ms >= self.next_sync_ms {
            self.next_sync_ms = now_ms + self.config.sync_ms.max(self.config.tick_ms);
            if self.config.sync_ms > 0 {
                self.sync(now_ms);
            }
        }
        self.compact();
    }

    /// Drops the keys of acknowledged messages from the queues once they outnumber the
    /// messages in flight (each key is dropped once: constant time per key, amortized).
    fn compact(&mut self) {
        let live = self.in_flight.len();
        if self.in_flight_order.len() > 2 * live + 64 {
            let in_flight = &self.in_flight;
            self.in_flight_order
                .retain(|key| in_flight.contains_key(key));
        }
        if self.retransmit_due.len() > 2 * self.config.in_flight_max.max(live) {
            let in_flight = &self.in_flight;
            self.retransmit_due
                .retain(|(_, key)| in_flight.contains_key(key));
        }
    }

    /// Sends again what stays unacknowledged; a receiver silent too long is suspected.
    /// Only the messages due come up (times never go back, so the queue is in time order);
    /// they are sent again in the order of their keys.
    fn retransmit(&mut self, now_ms: u64) {
        let mut resend = Vec::new();
        let mut suspects = Vec::new();
        let retransmit_ms = self.config.retransmit_ms;
        while let Some(&(due_ms, key)) = self.retransmit_due.front() {
            if due_ms > now_ms {
                break;
            }
            self.retransmit_due.pop_front();
            let Some(f) = self.in_flight.get_mut(&key) else {
                continue;
            };
            let mut again = false;
            for c in &mut f.children {
                if now_ms < c.sent_ms + retransmit_ms {
                    continue;
                }
                again = true;
                c.misses = c.misses.saturating_add(1);
                c.sent_ms = now_ms;
                if u32::from(c.misses) >= self.config.ack_misses_max {
                    suspects.push(c.node);
                } else {
                    resend.push((key, c.node));
                }
            }
            if again {
                self.retransmit_due.push_back((now_ms + retransmit_ms, key));
            }
        }
        // Stable: a message's children keep their order.
        resend.sort_by_key(|(key, _)| *key);
        for (key, to) in resend {
            let data = self.in_flight[&key].data.clone();
            self.stats.retransmissions += 1;
            self.send(
                to,
                Message::Data {
                    data,
                    repair: false,
                },
            );
        }
        suspects.sort();
        suspects.dedup();
        let changes: Vec<Change> = (suspects.into_iter())
            .filter_map(|j| self.detector.suspect(j))
            .collect();
        self.on_changes(now_ms, changes);
    }

    /// The view changed: tree messages awaiting a suspected node go to the next eligible
    /// node of its cluster.
    fn on_changes(&mut self, now_ms: u64, changes: Vec<Change>) {
        let suspected: Vec<NodeId> = (changes.into_iter())
            .filter_map(|c| match c {
                Change::Suspected(j) => Some(j),
                Change::Trusted(_) => None,
            })
            .collect();
        if suspected.is_empty() {
            return;
        }
        let mut keys: Vec<(TopicId, MsgId)> = (self.in_flight.iter())
            .filter(|(_, f)| f.children.iter().any(|c| suspected.contains(&c.node)))
            .map(|(k, _)| *k)
            .collect();
        keys.sort_unstable();
        for key in keys {
            let mut f = self.in_flight.remove(&key).expect("listed");
            let mut children = Children::new();
            let mut replaced = false;
            for c in std::mem::take(&mut f.children) {
                if !suspected.contains(&c.node) {
                    children.push(c);
                    continue;
                }
                let next = self
                    .cube
                    .first_in(self.me, u32::from(c.cluster), |j| self.eligible(key.0, j));
                if let Some(node) = next {
                    replaced = true;
                    self.stats.replacements += 1;
                    self.send(
                        node,
                        Message::Data {
                            data: f.data.clone(),
                            repair: false,
                        },
                    );
                    children.push(Child {
                        cluster: c.cluster,
                        node,
                        sent_ms: now_ms,
                        misses: 0,
                    });
                }
            }
            if replaced {
                self.retransmit_due
                    .push_back((now_ms + self.config.retransmit_ms, key));
            }
            if children.is_empty() {
                self.forget(&f);
            } else {
                f.children = children;
                self.in_flight.insert(key, f);
            }
        }
    }
}

#[cfg(test)]
mod tests;
