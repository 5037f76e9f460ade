//! Multi-process test of `tagma bench`: a real 4-replica cluster and the unreplicated
//! baseline, each a `tagma` child process, driven for a few seconds.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_reports_every_field() {
    let out = Command::new(env!("CARGO_BIN_EXE_tagma"))
        .args([
            "bench",
            "--payload",
            "100",
            "--clients",
            "8",
            "--warmup-s",
            "1",
            "--duration-s",
            "2",
            "--json",
        ])
        .output()
        .expect("run tagma bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tagma bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["mode"], "bft");
    assert_eq!(report["n"], 4);
    assert_eq!(report["f"], 1);
    assert_eq!(report["request_bytes"], 100);
    assert_eq!(report["reply_bytes"], 100);
    assert_eq!(report["clients"], 8);
    assert_eq!(report["unreplicated_run"], true);
    assert_eq!(report["signature_threads"], 2);
    let num = |k: &str| {
        report[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} missing in {report}"))
    };
    for k in [
        "throughput_ops_s",
        "unreplicated_ops_s",
        "ratio_vs_unreplicated",
        "replica_rss_mb_max",
        "cpu_s_per_kop",
    ] {
        assert!(num(k) > 0.0, "{k} = {} in {report}", num(k));
    }
    let lat = |k: &str| {
        report["latency_ms"][k]
            .as_f64()
            .unwrap_or_else(|| panic!("latency_ms.{k} missing in {report}"))
    };
    let (p50, p90, p99, p999) = (lat("p50"), lat("p90"), lat("p99"), lat("p999"));
    assert!(
        0.0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= p999,
        "{report}"
    );
    let ratio = num("throughput_ops_s") / num("unreplicated_ops_s");
    assert!((num("ratio_vs_unreplicated") - ratio).abs() < 1e-9);
    // 8 closed-loop clients: every instance orders between 1 and 8 requests.
    let batch = num("batch_mean");
    assert!(
        (1.0..=8.0).contains(&batch),
        "batch_mean {batch} in {report}"
    );
}

/// A tiny sweep (Figure 6: signature-verification threads 1, 2, 4, signed requests) without
/// the baseline: one JSON object per configuration, and the figure as a PNG.
#[test]
fn sweep_prints_each_configuration_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("figure6.png");
    let out = Command::new(env!("CARGO_BIN_EXE_tagma"))
        .args([
            "bench",
            "--sweep",
            "sigthreads",
            "--no-baseline",
            "--clients",
            "8",
            "--warmup-s",
            "0.5",
            "--duration-s",
            "1",
            "--json",
            "--plot",
        ])
        .arg(&png)
        .output()
        .expect("run tagma bench --sweep");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tagma bench --sweep failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let threads: Vec<_> = reports
        .iter()
        .map(|r| r["signature_threads"].clone())
        .collect();
    assert_eq!(threads, [1, 2, 4].map(Value::from), "{stdout}");
    for r in &reports {
        assert_eq!(r["signed"], true, "{r}");
        assert_eq!(r["unreplicated_run"], false, "{r}");
        assert_eq!(r["duration_s"], 1.0, "{r}");
        assert!(r["throughput_ops_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    let bytes = std::fs::read(&png).expect("the plot was written");
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    assert!(bytes.len() > 8 * 1024, "{} bytes", bytes.len());
    // The same figure again from the saved reports, without running anything.
    let saved = dir.path().join("figure6.jsonl");
    std::fs::write(&saved, stdout.as_bytes()).unwrap();
    let replot = dir.path().join("replot.png");
    let out = Command::new(env!("CARGO_BIN_EXE_tagma"))
        .args(["bench", "--sweep", "sigthreads", "--plot"])
        .arg(&replot)
        .arg("--from-json")
        .arg(&saved)
        .output()
        .expect("run tagma bench --from-json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&replot).unwrap(), bytes);
}

#[test]
fn plot_needs_a_sweep() {
    let out = Command::new(env!("CARGO_BIN_EXE_tagma"))
        .args(["bench", "--plot", "x.png"])
        .output()
        .expect("run tagma bench");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sweep"));
}

/// The unreplicated server answers like a one-replica cluster: ordered writes execute once,
/// in order, and reads see them.
#[test]
fn unreplicated_server_serves_the_kv_service() {
    use std::path::Path;
    use std::time::Duration;

    use bytes::Bytes;
    use tagma_cluster::{LaunchOptions, LocalCluster};
    use tagma_kv::{KvOp, KvReply};

    let opts = LaunchOptions {
        replicas: 1,
        mode: tagma_core::Mode::Cft,
        f: Some(0),
        service: Some("kv".into()),
        replica_args: Vec::new(),
        unreplicated: true,
    };
    let server = LocalCluster::launch_with(Path::new(env!("CARGO_BIN_EXE_tagma")), &opts, |_| {})
        .expect("start the unreplicated server");
    let proxy = server.proxy(Duration::from_secs(20)).expect("connect");
    let key = Bytes::from_static(b"k");
    for delta in 1..=10 {
        let reply = proxy
            .invoke_ordered(
                KvOp::Incr {
                    key: key.clone(),
                    delta,
                }
                .encode(),
            )
            .expect("incr");
        let expected = (1..=delta).sum::<i64>();
        assert_eq!(
            KvReply::decode(&reply).unwrap(),
            KvReply::Incr { value: expected }
        );
    }
    let states = proxy.query_states(Duration::from_secs(2));
    let state = states[0].1.as_ref().expect("state info");
    assert_eq!(state.executed_requests, 10);
    assert_eq!(state.executed_instances, 10);
}

/// A short soak: every replica sampled, each kind of fault once (a restart, a leader pause, a
/// follower down long enough to need a state transfer), and the replicas equal at the end.
#[test]
fn a_short_soak_samples_every_replica_through_each_kind_of_fault() {
    let opts = tagma_bench::soak::SoakOptions {
        minutes: 1.75,
        fault_every_s: 25.0,
        sample_s: 1.0,
        clients: 4,
        keys: 500,
        warmup_min: 0.0,
        progress: false,
    };
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_tagma"));
    let r = tagma_bench::soak::run(exe, &opts).expect("the soak runs");
    let kinds: Vec<&str> = r.faults.iter().map(|f| f.what.as_str()).collect();
    assert!(r.faults.len() >= 3, "{kinds:?}");
    assert!(kinds[0].contains("killed and restarted"), "{kinds:?}");
    assert!(kinds[1].contains("paused"), "{kinds:?}");
    assert!(kinds[2].contains("down 20 s"), "{kinds:?}");
    assert!(r.leader_changes >= 1, "the pause changed no leader");
    assert!(
        r.state_transfers >= 1,
        "the follower kept down fetched no state"
    );
    assert!(r.state_digests_equal);
    assert!(r.operations > 0);
    assert_eq!(r.replicas.len(), 4);
    for replica in &r.replicas {
        assert!(replica.samples > 0, "{replica:?}");
        assert!(replica.rss_first_quarter_mb > 0.0 && replica.threads_first > 0.0);
        assert!(replica.fds_first > 0.0 && replica.disk_max_mb > 0.0);
        // The allocated heap, from the replica's metrics, lies within its resident memory.
        assert!(
            replica.heap_first_quarter_mb > 0.0
                && replica.heap_first_quarter_mb < replica.rss_first_quarter_mb,
            "{replica:?}"
        );
    }
    // One follower is the one restarted; the others ran the whole time.
    assert!(r.replicas.iter().filter(|x| x.restarts == 0).count() >= 2);
    assert!(r.rss_growth_pct.is_finite());
    assert!(!r.table().is_empty());
}
