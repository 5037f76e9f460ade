//! What a run measured: bytes and messages by class, delivery latency (from the publish to
//! the delivery at each subscriber, after causal buffering) as a millisecond histogram,
//! hops, duplicates, and the bytes the cheapest possible dissemination would have sent —
//! every operation once to every other subscriber, with nothing but its identity.

use std::collections::HashMap;

use serde::Serialize;
use tagma_vcube::{MsgId, NodeId, TopicId};

use crate::proto::Sizes;

/// Latencies above this many ms fall into the last bucket.
const LATENCY_MS_MAX: usize = 600_000;

/// Counters filled during a run.
pub struct Metrics {
    sizes: Sizes,
    messages: u64,
    published_us: HashMap<(TopicId, MsgId), u64>,
    histogram: Vec<u64>,
    latency_sum_us: u128,
    deliveries: u64,
    max_hops: u8,
    ops: u64,
    /// Bytes of delivering each operation once to every other subscriber.
    minimum: u64,
    pub refused: u64,
    pub snapshots: u64,
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
    pub bytes_control: u64,
    pub bytes_detector: u64,
    pub bytes_minimum: u64,
    /// bytes_total / bytes_minimum.
    pub bytes_vs_minimum: f64,
    pub publishes_refused: u64,
    pub snapshots_installed: u64,
    pub sim_wall_s: f64,
    /// The latency distribution: (ms, share of deliveries at most that late), up to 64
    /// points.
    pub latency_cdf: Vec<(f64, f64)>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            sizes: Sizes::default(),
            messages: 0,
            published_us: HashMap::new(),
            histogram: vec![0; LATENCY_MS_MAX + 1],
            latency_sum_us: 0,
            deliveries: 0,
            max_hops: 0,
            ops: 0,
            minimum: 0,
            refused: 0,
            snapshots: 0,
        }
    }

    pub fn sent(&mut self, sizes: &Sizes) {
        self.messages += 1;
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
    ) {
        self.ops += 1;
        self.published_us.insert((topic, id), at_us);
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
    pub fn delivered(&mut self, node: NodeId, topic: TopicId, id: MsgId, hops: u8, at_us: u64) {
        if node == id.source {
            return;
        }
        let Some(&published) = self.published_us.get(&(topic, id)) else {
            return;
        };
        let latency_us = at_us.saturating_sub(published);
        self.deliveries += 1;
        self.latency_sum_us += u128::from(latency_us);
        self.histogram[((latency_us / 1_000) as usize).min(LATENCY_MS_MAX)] += 1;
        self.max_hops = self.max_hops.max(hops);
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
            sim_wall_s,
            latency_cdf: self.cdf(),
        }
    }
}

fn varint(v: u64) -> usize {
    (64 - v.max(1).leading_zeros() as usize).div_ceil(7)
}
