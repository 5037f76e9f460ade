//! Multi-process tests: real `tagma replica` processes on 127.0.0.1, real TCP, real clients.
//!
//! The tests in this file run one at a time (each starts its own cluster; the CI machine has
//! two cores).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_client::Proxy;
use tagma_cluster::LocalCluster;
use tagma_cluster::workload::{self, WorkloadOptions};
use tagma_core::Mode;
use tagma_crypto::{Authenticator, IdentityKey};
use tagma_kv::{KvOp, KvReply};
use tagma_net::{LocalIdentity, NetLimits};
use tagma_node::metrics::{rejection_count, scrape};
use tagma_wire::{
    ClientId, ClientMessage, Decode, Encode, ReplicaId, ReplicaMessage, Request, RequestAuth,
    RequestEnvelope, RequestKind, RequestSeq, Role, ViewId,
};

mod common;
use common::{
    READY, add_replica, all_in_view, assert_converged, assert_history_clean, exe, under_workload,
    wait_until,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn cluster(n: usize, mode: Mode) -> LocalCluster {
    LocalCluster::launch(exe(), n, mode, |_| {}).expect("start a local cluster")
}

fn proxies(c: &LocalCluster, k: usize) -> Vec<Proxy> {
    (0..k)
        .map(|_| c.proxy(READY).expect("connect client"))
        .collect()
}

/// Runs `clients` closed-loop clients for `ops` operations each and checks the results and
/// the final digests of `live` replicas.
fn serve_and_check(c: &LocalCluster, clients: usize, ops: u64, live: &[ReplicaId]) {
    let opts = WorkloadOptions {
        duration: Duration::from_secs(120),
        ops_per_client: Some(ops),
        ..Default::default()
    };
    let report = workload::run(
        proxies(c, clients),
        &opts,
        &AtomicU64::new(0),
        &AtomicBool::new(false),
    );
    assert_history_clean(c, &report, "concurrent clients");
    assert!(report.completed >= clients as u64 * ops);
    let states = assert_converged(c, live, Duration::from_secs(30));
    assert!(
        states[0].executed_requests >= clients as u64 * ops / 2,
        "{states:?}"
    );
}

#[test]
fn bft_four_replicas_serve_concurrent_clients() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster(4, Mode::Bft);
    serve_and_check(&c, 6, 600, &c.cfg.members());
    // Each replica's metrics carry its allocator's view of the heap.
    for i in 0..4 {
        let allocated = c.metric(i, "tagma_heap_allocated_bytes");
        let resident = c.metric(i, "tagma_heap_resident_bytes");
        assert!(
            allocated > 0.0 && resident >= allocated,
            "replica {i}: {allocated} allocated, {resident} resident"
        );
    }
}

#[test]
fn cft_three_replicas_serve_concurrent_clients() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster(3, Mode::Cft);
    serve_and_check(&c, 6, 600, &c.cfg.members());
}

#[test]
fn follower_killed_with_sigkill_keeps_the_service_running() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = cluster(4, Mode::Bft);
    let clients = proxies(&c, 4);
    let progress = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let opts = WorkloadOptions {
        duration: Duration::from_secs(8),
        ..Default::default()
    };
    let (report, at_kill) = std::thread::scope(|s| {
        let worker = s.spawn(|| workload::run(clients, &opts, &progress, &stop));
        let deadline = Instant::now() + Duration::from_secs(20);
        while progress.load(Ordering::Relaxed) < 500 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let at_kill = progress.load(Ordering::Relaxed);
        c.kill(3);
        (worker.join().unwrap(), at_kill)
    });
    assert!(
        at_kill >= 500,
        "the cluster served only {at_kill} ops before the kill"
    );
    assert!(!c.is_running(3));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(
        report.completed > at_kill + 500,
        "only {} ops after the kill (at kill: {at_kill})",
        report.completed - at_kill
    );
    assert_converged(
        &c,
        &[ReplicaId(0), ReplicaId(1), ReplicaId(2)],
        Duration::from_secs(30),
    );
}

struct Raw {
    reader: tagma_net::FrameReader,
    writer: tagma_net::FrameWriter,
}

