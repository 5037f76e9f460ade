//! The discrete-event loop: one priority queue of events ordered by (time in µs, sequence
//! number), so equal times break ties the same way every run; nodes are protocol state
//! machines ([`Protocol`]) fed by it. It carries messages over the link model
//! ([`crate::link`]), fires each node's timer when it is due, publishes the workload's
//! operations, crashes and starts nodes as the plan says, and hands every publish and
//! delivery to the causal checker and the metrics.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use tagma_vcube::{NodeId, TopicId};

use crate::checker::Checker;
use crate::metrics::{Metrics, Report};
use crate::proto::{Effect, Protocol};
use crate::workload::{Plan, Workload};

enum Event<M> {
    /// A message reaches `to`, joining its receive queue.
    Arrive {
        to: NodeId,
        from: NodeId,
        message: M,
    },
    /// `to` handles a message (after its receive queue).
    Handle {
        to: NodeId,
        from: NodeId,
        message: M,
    },
    Timer {
        node: NodeId,
    },
    Publish {
        node: NodeId,
        topic: TopicId,
    },
    Crash {
        node: NodeId,
    },
    Join {
        node: NodeId,
    },
}

/// Builds node `id` (`joining`: it starts late, without state) at `now_ms`.
pub type Factory<'a, P> = dyn FnMut(NodeId, bool, u64) -> P + 'a;

/// One run of one protocol.
pub struct Sim<'a, P: Protocol> {
    workload: Workload,
    plan: Plan,
    nodes: Vec<Option<P>>,
    crashed: Vec<bool>,
    factory: Box<Factory<'a, P>>,
    /// (time, sequence number, slot of the event in `events`): the heap moves three
    /// integers, the events stay put.
    queue: BinaryHeap<Reverse<(u64, u64, u32)>>,
    events: Vec<Option<Event<P::Message>>>,
    free: Vec<u32>,
    seq: u64,
    now_us: u64,
    uplink_free_us: Vec<u64>,
    cpu_free_us: Vec<u64>,
    timer_us: Vec<u64>,
    rng: fastrand::Rng,
    /// Draws the operations, apart from the losses, so every protocol publishes the same.
    op_rng: fastrand::Rng,
    checker: Checker,
    metrics: Metrics,
    effects: Vec<Effect<P::Message>>,
}

