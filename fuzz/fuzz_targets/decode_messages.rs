//! Every decoder must reject garbage without panicking, and whatever it accepts must be the
//! canonical encoding: re-encoding reproduces the input exactly.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tagma_wire::{
    Batch, ClientMessage, Decode, Encode, EveMessage, GroupEnvelope, Handshake, PeerMessage,
    ReconfigureOutcome, ReplicaMessage, Request, RequestEnvelope, View, ViewChange,
};

fn check<T: Decode + Encode>(input: &Bytes) {
    if let Ok(value) = T::decode(input) {
        assert_eq!(value.encoded_len(), input.len(), "encoded_len mismatch");
        assert_eq!(&value.to_bytes(), input, "non-canonical encoding accepted");
    }
}

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    check::<PeerMessage>(&input);
    check::<ClientMessage>(&input);
    check::<ReplicaMessage>(&input);
    check::<Handshake>(&input);
    check::<Batch>(&input);
    check::<Request>(&input);
    check::<RequestEnvelope>(&input);
    check::<View>(&input);
    check::<ViewChange>(&input);
    check::<ReconfigureOutcome>(&input);
    check::<GroupEnvelope>(&input);
    check::<EveMessage>(&input);
});
