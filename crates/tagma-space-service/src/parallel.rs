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
//! The spaces of a segment are dealt into shares, one per thread: the calling thread runs
//! one share, the service's worker pool (threads that live as long as the service) the
//! others. A segment of one space, one shorter than the service's parallel minimum
//! ([`PARALLEL_MIN_REQUESTS`] unless set), or a service without a pool runs on the calling
//! thread alone.

use std::collections::BTreeMap;
use std::ops::Range;

use bytes::Bytes;
use tagma_exec::{Context, LateReply};
use tagma_space::{SpaceError, SpaceReply, SpaceRequest};

use crate::limits::SpaceLimits;
use crate::space::Space;
use crate::waits::{WaitBudget, WaitCounts};

/// The fewest requests a segment (or a run, for decoding) has, by default, for its work to
/// be split among threads: handing work to a worker and waiting for it costs some 50 µs on
/// a shared virtual machine, about what 25 operations take, and below some 500 requests the
/// split saves less than it costs there.
pub const PARALLEL_MIN_REQUESTS: usize = 512;

/// What the operations of one space gave.
struct GroupOut {
    /// Encoded where they are made, on the share's thread.
    replies: Vec<(usize, Option<Bytes>)>,
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

/// Executes the requests at `range` of `run` (none of them global), on the calling thread
/// and `pool`'s workers if it has at least `parallel_min` requests, writing replies at their
/// positions in `replies` and appending late replies to `late`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute_segment(
    spaces: &mut BTreeMap<String, Space>,
    counts: &mut WaitCounts,
    limits: &SpaceLimits,
    pool: Option<&rayon::ThreadPool>,
    parallel_min: usize,
    run: &Run<'_>,
    range: Range<usize>,
    replies: &mut [Option<Bytes>],
    late: &mut Vec<LateReply>,
) {
    let pool = pool.filter(|_| range.len() >= parallel_min);
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
    // Each job with the space's position among all spaces: a space goes to the same thread
    // segment after segment (its tuples are mostly freed by the thread that made them).
    let mut jobs: Vec<(usize, Job<'_>)> = Vec::with_capacity(groups.len());
    for (position, (name, space)) in spaces.iter_mut().enumerate() {
        if groups.is_empty() {
            break;
        }
        if let Some(indices) = groups.remove(name.as_str()) {
            jobs.push((position, (space, indices)));
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
            out.replies.push((index, reply.map(|r| r.encode())));
            out.late.extend(produced.drain(..).map(|l| (index, l)));
        }
        out.delta = budget.delta;
        out
    };
    let outs: Vec<GroupOut> = match pool {
        Some(pool) if jobs.len() > 1 => {
            let shares = pool.current_num_threads() + 1;
            let mut buckets: Vec<Vec<Job<'_>>> = (0..shares).map(|_| Vec::new()).collect();
            for (position, job) in jobs {
                buckets[position % shares].push(job);
            }
            buckets.retain(|bucket| !bucket.is_empty());
            on_shares(pool, buckets, |bucket| {
                bucket.into_iter().map(run_job).collect::<Vec<_>>()
            })
            .into_iter()
            .flatten()
            .collect()
        }
        _ => jobs.into_iter().map(|(_, job)| run_job(job)).collect(),
    };

    let mut produced: Vec<(usize, LateReply)> = Vec::new();
    for out in outs {
        for (index, reply) in out.replies {
            replies[index] = reply;
        }
        produced.extend(out.late);
        counts.apply(&out.delta);
    }
    // Stable: a request's late replies keep the order it gave them in.
    produced.sort_by_key(|(index, _)| *index);
    late.extend(produced.into_iter().map(|(_, l)| l));
}

/// Runs `f` on each share: the first on the calling thread, the others on `pool`'s workers;
/// returns the results in the shares' order. A worker's panic is raised again here.
fn on_shares<I: Send, U: Send>(
    pool: &rayon::ThreadPool,
    shares: Vec<I>,
    f: impl Fn(I) -> U + Sync,
) -> Vec<U> {
    let mut outs: Vec<Option<U>> = (0..shares.len()).map(|_| None).collect();
    let mut shares = shares.into_iter();
    let Some(own) = shares.next() else {
        return Vec::new();
    };
    let (own_out, pooled_outs) = outs.split_first_mut().expect("one share at least");
    let f = &f;
    pool.in_place_scope(|scope| {
        for (share, out) in shares.zip(pooled_outs.iter_mut()) {
            scope.spawn(move |_| *out = Some(f(share)));
        }
        *own_out = Some(f(own));
    });
    outs.into_iter()
        .map(|out| out.expect("every share ran"))
        .collect()
}

/// Maps `items` through `f` in order, split into one chunk per thread (the calling thread's
/// and `pool`'s workers) when there is a pool and at least `parallel_min` items.
pub(crate) fn map_in_order<T: Sync, U: Send>(
    pool: Option<&rayon::ThreadPool>,
    parallel_min: usize,
    items: &[T],
    f: impl Fn(&T) -> U + Sync,
) -> Vec<U> {
    match pool {
        Some(pool) if items.len() >= parallel_min.max(2) => {
            let chunk = items.len().div_ceil(pool.current_num_threads() + 1);
            on_shares(pool, items.chunks(chunk).collect(), |chunk: &[T]| {
                chunk.iter().map(&f).collect::<Vec<_>>()
            })
            .into_iter()
            .flatten()
            .collect()
        }
        _ => items.iter().map(f).collect(),
    }
}
