//! What every host process of a run reads: the cube, which process hosts which nodes and
//! where it listens, the processes' public keys, who subscribes to and publishes on each
//! topic, the workload's rate and length, which node stops or starts late and which
//! subscribes to a topic mid-run. The
//! coordinator writes it as JSON into the run's directory, with one secret key file per
//! process beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tagma_vcube::{NodeId, TopicId};

use crate::error::HostError;

/// A run's plan.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    pub nodes: u32,
    /// Process `p` hosts node ids `ranges[p].0..ranges[p].1` and listens on `addrs[p]`.
    pub ranges: Vec<(u32, u32)>,
    pub addrs: Vec<SocketAddr>,
    /// Each process's Ed25519 public key, hex.
    pub keys: Vec<String>,
    /// Subscribers of each topic (by topic number).
    pub subscribers: Vec<Vec<u32>>,
    /// Publishers of each topic.
    pub publishers: Vec<Vec<u32>>,
    pub ops_per_s: f64,
    /// Milliseconds of publishing, after `warmup_ms`.
    pub warmup_ms: u64,
    pub duration_ms: u64,
    /// Milliseconds after the last publish before the hosts report.
    pub drain_ms: u64,
    /// Bytes of a register operation's value.
    pub value_bytes: usize,
    /// A node that stops (as if its machine died) at this time.
    pub stop: Option<(u32, u64)>,
    /// A node that starts at this time without state.
    pub join: Option<(u32, u64)>,
    /// A node that subscribes to a topic at this time: (node, topic, ms).
    #[serde(default)]
    pub subscribe: Option<(u32, u32, u64)>,
    /// Milliseconds since the Unix epoch at which every host's clock reads 0.
    pub epoch_ms: u64,
    pub seed: u64,
}

impl Plan {
    /// The process hosting `node`.
    pub fn host_of(&self, node: NodeId) -> Option<usize> {
        (self.ranges.iter()).position(|&(a, b)| (a..b).contains(&node.0))
    }

    pub fn subscriptions(&self) -> BTreeMap<TopicId, BTreeSet<NodeId>> {
        (self.subscribers.iter().enumerate())
            .map(|(t, s)| (TopicId(t as u32), s.iter().map(|&n| NodeId(n)).collect()))
            .collect()
    }

    /// Subscribers of each topic once the mid-run subscription is made.
    pub fn final_subscribers(&self) -> Vec<Vec<u32>> {
        let mut subscribers = self.subscribers.clone();
        if let Some((node, topic, _)) = self.subscribe
            && let Some(members) = subscribers.get_mut(topic as usize)
            && !members.contains(&node)
        {
            members.push(node);
        }
        subscribers
    }

    pub fn read(dir: &Path) -> Result<Plan, HostError> {
        let path = dir.join("plan.json");
        let text = std::fs::read_to_string(&path).map_err(|e| HostError::Io {
            path: path.display().to_string(),
            error: e.to_string(),
        })?;
        let plan: Plan = serde_json::from_str(&text).map_err(|e| HostError::Plan(e.to_string()))?;
        plan.check()?;
        Ok(plan)
    }

    /// Checks that the plan holds together.
    pub fn check(&self) -> Result<(), HostError> {
        let bad = |what: &str| Err(HostError::Plan(what.to_string()));
        let p = self.ranges.len();
        if p == 0 || self.addrs.len() != p || self.keys.len() != p {
            return bad("every process needs a node range, an address and a key");
        }
        let mut next = 0;
        for &(a, b) in &self.ranges {
            if a != next || b <= a {
                return bad("node ranges must cover 0..nodes in order, none empty");
            }
            next = b;
        }
        if next != self.nodes {
            return bad("node ranges must cover 0..nodes");
        }
        if self.subscribers.len() != self.publishers.len() || self.subscribers.is_empty() {
            return bad("every topic needs subscribers and publishers");
        }
        for (s, p) in self.subscribers.iter().zip(&self.publishers) {
            if s.iter().chain(p).any(|&n| n >= self.nodes) || p.iter().any(|n| !s.contains(n)) {
                return bad("subscribers and publishers must be nodes, publishers subscribers");
            }
        }
        if let Some((node, topic, _)) = self.subscribe {
            let members = self.subscribers.get(topic as usize);
            if node >= self.nodes || members.is_none_or(|m| m.contains(&node)) {
                return bad("the mid-run subscription needs a node and a topic it is not in");
            }
        }
        if !(self.ops_per_s > 0.0 && self.ops_per_s <= 1_000.0) {
            return bad("ops_per_s must be above 0 and at most 1,000");
        }
        Ok(())
    }
}
