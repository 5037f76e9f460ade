//! Snapshots: a service restored from one — waiting operations, leases and counters
//! included — continues exactly like the original; damaged snapshots are errors that leave
//! the state as it was, never panics; and the executor's conformance suite passes.

mod common;

use bytes::Bytes;
use common::*;
use tagma_exec::Service;
use tagma_exec::conformance::check_service;
use tagma_space::{SpaceReply, SpaceRequest};
use tagma_space_service::{SpaceLimits, SpaceService};

/// A service with two spaces (one destroyed before, so the revision floor moved), tuples with
/// and without leases, and waiting `rd`s and `in`s.
fn busy() -> Harness {
    let mut h = Harness::new();
    h.now(1, create("gone"));
    for i in 0..3 {
        h.now(1, out("gone", &format!("({i})")));
    }
    h.now(1, destroy("gone"));
    h.now(1, create("jobs"));
    h.now(
        2,
        create_with("locks", "take: creator, 3\nunique (\"lock\", *)"),
    );
    h.now(1, out("jobs", "(\"job\", 1, 0x00ff)"));
    h.now(1, out_leased("jobs", "(\"job\", 2, 0x)", 400)); // ends 1400
    h.now(2, cas("locks", "(\"lock\", *)", "(\"lock\", 2)", Some(700))); // ends 1700
    h.batch(vec![
        (client(4), rd("jobs", "(\"done\", *int)", 300)), // deadline 1300
        (client(5), in_("jobs", "(\"done\", *int)", 900)), // deadline 1900
        (client(3), in_("locks", "(\"token\")", 2_000)),  // deadline 3000
        (client(6), rd("jobs", "(\"done\", 1)", 2_000)),  // deadline 3000
    ]);
    h
}

/// What both services then do: time passes over deadlines and lease ends, inserts wake
/// waiting operations, the lock changes hands.
fn continue_on(h: &mut Harness) -> Vec<String> {
    let mut log = Vec::new();
    let mut note = |h: &mut Harness, replies: Vec<Option<SpaceReply>>| {
        log.push(format!(
            "{replies:?} {:?} {:?}",
            h.late(),
            h.service.next_due_ms()
        ));
    };
    let r = h.batch_at(1_300, vec![(client(1), rd_all("jobs", "(*, *, *)", 10))]);
    note(h, r);
    let r = h.batch_at(1_400, vec![(client(1), out("jobs", "(\"done\", 1)"))]);
    note(h, r);
    let r = h.batch_at(
        1_700,
        vec![
            (
                client(3),
                cas("locks", "(\"lock\", *)", "(\"lock\", 3)", None),
            ),
            (client(2), out("locks", "(\"token\")")),
        ],
    );
    note(h, r);
    let r = h.batch_at(3_000, vec![(client(1), list())]);
    note(h, r);
    let r = h.batch_at(3_001, vec![(client(1), out("jobs", "(\"job\", 3, 0x01)"))]);
    note(h, r);
    log
}

#[test]
fn a_restored_service_continues_exactly_like_the_original() {
    let mut original = busy();
    for threads in [1, 4] {
        let mut restored = original.fork(threads);
        assert_eq!(
            restored.service.state_digest(),
            original.service.state_digest()
        );
        assert_eq!(restored.service.snapshot(), original.service.snapshot());
        assert_eq!(restored.service.next_due_ms(), Some(1_300));
        assert_eq!(restored.service.now_ms(), original.service.now_ms());
        let mut reference = original.fork(1);
        let expected = continue_on(&mut reference);
        assert_eq!(continue_on(&mut restored), expected, "threads {threads}");
        assert_eq!(
            restored.service.state_digest(),
            reference.service.state_digest()
        );
    }
    // What the continuation did, checked on the original itself.
    let log = continue_on(&mut original);
    assert!(
        log[0].contains("TimedOut"),
        "4's rd times out at 1300: {}",
        log[0]
    );
    assert!(
        log[1].contains("\"done\""),
        "(done, 1) wakes 5's in first: {}",
        log[1]
    );
    assert_eq!(
        original.now(1, rdp("jobs", "(\"job\", 2, *)")),
        SpaceReply::Tuple(None),
        "the leased job ended at 1400"
    );
    // Revisions in the new spaces continue above the destroyed space's.
    let job = found(&original.now(1, rdp("jobs", "(\"job\", 1, *)"))).revision;
    assert!(job > 3, "revision {job}");
}

