use bytes::Bytes;

use super::*;
use crate::services::micro::{MicroMixer, MicroService, MicroWorkload, Work};
use crate::services::racy::{COUNTER, Increment, RacyMixer, RacyService, count};
use crate::tree::ObjectId;
use crate::{Access, NonDeterminism, RequestContext};

fn micro(threads: usize, workload: &MicroWorkload) -> Executor<MicroService, MicroMixer> {
    let service = MicroService {
        work: Work::Cpu { iterations: 200 },
        object_bytes: 64,
    };
    let initial = service.initial_state(workload.objects());
    Executor::new(service, MicroMixer, threads, initial, 4).unwrap()
}

fn workload(conflict_pct: f64) -> MicroWorkload {
    MicroWorkload {
        requests: 600,
        batch_size: 100,
        conflict_pct,
        false_negative_pct: 0.0,
        seed: 7,
    }
}

#[test]
fn parallel_execution_with_a_right_mixer_gives_sequential_executions_tokens_and_replies() {
    for conflict_pct in [0.0, 2.0, 20.0] {
        let w = workload(conflict_pct);
        let mut parallel = micro(4, &w);
        let mut sequential = micro(1, &w);
        for batch in w.batches() {
            let p = parallel
                .execute(&batch, Execution::Parallel)
                .unwrap()
                .clone();
            let s = sequential
                .execute(&batch, Execution::Sequential)
                .unwrap()
                .clone();
            assert_eq!(p.token, s.token, "batch {} at {conflict_pct}%", batch.seq);
            assert_eq!(p.outputs, s.outputs);
            if conflict_pct == 0.0 {
                assert_eq!(p.parallel_batches, 1);
            } else {
                assert!(p.parallel_batches > 1);
            }
            assert_eq!(p.objects_written, s.objects_written);
            assert_eq!(p.missed_conflicts, 0);
            parallel.commit(batch.seq, p.token).unwrap();
            sequential.commit(batch.seq, s.token).unwrap();
        }
        assert_eq!(parallel.stable().tree, sequential.stable().tree);
    }
}

/// Creates two objects per request, then writes their ids under the request's own id.
struct Creator;

impl EveService for Creator {
    type Request = u64;

    fn execute(&self, request: &u64, ctx: &mut RequestContext<'_>) -> Bytes {
        let a = ctx.create(Bytes::from(format!("a{request}")));
        let b = ctx.create(Bytes::from(format!("b{request} {}", ctx.random_seed())));
        let mut ids = a.0.to_le_bytes().to_vec();
        ids.extend_from_slice(&b.0.to_le_bytes());
        ctx.put(ObjectId(*request), Bytes::from(ids.clone()));
        Bytes::from(ids)
    }
}

struct Apart;

impl Mixer<u64> for Apart {
    type Key = u64;
    fn access(&self, request: &u64) -> Access<u64> {
        Access {
            reads: Vec::new(),
            writes: vec![*request],
        }
    }
}

#[test]
fn created_objects_get_the_same_ids_whatever_the_threads_did() {
    let batch = Batch {
        seq: 1,
        nd: NonDeterminism {
            seed: 99,
            timestamp_ms: 5,
        },
        requests: (1_000..1_064).collect::<Vec<u64>>(),
    };
    let mut a = Executor::new(Creator, Apart, 4, ObjectTree::new(), 2).unwrap();
    let mut b = Executor::new(Creator, Apart, 1, ObjectTree::new(), 2).unwrap();
    let x = a.execute(&batch, Execution::Parallel).unwrap().clone();
    let y = b.execute(&batch, Execution::Sequential).unwrap().clone();
    assert_eq!(x.token, y.token);
    assert_eq!(a.state().len(), 64 * 3);
    // Different seeds give different objects.
    let mut other = batch.clone();
    other.nd.seed = 100;
    let mut c = Executor::new(Creator, Apart, 1, ObjectTree::new(), 2).unwrap();
    assert_ne!(
        c.execute(&other, Execution::Sequential).unwrap().token,
        y.token
    );
}

#[test]
fn batches_run_in_order_and_within_the_pipeline() {
    let w = workload(0.0);
    let batches = w.batches();
    let mut e = micro(2, &w);
    assert_eq!(
        e.execute(&batches[1], Execution::Parallel).unwrap_err(),
        EveError::OutOfOrder {
            expected: 1,
            got: 2
        }
    );
    for batch in &batches[..4] {
        e.execute(batch, Execution::Parallel).unwrap();
    }
    assert_eq!(
        e.execute(&batches[4], Execution::Parallel).unwrap_err(),
        EveError::PipelineFull { pending: 4 }
    );
    assert_eq!(
        e.commit(2, e.last_token()).unwrap_err(),
        EveError::NotPending { seq: 2 }
    );
    assert!(matches!(
        Executor::new(
            MicroService {
                work: Work::Wait { micros: 0 },
                object_bytes: 1
            },
            MicroMixer,
            0,
            ObjectTree::new(),
            1
        ),
        Err(EveError::NoThreads)
    ));
}

