//! Blocking `rd` and `in`: answered exactly once, in arrival order (every matching `rd`, the
//! first matching `in`, which takes the tuple); timeouts in agreed time; leases that end
//! remove tuples and wake no one; destroying a space answers its waiting operations; late
//! replies of a run come in the order of the requests that gave them.

mod common;

use common::*;
use tagma_exec::Service;
use tagma_space::{Receipt, SpaceError, SpaceReply, Stored};
use tagma_wire::RequestSeq;

fn got(t: &str, revision: u64) -> SpaceReply {
    SpaceReply::Tuple(Some(Stored {
        tuple: tuple(t),
        revision,
        lease_expires_ms: None,
        sealed: None,
    }))
}

#[test]
fn an_insert_wakes_every_matching_rd_before_the_first_matching_in_which_takes_it() {
    let mut h = Harness::new();
    h.now(1, create("q"));
    // Waiting, in arrival order: rd by 11, in by 12, rd by 13, in by 14, and a non-matching
    // rd by 15.
    let replies = h.batch(vec![
        (client(11), rd("q", "(\"job\", *)", 10_000)),
        (client(12), in_("q", "(\"job\", *)", 10_000)),
        (client(13), rd("q", "(*, *int)", 10_000)),
        (client(14), in_("q", "(\"job\", *int)", 10_000)),
        (client(15), rd("q", "(\"other\", *)", 10_000)),
    ]);
    assert_eq!(replies, vec![None, None, None, None, None]);
    assert_eq!(h.service.next_due_ms(), Some(11_000));

    assert_eq!(
        h.now(1, out("q", "(\"job\", 1)")),
        SpaceReply::Inserted(Receipt {
            revision: 1,
            lease_expires_ms: None
        })
    );
    // 11's rd sees it, 12's in takes it; the walk stops there.
    assert_eq!(
        h.late(),
        vec![
            (client(11), RequestSeq(1), got("(\"job\", 1)", 1)),
            (client(12), RequestSeq(1), got("(\"job\", 1)", 1)),
        ]
    );
    assert_eq!(
        h.now(1, rdp("q", "(*, *)")),
        SpaceReply::Tuple(None),
        "taken, not stored"
    );

    h.now(1, out("q", "(\"job\", 2)"));
    assert_eq!(
        h.late(),
        vec![
            (client(13), RequestSeq(1), got("(\"job\", 2)", 2)),
            (client(14), RequestSeq(1), got("(\"job\", 2)", 2)),
        ]
    );
    // Those answered never are again: a third tuple wakes no one and stays.
    h.now(1, out("q", "(\"job\", 3)"));
    assert_eq!(h.late(), vec![]);
    assert_eq!(h.now(1, rdp("q", "(*, *)")), got("(\"job\", 3)", 3));
    // 15 still waits, until its deadline.
    h.time_passes_to(11_000);
    assert_eq!(
        h.late(),
        vec![(client(15), RequestSeq(1), SpaceReply::TimedOut)]
    );
    assert_eq!(h.service.next_due_ms(), None);
}

#[test]
fn rd_waiters_all_get_a_tuple_that_stays_stored_when_no_in_waits() {
    let mut h = Harness::new();
    h.now(1, create("q"));
    h.batch(vec![
        (client(11), rd("q", "(*)", 5_000)),
        (client(12), rd("q", "(*)", 5_000)),
    ]);
    h.now(1, out("q", "(7)"));
    assert_eq!(
        h.late(),
        vec![
            (client(11), RequestSeq(1), got("(7)", 1)),
            (client(12), RequestSeq(1), got("(7)", 1)),
        ]
    );
    assert_eq!(h.now(1, rdp("q", "(*)")), got("(7)", 1));
}

#[test]
fn rd_and_in_answer_at_once_when_a_tuple_matches() {
    let mut h = Harness::new();
    h.now(1, create("q"));
    h.now(1, out("q", "(1)"));
    assert_eq!(h.call(2, rd("q", "(1)", 100)), Some(got("(1)", 1)));
    assert_eq!(h.call(2, in_("q", "(1)", 100)), Some(got("(1)", 1)));
    assert_eq!(h.call(2, in_("q", "(1)", 100)), None, "gone: the in waits");
    assert_eq!(h.service.next_due_ms(), Some(1_100));
}

#[test]
fn waits_time_out_exactly_when_the_agreed_time_reaches_their_deadline() {
    let mut h = Harness::new();
    h.now(1, create("q"));
    assert_eq!(h.call(2, rd("q", "(1)", 500)), None); // deadline 1500
    h.time_passes_to(1_200);
    assert_eq!(h.call(3, in_("q", "(1)", 200)), None); // deadline 1400
    assert_eq!(h.service.next_due_ms(), Some(1_400));
    h.time_passes_to(1_399);
    assert_eq!(h.late(), vec![]);
    // A batch at 1500 times out both before its own requests run, earliest deadline first.
    let replies = h.batch_at(1_500, vec![(client(1), out("q", "(1)"))]);
    assert!(matches!(replies[0], Some(SpaceReply::Inserted(_))));
    assert_eq!(
        h.late(),
        vec![
            (client(3), RequestSeq(1), SpaceReply::TimedOut),
            (client(2), RequestSeq(1), SpaceReply::TimedOut),
        ]
    );
    assert_eq!(
        h.now(1, rdp("q", "(1)")),
        got("(1)", 1),
        "woke no one: stored"
    );
}