#[test]
fn damaged_snapshots_are_errors_and_leave_the_state_as_it_was() {
    let h = busy();
    let valid = h.service.snapshot();
    let mut target = Harness::new();
    target.now(9, create("mine"));
    let digest = target.service.state_digest();
    for cut in 0..valid.len() {
        assert!(
            target
                .service
                .install_snapshot(&valid.slice(..cut))
                .is_err(),
            "cut at {cut}"
        );
    }
    let mut extended = valid.to_vec();
    extended.push(0);
    assert!(
        target
            .service
            .install_snapshot(&Bytes::from(extended))
            .is_err()
    );
    let mut versioned = valid.to_vec();
    versioned[0] = 2;
    assert!(
        target
            .service
            .install_snapshot(&Bytes::from(versioned))
            .is_err()
    );
    // Flipped bytes: an error or a state that snapshots canonically; never a panic.
    for at in 0..valid.len() {
        let mut damaged = valid.to_vec();
        damaged[at] ^= 0x5a;
        let damaged = Bytes::from(damaged);
        let mut other = SpaceService::default();
        if other.install_snapshot(&damaged).is_ok() {
            assert_eq!(other.snapshot(), damaged, "byte {at}");
        }
    }
    assert_eq!(
        target.service.state_digest(),
        digest,
        "failed installs changed nothing"
    );
}

#[test]
fn the_snapshot_orders_its_records_and_refuses_others() {
    let mut h = Harness::new();
    h.now(1, create("a"));
    h.now(1, out("a", "(1)"));
    h.now(1, out("a", "(2)"));
    let valid = h.service.snapshot().to_vec();
    // Header (17) | create a: tag, name (2), creator (4), counters (16), policy (8) | out.
    let first_out = 17 + 1 + 2 + 4 + 16 + 8;
    assert_eq!(valid[first_out], 2, "an out record");
    let out_len = 1 + 8 + 4 + 1 + 10;
    let mut swapped = valid.clone();
    let (a, b) = (first_out, first_out + out_len);
    let first: Vec<u8> = valid[a..b].to_vec();
    let second: Vec<u8> = valid[b..b + out_len].to_vec();
    swapped[a..b].copy_from_slice(&second);
    swapped[b..b + out_len].copy_from_slice(&first);
    let err = SpaceService::default()
        .install_snapshot(&Bytes::from(swapped))
        .unwrap_err();
    assert!(err.to_string().contains("out of order"), "{err}");
}

/// A workload of every operation, with timeouts and leases short enough to run out during
/// it (the suite's batches are 7 ms apart).
fn workload() -> Vec<Bytes> {
    let mut w: Vec<SpaceRequest> = vec![
        create("a"),
        create("b"),
        create_with("c", "unique (\"u\", *)"),
    ];
    for i in 0..12u32 {
        let s = ["a", "b", "c"][i as usize % 3];
        w.push(out(s, &format!("(\"t\", {i})")));
        w.push(in_(
            s,
            &format!("(\"w\", {})", i % 4),
            10 + 5 * u64::from(i % 5),
        ));
        w.push(rd(s, &format!("(\"r\", {})", i % 2), 30));
        w.push(out_leased(s, &format!("(\"l\", {i})"), 15 + u64::from(i)));
        if i % 3 == 0 {
            w.push(out(s, &format!("(\"w\", {})", i % 4)));
            w.push(out(s, "(\"r\", 0)"));
        }
        w.push(cas(s, "(\"u\", *)", &format!("(\"u\", {i})"), Some(20)));
        w.push(rdp(s, "(\"t\", *)"));
        w.push(inp(s, "(\"l\", *int)"));
        w.push(replace(
            s,
            "(\"t\", *int)",
            &format!("(\"t\", {})", i + 100),
        ));
        w.push(renew(s, "(\"l\", *)", 50));
        if i % 4 == 1 {
            w.push(rd_all(s, "(*, *)", 5));
            w.push(in_all(s, "(\"t\", *)", 2));
            w.push(list());
        }
        if i == 7 {
            w.push(destroy("b"));
            w.push(create("b"));
        }
    }
    let mut bytes: Vec<Bytes> = w.iter().map(SpaceRequest::encode).collect();
    bytes.push(Bytes::from_static(b"\xff\x00"));
    bytes
}

#[test]
fn the_service_passes_the_conformance_suite_on_one_thread_and_several() {
    let workload = workload();
    check_service(SpaceService::default, &workload).unwrap();
    check_service(
        || {
            SpaceService::new(SpaceLimits::default())
                .unwrap()
                .with_threads(3)
                .unwrap()
                .with_parallel_min(1)
        },
        &workload,
    )
    .unwrap();
    check_service(SpaceService::default, &[]).unwrap();
}
