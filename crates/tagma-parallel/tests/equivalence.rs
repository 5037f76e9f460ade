//! Parallel execution equals sequential execution in decision order — replies and final
//! state — under every policy, thread count and (correct) classification; and a wrong
//! classification is caught by the same comparison.

use std::sync::{Mutex, PoisonError};

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use tagma_parallel::{Access, Groups, ParallelService, Policy, Scheduler, Task, group_of};

/// Registers of integers, each behind its own lock. Operations: `read r`, `add r v` (returns
/// the old value; a read-modify-write in two steps, so that two adds run at once lose one),
/// `swap a b`, `sum` (reads every register).
struct Registers {
    regs: Vec<Mutex<i64>>,
    /// Declares `add` as conflicting with nothing: a wrong classification.
    wrong: bool,
}

const REGS: u8 = 8;

#[derive(Clone, Copy, Debug)]
enum Op {
    Read(u8),
    Add(u8, i64),
    Swap(u8, u8),
    Sum,
}

fn encode(op: Op) -> Bytes {
    let mut b = BytesMut::new();
    match op {
        Op::Read(r) => b.put_slice(&[0, r]),
        Op::Add(r, v) => {
            b.put_slice(&[1, r]);
            b.put_i64_le(v);
        }
        Op::Swap(a, c) => b.put_slice(&[2, a, c]),
        Op::Sum => b.put_u8(3),
    }
    b.freeze()
}

impl Registers {
    fn new(wrong: bool) -> Self {
        Registers {
            regs: (0..REGS).map(|i| Mutex::new(i64::from(i))).collect(),
            wrong,
        }
    }
    fn get(&self, r: u8) -> i64 {
        *self.regs[r as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
    fn set(&self, r: u8, v: i64) {
        *self.regs[r as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = v;
    }
}

impl ParallelService for Registers {
    fn execute(&self, op: &Bytes) -> Bytes {
        let reply = match op[0] {
            0 => self.get(op[1]),
            1 => {
                let old = self.get(op[1]);
                // Widen the window between the read and the write.
                for _ in 0..200 {
                    std::hint::spin_loop();
                }
                let v = i64::from_le_bytes(op[2..10].try_into().unwrap());
                self.set(op[1], old.wrapping_add(v));
                old
            }
            2 => {
                let (a, c) = (self.get(op[1]), self.get(op[2]));
                self.set(op[1], c);
                self.set(op[2], a);
                a
            }
            _ => (0..REGS).map(|r| self.get(r)).fold(0i64, i64::wrapping_add),
        };
        Bytes::copy_from_slice(&reply.to_le_bytes())
    }

    fn classify(&self, op: &Bytes) -> Access {
        match op[0] {
            0 => Access::reads([u64::from(op[1])]),
            1 if self.wrong => Access::none(),
            1 => Access::writes([u64::from(op[1])]),
            2 => Access::writes([u64::from(op[1]), u64::from(op[2])]),
            _ => Access::reads((0..REGS).map(u64::from)),
        }
    }

    fn digest(&self) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        for r in 0..REGS {
            h.update(&self.get(r).to_le_bytes());
        }
        *h.finalize().as_bytes()
    }
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..REGS).prop_map(Op::Read),
        4 => (0..REGS, -5i64..5).prop_map(|(r, v)| Op::Add(r, v)),
        1 => (0..REGS, 0..REGS).prop_map(|(a, b)| Op::Swap(a, b)),
        1 => Just(Op::Sum),
    ]
}

/// How the tasks are classified: by the service, or more coarsely (still correct: extra
/// classes, or everything).
#[derive(Clone, Copy, Debug)]
enum Coarsen {
    None,
    ExtraClass,
    All,
}

fn tasks(service: &Registers, ops: &[Op], coarsen: &[Coarsen]) -> Vec<Task> {
    ops.iter()
        .zip(coarsen.iter().cycle())
        .map(|(op, c)| {
            let bytes = encode(*op);
            let mut access = service.classify(&bytes);
            match c {
                Coarsen::None => {}
                Coarsen::ExtraClass => access.writes.push(99),
                Coarsen::All => access = Access::all(),
            }
            Task {
                group: group_of(&access),
                op: bytes,
                access,
            }
        })
        .collect()
}

