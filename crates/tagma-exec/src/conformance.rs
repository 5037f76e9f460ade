//! A conformance suite every [`Service`] implementation should pass (call it from the
//! service's own tests with a representative workload).
//!
//! The suite drives services as the executor does: the workload's requests, in simulated
//! batches with deterministically derived contexts, go to [`Service::execute_ordered_run`]
//! (one run per batch), and every batch starts with [`Service::advance_time`] to its agreed
//! timestamp. [`check_service`] verifies:
//! 1. **determinism**: two fresh instances fed the same workload return byte-identical
//!    replies and late replies, equal snapshots and equal state digests;
//! 2. **snapshot round-trip**: a snapshot taken after the first half of the workload,
//!    installed into a third fresh instance, gives the same digest, and that instance then
//!    returns the same replies and late replies as the others for the second half;
//! 3. **unordered execution is read-only**: executing every workload request unordered does
//!    not change the state digest;
//! 4. **robust snapshot installation**: installing garbage (random bytes, truncated and
//!    corrupted snapshots) returns an error or succeeds, but never panics;
//! 5. **frozen snapshots**: a [`Service::freeze`] taken at the middle of the workload, called
//!    after the second half ran, returns the middle's snapshot;
//! 6. **deferred replies, exactly once**: every late reply answers a request whose reply was
//!    deferred and not yet given; after the workload, batches that carry only the time, at
//!    each [`Service::next_due_ms`] the instances agree on, give the same late replies on
//!    every instance.

use std::collections::BTreeSet;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};

use bytes::Bytes;
use tagma_wire::{ClientId, ConsensusId, RequestSeq};

use crate::{Context, LateReply, Service, request_seed};

/// Requests per simulated batch.
const BATCH_LEN: usize = 5;
/// Number of distinct simulated clients.
const CLIENTS: usize = 3;
const BASE_TIME_MS: u64 = 1_700_000_000_000;
/// The most batches that carry only the time, run after the workload.
const TIME_ONLY_BATCHES_MAX: usize = 64;

/// The deterministic context of the `i`-th ordered request of the workload.
fn ordered_context(i: usize) -> Context {
    let cid = (i / BATCH_LEN) as u64;
    let index = i % BATCH_LEN;
    let client = i % CLIENTS;
    Context {
        client: ClientId::new(1, client as u32),
        seq: RequestSeq((i / CLIENTS) as u64 + 1),
        cid: Some(ConsensusId(cid)),
        timestamp_ms: BASE_TIME_MS + cid * 7,
        seed: request_seed(cid.wrapping_mul(0xA076_1D64_78BD_642F), index),
    }
}

fn unordered_context(i: usize) -> Context {
    Context {
        client: ClientId::new(2, (i % CLIENTS) as u32),
        seq: RequestSeq(i as u64 + 1),
        cid: None,
        timestamp_ms: BASE_TIME_MS + i as u64,
        seed: 0,
    }
}

fn show(bytes: &[u8]) -> String {
    const MAX: usize = 32;
    let hex: String = bytes.iter().take(MAX).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > MAX {
        format!("{hex}… ({} bytes)", bytes.len())
    } else {
        format!("{hex} ({} bytes)", bytes.len())
    }
}

