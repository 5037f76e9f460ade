//! A load that records its history: clients run `get`, `put`, `append`, `delete` and `cas`
//! on a few shared keys, so that their operations overlap and contend, and every operation
//! is written down with its call and return times ([`tagma_history::Record`]) for a
//! linearizability checker — ours (`tagma_history::check_history`) or anyone's, from the
//! exported JSON lines.
//!
//! Values are unique (`c<client>-<n>`), so a read tells which write it saw. An operation
//! whose reply never came (a timeout while replicas were down) is recorded with an unknown
//! outcome: it may or may not have taken effect.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_client::Proxy;
use tagma_history::{OpKind, Record};
use tagma_kv::redis::{Bundle, Entry};
use tagma_kv::{KvOp, KvReply};

/// The shared keys.
pub const KEYS: usize = 4;

/// The history being recorded, on one clock.
pub struct Recorder {
    start: Instant,
    records: Mutex<Vec<Record>>,
    /// Pause between a client's operations.
    pub think: Duration,
}

impl Recorder {
    pub fn new(think: Duration) -> Recorder {
        Recorder {
            start: Instant::now(),
            records: Mutex::new(Vec::new()),
            think,
        }
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The records so far, in call order.
    pub fn records(&self) -> Vec<Record> {
        let mut records = self
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        records.sort_by_key(|r| (r.call, r.client));
        records
    }

    /// Runs client `client` through `proxy` until `stop`.
    pub fn run_client(&self, proxy: &Proxy, client: u64, stop: &AtomicBool) {
        let mut rng = fastrand::Rng::with_seed(0x4157 ^ client);
        let mut n = 0u64;
        let mut last_seen: Option<String> = None;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let key = format!("h{}", rng.usize(..KEYS));
            let value = format!("c{client}-{n}");
            let kind = match rng.u32(..100) {
                0..30 => OpKind::Get,
                30..55 => OpKind::Put,
                55..70 => OpKind::Append,
                70..80 => OpKind::Delete,
                _ => OpKind::Cas,
            };
            let from = (kind == OpKind::Cas).then(|| last_seen.clone()).flatten();
            let record = self.one(proxy, client, kind, key, value, from);
            if record.op == OpKind::Get && record.ret.is_some() {
                last_seen = record.value.clone();
            }
            self.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(record);
            if !self.think.is_zero() {
                std::thread::sleep(self.think);
            }
        }
    }

    fn one(
        &self,
        proxy: &Proxy,
        client: u64,
        op: OpKind,
        key: String,
        value: String,
        from: Option<String>,
    ) -> Record {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let request = match op {
            OpKind::Get => KvOp::Get { key: b(&key) },
            OpKind::Put => KvOp::Put {
                key: b(&key),
                value: b(&value),
            },
            OpKind::Append => KvOp::Redis(Bundle {
                entries: vec![Entry::Command(vec![b("APPEND"), b(&key), b(&value)])],
            }),
            OpKind::Delete => KvOp::Delete { key: b(&key) },
            OpKind::Cas => KvOp::Cas {
                key: b(&key),
                expected: from.as_deref().map(b),
                new: b(&value),
            },
        };
        let call = self.now_ns();
        let reply = proxy
            .invoke_ordered(request.encode())
            .ok()
            .and_then(|bytes| KvReply::decode(&bytes).ok());
        let ret = self.now_ns();
        let mut record = Record {
            client,
            op,
            key,
            value: (op != OpKind::Delete && op != OpKind::Get).then_some(value),
            from,
            ok: None,
            call,
            ret: None,
            fail: false,
        };
        match (op, reply) {
            (_, None) => {} // unknown outcome
            (OpKind::Get, Some(KvReply::Get { value })) => {
                record.value = value.map(|v| String::from_utf8_lossy(&v).into_owned());
                record.ret = Some(ret);
            }
            (OpKind::Cas, Some(KvReply::Cas { applied, .. })) => {
                record.ok = Some(applied);
                record.ret = Some(ret);
            }
            (OpKind::Put, Some(KvReply::Put { .. }))
            | (OpKind::Delete, Some(KvReply::Delete { .. }))
            | (OpKind::Append, Some(KvReply::Redis { .. })) => record.ret = Some(ret),
            // The service refused it: it changed nothing.
            (_, Some(KvReply::Error { .. })) => {
                record.ret = Some(ret);
                record.fail = true;
            }
            (_, Some(_)) => {} // an answer of another kind: treat the outcome as unknown
        }
        record
    }
}
