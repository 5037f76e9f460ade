//! Running a range of seeds of a simulation whose runs report violations and a liveness
//! failure: a panic counts as a violation, and the first failures are kept with their first
//! problem.

use std::ops::Range;

/// The failures kept, at most.
const FAILURES_KEPT: usize = 20;

/// What a range of seeds came to.
#[derive(Clone, Debug, Default)]
pub(crate) struct SeedTally {
    pub(crate) seeds_run: u64,
    pub(crate) violations: u64,
    pub(crate) liveness_failures: u64,
    /// (seed, first problem), the first failing seeds.
    pub(crate) failures: Vec<(u64, String)>,
}

/// Runs `run` on every seed of `seeds`; `problems` names a report's first violation and its
/// liveness failure; `add` sums up every report that came back.
pub(crate) fn run_each<R>(
    seeds: Range<u64>,
    run: fn(u64) -> R,
    problems: fn(&R) -> (Option<String>, Option<String>),
    mut add: impl FnMut(&R),
) -> SeedTally {
    let mut tally = SeedTally::default();
    for seed in seeds {
        tally.seeds_run += 1;
        let problem = match std::panic::catch_unwind(|| run(seed)) {
            Ok(report) => {
                add(&report);
                match problems(&report) {
                    (Some(violation), _) => {
                        tally.violations += 1;
                        Some(violation)
                    }
                    (None, Some(liveness)) => {
                        tally.liveness_failures += 1;
                        Some(liveness)
                    }
                    (None, None) => None,
                }
            }
            Err(panic) => {
                let what = (panic.downcast_ref::<String>().cloned())
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                tally.violations += 1;
                Some(format!("panicked: {what}"))
            }
        };
        if let Some(problem) = problem
            && tally.failures.len() < FAILURES_KEPT
        {
            tally.failures.push((seed, problem));
        }
    }
    tally
}
