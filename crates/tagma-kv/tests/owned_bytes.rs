//! The store keeps copies, never slices of the buffer a request arrived in: a stored slice
//! would keep the whole buffer (a batch, a connection's read buffer) alive as long as its
//! key, and memory would grow with keys times buffers instead of with the state. Nor slices
//! of a snapshot it was restored from: one key never written again would keep the whole
//! snapshot alive next to the state.

use bytes::{Bytes, BytesMut};
use tagma_exec::{Context, Service};
use tagma_kv::redis::{Bundle, Entry};
use tagma_kv::{KvOp, KvService, Value};
use tagma_wire::{ClientId, ConsensusId, RequestSeq};

/// `request` placed in the middle of a 1 MiB buffer, as a slice of it.
fn inside_big_buffer(request: &Bytes) -> (Bytes, std::ops::Range<usize>) {
    let mut buf = BytesMut::zeroed(1 << 20);
    buf[1000..1000 + request.len()].copy_from_slice(request);
    let big = buf.freeze();
    let start = big.as_ptr() as usize;
    (
        big.slice(1000..1000 + request.len()),
        start..start + big.len(),
    )
}

fn run(service: &mut KvService, request: &Bytes) {
    let ctx = Context {
        client: ClientId(1),
        seq: RequestSeq(1),
        cid: Some(ConsensusId(0)),
        timestamp_ms: 1_700_000_000_000,
        seed: 0,
    };
    service.execute_ordered(request, &ctx);
}

fn outside(bytes: &Bytes, buffer: &std::ops::Range<usize>) -> bool {
    !buffer.contains(&(bytes.as_ptr() as usize))
}

#[test]
fn stored_keys_and_values_share_no_buffer_with_their_request() {
    let (service, buffers) = filled_from_big_buffers();
    assert_owned(&service, &buffers);
}

/// A service with a plain key, a string set through Redis commands and a hash, each written by
/// a request that was a slice of a 1 MiB buffer (their ranges returned).
fn filled_from_big_buffers() -> (KvService, Vec<std::ops::Range<usize>>) {
    let mut service = KvService::new();
    let put = KvOp::Put {
        key: Bytes::from_static(b"plain"),
        value: Bytes::from_static(b"value"),
    }
    .encode();
    let set = KvOp::Redis(Bundle {
        entries: vec![Entry::Command(
            ["SET", "redis", "value"]
                .map(|s| Bytes::from_static(s.as_bytes()))
                .to_vec(),
        )],
    })
    .encode();
    let hset = KvOp::Redis(Bundle {
        entries: vec![Entry::Command(
            ["HSET", "hash", "field", "value"]
                .map(|s| Bytes::from_static(s.as_bytes()))
                .to_vec(),
        )],
    })
    .encode();
    let mut buffers = Vec::new();
    for request in [put, set, hset] {
        let (slice, range) = inside_big_buffer(&request);
        run(&mut service, &slice);
        buffers.push(range);
    }
    (service, buffers)
}

fn assert_owned(service: &KvService, buffers: &[std::ops::Range<usize>]) {
    let store = service.store();
    let all_outside = |b: &Bytes| buffers.iter().all(|r| outside(b, r));
    for key in store.keys() {
        assert!(all_outside(key), "key {key:?} is a slice of its request");
        match store.get(key).expect("stored") {
            Value::String(v) => assert!(all_outside(v), "value of {key:?} is a slice"),
            Value::Hash(h) => {
                for (f, v) in h {
                    assert!(
                        all_outside(f) && all_outside(v),
                        "field of {key:?} is a slice"
                    );
                }
            }
        }
    }
    assert_eq!(store.len(), 3);
}

#[test]
fn a_restored_state_shares_no_buffer_with_its_snapshot() {
    let (service, _) = filled_from_big_buffers();
    let snapshot = service.snapshot();
    let start = snapshot.as_ptr() as usize;
    let mut restored = KvService::new();
    restored.install_snapshot(&snapshot).unwrap();
    assert_eq!(restored.state_digest(), service.state_digest());
    assert_owned(
        &restored,
        std::slice::from_ref(&(start..start + snapshot.len())),
    );
}
