//! Each operation of the coordination service on its own: matching order, what each returns
//! and changes, cas and replace, rdAll and inAll bounds, renew, the lock recipe with its
//! fencing revision, create, destroy and list, malformed requests, unordered reads.

mod common;

use bytes::Bytes;
use common::*;
use tagma_exec::Service;
use tagma_space::{
    CasOutcome, Receipt, Replacement, ShapeError, SpaceError, SpaceInfo, SpaceReply, Stored,
};
use tagma_space_service::SpaceLimits;

fn with_space() -> Harness {
    let mut h = Harness::new();
    assert_eq!(h.now(1, create("jobs")), SpaceReply::Created);
    h
}

fn stored(t: &str, revision: u64, lease_expires_ms: Option<u64>) -> Stored {
    Stored {
        tuple: tuple(t),
        revision,
        lease_expires_ms,
        sealed: None,
    }
}

#[test]
fn matching_takes_the_oldest_match_and_inp_removes_it() {
    let mut h = with_space();
    for t in ["(\"k\", 1)", "(\"j\", 2)", "(\"k\", 3)"] {
        h.now(1, out("jobs", t));
    }
    assert_eq!(
        h.now(2, rdp("jobs", "(\"k\", *int)")),
        SpaceReply::Tuple(Some(stored("(\"k\", 1)", 1, None)))
    );
    assert_eq!(
        h.now(2, rdp("jobs", "(*str, *int)")),
        SpaceReply::Tuple(Some(stored("(\"k\", 1)", 1, None))),
        "rdp leaves the tuple"
    );
    assert_eq!(
        h.now(2, inp("jobs", "(\"k\", *)")),
        SpaceReply::Tuple(Some(stored("(\"k\", 1)", 1, None)))
    );
    assert_eq!(
        h.now(2, inp("jobs", "(\"k\", *)")),
        SpaceReply::Tuple(Some(stored("(\"k\", 3)", 3, None)))
    );
    assert_eq!(h.now(2, inp("jobs", "(\"k\", *)")), SpaceReply::Tuple(None));
    // Another arity or type never matches.
    assert_eq!(h.now(2, rdp("jobs", "(*)")), SpaceReply::Tuple(None));
    assert_eq!(h.now(2, rdp("jobs", "(*int, *)")), SpaceReply::Tuple(None));
    assert_eq!(
        h.now(2, rdp("jobs", "(*, *)")),
        SpaceReply::Tuple(Some(stored("(\"j\", 2)", 2, None)))
    );
}

#[test]
fn out_answers_its_revision_and_the_absolute_end_of_its_lease() {
    let mut h = with_space();
    assert_eq!(
        h.now(1, out("jobs", "(1)")),
        SpaceReply::Inserted(Receipt {
            revision: 1,
            lease_expires_ms: None
        })
    );
    assert_eq!(
        h.now(1, out_leased("jobs", "(2)", 500)),
        SpaceReply::Inserted(Receipt {
            revision: 2,
            lease_expires_ms: Some(1_500)
        })
    );
    assert_eq!(
        h.now(1, rdp("jobs", "(2)")),
        SpaceReply::Tuple(Some(stored("(2)", 2, Some(1_500))))
    );
}