fn limits(c: &LocalCluster) -> NetLimits {
    NetLimits {
        frame_bytes_max: c.cfg.raw.limits.frame_bytes_max,
        handshake_timeout: Duration::from_secs(5),
    }
}

/// An authenticated client connection to replica 0, speaking raw frames.
fn raw_client(
    c: &LocalCluster,
    key: &IdentityKey,
    principal: u32,
) -> Result<Raw, tagma_net::NetError> {
    let r = &c.cfg.replicas[0];
    let me = LocalIdentity {
        role: Role::Client(principal),
        key,
    };
    let (reader, writer) = tagma_net::connect(
        r.addr,
        &me,
        Role::Replica(r.id),
        &r.public_key,
        limits(c),
        Duration::from_secs(2),
    )?;
    Ok(Raw { reader, writer })
}

fn metrics_addr(c: &LocalCluster) -> SocketAddr {
    c.cfg.replicas[0]
        .metrics_addr
        .expect("init writes metrics addresses")
}

/// Waits until replica 0 has counted `reason` at least `at_least` times.
fn wait_rejection(c: &LocalCluster, reason: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = scrape(metrics_addr(c))
            .map(|t| rejection_count(&t, reason))
            .unwrap_or(0);
        if n >= at_least || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ordered_frame(
    c: &LocalCluster,
    key: &IdentityKey,
    client: ClientId,
    seq: u64,
    op: &KvOp,
) -> Bytes {
    let request = Request {
        client,
        seq: RequestSeq(seq),
        kind: RequestKind::Ordered,
        view: ViewId(0),
        payload: op.encode(),
    };
    let replica_keys: Vec<_> = c.cfg.replicas.iter().map(|r| r.public_key).collect();
    let tags = Authenticator::new(key, &replica_keys)
        .unwrap()
        .tags(&tagma_crypto::request_digest(&request));
    ClientMessage::Request(RequestEnvelope {
        request,
        auth: RequestAuth::Macs(tags),
    })
    .to_bytes()
}

fn still_serves(c: &LocalCluster, proxy: &Proxy, tag: &str) {
    let op = KvOp::Put {
        key: Bytes::from(format!("alive/{tag}")),
        value: Bytes::from_static(b"yes"),
    };
    let reply = proxy
        .invoke_ordered(op.encode())
        .unwrap_or_else(|e| panic!("after {tag}: {e}"));
    assert!(matches!(
        KvReply::decode(&reply).unwrap(),
        KvReply::Put { .. }
    ));
    let text = scrape(metrics_addr(c)).unwrap();
    assert!(
        text.contains("tagma_requests_received_total"),
        "replica 0 still answers metrics after {tag}"
    );
}

#[test]
fn bad_input_is_rejected_with_typed_reasons_and_the_replica_keeps_serving() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster(4, Mode::Bft);
    let proxy = c.proxy(READY).unwrap();
    still_serves(&c, &proxy, "start");
    let key = c.client_key().unwrap();
    let addr = c.cfg.replicas[0].addr;

    // Garbage bytes instead of a handshake.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: tagma\r\n\r\n\xff\xfe garbage")
        .unwrap();
    drop(s);
    assert!(
        wait_rejection(&c, "malformed_handshake", 1) >= 1,
        "garbage bytes"
    );
    still_serves(&c, &proxy, "garbage");

    // A client key the cluster does not know (claiming the configured principal, and another).
    let stranger = IdentityKey::generate();
    assert!(raw_client(&c, &stranger, 1).is_err());
    assert!(raw_client(&c, &stranger, 77).is_err());
    assert!(
        wait_rejection(&c, "unknown_key", 2) >= 2,
        "unknown client key"
    );
    still_serves(&c, &proxy, "unknown key");

    // A truncated frame: the header promises 100 bytes, 10 arrive, then the peer closes.
    let mut raw = raw_client(&c, &key, 1).unwrap();
    let mut bytes = 100u32.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[0u8; 10]);
    raw.writer.write_unframed(&bytes).unwrap();
    raw.writer.shutdown();
    assert!(wait_rejection(&c, "truncated", 1) >= 1, "truncated frame");
    still_serves(&c, &proxy, "truncated");

    // An oversized frame header.
    let mut raw = raw_client(&c, &key, 1).unwrap();
    raw.writer.write_unframed(&u32::MAX.to_le_bytes()).unwrap();
    assert!(
        wait_rejection(&c, "frame_too_large", 1) >= 1,
        "oversized frame"
    );
    still_serves(&c, &proxy, "oversized");

    // A frame with a wrong MAC.
    let mut raw = raw_client(&c, &key, 1).unwrap();
    let body = ClientMessage::StateQuery { nonce: 1 }.to_bytes();
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame.extend_from_slice(&[0xAB; 16]);
    raw.writer.write_unframed(&frame).unwrap();
    assert!(wait_rejection(&c, "bad_mac", 1) >= 1, "bad MAC");
    still_serves(&c, &proxy, "bad mac");

    // A replayed old request: executed once, answered from the reply cache afterwards.
    let client = ClientId::new(1, 0xDEAD);
    let incr = KvOp::Incr {
        key: Bytes::from_static(b"replay/ctr"),
        delta: 5,
    };
    let mut raw = raw_client(&c, &key, 1).unwrap();
    let frame = ordered_frame(&c, &key, client, 1, &incr);
    raw.writer.push(&frame).unwrap();
    raw.writer.flush().unwrap();
    let first = raw.reader.read_frame().unwrap();
    let before = wait_rejection(&c, "replayed_request", 0);
    raw.writer.push(&frame).unwrap();
    raw.writer.flush().unwrap();
    let again = raw.reader.read_frame().unwrap();
    assert_eq!(
        ReplicaMessage::decode(&first).unwrap(),
        ReplicaMessage::decode(&again).unwrap(),
        "the cached reply is resent"
    );
    assert!(
        wait_rejection(&c, "replayed_request", before + 1) > before,
        "replay counted"
    );
    let value = proxy
        .invoke_ordered(
            KvOp::Get {
                key: Bytes::from_static(b"replay/ctr"),
            }
            .encode(),
        )
        .unwrap();
    assert_eq!(
        KvReply::decode(&value).unwrap(),
        KvReply::Get {
            value: Some(Bytes::copy_from_slice(&5i64.to_le_bytes()))
        },
        "the replayed increment was not executed twice"
    );
    still_serves(&c, &proxy, "replay");
}

