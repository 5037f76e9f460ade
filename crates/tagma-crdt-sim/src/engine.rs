//! The discrete-event loop: nodes are protocol state machines ([`Protocol`]) fed by it. It
//! carries messages over the link model ([`crate::link`]), fires each node's timer when it
//! is due, publishes the workload's operations, crashes and starts nodes as the plan says,
//! and hands every publish and delivery to the causal checker and the metrics.
//!
//! Time advances in windows no longer than the smallest delay between sending a message
//! and handling it (the link's least latency and per-message costs, at least 1 µs): what a
//! node does in a window reaches another node in a later window at the earliest, so within
//! a window the nodes are independent of each other. A window runs node by node, each
//! node's events in time order ([`crate::station`]) — a node's state stays in the
//! processor's caches while it handles its messages of the window — and runs of
//! consecutive nodes ([`Chunk`]) go through it on threads of their own. When the window
//! ends, what the chunks found, counted and sent is merged in chunk order. Nothing a node
//! does depends on the order in which nodes run or on the number of threads, so a run is
//! reproducible and gives the same report on any number of threads.
//!
//! Mail waits in a calendar per chunk ([`crate::calendar`]) until a window's horizon passes
//! its arrival; a node handles its messages one at a time in the order they arrive
//! ([`crate::inbox`]).
//! At equal times a node crashes or starts first, then handles its messages, then
//! publishes, then changes its subscription, then fires its timer.

use std::time::Instant;

use rayon::prelude::*;
use tagma_vcube::NodeId;

use crate::checker::Checker;
use crate::inbox::Mail;
use crate::metrics::{Metrics, Report, Tally};
use crate::proto::Protocol;
pub use crate::station::Factory;
use crate::station::{Chunk, Judges, Shared, Slot};
use crate::workload::{Plan, Workload};

/// The mail for one chunk, in bags by sending chunk.
type Bags<M> = Vec<Vec<Mail<M>>>;

/// Chunks of nodes per thread when several run.
const CHUNKS_PER_THREAD: usize = 4;

/// One run of one protocol.
pub struct Sim<'a, P: Protocol> {
    workload: Workload,
    plan: Plan,
    chunks: Vec<Chunk<P>>,
    chunk_len: usize,
    factory: Box<Factory<'a, P>>,
    threads: usize,
    /// The longest window: the least delay from sending a message to handling it.
    window_us: u64,
    /// The least delay from sending a message to its arrival.
    arrival_min_us: u64,
    end_publish_us: u64,
    interval_us: u64,
    checker: Checker,
    metrics: Metrics,
}

