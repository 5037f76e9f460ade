//! Durability across the crash of every replica: real `tagma replica` processes
//! with `durability = "fsync"`, SIGKILLed together under a model-checked key-value load and
//! restarted from their own disks.

use std::sync::Mutex;
use std::time::Duration;

use tagma_cluster::LocalCluster;
use tagma_core::Mode;
use tagma_core::config::{Durability, StallFlush};
use tagma_node::metrics::{scrape, value};

mod common;
use common::{
    READY, assert_converged, assert_history_clean, exe, tagma_json, under_workload, wait_until,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn metric(c: &LocalCluster, i: usize, name: &str) -> f64 {
    let addr = c.cfg.replicas[i].metrics_addr.expect("metrics address");
    scrape(addr)
        .ok()
        .and_then(|text| value(&text, name))
        .unwrap_or(0.0)
}

/// Kills every replica mid-load, restarts them all from disk, and checks that the clients'
/// history stays linearizable (an acknowledged write lost or applied twice would show as a
/// read that contradicts it), that no request fails, and that the replicas converge.
fn kill_all_and_recover(n: usize, mode: Mode) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = LocalCluster::launch(exe(), n, mode, |cfg| {
        cfg.storage.durability = Durability::Fsync;
        // Frequent checkpoints and small segments: checkpoints, log release and recovery
        // from checkpoint + log suffix all happen within the test.
        cfg.storage.checkpoint_period = 40;
        cfg.storage.log_segment_bytes = 64 << 10;
        cfg.timeouts.request_timeout_ms = 500;
    })
    .expect("start a local cluster");
    let clients = (0..4)
        .map(|_| c.proxy(READY).expect("connect client"))
        .collect();
    let report = under_workload(clients, |ops| {
        wait_until("the cluster serves 600 ops", READY, || ops() >= 600);
        // A slow replica may trail the quorum that serves the clients: the kill must find
        // every one with instances on disk, or "recovered nothing" proves nothing.
        wait_until("every replica executed instances", READY, || {
            (0..n).all(|i| metric(&c, i, "tagma_executed_instances") >= 10.0)
        });
        let checkpoints: f64 = (0..n)
            .map(|i| metric(&c, i, "tagma_checkpoints_total"))
            .sum();
        // Every replica dies at once, requests in flight.
        c.stop_all();
        let at_kill = ops();
        c.start_all().unwrap();
        for i in 0..n {
            c.wait_ready(i, READY).unwrap();
        }
        for i in 0..n {
            if metric(&c, i, "tagma_recovered_instances") == 0.0 {
                c.dump_logs();
                panic!("replica {i} recovered nothing");
            }
        }
        wait_until("ops resume after the restart", READY, || {
            ops() >= at_kill + 300
        });
        checkpoints
    });
    let (report, checkpoints) = report;
    assert!(
        checkpoints > 0.0,
        "no checkpoint was taken before the crash"
    );
    // An acknowledged write lost or applied twice would show as a read contradicting it.
    assert_history_clean(&c, &report, "across the restart of every replica");
    assert_converged(&c, &c.cfg.members(), Duration::from_secs(60));
}

#[test]
fn bft_every_replica_killed_and_restarted_loses_nothing() {
    kill_all_and_recover(4, Mode::Bft);
}

#[test]
fn cft_every_replica_killed_and_restarted_loses_nothing() {
    kill_all_and_recover(3, Mode::Cft);
}

