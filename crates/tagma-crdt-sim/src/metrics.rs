//! What a run measured: bytes and messages by class, delivery latency (from the publish to
//! the delivery at each subscriber, after causal buffering) as a millisecond histogram,
//! hops, duplicates, the bytes the cheapest possible dissemination would have sent —
//! every operation once to every other subscriber, with nothing but its identity — and what
//! the causal metadata would weigh as vector clocks.
//!
//! Nodes count into tallies of their own ([`Tally`]), summed at the end; the publish times
//! ([`Metrics`]) take in a stretch's publishes before the next stretch, as the checker
//! does.

use serde::Serialize;
use tagma_vcube::{MsgId, NodeId, TopicId};

use crate::checker::{NOT_PUBLISHER, publisher_index};
use crate::proto::Sizes;

/// Latencies above this many ms fall into the last bucket.
const LATENCY_MS_MAX: usize = 600_000;

/// Not published (yet).
const UNPUBLISHED: u64 = u64::MAX;

/// When each operation was published.
pub struct Metrics {
    /// Publisher index of each node, per topic.
    index: Vec<Vec<u32>>,
    /// By topic, publisher index and counter (from 1): a publisher's counters run on, so
    /// the recent publishes of each sit side by side.
    published_us: Vec<Vec<Vec<u64>>>,
}

impl Metrics {
    /// `publishers[t]`: the publishers of topic `t`.
    pub fn new(nodes: u32, publishers: &[Vec<NodeId>]) -> Metrics {
        Metrics {
            index: publisher_index(nodes, publishers),
            published_us: (publishers.iter())
                .map(|p| vec![Vec::new(); p.len()])
                .collect(),
        }
    }

    /// The slot of `id`'s publish time, if `id`'s publisher publishes on `topic`.
    fn slot(&self, topic: TopicId, id: MsgId) -> Option<(usize, usize, usize)> {
        let t = topic.0 as usize;
        let p = *self.index.get(t)?.get(id.source.0 as usize)?;
        let k = usize::try_from(id.counter.checked_sub(1)?).ok()?;
        (p != NOT_PUBLISHER).then_some((t, p as usize, k))
    }

    fn published_us(&self, topic: TopicId, id: MsgId) -> Option<u64> {
        let (t, p, k) = self.slot(topic, id)?;
        let at = *self.published_us[t][p].get(k)?;
        (at != UNPUBLISHED).then_some(at)
    }

    /// Takes in the publishes a tally counted since.
    pub fn merge(&mut self, tally: &mut Tally) {
        for ((topic, id), at_us) in tally.published_us.drain(..) {
            if let Some((t, p, k)) = self.slot(topic, id) {
                let times = &mut self.published_us[t][p];
                if k >= times.len() {
                    times.resize(k + 1, UNPUBLISHED);
                }
                times[k] = at_us;
            }
        }
    }
}

/// Counters filled during a run.
#[derive(Default)]
pub struct Tally {
    sizes: Sizes,
    messages: u64,
    /// Publishes not yet taken in by [`Metrics::merge`].
    published_us: Vec<((TopicId, MsgId), u64)>,
    /// Deliveries by latency in ms, as long as the longest latency seen.
    histogram: Vec<u64>,
    latency_sum_us: u128,
    deliveries: u64,
    max_hops: u8,
    ops: u64,
    /// Messages that carried an operation.
    payload_messages: u64,
    /// The operations' vector clocks as encoded, summed.
    vector_clock_bytes: u64,
    /// Bytes of delivering each operation once to every other subscriber.
    minimum: u64,
    pub refused: u64,
    pub snapshots: u64,
    /// Subscription changes made, and refused.
    pub changes: u64,
    pub changes_refused: u64,
}

/// A run's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub convergent: bool,
    /// Why not, per topic.
    pub divergence: Vec<String>,
    pub causal_violations: u64,
    /// Nodes at which every delivery's causal past was compared (the others check their
    /// per-publisher order).
    pub causal_witnesses: u32,
    /// Operations a node applied twice.
    pub double_deliveries: u64,
    /// Payload messages a node received again.
    pub duplicates: u64,
    pub operations: u64,
    pub deliveries: u64,
    pub latency_ms_mean: f64,
    pub latency_ms_p50: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
    pub max_hops: u8,
    pub messages_total: u64,
    pub bytes_total: u64,
    pub bytes_payload: u64,
    pub bytes_metadata: u64,
    /// What the causal metadata would weigh as vector clocks instead of barriers: each
    /// message carrying an operation with a dense vector clock over the topic's publishers
    /// (a varint counter each; the operations' mean size).
    pub bytes_metadata_as_vector_clocks: u64,
    pub bytes_control: u64,
    pub bytes_detector: u64,
    pub bytes_minimum: u64,
    /// bytes_total / bytes_minimum.
    pub bytes_vs_minimum: f64,
    pub publishes_refused: u64,
    pub snapshots_installed: u64,
    /// Subscriptions changed during the run, and changes the protocol refused.
    pub subscription_changes: u64,
    pub subscription_changes_refused: u64,
    pub sim_wall_s: f64,
    /// The latency distribution: (ms, share of deliveries at most that late), up to 64
    /// points.
    pub latency_cdf: Vec<(f64, f64)>,
}

impl Tally {
    pub fn sent(&mut self, sizes: &Sizes) {
        self.messages += 1;
        self.payload_messages += u64::from(sizes.payload > 0);
        self.sizes.payload += sizes.payload;
        self.sizes.metadata += sizes.metadata;
        self.sizes.control += sizes.control;
        self.sizes.detector += sizes.detector;
    }

