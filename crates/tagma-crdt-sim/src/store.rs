//! The replicas the simulated nodes keep: per topic, a digest of the set of operations
//! applied (order-insensitive, so replicas that applied the same operations have equal
//! digests) and their count. It is the state a joining node's snapshot carries.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_vcube::{MsgId, Store, TopicId};

/// One node's replicas.
#[derive(Clone, Debug, Default)]
pub struct OpSetStore {
    topics: BTreeMap<TopicId, [u64; 5]>,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl OpSetStore {
    pub fn digest(&self, topic: TopicId) -> [u8; 32] {
        let lanes = self.topics.get(&topic).copied().unwrap_or_default();
        let mut out = [0u8; 32];
        for (k, lane) in lanes[..4].iter().enumerate() {
            out[k * 8..k * 8 + 8].copy_from_slice(&(lane ^ lanes[4]).to_le_bytes());
        }
        out
    }

    pub fn applied(&self, topic: TopicId) -> u64 {
        self.topics.get(&topic).map_or(0, |l| l[4])
    }
}

impl Store for OpSetStore {
    fn apply(&mut self, topic: TopicId, id: MsgId, _payload: &Bytes) {
        let lanes = self.topics.entry(topic).or_default();
        let base = u64::from(id.source.0) << 40 ^ id.counter;
        for (k, lane) in lanes[..4].iter_mut().enumerate() {
            *lane = lane.wrapping_add(mix(base.wrapping_add(k as u64 * 0x9e37_79b9_7f4a_7c15)));
        }
        lanes[4] += 1;
    }

    fn snapshot(&self, topic: TopicId) -> Bytes {
        let lanes = self.topics.get(&topic).copied().unwrap_or_default();
        Bytes::from(
            lanes
                .iter()
                .flat_map(|l| l.to_le_bytes())
                .collect::<Vec<u8>>(),
        )
    }

    fn install(&mut self, topic: TopicId, state: &Bytes) -> Result<(), String> {
        if state.len() != 40 {
            return Err(format!("a snapshot is 40 bytes, not {}", state.len()));
        }
        let mut lanes = [0u64; 5];
        for (k, chunk) in state.chunks(8).enumerate() {
            lanes[k] = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        }
        self.topics.insert(topic, lanes);
        Ok(())
    }
}
