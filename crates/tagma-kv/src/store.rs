//! The key-value service's state: typed values (strings and hashes) under byte-string keys,
//! with expiry in the cluster's agreed time, and an index in the order `SCAN` walks.
//!
//! Time enters only through [`Store::advance`], with the agreed timestamp of the batch about
//! to execute: keys whose deadline has come are removed there, at the same point of the
//! order on every replica, so no ordered request ever sees an expired key. Reads that are
//! not ordered use the time of the last batch, which every replica at that point shares.
//!
//! `SCAN` walks keys in the order of a fixed 64-bit hash of each key ([`scan_hash`]), and its
//! cursor is the hash to resume from: a key present from the first call to the last is
//! returned whatever is inserted or removed meanwhile, as Redis promises.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::KvCodecError;
use crate::codec::{Reader, Writer};

/// A value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    String(Bytes),
    Hash(BTreeMap<Bytes, Bytes>),
}

impl Value {
    /// Redis's name of the value's type.
    /// The value with every byte string copied out of the buffer it was sliced from.
    fn owned(self) -> Value {
        match self {
            Value::String(s) => Value::String(owned(&s)),
            Value::Hash(h) => Value::Hash(h.iter().map(|(f, v)| (owned(f), owned(v))).collect()),
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Value::String(_) => "string",
            Value::Hash(_) => "hash",
        }
    }
}

/// What a write does to the key's time to live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// The key lives until removed (a `SET` without `KEEPTTL`).
    Clear,
    /// The key keeps its deadline (an `INCR`, an `HSET`).
    Keep,
    /// The key expires at this agreed time (ms).
    At(u64),
}

/// The state.
#[derive(Clone, Debug, Default)]
pub struct Store {
    map: BTreeMap<Bytes, Value>,
    /// Deadlines (agreed time, ms) of the keys that have one.
    expires: BTreeMap<Bytes, u64>,
    /// The same deadlines in time order.
    deadlines: BTreeSet<(u64, Bytes)>,
    /// Every key by its scan hash.
    by_hash: BTreeSet<(u64, Bytes)>,
    /// The agreed time of the batch executing (or of the last one).
    now_ms: u64,
}

/// The contents decide equality; the agreed time the store last saw does not.
impl PartialEq for Store {
    fn eq(&self, other: &Store) -> bool {
        self.map == other.map && self.expires == other.expires
    }
}

impl Eq for Store {}

/// The order `SCAN` walks keys in: FNV-1a over the key, then a 64-bit mixer, never 0 (a
/// cursor of 0 means "done"). Fixed, so every replica and every version agrees.
/// A copy of `bytes` that shares no buffer with anything else (see [`Store::insert`]).
pub fn owned(bytes: &[u8]) -> Bytes {
    Bytes::copy_from_slice(bytes)
}

pub fn scan_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h.max(1)
}

impl Store {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The agreed time of the batch executing.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The agreed time reached `now_ms`: keys whose deadline has come are removed.
    pub fn advance(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        while let Some((at, _)) = self.deadlines.first()
            && *at <= self.now_ms
        {
            let (_, key) = self.deadlines.pop_first().expect("looked at");
            self.expires.remove(&key);
            self.map.remove(&key);
            self.by_hash.remove(&(scan_hash(&key), key));
        }
    }

    /// Whether `key` has not expired by now (a read that is not ordered may come between a
    /// deadline and the batch that removes the key).
    fn alive(&self, key: &[u8]) -> bool {
        self.expires.is_empty() || self.expires.get(key).is_none_or(|&at| at > self.now_ms)
    }

    pub fn get(&self, key: &[u8]) -> Option<&Value> {
        self.map.get(key).filter(|_| self.alive(key))
    }

    /// The value at `key` to change in place (its deadline stays).
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Value> {
        if !self.alive(key) {
            return None;
        }
        self.map.get_mut(key)
    }

