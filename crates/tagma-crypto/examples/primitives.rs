//! What each cryptographic operation on tagma's hot path costs on this machine:
//! `cargo run --release -p tagma-crypto --example primitives`.
//!
//! Per consensus instance a BFT replica signs one ACCEPT and verifies 2f ACCEPT signatures;
//! per request it computes or checks keyed-BLAKE3 MACs (frames, request authenticators) and
//! BLAKE3 digests. docs/benchmarks/normal-case.md uses these figures to explain where the time goes.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tagma_crypto::{IdentityKey, MacKey, VerifyKey, digest, verify};

/// Mean time of `op` over enough runs to take about 200 ms.
fn time(op: &mut dyn FnMut()) -> Duration {
    let start = Instant::now();
    let mut runs = 0u32;
    while start.elapsed() < Duration::from_millis(200) {
        op();
        runs += 1;
    }
    start.elapsed() / runs
}

fn main() {
    let key = IdentityKey::from_seed([7; 32]);
    let public = key.public();
    let message = [1u8; 72]; // the size of an ACCEPT's signed bytes
    let signature = key.sign(&message);
    let cached = VerifyKey::new(&public).expect("a valid key");
    let mac = MacKey([9; 32]);
    let small = [0u8; 64];
    let batch = vec![0u8; 64 << 10];
    let rows: Vec<(&str, Duration)> = vec![
        (
            "Ed25519 sign (one ACCEPT or collect)",
            time(&mut || {
                black_box(key.sign(black_box(&message)));
            }),
        ),
        (
            "Ed25519 verify, key parsed per call (tagma_crypto::verify)",
            time(&mut || {
                black_box(verify(&public, black_box(&message), &signature)).ok();
            }),
        ),
        (
            "Ed25519 verify, key decompressed once (VerifyKey)",
            time(&mut || {
                black_box(cached.verify(black_box(&message), &signature)).ok();
            }),
        ),
        (
            "keyed BLAKE3 MAC of 64 bytes (frame, authenticator)",
            time(&mut || {
                black_box(mac.tag(black_box(&small)));
            }),
        ),
        (
            "BLAKE3 digest of 64 bytes (request digest)",
            time(&mut || {
                black_box(digest(black_box(&small)));
            }),
        ),
        (
            "BLAKE3 digest of 64 KiB (a batch)",
            time(&mut || {
                black_box(digest(black_box(&batch)));
            }),
        ),
    ];
    println!("| operation | mean |\n|---|---|");
    for (name, t) in rows {
        println!("| {name} | {:.2} µs |", t.as_secs_f64() * 1e6);
    }
}