#[test]
fn an_ended_lease_removes_its_tuple_at_that_time_and_wakes_no_one() {
    let mut h = Harness::new();
    h.now(1, create("q"));
    h.now(1, out_leased("q", "(\"a\", 1)", 100)); // ends 1100
    assert_eq!(h.call(2, rd("q", "(\"b\", *)", 1_000)), None); // deadline 2000
    assert_eq!(h.service.next_due_ms(), Some(1_100));
    h.time_passes_to(1_099);
    assert!(matches!(
        h.now(1, rdp("q", "(\"a\", *)")),
        SpaceReply::Tuple(Some(_))
    ));
    h.time_passes_to(1_100);
    assert_eq!(h.late(), vec![], "an expiry answers no waiting operation");
    assert_eq!(h.now(1, rdp("q", "(\"a\", *)")), SpaceReply::Tuple(None));
    assert_eq!(h.service.next_due_ms(), Some(2_000));
}

#[test]
fn destroying_a_space_answers_its_waiting_operations_once_in_arrival_order() {
    let mut h = Harness::new();
    h.now(1, create("q"));
    h.now(1, create("other"));
    h.batch(vec![
        (client(12), in_("q", "(*)", 5_000)),
        (client(11), rd("q", "(*)", 5_000)),
        (client(13), rd("other", "(*)", 5_000)),
    ]);
    assert_eq!(h.now(1, destroy("q")), SpaceReply::Destroyed);
    let unknown = SpaceReply::Error(SpaceError::UnknownSpace("q".into()));
    assert_eq!(
        h.late(),
        vec![
            (client(12), RequestSeq(1), unknown.clone()),
            (client(11), RequestSeq(1), unknown),
        ]
    );
    // Their deadlines are gone with them; the other space's wait remains.
    assert_eq!(h.service.next_due_ms(), Some(6_000));
    h.time_passes_to(6_000);
    assert_eq!(
        h.late(),
        vec![(client(13), RequestSeq(1), SpaceReply::TimedOut)]
    );
}

/// Within one run, a waiting operation can be answered by a later request of the same run,
/// and late replies come in the order of the requests that gave them, whichever spaces ran
/// first.
#[test]
fn late_replies_of_a_run_follow_the_requests_that_gave_them() {
    for threads in [1, 4] {
        let mut h = Harness::with(Default::default(), threads);
        h.batch(vec![(client(1), create("a")), (client(1), create("b"))]);
        let replies = h.batch(vec![
            (client(11), in_("a", "(*)", 1_000)),
            (client(12), in_("b", "(*)", 1_000)),
            (client(1), out("b", "(2)")),
            (client(1), out("a", "(1)")),
            (client(13), rd("a", "(*)", 1_000)),
        ]);
        assert_eq!(replies[0], None);
        assert_eq!(replies[1], None);
        assert_eq!(replies[4], None, "a's tuple was taken: 13 waits");
        assert_eq!(
            h.late(),
            vec![
                (client(12), RequestSeq(1), got("(2)", 1)),
                (client(11), RequestSeq(1), got("(1)", 1)),
            ],
            "threads: {threads}"
        );
    }
}

#[test]
fn rd_after_answers_only_with_a_tuple_newer_than_the_revision_it_saw() {
    let mut h = Harness::new();
    h.now(1, create("cfg"));
    h.now(1, out("cfg", "(\"v\", 1)"));
    // Nothing newer than revision 1: it waits, where a plain rd answers at once.
    assert_eq!(
        h.batch(vec![(
            client(11),
            rd_after("cfg", "(\"v\", *int)", 1, 5_000)
        )]),
        vec![None]
    );
    assert_eq!(
        h.now(1, rd("cfg", "(\"v\", *int)", 5_000)),
        got("(\"v\", 1)", 1)
    );
    // An older revision is answered at once, with the oldest newer match.
    assert_eq!(
        h.now(1, rd_after("cfg", "(\"v\", *int)", 0, 5_000)),
        got("(\"v\", 1)", 1)
    );
    h.now(1, out("cfg", "(\"v\", 2)"));
    assert_eq!(
        h.late(),
        vec![(client(11), RequestSeq(1), got("(\"v\", 2)", 2))]
    );
    assert_eq!(
        h.now(1, rd_after("cfg", "(\"v\", *int)", 1, 5_000)),
        got("(\"v\", 2)", 2)
    );
}
