//! Execute-verify replication across real processes, as users run it: a primary-backup pair
//! of `tagma eve serve` processes, and the BFT deployment (executors and a verifier cluster of
//! `tagma replica --service eve-verifier` processes), under the checked key-value workload.

use std::sync::Mutex;

mod common;
use common::{exe, tagma_json};

static SERIAL: Mutex<()> = Mutex::new(());

fn assert_nothing_lost(report: &serde_json::Value) {
    assert!(
        report["acknowledged_ops"].as_u64().unwrap() > 100,
        "{report}"
    );
    assert_eq!(report["lost_acknowledged_ops"], 0, "{report}");
    assert_eq!(report["duplicated_ops"], 0, "{report}");
    assert_eq!(report["failed_ops"], 0, "{report}");
    assert_eq!(
        report["violations"].as_array().unwrap().len(),
        0,
        "{report}"
    );
    assert_eq!(report["state_digests_equal"], true, "{report}");
}

#[test]
fn a_killed_primary_is_taken_over_within_a_second_and_comes_back_by_fetching_the_state() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = tagma_json(&[
        "chaos",
        "--mode",
        "eve",
        "--scenario",
        "primary-crash",
        "--before-s",
        "1",
        "--down-s",
        "1",
        "--after-s",
        "1",
        "--json",
    ]);
    assert_nothing_lost(&report);
    let takeover_ms = report["takeover_ms"].as_f64().unwrap();
    assert!(
        (400.0..=1000.0).contains(&takeover_ms),
        "takeover after {takeover_ms} ms with a 500 ms timeout: {report}"
    );
    assert_eq!(report["restarted_caught_up"], true, "{report}");
    assert_eq!(report["second_crash"], true, "{report}");
    assert_eq!(report["events"].as_array().unwrap().len(), 3, "{report}");
}

#[test]
fn the_demo_serves_the_key_value_store_in_eve_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = tagma_json(&["demo", "--mode", "eve", "--duration-s", "2", "--json"]);
    assert_nothing_lost(&report);
    assert!(report["takeover_ms"].is_null(), "{report}");
}

#[test]
fn eve_mode_names_its_chaos_scenarios() {
    let out = std::process::Command::new(exe())
        .args(["chaos", "--mode", "eve", "--scenario", "kill-all"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("primary-crash, lying-executor and racy-service"),
        "{stderr}"
    );
}

#[test]
fn init_writes_a_pair_that_eve_serve_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(exe())
        .args(["init", "--eve", "--base-port", "7950", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let cfg = tagma_node::cluster_dir::load_config(dir.path()).unwrap();
    assert_eq!(cfg.n(), 2);
    assert!(!cfg.raw.cluster.readonly_requests);
    // Another cluster's directory is refused with the fix.
    let other = tempfile::tempdir().unwrap();
    let init = std::process::Command::new(exe())
        .args(["init", "--replicas", "4", "--base-port", "7960", "--dir"])
        .arg(other.path())
        .output()
        .unwrap();
    assert!(init.status.success());
    let serve = std::process::Command::new(exe())
        .args(["eve", "serve", "--id", "0", "--dir"])
        .arg(other.path())
        .output()
        .unwrap();
    assert!(!serve.status.success());
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(
        stderr.contains("exactly two [[replica]] entries"),
        "{stderr}"
    );
}

#[test]
fn the_bft_deployment_serves_across_processes_and_survives_its_primary_killed() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Three executors and four verifiers, each a process; the primary executor killed,
    // restarted (it fetches the committed state), then the next primary killed.
    let report = tagma_json(&[
        "chaos",
        "--mode",
        "eve",
        "--bft",
        "--scenario",
        "primary-crash",
        "--before-s",
        "1",
        "--down-s",
        "1.5",
        "--after-s",
        "1.5",
        "--json",
    ]);
    assert_nothing_lost(&report);
    assert!(report["takeover_ms"].as_f64().is_some(), "{report}");
    assert_eq!(report["restarted_caught_up"], true, "{report}");
    assert_eq!(report["second_crash"], true, "{report}");
    assert!(
        report["deployment"].as_str().unwrap().starts_with("bft"),
        "{report}"
    );
}

#[test]
fn the_demo_serves_the_key_value_store_on_executors_and_verifiers() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = tagma_json(&[
        "demo",
        "--mode",
        "eve",
        "--bft",
        // Four seconds: the verifier cluster adds a round trip per batch, and a busy
        // two-core machine acknowledges about 40 writes a second here.
        "--duration-s",
        "4",
        "--json",
    ]);
    assert_nothing_lost(&report);
}

#[test]
fn init_writes_executors_and_verifiers_and_refuses_a_verifier_cluster_tagma_cannot_order() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(exe())
        .args(["init", "--eve", "--bft", "--u", "1", "--r", "0", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let executors = tagma_node::cluster_dir::load_config(dir.path()).unwrap();
    let verifiers = tagma_node::cluster_dir::load_config(&dir.path().join("verifiers")).unwrap();
    // r = 0 masks concurrency bugs: 2u + 1 executors, 2u + 1 crash-faulty verifiers.
    assert_eq!((executors.n(), verifiers.n()), (3, 3));
    assert_eq!(verifiers.raw.eve.executor_principals.len(), 3);
    let bad = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(exe())
        .args(["init", "--eve", "--bft", "--u", "2", "--r", "1", "--dir"])
        .arg(bad.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fix: pass --r 2"), "{stderr}");
}

#[test]
fn lying_executors_across_processes_are_outvoted_and_their_forged_state_refused() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // u = r = 2: five executors (executor 1 serves forged state, executor 4 lies about
    // tokens and replies) and seven verifiers; executor 0 killed and restarted asks the
    // forger for the state first.
    let report = tagma_json(&[
        "chaos",
        "--mode",
        "eve",
        "--scenario",
        "lying-executor",
        "--processes",
        "--before-s",
        "1.5",
        "--down-s",
        "1.5",
        // The restarted executor has this long to refuse the forged state and fetch a
        // good one (a process start and two fetches in a debug build).
        "--after-s",
        "3",
        "--json",
    ]);
    assert_nothing_lost(&report);
    assert_eq!(report["restarted_caught_up"], true, "{report}");
    assert!(
        report["forged_states_refused"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert_eq!(report["liars"].as_array().unwrap().len(), 2, "{report}");
}
