//! What a run does: how many nodes, who subscribes to and publishes on which topic, how
//! fast, for how long, which faults strike (crashes mid-run, late joins, loss) and which
//! nodes change a subscription during the run. Every
//! choice is drawn from the seed, so a run is reproducible and every protocol compared in
//! one invocation faces the same plan.

use std::collections::{BTreeMap, BTreeSet};

use tagma_vcube::{NodeId, TopicId};

use crate::error::SimError;
use crate::link::LinkModel;

/// A run's workload and faults.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Workload {
    pub nodes: u32,
    pub topics: u32,
    /// Share of the nodes subscribed to each topic.
    pub subscribers_pct: f64,
    /// Publishers per topic (drawn among its subscribers).
    pub publishers: u32,
    /// Operations each publisher publishes per second.
    pub ops_per_s: f64,
    pub duration_s: f64,
    /// Bytes of each operation's value.
    pub payload_bytes: usize,
    /// Share of the nodes that crash at half the run.
    pub crash_pct: f64,
    /// Share of the subscribers that start at a third of the run, without state.
    pub join_pct: f64,
    /// Share of the nodes that change a subscription at two fifths of the run: a subscriber
    /// that does not publish on the topic unsubscribes, any other node subscribes.
    pub churn_pct: f64,
    /// Simulated time after the last publish for repairs to finish.
    pub drain_s: f64,
    pub link: LinkModel,
    pub seed: u64,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            nodes: 200,
            topics: 1,
            subscribers_pct: 100.0,
            publishers: 1,
            ops_per_s: 1.0,
            duration_s: 60.0,
            payload_bytes: 1_024,
            crash_pct: 0.0,
            join_pct: 0.0,
            churn_pct: 0.0,
            drain_s: 30.0,
            link: LinkModel::default(),
            seed: 1,
        }
    }
}

/// The plan drawn from a workload.
#[derive(Clone, Debug)]
pub struct Plan {
    pub subscriptions: BTreeMap<TopicId, BTreeSet<NodeId>>,
    pub publishers: BTreeMap<TopicId, Vec<NodeId>>,
    /// Nodes that crash at half the run.
    pub crashes: BTreeSet<NodeId>,
    /// Nodes that join at a third of the run.
    pub joins: BTreeSet<NodeId>,
    /// Nodes that subscribe to or unsubscribe from a topic at two fifths of the run.
    pub changes: BTreeMap<NodeId, TopicId>,
}

impl Plan {
    /// Who subscribes to each topic once the changes are made.
    pub fn final_subscriptions(&self) -> BTreeMap<TopicId, BTreeSet<NodeId>> {
        let mut subscriptions = self.subscriptions.clone();
        for (node, topic) in &self.changes {
            let members = subscriptions.entry(*topic).or_default();
            if !members.remove(node) {
                members.insert(*node);
            }
        }
        subscriptions
    }
}

impl Workload {
    pub fn check(&self) -> Result<(), SimError> {
        let bad = |what: &str| Err(SimError::Workload(what.to_string()));
        if self.nodes < 2 || self.nodes > 1 << 16 {
            return bad("--nodes must be 2 to 65,536");
        }
        if self.topics == 0 || self.topics > 64 {
            return bad("--topics must be 1 to 64");
        }
        let pct = |p: f64| (0.0..=100.0).contains(&p);
        if !pct(self.subscribers_pct)
            || !pct(self.crash_pct)
            || !pct(self.join_pct)
            || !pct(self.churn_pct)
        {
            return bad("percentages must be 0 to 100");
        }
        if !(self.ops_per_s > 0.0 && self.ops_per_s <= 10_000.0) {
            return bad("--ops-per-sec must be above 0 and at most 10,000");
        }
        let duration_ok = self.duration_s > 0.0 && self.duration_s <= 3_600.0;
        if !duration_ok || !(0.0..=3_600.0).contains(&self.drain_s) {
            return bad(
                "--duration-s must be above 0 and at most 3,600 (and the drain at most 3,600)",
            );
        }
        let link = &self.link;
        let least_delay_ms = link.latency_min_ms.min(link.latency_max_ms)
            + (link.send_cost_us + link.receive_cost_us) as f64 / 1_000.0;
        if !(least_delay_ms >= 0.001 && link.latency_min_ms >= 0.0) {
            return bad(
                "the link must take at least 1 µs from sending a message to handling it \
                 (latency, --send-cost-us or --receive-cost-us)",
            );
        }
        if !(0.0..1.0).contains(&self.link.loss) {
            return bad("--loss-pct must be 0 to below 100");
        }
        if self.publishers == 0 || self.publishers > self.subscribers() {
            return bad("--publishers must be 1 to the number of subscribers of a topic");
        }
        if self.payload_bytes == 0 || self.payload_bytes > 60 * 1024 {
            return bad("the payload must be 1 to 61,440 bytes");
        }
        Ok(())
    }

