use super::*;

fn t(n: u8) -> Token {
    Token([n; 32])
}

fn bft() -> Verification {
    Verification::new(Resilience::new(1, 1).unwrap(), t(0), 1_000, 64)
}

fn vote(executor: u32, seq: u64, token: Token, previous: Token) -> Verify {
    Verify {
        executor,
        view: 0,
        seq,
        token,
        previous,
    }
}

#[test]
fn matching_tokens_of_a_quorum_commit_the_batch_and_answer_late_verifies_at_once() {
    let mut v = bft();
    let (answer, decided) = v.verify(vote(0, 1, t(1), t(0)), 0);
    assert_eq!((answer, decided), (Answer::Later { seq: 1 }, Vec::new()));
    let (_, decided) = v.verify(vote(2, 1, t(1), t(0)), 1);
    assert_eq!(
        decided,
        vec![Decision::Commit {
            seq: 1,
            token: t(1)
        }]
    );
    assert_eq!(v.last_committed(), (1, t(1)));
    // The slow executor's VERIFY is answered with the decision, whatever it says.
    let (answer, _) = v.verify(vote(1, 1, t(9), t(0)), 2);
    assert_eq!(
        answer,
        Answer::Now(Decision::Commit {
            seq: 1,
            token: t(1)
        })
    );
}

#[test]
fn a_token_computed_after_another_history_does_not_count() {
    let mut v = bft();
    v.verify(vote(0, 1, t(1), t(0)), 0);
    v.verify(vote(1, 1, t(1), t(0)), 0);
    // Two executors agree on batch 2's token, but one of them computed it after a batch 1
    // that did not commit.
    v.verify(vote(0, 2, t(2), t(1)), 0);
    let (_, decided) = v.verify(vote(1, 2, t(2), t(7)), 0);
    assert!(decided.is_empty());
    let (_, decided) = v.verify(vote(2, 2, t(2), t(1)), 0);
    assert_eq!(
        decided,
        vec![Decision::Commit {
            seq: 2,
            token: t(2)
        }]
    );
}

#[test]
fn votes_that_can_no_longer_agree_roll_the_batch_back_in_a_new_view() {
    let mut v = bft();
    v.verify(vote(0, 1, t(1), t(0)), 0);
    // n_E − u = 2 answered, but the missing vote could still make a quorum: wait.
    let (_, decided) = v.verify(vote(1, 1, t(2), t(0)), 0);
    assert!(decided.is_empty());
    let (_, decided) = v.verify(vote(2, 1, t(3), t(0)), 0);
    assert_eq!(decided, vec![Decision::Rollback { seq: 1, view: 1 }]);
    assert_eq!(v.view(), 1);
    // A VERIFY of the old view is told the view in force.
    let (answer, _) = v.verify(vote(0, 1, t(1), t(0)), 0);
    assert_eq!(answer, Answer::Now(Decision::Rollback { seq: 1, view: 1 }));
    // In the new view, the batch run in order commits.
    let in_new_view = |executor| Verify {
        view: 1,
        ..vote(executor, 1, t(4), t(0))
    };
    v.verify(in_new_view(0), 5);
    let (_, decided) = v.verify(in_new_view(1), 5);
    assert_eq!(
        decided,
        vec![Decision::Commit {
            seq: 1,
            token: t(4)
        }]
    );
}

#[test]
fn a_batch_undecided_for_the_timeout_rolls_back() {
    let mut v = bft();
    assert_eq!(v.next_due_ms(), None);
    v.verify(vote(0, 1, t(1), t(0)), 100);
    assert_eq!(v.next_due_ms(), Some(1_100));
    assert!(v.advance_time(1_099).is_empty());
    assert_eq!(
        v.advance_time(1_100),
        vec![Decision::Rollback { seq: 1, view: 1 }]
    );
    assert_eq!(v.next_due_ms(), None);
}

#[test]
fn verifies_of_later_batches_wait_for_the_earlier_ones_and_commit_in_order() {
    let mut v = bft();
    v.verify(vote(0, 2, t(2), t(1)), 0);
    v.verify(vote(1, 2, t(2), t(1)), 0);
    v.verify(vote(0, 1, t(1), t(0)), 0);
    let (_, decided) = v.verify(vote(1, 1, t(1), t(0)), 0);
    assert_eq!(
        decided,
        vec![
            Decision::Commit {
                seq: 1,
                token: t(1)
            },
            Decision::Commit {
                seq: 2,
                token: t(2)
            }
        ]
    );
}

#[test]
fn malformed_verifies_are_refused_and_votes_count_once_per_executor() {
    let mut v = bft();
    assert_eq!(v.verify(vote(3, 1, t(1), t(0)), 0).0, Answer::Refused);
    assert_eq!(v.verify(vote(0, 0, t(1), t(0)), 0).0, Answer::Refused);
    assert_eq!(v.verify(vote(0, 65, t(1), t(0)), 0).0, Answer::Refused);
    // One executor voting twice is one vote.
    v.verify(vote(0, 1, t(1), t(0)), 0);
    let (_, decided) = v.verify(vote(0, 1, t(1), t(0)), 0);
    assert!(decided.is_empty());
}