/// One replica's log flushes stall (`[testing] stall_file`, log only: its votes still reach
/// its disk, so it keeps voting) for 13 s under a model-checked load: longer than the
/// cluster takes to decide `LOG_LAG_MAX` instances, and longer than any wait of the runtime
/// for its log. The stalled replica holds the instance in progress once its log lags that
/// far, and the others go on without it: the load never pauses for more than a leader
/// change, and the stalled replica's process keeps running. Once the stall ends, it catches
/// up (decision forwarding, or state transfer when the others are too far ahead) and every
/// replica holds the same state; no operation fails, is lost or applied twice.
fn log_stall_under_load(stall_leader: bool) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = 4;
    let mut c = LocalCluster::launch(exe(), n, Mode::Bft, |cfg| {
        cfg.storage.durability = Durability::Fsync;
        cfg.storage.checkpoint_period = 200;
        cfg.storage.log_segment_bytes = 64 << 10;
        cfg.timeouts.request_timeout_ms = 500;
        cfg.testing.stall_file = "stall".into();
        cfg.testing.stall_flushes = vec![StallFlush::Log];
    })
    .expect("start a local cluster");
    let clients = (0..4)
        .map(|_| c.proxy(READY).expect("connect client"))
        .collect();
    let report = under_workload(clients, |ops| {
        wait_until("the cluster serves 300 ops", READY, || ops() >= 300);
        let stalled = if stall_leader {
            c.current_leader()
        } else {
            n - 1
        };
        let dir = tagma_node::cluster_dir::data_dir(
            &c.dir,
            &c.cfg,
            tagma_wire::ReplicaId(stalled as u32),
        );
        let stall_file = dir.join("stall");
        std::fs::write(&stall_file, b"").expect("create the stall file");
        let stalled_at = std::time::Instant::now();
        // How far the stalled replica is behind the others (instances executed).
        let lag = || {
            (0..n)
                .filter(|&i| i != stalled)
                .map(|i| metric(&c, i, "tagma_executed_instances"))
                .fold(f64::MAX, f64::min)
                - metric(&c, stalled, "tagma_executed_instances")
        };
        // The longest time without a completed operation while the log stalls, and the
        // largest lag seen.
        let (mut last_ops, mut last_progress) = (ops(), stalled_at);
        let (mut longest_pause, mut lag_max) = (Duration::ZERO, 0.0f64);
        for tick in 1.. {
            std::thread::sleep(Duration::from_millis(100));
            if ops() > last_ops {
                (last_ops, last_progress) = (ops(), std::time::Instant::now());
            }
            longest_pause = longest_pause.max(last_progress.elapsed());
            if tick % 10 == 0 {
                lag_max = lag_max.max(lag());
            }
            if stalled_at.elapsed() >= Duration::from_secs(13) {
                break;
            }
        }
        let stall_ops = ops();
        assert!(
            c.is_running(stalled),
            "the stalled replica's process exited"
        );
        std::fs::remove_file(&stall_file).expect("remove the stall file");
        wait_until("ops go on after the stall", READY, || {
            ops() >= stall_ops + 300
        });
        (longest_pause, lag_max, stalled)
    });
    let (report, (longest_pause, lag, stalled)) = report;
    eprintln!(
        "replica {stalled}'s log stalled 13 s: longest pause of the load {longest_pause:?}, \
         it lagged up to {lag} instances behind"
    );
    assert!(
        longest_pause < Duration::from_secs(5),
        "the load paused {longest_pause:?} while replica {stalled}'s log stalled"
    );
    assert!(
        lag > tagma_core::LOG_LAG_MAX as f64,
        "replica {stalled} did not fall behind while its log stalled (lag {lag})"
    );
    assert_history_clean(&c, &report, "while a replica's log stalls");
    assert_converged(&c, &c.cfg.members(), Duration::from_secs(60));
}

#[test]
fn a_follower_whose_log_stalls_lags_and_catches_up_while_the_others_serve() {
    log_stall_under_load(false);
}

/// The leader's log stalls: its log back-pressure stops its proposals, the others change
/// leader and go on.
#[test]
fn a_leader_whose_log_stalls_is_replaced_and_catches_up_while_the_others_serve() {
    log_stall_under_load(true);
}

/// `tagma chaos` as a user runs it: its JSON report accounts for every acknowledged
/// operation.
fn chaos(args: &[&str]) -> serde_json::Value {
    let down = if args.contains(&"--down-s") {
        &[][..]
    } else {
        &["--down-s", "1"][..]
    };
    let mut all = vec!["--before-s", "1"];
    if !args.contains(&"--after-s") {
        all.extend_from_slice(&["--after-s", "1"]);
    }
    all.extend_from_slice(down);
    all.extend_from_slice(args);
    let report = chaos_passes(&all);
    assert!(report["recovery_ms"].as_f64().unwrap() > 0.0, "{report}");
    report
}

/// Runs `tagma chaos --json ARGS`: it must exit 0 with one JSON report of more than 100
/// acknowledged operations, none lost or applied twice, and equal final digests.
fn chaos_passes(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["chaos", "--json"];
    all.extend_from_slice(args);
    let report = tagma_json(&all);
    assert!(
        report["acknowledged_ops"].as_u64().unwrap() > 100,
        "{report}"
    );
    assert_eq!(report["lost_acknowledged_ops"], 0, "{report}");
    assert_eq!(report["duplicated_ops"], 0, "{report}");
    assert_eq!(report["state_digests_equal"], true, "{report}");
    report
}

#[test]
fn chaos_lagging_replica_catches_up_while_the_others_serve() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = chaos(&["--scenario", "lagging-replica", "--down-s", "3"]);
    assert_eq!(report["scenario"], "lagging-replica");
    assert_eq!(report["n"], 4);
    assert!(
        report["state_transfers"].as_u64().unwrap() >= 1,
        "the others released the log it missed: it must have fetched state: {report}"
    );
}

