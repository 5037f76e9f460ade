//! Helpers shared by the multi-process test files (each file is its own test binary and uses
//! a subset).
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tagma_client::Proxy;
use tagma_cluster::workload::{self, WorkloadOptions, WorkloadReport};
use tagma_cluster::{LocalCluster, digests_equal};
use tagma_crypto::IdentityKey;
use tagma_wire::{ReplicaId, StateInfo, ViewId};

pub const READY: Duration = Duration::from_secs(30);

pub fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tagma"))
}

/// Runs `tagma ARGS` (a command given `--json`): it must exit 0 and print one JSON object.
pub fn tagma_json(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(exe())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run tagma {args:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tagma {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON object")
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

/// Adds replica `id` to the cluster in view `from`: prepares its key, starts it with
/// `tagma replica --join` (it waits for the view that adds it), orders the signed change
/// and waits until the joiner has fetched its state. Returns its index and the new view.
pub fn add_replica(
    c: &mut LocalCluster,
    admin: &IdentityKey,
    proxy: &Proxy,
    id: u32,
    from: ViewId,
) -> (usize, tagma_wire::View) {
    use tagma_wire::{ReconfigureOutcome, ViewMember, ViewOp};
    let (joiner, key_path) = c
        .prepare_joiner(ReplicaId(id))
        .expect("a key for the joiner");
    let key = IdentityKey::read_file(&key_path).expect("its key").public();
    let addr = c.cfg.replicas[joiner].addr.to_string();
    c.start_joining(joiner).expect("start the joiner");
    let add = ViewOp::Add(ViewMember {
        id: ReplicaId(id),
        addr,
        key,
    });
    let outcome = proxy
        .reconfigure(&tagma_core::view::sign_change(admin, from, vec![add]))
        .expect("the change is ordered");
    let ReconfigureOutcome::Installed(view) = outcome else {
        panic!("adding replica {id} was refused: {outcome:?}");
    };
    assert_eq!(view.id, ViewId(from.0 + 1));
    assert!(view.members.iter().any(|m| m.id == ReplicaId(id)));
    c.wait_ready(joiner, Duration::from_secs(30))
        .expect("the joiner serves metrics");
    wait_until(
        &format!("replica {id} fetched its state"),
        Duration::from_secs(60),
        || c.metric(joiner, "tagma_state_transfer_ms") > 0.0,
    );
    (joiner, view)
}

/// Every replica of `c` (joiners included) reports view `id` and the same digest.
pub fn all_in_view(c: &LocalCluster, id: u32) -> Vec<tagma_wire::StateInfo> {
    let all: Vec<ReplicaId> = c.cfg.replicas.iter().map(|r| r.id).collect();
    let states = assert_converged(c, &all, Duration::from_secs(60));
    for (i, replica) in all.iter().enumerate() {
        assert_eq!(
            c.metric(i, "tagma_view"),
            f64::from(id),
            "replica {replica} installed view {id}"
        );
    }
    states
}

/// Runs the model-checked key-value workload (for 120 s at most) on `proxies` while `body`
/// runs, giving it the count of operations completed so far; stops the load once `body`
/// returns. Returns the workload's report and what `body` returned.
pub fn under_workload<T>(
    proxies: Vec<Proxy>,
    body: impl FnOnce(&dyn Fn() -> u64) -> T,
) -> (WorkloadReport, T) {
    let progress = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let opts = WorkloadOptions {
        duration: Duration::from_secs(120),
        ..Default::default()
    };
    std::thread::scope(|s| {
        let worker = s.spawn(|| workload::run(proxies, &opts, &progress, &stop));
        let result = body(&|| progress.load(Ordering::Relaxed));
        stop.store(true, Ordering::Relaxed);
        (worker.join().unwrap(), result)
    })
}
