//! The link model every protocol runs on. Each pair of nodes has a fixed propagation delay
//! for the run, drawn uniformly between `latency_min_ms` and `latency_max_ms` from the seed
//! and the pair (a wide-area grid: the VCube-Sync experiments emulated 5–105 ms). A node
//! sends one message at a time: a message leaves after `send_cost_us` of processing and its
//! bytes at the node's uplink bandwidth, behind the messages queued before it, so fan-out
//! costs time; the receiver spends `receive_cost_us` on each message, one at a time, in the
//! order they arrive. A message is lost with probability `loss`. Links are FIFO: a pair's
//! delay is fixed and a sender's departures are in order.

use tagma_vcube::NodeId;

/// The link and processing model.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct LinkModel {
    pub latency_min_ms: f64,
    pub latency_max_ms: f64,
    /// A node's uplink, bytes per second.
    pub bandwidth_bytes_per_s: u64,
    pub send_cost_us: u64,
    pub receive_cost_us: u64,
    /// Probability that a message is lost.
    pub loss: f64,
}

impl Default for LinkModel {
    fn default() -> Self {
        LinkModel {
            latency_min_ms: 5.0,
            latency_max_ms: 105.0,
            bandwidth_bytes_per_s: 12_500_000,
            send_cost_us: 20,
            receive_cost_us: 20,
            loss: 0.0,
        }
    }
}

impl LinkModel {
    /// The propagation delay between `a` and `b` (symmetric), in µs.
    pub fn latency_us(&self, seed: u64, a: NodeId, b: NodeId) -> u64 {
        let (lo, hi) = if a.0 <= b.0 { (a.0, b.0) } else { (b.0, a.0) };
        let mut z =
            seed ^ (u64::from(lo) << 32 | u64::from(hi)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
        let ms = self.latency_min_ms + unit * (self.latency_max_ms - self.latency_min_ms);
        (ms * 1_000.0).round() as u64
    }

    /// µs a message of `bytes` occupies the sender's uplink.
    pub fn transmit_us(&self, bytes: usize) -> u64 {
        self.send_cost_us + (bytes as u64 * 1_000_000).div_ceil(self.bandwidth_bytes_per_s.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_symmetric_fixed_and_within_bounds() {
        let m = LinkModel::default();
        for a in 0..50 {
            for b in 0..50 {
                let d = m.latency_us(7, NodeId(a), NodeId(b));
                assert_eq!(d, m.latency_us(7, NodeId(b), NodeId(a)));
                assert!((5_000..=105_000).contains(&d));
            }
        }
        assert_ne!(
            m.latency_us(7, NodeId(1), NodeId(2)),
            m.latency_us(8, NodeId(1), NodeId(2))
        );
        assert_eq!(m.transmit_us(1_250), 20 + 100);
    }
}
