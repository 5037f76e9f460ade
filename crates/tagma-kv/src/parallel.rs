//! The key-value store as a parallel service ([`tagma_parallel::ParallelState`]): each
//! operation touches the class of its key (a read for `get`, a write otherwise); `scan` reads
//! a whole prefix and so conflicts with everything. Execution is serialised by one lock — the
//! store is no faster in parallel — but a scheduler may run non-conflicting operations in any
//! order, so the simulator's parallel replicas (which do, with a seeded order) check the
//! classification and the schedulers on every seed.

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use tagma_exec::{Context, FrozenSnapshot, Service};
use tagma_parallel::{Access, ParallelService, ParallelState};
use tagma_wire::{ClientId, RequestSeq};

use crate::{KvOp, KvService};

/// A [`KvService`] whose operations are classified by key.
#[derive(Debug, Default)]
pub struct ParallelKv {
    inner: Mutex<KvService>,
}

impl ParallelKv {
    pub fn new() -> Self {
        ParallelKv::default()
    }

    /// The store, locked for one operation (a lock poisoned by a panicking operation is
    /// taken over: the scheduler re-raises that panic in the caller anyway).
    fn store(&self) -> std::sync::MutexGuard<'_, KvService> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The class of a key: a 64-bit hash (two keys sharing it only conflict needlessly).
fn class(key: &[u8]) -> u64 {
    u64::from_le_bytes(
        blake3::hash(key).as_bytes()[..8]
            .try_into()
            .expect("8 bytes"),
    )
}

/// The context a key-value operation ignores.
const CTX: Context = Context {
    client: ClientId(0),
    seq: RequestSeq(0),
    cid: None,
    timestamp_ms: 0,
    seed: 0,
};

const REDIS_REFUSED: &str =
    "Redis commands run on the sequential key-value service (tagma replica --service kv)";

impl ParallelService for ParallelKv {
    /// Redis commands are refused: their expiry needs the batch's agreed time, which this
    /// interface does not carry.
    fn execute(&self, op: &Bytes) -> Bytes {
        if op.first() == Some(&crate::op_tag::REDIS) {
            return crate::error(REDIS_REFUSED).encode();
        }
        self.store().execute_ordered(op, &CTX)
    }

    fn classify(&self, op: &Bytes) -> Access {
        match KvOp::decode(op) {
            Ok(KvOp::Get { key }) => Access::reads([class(&key)]),
            Ok(
                KvOp::Put { key, .. }
                | KvOp::Delete { key }
                | KvOp::Cas { key, .. }
                | KvOp::Incr { key, .. },
            ) => Access::writes([class(&key)]),
            Ok(KvOp::Scan { .. } | KvOp::Redis(_)) => Access::all(),
            // Refused alike in any order: touches nothing.
            Err(_) => Access::none(),
        }
    }

    fn digest(&self) -> [u8; 32] {
        self.store().state_digest().0
    }
}

impl ParallelState for ParallelKv {
    fn execute_unordered(&self, op: &Bytes) -> Bytes {
        if op.first() == Some(&crate::op_tag::REDIS) {
            return crate::error(REDIS_REFUSED).encode();
        }
        self.store().execute_unordered(op, &CTX)
    }

    fn snapshot(&self) -> Bytes {
        self.store().snapshot()
    }

    /// The store's frozen copy ([`KvService::freeze`]), taken under the lock.
    fn freeze(&self) -> Option<FrozenSnapshot> {
        self.store().freeze()
    }

    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), String> {
        self.inner
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .install_snapshot(snapshot)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(o: KvOp) -> Bytes {
        o.encode()
    }

    #[test]
    fn operations_conflict_by_key() {
        let kv = ParallelKv::new();
        let k = |s: &'static str| Bytes::from_static(s.as_bytes());
        let put_a = kv.classify(&op(KvOp::Put {
            key: k("a"),
            value: k("1"),
        }));
        let get_a = kv.classify(&op(KvOp::Get { key: k("a") }));
        let get_b = kv.classify(&op(KvOp::Get { key: k("b") }));
        let scan = kv.classify(&op(KvOp::Scan {
            prefix: k(""),
            limit: 1,
        }));
        assert!(put_a.conflicts_with(&get_a));
        assert!(!put_a.conflicts_with(&get_b));
        assert!(!get_a.conflicts_with(&get_b));
        assert!(scan.conflicts_with(&get_b));
        assert_eq!(kv.classify(&Bytes::from_static(b"\xff")), Access::none());
        // Executes like the store.
        kv.execute(&op(KvOp::Put {
            key: k("a"),
            value: k("1"),
        }));
        let mut plain = KvService::new();
        plain.execute_ordered(
            &op(KvOp::Put {
                key: k("a"),
                value: k("1"),
            }),
            &CTX,
        );
        assert_eq!(kv.digest(), plain.state_digest().0);
        let mut copy = ParallelKv::new();
        copy.install_snapshot(&kv.snapshot()).unwrap();
        assert_eq!(copy.digest(), kv.digest());
        // A frozen copy is the state when it was taken.
        let (at_freeze, frozen) = (kv.snapshot(), kv.freeze().expect("the store freezes"));
        kv.execute(&op(KvOp::Delete { key: k("a") }));
        assert_ne!(kv.snapshot(), at_freeze);
        assert_eq!(frozen(), at_freeze);
    }
}