/// `tagma chaos --scenario slow-disk` as a user runs it: a follower's disk, then the
/// leader's, stalls (every flush) under load; the others serve throughout, each stalled
/// replica catches up, and nothing acknowledged is lost or applied twice.
#[test]
fn chaos_slow_disk_of_a_follower_then_the_leader_degrades_neither_the_cluster_nor_the_state() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = chaos_passes(&[
        "--scenario",
        "slow-disk",
        "--before-s",
        "1",
        "--down-s",
        "3",
        "--after-s",
        "1",
    ]);
    assert_eq!(report["scenario"], "slow-disk", "{report}");
    for field in [
        "ops_per_s_before",
        "ops_per_s_follower_stall",
        "ops_per_s_leader_stall",
        "ops_per_s_after",
        "follower_catch_up_ms",
        "leader_catch_up_ms",
    ] {
        assert!(report[field].as_f64().unwrap() > 0.0, "{field}: {report}");
    }
    assert_ne!(
        report["follower_stalled"], report["leader_stalled"],
        "{report}"
    );
}

/// `tagma bench state-transfer` as a user runs it, on a small state: a wiped replica gets the
/// whole state back from the others by state transfer and converges with them.
#[test]
fn bench_state_transfer_brings_a_wiped_replica_back() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = tagma_json(&[
        "bench",
        "state-transfer",
        "--state-mb",
        "4",
        "--checkpoint-period",
        "40",
        "--json",
    ]);
    assert_eq!(report["state_digests_equal"], true, "{report}");
    assert!(
        report["installed_state_mb"].as_f64().unwrap() > 3.0,
        "{report}"
    );
    assert!(report["fetched_mb"].as_f64().unwrap() > 3.0, "{report}");
    assert!(report["transfer_ms"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["mb_per_s"].as_f64().unwrap() > 0.0, "{report}");
}

/// `tagma bench --durability fsync` as a user runs it, briefly: the durable cluster and the
/// one without durability are measured in alternating windows and the ratio is reported.
#[test]
fn bench_durability_reports_the_ratio_measured_in_alternating_windows() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = tagma_json(&[
        "bench",
        "--workload",
        "kv",
        "--payload",
        "1024",
        "--clients",
        "16",
        "--durability",
        "fsync",
        "--durability-rounds",
        "2",
        "--warmup-s",
        "0.5",
        "--duration-s",
        "1",
        "--no-baseline",
        "--json",
    ]);
    assert_eq!(report["durability"], "fsync", "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    let durable = report["throughput_ops_s"].as_f64().unwrap();
    let plain = report["no_durability_ops_s"].as_f64().unwrap();
    assert!(durable > 0.0 && plain > 0.0, "{report}");
    let ratio = report["ratio_vs_no_durability"].as_f64().unwrap();
    assert!((ratio - durable / plain).abs() < 1e-9, "{report}");
    // Where the ratio goes: every durable instance flushes the leader's votes before its
    // ACCEPT, so both clusters decided instances and the durable leader's flushes took time.
    let field = |k: &str| report[k].as_f64().unwrap();
    assert!(field("instance_ms") > 0.0, "{report}");
    assert!(field("no_durability_instance_ms") > 0.0, "{report}");
    assert!(field("vote_flush_ms_mean") > 0.0, "{report}");
    assert!(
        field("vote_flush_ms_mean") < field("instance_ms"),
        "{report}"
    );
}

#[test]
fn chaos_kill_all_cft_loses_and_duplicates_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = chaos(&["--scenario", "kill-all", "--cft"]);
    assert_eq!(report["mode"], "cft");
    assert_eq!(report["n"], 3);
}

#[test]
fn chaos_corrupt_log_replica_discards_its_state_and_catches_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = chaos(&["--scenario", "corrupt-log", "--cft"]);
    assert_eq!(report["damaged_state_discarded"], true, "{report}");
}

#[test]
fn chaos_corrupt_checkpoint_replica_discards_its_state_and_catches_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = chaos(&["--scenario", "corrupt-checkpoint"]);
    assert_eq!(report["damaged_state_discarded"], true, "{report}");
}

/// `tagma chaos ARGS --f 2 --damaged 2`: the cluster has `n` replicas and the last two,
/// `damaged`, had their disks damaged; `chaos` checked every replica's state digest.
fn chaos_two_damaged(args: &[&str], n: u64, damaged: [u64; 2]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--f", "2", "--damaged", "2"]);
    let report = chaos(&all);
    assert_eq!(report["n"], n, "{report}");
    assert_eq!(
        report["damaged_replicas"],
        serde_json::json!(damaged),
        "{report}"
    );
    report
}

