//! Feeds arbitrary bytes to the sealed-secret decoder (`tagma_crypto::sealing`), under a length
//! limit the first two bytes pick: decoding must never panic, and anything that decodes must keep
//! the limit and its invariants (1 ≤ threshold ≤ shares ≤ 255) and re-encode to exactly the
//! input bytes (the encoding is canonical).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagma_crypto::sealing::{SHARES_MAX, SealedSecret};

fuzz_target!(|data: &[u8]| {
    let (limit, input) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), rest),
        _ => (usize::MAX, data),
    };
    if let Ok(sealed) = SealedSecret::decode(input, limit) {
        assert!(input.len() <= limit);
        assert!(1 <= sealed.threshold() && sealed.threshold() <= sealed.shares());
        assert!(sealed.shares() <= SHARES_MAX);
        assert_eq!(sealed.commitments().len(), sealed.shares());
        assert_eq!(sealed.encoded_len(), input.len());
        assert_eq!(sealed.encode(), input);
    }
});
