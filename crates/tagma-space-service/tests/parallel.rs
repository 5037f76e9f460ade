//! Execution by space gives the same replies, late replies and state digests on one thread,
//! on several, and request by request, over random workloads of every operation (seeded
//! splitmix64, so each run is the same).

mod common;

use bytes::Bytes;
use common::*;
use tagma_exec::{Context, LateReply, Service};
use tagma_space::SpaceRequest;
use tagma_space_service::{SpaceLimits, SpaceService};
use tagma_wire::{ClientId, ConsensusId, RequestSeq};

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const SPACES: [&str; 5] = ["s0", "s1", "s2", "s3", "s4"];

fn random_request(rng: &mut SplitMix) -> SpaceRequest {
    let s = SPACES[rng.below(SPACES.len() as u64) as usize];
    let v = rng.below(4);
    let t = format!("(\"k\", {v})");
    let p = if rng.below(3) == 0 {
        "(\"k\", *)".to_string()
    } else {
        t.clone()
    };
    match rng.below(20) {
        0..=3 => out(s, &t),
        4 | 5 => out_leased(s, &t, 5 + rng.below(200)),
        6 => rdp(s, &p),
        7 => inp(s, &p),
        8 | 9 => rd(s, &p, 5 + rng.below(150)),
        10 | 11 => in_(s, &p, 5 + rng.below(150)),
        12 => cas(s, &p, &t, Some(10 + rng.below(100))),
        13 => replace(s, &p, &format!("(\"k\", {})", rng.below(4))),
        14 => rd_all(s, &p, 1 + rng.below(5) as u32),
        15 => in_all(s, &p, 1 + rng.below(3) as u32),
        16 => renew(s, &p, 10 + rng.below(100)),
        17 => match rng.below(6) {
            0 => destroy(s),
            1 => create(s),
            2 => list(),
            _ => out(s, &t),
        },
        18 => create_with(s, "take requires field 1 = invoker"),
        _ => rdp(s, "(\"k\", *)"),
    }
}

/// One decided batch: its agreed time and its requests with their contexts.
type Batch = (u64, Vec<(Bytes, Context)>);

fn random_batches(seed: u64, count: usize) -> Vec<Batch> {
    let mut rng = SplitMix(seed);
    let mut seqs = [0u64; 8];
    let mut now_ms = 1_000;
    let creates = SPACES
        .iter()
        .enumerate()
        .map(|(i, s)| {
            seqs[0] += 1;
            let request = if i == 2 {
                create_with(s, "unique (\"k\", 0)")
            } else {
                create(s)
            };
            (request.encode(), context(0, seqs[0], now_ms))
        })
        .collect();
    let mut batches = vec![(now_ms, creates)];
    for _ in 0..count {
        now_ms += rng.below(40);
        let len = rng.below(14) as usize;
        let requests = (0..len)
            .map(|_| {
                let principal = rng.below(8) as usize;
                seqs[principal] += 1;
                let request = if rng.below(50) == 0 {
                    Bytes::from_static(b"\x07\x02s0")
                } else {
                    random_request(&mut rng).encode()
                };
                (request, context(principal as u32, seqs[principal], now_ms))
            })
            .collect();
        batches.push((now_ms, requests));
    }
    batches
}

fn context(principal: u32, seq: u64, now_ms: u64) -> Context {
    Context {
        client: ClientId::new(principal, 0),
        seq: RequestSeq(seq),
        cid: Some(ConsensusId(0)),
        timestamp_ms: now_ms,
        seed: 0,
    }
}

/// What one batch gave: replies, late replies and the digest after it.
type Outcome = (Vec<Option<Bytes>>, Vec<LateReply>, tagma_wire::Digest);

fn execute(service: &mut SpaceService, batch: &Batch, request_by_request: bool) -> Outcome {
    let (now_ms, requests) = batch;
    let mut late = Vec::new();
    service.advance_time(*now_ms, &mut late);
    let replies = if request_by_request {
        requests
            .iter()
            .flat_map(|r| service.execute_ordered_run(std::slice::from_ref(r), &mut late))
            .collect()
    } else {
        service.execute_ordered_run(requests, &mut late)
    };
    (replies, late, service.state_digest())
}

#[test]
fn one_thread_many_threads_and_request_by_request_agree() {
    // No per-principal cap is reached, so even request by request (where each space sees the
    // others' waits at once) decides alike.
    let limits = SpaceLimits {
        waits_per_client_max: 100_000,
        ..SpaceLimits::default()
    };
    let (mut deferred, mut late_total, mut multi_space_runs) = (0, 0, 0);
    for seed in 1..=6u64 {
        let batches = random_batches(seed, 150);
        let mut one = SpaceService::new(limits).unwrap();
        let mut many = SpaceService::new(limits)
            .unwrap()
            .with_threads(4)
            .unwrap()
            .with_parallel_min(1);
        let mut each = SpaceService::new(limits).unwrap();
        for (b, batch) in batches.iter().enumerate() {
            let expected = execute(&mut one, batch, false);
            assert_eq!(
                execute(&mut many, batch, false),
                expected,
                "seed {seed} batch {b}"
            );
            assert_eq!(
                execute(&mut each, batch, true),
                expected,
                "seed {seed} batch {b}"
            );
            deferred += expected.0.iter().filter(|r| r.is_none()).count();
            late_total += expected.1.len();
            let spaces: std::collections::BTreeSet<_> = batch
                .1
                .iter()
                .filter_map(|(r, _)| {
                    SpaceRequest::decode(r, &Default::default())
                        .ok()
                        .and_then(|r| r.space().map(str::to_owned))
                })
                .collect();
            multi_space_runs += usize::from(spaces.len() > 1);
        }
        assert_eq!(one.snapshot(), many.snapshot());
        assert_eq!(one.next_due_ms(), many.next_due_ms());
    }
    // The workload exercises what it is meant to.
    assert!(deferred > 100, "{deferred} deferred replies");
    assert!(late_total > 100, "{late_total} late replies");
    assert!(
        multi_space_runs > 100,
        "{multi_space_runs} runs over several spaces"
    );
}
