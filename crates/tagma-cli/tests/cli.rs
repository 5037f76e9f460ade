//! The `tagma` command as a user runs it: argument checks, error messages, and the `kv`
//! and `status` commands against a local cluster of replica processes.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tagma_cluster::LocalCluster;
use tagma_core::Mode;
use tagma_wire::Encode;

mod common;
use common::exe;

fn tagma(args: &[&str]) -> Output {
    Command::new(exe())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tagma")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `tagma init` into a fresh directory; returns it.
fn init(extra: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let mut args = vec!["init", "--dir", path];
    args.extend_from_slice(extra);
    let out = tagma(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    dir
}

/// Runs `tagma` with `args` as a server process; returns its exit status and stderr once it
/// exits, or kills it after `wait` and returns `None` and what it printed so far.
fn run_server(args: &[&str], wait: Duration) -> (Option<std::process::ExitStatus>, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(exe())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .expect("start tagma");
    let deadline = Instant::now() + wait;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, std::fs::read_to_string(log.path()).unwrap())
}

/// `tagma ... --json | head` that stops reading early: the program ends quietly with the
/// status a shell gives a writer whose pipe closed (128 + SIGPIPE), not with a panic.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let mut child = Command::new(exe())
        .args([
            "crdt",
            "sim",
            "--nodes",
            "16",
            "--duration-s",
            "1",
            "--drain-s",
            "1",
        ])
        .args(["--protocol", "vcube", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tagma");
    // The reader goes away before anything is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait for tagma");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn init_refuses_ports_past_65535() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let out = tagma(&["init", "--dir", path, "--base-port", "65500"]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--base-port 65500") && err.contains("--base-port 65432 or lower"),
        "{err}"
    );
    assert!(!dir.path().join("tagma.toml").exists());
    let out = tagma(&["init", "--dir", path, "--base-port", "65432"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn three_replicas_are_refused_in_bft_mode_and_taken_in_cft_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    for args in [
        vec!["init", "--dir", path, "--replicas", "3"],
        vec!["demo", "--replicas", "3", "--duration-s", "1"],
    ] {
        let out = tagma(&args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains("3 replicas in bft mode tolerate no fault")
                && err.contains("--replicas 4")
                && err.contains("--cft"),
            "{args:?}: {err}"
        );
    }
    let out = tagma(&["init", "--dir", path, "--replicas", "3", "--cft"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("3 replicas, f = 1, cft mode"));
    let out = tagma(&[
        "demo",
        "--replicas",
        "3",
        "--cft",
        "--duration-s",
        "1",
        "--clients",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(
        (report["replicas"].as_u64(), report["f"].as_u64()),
        (Some(3), Some(1))
    );
}

#[test]
fn a_configuration_error_is_printed_once() {
    let dir = init(&["--base-port", "27400"]);
    let config = dir.path().join("tagma.toml");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&config)
        .unwrap();
    writeln!(file, "garbage = ").unwrap();
    let out = tagma(&["kv", "--dir", dir.path().to_str().unwrap(), "get", "k"]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(
        err.matches("string values must be quoted").count(),
        1,
        "{err}"
    );
    let missing = dir.path().join("missing");
    let out = tagma(&["status", "--dir", missing.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn a_replica_key_given_without_join_is_the_key_it_runs_with() {
    let dir = init(&["--base-port", "27420"]);
    let path = dir.path().to_str().unwrap();
    let other = dir.path().join("other.key");
    let out = tagma(&["keygen", "--out", other.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, err) = run_server(
        &[
            "replica",
            "--dir",
            path,
            "--id",
            "0",
            "--key",
            other.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert!(
        status.is_some_and(|s| !s.success()) && err.contains("does not match the public key"),
        "the replica must run with --key's key and refuse it: {status:?}\n{err}"
    );
}

#[test]
fn data_directory_errors_name_the_directory() {
    let dir = init(&["--base-port", "27440"]);
    // A file where the data directories go.
    std::fs::write(dir.path().join("data"), b"not a directory").unwrap();
    let (status, err) = run_server(
        &[
            "replica",
            "--dir",
            dir.path().to_str().unwrap(),
            "--id",
            "0",
        ],
        Duration::from_secs(20),
    );
    let data_dir = dir.path().join("data").join("replica-0");
    assert!(status.is_some_and(|s| !s.success()), "{err}");
    assert!(
        err.contains(&format!("data directory {}", data_dir.display())),
        "{err}"
    );
}

#[test]
fn server_logs_written_to_a_file_have_no_colour_codes() {
    let dir = init(&[
        "--replicas",
        "1",
        "--cft",
        "--f",
        "0",
        "--base-port",
        "27460",
    ]);
    let (_, log) = run_server(
        &["unreplicated", "--dir", dir.path().to_str().unwrap()],
        Duration::from_secs(3),
    );
    assert!(log.contains("INFO"), "the server logged nothing: {log}");
    assert!(!log.contains('\u{1b}'), "colour codes in the log: {log:?}");
}

#[test]
fn kv_put_refuses_a_value_over_the_request_limit_before_sending_it() {
    let dir = init(&["--base-port", "27480"]);
    let value = dir.path().join("value.bin");
    std::fs::write(&value, vec![7u8; 100 << 10]).unwrap();
    let out = tagma(&[
        "kv",
        "--dir",
        dir.path().to_str().unwrap(),
        "put",
        "k",
        "--value-file",
        value.to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("limits.request_bytes_max = 65536") && err.contains("fix:"),
        "{err}"
    );
}

/// Runs `tagma kv` on `dir` with `args` and `stdin` as its input.
fn kv(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(exe())
        .arg("kv")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tagma kv");
    let mut input = child.stdin.take().unwrap();
    if let Some(bytes) = stdin {
        input.write_all(bytes).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn kv_and_status_commands_against_a_cluster() {
    let mut c = LocalCluster::launch(exe(), 4, Mode::Bft, |_| {}).expect("start a cluster");
    let dir = c.dir.clone();
    let files = tempfile::tempdir().unwrap();
    // Values from a file and from standard input, byte for byte; read back into a file and
    // onto standard output.
    let value: Vec<u8> = (0..40_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let value_file = files.path().join("in.bin");
    std::fs::write(&value_file, &value).unwrap();
    ok(kv(
        &dir,
        &["put", "bin", "--value-file", value_file.to_str().unwrap()],
        None,
    ));
    let out_file = files.path().join("out.bin");
    ok(kv(
        &dir,
        &["get", "bin", "--out", out_file.to_str().unwrap()],
        None,
    ));
    assert!(
        std::fs::read(&out_file).unwrap() == value,
        "the value came back changed"
    );
    ok(kv(
        &dir,
        &["put", "piped", "--value-file", "-"],
        Some(b"from\x00stdin"),
    ));
    let out = kv(&dir, &["get", "piped", "--out", "-"], None);
    assert!(out.status.success());
    assert_eq!(out.stdout, b"from\x00stdin");
    // A missing key and the text "(absent)" differ.
    let out = kv(&dir, &["get", "nothing"], None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("absent"));
    ok(kv(&dir, &["put", "text", "(absent)"], None));
    assert_eq!(ok(kv(&dir, &["get", "text"], None)), "(absent)\n");
    // Compare-and-set on an absent key takes KEY NEW.
    assert!(ok(kv(&dir, &["cas", "--absent", "fresh", "v1"], None)).starts_with("applied"));
    assert!(ok(kv(&dir, &["cas", "--absent", "fresh", "v2"], None)).starts_with("not applied"));
    assert!(ok(kv(&dir, &["cas", "fresh", "v1", "v3"], None)).starts_with("applied"));
    assert_eq!(ok(kv(&dir, &["get", "fresh"], None)), "v3\n");
    // Counters read back as numbers.
    assert_eq!(ok(kv(&dir, &["incr", "hits", "41"], None)), "41\n");
    assert_eq!(ok(kv(&dir, &["incr", "hits", "1"], None)), "42\n");
    assert_eq!(ok(kv(&dir, &["get", "hits"], None)), "42\n");
    // A client that leaves with a reply unread resets its connection: counted, and no
    // reason for a warning.
    let replica = c.cfg.replicas[0].clone();
    let key = c.client_key().unwrap();
    let (reader, mut writer) = tagma_net::connect(
        replica.addr,
        &tagma_net::LocalIdentity {
            role: tagma_wire::Role::Client(tagma_node::cluster_dir::DEFAULT_CLIENT_PRINCIPAL),
            key: &key,
        },
        tagma_wire::Role::Replica(replica.id),
        &replica.public_key,
        tagma_net::NetLimits {
            frame_bytes_max: c.cfg.raw.limits.frame_bytes_max,
            handshake_timeout: Duration::from_secs(5),
        },
        Duration::from_secs(2),
    )
    .expect("connect a raw client");
    writer
        .push(&tagma_wire::ClientMessage::StateQuery { nonce: 1 }.to_bytes())
        .unwrap();
    writer.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop((reader, writer));
    common::wait_until(
        "replica 0 counts the reset",
        Duration::from_secs(10),
        || {
            tagma_node::metrics::scrape(replica.metrics_addr.unwrap())
                .is_ok_and(|t| tagma_node::metrics::rejection_count(&t, "io") >= 1)
        },
    );
    // Clients that come and go are no reason for warnings, and a log file has no colours.
    for i in 0..4 {
        let log = std::fs::read_to_string(c.log_path(i)).unwrap();
        assert!(
            !log.lines()
                .any(|l| l.contains("WARN") && l.contains("reset")),
            "replica {i} warned about a client leaving:\n{log}"
        );
        assert!(!log.contains('\u{1b}'), "colour codes in replica {i}'s log");
    }
    // Two of four replicas down: status lists all four and the leader the others report.
    c.kill(2);
    c.kill(3);
    let out = ok(tagma(&["status", "--dir", dir.to_str().unwrap(), "--json"]));
    let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let replicas = status["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 4, "{status}");
    assert_eq!(status["answering"], 2, "{status}");
    for r in &replicas[..2] {
        assert_eq!(r["answering"], true, "{status}");
        assert!(
            r["leader"].is_u64() && r["regency"].is_u64() && r["view"].is_u64(),
            "{status}"
        );
        assert!(r["executed_instances"].as_u64().unwrap() > 0, "{status}");
    }
    for r in &replicas[2..] {
        assert_eq!(r["answering"], false, "{status}");
        assert!(r["leader"].is_null(), "{status}");
    }
    let table = ok(tagma(&["status", "--dir", dir.to_str().unwrap()]));
    assert!(table.contains("2 of 4 replicas answering"), "{table}");
    assert!(
        table.contains("NOT ANSWERING") && table.contains("leader"),
        "{table}"
    );
}
