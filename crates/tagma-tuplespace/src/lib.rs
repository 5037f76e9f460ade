//! `tagma-tuplespace`: a tuple space (Linda's, as in DepSpace by Bessani, Alchieri, Correia and
//! Fraga) of untyped tuples: the second benchmark service of parallel execution. The
//! coordination service's typed tuple space is `tagma-space` with `tagma-space-service`.
//!
//! A tuple has 1 to [`FIELDS_MAX`] fields of bytes. Operations:
//! - `out(t)`: insert tuple `t`;
//! - `rdp(p)`: the oldest tuple matching template `p` (same arity; each defined field equal,
//!   undefined fields match anything), or nothing;
//! - `inp(p)`: the same, removed.
//!
//! Tuples are kept per arity, each arity behind its own lock and in insertion order, so
//! matching is deterministic given the order of the operations on that arity. Two
//! classifications ([`Classification`]) tell the parallel scheduler what conflicts: TS1 (`out` and `inp` conflict with everything, `rdp` with nothing) and TS2 (one conflict
//! class per arity: operations on tuples of different arities never conflict).
//!
//! Encoding of an operation: tag `u8` (1 out, 2 rdp, 3 inp) | field count `u8` | per field: `u8`
//! (1 defined, 0 wildcard — templates only) and, if defined, `u32` LE length and the bytes.
//! Reply: `u8` 1 and the tuple (count `u8`, per field `u32` length and bytes) for a tuple
//! returned or an `out` done, `u8` 0 for no match, `u8` 0xff for bytes that are no operation.

use std::sync::{Arc, PoisonError, RwLock};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tagma_parallel::{Access, FrozenSnapshot, ParallelService, ParallelState};

/// The most fields a tuple has.
pub const FIELDS_MAX: usize = 10;

/// A tuple: 1..=[`FIELDS_MAX`] fields.
pub type Tuple = Vec<Bytes>;

/// A template: a field of `None` matches anything.
pub type Template = Vec<Option<Bytes>>;

/// A tuple-space operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpaceOp {
    Out(Tuple),
    Rdp(Template),
    Inp(Template),
}

/// What conflicts with what (the two set-ups of the parallel-execution benchmark).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classification {
    /// `out` and `inp` conflict with everything; `rdp` with nothing.
    Ts1,
    /// One class per arity: `out` and `inp` write their arity's class, `rdp` reads it.
    Ts2,
}

