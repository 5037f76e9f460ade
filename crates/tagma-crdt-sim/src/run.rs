//! Runs one protocol on a workload: builds its nodes and the engine, returns the report.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use tagma_vcube::{Cube, Node, NodeConfig, NodeId, Published, Share, TopicId};

use crate::flood::FloodNode;
use crate::overlay::overlay;
use crate::plumtree::{PlumtreeConfig, PlumtreeNode};

use crate::engine::Sim;
use crate::error::SimError;
use crate::metrics::Report;
use crate::vcube::VcubeNode;
use crate::workload::Workload;
use tagma_vcube::Kernel;

/// The protocols the simulator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Vcube,
    Plumtree,
    Flood,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Vcube => "vcube",
            Protocol::Plumtree => "plumtree",
            Protocol::Flood => "flood",
        }
    }
}

/// Runs VCube-Sync on `workload`, its nodes sharing messages as `P`, each publishing into
/// `room(node)`.
fn run_vcube<'r, P>(
    workload: &Workload,
    config: NodeConfig,
    threads: usize,
    room: impl Fn(NodeId) -> P::Room + Send + Sync + 'r,
) -> Report
where
    P: Share + Send + Sync + 'r,
    P::Room: Send,
{
    let cube = Cube::new(workload.nodes).expect("checked by the caller");
    let subscriptions = workload.plan().subscriptions;
    let value_bytes = workload.payload_bytes;
    let factory = move |id: NodeId, joining, now_ms| {
        let store = Kernel::new(id, value_bytes);
        let node = Node::with_room(
            cube,
            id,
            config,
            &subscriptions,
            store,
            joining,
            now_ms,
            room(id),
        );
        VcubeNode::<P>(node.expect("checked by the caller"))
    };
    Sim::with_threads(workload.clone(), Box::new(factory), threads).run()
}

/// Storage for the messages VCube-Sync's nodes publish in a run, freed when the run ends,
/// so that their copies share them without a reference count ([`tagma_vcube::Share`]):
/// every node holds copies of the same messages, and the simulator's threads would
/// otherwise pass the counts between their processors' caches on nearly every copy. Each
/// node has a slot for every message it can publish in the run (the workload's most per
/// topic, for as many topics as any node publishes on, and one for a subscription change).
struct Pins {
    slots: Vec<OnceLock<Published>>,
    per_node: usize,
}

/// The most a run's pinned messages may hold, at their payload's size and a 1 KiB barrier
/// each; beyond it, a run's messages are counted (freed with their last copies).
const PINNED_BYTES_MAX: usize = 1 << 30;

impl Pins {
    /// The slots of `workload`'s run, or `None` if they would exceed [`PINNED_BYTES_MAX`].
    fn for_run(workload: &Workload, publishers: &BTreeMap<TopicId, Vec<NodeId>>) -> Option<Pins> {
        let nodes = workload.nodes as usize;
        let mut topics_of = vec![0usize; nodes];
        for node in publishers.values().flatten() {
            topics_of[node.0 as usize] += 1;
        }
        let most_topics = topics_of.into_iter().max().unwrap_or(0);
        let per_topic = usize::try_from(workload.publishes_max()).unwrap_or(usize::MAX);
        let per_node = most_topics.saturating_mul(per_topic).saturating_add(1);
        let bytes = (nodes.saturating_mul(per_node)).saturating_mul(workload.payload_bytes + 1_024);
        (bytes <= PINNED_BYTES_MAX).then(|| Pins {
            slots: (0..nodes * per_node).map(|_| OnceLock::new()).collect(),
            per_node,
        })
    }

    fn of(&self, node: NodeId) -> &[OnceLock<Published>] {
        let first = node.0 as usize * self.per_node;
        &self.slots[first..first + self.per_node]
    }
}

/// Runs `protocol` on `workload`, on as many threads as the machine has.
pub fn run(
    protocol: Protocol,
    workload: &Workload,
    config: NodeConfig,
) -> Result<Report, SimError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    run_on(protocol, workload, config, threads)
}