    /// The string at `key`: `Ok(None)` if absent, `Err(())` if the key holds another type.
    pub fn get_string(&self, key: &[u8]) -> Result<Option<&Bytes>, WrongType> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(WrongType),
        }
    }

    /// Sets `key` to `value`; returns the previous value.
    ///
    /// The store keeps its own compact copies of new keys and of values: bytes decoded from
    /// a request are slices of the buffer its batch arrived in, and a stored slice would keep
    /// that whole buffer alive for as long as the key lives (memory growing with the number
    /// of keys times the size of a read buffer, not with the state).
    pub fn insert(&mut self, key: Bytes, value: Value, ttl: Ttl) -> Option<Value> {
        let key = match self.map.get_key_value(&key) {
            Some((stored, _)) => stored.clone(),
            None => owned(&key),
        };
        let value = value.owned();
        match ttl {
            Ttl::Keep => {}
            Ttl::Clear => self.clear_deadline(&key),
            Ttl::At(at) => self.set_deadline(&key, at),
        }
        let previous = self.map.insert(key.clone(), value);
        if previous.is_none() {
            self.by_hash.insert((scan_hash(&key), key));
        }
        previous
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &[u8]) -> Option<Value> {
        let (key, value) = self.map.remove_entry(key)?;
        self.clear_deadline(&key);
        self.by_hash.remove(&(scan_hash(&key), key));
        Some(value)
    }

    /// The deadline of `key`, if it has one.
    pub fn deadline(&self, key: &[u8]) -> Option<u64> {
        self.expires.get(key).copied()
    }

    /// Gives an existing `key` the deadline `at` (`None`: no deadline).
    pub fn set_expiry(&mut self, key: &[u8], at: Option<u64>) {
        let Some((key, _)) = self.map.get_key_value(key) else {
            return;
        };
        let key = key.clone();
        match at {
            Some(at) => self.set_deadline(&key, at),
            None => self.clear_deadline(&key),
        }
    }

    fn set_deadline(&mut self, key: &Bytes, at: u64) {
        if let Some(old) = self.expires.insert(key.clone(), at) {
            self.deadlines.remove(&(old, key.clone()));
        }
        self.deadlines.insert((at, key.clone()));
    }

    fn clear_deadline(&mut self, key: &[u8]) {
        if self.expires.is_empty() {
            return;
        }
        if let Some((key, at)) = self.expires.remove_entry(key) {
            self.deadlines.remove(&(at, key));
        }
    }

    /// Live keys with their values, in key order, from `from` on.
    pub fn range_from<'a>(
        &'a self,
        from: &'a [u8],
    ) -> impl Iterator<Item = (&'a Bytes, &'a Value)> + 'a {
        use std::ops::Bound;
        (self
            .map
            .range::<[u8], _>((Bound::Included(from), Bound::Unbounded)))
        .filter(|(k, _)| self.alive(k))
    }

    /// Live keys in scan order from scan hash `cursor` on, with each key's hash.
    pub fn scan_from(&self, cursor: u64) -> impl Iterator<Item = (u64, &Bytes)> + '_ {
        (self.by_hash.range((cursor, Bytes::new())..))
            .map(|(h, k)| (*h, k))
            .filter(|(_, k)| self.alive(k))
    }

    /// Every key, in key order (expired ones left out).
    pub fn keys(&self) -> impl Iterator<Item = &Bytes> + '_ {
        self.map.keys().filter(|k| self.alive(k))
    }

    /// Encodes the entries, handing `flush` the buffer each time it reaches `flush_at` bytes;
    /// returns what is left in it. Each entry: key, type (0 string, 1 hash), the string or
    /// the hash's `u32` field count and fields and values, then the deadline (`u64`, 0: none).
    pub(crate) fn encode(
        &self,
        w: &mut Writer,
        flush_at: usize,
        flush: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        w.u64(self.map.len() as u64);
        for (key, value) in &self.map {
            w.bytes(key);
            match value {
                Value::String(s) => {
                    w.u8(0);
                    w.bytes(s);
                }
                Value::Hash(fields) => {
                    w.u8(1);
                    w.u32(u32::try_from(fields.len()).expect("fewer than 2^32 fields"));
                    for (f, v) in fields {
                        w.bytes(f);
                        w.bytes(v);
                    }
                }
            }
            w.u64(self.deadline(key).unwrap_or(0));
            if w.0.len() >= flush_at {
                flush(&w.0)?;
                w.0.clear();
            }
        }
        Ok(())
    }

    /// Decodes what [`Store::encode`] wrote (keys and fields in strictly increasing order).
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Store, KvCodecError> {
        let count = r.u64("entry count")?;
        // Each entry takes at least a key length, a type and a deadline.
        if count > (r.remaining() / 13) as u64 {
            return Err(KvCodecError::Malformed("entry count"));
        }
        let mut store = Store::default();
        let mut last: Option<Bytes> = None;
        for _ in 0..count {
            let key = r.bytes("key")?;
            if last.as_ref().is_some_and(|last| *last >= key) {
                return Err(KvCodecError::Malformed(
                    "keys not in strictly increasing order",
                ));
            }
            let value = match r.u8("type")? {
                0 => Value::String(r.bytes("string")?),
                1 => {
                    let n = r.u32("field count")? as usize;
                    if n > r.remaining() / 8 {
                        return Err(KvCodecError::Malformed("field count"));
                    }
                    let mut fields = BTreeMap::new();
                    let mut last_field: Option<Bytes> = None;
                    for _ in 0..n {
                        let f = r.bytes("field")?;
                        if last_field.as_ref().is_some_and(|l| *l >= f) {
                            return Err(KvCodecError::Malformed("fields not in order"));
                        }
                        last_field = Some(f.clone());
                        fields.insert(f, r.bytes("field value")?);
                    }
                    Value::Hash(fields)
                }
                _ => return Err(KvCodecError::Malformed("unknown value type")),
            };
            let ttl = match r.u64("deadline")? {
                0 => Ttl::Clear,
                at => Ttl::At(at),
            };
            last = Some(key.clone());
            store.insert(key, value, ttl);
        }
        Ok(store)
    }

    /// Feeds the state to `hasher`: entry count, then each entry's key, type, contents and
    /// deadline, every byte string preceded by its `u64` length.
    pub fn digest(&self, hasher: &mut blake3::Hasher) {
        let bytes = |h: &mut blake3::Hasher, b: &[u8]| {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        };
        hasher.update(&(self.map.len() as u64).to_le_bytes());
        for (key, value) in &self.map {
            bytes(hasher, key);
            match value {
                Value::String(s) => {
                    hasher.update(&[0]);
                    bytes(hasher, s);
                }
                Value::Hash(fields) => {
                    hasher.update(&[1]);
                    hasher.update(&(fields.len() as u64).to_le_bytes());
                    for (f, v) in fields {
                        bytes(hasher, f);
                        bytes(hasher, v);
                    }
                }
            }
            hasher.update(&self.deadline(key).unwrap_or(0).to_le_bytes());
        }
    }
}

