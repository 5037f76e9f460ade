//! A Wing–Gong linearizability checker for one key of the key-value service, with the
//! memoisation of Lowe ("Testing for linearizability", 2017): a depth-first search over the
//! order in which completed operations take effect, pruning (set of linearized operations,
//! register value) pairs already explored.
//!
//! The model is a register holding an optional 64-bit integer (the simulator's clients only
//! store 8-byte little-endian counters, so `incr` always applies): `put` and `delete` return
//! the previous value, `cas` whether it applied and the value after it, `incr` the new value.
//! Because `put`/`delete` return the previous value, histories leave the search little freedom
//! and stay fast.
//!
//! Operations that never completed (the client gave up or the run ended) may take effect at
//! any point after their invocation, or never.

use std::collections::BTreeSet;

/// The register's value: `None` = absent.
pub type Value = Option<i64>;

/// An operation on one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Put(i64),
    Get,
    Delete,
    Cas { expected: Value, new: i64 },
    Incr(i64),
}

/// What the replicas answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ret {
    Put { previous: Value },
    Get { value: Value },
    Delete { previous: Value },
    Cas { applied: bool, current: Value },
    Incr { value: i64 },
}

/// One operation of the history. Times are any totally ordered clock (the simulator uses its
/// event counter, which is finer than virtual milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub op: Op,
    pub invoke: u64,
    /// `None`: the operation never completed.
    pub response: Option<(u64, Ret)>,
}

/// Why a history was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinError {
    /// No order of the operations explains the results.
    NotLinearizable,
    /// The search gave up after `states_max` states (neither accepted nor refuted).
    Inconclusive,
}

/// States the search may explore before giving up.
pub const SEARCH_STATES_MAX: usize = 200_000;

/// Applies `op` to `state`; with `ret`, only if the result matches. Returns the new state.
pub fn step(state: Value, op: Op, ret: Option<Ret>) -> Option<Value> {
    let (next, expected_ret) = match op {
        Op::Put(v) => (Some(v), Ret::Put { previous: state }),
        Op::Get => (state, Ret::Get { value: state }),
        Op::Delete => (None, Ret::Delete { previous: state }),
        Op::Cas { expected, new } => {
            let applied = state == expected;
            let next = if applied { Some(new) } else { state };
            (
                next,
                Ret::Cas {
                    applied,
                    current: next,
                },
            )
        }
        Op::Incr(delta) => {
            let value = state.unwrap_or(0).wrapping_add(delta);
            (Some(value), Ret::Incr { value })
        }
    };
    match ret {
        Some(r) if r != expected_ret => None,
        _ => Some(next),
    }
}