impl SpaceOp {
    pub fn arity(&self) -> usize {
        match self {
            SpaceOp::Out(t) => t.len(),
            SpaceOp::Rdp(p) | SpaceOp::Inp(p) => p.len(),
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        let (tag, fields): (u8, Vec<Option<&Bytes>>) = match self {
            SpaceOp::Out(t) => (1, t.iter().map(Some).collect()),
            SpaceOp::Rdp(p) => (2, p.iter().map(Option::as_ref).collect()),
            SpaceOp::Inp(p) => (3, p.iter().map(Option::as_ref).collect()),
        };
        out.put_u8(tag);
        out.put_u8(fields.len() as u8);
        for f in fields {
            match f {
                Some(b) => {
                    out.put_u8(1);
                    out.put_u32_le(b.len() as u32);
                    out.put_slice(b);
                }
                None => out.put_u8(0),
            }
        }
        out.freeze()
    }

    /// `None` for bytes that are no operation (bad tag, arity out of 1..=10, a wildcard in a
    /// tuple, truncation or trailing bytes).
    pub fn decode(bytes: &Bytes) -> Option<SpaceOp> {
        let mut b = bytes.clone();
        if b.remaining() < 2 {
            return None;
        }
        let tag = b.get_u8();
        let count = b.get_u8() as usize;
        if !(1..=FIELDS_MAX).contains(&count) {
            return None;
        }
        let mut fields = Vec::with_capacity(count);
        for _ in 0..count {
            if !b.has_remaining() {
                return None;
            }
            fields.push(match b.get_u8() {
                0 => None,
                1 => {
                    if b.remaining() < 4 {
                        return None;
                    }
                    let len = b.get_u32_le() as usize;
                    if b.remaining() < len {
                        return None;
                    }
                    // Copied: a stored tuple must not keep its request's buffer alive.
                    let field = Bytes::copy_from_slice(&b[..len]);
                    b.advance(len);
                    Some(field)
                }
                _ => return None,
            });
        }
        if b.has_remaining() {
            return None;
        }
        match tag {
            1 => fields
                .into_iter()
                .collect::<Option<Tuple>>()
                .map(SpaceOp::Out),
            2 => Some(SpaceOp::Rdp(fields)),
            3 => Some(SpaceOp::Inp(fields)),
            _ => None,
        }
    }
}

fn matches(template: &Template, tuple: &Tuple) -> bool {
    template.len() == tuple.len()
        && template
            .iter()
            .zip(tuple)
            .all(|(p, f)| p.as_ref().is_none_or(|p| p == f))
}

fn encode_tuple(t: &Tuple) -> Bytes {
    let mut out = BytesMut::with_capacity(2 + t.iter().map(|f| 4 + f.len()).sum::<usize>());
    out.put_u8(1);
    out.put_u8(t.len() as u8);
    for f in t {
        out.put_u32_le(f.len() as u32);
        out.put_slice(f);
    }
    out.freeze()
}

/// The snapshot of the tuples of arities 1, 2, … in order (see [`TupleSpace`]'s
/// `snapshot`).
fn encode_parts<P: std::ops::Deref<Target = Vec<Arc<Tuple>>>>(
    parts: impl Iterator<Item = P> + Clone,
) -> Bytes {
    // Sized first: growing a buffer of hundreds of megabytes copies it again and again.
    let size: usize = parts
        .clone()
        .map(|tuples| {
            4 + tuples
                .iter()
                .map(|t| t.iter().map(|f| 4 + f.len()).sum::<usize>())
                .sum::<usize>()
        })
        .sum();
    let mut out = BytesMut::with_capacity(size);
    for tuples in parts {
        out.put_u32_le(tuples.len() as u32);
        for t in tuples.iter() {
            for f in t.iter() {
                out.put_u32_le(f.len() as u32);
                out.put_slice(f);
            }
        }
    }
    out.freeze()
}

/// The replicated tuple space.
#[derive(Debug)]
pub struct TupleSpace {
    /// Index `a - 1`: the tuples of arity `a`, oldest first (shared, so that a frozen copy
    /// costs a reference count per tuple).
    by_arity: Vec<RwLock<Vec<Arc<Tuple>>>>,
    classification: Classification,
}

impl TupleSpace {
    pub fn new(classification: Classification) -> Self {
        TupleSpace {
            by_arity: (0..FIELDS_MAX).map(|_| RwLock::new(Vec::new())).collect(),
            classification,
        }
    }

    /// Tuples held, all arities.
    pub fn len(&self) -> usize {
        self.by_arity
            .iter()
            .map(|p| p.read().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Executes one decoded operation.
    pub fn apply(&self, op: &SpaceOp) -> Bytes {
        let part = &self.by_arity[op.arity() - 1];
        // Reads share the arity's lock: the scheduler runs reads of one arity together.
        match op {
            SpaceOp::Out(t) => {
                let mut tuples = part.write().unwrap_or_else(PoisonError::into_inner);
                tuples.push(Arc::new(t.clone()));
                Bytes::from_static(&[1])
            }
            SpaceOp::Rdp(p) => {
                let tuples = part.read().unwrap_or_else(PoisonError::into_inner);
                match tuples.iter().find(|t| matches(p, t)) {
                    Some(t) => encode_tuple(t),
                    None => Bytes::from_static(&[0]),
                }
            }
            SpaceOp::Inp(p) => {
                let mut tuples = part.write().unwrap_or_else(PoisonError::into_inner);
                match tuples.iter().position(|t| matches(p, t)) {
                    Some(at) => encode_tuple(&tuples.remove(at)),
                    None => Bytes::from_static(&[0]),
                }
            }
        }
    }
}

impl ParallelService for TupleSpace {
    fn execute(&self, op: &Bytes) -> Bytes {
        match SpaceOp::decode(op) {
            Some(op) => self.apply(&op),
            None => Bytes::from_static(&[0xff]),
        }
    }

    fn classify(&self, op: &Bytes) -> Access {
        let Some(op) = SpaceOp::decode(op) else {
            return Access::none(); // refused without touching the state
        };
        match (self.classification, &op) {
            (Classification::Ts1, SpaceOp::Rdp(_)) => Access::none(),
            (Classification::Ts1, _) => Access::all(),
            (Classification::Ts2, SpaceOp::Rdp(_)) => Access::reads([op.arity() as u64]),
            (Classification::Ts2, _) => Access::writes([op.arity() as u64]),
        }
    }

    fn digest(&self) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        for part in &self.by_arity {
            let tuples = part.read().unwrap_or_else(PoisonError::into_inner);
            h.update(&(tuples.len() as u64).to_le_bytes());
            for t in tuples.iter() {
                h.update(&encode_tuple(t));
            }
        }
        *h.finalize().as_bytes()
    }
}

impl ParallelState for TupleSpace {
    /// Only `rdp` runs unordered (it changes nothing).
    fn execute_unordered(&self, op: &Bytes) -> Bytes {
        match SpaceOp::decode(op) {
            Some(read @ SpaceOp::Rdp(_)) => self.apply(&read),
            _ => Bytes::from_static(&[0xff]),
        }
    }

