//! The Plumtree baseline (Leitão, Pereira, Rodrigues: "Epidemic Broadcast Trees"), the
//! family of the epidemic tree VCube-Sync was compared with. Every link starts eager; a
//! node pushes a new message to its eager peers and announces it (IHAVE) to its lazy
//! peers. A copy received again moves its sender to lazy and answers it PRUNE, so the
//! eager links settle into a spanning tree. An announced message that does not arrive
//! within `timer1_ms` is asked of the announcer with GRAFT (which also makes that link
//! eager again), the next announcer after `timer2_ms`. One eager set serves every
//! publisher, as in the original protocol; the tree it settles into is not shortest-path.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tagma_vcube::{Data, MsgId, NodeId, TopicId};

use crate::overlay::{GossipMessage, Replicas};
use crate::proto::{Effect, Protocol, Sizes};

/// Plumtree's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlumtreeConfig {
    /// Wait for an announced message before grafting.
    pub timer1_ms: u64,
    /// Wait for a grafted message before asking the next announcer.
    pub timer2_ms: u64,
    /// Messages kept to answer GRAFTs.
    pub log_max: usize,
}

impl Default for PlumtreeConfig {
    fn default() -> Self {
        PlumtreeConfig {
            timer1_ms: 500,
            timer2_ms: 250,
            log_max: 4_096,
        }
    }
}

struct Missing {
    announcers: VecDeque<NodeId>,
    due_ms: u64,
}

/// A Plumtree node.
pub struct PlumtreeNode {
    config: PlumtreeConfig,
    eager: BTreeSet<NodeId>,
    lazy: BTreeSet<NodeId>,
    replicas: Replicas,
    log: BTreeMap<(TopicId, MsgId), Data>,
    log_order: VecDeque<(TopicId, MsgId)>,
    missing: BTreeMap<(TopicId, MsgId), Missing>,
}

impl PlumtreeNode {
    pub fn new(
        me: NodeId,
        neighbours: Vec<NodeId>,
        subscriptions: &BTreeMap<TopicId, BTreeSet<NodeId>>,
        config: PlumtreeConfig,
        value_bytes: usize,
    ) -> PlumtreeNode {
        PlumtreeNode {
            config,
            eager: neighbours.into_iter().collect(),
            lazy: BTreeSet::new(),
            replicas: Replicas::new(me, subscriptions, 1 << 20, value_bytes),
            log: BTreeMap::new(),
            log_order: VecDeque::new(),
            missing: BTreeMap::new(),
        }
    }

    fn keep(&mut self, data: &Data) {
        let key = (data.topic(), data.id());
        self.log.insert(key, data.clone());
        self.log_order.push_back(key);
        while self.log_order.len() > self.config.log_max {
            if let Some(old) = self.log_order.pop_front() {
                self.log.remove(&old);
            }
        }
    }

    /// Eager push and lazy announcements of a new message.
    fn spread(
        &mut self,
        data: &Data,
        except: Option<NodeId>,
        out: &mut Vec<Effect<GossipMessage>>,
    ) {
        self.keep(data);
        for &to in &self.eager {
            if Some(to) != except {
                out.push(Effect::Send {
                    to,
                    message: GossipMessage::Gossip(data.clone()),
                });
            }
        }
        for &to in &self.lazy {
            if Some(to) != except {
                out.push(Effect::Send {
                    to,
                    message: GossipMessage::IHave {
                        topic: data.topic(),
                        id: data.id(),
                    },
                });
            }
        }
    }

    fn make_eager(&mut self, peer: NodeId) {
        self.lazy.remove(&peer);
        self.eager.insert(peer);
    }

    fn make_lazy(&mut self, peer: NodeId) {
        self.eager.remove(&peer);
        self.lazy.insert(peer);
    }
}

impl Protocol for PlumtreeNode {
    type Message = GossipMessage;

    fn sizes(message: &GossipMessage) -> Sizes {
        message.sizes()
    }

    fn handle(
        &mut self,
        now_ms: u64,
        from: NodeId,
        message: GossipMessage,
        out: &mut Vec<Effect<GossipMessage>>,
    ) {
        match message {
            GossipMessage::Gossip(data) => {
                if self.replicas.has(data.topic(), data.id()) {
                    self.replicas.duplicates += 1;
                    self.make_lazy(from);
                    out.push(Effect::Send {
                        to: from,
                        message: GossipMessage::Prune,
                    });
                    return;
                }
                self.missing.remove(&(data.topic(), data.id()));
                let data = Data {
                    hops: data.hops.saturating_add(1),
                    ..data
                };
                self.make_eager(from);
                self.spread(&data, Some(from), out);
                self.replicas.take(now_ms, &data, out);
            }
            GossipMessage::IHave { topic, id } => {
                if self.replicas.has(topic, id) {
                    return;
                }
                let m = self.missing.entry((topic, id)).or_insert(Missing {
                    announcers: VecDeque::new(),
                    due_ms: now_ms + self.config.timer1_ms,
                });
                if !m.announcers.contains(&from) {
                    m.announcers.push_back(from);
                }
            }
            GossipMessage::Graft { topic, id } => {
                self.make_eager(from);
                if let Some(data) = self.log.get(&(topic, id)) {
                    out.push(Effect::Send {
                        to: from,
                        message: GossipMessage::Gossip(data.clone()),
                    });
                }
            }
            GossipMessage::Prune => self.make_lazy(from),
        }
    }

    fn tick(&mut self, now_ms: u64, out: &mut Vec<Effect<GossipMessage>>) {
        let due: Vec<(TopicId, MsgId)> = (self.missing.iter())
            .filter(|(_, m)| m.due_ms <= now_ms)
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            let m = self.missing.get_mut(&key).expect("listed");
            let Some(peer) = m.announcers.pop_front() else {
                self.missing.remove(&key);
                continue;
            };
            m.due_ms = now_ms + self.config.timer2_ms;
            if m.announcers.is_empty() {
                // Ask again later anyway: the grafted copy may be lost.
                m.announcers.push_back(peer);
            }
            self.make_eager(peer);
            out.push(Effect::Send {
                to: peer,
                message: GossipMessage::Graft {
                    topic: key.0,
                    id: key.1,
                },
            });
        }
    }

    fn next_timeout_ms(&self) -> u64 {
        (self.missing.values().map(|m| m.due_ms).min()).unwrap_or(u64::MAX / 1_000)
    }

    fn publish(
        &mut self,
        _now_ms: u64,
        topic: TopicId,
        draw: u64,
        out: &mut Vec<Effect<GossipMessage>>,
    ) -> Option<(MsgId, usize)> {
        let data = self.replicas.publish(topic, draw, out)?;
        self.spread(&data, None, out);
        Some((data.id(), data.payload().len()))
    }

    fn digest(&self, topic: TopicId) -> [u8; 32] {
        self.replicas.digest(topic)
    }

    fn duplicates(&self) -> u64 {
        self.replicas.duplicates
    }
}