#[test]
fn signed_requests_are_required_and_verified() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = LocalCluster::launch(exe(), 4, Mode::Bft, |cfg| {
        cfg.cluster.signed_requests = true
    })
    .unwrap();
    serve_and_check(&c, 3, 200, &c.cfg.members());
    // A request authenticated with MACs only is refused when signatures are required.
    let key = c.client_key().unwrap();
    let mut raw = raw_client(&c, &key, 1).unwrap();
    let frame = ordered_frame(
        &c,
        &key,
        ClientId::new(1, 0xBEEF),
        1,
        &KvOp::Get {
            key: Bytes::from_static(b"x"),
        },
    );
    raw.writer.push(&frame).unwrap();
    raw.writer.flush().unwrap();
    assert!(wait_rejection(&c, "signature_required", 1) >= 1);
}

/// The regency replica `i` reports (0 if it does not answer).
fn regency_of(c: &LocalCluster, i: usize) -> u64 {
    let Some(addr) = c.cfg.replicas[i].metrics_addr else {
        return 0;
    };
    scrape(addr)
        .ok()
        .and_then(|t| tagma_node::metrics::value(&t, "tagma_regency"))
        .map_or(0, |v| v as u64)
}

#[test]
fn the_leader_is_killed_twice_under_load_and_every_request_completes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Short request timers keep the test fast; enough decisions are kept in memory for a
    // restarted replica to catch up by decision forwarding (state transfer comes later).
    let mut c = LocalCluster::launch(exe(), 4, Mode::Bft, |cfg| {
        cfg.timeouts.request_timeout_ms = 300;
        cfg.limits.decisions_kept = 1_000_000;
    })
    .unwrap();
    let clients = proxies(&c, 4);
    let (report, ()) = under_workload(clients, |ops| {
        wait_until("the cluster serves 300 ops", READY, || ops() >= 300);
        // 1. Kill the leader (replica 0); regency 1 (leader 1) takes over.
        c.kill(0);
        let at = ops();
        wait_until("regency 1 is installed", READY, || {
            (1..4).all(|i| regency_of(&c, i) >= 1)
        });
        wait_until("ops resume after the first kill", READY, || {
            ops() >= at + 300
        });
        // 2. Restart replica 0 (empty state): it catches up from the others' decisions.
        c.start(0).unwrap();
        c.wait_ready(0, READY).unwrap();
        let checker = c.proxy(READY).unwrap();
        wait_until(
            "the restarted replica catches up",
            Duration::from_secs(60),
            || {
                let states = checker.query_states(Duration::from_secs(1));
                let position = |i: u32| {
                    states
                        .iter()
                        .find(|(id, _)| id.0 == i)
                        .and_then(|(_, s)| *s)
                        .map(|s| s.executed_instances)
                };
                matches!((position(0), position(1)), (Some(a), Some(b)) if a + 20 >= b && a > 0)
            },
        );
        // 3. Kill the new leader (replica 1); the survivors and the restarted replica go on.
        c.kill(1);
        let at = ops();
        wait_until("regency 2 is installed", READY, || {
            [0, 2, 3].iter().all(|&i| regency_of(&c, i) >= 2)
        });
        wait_until("ops resume after the second kill", READY, || {
            ops() >= at + 300
        });
    });
    assert_history_clean(&c, &report, "every request completes");
    assert_converged(
        &c,
        &[ReplicaId(0), ReplicaId(2), ReplicaId(3)],
        Duration::from_secs(60),
    );
}