#[test]
fn rd_all_and_in_all_return_up_to_max_oldest_first() {
    let mut h = with_space();
    for i in 1..=5 {
        h.now(1, out("jobs", &format!("(\"t\", {i})")));
    }
    let values = |reply: SpaceReply| match reply {
        SpaceReply::Tuples(tuples) => tuples.into_iter().map(|s| s.revision).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(values(h.now(1, rd_all("jobs", "(\"t\", *)", 3))), [1, 2, 3]);
    assert_eq!(values(h.now(1, in_all("jobs", "(\"t\", *)", 2))), [1, 2]);
    assert_eq!(
        values(h.now(1, rd_all("jobs", "(\"t\", *)", 100))),
        [3, 4, 5]
    );
    assert_eq!(values(h.now(1, in_all("jobs", "(*, 4)", 100))), [4]);
    assert_eq!(values(h.now(1, rd_all("jobs", "(\"t\", *)", 100))), [3, 5]);
    for max in [0, SpaceLimits::default().all_max + 1] {
        assert_eq!(
            h.now(1, rd_all("jobs", "(*, *)", max)),
            SpaceReply::Error(SpaceError::BadCount {
                max,
                limit: SpaceLimits::default().all_max
            })
        );
        assert!(matches!(
            h.now(1, in_all("jobs", "(*, *)", max)),
            SpaceReply::Error(SpaceError::BadCount { .. })
        ));
    }
}

#[test]
fn rd_all_stops_before_its_reply_passes_reply_bytes_max() {
    let limits = SpaceLimits {
        typed: tagma_space::Limits {
            arity_max: 4,
            field_bytes_max: 100,
            tuple_bytes_max: 100,
        },
        reply_bytes_max: 300,
        ..SpaceLimits::default()
    };
    let mut h = Harness::with(limits, 1);
    h.now(1, create("big"));
    let text = format!("(\"{}\")", "x".repeat(50));
    for _ in 0..10 {
        h.now(1, out("big", &text));
    }
    // A stored tuple takes 1 + 5 + 50 + 8 + 1 = 65 bytes: 5 + 4 × 65 = 265 fit, 5 do not.
    let reply = h.now(1, rd_all("big", "(*)", 100));
    assert!(
        matches!(&reply, SpaceReply::Tuples(t) if t.len() == 4),
        "{reply:?}"
    );
    assert!(reply.encode().len() <= 300);
    let taken = h.now(1, in_all("big", "(*)", 100));
    assert!(matches!(&taken, SpaceReply::Tuples(t) if t.len() == 4));
    assert!(matches!(h.now(1, rd_all("big", "(*)", 100)), SpaceReply::Tuples(t) if t.len() == 4));
}

#[test]
fn cas_inserts_only_when_nothing_matches() {
    let mut h = with_space();
    assert_eq!(
        h.now(1, cas("jobs", "(\"cfg\", *)", "(\"cfg\", 1)", None)),
        SpaceReply::Cas(CasOutcome::Inserted(Receipt {
            revision: 1,
            lease_expires_ms: None
        }))
    );
    assert_eq!(
        h.now(2, cas("jobs", "(\"cfg\", *)", "(\"cfg\", 2)", None)),
        SpaceReply::Cas(CasOutcome::Exists(stored("(\"cfg\", 1)", 1, None)))
    );
    assert!(matches!(
        h.now(2, rd_all("jobs", "(*, *)", 10)),
        SpaceReply::Tuples(t) if t.len() == 1
    ));
    assert_eq!(
        h.now(2, cas("jobs", "(\"cfg\", *)", "(\"cfg\", 2, 3)", None)),
        SpaceReply::Error(SpaceError::ArityMismatch {
            template: 2,
            tuple: 3
        })
    );
}

#[test]
fn replace_swaps_the_oldest_match_and_does_nothing_without_one() {
    let mut h = with_space();
    assert_eq!(
        h.now(1, replace("jobs", "(\"n\", *int)", "(\"n\", 1)")),
        SpaceReply::Replaced(None)
    );
    assert_eq!(
        h.now(1, rdp("jobs", "(*, *)")),
        SpaceReply::Tuple(None),
        "nothing inserted"
    );
    h.now(1, out("jobs", "(\"n\", 0)"));
    assert_eq!(
        h.now(1, replace("jobs", "(\"n\", *int)", "(\"n\", 1)")),
        SpaceReply::Replaced(Some(Replacement {
            taken: stored("(\"n\", 0)", 1, None),
            inserted: Receipt {
                revision: 2,
                lease_expires_ms: None
            }
        }))
    );
    assert_eq!(
        h.now(1, rd_all("jobs", "(*, *)", 10)),
        SpaceReply::Tuples(vec![stored("(\"n\", 1)", 2, None)])
    );
    assert!(matches!(
        h.now(1, replace("jobs", "(\"n\", *int)", "(1)")),
        SpaceReply::Error(SpaceError::ArityMismatch { .. })
    ));
}

#[test]
fn renew_sets_the_lease_of_the_invokers_leased_matches_only() {
    let mut h = with_space();
    h.now(1, out_leased("jobs", "(\"a\", 1)", 100)); // ends 1100
    h.now(1, out("jobs", "(\"a\", 2)")); // no lease: untouched
    h.now(2, out_leased("jobs", "(\"a\", 3)", 100)); // another owner's
    h.now(1, out_leased("jobs", "(\"b\", 4)", 100)); // does not match
    h.time_passes_to(1_050);
    assert_eq!(
        h.now(1, renew("jobs", "(\"a\", *)", 1_000)),
        SpaceReply::Renewed(1)
    );
    h.time_passes_to(1_100);
    assert_eq!(h.late(), vec![], "expiry wakes no one");
    let left = h.now(1, rd_all("jobs", "(*, *)", 10));
    assert_eq!(
        left,
        SpaceReply::Tuples(vec![
            stored("(\"a\", 1)", 1, Some(2_050)),
            stored("(\"a\", 2)", 2, None)
        ])
    );
    for lease_ms in [0, SpaceLimits::default().lease_ms_max + 1] {
        assert_eq!(
            h.now(1, renew("jobs", "(*, *)", lease_ms)),
            SpaceReply::Error(SpaceError::BadLease {
                lease_ms,
                max_ms: SpaceLimits::default().lease_ms_max
            })
        );
    }
}

/// The lock recipe: two clients `cas` a leased lock tuple; one gets it with a fencing
/// revision, the other sees the holder; when the lease runs out the lock frees, and the next
/// holder's revision is higher.
#[test]
fn a_leased_lock_admits_one_holder_frees_after_its_lease_and_fences_with_revisions() {
    let mut h = Harness::new();
    h.now(1, create("locks"));
    let replies = h.batch(vec![
        (
            client(1),
            cas(
                "locks",
                "(\"lock\", \"db\", *)",
                "(\"lock\", \"db\", 1)",
                Some(1_000),
            ),
        ),
        (
            client(2),
            cas(
                "locks",
                "(\"lock\", \"db\", *)",
                "(\"lock\", \"db\", 2)",
                Some(1_000),
            ),
        ),
    ]);
    let first = match &replies[0] {
        Some(SpaceReply::Cas(CasOutcome::Inserted(receipt))) => *receipt,
        other => panic!("{other:?}"),
    };
    assert_eq!(first.lease_expires_ms, Some(2_000));
    assert_eq!(
        replies[1],
        Some(SpaceReply::Cas(CasOutcome::Exists(stored(
            "(\"lock\", \"db\", 1)",
            first.revision,
            Some(2_000)
        ))))
    );
    h.time_passes_to(1_999);
    assert!(matches!(
        h.now(
            2,
            cas(
                "locks",
                "(\"lock\", \"db\", *)",
                "(\"lock\", \"db\", 2)",
                Some(1_000)
            )
        ),
        SpaceReply::Cas(CasOutcome::Exists(_))
    ));
    h.time_passes_to(2_000);
    let second = match h.now(
        2,
        cas(
            "locks",
            "(\"lock\", \"db\", *)",
            "(\"lock\", \"db\", 2)",
            Some(1_000),
        ),
    ) {
        SpaceReply::Cas(CasOutcome::Inserted(receipt)) => receipt,
        other => panic!("{other:?}"),
    };
    assert!(second.revision > first.revision);
    // A space created again under the same name continues above the old revisions.
    h.now(1, destroy("locks"));
    h.now(1, create("locks"));
    let third = match h.now(
        1,
        cas(
            "locks",
            "(\"lock\", \"db\", *)",
            "(\"lock\", \"db\", 1)",
            None,
        ),
    ) {
        SpaceReply::Cas(CasOutcome::Inserted(receipt)) => receipt,
        other => panic!("{other:?}"),
    };
    assert!(third.revision > second.revision);
}

#[test]
fn create_destroy_and_list() {
    let mut h = Harness::new();
    assert_eq!(h.now(1, list()), SpaceReply::Spaces(vec![]));
    h.now(1, create("b"));
    h.now(2, create("a"));
    assert_eq!(
        h.now(1, create("a")),
        SpaceReply::Error(SpaceError::SpaceExists("a".into()))
    );
    h.now(1, out("b", "(1)"));
    h.call(3, rd("b", "(2)", 1_000));
    assert_eq!(
        h.now(3, list()),
        SpaceReply::Spaces(vec![
            SpaceInfo {
                name: "a".into(),
                tuples: 0,
                waiting: 0,
                protection: None,
            },
            SpaceInfo {
                name: "b".into(),
                tuples: 1,
                waiting: 1,
                protection: None,
            },
        ])
    );
    // Only the creator administers a space by default.
    assert!(matches!(h.now(2, destroy("b")), SpaceReply::Denied(_)));
    assert_eq!(h.now(1, destroy("b")), SpaceReply::Destroyed);
    for request in [out("b", "(1)"), rdp("b", "(1)"), destroy("b")] {
        assert_eq!(
            h.now(1, request),
            SpaceReply::Error(SpaceError::UnknownSpace("b".into()))
        );
    }
}

#[test]
fn malformed_bytes_and_bad_shapes_are_error_replies() {
    let mut h = with_space();
    let mut late = Vec::new();
    let ctx = h.context(client(1));
    for garbage in [&b""[..], b"\xff", b"\x04\x04jobs", b"\x03\x00"] {
        let replies = h
            .service
            .execute_ordered_run(&[(Bytes::copy_from_slice(garbage), ctx)], &mut late);
        let reply = decode(replies[0].as_ref().unwrap());
        assert!(
            matches!(reply, SpaceReply::Error(SpaceError::Malformed(_))),
            "{reply:?}"
        );
    }
    let wide = format!("({})", vec!["1"; 17].join(", "));
    assert_eq!(
        h.now(1, out("jobs", &wide)),
        SpaceReply::Error(SpaceError::Shape(ShapeError::TooManyFields {
            arity: 17,
            max: 16
        }))
    );
    assert!(late.is_empty());
}

#[test]
fn unordered_runs_rdp_and_rd_all_only_and_hides_ended_leases_without_removing_them() {
    let mut h = with_space();
    h.now(1, out_leased("jobs", "(1)", 100)); // ends 1100
    h.now(1, out("jobs", "(2)"));
    assert_eq!(
        h.unordered(1, &rdp("jobs", "(*int)"), 1_099),
        SpaceReply::Tuple(Some(stored("(1)", 1, Some(1_100))))
    );
    assert_eq!(
        h.unordered(1, &rdp("jobs", "(*int)"), 1_100),
        SpaceReply::Tuple(Some(stored("(2)", 2, None)))
    );
    assert_eq!(
        h.unordered(1, &rd_all("jobs", "(*int)", 10), 1_100),
        SpaceReply::Tuples(vec![stored("(2)", 2, None)])
    );
    let digest = h.service.state_digest();
    for (request, op) in [
        (out("jobs", "(3)"), "out"),
        (inp("jobs", "(*)"), "inp"),
        (rd("jobs", "(*)", 10), "rd"),
        (create("x"), "create"),
        (renew("jobs", "(*)", 10), "renew"),
    ] {
        assert_eq!(
            h.unordered(1, &request, 1_000),
            SpaceReply::Error(SpaceError::NotOrdered(op.into()))
        );
    }
    assert_eq!(
        h.unordered(1, &rdp("nope", "(1)"), 1_000),
        SpaceReply::Error(SpaceError::UnknownSpace("nope".into()))
    );
    assert_eq!(
        h.service.state_digest(),
        digest,
        "unordered reads change nothing"
    );
    // The ordered view still holds the tuple until the agreed time passes its lease.
    assert!(matches!(
        h.now(1, rdp("jobs", "(1)")),
        SpaceReply::Tuple(Some(_))
    ));
}
