//! The CRDTs' decoders: an operation or a whole state (a snapshot a joining node installs)
//! from arbitrary bytes is a value or a typed error, never a panic; an accepted state is in
//! its canonical encoding, an accepted operation applies to a CRDT of its kind, and decoding
//! and applying in one step ends where decoding and then applying do.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagma_crdt::{Crdt, Dot, Kind, decode_and_apply, decode_op, decode_state, encode_state};

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = decode_state(data) {
        assert_eq!(encode_state(&state), data, "non-canonical state accepted");
    }
    let dot = Dot::new(1, 1);
    if let Ok(op) = decode_op(data) {
        let mut crdt = Crdt::new(op.kind());
        crdt.apply(dot, &op)
            .expect("an operation applies to its own kind");
        let _ = crdt.digest();
    }
    // Applied twice, the second time with a smaller dot: a register assignment wins, then
    // loses.
    for kind in Kind::ALL {
        let (mut two_steps, mut at_once) = (Crdt::new(kind), Crdt::new(kind));
        for dot in [Dot::new(1, 2), dot] {
            let expected = decode_op(data).map(|op| two_steps.apply(dot, &op));
            assert_eq!(decode_and_apply(&mut at_once, dot, data), expected);
            assert_eq!(at_once, two_steps);
        }
    }
});