/// Ordered requests a replica received from clients directly.
fn received(c: &LocalCluster, i: usize) -> f64 {
    c.metric(i, "tagma_requests_received_total")
}

/// `count` sequential puts through `proxy`.
fn puts(proxy: &Proxy, tag: &str, count: usize) {
    for k in 0..count {
        let op = KvOp::Put {
            key: Bytes::from(format!("{tag}/{}", k % 10)),
            value: Bytes::from(format!("{k}")),
        };
        proxy
            .invoke_ordered(op.encode())
            .unwrap_or_else(|e| panic!("{tag} put {k}: {e}"));
    }
}

#[test]
fn ordered_requests_go_to_the_leader_first_and_follow_a_new_one() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = LocalCluster::launch(exe(), 4, Mode::Bft, |cfg| {
        cfg.timeouts.request_timeout_ms = 300;
    })
    .unwrap();
    let proxy = c.proxy(READY).unwrap();
    let before: Vec<f64> = (0..4).map(|i| received(&c, i)).collect();
    puts(&proxy, "first", 200);
    let got: Vec<f64> = (0..4).map(|i| received(&c, i) - before[i]).collect();
    // The leader (replica 0) received every request; a follower only the one that set up
    // its reply route, and those spread because the leader was slow to answer (a loaded
    // test machine).
    assert!(got[0] >= 200.0, "{got:?}");
    for (i, g) in got.iter().enumerate().skip(1) {
        assert!(
            *g < 100.0,
            "follower {i} received {g} of 200 requests: {got:?}"
        );
    }
    // The leader dies: requests go to every member (the first ones make the followers' timers
    // replace the leader) until f + 1 replicas name the new leader (replica 1, regency 1);
    // then to it first.
    c.kill(0);
    puts(&proxy, "after-kill", 20);
    wait_until("regency 1 is installed", READY, || {
        (1..4).all(|i| regency_of(&c, i) >= 1)
    });
    let before: Vec<f64> = (1..4).map(|i| received(&c, i)).collect();
    puts(&proxy, "second", 200);
    let got: Vec<f64> = (1..4).map(|i| received(&c, i) - before[i - 1]).collect();
    assert!(got[0] >= 200.0, "the new leader: {got:?}");
    assert!(got[1] < 100.0 && got[2] < 100.0, "followers: {got:?}");
}

