//! Executing one segment of a run — consecutive operations inside spaces (no create,
//! destroy or list among them) at one agreed time — with the operations of each space in
//! their order and different spaces side by side, as DDS does (Félix, Bessani, Correia).
//!
//! A space's operations touch only that space, and the only state spaces share, the count of
//! waiting operations per principal, is read as it was before the segment (each space adds
//! its own changes, merged after). So every space's outcome depends only on its own state and
//! operations, and running the spaces on one thread or many gives the same replies, late
//! replies and state. Replies take their requests' positions; late replies are ordered by the
//! position of the request that gave them, then in the order it gave them.
//!
//! Threads live for one segment (`std::thread::scope`), each running a share of the spaces,
//! the calling thread one of them; a segment of one space, or a service of one thread,
//! starts none.

use std::collections::BTreeMap;
use std::ops::Range;

use bytes::Bytes;
use tagma_exec::{Context, LateReply};
use tagma_space::{SpaceError, SpaceReply, SpaceRequest};

use crate::limits::SpaceLimits;
use crate::space::Space;
use crate::waits::{WaitBudget, WaitCounts};

/// What the operations of one space gave.
struct GroupOut {
    replies: Vec<(usize, Option<SpaceReply>)>,
    late: Vec<(usize, LateReply)>,
    delta: BTreeMap<u32, i64>,
}

/// One space and the positions of its operations in the run.
type Job<'s> = (&'s mut Space, Vec<usize>);

/// The run being executed: each request with its context and what it decoded to.
pub(crate) struct Run<'r> {
    pub(crate) requests: &'r [(Bytes, Context)],
    pub(crate) decoded: &'r [Result<SpaceRequest, SpaceError>],
}

/// Executes the requests at `range` of `run` (none of them global), on up to `threads`
/// threads, writing replies at their positions in `replies` and appending late replies to
/// `late`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute_segment(
    spaces: &mut BTreeMap<String, Space>,
    counts: &mut WaitCounts,
    limits: &SpaceLimits,
    threads: usize,
    run: &Run<'_>,
    range: Range<usize>,
    replies: &mut [Option<Bytes>],
    late: &mut Vec<LateReply>,
) {
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for index in range {
        match &run.decoded[index] {
            Err(e) => replies[index] = Some(SpaceReply::Error(e.clone()).encode()),
            Ok(request) => match request.space() {
                Some(space) if !request.is_global() => groups.entry(space).or_default().push(index),
                _ => debug_assert!(false, "a global operation inside a segment"),
            },
        }
    }
    let mut jobs: Vec<Job<'_>> = Vec::with_capacity(groups.len());
    for (name, space) in spaces.iter_mut() {
        if groups.is_empty() {
            break;
        }
        if let Some(indices) = groups.remove(name.as_str()) {
            jobs.push((space, indices));
        }
    }
    // What is left names no space.
    for (name, indices) in groups {
        let reply = SpaceReply::Error(SpaceError::UnknownSpace(name.to_owned())).encode();
        for index in indices {
            replies[index] = Some(reply.clone());
        }
    }

    let before: &WaitCounts = counts;
    let run_job = |(space, indices): Job<'_>| -> GroupOut {
        let mut budget = WaitBudget::new(before);
        let mut out = GroupOut {
            replies: Vec::with_capacity(indices.len()),
            late: Vec::new(),
            delta: BTreeMap::new(),
        };
        let mut produced = Vec::new();
        for index in indices {
            let Ok(request) = &run.decoded[index] else {
                continue;
            };
            let ctx = &run.requests[index].1;
            let reply = space.execute(request, ctx, limits, &mut budget, &mut produced);
            out.replies.push((index, reply));
            out.late.extend(produced.drain(..).map(|l| (index, l)));
        }
        out.delta = budget.delta;
        out
    };
    let outs: Vec<GroupOut> = if threads <= 1 || jobs.len() <= 1 {
        jobs.into_iter().map(run_job).collect()
    } else {
        let workers = threads.min(jobs.len());
        let mut buckets: Vec<Vec<Job<'_>>> = (0..workers).map(|_| Vec::new()).collect();
        for (k, job) in jobs.into_iter().enumerate() {
            buckets[k % workers].push(job);
        }
        let run_job = &run_job;
        let own = buckets.remove(0);
        std::thread::scope(|scope| {
            let handles: Vec<_> = buckets
                .into_iter()
                .map(|bucket| {
                    scope.spawn(move || bucket.into_iter().map(run_job).collect::<Vec<_>>())
                })
                .collect();
            // The calling thread runs the first share itself: one thread fewer to start.
            let mut outs: Vec<GroupOut> = own.into_iter().map(run_job).collect();
            for h in handles {
                outs.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
            }
            outs
        })
    };

    let mut produced: Vec<(usize, LateReply)> = Vec::new();
    for out in outs {
        for (index, reply) in out.replies {
            replies[index] = reply.map(|r| r.encode());
        }
        produced.extend(out.late);
        counts.apply(&out.delta);
    }
    // Stable: a request's late replies keep the order it gave them in.
    produced.sort_by_key(|(index, _)| *index);
    late.extend(produced.into_iter().map(|(_, l)| l));
}