/// An operation on a key holding another type of value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrongType;

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn keys_expire_when_the_agreed_time_reaches_their_deadline() {
        let mut s = Store::default();
        s.advance(1_000);
        s.insert(b("a"), Value::String(b("1")), Ttl::At(1_500));
        s.insert(b("b"), Value::String(b("2")), Ttl::Clear);
        assert!(s.get(b"a").is_some());
        s.advance(1_499);
        assert!(s.get(b"a").is_some());
        s.advance(1_500);
        assert_eq!(s.get(b"a"), None);
        assert_eq!(s.len(), 1);
        assert_eq!(s.scan_from(0).count(), 1);
        // A write without KEEPTTL clears the deadline; with it, the deadline stays.
        s.insert(b("c"), Value::String(b("3")), Ttl::At(2_000));
        s.insert(b("c"), Value::String(b("4")), Ttl::Keep);
        assert_eq!(s.deadline(b"c"), Some(2_000));
        s.insert(b("c"), Value::String(b("5")), Ttl::Clear);
        assert_eq!(s.deadline(b"c"), None);
        s.advance(3_000);
        assert!(s.get(b"c").is_some());
    }

    #[test]
    fn scanning_by_hash_finds_every_key_that_stays_while_others_come_and_go() {
        let mut s = Store::default();
        for i in 0..200 {
            s.insert(b(&format!("k{i}")), Value::String(b("v")), Ttl::Clear);
        }
        let mut seen = BTreeSet::new();
        let mut cursor = 0;
        let mut round = 0;
        loop {
            let page: Vec<(u64, Bytes)> = s
                .scan_from(cursor)
                .take(7)
                .map(|(h, k)| (h, k.clone()))
                .collect();
            seen.extend(page.iter().map(|(_, k)| k.clone()));
            // Churn between calls.
            s.insert(b(&format!("new{round}")), Value::String(b("v")), Ttl::Clear);
            s.remove(format!("new{}", round / 2).as_bytes());
            round += 1;
            match page.last() {
                Some((h, _)) if page.len() == 7 => cursor = h + 1,
                _ => break,
            }
        }
        for i in 0..200 {
            assert!(seen.contains(&b(&format!("k{i}"))), "k{i} missed");
        }
    }

    #[test]
    fn encoding_round_trips_types_and_deadlines() {
        let mut s = Store::default();
        s.insert(b("s"), Value::String(b("x")), Ttl::At(99));
        let hash = BTreeMap::from([(b("f"), b("1")), (b("g"), b("2"))]);
        s.insert(b("h"), Value::Hash(hash), Ttl::Clear);
        let mut w = Writer(Vec::new());
        s.encode(&mut w, usize::MAX, &mut |_| Ok(())).unwrap();
        let bytes = Bytes::from(w.0);
        let mut r = Reader::new(&bytes);
        let back = Store::decode(&mut r).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.deadline(b"s"), Some(99));
        let digest = |s: &Store| {
            let mut h = blake3::Hasher::new();
            s.digest(&mut h);
            h.finalize()
        };
        assert_eq!(digest(&back), digest(&s));
        let mut other = s.clone();
        other.set_expiry(b"s", None);
        assert_ne!(
            digest(&other),
            digest(&s),
            "the deadline is part of the state"
        );
    }
}