#[test]
fn a_replica_that_stops_reading_does_not_block_clients() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster(4, Mode::Bft);
    let proxy = c.proxy(READY).unwrap();
    still_serves(&c, &proxy, "start");
    // Freeze replica 3 (SIGSTOP): it stops reading, so its socket buffers fill up. The client
    // must keep completing requests with the other three replicas.
    let pid = c.pid(3).expect("replica 3 runs").to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let value = Bytes::from(vec![7u8; 32 << 10]);
    let started = Instant::now();
    for i in 0..320 {
        let op = KvOp::Put {
            key: Bytes::from(format!("big/{}", i % 8)),
            value: value.clone(),
        };
        let reply = proxy.invoke_ordered(op.encode());
        assert!(
            reply.is_ok(),
            "request {i} after {:?}: {reply:?}",
            started.elapsed()
        );
    }
    let elapsed = started.elapsed();
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status();
    // Without per-link writer threads the client blocks on the frozen replica's full socket
    // until the 10 s write-stall timeout, once per reconnection.
    assert!(
        elapsed < Duration::from_secs(8),
        "10 MB of requests took {elapsed:?}"
    );
    still_serves(&c, &proxy, "continued");
}

/// The administrator removes replica `removed` from a running BFT cluster of five
/// while clients write; the change is ordered, every replica installs view 1, the clients
/// (whose requests still name view 0) learn it from the replicas and go on, and the four
/// members converge.
fn remove_under_load(removed: u32) {
    use tagma_core::view::sign_change;
    use tagma_wire::{ReconfigureOutcome, ViewOp};
    let admin = IdentityKey::from_seed([0xad; 32]);
    let admin_key = admin.public().to_hex();
    let mut c = LocalCluster::launch(exe(), 5, Mode::Bft, move |cfg| {
        cfg.admin = Some(tagma_core::config::AdminEntry {
            public_key: admin_key.clone(),
        });
        // The removed replica serves lagging peers for 5 request timeouts (10 s), then exits.
        cfg.timeouts.request_timeout_ms = 2_000;
    })
    .expect("start a local cluster");
    let proxy = c.proxy(READY).expect("connect the administrator's client");
    let opts = WorkloadOptions {
        duration: Duration::from_secs(60),
        ops_per_client: Some(300),
        ..Default::default()
    };
    let report = std::thread::scope(|s| {
        let load = s.spawn(|| {
            workload::run(
                proxies(&c, 4),
                &opts,
                &AtomicU64::new(0),
                &AtomicBool::new(false),
            )
        });
        std::thread::sleep(Duration::from_millis(500));
        let change = sign_change(&admin, ViewId(0), vec![ViewOp::Remove(ReplicaId(removed))]);
        let outcome = proxy.reconfigure(&change).expect("the change is ordered");
        let ReconfigureOutcome::Installed(view) = outcome else {
            panic!("the administrator's change was refused: {outcome:?}");
        };
        assert_eq!((view.id, view.members.len(), view.f), (ViewId(1), 4, 1));
        assert!(view.members.iter().all(|m| m.id != ReplicaId(removed)));
        // The same change again names a view that is no longer installed: refused.
        let again = proxy.reconfigure(&change).expect("ordered");
        assert!(
            matches!(&again, ReconfigureOutcome::Refused(r) if r.contains("view 0 but view 1")),
            "{again:?}"
        );
        load.join().expect("the load ran")
    });
    assert_history_clean(&c, &report, "clients across a view change");
    assert_eq!(report.completed, 4 * 300, "every operation completed");
    for i in 0..5 {
        assert_eq!(
            c.metric(i, "tagma_view"),
            1.0,
            "replica {i} installed view 1"
        );
    }
    let members: Vec<ReplicaId> = (0..5).filter(|i| *i != removed).map(ReplicaId).collect();
    let states = assert_converged(&c, &members, Duration::from_secs(30));
    assert!(states[0].executed_requests >= 4 * 300 / 2, "{states:?}");
    // The removed replica, still serving during its grace period, orders nothing more.
    let executed = |i: usize| {
        let addr = c.cfg.replicas[i].metrics_addr.expect("metrics address");
        scrape(addr)
            .ok()
            .and_then(|text| tagma_node::metrics::value(&text, "tagma_executed_instances"))
    };
    let gone = executed(removed as usize).expect("the removed replica serves during its grace");
    let member = executed(members[0].0 as usize).expect("a member serves");
    assert!(
        gone < member,
        "replica {removed} at {gone}, replica {} at {member}",
        members[0]
    );
    // After its grace period the removed replica's process exits on its own.
    wait_until("the removed replica exits", Duration::from_secs(40), || {
        !c.is_running(removed as usize)
    });
    if removed == 0 {
        // Leadership passed to the next member with the view, without a leader change.
        for m in &members {
            assert_eq!(c.metric(m.0 as usize, "tagma_leader"), 1.0);
            assert_eq!(c.metric(m.0 as usize, "tagma_regency"), 0.0);
        }
    }
}

