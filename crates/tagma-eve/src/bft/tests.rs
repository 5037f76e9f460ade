use super::harness::{Behaviour, BftSetup, Deployment};
use crate::quorum::Resilience;

fn resilience(u: usize, r: usize) -> Resilience {
    Resilience::new(u, r).unwrap()
}

/// Runs `ms`, then checks that every client got answers and that the committed history
/// is sequential execution's.
fn run_and_check(d: &mut Deployment, ms: u64) {
    d.run(ms);
    let problems = d.check_against_sequential();
    assert!(problems.is_empty(), "{problems:#?}");
    let answered = d.answered_per_client();
    assert!(
        answered.iter().all(|&a| a >= 3),
        "every client makes progress: {answered:?}"
    );
}

#[test]
fn without_faults_batches_commit_on_matching_tokens_and_nothing_rolls_back() {
    let mut d = Deployment::new(BftSetup::new(resilience(1, 1)));
    run_and_check(&mut d, 2_000);
    assert_eq!(d.divergences.rollbacks, 0);
    assert_eq!(d.divergences.manifested, 0);
    for me in 0..3 {
        let stats = d.node(me).unwrap().core.stats();
        assert_eq!((stats.fetches, stats.rollbacks), (0, 0), "executor {me}");
        assert!(stats.batches_committed > 10);
    }
}

#[test]
fn an_executor_sending_wrong_tokens_is_outvoted() {
    let mut setup = BftSetup::new(resilience(1, 1));
    setup.behaviours = vec![Behaviour::Correct, Behaviour::WrongTokens];
    let mut d = Deployment::new(setup);
    run_and_check(&mut d, 2_000);
    assert!(d.divergences.lies_sent > 10);
    assert_eq!(d.divergences.manifested, 0);
}

#[test]
fn wrong_replies_never_reach_a_client_alone() {
    let mut setup = BftSetup::new(resilience(1, 1));
    setup.behaviours = vec![Behaviour::WrongReplies];
    let mut d = Deployment::new(setup);
    run_and_check(&mut d, 2_000);
    assert!(d.divergences.lies_sent > 10);
    assert_eq!(d.divergences.lies_accepted, 0);
}

#[test]
fn a_diverging_executor_fetches_the_committed_state_past_a_donor_that_forges_nodes() {
    let mut setup = BftSetup::new(resilience(1, 1));
    // Executor 0's parallel runs differ from everyone's (a race manifests there);
    // executor 1 forges the state nodes it serves.
    setup.racy = vec![0];
    setup.behaviours = vec![Behaviour::Correct, Behaviour::WrongState];
    let mut d = Deployment::new(setup);
    run_and_check(&mut d, 3_000);
    let stats = d.node(0).unwrap().core.stats();
    assert!(d.divergences.manifested > 0);
    assert!(stats.fetches > 0);
    assert!(stats.fetches_failed > 0, "a forged node fails the fetch");
    assert!(d.divergences.lies_sent > 0);
    d.quiet = true;
    d.run(1_000);
    assert_eq!(d.repaired(), d.divergences.manifested);
    assert!(d.check_against_sequential().is_empty());
}

#[test]
fn a_crashed_primary_is_replaced_after_complaints() {
    let mut d = Deployment::new(BftSetup::new(resilience(1, 1)));
    d.run(500);
    let before = d.answered();
    d.crash(0);
    run_and_check(&mut d, 2_500);
    assert!(d.answered() > before + 30);
    for me in 1..3 {
        let core = &d.node(me).unwrap().core;
        assert!(core.view() >= 1, "executor {me} left view 0");
        assert_ne!(core.primary(), 0);
    }
}

#[test]
fn lying_verifiers_cannot_make_an_executor_act() {
    let mut setup = BftSetup::new(resilience(1, 1));
    setup.lying_verifiers = 1;
    let mut d = Deployment::new(setup);
    run_and_check(&mut d, 2_000);
    for me in 0..3 {
        let stats = d.node(me).unwrap().core.stats();
        assert_eq!((stats.fetches, stats.rollbacks), (0, 0), "executor {me}");
    }
}

#[test]
fn with_r_zero_a_race_on_one_executor_is_masked_and_repaired() {
    // Concurrency-bug masking: u = 1, r = 0, three executors; the race manifests on one.
    let mut setup = BftSetup::new(resilience(1, 0));
    setup.racy = vec![2];
    let mut d = Deployment::new(setup);
    assert_eq!(d.nodes.len(), 3);
    run_and_check(&mut d, 3_000);
    d.quiet = true;
    d.run(1_000);
    assert!(d.divergences.manifested > 0);
    assert_eq!(d.repaired(), d.divergences.manifested);
}

#[test]
fn when_no_token_reaches_the_quorum_the_batch_rolls_back_and_runs_in_order() {
    let mut setup = BftSetup::new(resilience(1, 1));
    // Every executor's parallel runs differ from the others': only runs in order agree.
    setup.racy = vec![0, 1, 2];
    let mut d = Deployment::new(setup);
    run_and_check(&mut d, 4_000);
    assert!(d.divergences.rollbacks > 0);
}

#[test]
fn seeds_with_drawn_delays_and_faults_keep_every_promise() {
    for seed in 0..12u64 {
        let mut setup = BftSetup::new(resilience(1, 1));
        setup.seed = seed;
        setup.max_delay_ms = 1 + seed % 8;
        match seed % 4 {
            0 => setup.behaviours = vec![Behaviour::WrongTokens],
            1 => setup.racy = vec![(seed % 3) as u32],
            2 => setup.lying_verifiers = 1,
            _ => setup.behaviours = vec![Behaviour::Correct, Behaviour::WrongReplies],
        }
        let mut d = Deployment::new(setup);
        d.run(700);
        if seed % 3 == 0 {
            d.crash((seed % 3) as u32 + 1);
        }
        d.run(2_300);
        let problems = d.check_against_sequential();
        assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
        assert!(d.answered() > 50, "seed {seed}: {}", d.answered());
    }
}

#[test]
fn a_modelled_race_is_counted_by_batch_caught_and_repaired() {
    let mut setup = BftSetup::new(resilience(1, 0));
    setup.racy = vec![1];
    let mut d = Deployment::new(setup);
    d.run(1_500);
    d.quiet = true;
    d.run(1_000);
    let races = d.races();
    assert!(races.manifested > 0);
    assert_eq!((races.undetected, races.pending), (0, 0), "{races:?}");
    assert_eq!(races.repaired, races.manifested, "{races:?}");
    assert!(d.check_against_sequential().is_empty());
}

#[test]
fn a_real_race_the_executors_see_in_their_accesses_never_reaches_a_token() {
    let mut setup = BftSetup::new(resilience(1, 0));
    setup.counter_window = Some(10_000);
    setup.counter_clients = 4;
    setup.missed_conflicts = crate::executor::MissedConflicts::Rerun;
    let mut d = Deployment::new(setup);
    run_and_check(&mut d, 1_500);
    assert_eq!(d.races(), super::harness::Races::default());
    let (seen, rerun) = d.node(0).unwrap().stage.missed_conflicts();
    assert!(seen > 0, "increments share parallel batches");
    assert_eq!(seen, rerun);
}
