//! VCube-Sync as users run it: the simulator's comparison, and real nodes over TCP in
//! several processes with a node stopped mid-run, one joining late and one subscribing to a
//! topic mid-run.

mod common;
use common::tagma_json;

#[test]
fn the_demo_converges_across_processes_with_a_stopped_node_a_late_joiner_and_a_new_subscriber() {
    let report = tagma_json(&[
        "crdt",
        "demo",
        "--nodes",
        "32",
        "--processes",
        "3",
        "--duration-s",
        "4",
        "--json",
    ]);
    assert_eq!(report["convergent"], true, "{report}");
    assert_eq!(report["causal_violations"], 0, "{report}");
    assert_eq!(report["double_deliveries"], 0, "{report}");
    assert!(report["operations"].as_u64().unwrap() > 50, "{report}");
    assert!(report["deliveries"].as_u64().unwrap() > 500, "{report}");
    assert!(
        report["bytes_between_processes"].as_u64().unwrap() > 0,
        "{report}"
    );
    // The late joiner's topics and the new subscriber's one.
    assert!(
        report["snapshots_installed"].as_u64().unwrap() >= 2,
        "{report}"
    );
    assert!(report["subscribed_mid_run"].is_array(), "{report}");
}

#[test]
fn the_simulator_compares_the_protocols_on_one_workload() {
    let out = tagma_json(&[
        "crdt",
        "sim",
        "--nodes",
        "64",
        "--duration-s",
        "10",
        "--drain-s",
        "5",
        "--json",
    ]);
    let runs = out["runs"].as_array().unwrap();
    let names: Vec<&str> = runs
        .iter()
        .map(|r| r["protocol"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["vcube", "plumtree", "flood"]);
    for r in runs {
        assert_eq!(r["report"]["convergent"], true, "{r}");
        assert_eq!(r["report"]["causal_violations"], 0, "{r}");
    }
    let vcube = &runs[0]["report"];
    assert_eq!(vcube["duplicates"], 0);
    assert!(vcube["bytes_total"].as_u64() < runs[2]["report"]["bytes_total"].as_u64());
}

/// A simulation starts again on huge pages unless the operator set jemalloc's options; the
/// report is the same either way (but for the wall time).
#[test]
fn the_simulator_reports_the_same_on_huge_pages_and_on_the_operators_allocator_settings() {
    let args = [
        "crdt",
        "sim",
        "--nodes",
        "32",
        "--protocol",
        "vcube",
        "--duration-s",
        "3",
        "--drain-s",
        "2",
        "--json",
    ];
    let run = |conf: Option<&str>| {
        let mut cmd = std::process::Command::new(common::exe());
        cmd.args(args).env_remove("_RJEM_MALLOC_CONF");
        if let Some(conf) = conf {
            cmd.env("_RJEM_MALLOC_CONF", conf);
        }
        let out = cmd.output().expect("run tagma crdt sim");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut report: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("one JSON object");
        report["runs"][0]["report"]
            .as_object_mut()
            .expect("a report")
            .remove("sim_wall_s")
            .expect("the wall time");
        report
    };
    let restarted = run(None);
    assert_eq!(restarted["runs"][0]["report"]["convergent"], true);
    assert_eq!(restarted, run(Some("thp:default")));
}
