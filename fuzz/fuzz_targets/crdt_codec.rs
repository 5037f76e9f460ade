//! The CRDTs' decoders: an operation or a whole state (a snapshot a joining node installs)
//! from arbitrary bytes is a value or a typed error, never a panic; an accepted state is in
//! its canonical encoding, and an accepted operation applies to a CRDT of its kind.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagma_crdt::{Crdt, Dot, decode_op, decode_state, encode_state};

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = decode_state(data) {
        assert_eq!(encode_state(&state), data, "non-canonical state accepted");
    }
    if let Ok(op) = decode_op(data) {
        let mut crdt = Crdt::new(op.kind());
        crdt.apply(Dot::new(1, 1), &op)
            .expect("an operation applies to its own kind");
        let _ = crdt.digest();
    }
});