/// Runs `protocol` on `workload` on `threads` threads; the report is the same whatever the
/// number of threads, but for its wall time.
pub fn run_on(
    protocol: Protocol,
    workload: &Workload,
    config: NodeConfig,
    threads: usize,
) -> Result<Report, SimError> {
    workload.check()?;
    let cube = Cube::new(workload.nodes)?;
    let plan = workload.plan();
    let value_bytes = workload.payload_bytes;
    match protocol {
        Protocol::Vcube => {
            // Check the configuration once, before building thousands of nodes with it.
            Node::new(
                cube,
                NodeId(0),
                config,
                &plan.subscriptions,
                Kernel::new(NodeId(0), value_bytes),
                false,
                0,
            )?;
            // Messages pinned for the run when its slots fit in memory, counted otherwise;
            // the report is the same.
            let report = match Pins::for_run(workload, &plan.publishers) {
                Some(pins) => run_vcube::<&Published>(workload, config, threads, |id| pins.of(id)),
                None => run_vcube::<Arc<Published>>(workload, config, threads, |_| ()),
            };
            Ok(report)
        }
        Protocol::Plumtree | Protocol::Flood => {
            if workload.join_pct > 0.0 {
                return Err(SimError::Workload(format!(
                    "late joins need state transfer, which only vcube has here: leave out \
                     --join-pct with --protocol {}",
                    protocol.name()
                )));
            }
            if workload.churn_pct > 0.0 {
                return Err(SimError::Workload(format!(
                    "subscription changes at run time need state transfer and a shared view \
                     of the subscribers, which only vcube has here: leave out --churn-pct \
                     with --protocol {}",
                    protocol.name()
                )));
            }
            let neighbours = overlay(workload.nodes, workload.seed);
            let subscriptions = plan.subscriptions.clone();
            if protocol == Protocol::Flood {
                let factory = move |id: NodeId, _joining, _now_ms| {
                    FloodNode::new(
                        id,
                        neighbours[id.0 as usize].clone(),
                        &subscriptions,
                        value_bytes,
                    )
                };
                Ok(Sim::with_threads(workload.clone(), Box::new(factory), threads).run())
            } else {
                let factory = move |id: NodeId, _joining, _now_ms| {
                    PlumtreeNode::new(
                        id,
                        neighbours[id.0 as usize].clone(),
                        &subscriptions,
                        PlumtreeConfig::default(),
                        value_bytes,
                    )
                };
                Ok(Sim::with_threads(workload.clone(), Box::new(factory), threads).run())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_and_counted_messages_give_the_same_report() {
        let workload = Workload {
            nodes: 32,
            topics: 2,
            publishers: 16,
            duration_s: 4.0,
            drain_s: 20.0,
            crash_pct: 10.0,
            join_pct: 10.0,
            churn_pct: 10.0,
            link: crate::link::LinkModel {
                loss: 0.05,
                ..Default::default()
            },
            ..Workload::default()
        };
        let plan = workload.plan();
        let pins = Pins::for_run(&workload, &plan.publishers).expect("a small run fits");
        let config = NodeConfig::default();
        let pinned = run_vcube::<&Published>(&workload, config, 2, |id| pins.of(id));
        let counted = run_vcube::<Arc<Published>>(&workload, config, 2, |_| ());
        assert!(pinned.convergent && pinned.operations > 0, "{pinned:?}");
        assert_eq!(
            pinned.publishes_refused, counted.publishes_refused,
            "{counted:?}"
        );
        let without_wall = |r: &Report| Report {
            sim_wall_s: 0.0,
            ..r.clone()
        };
        assert_eq!(
            format!("{:?}", without_wall(&pinned)),
            format!("{:?}", without_wall(&counted))
        );
        // Every slot a publisher used holds a message; no node ran out of them.
        assert!(pins.slots.iter().any(|s| s.get().is_some()));
    }

    #[test]
    fn a_run_too_large_to_pin_counts_its_messages() {
        let workload = Workload {
            nodes: 1024,
            publishers: 1024,
            duration_s: 3_600.0,
            ..Workload::default()
        };
        assert!(Pins::for_run(&workload, &workload.plan().publishers).is_none());
    }
}
