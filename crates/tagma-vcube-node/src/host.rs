//! One host process: it runs the nodes of its range (`tagma_vcube::Node` over the
//! replication kernel) in one loop thread, fed by its peers' frames and by time, publishes
//! their share of the workload, stops and starts nodes as the plan says, and at the end
//! writes what it saw — each node's CRDT digests and delivered counters, every publish (with
//! the publisher's delivered counters then, for the causal check) and every delivery with
//! its time — for the coordinator.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tagma_crypto::IdentityKey;
use tagma_vcube::{
    Action, Cube, Input, Kernel, Limits, MEMBERSHIP, Message, Node, NodeConfig, NodeId, TopicId,
};
use tagma_wire::PublicKey;

use crate::error::HostError;
use crate::net::{Directory, Links, listen};
use crate::plan::Plan;

/// An operation published.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Published {
    pub topic: u32,
    pub source: u32,
    pub counter: u64,
    pub at_us: u64,
    /// The publisher's delivered counters on the topic once it published (its own included).
    pub clock: Vec<(u32, u64)>,
}

/// A node's replica of one topic at the end.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TopicState {
    pub topic: u32,
    /// The CRDT's digest, hex.
    pub digest: String,
    /// The highest counter delivered from each publisher.
    pub delivered: Vec<(u32, u64)>,
}

/// What one node saw.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeReport {
    pub id: u32,
    /// Running at the end.
    pub alive: bool,
    /// Each topic it subscribes to.
    pub topics: Vec<TopicState>,
    /// Deliveries in order: (topic, source, counter, µs).
    pub deliveries: Vec<(u32, u32, u64, u64)>,
    /// Snapshots installed: (topic, the counters each covered).
    pub snapshots: Vec<(u32, Vec<(u32, u64)>)>,
    pub duplicates: u64,
    pub rejected: u64,
}

/// What a host writes at the end.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostReport {
    pub index: usize,
    pub nodes: Vec<NodeReport>,
    pub published: Vec<Published>,
    /// Bytes between processes (message bytes; frame headers and MACs not counted).
    pub bytes_sent: u64,
    pub frames_sent: u64,
    pub frames_dropped: u64,
    /// Bytes of every message the nodes sent, within the process or not.
    pub message_bytes: u64,
    pub messages: u64,
}

fn now_ms(epoch_ms: u64) -> u64 {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (unix.as_millis() as u64).saturating_sub(epoch_ms)
}

fn now_us(epoch_ms: u64) -> u64 {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (unix.as_micros() as u64).saturating_sub(epoch_ms * 1_000)
}

/// The node settings for a run on one machine: a faster failure detector and repair than
/// the wide-area defaults.
pub fn demo_config() -> NodeConfig {
    let mut c = NodeConfig::default();
    c.detector.round_ms = 500;
    c.detector.test_timeout_ms = 300;
    c.retransmit_ms = 200;
    c.sync_ms = 1_000;
    c.sync_grace_ms = 1_000;
    c.fetch_after_ms = 500;
    c.snapshot_retry_ms = 500;
    c
}

struct Hosted {
    node: Option<Node<Kernel>>,
    report: NodeReport,
    next_publish_ms: u64,
    draws: u64,
}