/// Runs the conformance suite (see the module docs) on instances built by `make`, which must
/// return a service in the same initial state on every call. Returns a description of the
/// first violation found.
pub fn check_service<S: Service>(make: impl Fn() -> S, workload: &[Bytes]) -> Result<(), String> {
    let mut a = make();
    let mut b = make();
    if a.state_digest() != b.state_digest() {
        return Err(format!(
            "determinism: two fresh instances have different digests ({:?} vs {:?})",
            a.state_digest(),
            b.state_digest()
        ));
    }

    // (1) Determinism over the first half.
    let mid = workload.len() / 2;
    let mut ledger = Ledger::default();
    for step in steps(0..mid) {
        let (ra, la) = run_step(&mut a, workload, &step);
        let (rb, lb) = run_step(&mut b, workload, &step);
        compare("determinism", workload, &step, (&ra, &la), (&rb, &lb))?;
        ledger.record(&step, &ra, &la)?;
        if a.state_digest() != b.state_digest() {
            return Err(format!(
                "determinism: state digests differ after requests {:?}",
                step.requests
            ));
        }
    }

    // (2) Snapshot round-trip at the middle.
    let snapshot = a.snapshot();
    let frozen = a.freeze();
    if snapshot != b.snapshot() {
        return Err(format!(
            "determinism: equal states after {mid} requests produce different snapshots"
        ));
    }
    let mut c = make();
    c.install_snapshot(&snapshot).map_err(|e| {
        format!("snapshot: installing a valid snapshot (after {mid} requests) failed: {e}")
    })?;
    if c.state_digest() != a.state_digest() {
        return Err(format!(
            "snapshot: digest after install ({:?}) differs from the source's ({:?})",
            c.state_digest(),
            a.state_digest()
        ));
    }
    if c.snapshot() != snapshot {
        return Err("snapshot: re-snapshotting an installed snapshot gives different bytes".into());
    }
    if c.next_due_ms() != a.next_due_ms() {
        return Err(format!(
            "snapshot: after install, next_due_ms is {:?} instead of {:?}",
            c.next_due_ms(),
            a.next_due_ms()
        ));
    }
    for step in steps(mid..workload.len()) {
        let (ra, la) = run_step(&mut a, workload, &step);
        let (rb, lb) = run_step(&mut b, workload, &step);
        let (rc, lc) = run_step(&mut c, workload, &step);
        compare("determinism", workload, &step, (&ra, &la), (&rb, &lb))?;
        compare(
            "snapshot: after installing the snapshot",
            workload,
            &step,
            (&ra, &la),
            (&rc, &lc),
        )?;
        ledger.record(&step, &ra, &la)?;
        let (da, db, dc) = (a.state_digest(), b.state_digest(), c.state_digest());
        if da != db {
            return Err(format!(
                "determinism: state digests differ after requests {:?}",
                step.requests
            ));
        }
        if da != dc {
            return Err(format!(
                "snapshot: after installing the snapshot, digests differ after requests {:?}",
                step.requests
            ));
        }
    }

    // (6) The time passes with no request: batches that carry only the time, at the time the
    // instances say they next have work.
    let mut last_ms = ordered_context(workload.len().saturating_sub(1)).timestamp_ms;
    for _ in 0..TIME_ONLY_BATCHES_MAX {
        let due = a.next_due_ms();
        if due != b.next_due_ms() || due != c.next_due_ms() {
            return Err(format!(
                "determinism: next_due_ms differs: {due:?}, {:?}, {:?}",
                b.next_due_ms(),
                c.next_due_ms()
            ));
        }
        let Some(due) = due else { break };
        last_ms = last_ms.max(due);
        let (mut la, mut lb, mut lc) = (Vec::new(), Vec::new(), Vec::new());
        a.advance_time(last_ms, &mut la);
        b.advance_time(last_ms, &mut lb);
        c.advance_time(last_ms, &mut lc);
        if la != lb || la != lc {
            return Err(format!(
                "determinism: a batch carrying only the time {last_ms} gave different late replies"
            ));
        }
        ledger.settle(&la)?;
        if a.state_digest() != b.state_digest() || a.state_digest() != c.state_digest() {
            return Err(format!(
                "determinism: state digests differ after the time reached {last_ms}"
            ));
        }
        if let Some(still) = a.next_due_ms().filter(|d| *d <= last_ms) {
            return Err(format!(
                "deferred replies: after the agreed time reached {last_ms}, next_due_ms is \
                 still {still}: advance_time must do what is due by its time"
            ));
        }
        last_ms += 1;
    }

    // (5) A frozen snapshot is the state when it was taken, whatever ran since.
    if let Some(frozen) = frozen
        && frozen() != snapshot
    {
        return Err(format!(
            "freeze: the snapshot frozen after {mid} requests differs from snapshot() then"
        ));
    }

    // (3) Unordered execution leaves the state unchanged.
    let before = a.state_digest();
    for (i, request) in workload.iter().enumerate() {
        let _ = a.execute_unordered(request, &unordered_context(i));
        if a.state_digest() != before {
            return Err(format!(
                "unordered: executing request {i} ({}) unordered changed the state digest",
                show(request)
            ));
        }
    }
    if a.snapshot() != b.snapshot() {
        return Err("unordered: unordered execution changed the snapshot".into());
    }

    // (4) Garbage snapshots never panic.
    for (what, garbage) in garbage_snapshots(&snapshot) {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut d = make();
            let _ = d.install_snapshot(&garbage);
        }));
        if outcome.is_err() {
            return Err(format!(
                "install_snapshot panicked on {what}: {}",
                show(&garbage)
            ));
        }
    }
    Ok(())
}

/// One simulated batch's part of the workload: the requests at `requests`, all of one
/// batch; `starts_batch` when the first of them is the batch's first (the agreed time
/// advances before it).
struct Step {
    requests: Range<usize>,
    starts_batch: bool,
}

/// The workload's requests at `range`, cut into batches of [`BATCH_LEN`] (a batch that the
/// range's ends cut runs in part, as a batch does around a view change).
fn steps(range: Range<usize>) -> Vec<Step> {
    let mut out = Vec::new();
    let mut start = range.start;
    while start < range.end {
        let end = ((start / BATCH_LEN + 1) * BATCH_LEN).min(range.end);
        out.push(Step {
            requests: start..end,
            starts_batch: start.is_multiple_of(BATCH_LEN),
        });
        start = end;
    }
    out
}