    /// Per arity 1..=10: count `u32` LE, then each tuple's fields as `u32` LE length and
    /// bytes, oldest first.
    fn snapshot(&self) -> Bytes {
        encode_parts(
            self.by_arity
                .iter()
                .map(|part| part.read().unwrap_or_else(PoisonError::into_inner)),
        )
    }

    /// A copy of every arity's list of tuples: the tuples are shared with the live space, so
    /// the copy costs a pointer and a reference count per tuple, not the data.
    fn freeze(&self) -> Option<FrozenSnapshot> {
        let parts: Vec<Vec<Arc<Tuple>>> = self
            .by_arity
            .iter()
            .map(|part| part.read().unwrap_or_else(PoisonError::into_inner).clone())
            .collect();
        Some(Box::new(move || encode_parts(parts.iter())))
    }

    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), String> {
        let mut b = snapshot.clone();
        let mut parts = Vec::with_capacity(FIELDS_MAX);
        for arity in 1..=FIELDS_MAX {
            if b.remaining() < 4 {
                return Err(format!("tuple space snapshot: truncated at arity {arity}"));
            }
            let count = b.get_u32_le() as usize;
            // Each tuple takes at least 4 bytes per field.
            if count.saturating_mul(4 * arity) > b.remaining() {
                return Err(format!(
                    "tuple space snapshot: {count} tuples of arity {arity} do not fit"
                ));
            }
            let mut tuples = Vec::with_capacity(count);
            for _ in 0..count {
                let mut t = Vec::with_capacity(arity);
                for _ in 0..arity {
                    if b.remaining() < 4 {
                        return Err("tuple space snapshot: truncated field".into());
                    }
                    let len = b.get_u32_le() as usize;
                    if b.remaining() < len {
                        return Err("tuple space snapshot: truncated field".into());
                    }
                    t.push(b.split_to(len));
                }
                tuples.push(Arc::new(t));
            }
            parts.push(tuples);
        }
        if b.has_remaining() {
            return Err("tuple space snapshot: trailing bytes".into());
        }
        for (part, tuples) in self.by_arity.iter_mut().zip(parts) {
            *part.get_mut().unwrap_or_else(PoisonError::into_inner) = tuples;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn out_rdp_inp_follow_templates_oldest_first() {
        let ts = TupleSpace::new(Classification::Ts2);
        for t in [vec![b("a"), b("1")], vec![b("a"), b("2")], vec![b("b")]] {
            assert_eq!(&ts.execute(&SpaceOp::Out(t).encode())[..], [1]);
        }
        let any_a = vec![Some(b("a")), None];
        let got = ts.execute(&SpaceOp::Rdp(any_a.clone()).encode());
        assert_eq!(got, encode_tuple(&vec![b("a"), b("1")]));
        assert_eq!(ts.execute(&SpaceOp::Inp(any_a.clone()).encode()), got);
        assert_eq!(
            ts.execute(&SpaceOp::Inp(any_a.clone()).encode()),
            encode_tuple(&vec![b("a"), b("2")])
        );
        assert_eq!(&ts.execute(&SpaceOp::Rdp(any_a).encode())[..], [0]);
        assert_eq!(ts.len(), 1);
        // Another arity never matches.
        assert_eq!(
            &ts.execute(&SpaceOp::Rdp(vec![None, None, None]).encode())[..],
            [0]
        );
        assert_eq!(&ts.execute(&Bytes::from_static(b"\x01\x0b"))[..], [0xff]);
    }

    #[test]
    fn operations_round_trip_and_malformed_ones_are_refused() {
        let ops = [
            SpaceOp::Out(vec![b("x"), b(""), b("zz")]),
            SpaceOp::Rdp(vec![None, Some(b("k"))]),
            SpaceOp::Inp((0..10).map(|_| None).collect()),
        ];
        for op in &ops {
            assert_eq!(SpaceOp::decode(&op.encode()).as_ref(), Some(op));
        }
        // A wildcard in a tuple, arity 0 or 11, bad tags, truncation, trailing bytes.
        for bad in [
            &b"\x01\x01\x00"[..],
            b"\x02\x00",
            b"\x02\x0b",
            b"\x09\x01\x00",
            b"\x02\x01\x01\x05\x00\x00\x00ab",
            b"\x02\x01\x00\x00",
            b"\x02\x01\x07",
        ] {
            assert_eq!(
                SpaceOp::decode(&Bytes::copy_from_slice(bad)),
                None,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn snapshots_round_trip_and_refuse_garbage() {
        let ts = TupleSpace::new(Classification::Ts2);
        for t in [vec![b("a")], vec![b("b"), b("c")], vec![b(""); 10]] {
            ts.execute(&SpaceOp::Out(t).encode());
        }
        let mut other = TupleSpace::new(Classification::Ts2);
        other.install_snapshot(&ts.snapshot()).unwrap();
        assert_eq!(other.digest(), ts.digest());
        assert_eq!(other.len(), 3);
        let snap = ts.snapshot();
        assert!(
            other
                .install_snapshot(&snap.slice(..snap.len() - 1))
                .is_err()
        );
        let mut longer = snap.to_vec();
        longer.push(0);
        assert!(other.install_snapshot(&Bytes::from(longer)).is_err());
        assert_eq!(
            other.digest(),
            ts.digest(),
            "a refused snapshot changes nothing"
        );
        assert_eq!(
            &other.execute_unordered(&SpaceOp::Inp(vec![None]).encode())[..],
            [0xff]
        );
    }

    #[test]
    fn a_frozen_space_keeps_its_tuples_while_the_live_one_changes() {
        let ts = TupleSpace::new(Classification::Ts2);
        for t in [vec![b("a")], vec![b("b"), b("c")], vec![b("d"), b("e")]] {
            ts.execute(&SpaceOp::Out(t).encode());
        }
        let at_freeze = ts.snapshot();
        let frozen = ts.freeze().expect("the tuple space freezes");
        ts.execute(&SpaceOp::Inp(vec![Some(b("b")), None]).encode());
        ts.execute(&SpaceOp::Out(vec![b("f")]).encode());
        assert_ne!(ts.snapshot(), at_freeze);
        assert_eq!(frozen(), at_freeze);
    }

    /// The executor's conformance suite (determinism, snapshots, read-only unordered
    /// execution, garbage snapshots, frozen snapshots) on the tuple space as a replica's
    /// service, run by the graph scheduler on three workers.
    #[test]
    fn conformance_suite_as_a_parallel_replica() {
        use tagma_parallel::{Classify, Groups, ParallelReplica, Policy, Scheduler};
        let mut workload = Vec::new();
        let mut x = 7u64;
        for i in 0..300u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let arity = 1 + (x >> 60) as usize % 3;
            let key = b(&format!("k{}", (x >> 40) % 8));
            let tuple: Tuple = (0..arity)
                .map(|f| {
                    if f == 0 {
                        key.clone()
                    } else {
                        b(&format!("v{i}"))
                    }
                })
                .collect();
            let template: Template = (0..arity).map(|f| (f == 0).then(|| key.clone())).collect();
            workload.push(match (x >> 20) % 4 {
                0 | 1 => SpaceOp::Out(tuple).encode(),
                2 => SpaceOp::Rdp(template).encode(),
                _ => SpaceOp::Inp(template).encode(),
            });
        }
        workload.push(Bytes::from_static(b"\x07"));
        tagma_exec::conformance::check_service(
            || {
                ParallelReplica::new(
                    TupleSpace::new(Classification::Ts2),
                    Scheduler::new(Policy::Graph, 3, Groups::default()),
                    Classify::Service,
                )
            },
            &workload,
        )
        .unwrap();
    }

    #[test]
    fn the_two_classifications() {
        let (ts1, ts2) = (
            TupleSpace::new(Classification::Ts1),
            TupleSpace::new(Classification::Ts2),
        );
        let out3 = SpaceOp::Out(vec![b("a"), b("b"), b("c")]).encode();
        let rdp3 = SpaceOp::Rdp(vec![None, None, None]).encode();
        let inp2 = SpaceOp::Inp(vec![None, None]).encode();
        assert!(ts1.classify(&out3).all && ts1.classify(&inp2).all);
        assert_eq!(ts1.classify(&rdp3), Access::none());
        assert!(ts2.classify(&out3).conflicts_with(&ts2.classify(&rdp3)));
        assert!(!ts2.classify(&out3).conflicts_with(&ts2.classify(&inp2)));
        assert!(!ts2.classify(&rdp3).conflicts_with(&ts2.classify(&rdp3)));
    }
}