impl<'a, P: Protocol> Sim<'a, P>
where
    P: Send,
    P::Message: Send,
{
    /// A run of `workload` on `threads` threads (at least one).
    pub fn with_threads(
        workload: Workload,
        factory: Box<Factory<'a, P>>,
        threads: usize,
    ) -> Sim<'a, P> {
        let plan = workload.plan();
        let n = workload.nodes as usize;
        let threads = threads.clamp(1, n.max(1));
        let publishers: Vec<Vec<_>> = plan.publishers.values().cloned().collect();
        // Operations are expected at every witness that subscribes at some point of the run.
        let finally = plan.final_subscriptions();
        let subscribers: Vec<Vec<NodeId>> = (plan.subscriptions.iter())
            .map(|(t, members)| members.union(&finally[t]).copied().collect())
            .collect();
        let end_publish_us = (workload.duration_s * 1e6) as u64;
        let interval_us = (1e6 / workload.ops_per_s) as u64;
        // A publisher publishes once per interval until the end of publishing.
        let counter_max = end_publish_us / interval_us.max(1) + 2;
        let checker = Checker::new(
            workload.nodes,
            &publishers,
            &subscribers,
            1 << 16,
            counter_max,
        );
        let link = &workload.link;
        let latency_min_us =
            (link.latency_min_ms.min(link.latency_max_ms).max(0.0) * 1_000.0).floor() as u64;
        let arrival_min_us = link.send_cost_us + latency_min_us;
        let mut slots: Vec<Slot<P>> = (0..n)
            .map(|i| {
                let clocks = checker.clocks();
                Slot::new(
                    workload.seed,
                    NodeId(i as u32),
                    clocks,
                    link.receive_cost_us,
                )
            })
            .collect();
        let publishing =
            (plan.publishers.iter()).flat_map(|(t, p)| p.iter().map(move |n| (*t, *n)));
        for (k, (topic, node)) in publishing.enumerate() {
            // Spread the publishers over the interval; start after a second of warm-up.
            let offset = interval_us * (k as u64 % 997) / 997;
            slots[node.0 as usize].publish_from(1_000_000 + offset, topic);
        }
        for &node in &plan.crashes {
            slots[node.0 as usize].crash_at(end_publish_us / 2);
        }
        for &node in &plan.joins {
            slots[node.0 as usize].join_at(end_publish_us / 3);
        }
        for (&node, &topic) in &plan.changes {
            let subscribe = !plan.subscriptions[&topic].contains(&node);
            slots[node.0 as usize].change_at(end_publish_us * 2 / 5, topic, subscribe);
        }
        // A few chunks per thread, so that a thread the machine runs less than the others
        // takes fewer of them.
        let chunks_wanted = if threads == 1 {
            1
        } else {
            threads * CHUNKS_PER_THREAD
        };
        let chunk_len = n.div_ceil(chunks_wanted.min(n.max(1)));
        let mut chunks = Vec::new();
        let mut rest = slots.into_iter();
        for first in (0..n).step_by(chunk_len) {
            let part: Vec<Slot<P>> = rest.by_ref().take(chunk_len).collect();
            chunks.push(Chunk::new(
                first,
                part,
                n.div_ceil(chunk_len),
                arrival_min_us,
            ));
        }
        Sim {
            chunks,
            chunk_len,
            factory,
            threads,
            // At least 1 µs: the workload's check refuses links without any delay.
            window_us: (arrival_min_us + link.receive_cost_us).max(1),
            arrival_min_us,
            end_publish_us,
            interval_us,
            checker,
            metrics: Metrics::new(workload.nodes, &publishers),
            plan,
            workload,
        }
    }

    /// Runs the workload to its end and reports.
    pub fn run(mut self) -> Report {
        let wall = Instant::now();
        let pool = (self.threads > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(self.threads)
                    .build()
                    .ok()
            })
            .flatten();
        match &pool {
            Some(pool) => pool.install(|| self.run_windows(true)),
            None => self.run_windows(false),
        }
        self.finish(wall)
    }

    fn run_windows(&mut self, parallel: bool) {
        let end_us = self.end_publish_us + (self.workload.drain_s * 1e6) as u64;
        let receive_cost_us = self.workload.link.receive_cost_us;
        let chunks = &mut self.chunks;
        let shared = Shared {
            workload: &self.workload,
            plan: &self.plan,
            factory: &*self.factory,
            chunk_len: self.chunk_len,
            end_publish_us: self.end_publish_us,
            interval_us: self.interval_us,
            arrival_min_us: self.arrival_min_us,
        };
        let (checker, metrics) = (&mut self.checker, &mut self.metrics);
        for_each(chunks, parallel, |c| c.start(&shared));
        // Mailbags by receiving chunk, then sending chunk; emptied bags go back.
        let mut bags: Vec<Bags<P::Message>> = (0..chunks.len()).map(|_| Vec::new()).collect();
        loop {
            let start_us = chunks.iter().map(Chunk::next_us).min().unwrap_or(u64::MAX);
            if start_us > end_us {
                break;
            }
            let window_end_us = start_us.saturating_add(self.window_us).min(end_us + 1);
            let judges = Judges {
                checker: &*checker,
                metrics: &*metrics,
            };
            for_each(chunks, parallel, |c| {
                c.run_window(&shared, judges, start_us, window_end_us)
            });
            for c in chunks.iter_mut() {
                checker.merge(&mut c.findings);
                metrics.merge(&mut c.tally);
                for (to, bag) in c.outbox.iter_mut().enumerate() {
                    bags[to].push(std::mem::take(bag));
                }
            }
            let mut deliveries: Vec<(&mut Chunk<P>, &mut Bags<P::Message>)> =
                chunks.iter_mut().zip(bags.iter_mut()).collect();
            for_each(&mut deliveries, parallel, |(c, bags)| {
                for bag in bags.iter_mut() {
                    c.receive(receive_cost_us, bag);
                }
            });
            for (to, from_all) in bags.iter_mut().enumerate() {
                for (from, bag) in from_all.drain(..).enumerate() {
                    chunks[from].outbox[to] = bag;
                }
            }
        }
    }

    fn finish(self, wall: Instant) -> Report {
        let mut convergent = true;
        let mut diverged = Vec::new();
        let slot = |n: &NodeId| {
            &self.chunks[n.0 as usize / self.chunk_len].slots[n.0 as usize % self.chunk_len]
        };
        for (topic, members) in &self.plan.final_subscriptions() {
            let live: Vec<NodeId> = (members.iter())
                .filter(|n| slot(n).protocol.is_some())
                .copied()
                .collect();
            let digests: Vec<[u8; 32]> = (live.iter())
                .map(|n| slot(n).protocol.as_ref().expect("live").digest(*topic))
                .collect();
            let clocks: Vec<Vec<u64>> = (live.iter())
                .map(|n| self.checker.clock(&slot(n).clocks, *topic))
                .collect();
            let equal =
                digests.windows(2).all(|w| w[0] == w[1]) && clocks.windows(2).all(|w| w[0] == w[1]);
            if !equal {
                convergent = false;
                let reference = clocks.first().cloned().unwrap_or_default();
                let behind = clocks.iter().filter(|c| *c != &reference).count();
                diverged.push(format!(
                    "topic {}: {behind} of {} live subscribers differ from the first",
                    topic.0,
                    live.len()
                ));
            }
        }
        let nodes = self.chunks.iter().flat_map(|c| c.slots.iter());
        let duplicates = (nodes.filter_map(|s| s.protocol.as_ref()))
            .map(|p| p.duplicates())
            .sum();
        let mut tally = Tally::default();
        for c in &self.chunks {
            tally.add(&c.tally);
        }
        tally.report(
            self.checker.witnesses(),
            convergent,
            diverged,
            self.checker.violations(),
            self.checker.double_deliveries(),
            duplicates,
            wall.elapsed().as_secs_f64(),
        )
    }
}

/// Runs `f` on every item, on the pool's threads when `parallel`.
fn for_each<T: Send>(items: &mut [T], parallel: bool, f: impl Fn(&mut T) + Sync + Send) {
    if parallel {
        items.par_iter_mut().for_each(f);
    } else {
        items.iter_mut().for_each(f);
    }
}
