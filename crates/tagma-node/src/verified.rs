//! Requests this replica has authenticated from their clients' own connections, kept for a
//! short while so that the same request, relayed in a leader's PROPOSE, is recognised by
//! comparing it with the kept copy instead of hashing it and checking its MAC (or
//! signature) a second time.
//!
//! A client sends each ordered request to every replica, so a follower usually holds it,
//! checked, before the PROPOSE that carries it arrives. Equal requests have equal digests
//! (the digest covers the request's fields, which the comparison covers too), so a request
//! equal to a kept one came from its client whatever authenticator the PROPOSE attaches to
//! it. A request that is not kept (evicted, never received directly, or altered) is checked
//! in full.
//!
//! Bounded by `[limits] verified_requests_bytes`: each kept request counts its payload
//! plus [`ENTRY_OVERHEAD`]; the oldest go first. A request found by a PROPOSE is removed (a
//! PROPOSE carries it once; a later proposal of the same request is checked in full).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use tagma_wire::{ClientId, Request, RequestSeq};

/// Bytes counted for a kept request besides its payload (the entry in the map and in the
/// eviction order, the request's fields).
pub const ENTRY_OVERHEAD: usize = 160;

/// Shards, each behind its own lock (client connections insert from many threads).
const SHARDS: usize = 16;

type Key = (ClientId, RequestSeq);

#[derive(Default)]
struct Shard {
    kept: HashMap<Key, Request>,
    /// Keys in insertion order; may name requests already taken or replaced (they are
    /// skipped when their turn to go comes).
    order: VecDeque<Key>,
    bytes: usize,
}

/// The requests recently authenticated on client connections.
pub struct VerifiedRequests {
    shards: Box<[Mutex<Shard>]>,
    shard_bytes_max: usize,
}

fn shard_index(key: &Key) -> usize {
    (key.0.0 ^ key.1.0.rotate_left(17)) as usize % SHARDS
}

fn cost(request: &Request) -> usize {
    request.payload.len() + ENTRY_OVERHEAD
}

impl VerifiedRequests {
    /// Keeps at most `bytes_max` bytes of requests (0: keeps none).
    pub fn new(bytes_max: usize) -> VerifiedRequests {
        VerifiedRequests {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            shard_bytes_max: bytes_max / SHARDS,
        }
    }

    fn shard(&self, key: &Key) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[shard_index(key)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `request`, authenticated on its client's connection.
    pub fn insert(&self, request: &Request) {
        let cost = cost(request);
        if cost > self.shard_bytes_max {
            return;
        }
        let key = (request.client, request.seq);
        let mut shard = self.shard(&key);
        if let Some(old) = shard.kept.insert(key, request.clone()) {
            shard.bytes -= self::cost(&old);
        }
        shard.bytes += cost;
        shard.order.push_back(key);
        // Within the bytes, and with no more keys in the order than could be kept.
        let keys_max = self.shard_bytes_max / ENTRY_OVERHEAD;
        while shard.bytes > self.shard_bytes_max || shard.order.len() > keys_max {
            let Some(oldest) = shard.order.pop_front() else {
                break;
            };
            if let Some(gone) = shard.kept.remove(&oldest) {
                shard.bytes -= self::cost(&gone);
            }
        }
        debug_assert!(shard.bytes <= self.shard_bytes_max);
    }

    /// Whether a request equal to `request` is kept; if so it is removed.
    pub fn take_equal(&self, request: &Request) -> bool {
        let key = (request.client, request.seq);
        let mut shard = self.shard(&key);
        match shard.kept.get(&key) {
            Some(kept) if kept == request => {
                let gone = shard.kept.remove(&key).expect("found");
                shard.bytes -= cost(&gone);
                true
            }
            _ => false,
        }
    }

    /// Requests kept (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        (self.shards.iter())
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).kept.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tagma_wire::{RequestKind, ViewId};

    use super::*;

    fn request(client: u64, seq: u64, payload: &'static [u8]) -> Request {
        Request {
            client: ClientId(client),
            seq: RequestSeq(seq),
            kind: RequestKind::Ordered,
            view: ViewId(0),
            payload: Bytes::from_static(payload),
        }
    }

    #[test]
    fn a_kept_request_is_found_once_and_only_if_equal() {
        let v = VerifiedRequests::new(1 << 20);
        v.insert(&request(1, 1, b"put x"));
        assert!(!v.take_equal(&request(1, 1, b"put y")), "altered payload");
        assert!(
            !v.take_equal(&request(1, 2, b"put x")),
            "another sequence number"
        );
        let mut other_view = request(1, 1, b"put x");
        other_view.view = ViewId(3);
        assert!(!v.take_equal(&other_view), "another view");
        assert!(v.take_equal(&request(1, 1, b"put x")));
        assert!(!v.take_equal(&request(1, 1, b"put x")), "taken already");
        assert_eq!(v.len(), 0);
    }

    #[test]
    fn the_oldest_requests_go_first_beyond_the_bytes() {
        // 2 entries of 160 + 90 bytes fit in a shard of 8,192 / 16 = 512 bytes, 3 do not.
        let v = VerifiedRequests::new(8192);
        let payload: &'static [u8] = &[7; 90];
        // One client, so that the shard is chosen by the sequence number only.
        let same_shard: Vec<u64> = (0..10_000)
            .filter(|&s| {
                shard_index(&(ClientId(5), RequestSeq(s)))
                    == shard_index(&(ClientId(5), RequestSeq(0)))
            })
            .take(3)
            .collect();
        for &s in &same_shard {
            v.insert(&request(5, s, payload));
        }
        assert_eq!(v.len(), 2);
        assert!(
            !v.take_equal(&request(5, same_shard[0], payload)),
            "evicted"
        );
        assert!(v.take_equal(&request(5, same_shard[1], payload)));
        assert!(v.take_equal(&request(5, same_shard[2], payload)));
    }

    #[test]
    fn taken_requests_leave_the_order_bounded() {
        let v = VerifiedRequests::new(16 * 1600);
        for s in 0..100_000 {
            let r = request(9, s, b"");
            v.insert(&r);
            assert!(v.take_equal(&r));
        }
        let longest = (v.shards.iter())
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).order.len())
            .max();
        assert!(longest <= Some(1600 / ENTRY_OVERHEAD), "{longest:?}");
        let nothing = VerifiedRequests::new(0);
        nothing.insert(&request(1, 1, b"x"));
        assert_eq!(nothing.len(), 0);
    }
}