    pub fn published(
        &mut self,
        topic: TopicId,
        id: MsgId,
        at_us: u64,
        receivers: u32,
        payload_bytes: usize,
        vector_clock_bytes: usize,
    ) {
        self.ops += 1;
        self.vector_clock_bytes += vector_clock_bytes as u64;
        self.published_us.push(((topic, id), at_us));
        // A tag, the topic, the id and the payload's length: what any message carrying the
        // operation needs.
        let header = 1
            + 1
            + varint(u64::from(id.source.0))
            + varint(id.counter)
            + varint(payload_bytes as u64);
        self.minimum += u64::from(receivers) * (payload_bytes + header) as u64;
    }

    /// `node` delivered `id` (the publisher's own delivery is not counted).
    pub fn delivered(
        &mut self,
        metrics: &Metrics,
        node: NodeId,
        topic: TopicId,
        id: MsgId,
        hops: u8,
        at_us: u64,
    ) {
        if node == id.source {
            return;
        }
        let Some(published) = metrics.published_us(topic, id) else {
            return;
        };
        let latency_us = at_us.saturating_sub(published);
        self.deliveries += 1;
        self.latency_sum_us += u128::from(latency_us);
        let bucket = ((latency_us / 1_000) as usize).min(LATENCY_MS_MAX);
        if bucket >= self.histogram.len() {
            self.histogram.resize(bucket + 1, 0);
        }
        self.histogram[bucket] += 1;
        self.max_hops = self.max_hops.max(hops);
    }

    /// Adds another tally's counts to this one (its publishes taken in already).
    pub fn add(&mut self, other: &Tally) {
        self.sizes.payload += other.sizes.payload;
        self.sizes.metadata += other.sizes.metadata;
        self.sizes.control += other.sizes.control;
        self.sizes.detector += other.sizes.detector;
        self.messages += other.messages;
        if other.histogram.len() > self.histogram.len() {
            self.histogram.resize(other.histogram.len(), 0);
        }
        for (mine, theirs) in self.histogram.iter_mut().zip(&other.histogram) {
            *mine += theirs;
        }
        self.latency_sum_us += other.latency_sum_us;
        self.deliveries += other.deliveries;
        self.max_hops = self.max_hops.max(other.max_hops);
        self.ops += other.ops;
        self.payload_messages += other.payload_messages;
        self.vector_clock_bytes += other.vector_clock_bytes;
        self.minimum += other.minimum;
        self.refused += other.refused;
        self.snapshots += other.snapshots;
        self.changes += other.changes;
        self.changes_refused += other.changes_refused;
    }

    fn quantile(&self, q: f64) -> f64 {
        let target = (q * self.deliveries as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (ms, &count) in self.histogram.iter().enumerate() {
            seen += count;
            if seen >= target {
                return ms as f64;
            }
        }
        0.0
    }

    /// Up to 64 points of the latency distribution, evenly spaced in ms.
    fn cdf(&self) -> Vec<(f64, f64)> {
        let last = (self.histogram.iter().rposition(|&c| c > 0)).unwrap_or(0);
        let step = (last / 63).max(1);
        let mut out = Vec::new();
        let mut seen = 0u64;
        for (ms, &count) in self.histogram.iter().enumerate().take(last + 1) {
            seen += count;
            if ms % step == 0 || ms == last {
                out.push((ms as f64, seen as f64 / self.deliveries.max(1) as f64));
            }
        }
        out
    }

    /// The report of the summed tallies.
    #[allow(clippy::too_many_arguments)]
    pub fn report(
        &self,
        causal_witnesses: u32,
        convergent: bool,
        divergence: Vec<String>,
        causal_violations: u64,
        double_deliveries: u64,
        duplicates: u64,
        sim_wall_s: f64,
    ) -> Report {
        let bytes_total = self.sizes.total() as u64;
        let max_ms = (self.histogram.iter().rposition(|&c| c > 0)).unwrap_or(0) as f64;
        Report {
            convergent,
            divergence,
            causal_violations,
            causal_witnesses,
            double_deliveries,
            duplicates,
            operations: self.ops,
            deliveries: self.deliveries,
            latency_ms_mean: if self.deliveries == 0 {
                0.0
            } else {
                self.latency_sum_us as f64 / self.deliveries as f64 / 1_000.0
            },
            latency_ms_p50: self.quantile(0.5),
            latency_ms_p99: self.quantile(0.99),
            latency_ms_max: max_ms,
            max_hops: self.max_hops,
            messages_total: self.messages,
            bytes_total,
            bytes_payload: self.sizes.payload as u64,
            bytes_metadata: self.sizes.metadata as u64,
            bytes_metadata_as_vector_clocks: if self.ops == 0 {
                0
            } else {
                (u128::from(self.payload_messages) * u128::from(self.vector_clock_bytes)
                    / u128::from(self.ops)) as u64
            },
            bytes_control: self.sizes.control as u64,
            bytes_detector: self.sizes.detector as u64,
            bytes_minimum: self.minimum,
            bytes_vs_minimum: if self.minimum == 0 {
                0.0
            } else {
                bytes_total as f64 / self.minimum as f64
            },
            publishes_refused: self.refused,
            snapshots_installed: self.snapshots,
            subscription_changes: self.changes,
            subscription_changes_refused: self.changes_refused,
            sim_wall_s,
            latency_cdf: self.cdf(),
        }
    }
}

fn varint(v: u64) -> usize {
    (64 - v.max(1).leading_zeros() as usize).div_ceil(7)
}
