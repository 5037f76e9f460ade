//! Access policies at execution: classes admit their principals and deny the others with no
//! state change; field = invoker rules narrow inserts, reads and takes (blocking ones
//! included); `unique` allows one matching tuple.

mod common;

use common::*;
use tagma_exec::Service;
use tagma_space::{CasOutcome, SpaceReply};
use tagma_wire::RequestSeq;

fn denied(reply: &SpaceReply) -> bool {
    matches!(reply, SpaceReply::Denied(_))
}

#[test]
fn each_class_admits_its_principals_and_a_denial_changes_nothing() {
    let mut h = Harness::new();
    h.now(
        5,
        create_with("s", "read: 1, 2\ninsert: 1\ntake: 2\nadmin: creator"),
    );
    let digest = h.service.state_digest();
    let reply = h.now(3, out("s", "(1)"));
    assert!(denied(&reply), "{reply:?}");
    if let SpaceReply::Denied(reason) = &reply {
        assert!(
            reason.contains("principal 3") && reason.contains("insert"),
            "{reason}"
        );
    }
    assert_eq!(h.service.state_digest(), digest, "a denial changes nothing");
    assert!(matches!(h.now(1, out("s", "(1)")), SpaceReply::Inserted(_)));
    assert!(denied(&h.now(3, rdp("s", "(*)"))));
    assert!(denied(&h.now(3, rd_all("s", "(*)", 5))));
    assert!(denied(&h.now(1, inp("s", "(*)"))));
    assert!(denied(&h.now(1, in_all("s", "(*)", 5))));
    assert!(
        denied(&h.call(1, in_("s", "(*)", 100)).unwrap()),
        "no wait registered"
    );
    assert!(denied(&h.call(3, rd("s", "(*)", 100)).unwrap()));
    assert_eq!(h.service.next_due_ms(), None);
    assert!(
        denied(&h.now(2, cas("s", "(2)", "(2)", None))),
        "cas needs read and insert"
    );
    assert!(
        denied(&h.now(2, replace("s", "(1)", "(2)"))),
        "replace needs take and insert"
    );
    assert!(matches!(
        h.now(2, rdp("s", "(*)")),
        SpaceReply::Tuple(Some(_))
    ));
    assert!(matches!(
        h.now(2, inp("s", "(*)")),
        SpaceReply::Tuple(Some(_))
    ));
    assert!(denied(&h.now(1, destroy("s"))));
    assert_eq!(h.now(5, destroy("s")), SpaceReply::Destroyed);
}

#[test]
fn insert_requires_field_is_invoker_denies_tuples_naming_someone_else() {
    let mut h = Harness::new();
    h.now(1, create_with("s", "insert requires field 1 = invoker"));
    assert!(matches!(
        h.now(7, out("s", "(\"job\", 7)")),
        SpaceReply::Inserted(_)
    ));
    let reply = h.now(7, out("s", "(\"job\", 8)"));
    assert!(denied(&reply), "{reply:?}");
    assert!(
        denied(&h.now(7, out("s", "(\"job\", \"7\")"))),
        "a string is not the id"
    );
    assert!(
        denied(&h.now(7, out("s", "(\"job\")"))),
        "no field 1 at all"
    );
    assert!(denied(
        &h.now(8, cas("s", "(\"x\", *)", "(\"x\", 7)", None))
    ));
}

#[test]
fn take_requires_field_is_invoker_skips_other_tuples_for_takes_and_waits() {
    let mut h = Harness::new();
    h.now(1, create_with("mail", "take requires field 1 = invoker"));
    h.now(1, out("mail", "(\"msg\", 7)"));
    h.now(1, out("mail", "(\"msg\", 8)"));
    // 8 takes its own message though an older one matches the template.
    let reply = h.now(8, inp("mail", "(\"msg\", *)"));
    assert_eq!(found(&reply).tuple, tuple("(\"msg\", 8)"));
    assert_eq!(
        h.now(9, inp("mail", "(\"msg\", *)")),
        SpaceReply::Tuple(None)
    );
    // Reads are not narrowed.
    assert_eq!(
        found(&h.now(9, rdp("mail", "(\"msg\", *)"))).tuple,
        tuple("(\"msg\", 7)")
    );
    // 9's in waits; a message for 7 does not wake it, one for 9 does.
    assert_eq!(h.call(9, in_("mail", "(\"msg\", *)", 1_000)), None);
    h.now(1, out("mail", "(\"msg\", 7)"));
    assert_eq!(h.late(), vec![]);
    h.now(1, out("mail", "(\"msg\", 9)"));
    let late = h.late();
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].0, client(9));
    assert_eq!(found(&late[0].2).tuple, tuple("(\"msg\", 9)"));
}

#[test]
fn read_requires_field_is_invoker_hides_other_tuples_from_reads() {
    let mut h = Harness::new();
    h.now(1, create_with("s", "read requires field 0 = invoker"));
    h.now(1, out("s", "(7, \"secret\")"));
    assert_eq!(h.now(8, rdp("s", "(*, *)")), SpaceReply::Tuple(None));
    assert_eq!(
        h.now(8, rd_all("s", "(*, *)", 10)),
        SpaceReply::Tuples(vec![])
    );
    assert!(matches!(
        h.now(7, rdp("s", "(*, *)")),
        SpaceReply::Tuple(Some(_))
    ));
    // To cas, a tuple the invoker may not read counts as absent.
    assert!(matches!(
        h.now(8, cas("s", "(*, *)", "(8, \"mine\")", None)),
        SpaceReply::Cas(CasOutcome::Inserted(_))
    ));
}

#[test]
fn unique_allows_one_matching_tuple_and_replace_may_swap_it() {
    let mut h = Harness::new();
    h.now(1, create_with("locks", "unique (\"lock\", *str, *)"));
    assert!(matches!(
        h.now(1, out("locks", "(\"lock\", \"a\", 1)")),
        SpaceReply::Inserted(_)
    ));
    let reply = h.now(2, out("locks", "(\"lock\", \"a\", 2)"));
    assert!(denied(&reply), "{reply:?}");
    if let SpaceReply::Denied(reason) = &reply {
        assert!(reason.contains("unique"), "{reason}");
    }
    // Tuples the template does not match are free.
    assert!(matches!(
        h.now(2, out("locks", "(\"note\", \"a\", 2)")),
        SpaceReply::Inserted(_)
    ));
    // Replacing the one tuple keeps one.
    assert!(matches!(
        h.now(
            1,
            replace("locks", "(\"lock\", *, *)", "(\"lock\", \"a\", 3)")
        ),
        SpaceReply::Replaced(Some(_))
    ));
    assert!(matches!(
        h.now(1, inp("locks", "(\"lock\", *, *)")),
        SpaceReply::Tuple(Some(_))
    ));
    assert!(matches!(
        h.now(2, out("locks", "(\"lock\", \"b\", 2)")),
        SpaceReply::Inserted(_)
    ));
    // A waiting in taking the tuple as it is inserted leaves none stored: the next insert
    // is allowed.
    h.now(1, inp("locks", "(\"lock\", *, *)"));
    assert_eq!(h.call(3, in_("locks", "(\"lock\", *, *)", 1_000)), None);
    h.now(2, out("locks", "(\"lock\", \"c\", 2)"));
    assert_eq!(h.late()[0].1, RequestSeq(1));
    assert!(matches!(
        h.now(2, out("locks", "(\"lock\", \"d\", 2)")),
        SpaceReply::Inserted(_)
    ));
}