/// Checks a single-key history starting from `initial`.
pub fn check(history: &[Entry], initial: Value) -> Result<(), LinError> {
    let n = history.len();
    if n == 0 {
        return Ok(());
    }
    let words = n.div_ceil(64);
    let completed: Vec<usize> = (0..n).filter(|&i| history[i].response.is_some()).collect();
    let mut visited: BTreeSet<(Vec<u64>, Value)> = BTreeSet::new();
    // Explicit DFS stack of (linearized set, value).
    let mut stack: Vec<(Vec<u64>, Value)> = vec![(vec![0u64; words], initial)];
    let is_set = |bits: &[u64], i: usize| bits[i / 64] >> (i % 64) & 1 == 1;
    while let Some((bits, value)) = stack.pop() {
        if completed.iter().all(|&i| is_set(&bits, i)) {
            return Ok(());
        }
        if !visited.insert((bits.clone(), value)) {
            continue;
        }
        if visited.len() > SEARCH_STATES_MAX {
            return Err(LinError::Inconclusive);
        }
        // An operation may go next only if it was invoked before every remaining completed
        // operation responded (otherwise that one must come first).
        let horizon = completed
            .iter()
            .filter(|&&i| !is_set(&bits, i))
            .filter_map(|&i| history[i].response.map(|(t, _)| t))
            .min()
            .unwrap_or(u64::MAX);
        for (i, entry) in history.iter().enumerate() {
            if is_set(&bits, i) || entry.invoke >= horizon {
                continue;
            }
            if let Some(next) = step(value, entry.op, entry.response.map(|(_, r)| r)) {
                let mut b = bits.clone();
                b[i / 64] |= 1 << (i % 64);
                stack.push((b, next));
            }
        }
    }
    Err(LinError::NotLinearizable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(op: Op, invoke: u64, response: u64, ret: Ret) -> Entry {
        Entry {
            op,
            invoke,
            response: Some((response, ret)),
        }
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let h = [
            done(Op::Put(1), 0, 1, Ret::Put { previous: None }),
            done(Op::Get, 2, 3, Ret::Get { value: Some(1) }),
            done(Op::Incr(2), 4, 5, Ret::Incr { value: 3 }),
            done(
                Op::Cas {
                    expected: Some(3),
                    new: 9,
                },
                6,
                7,
                Ret::Cas {
                    applied: true,
                    current: Some(9),
                },
            ),
            done(Op::Delete, 8, 9, Ret::Delete { previous: Some(9) }),
            done(Op::Get, 10, 11, Ret::Get { value: None }),
        ];
        assert_eq!(check(&h, None), Ok(()));
    }

    #[test]
    fn concurrent_operations_may_take_effect_in_either_order() {
        // Two overlapping puts; a later read sees the one that went second.
        let h = [
            done(Op::Put(1), 0, 10, Ret::Put { previous: Some(2) }),
            done(Op::Put(2), 1, 9, Ret::Put { previous: None }),
            done(Op::Get, 11, 12, Ret::Get { value: Some(1) }),
        ];
        assert_eq!(check(&h, None), Ok(()));
        // A read concurrent with a put may see the old or the new value.
        let h = [
            done(Op::Put(5), 0, 10, Ret::Put { previous: None }),
            done(Op::Get, 1, 2, Ret::Get { value: None }),
            done(Op::Get, 3, 4, Ret::Get { value: Some(5) }),
        ];
        assert_eq!(check(&h, None), Ok(()));
    }

    #[test]
    fn rejects_a_stale_read() {
        // The put completed before the read started, yet the read saw the old value.
        let h = [
            done(Op::Put(1), 0, 1, Ret::Put { previous: None }),
            done(Op::Put(2), 2, 3, Ret::Put { previous: Some(1) }),
            done(Op::Get, 4, 5, Ret::Get { value: Some(1) }),
        ];
        assert_eq!(check(&h, None), Err(LinError::NotLinearizable));
        // Reads going backwards in time: new value, then old value, sequentially.
        let h = [
            done(Op::Put(1), 0, 20, Ret::Put { previous: None }),
            done(Op::Get, 1, 2, Ret::Get { value: Some(1) }),
            done(Op::Get, 3, 4, Ret::Get { value: None }),
        ];
        assert_eq!(check(&h, None), Err(LinError::NotLinearizable));
    }

    #[test]
    fn rejects_a_lost_update() {
        // Two concurrent increments both saw 0 → one update was lost.
        let h = [
            done(Op::Incr(1), 0, 10, Ret::Incr { value: 1 }),
            done(Op::Incr(1), 1, 9, Ret::Incr { value: 1 }),
        ];
        assert_eq!(check(&h, None), Err(LinError::NotLinearizable));
        // Two compare-and-swaps from the same expected value both applied.
        let cas = Op::Cas {
            expected: None,
            new: 7,
        };
        let h = [
            done(
                cas,
                0,
                5,
                Ret::Cas {
                    applied: true,
                    current: Some(7),
                },
            ),
            done(
                Op::Cas {
                    expected: None,
                    new: 8,
                },
                1,
                6,
                Ret::Cas {
                    applied: true,
                    current: Some(8),
                },
            ),
        ];
        assert_eq!(check(&h, None), Err(LinError::NotLinearizable));
    }

    #[test]
    fn pending_operations_may_or_may_not_take_effect() {
        // A put that never completed explains a later read of its value…
        let h = [
            Entry {
                op: Op::Put(4),
                invoke: 0,
                response: None,
            },
            done(Op::Get, 5, 6, Ret::Get { value: Some(4) }),
            done(Op::Get, 7, 8, Ret::Get { value: Some(4) }),
        ];
        assert_eq!(check(&h, None), Ok(()));
        // …or its absence.
        let h = [
            Entry {
                op: Op::Put(4),
                invoke: 0,
                response: None,
            },
            done(Op::Get, 5, 6, Ret::Get { value: None }),
        ];
        assert_eq!(check(&h, None), Ok(()));
        // But it cannot take effect before it was invoked.
        let h = [
            done(Op::Get, 0, 1, Ret::Get { value: Some(4) }),
            Entry {
                op: Op::Put(4),
                invoke: 2,
                response: None,
            },
        ];
        assert_eq!(check(&h, None), Err(LinError::NotLinearizable));
    }
}