/// f = 2 (n = 7): the log and the newest checkpoint of two replicas are both corrupted while
/// every replica is stopped; both damaged replicas discard their state and fetch it back
/// (decisions from the others' logs, or a state transfer once those are released).
#[test]
fn chaos_two_of_seven_replicas_with_corrupt_log_and_checkpoint_fetch_their_state() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 2 s of load after recovery: seven processes share the machine's cores.
    let report = chaos_two_damaged(&["--scenario", "corrupt-both", "--after-s", "2"], 7, [5, 6]);
    assert_eq!(report["damaged_state_discarded"], true, "{report}");
}

/// CFT, f = 2 (n = 5): two replicas' data directories are deleted while every replica is
/// stopped; the other three recover the service and the two get the state back.
#[test]
fn chaos_two_of_five_cft_replicas_with_wiped_disks_get_the_state_back() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = chaos_two_damaged(&["--scenario", "wipe-disk", "--cft"], 5, [3, 4]);
    // Nothing was corrupt to discard: the field says so instead of reading false.
    assert!(report["damaged_state_discarded"].is_null(), "{report}");
}

/// A lying disk (DDS's state vote): the newest checkpoint of replica 3 is rewritten, while
/// every replica is stopped, with a state that was never ordered under valid checksums.
/// Recovery reads it without complaint; the state vote at the end of the start-up
/// synchronisation finds f+1 peers holding another state, and the replica fetches theirs.
/// Without the vote its digest differs at the end (checked by disabling it).
#[test]
fn chaos_lying_disk_is_caught_by_the_state_vote_and_repaired() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = chaos(&["--scenario", "lying-disk"]);
    assert_eq!(report["repaired_by_state_vote"], true, "{report}");
    assert!(report["damaged_state_discarded"].is_null(), "{report}");
    assert!(report["state_transfers"].as_u64().unwrap() >= 1, "{report}");
}

/// A lying disk on a replica that restarts alone: the others moved on, so its state vote is
/// inconclusive and it orders with its state unconfirmed; the later state check finds f+1
/// peers' checkpoints contradicting it, and the replica fetches their state. When the
/// replica restarts further behind than its peers' logs reach, a fetched state replaces the
/// lie first (`catch-up`): the lie is gone either way, and the states end equal.
#[test]
fn chaos_lone_lying_disk_is_caught_by_the_state_check_and_repaired() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = chaos(&["--scenario", "lone-lying-disk"]);
    let removed = report["lie_removed_by"].as_array().expect("lie_removed_by");
    assert_eq!(removed.len(), 1, "{report}");
    assert!(
        removed[0] == "state-check" || removed[0] == "catch-up",
        "{report}"
    );
    assert_eq!(report["state_digests_equal"], true, "{report}");
    assert!(report["state_transfers"].as_u64().unwrap() >= 1, "{report}");
}

/// Damaging more disks than f is refused before anything starts, naming the fix.
#[test]
fn chaos_refuses_more_damaged_disks_than_f() {
    let out = std::process::Command::new(exe())
        .args(["chaos", "--scenario", "wipe-disk", "--damaged", "2"])
        .output()
        .expect("run tagma chaos");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("raise --f"), "{stderr}");
}

/// `tagma chaos --scenario reconfig-tour` as a user runs it: a replica joins, the leader
/// crashes and restarts, the joiner leaves; nothing acknowledged is lost or applied twice,
/// the final members hold equal states, and the timeline is drawn.
#[test]
fn chaos_reconfig_tour_joins_crashes_restarts_and_leaves_without_losing_anything() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let plot = dir.path().join("tour.png");
    let plot_arg = plot.to_str().expect("a UTF-8 path");
    let report = chaos_passes(&[
        "--scenario",
        "reconfig-tour",
        "--before-s",
        "2",
        "--after-s",
        "2",
        "--clients",
        "4",
        "--plot",
        plot_arg,
    ]);
    let events: Vec<&str> = report["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["what"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        [
            "replica 4 joins",
            "leader (replica 0) crashes",
            "replica 0 restarts",
            "replica 4 leaves"
        ],
        "{report}"
    );
    // Back to the four original replicas, in view 2.
    assert_eq!(
        report["final_view"],
        serde_json::json!([2, [0, 1, 2, 3], 1]),
        "{report}"
    );
    assert!(report["leader_crash_to_resumed_ms"].as_f64().unwrap() > 0.0);
    assert!(
        report["throughput"].as_array().unwrap().len() >= 8,
        "{report}"
    );
    let png = std::fs::read(&plot).expect("the plot was written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
}
