//! Helpers shared by the multi-process test files (each file is its own test binary and uses
//! a subset).
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use tagma_cluster::workload::WorkloadReport;
use tagma_cluster::{LocalCluster, digests_equal};
use tagma_wire::{ReplicaId, StateInfo};

pub const READY: Duration = Duration::from_secs(30);

pub fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tagma"))
}

pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The workload's history is linearizable per key and no operation failed (`what` names the
/// guarantee in the messages); the replicas' logs are printed first when it is not.
pub fn assert_history_clean(c: &LocalCluster, report: &WorkloadReport, what: &str) {
    if !report.violations.is_empty() || report.errors > 0 {
        c.dump_logs();
    }
    assert!(
        report.violations.is_empty(),
        "{what}: linearizability violations: {:?}",
        &report.violations[..report.violations.len().min(5)]
    );
    assert_eq!(
        report.errors, 0,
        "{what}: failed operations, first: {:?}",
        report.first_error
    );
}

/// The `live` replicas converge (same position) within `timeout` and hold equal states.
pub fn assert_converged(c: &LocalCluster, live: &[ReplicaId], timeout: Duration) -> Vec<StateInfo> {
    let checker = c.proxy(READY).expect("connect the state checker");
    let states = c
        .converged_states(&checker, live, timeout)
        .unwrap_or_else(|e| {
            c.dump_logs();
            panic!("{e}")
        });
    assert!(digests_equal(&states), "digests differ: {states:?}");
    states
}