    /// Subscribers of each topic (at least 2).
    pub fn subscribers(&self) -> u32 {
        ((f64::from(self.nodes) * self.subscribers_pct / 100.0).round() as u32).clamp(2, self.nodes)
    }

    /// Draws who subscribes, publishes, crashes and joins.
    pub fn plan(&self) -> Plan {
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let all: Vec<NodeId> = (0..self.nodes).map(NodeId).collect();
        let mut subscriptions = BTreeMap::new();
        let mut publishers = BTreeMap::new();
        for t in 0..self.topics {
            let mut members = all.clone();
            rng.shuffle(&mut members);
            members.truncate(self.subscribers() as usize);
            let pubs: Vec<NodeId> = members[..self.publishers as usize].to_vec();
            subscriptions.insert(TopicId(t), members.into_iter().collect());
            publishers.insert(TopicId(t), pubs);
        }
        let count = |pct: f64| {
            ((f64::from(self.nodes) * pct / 100.0).round() as usize).min(self.nodes as usize)
        };
        let mut shuffled = all.clone();
        rng.shuffle(&mut shuffled);
        let crashes: BTreeSet<NodeId> = shuffled[..count(self.crash_pct)].iter().copied().collect();
        let joins: BTreeSet<NodeId> = (shuffled[count(self.crash_pct)..].iter())
            .take(count(self.join_pct))
            .copied()
            .collect();
        // The k-th changing node takes topic k mod topics, unless it publishes there.
        let mut changes = BTreeMap::new();
        let unchanged = shuffled[count(self.crash_pct) + joins.len()..].iter();
        for (k, node) in unchanged.take(count(self.churn_pct)).enumerate() {
            let topic = TopicId(k as u32 % self.topics);
            if !publishers[&topic].contains(node) {
                changes.insert(*node, topic);
            }
        }
        Plan {
            subscriptions,
            publishers,
            crashes,
            joins,
            changes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_changes_toggle_members_and_leave_publishers_alone() {
        let w = Workload {
            nodes: 40,
            topics: 3,
            subscribers_pct: 50.0,
            publishers: 4,
            churn_pct: 50.0,
            ..Workload::default()
        };
        let plan = w.plan();
        assert!(plan.changes.len() >= 10, "{:?}", plan.changes);
        let after = plan.final_subscriptions();
        for (node, topic) in &plan.changes {
            assert!(!plan.publishers[topic].contains(node));
            let before = plan.subscriptions[topic].contains(node);
            assert_ne!(before, after[topic].contains(node), "node {node:?}");
        }
        for (topic, members) in &after {
            let changed = |n: &NodeId| plan.changes.get(n) == Some(topic);
            let kept = |n: &&NodeId| !changed(n);
            assert!(
                members
                    .iter()
                    .filter(kept)
                    .eq(plan.subscriptions[topic].iter().filter(kept))
            );
        }
        assert_eq!(
            Workload {
                churn_pct: 0.0,
                ..w
            }
            .plan()
            .changes
            .len(),
            0
        );
    }
}
