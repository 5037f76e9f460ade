//! The service's next due time, reported to each replica's core as the node's execution
//! thread reports it (`Input::ServiceDue`): after the replica executed, when the due time
//! changed or a time-only batch was executed. The leader then orders a batch that carries
//! only the agreed time once that time passes, so waits time out and leases end while no
//! client sends anything.

use tagma_core::Input;
use tagma_wire::ConsensusId;

use crate::world::World;

/// What a replica's core last heard of its service's next due time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DueReport {
    /// The due time last reported.
    reported: Option<u64>,
    /// A time-only batch was executed since the last report.
    time_batch_executed: bool,
}

impl DueReport {
    /// What a new core knows: no due time, as if none had been reported (so a service that
    /// never has one, like the key-value store, is never reported on).
    pub(super) fn fresh() -> Self {
        DueReport {
            reported: None,
            time_batch_executed: false,
        }
    }

    pub(super) fn executed_time_batch(&mut self) {
        self.time_batch_executed = true;
    }
}

impl World {
    /// Tells replica `r`'s core the service's next due time, if the core's knowledge of it is
    /// out of date.
    pub(super) fn report_due(&mut self, r: usize) {
        let node = &self.nodes[r];
        if node.crashed || node.dormant || node.left() {
            return;
        }
        let due_ms = node.exec.next_due_ms();
        if node.due.reported == due_ms && !node.due.time_batch_executed {
            return;
        }
        let executed_through = node
            .exec
            .executed_instances()
            .checked_sub(1)
            .map(ConsensusId);
        self.nodes[r].due = DueReport {
            reported: due_ms,
            time_batch_executed: false,
        };
        self.count("service_due_reports");
        self.replica_input(
            r,
            Input::ServiceDue {
                executed_through,
                due_ms,
            },
        );
    }
}
