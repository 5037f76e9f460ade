//! Two primary-backup servers driven by the [`harness`](super::harness) over FIFO links with
//! virtual time, closed-loop clients, crashes, pauses and lost messages; every committed
//! batch is checked against the other server's and, at the end, against sequential
//! execution of the committed order.

use tagma_wire::EveMessage;

use super::Role;
use super::harness::{Lost, Pair, PairSetup};

fn pair(diverge: bool, clients: u32) -> Pair {
    Pair::new(PairSetup {
        clients,
        diverge,
        ..PairSetup::default()
    })
}

/// Every promise kept: no violation seen, and the committed batches are sequential's.
fn check(p: &Pair) {
    assert!(p.violations.is_empty(), "{:?}", p.violations);
    let problems = p.check_against_sequential();
    assert!(problems.is_empty(), "{problems:?}");
}

/// Runs until the next message to server `to` that matches `lost` is lost.
fn lose(p: &mut Pair, to: usize, lost: Lost) {
    p.lose_next(to, lost);
    for _ in 0..1_000 {
        if !p.losing() {
            return;
        }
        p.run(1);
    }
    panic!("no such message was sent");
}

#[test]
fn both_servers_commit_the_same_batches_and_every_request_is_answered() {
    let mut p = pair(false, 12);
    p.run(400);
    assert!(p.answered() > 300, "{} answered", p.answered());
    assert_eq!(p.server(0).core.role(), Role::Primary);
    assert_eq!(p.server(1).core.role(), Role::Backup);
    let stats = p.server(0).core.stats();
    assert_eq!((stats.rollbacks, stats.takeovers), (0, 0));
    assert!(p.server(1).core.committed() + 3 >= p.server(0).core.committed());
    check(&p);
}

#[test]
fn different_tokens_roll_both_back_and_the_batch_runs_again_in_order() {
    let mut p = pair(true, 12);
    p.run(400);
    let stats = p.server(0).core.stats();
    assert!(stats.rollbacks > 5, "{stats:?}");
    assert!(p.answered() > 100, "{} answered", p.answered());
    check(&p);
}

#[test]
fn the_backup_takes_over_a_crashed_primary_and_the_primary_rejoins_by_fetching_the_state() {
    let mut p = pair(false, 12);
    p.run(200);
    let before = p.answered();
    p.crash(0);
    p.run(30);
    let stalled = p.answered();
    p.run(200);
    assert_eq!(p.server(1).core.role(), Role::Primary);
    assert_eq!(p.server(1).core.stats().takeovers, 1);
    assert!(
        p.answered() > stalled + 50,
        "serving again after the takeover"
    );
    assert!(stalled >= before);
    // The old primary comes back empty and fetches the state.
    p.start(0, true);
    p.run(300);
    assert_eq!(p.server(0).core.role(), Role::Backup);
    assert!(p.server(0).core.peer_alive() && p.server(1).core.peer_alive());
    let (objects, _) = p.server(0).stage.last_fetch();
    assert!(objects > 0 && objects <= 32, "{objects} objects fetched");
    assert!(p.server(0).core.committed() + 3 >= p.server(1).core.committed());
    check(&p);
}

#[test]
fn a_primary_serves_alone_while_the_backup_is_down_and_catches_it_up_after() {
    let mut p = pair(false, 12);
    p.run(150);
    p.crash(1);
    p.run(200);
    assert!(!p.server(0).core.peer_alive());
    let alone = p.server(0).core.committed();
    p.start(1, true);
    p.run(300);
    assert_eq!(p.server(1).core.role(), Role::Backup);
    assert!(p.server(0).core.peer_alive());
    assert!(p.server(1).core.committed() > alone);
    assert_eq!(p.server(0).core.stats().joins_served, 1);
    check(&p);
}

#[test]
fn a_paused_primary_that_learns_of_a_later_view_steps_down_and_fetches_the_state() {
    let mut p = pair(false, 8);
    p.run(100);
    // The primary stops taking input for longer than the takeover timeout.
    p.paused[0] = true;
    p.run(200);
    assert_eq!(p.server(1).core.role(), Role::Primary);
    p.paused[0] = false;
    p.run(400);
    assert_eq!(p.server(0).core.role(), Role::Backup);
    assert_eq!(p.server(0).core.view(), p.server(1).core.view());
    assert!(p.server(1).core.peer_alive());
    assert!(p.server(0).core.committed() + 3 >= p.server(1).core.committed());
    check(&p);
}

#[test]
fn a_backup_that_misses_a_batch_fetches_the_state_and_follows_again() {
    let mut p = pair(false, 12);
    p.run(100);
    lose(&mut p, 1, |m| matches!(m, EveMessage::ExecuteBatch { .. }));
    p.run(400);
    assert_eq!(p.server(0).core.stats().joins_served, 1);
    assert_eq!(p.server(1).core.role(), Role::Backup);
    assert!(p.server(0).core.peer_alive());
    assert!(p.server(1).core.committed() + 3 >= p.server(0).core.committed());
    check(&p);
}

#[test]
fn a_primary_whose_token_went_missing_sends_the_batch_again_and_gets_the_token() {
    let mut p = pair(false, 12);
    p.run(100);
    lose(&mut p, 0, |m| matches!(m, EveMessage::Token { .. }));
    let stalled = p.server(0).core.committed();
    p.run(600);
    let stats = p.server(0).core.stats();
    assert_eq!((stats.joins_served, stats.takeovers), (0, 0), "{stats:?}");
    assert_eq!(p.server(0).core.role(), Role::Primary);
    assert_eq!(p.server(1).core.role(), Role::Backup);
    assert!(p.server(0).core.peer_alive());
    assert!(p.server(0).core.committed() > stalled + 10);
    assert!(p.server(1).core.committed() + 3 >= p.server(0).core.committed());
    check(&p);
}

#[test]
fn a_server_alone_runs_batches_in_order_so_nothing_unchecked_commits() {
    let mut p = pair(true, 12);
    p.run(200);
    p.crash(1);
    let before = p.answered();
    p.run(400);
    assert!(!p.server(0).core.peer_alive());
    assert!(p.answered() > before + 50);
    // What it had run in parallel and no one compared ran again in order.
    assert_eq!(p.server(0).core.stats().unchecked_commits, 0);
    check(&p);
}

#[test]
fn a_joiner_takes_the_primarys_run_and_follows_after_rollbacks() {
    let mut p = pair(true, 12);
    p.run(300);
    assert!(p.server(0).core.stats().rollbacks > 0, "runs moved on");
    p.crash(1);
    p.run(200);
    p.start(1, true);
    p.run(400);
    assert_eq!(p.server(1).core.role(), super::Role::Backup);
    assert!(p.server(0).core.peer_alive());
    assert!(p.server(1).core.committed() + 3 >= p.server(0).core.committed());
    check(&p);
}