#[test]
fn with_r_zero_a_race_on_one_executor_is_outvoted() {
    // Concurrency-bug masking: u = 1, r = 0, three executors, two matching tokens commit.
    let mut v = Verification::new(Resilience::new(1, 0).unwrap(), t(0), 1_000, 64);
    v.verify(vote(0, 1, t(1), t(0)), 0);
    v.verify(vote(1, 1, t(6), t(0)), 0);
    let (_, decided) = v.verify(vote(2, 1, t(1), t(0)), 0);
    assert_eq!(
        decided,
        vec![Decision::Commit {
            seq: 1,
            token: t(1)
        }]
    );
}

#[test]
fn a_quorum_of_complaints_rotates_the_primary_and_a_single_one_does_not() {
    let mut v = bft();
    let last = Decision::Commit {
        seq: 0,
        token: t(0),
    };
    assert_eq!(v.complain(1, 0), (last, Vec::new()));
    // Twice from one executor still counts once; another view's complaint does not count
    // (it learns the view in force).
    assert_eq!(v.complain(1, 0), (last, Vec::new()));
    let in_force = Decision::Rollback { seq: 1, view: 0 };
    assert_eq!(v.complain(2, 7), (in_force, Vec::new()));
    assert_eq!(v.complain(9, 0).1, Vec::new(), "no such executor");
    let rollback = Decision::Rollback { seq: 1, view: 1 };
    assert_eq!(v.complain(2, 0), (rollback, vec![rollback]));
    assert_eq!(v.view(), 1);
    // The complaints of the old view are gone.
    assert_eq!(v.complain(0, 1).1, Vec::new());
}

#[test]
fn a_query_names_a_committed_token_at_once_and_waits_for_an_undecided_batch() {
    let mut v = bft();
    v.verify(vote(0, 1, t(1), t(0)), 0);
    assert_eq!(v.query(1), Answer::Later { seq: 1 });
    v.verify(vote(1, 1, t(1), t(0)), 0);
    assert_eq!(
        v.query(1),
        Answer::Now(Decision::Commit {
            seq: 1,
            token: t(1)
        })
    );
    assert_eq!(
        v.query(0),
        Answer::Now(Decision::Commit {
            seq: 0,
            token: t(0)
        })
    );
    assert_eq!(v.query(1_000), Answer::Refused);
}

#[test]
fn in_the_extra_protection_mode_a_unanimous_streak_makes_batches_wait_for_every_token() {
    // r = 0, three executors: u + 1 = 2 matching tokens commit.
    let p = Protection {
        after_batches: 2,
        wait_ms: 30,
    };
    let mut v =
        Verification::new(Resilience::new(1, 0).unwrap(), t(0), 1_000, 64).with_protection(p);
    let unanimous = |v: &mut Verification, seq: u64, now| {
        let prev = v.last_committed().1;
        for e in 0..3 {
            v.verify(
                Verify {
                    executor: e,
                    view: v.view(),
                    seq,
                    token: t(seq as u8),
                    previous: prev,
                },
                now,
            );
        }
    };
    // Not yet protecting: two matching tokens commit at once.
    unanimous(&mut v, 1, 0);
    unanimous(&mut v, 2, 0);
    assert_eq!(v.last_committed().0, 2);
    // Protecting now: two matching tokens wait for the third...
    let prev = v.last_committed().1;
    let ballot = |e, token| Verify {
        executor: e,
        view: 0,
        seq: 3,
        token,
        previous: prev,
    };
    v.verify(ballot(0, t(3)), 100);
    let (_, decided) = v.verify(ballot(1, t(3)), 100);
    assert_eq!(decided, Vec::new());
    assert_eq!(v.next_due_ms(), Some(130));
    // ... and a different third token rolls the batch back (it runs in order).
    let (_, decided) = v.verify(ballot(2, t(9)), 110);
    assert_eq!(decided, vec![Decision::Rollback { seq: 3, view: 1 }]);
    // After a rollback the streak starts again: the quorum commits at once.
    let prev = v.last_committed().1;
    for e in 0..2 {
        v.verify(
            Verify {
                executor: e,
                view: 1,
                seq: 3,
                token: t(3),
                previous: prev,
            },
            120,
        );
    }
    assert_eq!(v.last_committed().0, 3);
    // A missing third token is waited for only `wait_ms`.
    for seq in 4..6u64 {
        unanimous(&mut v, seq, 200);
    }
    let prev = v.last_committed().1;
    for e in 0..2 {
        v.verify(
            Verify {
                executor: e,
                view: 1,
                seq: 6,
                token: t(6),
                previous: prev,
            },
            300,
        );
    }
    assert_eq!(v.last_committed().0, 5);
    assert_eq!(v.advance_time(329), Vec::new());
    assert_eq!(
        v.advance_time(330),
        vec![Decision::Commit {
            seq: 6,
            token: t(6)
        }]
    );
}
