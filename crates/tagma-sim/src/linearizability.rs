//! The linearizability check of one key of the key-value service as the simulator's clients
//! use it, on the Wing–Gong search of `tagma-history` (with Lowe's memoisation).
//!
//! The model is a register holding an optional 64-bit integer (the simulator's clients only
//! store 8-byte little-endian counters, so `incr` always applies): `put` and `delete` return
//! the previous value, `cas` whether it applied and the value after it, `incr` the new value.
//! Because `put`/`delete` return the previous value, histories leave the search little freedom
//! and stay fast.
//!
//! Operations that never completed (the client gave up or the run ended) may take effect at
//! any point after their invocation, or never.

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
pub type Entry = tagma_history::Entry<Op, Ret>;

pub use tagma_history::{LinError, SEARCH_STATES_MAX};

/// The register as a model for the search.
struct Counter;

impl tagma_history::Model for Counter {
    type State = Value;
    type Op = Op;
    type Ret = Ret;

    fn step(&self, state: &Value, op: &Op, ret: Option<&Ret>) -> Option<Value> {
        step(*state, *op, ret.copied())
    }
}

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
    tagma_history::search::check(&Counter, history, initial)
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
