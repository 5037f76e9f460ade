//! Decodes arbitrary bytes as a key-value request and reply (the ordered requests a replica
//! executes, Redis bundles included), and executes whatever decodes on a small store: no
//! decoder or command may panic, whatever the arguments.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tagma_exec::{Context, Service};
use tagma_kv::{KvOp, KvReply, KvService};
use tagma_wire::{ClientId, ConsensusId, RequestSeq};

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let _ = KvReply::decode(&bytes);
    if KvOp::decode(&bytes).is_ok() {
        let mut service = KvService::new();
        let ctx = Context {
            client: ClientId(1),
            seq: RequestSeq(1),
            cid: Some(ConsensusId(0)),
            timestamp_ms: 1_700_000_000_000,
            seed: 0,
        };
        // Twice: the second run meets the state the first one left.
        let _ = service.execute_ordered(&bytes, &ctx);
        let _ = service.execute_ordered(&bytes, &ctx);
        let _ = service.execute_unordered(&bytes, &ctx);
        let _ = service.install_snapshot(&service.snapshot());
    }
});
