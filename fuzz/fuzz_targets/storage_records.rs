//! What a replica reads back from its disk, from arbitrary bytes: a log segment (records
//! scanned, checksums checked, the end judged) and a checkpoint restored into an executor of
//! the key-value service. Nothing may panic; a damaged file is a typed error or a judged end.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tagma_exec::Executor;
use tagma_kv::KvService;
use tagma_storage::read_segment;
use tagma_wire::ViewId;

fuzz_target!(|data: &[u8]| {
    let (first_cid, is_last) = match data.first() {
        Some(b) => (u64::from(*b), b % 2 == 0),
        None => (0, true),
    };
    let (records, _end) = read_segment(data, first_cid, is_last);
    // The records a segment gives are in order, from the named instance on.
    for (k, (cid, _)) in records.iter().enumerate() {
        assert_eq!(*cid, first_cid + k as u64);
    }
    let mut executor = Executor::new(KvService::new(), ViewId(0), 4, 16);
    let _ = executor.restore(&Bytes::copy_from_slice(data));
});
