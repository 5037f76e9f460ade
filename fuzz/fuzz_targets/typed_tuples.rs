//! Feeds arbitrary bytes to the coordination service's tuple and template decoders, under
//! limits picked by the first byte: decoding must never panic, and anything that decodes must
//! re-encode to exactly the input bytes (the encoding is canonical) and keep the limits.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tagma_space::typed::{Limits, TypedTemplate, TypedTuple};

fuzz_target!(|data: &[u8]| {
    let (limits, rest) = match data.split_first() {
        Some((b, rest)) => (
            Limits {
                arity_max: 1 + (*b as usize % 16),
                field_bytes_max: 1 << (b % 12),
                tuple_bytes_max: 16 << (b % 10),
            },
            rest,
        ),
        None => (Limits::default(), data),
    };
    let input = Bytes::copy_from_slice(rest);
    if let Ok(tuple) = TypedTuple::decode(&input, &limits) {
        assert_eq!(tuple.encode(), input);
        assert!(tuple.check(&limits).is_ok());
    }
    if let Ok(template) = TypedTemplate::decode(&input, &limits) {
        assert_eq!(template.encode(), input);
        assert!(template.check(&limits).is_ok());
    }
});
