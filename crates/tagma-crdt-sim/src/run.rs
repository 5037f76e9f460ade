//! Runs one protocol on a workload: builds its nodes and the engine, returns the report.

use tagma_vcube::{Cube, Node, NodeConfig, NodeId};

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
            let subscriptions = plan.subscriptions.clone();
            // Check the configuration once, before building thousands of nodes with it.
            Node::new(
                cube,
                NodeId(0),
                config,
                &subscriptions,
                Kernel::new(NodeId(0), value_bytes),
                false,
                0,
            )?;
            let factory = move |id, joining, now_ms| {
                VcubeNode(
                    Node::new(
                        cube,
                        id,
                        config,
                        &subscriptions,
                        Kernel::new(id, value_bytes),
                        joining,
                        now_ms,
                    )
                    .expect("checked above"),
                )
            };
            Ok(Sim::with_threads(workload.clone(), Box::new(factory), threads).run())
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