/// A BFT cluster of `n` with durable state (joiners fetch their state by state transfer),
/// small checkpoint periods, and the administrator key `admin`.
fn durable_cluster(n: usize, admin: &IdentityKey) -> LocalCluster {
    let admin_key = admin.public().to_hex();
    LocalCluster::launch(exe(), n, Mode::Bft, move |cfg| {
        cfg.admin = Some(tagma_core::config::AdminEntry {
            public_key: admin_key.clone(),
        });
        cfg.storage.durability = tagma_core::config::Durability::Fsync;
        cfg.storage.checkpoint_period = 40;
        cfg.limits.decisions_kept = 16;
    })
    .expect("start a local cluster")
}

/// A fifth replica joins a BFT cluster of four under load: `tagma replica --join` waits for
/// the administrator's change, learns the view from the members, fetches the state (decided
/// in view 0, which it never knew) by state transfer, and ends with the same digest.
#[test]
fn a_replica_is_added_under_load_and_reaches_the_same_digest() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let admin = IdentityKey::from_seed([0xad; 32]);
    let mut c = durable_cluster(4, &admin);
    let admin_proxy = c.proxy(READY).expect("connect the administrator's client");
    let opts = WorkloadOptions {
        duration: Duration::from_secs(90),
        ops_per_client: Some(400),
        ..Default::default()
    };
    let clients = proxies(&c, 4);
    let report = std::thread::scope(|s| {
        let load =
            s.spawn(|| workload::run(clients, &opts, &AtomicU64::new(0), &AtomicBool::new(false)));
        std::thread::sleep(Duration::from_millis(1500));
        let (_, view) = add_replica(&mut c, &admin, &admin_proxy, 4, ViewId(0));
        assert_eq!((view.id, view.members.len(), view.f), (ViewId(1), 5, 1));
        load.join().expect("the load ran")
    });
    assert_history_clean(&c, &report, "clients across a join");
    assert_eq!(report.completed, 4 * 400, "every operation completed");
    // A little more load after the join, in the new view.
    let proxy = c.proxy(READY).expect("connect");
    still_serves(&c, &proxy, "after the join");
    let states = all_in_view(&c, 1);
    assert!(states[0].executed_requests >= 4 * 400 / 2, "{states:?}");
}

/// f goes from 1 to 2 the way an operator does it: three replicas join one after the other
/// (n = 4 → 7), then `SetF(2)`; clients keep running throughout and end up voting with the
/// new quorums.
#[test]
fn f_grows_from_one_to_two_as_three_replicas_join_under_load() {
    use tagma_wire::{ReconfigureOutcome, ViewOp};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let admin = IdentityKey::from_seed([0xad; 32]);
    let mut c = durable_cluster(4, &admin);
    let admin_proxy = c.proxy(READY).expect("connect the administrator's client");
    let opts = WorkloadOptions {
        duration: Duration::from_secs(180),
        ..Default::default()
    };
    let stop = AtomicBool::new(false);
    let clients = proxies(&c, 3);
    let report = std::thread::scope(|s| {
        let load = s.spawn(|| workload::run(clients, &opts, &AtomicU64::new(0), &stop));
        std::thread::sleep(Duration::from_millis(1000));
        let mut view = ViewId(0);
        for id in 4..7 {
            view = add_replica(&mut c, &admin, &admin_proxy, id, view).1.id;
        }
        let outcome = admin_proxy
            .reconfigure(&tagma_core::view::sign_change(
                &admin,
                view,
                vec![ViewOp::SetF(2)],
            ))
            .expect("ordered");
        let ReconfigureOutcome::Installed(last) = outcome else {
            panic!("f = 2 refused: {outcome:?}");
        };
        assert_eq!((last.id, last.members.len(), last.f), (ViewId(4), 7, 2));
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, Ordering::Relaxed);
        load.join().expect("the load ran")
    });
    assert_history_clean(&c, &report, "clients while f grows");
    assert!(report.completed > 0);
    let proxy = c.proxy(READY).expect("connect");
    still_serves(&c, &proxy, "with f = 2");
    all_in_view(&c, 4);
}