/// Runs `batches` under `policy` and sequentially; `Err` with the first difference.
fn compare(
    batches: &[Vec<Op>],
    coarsen: &[Coarsen],
    policy: Policy,
    threads: usize,
    wrong: bool,
) -> Result<(), String> {
    let (par, seq) = (Registers::new(wrong), Registers::new(wrong));
    let parallel = Scheduler::new(policy, threads, Groups::default());
    let sequential = Scheduler::new(Policy::Sequential, 1, Groups::default());
    for (b, ops) in batches.iter().enumerate() {
        let got = parallel.run(&par, &tasks(&par, ops, coarsen));
        let want = sequential.run(&seq, &tasks(&seq, ops, coarsen));
        if got != want {
            return Err(format!("batch {b}: replies differ"));
        }
    }
    if par.digest() != seq.digest() {
        return Err("final states differ".into());
    }
    Ok(())
}

fn arb_coarsen() -> impl Strategy<Value = Vec<Coarsen>> {
    prop::collection::vec(
        prop_oneof![
            8 => Just(Coarsen::None),
            1 => Just(Coarsen::ExtraClass),
            1 => Just(Coarsen::All),
        ],
        1..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_policy_equals_sequential_execution(
        batches in prop::collection::vec(prop::collection::vec(arb_op(), 0..120), 1..5),
        coarsen in arb_coarsen(),
        threads in 1usize..5,
        policy in prop_oneof![
            Just(Policy::Barrier),
            Just(Policy::Graph),
            any::<u64>().prop_map(|seed| Policy::Shuffled { seed }),
        ],
    ) {
        prop_assert_eq!(compare(&batches, &coarsen, policy, threads, false), Ok(()));
    }
}

#[test]
fn registered_groups_run_under_the_barrier_policy_like_sequential() {
    // Client-chosen groups: a multi-worker group serialises against the
    // workers it names.
    let mut groups = Groups::default();
    groups.add(100, &[0, 1], 3).unwrap();
    let service = Registers::new(false);
    let reference = Registers::new(false);
    let ops: Vec<Op> = (0..300)
        .map(|i| match i % 5 {
            0 => Op::Add((i % 8) as u8, 1),
            1 => Op::Read((i % 8) as u8),
            2 => Op::Swap(0, 1),
            3 => Op::Add(0, 2),
            _ => Op::Sum,
        })
        .collect();
    // Group per op: every register r is worker r % 3's class; `swap 0 1` and `add 0` go to
    // group 100 (workers 0 and 1) … conservatively, anything touching 0 or 1 does.
    let tasks: Vec<Task> = ops
        .iter()
        .map(|op| {
            let group = match op {
                Op::Read(r) | Op::Add(r, _) if *r > 1 => {
                    tagma_parallel::Group::Worker(u32::from(*r) % 3)
                }
                Op::Sum => tagma_parallel::Group::All,
                _ => tagma_parallel::Group::Custom(100),
            };
            Task {
                op: encode(*op),
                group,
                access: groups.access(group),
            }
        })
        .collect();
    // A register r > 1 hashes to worker r % 3, which may be 0 or 1: those share a worker
    // with group 100, so ordering against it holds; 2 and 5 go to worker 2 (their own).
    let barrier = Scheduler::new(Policy::Barrier, 3, groups.clone());
    let sequential = Scheduler::new(Policy::Sequential, 1, Groups::default());
    for chunk in tasks.chunks(60) {
        assert_eq!(
            barrier.run(&service, chunk),
            sequential.run(&reference, chunk)
        );
    }
    assert_eq!(service.digest(), reference.digest());
}

#[test]
fn a_wrong_classification_is_caught_by_the_comparison() {
    // `add` declared conflict-free: concurrent adds to one register lose updates, and the
    // comparison with sequential execution sees it.
    let batches: Vec<Vec<Op>> = (0..40)
        .map(|_| (0..64).map(|i| Op::Add((i % 2) as u8, 1)).collect())
        .collect();
    let caught =
        (0..5).any(|_| compare(&batches, &[Coarsen::None], Policy::Graph, 4, true).is_err());
    assert!(caught, "a lost update went unnoticed");
    // Reordered (not concurrent) execution catches it deterministically: `add` returns the
    // old value, so another order of adds to one register gives other replies.
    assert!(
        compare(
            &batches,
            &[Coarsen::None],
            Policy::Shuffled { seed: 1 },
            1,
            true
        )
        .is_err()
    );
    // The right classification never differs.
    assert_eq!(
        compare(&batches, &[Coarsen::None], Policy::Graph, 4, false),
        Ok(())
    );
}
