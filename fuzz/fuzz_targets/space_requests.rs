//! Feeds arbitrary bytes to the coordination service's request, reply and policy decoders,
//! under limits picked by the first byte: decoding must never panic, and anything that
//! decodes must re-encode to exactly the input bytes (the encodings are canonical, the
//! optional protection and sealed sections and share replies included).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tagma_space::{Limits, Policy, SpaceReply, SpaceRequest};

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
    if let Ok(request) = SpaceRequest::decode(&input, &limits) {
        assert_eq!(request.encode(), input);
        // Decoding checks shapes; `check` also judges a create's policy and protection, and
        // whether a sealed tuple's bytes are a sealed secret.
        assert!(
            request.check(&limits).is_ok()
                || matches!(request, SpaceRequest::Create { .. })
                || request.sealed().is_some()
        );
    }
    if let Ok(reply) = SpaceReply::decode(&input, &limits) {
        assert_eq!(reply.encode(), input);
    }
    if let Ok(policy) = Policy::decode(&input, &limits) {
        assert_eq!(policy.encode(), input);
        assert_eq!(policy.to_string().parse::<Policy>(), Ok(policy));
    }
});