/// Runs host `index` of the plan in `dir` to the end of the run; writes
/// `dir/report-<index>.json`.
pub fn run(dir: &Path, index: usize) -> Result<HostReport, HostError> {
    let plan = Plan::read(dir)?;
    if index >= plan.ranges.len() {
        return Err(HostError::Plan(format!("no process {index} in the plan")));
    }
    let seed_path = dir.join(format!("process-{index}.key"));
    let seed_hex = std::fs::read_to_string(&seed_path).map_err(|e| HostError::Io {
        path: seed_path.display().to_string(),
        error: e.to_string(),
    })?;
    let seed: [u8; 32] = hex::decode(seed_hex.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| HostError::Plan("a process key file holds 32 bytes in hex".into()))?;
    let key = Arc::new(IdentityKey::from_seed(seed));
    let keys: Vec<PublicKey> = (plan.keys.iter())
        .map(|k| {
            hex::decode(k)
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .map(PublicKey)
                .ok_or_else(|| HostError::Plan("a public key is 32 bytes in hex".into()))
        })
        .collect::<Result<_, _>>()?;
    let (tx, rx) = crossbeam_channel::bounded(65_536);
    listen(
        plan.addrs[index],
        index,
        key.clone(),
        Arc::new(Directory(keys.clone())),
        tx,
    )?;
    let mut links = Links::new(index, key, plan.addrs.clone(), keys);
    let cube = Cube::new(plan.nodes)?;
    let subscriptions = plan.subscriptions();
    let config = demo_config();
    let (first, end) = plan.ranges[index];
    let late = plan.join.map(|(n, _)| n);
    let mut hosted: Vec<Hosted> = (first..end)
        .map(|id| {
            let node = if Some(id) == late {
                None
            } else {
                Some(Node::new(
                    cube,
                    NodeId(id),
                    config,
                    &subscriptions,
                    Kernel::new(NodeId(id), plan.value_bytes),
                    false,
                    0,
                )?)
            };
            Ok(Hosted {
                node,
                report: NodeReport {
                    id,
                    alive: false,
                    topics: Vec::new(),
                    deliveries: Vec::new(),
                    snapshots: Vec::new(),
                    duplicates: 0,
                    rejected: 0,
                },
                next_publish_ms: plan.warmup_ms
                    + (u64::from(id) * 7_919) % (1_000.0 / plan.ops_per_s) as u64,
                draws: plan.seed ^ u64::from(id) << 20,
            })
        })
        .collect::<Result<_, HostError>>()?;
    let mut published = Vec::new();
    let interval_ms = (1_000.0 / plan.ops_per_s).max(1.0) as u64;
    let end_publish_ms = plan.warmup_ms + plan.duration_ms;
    let end_ms = end_publish_ms + plan.drain_ms;
    let limits = Limits::default();
    let mut local: VecDeque<(NodeId, NodeId, Message)> = VecDeque::new();
    let (mut message_bytes, mut messages) = (0u64, 0u64);
    let mut stopped = false;
    let mut joined = false;
    let mut subscribed = false;
    loop {
        let t = now_ms(plan.epoch_ms);
        if t >= end_ms {
            break;
        }
        // Frames from peers, for up to 5 ms.
        if let Ok(first) = rx.recv_timeout(Duration::from_millis(5)) {
            for inbound in std::iter::once(first).chain(rx.try_iter().take(4_096)) {
                let Some(h) = slot(&mut hosted, first_id(&plan, index), inbound.to) else {
                    continue;
                };
                let Ok(message) = Message::decode(&inbound.message, &limits) else {
                    h.report.rejected += 1;
                    continue;
                };
                if let Some(node) = h.node.as_mut() {
                    node.handle(
                        now_ms(plan.epoch_ms),
                        Input::Message {
                            from: inbound.from,
                            message,
                        },
                    );
                }
            }
        }
        let t = now_ms(plan.epoch_ms);
        if let Some((victim, at)) = plan.stop
            && !stopped
            && t >= at
        {
            stopped = true;
            if let Some(h) = slot(&mut hosted, first, NodeId(victim)) {
                h.node = None;
            }
        }
        if let Some((late, at)) = plan.join
            && !joined
            && t >= at
        {
            joined = true;
            if let Some(h) = slot(&mut hosted, first, NodeId(late)) {
                h.node = Some(Node::new(
                    cube,
                    NodeId(late),
                    config,
                    &subscriptions,
                    Kernel::new(NodeId(late), plan.value_bytes),
                    true,
                    t,
                )?);
            }
        }
        if let Some((node, topic, at)) = plan.subscribe
            && !subscribed
            && t >= at
        {
            subscribed = true;
            if let Some(node) = slot(&mut hosted, first, NodeId(node)).and_then(|h| h.node.as_mut())
            {
                node.subscribe(t, TopicId(topic))?;
            }
        }
        for h in &mut hosted {
            let Some(node) = h.node.as_mut() else {
                continue;
            };
            if node.next_timeout_ms() <= t {
                node.handle(t, Input::Tick);
            }
            while t < end_publish_ms && t >= h.next_publish_ms {
                h.next_publish_ms += interval_ms;
                for (topic, publishers) in plan.publishers.iter().enumerate() {
                    if !publishers.contains(&h.report.id) {
                        continue;
                    }
                    let topic = TopicId(topic as u32);
                    h.draws = h
                        .draws
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let op = node.store().operation(topic, h.draws >> 11);
                    if let Ok(id) = node.publish(t, topic, op) {
                        published.push(Published {
                            topic: topic.0,
                            source: id.source.0,
                            counter: id.counter,
                            at_us: now_us(plan.epoch_ms),
                            clock: (node.delivered(topic).unwrap_or_default().into_iter())
                                .map(|(n, c)| (n.0, c))
                                .collect(),
                        });
                    }
                }
            }
        }
        // Carry out every node's actions; messages between local nodes go round again.
        loop {
            for h in &mut hosted {
                let Some(node) = h.node.as_mut() else {
                    continue;
                };
                let me = node.id();
                while let Some(action) = node.poll_action() {
                    if let Action::Send { message, .. } = &action {
                        message_bytes += message.encoded_len() as u64;
                        messages += 1;
                    }
                    match action {
                        Action::Send { to, message } => match plan.host_of(to) {
                            Some(p) if p == index => local.push_back((to, me, message)),
                            Some(p) => links.push(p, to, me, &message.encode()),
                            None => {}
                        },
                        Action::Deliver { topic, id, .. } => h.report.deliveries.push((
                            topic.0,
                            id.source.0,
                            id.counter,
                            now_us(plan.epoch_ms),
                        )),
                        Action::Installed { topic, .. } if topic == MEMBERSHIP => {}
                        Action::Installed { topic, delivered } => h.report.snapshots.push((
                            topic.0,
                            delivered.into_iter().map(|(n, c)| (n.0, c)).collect(),
                        )),
                    }
                }
            }
            if local.is_empty() {
                break;
            }
            let t = now_ms(plan.epoch_ms);
            while let Some((to, from, message)) = local.pop_front() {
                if let Some(node) = slot(&mut hosted, first, to).and_then(|h| h.node.as_mut()) {
                    node.handle(t, Input::Message { from, message });
                }
            }
        }
        links.flush();
    }
    for h in &mut hosted {
        if let Some(node) = h.node.as_ref() {
            h.report.alive = true;
            h.report.duplicates = node.stats().duplicates;
            h.report.rejected += node.stats().rejected;
            for topic in subscriptions.keys() {
                // The topics it subscribes to at the end.
                if let Some(delivered) = node.delivered(*topic) {
                    h.report.topics.push(TopicState {
                        topic: topic.0,
                        digest: hex::encode(node.store().digest(*topic)),
                        delivered: delivered.into_iter().map(|(n, c)| (n.0, c)).collect(),
                    });
                }
            }
        }
    }
    let report = HostReport {
        index,
        nodes: hosted.into_iter().map(|h| h.report).collect(),
        published,
        bytes_sent: links.bytes_sent,
        frames_sent: links.frames_sent,
        frames_dropped: links.frames_dropped,
        message_bytes,
        messages,
    };
    let path = dir.join(format!("report-{index}.json"));
    let text = serde_json::to_string(&report).map_err(|e| HostError::Plan(e.to_string()))?;
    std::fs::write(&path, text).map_err(|e| HostError::Io {
        path: path.display().to_string(),
        error: e.to_string(),
    })?;
    Ok(report)
}

fn first_id(plan: &Plan, index: usize) -> u32 {
    plan.ranges[index].0
}

fn slot(hosted: &mut [Hosted], first: u32, id: NodeId) -> Option<&mut Hosted> {
    id.0.checked_sub(first)
        .and_then(|i| hosted.get_mut(i as usize))
}