impl<'a, P: Protocol> Sim<'a, P> {
    pub fn new(workload: Workload, factory: Box<Factory<'a, P>>) -> Sim<'a, P> {
        let plan = workload.plan();
        let n = workload.nodes as usize;
        let publishers: Vec<Vec<NodeId>> = plan.publishers.values().cloned().collect();
        Sim {
            checker: Checker::new(workload.nodes, &publishers, 1 << 16),
            metrics: Metrics::new(),
            nodes: (0..n).map(|_| None).collect(),
            crashed: vec![false; n],
            factory,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            free: Vec::new(),
            seq: 0,
            now_us: 0,
            uplink_free_us: vec![0; n],
            cpu_free_us: vec![0; n],
            timer_us: vec![u64::MAX; n],
            rng: fastrand::Rng::with_seed(workload.seed ^ 0x5eed),
            op_rng: fastrand::Rng::with_seed(workload.seed ^ 0x0b5),
            effects: Vec::new(),
            plan,
            workload,
        }
    }

    fn push(&mut self, at_us: u64, event: Event<P::Message>) {
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.events[slot as usize] = Some(event);
                slot
            }
            None => {
                self.events.push(Some(event));
                (self.events.len() - 1) as u32
            }
        };
        self.queue.push(Reverse((at_us, self.seq, slot)));
    }

    fn schedule_timer(&mut self, node: NodeId) {
        let i = node.0 as usize;
        let Some(p) = self.nodes[i].as_ref() else {
            return;
        };
        let due_us = p.next_timeout_ms().saturating_mul(1_000).max(self.now_us);
        if due_us < self.timer_us[i] {
            self.timer_us[i] = due_us;
            self.push(due_us, Event::Timer { node });
        }
    }

    /// Carries out what node `me` did.
    fn apply_effects(&mut self, me: NodeId) {
        let effects = std::mem::take(&mut self.effects);
        for effect in effects {
            match effect {
                Effect::Send { to, message } => {
                    let sizes = P::sizes(&message);
                    self.metrics.sent(&sizes);
                    let i = me.0 as usize;
                    let depart = self.uplink_free_us[i].max(self.now_us)
                        + self.workload.link.transmit_us(sizes.total());
                    self.uplink_free_us[i] = depart;
                    if self.workload.link.loss > 0.0 && self.rng.f64() < self.workload.link.loss {
                        continue;
                    }
                    let arrive = depart + self.workload.link.latency_us(self.workload.seed, me, to);
                    self.push(
                        arrive,
                        Event::Arrive {
                            to,
                            from: me,
                            message,
                        },
                    );
                }
                Effect::Deliver { topic, id, hops } => {
                    self.checker.delivered(me, topic, id);
                    self.metrics.delivered(me, topic, id, hops, self.now_us);
                }
                Effect::Installed { topic, delivered } => {
                    self.checker.installed(me, topic, &delivered);
                    self.metrics.snapshots += 1;
                }
            }
        }
        self.schedule_timer(me);
    }

    fn start(&mut self, node: NodeId, joining: bool) {
        let now_ms = self.now_us / 1_000;
        let p = (self.factory)(node, joining, now_ms);
        self.nodes[node.0 as usize] = Some(p);
        self.timer_us[node.0 as usize] = u64::MAX;
        self.schedule_timer(node);
    }

    fn receivers(&self, topic: TopicId) -> u32 {
        let members = &self.plan.subscriptions[&topic];
        members.len().saturating_sub(1) as u32
    }

    /// Runs the workload to its end and reports.
    pub fn run(mut self) -> Report {
        let wall = Instant::now();
        let w = self.workload.clone();
        let end_publish_us = (w.duration_s * 1e6) as u64;
        let end_us = end_publish_us + (w.drain_s * 1e6) as u64;
        for i in 0..w.nodes {
            if !self.plan.joins.contains(&NodeId(i)) {
                self.start(NodeId(i), false);
            }
        }
        let interval_us = (1e6 / w.ops_per_s) as u64;
        let publishers: Vec<(TopicId, NodeId)> = (self.plan.publishers.iter())
            .flat_map(|(t, p)| p.iter().map(move |n| (*t, *n)))
            .collect();
        for (k, (topic, node)) in publishers.into_iter().enumerate() {
            // Spread the publishers over the interval; start after a second of warm-up.
            let offset = interval_us * (k as u64 % 997) / 997;
            self.push(1_000_000 + offset, Event::Publish { node, topic });
        }
        for &node in &self.plan.crashes.clone() {
            self.push(end_publish_us / 2, Event::Crash { node });
        }
        for &node in &self.plan.joins.clone() {
            self.push(end_publish_us / 3, Event::Join { node });
        }
        while let Some(Reverse((at_us, _, slot))) = self.queue.pop() {
            if at_us > end_us {
                break;
            }
            let event = self.events[slot as usize].take().expect("queued");
            self.free.push(slot);
            self.now_us = at_us;
            let now_ms = self.now_us / 1_000;
            match event {
                Event::Arrive { to, from, message } => {
                    // The receiver serves messages one at a time in the order they arrive
                    // (a link's arrive in the order they were sent: it stays FIFO).
                    let j = to.0 as usize;
                    if self.nodes[j].is_none() {
                        continue;
                    }
                    let handle = self.cpu_free_us[j].max(self.now_us) + w.link.receive_cost_us;
                    self.cpu_free_us[j] = handle;
                    self.push(handle, Event::Handle { to, from, message });
                }
                Event::Handle { to, from, message } => {
                    let mut effects = std::mem::take(&mut self.effects);
                    let Some(p) = self.nodes[to.0 as usize].as_mut() else {
                        continue;
                    };
                    p.handle(now_ms, from, message, &mut effects);
                    self.effects = effects;
                    self.apply_effects(to);
                }
                Event::Timer { node } => {
                    let i = node.0 as usize;
                    if self.timer_us[i] != self.now_us {
                        continue; // replaced by an earlier one
                    }
                    self.timer_us[i] = u64::MAX;
                    let mut effects = std::mem::take(&mut self.effects);
                    let Some(p) = self.nodes[i].as_mut() else {
                        continue;
                    };
                    if p.next_timeout_ms() <= now_ms {
                        p.tick(now_ms, &mut effects);
                    }
                    self.effects = effects;
                    self.apply_effects(node);
                }
                Event::Publish { node, topic } => {
                    if self.now_us < end_publish_us {
                        self.push(self.now_us + interval_us, Event::Publish { node, topic });
                    }
                    let mut effects = std::mem::take(&mut self.effects);
                    let Some(p) = self.nodes[node.0 as usize].as_mut() else {
                        continue;
                    };
                    let draw = self.op_rng.u64(..);
                    if let Some((id, bytes)) = p.publish(now_ms, topic, draw, &mut effects) {
                        let receivers = self.receivers(topic);
                        self.checker.published(topic, id, receivers);
                        self.metrics
                            .published(topic, id, self.now_us, receivers, bytes);
                    } else {
                        self.metrics.refused += 1;
                    }
                    self.effects = effects;
                    self.apply_effects(node);
                }
                Event::Crash { node } => {
                    self.nodes[node.0 as usize] = None;
                    self.crashed[node.0 as usize] = true;
                }
                Event::Join { node } => self.start(node, true),
            }
        }
        self.finish(wall)
    }

    fn finish(self, wall: Instant) -> Report {
        let mut convergent = true;
        let mut diverged = Vec::new();
        for (topic, members) in &self.plan.subscriptions {
            let live: Vec<NodeId> = (members.iter())
                .filter(|n| self.nodes[n.0 as usize].is_some())
                .copied()
                .collect();
            let digests: Vec<[u8; 32]> = (live.iter())
                .map(|n| {
                    self.nodes[n.0 as usize]
                        .as_ref()
                        .expect("live")
                        .digest(*topic)
                })
                .collect();
            let clocks: Vec<&[u32]> = live
                .iter()
                .map(|n| self.checker.clock(*n, *topic))
                .collect();
            let equal =
                digests.windows(2).all(|w| w[0] == w[1]) && clocks.windows(2).all(|w| w[0] == w[1]);
            if !equal {
                convergent = false;
                let reference = clocks.first().copied().unwrap_or(&[]);
                let behind = clocks.iter().filter(|c| *c != &reference).count();
                diverged.push(format!(
                    "topic {}: {behind} of {} live subscribers differ from the first",
                    topic.0,
                    live.len()
                ));
            }
        }
        let duplicates = (self.nodes.iter().flatten()).map(|p| p.duplicates()).sum();
        self.metrics.report(
            self.checker.witnesses(),
            convergent,
            diverged,
            self.checker.violations,
            self.checker.double_deliveries,
            duplicates,
            wall.elapsed().as_secs_f64(),
        )
    }
}
