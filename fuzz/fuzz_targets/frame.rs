//! Feeds arbitrary bytes to the frame opener as if they arrived on an authenticated
//! connection: it must never panic, and must stop (error or "need more bytes").
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagma_crypto::MacKey;

fuzz_target!(|data: &[u8]| {
    // First byte picks the frame size limit so small limits get exercised too.
    let (limit, rest) = match data.split_first() {
        Some((b, rest)) => (16usize << (b % 17), rest),
        None => (1 << 20, data),
    };
    let key = MacKey([0x42; 32]);
    let mut buf = BytesMut::from(rest);
    let mut counter = 0u64;
    // Each successful frame consumes input, so this is bounded; guard anyway.
    for _ in 0..=rest.len() {
        match tagma_net::open_frame(&mut buf, &key, counter, limit) {
            Ok(Some(_frame)) => counter += 1,
            Ok(None) | Err(_) => break,
        }
    }
});
