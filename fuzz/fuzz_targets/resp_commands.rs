//! Feeds arbitrary bytes to the gateway's RESP command parser as a client's stream (with
//! limits picked by the first byte) and to the reply parser: neither may panic, and the
//! command parser must stop (a command, "need more bytes" or a protocol error).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagma_resp::{Limits, parse_command, parse_reply};

fuzz_target!(|data: &[u8]| {
    let (pick, rest) = match data.split_first() {
        Some((b, rest)) => (*b, rest),
        None => (0, data),
    };
    let limits = Limits {
        args_max: 1 + (pick as usize % 64),
        bulk_max: 1 << (pick % 21),
        inline_max: 16 << (pick % 13),
    };
    let mut buf = BytesMut::from(rest);
    for _ in 0..=rest.len() {
        match parse_command(&mut buf, &limits) {
            Ok(Some(_)) if !buf.is_empty() => {}
            _ => break,
        }
    }
    let _ = parse_reply(rest);
});
