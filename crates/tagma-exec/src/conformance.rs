//! A conformance suite every [`Service`] implementation should pass (call it from the
//! service's own tests with a representative workload).
//!
//! [`check_service`] verifies:
//! 1. **determinism**: two fresh instances fed the same workload as ordered requests (in
//!    several simulated batches, with deterministically derived contexts) return
//!    byte-identical replies, equal snapshots and equal state digests;
//! 2. **snapshot round-trip**: a snapshot taken after the first half of the workload,
//!    installed into a third fresh instance, gives the same digest, and that instance then
//!    returns the same replies as the others for the second half;
//! 3. **unordered execution is read-only**: executing every workload request unordered does
//!    not change the state digest;
//! 4. **robust snapshot installation**: installing garbage (random bytes, truncated and
//!    corrupted snapshots) returns an error or succeeds, but never panics;
//! 5. **frozen snapshots**: a [`Service::freeze`] taken at the middle of the workload, called
//!    after the second half ran, returns the middle's snapshot.

use std::panic::{AssertUnwindSafe, catch_unwind};

use bytes::Bytes;
use tagma_wire::{ClientId, ConsensusId, RequestSeq};

use crate::{Context, Service, request_seed};

/// Requests per simulated batch.
const BATCH_LEN: usize = 5;
/// Number of distinct simulated clients.
const CLIENTS: usize = 3;
const BASE_TIME_MS: u64 = 1_700_000_000_000;

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
    for (i, request) in workload[..mid].iter().enumerate() {
        let ctx = ordered_context(i);
        let ra = a.execute_ordered(request, &ctx);
        let rb = b.execute_ordered(request, &ctx);
        if ra != rb {
            return Err(format!(
                "determinism: request {i} ({}) gave different replies: {} vs {}",
                show(request),
                show(&ra),
                show(&rb)
            ));
        }
        if a.state_digest() != b.state_digest() {
            return Err(format!(
                "determinism: state digests differ after request {i} ({})",
                show(request)
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
    for (i, request) in workload.iter().enumerate().skip(mid) {
        let ctx = ordered_context(i);
        let ra = a.execute_ordered(request, &ctx);
        let rb = b.execute_ordered(request, &ctx);
        let rc = c.execute_ordered(request, &ctx);
        if ra != rb {
            return Err(format!(
                "determinism: request {i} ({}) gave different replies: {} vs {}",
                show(request),
                show(&ra),
                show(&rb)
            ));
        }
        if ra != rc {
            return Err(format!(
                "snapshot: after installing the snapshot, request {i} ({}) gave {} instead of {}",
                show(request),
                show(&rc),
                show(&ra)
            ));
        }
        let (da, db, dc) = (a.state_digest(), b.state_digest(), c.state_digest());
        if da != db {
            return Err(format!(
                "determinism: state digests differ after request {i} ({})",
                show(request)
            ));
        }
        if da != dc {
            return Err(format!(
                "snapshot: after installing the snapshot, digests differ after request {i} ({})",
                show(request)
            ));
        }
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