/// Runs one step on `service`: the agreed time's advance if the step starts its batch, then
/// its requests as one run. Returns the replies and every late reply given.
fn run_step<S: Service>(
    service: &mut S,
    workload: &[Bytes],
    step: &Step,
) -> (Vec<Option<Bytes>>, Vec<LateReply>) {
    let requests: Vec<(Bytes, Context)> = step
        .requests
        .clone()
        .map(|i| (workload[i].clone(), ordered_context(i)))
        .collect();
    let mut late = Vec::new();
    if step.starts_batch
        && let Some((_, ctx)) = requests.first()
    {
        service.advance_time(ctx.timestamp_ms, &mut late);
    }
    let replies = service.execute_ordered_run(&requests, &mut late);
    (replies, late)
}

fn show_reply(reply: &Option<Bytes>) -> String {
    reply
        .as_ref()
        .map_or_else(|| "a deferred reply".into(), |r| show(r))
}

/// Compares two instances' replies and late replies to one step.
fn compare(
    what: &str,
    workload: &[Bytes],
    step: &Step,
    (ra, la): (&[Option<Bytes>], &[LateReply]),
    (rb, lb): (&[Option<Bytes>], &[LateReply]),
) -> Result<(), String> {
    if ra.len() != step.requests.len() || rb.len() != step.requests.len() {
        return Err(format!(
            "run: {} requests got {} and {} replies",
            step.requests.len(),
            ra.len(),
            rb.len()
        ));
    }
    for ((i, a), b) in step.requests.clone().zip(ra).zip(rb) {
        if a != b {
            return Err(format!(
                "{what}: request {i} ({}) gave {} instead of {}",
                show(&workload[i]),
                show_reply(b),
                show_reply(a)
            ));
        }
    }
    if la != lb {
        return Err(format!(
            "{what}: requests {:?} gave different late replies ({} vs {})",
            step.requests,
            la.len(),
            lb.len()
        ));
    }
    Ok(())
}

/// The requests whose reply is deferred and not given yet: each late reply must answer one
/// of them, once.
#[derive(Default)]
struct Ledger {
    deferred: BTreeSet<(ClientId, RequestSeq)>,
}

impl Ledger {
    fn record(
        &mut self,
        step: &Step,
        replies: &[Option<Bytes>],
        late: &[LateReply],
    ) -> Result<(), String> {
        // Late replies given before a step's requests ran (the time's advance) or by them
        // answer requests deferred earlier or in this run.
        for (i, reply) in step.requests.clone().zip(replies) {
            if reply.is_none() {
                let ctx = ordered_context(i);
                self.deferred.insert((ctx.client, ctx.seq));
            }
        }
        self.settle(late)
    }

    fn settle(&mut self, late: &[LateReply]) -> Result<(), String> {
        for reply in late {
            if !self.deferred.remove(&(reply.client, reply.seq)) {
                return Err(format!(
                    "deferred replies: a late reply to {}/{}, whose reply was not deferred or \
                     was given already",
                    reply.client, reply.seq
                ));
            }
        }
        Ok(())
    }
}

/// Invalid (or at least unexpected) snapshots derived from a valid one, with a description.
fn garbage_snapshots(valid: &Bytes) -> Vec<(String, Bytes)> {
    let mut out = vec![
        ("an empty snapshot".to_string(), Bytes::new()),
        (
            "a single 0xff byte".to_string(),
            Bytes::from_static(&[0xff]),
        ),
        ("32 0xff bytes".to_string(), Bytes::from(vec![0xffu8; 32])),
    ];
    // Pseudo-random garbage (deterministic).
    let mut state = 0x1234_5678_9abc_def0u64;
    for len in [1usize, 7, 64, 1000] {
        let bytes: Vec<u8> = (0..len)
            .map(|i| {
                state = request_seed(state, i);
                state as u8
            })
            .collect();
        out.push((format!("{len} random bytes"), Bytes::from(bytes)));
    }
    // Truncations of the valid snapshot (at most ~64, evenly spread, always including the
    // short ones where headers are cut).
    let len = valid.len();
    let step = (len / 64).max(1);
    let mut cut = 0;
    while cut < len {
        out.push((
            format!("the valid snapshot truncated to {cut} of {len} bytes"),
            valid.slice(..cut),
        ));
        cut += if cut < 16 { 1 } else { step };
    }
    // Corruptions: one byte flipped, or a trailing byte appended.
    for pos in [0, 1, 2, 3, 4, 5, 8, len / 2, len.saturating_sub(1)] {
        if pos < len {
            let mut bytes = valid.to_vec();
            bytes[pos] ^= 0xff;
            out.push((
                format!("the valid snapshot with byte {pos} flipped"),
                Bytes::from(bytes),
            ));
        }
    }
    let mut extended = valid.to_vec();
    extended.push(0);
    out.push((
        "the valid snapshot with a trailing byte".to_string(),
        Bytes::from(extended),
    ));
    out
}
