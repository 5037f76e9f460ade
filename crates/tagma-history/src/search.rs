//! A depth-first search over the order in which completed operations take effect (Wing and
//! Gong), pruning (set of operations taken, object state) pairs already explored (Lowe).
//! Operations that never completed (the client gave up, or the run ended) may take effect at
//! any point after their invocation, or never.

use std::collections::BTreeSet;

/// The sequential object a history is judged against.
pub trait Model {
    type State: Clone + Ord;
    type Op;
    type Ret;

    /// Applies `op` to `state`; with `ret` (the operation completed), only if the result
    /// matches it. The next state, or `None` if `ret` cannot follow from `state`.
    fn step(
        &self,
        state: &Self::State,
        op: &Self::Op,
        ret: Option<&Self::Ret>,
    ) -> Option<Self::State>;
}

/// One operation of a history. Times are any totally ordered clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<Op, Ret> {
    pub op: Op,
    pub invoke: u64,
    /// `None`: the operation never completed (its outcome is unknown).
    pub response: Option<(u64, Ret)>,
}

/// Why a history was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinError {
    /// No order of the operations explains the results.
    NotLinearizable,
    /// The search gave up after [`SEARCH_STATES_MAX`] states (neither accepted nor refuted).
    Inconclusive,
}

/// States the search may explore before giving up.
pub const SEARCH_STATES_MAX: usize = 200_000;

/// Checks a history of one object starting from `initial`.
pub fn check<M: Model>(
    model: &M,
    history: &[Entry<M::Op, M::Ret>],
    initial: M::State,
) -> Result<(), LinError> {
    let n = history.len();
    if n == 0 {
        return Ok(());
    }
    // Positions in invocation order: a walk over the candidates stops at the horizon.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| history[i].invoke);
    let entry = |k: usize| &history[order[k]];
    let words = n.div_ceil(64);
    let completed: Vec<usize> = (0..n).filter(|&k| entry(k).response.is_some()).collect();
    let mut visited: BTreeSet<(Vec<u64>, M::State)> = BTreeSet::new();
    let mut stack: Vec<(Vec<u64>, M::State)> = vec![(vec![0u64; words], initial)];
    let is_set = |bits: &[u64], k: usize| bits[k / 64] >> (k % 64) & 1 == 1;
    while let Some((bits, state)) = stack.pop() {
        // The first operation not taken yet: everything before it is.
        let first = (bits.iter().position(|&w| w != u64::MAX))
            .map_or(n, |w| w * 64 + bits[w].trailing_ones() as usize)
            .min(n);
        let remaining = completed[completed.partition_point(|&k| k < first)..]
            .iter()
            .filter(|&&k| !is_set(&bits, k));
        // An operation may go next only if it was invoked before every remaining completed
        // operation responded (otherwise that one must come first).
        let mut horizon = u64::MAX;
        let mut done = true;
        for &k in remaining {
            done = false;
            horizon = horizon.min(entry(k).response.as_ref().map_or(u64::MAX, |(t, _)| *t));
        }
        if done {
            return Ok(());
        }
        if !visited.insert((bits.clone(), state.clone())) {
            continue;
        }
        if visited.len() > SEARCH_STATES_MAX {
            return Err(LinError::Inconclusive);
        }
        for k in first..n {
            let e = entry(k);
            if e.invoke >= horizon {
                break;
            }
            if is_set(&bits, k) {
                continue;
            }
            let ret = e.response.as_ref().map(|(_, r)| r);
            if let Some(next) = model.step(&state, &e.op, ret) {
                let mut b = bits.clone();
                b[k / 64] |= 1 << (k % 64);
                stack.push((b, next));
            }
        }
    }
    Err(LinError::NotLinearizable)
}
