//! Every bound at execution: shapes, tuples and bytes per space, waiting operations per
//! space and per principal, timeouts and leases out of range, spaces, policies that do not
//! fit.

mod common;

use common::*;
use tagma_exec::Service;
use tagma_space::{Limits, ShapeError, SpaceError, SpaceReply, WaitScope};
use tagma_space_service::SpaceLimits;

fn limits() -> SpaceLimits {
    SpaceLimits {
        typed: Limits {
            arity_max: 3,
            field_bytes_max: 8,
            tuple_bytes_max: 30,
        },
        spaces_max: 2,
        tuples_per_space_max: 3,
        space_bytes_max: 1_000,
        waits_per_space_max: 3,
        waits_per_client_max: 2,
        wait_ms_max: 10_000,
        lease_ms_max: 5_000,
        all_max: 10,
        reply_bytes_max: 1_000,
        taken_keep_ms: 60_000,
        taken_per_space_max: 4,
        taken_bytes_max: 1_000,
    }
}

fn harness() -> Harness {
    let mut h = Harness::with(limits(), 1);
    h.now(1, create("s"));
    h
}

#[test]
fn tuples_beyond_the_typed_limits_are_shape_errors() {
    let mut h = harness();
    assert_eq!(
        h.now(1, out("s", "(1, 2, 3, 4)")),
        SpaceReply::Error(SpaceError::Shape(ShapeError::TooManyFields {
            arity: 4,
            max: 3
        }))
    );
    assert_eq!(
        h.now(1, rdp("s", "(\"123456789\")")),
        SpaceReply::Error(SpaceError::Shape(ShapeError::FieldTooLarge {
            index: 0,
            len: 9,
            max: 8
        }))
    );
    assert!(matches!(
        h.now(1, out("s", "(\"12345678\", \"12345678\", \"12345678\")")),
        SpaceReply::Error(SpaceError::Shape(ShapeError::TupleTooLarge { .. }))
    ));
    assert_eq!(h.now(1, rdp("s", "(*)")), SpaceReply::Tuple(None));
}

#[test]
fn a_full_space_refuses_inserts_until_a_tuple_leaves() {
    let mut h = harness();
    for i in 0..3 {
        assert!(matches!(
            h.now(1, out("s", &format!("({i})"))),
            SpaceReply::Inserted(_)
        ));
    }
    let full = SpaceReply::Error(SpaceError::SpaceFull {
        space: "s".into(),
        max: 3,
    });
    assert_eq!(h.now(1, out("s", "(3)")), full);
    assert_eq!(h.now(1, cas("s", "(9)", "(9)", None)), full);
    // replace frees the slot it fills.
    assert!(matches!(
        h.now(1, replace("s", "(0)", "(10)")),
        SpaceReply::Replaced(Some(_))
    ));
    h.now(1, inp("s", "(*)"));
    assert!(matches!(h.now(1, out("s", "(3)")), SpaceReply::Inserted(_)));
}

#[test]
fn a_space_refuses_what_would_pass_its_bytes() {
    let mut h = Harness::with(
        SpaceLimits {
            space_bytes_max: 250,
            tuples_per_space_max: 100,
            ..limits()
        },
        1,
    );
    h.now(1, create("s"));
    // A tuple of one integer counts 10 + 64 bytes: three fit in 250, a fourth does not.
    for i in 0..3 {
        assert!(matches!(
            h.now(1, out("s", &format!("({i})"))),
            SpaceReply::Inserted(_)
        ));
    }
    assert_eq!(
        h.now(1, out("s", "(3)")),
        SpaceReply::Error(SpaceError::SpaceTooLarge {
            space: "s".into(),
            bytes_max: 250
        })
    );
    // A waiting template counts too.
    assert!(matches!(
        h.call(2, rd("s", "(\"none\")", 100)),
        Some(SpaceReply::Error(SpaceError::SpaceTooLarge { .. }))
    ));
}