#[test]
fn a_follower_is_removed_under_load_and_the_others_serve_on_in_the_new_view() {
    remove_under_load(4);
}

#[test]
fn the_leader_is_removed_under_load_and_the_next_member_leads_at_once() {
    remove_under_load(0);
}

/// `tagma view`: show the view, remove a replica, and get clear refusals for an f the view
/// cannot tolerate and for adding a replica with a member's key.
#[test]
fn the_view_command_shows_and_changes_the_replica_set() {
    let c = cluster(5, Mode::Bft);
    let dir = c.dir.to_str().expect("utf-8 path").to_string();
    let view = |args: &[&str]| {
        let out = std::process::Command::new(exe())
            .args(["view", "--dir", &dir])
            .args(args)
            .output()
            .expect("run tagma view");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, shown, err) = view(&["show"]);
    assert!(ok, "{err}");
    assert!(shown.starts_with("view 0 (f = 1, 5 members)"), "{shown}");
    let (ok, removed, err) = view(&["remove", "--id", "3"]);
    assert!(ok, "{err}");
    assert!(
        removed.starts_with("view 1 (f = 1, 4 members)"),
        "{removed}"
    );
    assert!(!removed.contains("replica 3 "), "{removed}");
    let (ok, shown, err) = view(&["show"]);
    assert!(ok, "{err}");
    assert_eq!(shown, removed, "show prints the installed view");
    let (ok, _, err) = view(&["set-f", "2"]);
    assert!(!ok);
    assert!(
        err.contains("4 members cannot tolerate f = 2 in bft mode (it needs 7)"),
        "{err}"
    );
    let key = c.dir.join("keys").join("replica-0.key");
    let (ok, _, err) = view(&[
        "add",
        "--id",
        "9",
        "--addr",
        "127.0.0.1:7999",
        "--key",
        key.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("replica 9's key is already a member's: each member needs its own key"),
        "{err}"
    );
    // The remaining members still serve, in view 1.
    let proxy = c.proxy(READY).expect("connect");
    still_serves(&c, &proxy, "after tagma view remove");
    let members: Vec<ReplicaId> = [0, 1, 2, 4].into_iter().map(ReplicaId).collect();
    assert_converged(&c, &members, Duration::from_secs(30));
}

/// Every configured replica but one leaves (three join first): a new client with the original
/// tagma.toml reaches one configured replica — too few for a reply quorum — and finds the
/// current members from the administrator's signed history, which it replays itself.
#[test]
fn a_new_client_finds_the_members_after_the_configured_replicas_left() {
    use tagma_wire::{ReconfigureOutcome, ViewOp};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let admin = IdentityKey::from_seed([0xad; 32]);
    let mut c = durable_cluster(4, &admin);
    let proxy = c.proxy(READY).expect("connect the administrator's client");
    still_serves(&c, &proxy, "before the changes");
    let mut view = ViewId(0);
    for id in 4..7 {
        view = add_replica(&mut c, &admin, &proxy, id, view).1.id;
    }
    for id in 0..3 {
        let change =
            tagma_core::view::sign_change(&admin, view, vec![ViewOp::Remove(ReplicaId(id))]);
        let ReconfigureOutcome::Installed(next) = proxy.reconfigure(&change).expect("ordered")
        else {
            panic!("removing replica {id} was refused");
        };
        view = next.id;
    }
    assert_eq!(view, ViewId(6));
    for i in 0..3 {
        c.kill(i);
    }
    // Only replica 3 of the configured four answers.
    let original = tagma_node::cluster_dir::load_config(&c.dir).expect("tagma.toml");
    assert_eq!(original.n(), 4);
    let newcomer = Proxy::connect(
        &original,
        c.client_key().expect("client key"),
        tagma_client::ClientOptions::new(tagma_node::cluster_dir::DEFAULT_CLIENT_PRINCIPAL),
    )
    .expect("the client finds the current members");
    let current = newcomer
        .current_view(Duration::from_secs(5))
        .expect("the current view");
    assert_eq!(current.id, ViewId(6));
    let ids: Vec<u32> = current.members.iter().map(|m| m.id.0).collect();
    assert_eq!(ids, [3, 4, 5, 6]);
    let put = KvOp::Put {
        key: Bytes::from_static(b"bootstrapped"),
        value: Bytes::from_static(b"yes"),
    };
    let reply = newcomer
        .invoke_ordered(put.encode())
        .expect("ordered by the new members");
    assert!(matches!(
        KvReply::decode(&reply).unwrap(),
        KvReply::Put { .. }
    ));
    let members: Vec<ReplicaId> = ids.into_iter().map(ReplicaId).collect();
    let states = c
        .converged_states(&newcomer, &members, Duration::from_secs(30))
        .expect("the members converge");
    assert!(tagma_cluster::digests_equal(&states), "{states:?}");
}

/// The list and tuple-space services, replicated, each replica executing batches on two workers: the list
/// with the dependency-graph scheduler and the service's classifier, and with the
/// barrier scheduler and the groups clients name (`invoke_parallel`); the tuple space (TS2)
/// with the graph scheduler. Concurrent clients mix reads and writes, and every replica ends
/// with the same state.
#[test]
fn replicas_executing_in_parallel_reach_the_same_state() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    parallel_cluster("list", "graph", "service");
    parallel_cluster("list", "barrier", "groups");
    parallel_cluster("tuplespace-ts2", "graph", "service");
}

