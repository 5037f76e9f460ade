//! Exported histories, both ways: `tagma chaos --history` writes one, the checker built into
//! the run and `tagma history check` (which reads any file in the format) accept it; a
//! history with a read no write explains is refused.

use std::process::Command;

mod common;
use common::{exe, tagma_json};

#[test]
fn a_chaos_history_is_written_checked_and_read_back() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("kill-all.jsonl");
    let path_s = path.to_str().expect("UTF-8 path");
    let report = tagma_json(&[
        "chaos",
        "--scenario",
        "kill-all",
        "--history",
        path_s,
        "--json",
    ]);
    let history = &report["history"];
    assert_eq!(history["linearizable"], true, "{report}");
    let operations = history["operations"].as_u64().expect("a count");
    assert!(operations > 100, "{report}");

    let checked = tagma_json(&["history", "check", path_s, "--json"]);
    assert_eq!(checked["linearizable"], true);
    assert_eq!(checked["operations"].as_u64(), Some(operations));

    // Every line is one object with the documented keys.
    let text = std::fs::read_to_string(&path).expect("the history");
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    for key in ["client", "op", "key", "value", "call", "return"] {
        assert!(first.get(key).is_some(), "no {key} in {first}");
    }

    // A read of a value nobody wrote, after everything else: no order explains it.
    let last_return = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["return"].as_u64())
        .max()
        .unwrap_or(0);
    let forged = format!(
        "{text}{{\"client\":99,\"op\":\"get\",\"key\":\"h0\",\"value\":\"never-written\",\"call\":{},\"return\":{}}}\n",
        last_return + 1,
        last_return + 2
    );
    let forged_path = dir.path().join("forged.jsonl");
    std::fs::write(&forged_path, forged).unwrap();
    let out = Command::new(exe())
        .args(["history", "check", "--json"])
        .arg(&forged_path)
        .output()
        .expect("run tagma history check");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a forged history must fail the check"
    );
    let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(verdict["not_linearizable"], serde_json::json!(["h0"]));

    // A line that is not in the format is named.
    std::fs::write(&forged_path, "{\"client\":1}\n").unwrap();
    let out = Command::new(exe())
        .args(["history", "check"])
        .arg(&forged_path)
        .output()
        .expect("run tagma history check");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"));
}