#[test]
fn waits_are_capped_per_principal_and_per_space() {
    let mut h = harness();
    assert_eq!(h.call(1, rd("s", "(1)", 5_000)), None);
    assert_eq!(h.call(1, in_("s", "(1)", 5_000)), None);
    assert_eq!(
        h.call(1, rd("s", "(2)", 5_000)),
        Some(SpaceReply::Error(SpaceError::TooManyWaits {
            scope: WaitScope::Client,
            max: 2
        }))
    );
    assert_eq!(
        h.call(2, rd("s", "(2)", 5_000)),
        None,
        "another principal may wait"
    );
    assert_eq!(
        h.call(3, rd("s", "(3)", 5_000)),
        Some(SpaceReply::Error(SpaceError::TooManyWaits {
            scope: WaitScope::Space,
            max: 3
        }))
    );
    // An answered wait frees its place: (1) satisfies both of principal 1's.
    h.now(4, out("s", "(1)"));
    assert_eq!(h.late().len(), 2);
    assert_eq!(h.call(1, rd("s", "(4)", 5_000)), None);
    assert_eq!(h.call(3, rd("s", "(3)", 5_000)), None);
}

/// Spaces of one segment count a principal's waits as they were before it, so one batch can
/// pass the per-principal cap once per space — alike on any number of threads — and the
/// next batch sees the total.
#[test]
fn the_per_principal_cap_counts_other_spaces_from_the_batch_before() {
    for threads in [1, 3] {
        let mut h = Harness::with(
            SpaceLimits {
                waits_per_client_max: 1,
                spaces_max: 3,
                ..limits()
            },
            threads,
        );
        h.batch(vec![
            (client(1), create("a")),
            (client(1), create("b")),
            (client(1), create("c")),
        ]);
        let replies = h.batch(vec![
            (client(7), rd("a", "(1)", 5_000)),
            (client(7), rd("b", "(1)", 5_000)),
            (client(7), rd("b", "(2)", 5_000)),
        ]);
        assert_eq!(replies[0], None, "threads {threads}");
        assert_eq!(replies[1], None);
        assert!(matches!(
            replies[2],
            Some(SpaceReply::Error(SpaceError::TooManyWaits {
                scope: WaitScope::Client,
                ..
            }))
        ));
        assert!(matches!(
            h.call(7, rd("c", "(1)", 5_000)),
            Some(SpaceReply::Error(SpaceError::TooManyWaits { .. }))
        ));
    }
}

#[test]
fn timeouts_and_leases_out_of_range_are_refused() {
    let mut h = harness();
    for timeout_ms in [0, 10_001, u64::MAX] {
        for request in [rd("s", "(1)", timeout_ms), in_("s", "(1)", timeout_ms)] {
            assert_eq!(
                h.call(1, request),
                Some(SpaceReply::Error(SpaceError::BadTimeout {
                    timeout_ms,
                    max_ms: 10_000
                }))
            );
        }
    }
    assert_eq!(h.service.next_due_ms(), None);
    for lease_ms in [0, 5_001, u64::MAX] {
        let bad = SpaceReply::Error(SpaceError::BadLease {
            lease_ms,
            max_ms: 5_000,
        });
        assert_eq!(h.now(1, out_leased("s", "(1)", lease_ms)), bad);
        assert_eq!(h.now(1, cas("s", "(1)", "(1)", Some(lease_ms))), bad);
    }
    assert_eq!(h.now(1, rdp("s", "(*)")), SpaceReply::Tuple(None));
    // The largest of each is fine.
    assert_eq!(h.call(1, rd("s", "(1)", 10_000)), None);
    assert!(matches!(
        h.now(1, out_leased("s", "(2)", 5_000)),
        SpaceReply::Inserted(_)
    ));
}

#[test]
fn spaces_are_capped_and_policies_must_fit_the_limits() {
    let mut h = harness();
    assert_eq!(h.now(1, create("t")), SpaceReply::Created);
    assert_eq!(
        h.now(1, create("u")),
        SpaceReply::Error(SpaceError::TooManySpaces { max: 2 })
    );
    h.now(1, destroy("t"));
    let reply = h.now(1, create_with("u", "insert requires field 3 = invoker"));
    assert!(
        matches!(&reply, SpaceReply::Error(SpaceError::BadPolicy(m)) if m.contains("field 3")),
        "{reply:?}"
    );
    // A template wider than the limits does not even decode.
    assert_eq!(
        h.now(1, create_with("u", "unique (1, 2, 3, 4)")),
        SpaceReply::Error(SpaceError::Shape(ShapeError::TooManyFields {
            arity: 4,
            max: 3
        }))
    );
    assert_eq!(h.now(1, create("u")), SpaceReply::Created);
}