fn parallel_cluster(service: &str, policy: &str, classify: &str) {
    use tagma_parallel::Group;
    use tagma_parallel::list::ListOp;
    let opts = tagma_cluster::LaunchOptions {
        replicas: 4,
        mode: Mode::Bft,
        f: None,
        service: Some(service.into()),
        replica_args: [
            "--exec-threads",
            "2",
            "--exec-policy",
            policy,
            "--state-size",
            "2000",
            "--exec-classify",
            classify,
        ]
        .map(String::from)
        .to_vec(),
        unreplicated: false,
    };
    let by_group = classify == "groups";
    let space = service.starts_with("tuplespace");
    // The replicas' initial tuples (the seed `tagma replica` uses).
    let initial = tagma_bench::exec::initial_tuples(2000, tagma_bench::exec::TUPLES_SEED);
    let c = LocalCluster::launch_with(exe(), &opts, |_| {}).expect("start a local cluster");
    let clients = proxies(&c, 3);
    std::thread::scope(|s| {
        for (k, proxy) in clients.iter().enumerate() {
            let initial = &initial;
            s.spawn(move || {
                for i in 0..150i64 {
                    if space {
                        let op = tagma_bench::exec::space_op(initial, 40, k, i as u64);
                        let reply = proxy.invoke_ordered(op).expect("ordered");
                        assert!(reply[0] <= 1, "answered {reply:?}");
                        continue;
                    }
                    let op = match i % 5 {
                        0 => ListOp::Add(10_000 + 1_000 * k as i64 + i),
                        1 => ListOp::Remove(i * 7 % 2_000),
                        2 => ListOp::Get(i * 13 % 2_000),
                        _ => ListOp::Contains(i * 11 % 2_500),
                    };
                    let reply = if by_group {
                        let group = if op.writes() { Group::All } else { Group::None };
                        proxy.invoke_parallel(op.encode(), group)
                    } else {
                        proxy.invoke_ordered(op.encode())
                    }
                    .expect("ordered");
                    assert!(reply[0] <= 1, "{op:?} answered {reply:?}");
                }
            });
        }
    });
    let all: Vec<ReplicaId> = (0..4).map(ReplicaId).collect();
    let states = assert_converged(&c, &all, Duration::from_secs(30));
    assert!(states[0].executed_requests >= 450, "{states:?}");
}