#[test]
fn commit_releases_replies_and_a_rollback_returns_to_the_committed_state() {
    let w = workload(5.0);
    let batches = w.batches();
    let mut e = micro(2, &w);
    let genesis = e.stable().tree.clone();
    let first = e.execute(&batches[0], Execution::Parallel).unwrap().clone();
    e.execute(&batches[1], Execution::Parallel).unwrap();
    assert_eq!(
        e.commit(1, Token([0; 32])).unwrap_err(),
        EveError::TokenMismatch { seq: 1 }
    );
    assert_eq!(e.commit(1, first.token).unwrap(), first.outputs);
    assert_eq!(e.stable().seq, 1);
    let committed = e.stable().tree.clone();
    assert_ne!(committed, genesis);
    assert_eq!(e.rollback(), 2);
    assert_eq!(*e.state(), committed);
    // Batch 2 again, in order this time: the same outcome as the parallel run had.
    let again = e
        .execute(&batches[1], Execution::Sequential)
        .unwrap()
        .clone();
    assert_eq!(again.execution, Execution::Sequential);
    e.commit(2, again.token).unwrap();
    // Another executor adopts the committed state and goes on from there.
    let mut late = micro(1, &w);
    late.adopt(e.stable().clone());
    assert_eq!(late.next_seq(), 3);
    let x = late
        .execute(&batches[2], Execution::Sequential)
        .unwrap()
        .token;
    let y = e.execute(&batches[2], Execution::Parallel).unwrap().token;
    assert_eq!(x, y);
}

fn racy(policy: MissedConflicts) -> (Executor<RacyService, RacyMixer>, Batch<Increment>) {
    let service = RacyService {
        work: Work::Wait { micros: 2_000 },
    };
    let executor = Executor::new(service, RacyMixer, 4, ObjectTree::new(), 2)
        .unwrap()
        .with_missed_conflicts(policy);
    let batch = Batch {
        seq: 1,
        nd: NonDeterminism::default(),
        requests: (0..8).map(|id| Increment { id }).collect(),
    };
    (executor, batch)
}

#[test]
fn left_to_verification_a_race_the_mixer_misses_loses_updates_until_run_in_order() {
    let (mut e, batch) = racy(MissedConflicts::Verify);
    let executed = e.execute(&batch, Execution::Parallel).unwrap().clone();
    assert_eq!((executed.missed_conflicts, executed.reruns), (1, 0));
    let raced = count(e.state().get(COUNTER));
    assert!(
        raced < 8,
        "eight increments at once on four threads kept {raced}"
    );
    e.rollback();
    e.execute(&batch, Execution::Sequential).unwrap();
    assert_eq!(count(e.state().get(COUNTER)), 8);
}

#[test]
fn a_race_the_mixer_misses_is_seen_in_the_accesses_and_run_again_in_order() {
    let (mut e, batch) = racy(MissedConflicts::Rerun);
    let executed = e.execute(&batch, Execution::Parallel).unwrap().clone();
    assert_eq!((executed.missed_conflicts, executed.reruns), (1, 1));
    assert_eq!(count(e.state().get(COUNTER)), 8);
    let outputs: Vec<u64> = executed.outputs.iter().map(|o| count(Some(o))).collect();
    assert_eq!(outputs, (1..=8).collect::<Vec<u64>>());
    let (mut sequential, _) = racy(MissedConflicts::Rerun);
    let token = sequential
        .execute(&batch, Execution::Sequential)
        .unwrap()
        .token;
    assert_eq!(executed.token, token);
}

#[test]
fn an_unreplicated_run_in_order_reaches_the_executors_state() {
    let w = workload(10.0);
    let mut e = micro(2, &w);
    let mut tree = e.stable().tree.clone();
    for batch in w.batches() {
        let outputs = run_in_order(e.service(), &mut tree, &batch);
        let x = e.execute(&batch, Execution::Parallel).unwrap().clone();
        assert_eq!(outputs, x.outputs);
        e.commit(batch.seq, x.token).unwrap();
    }
    assert_eq!(tree, e.stable().tree);
}
