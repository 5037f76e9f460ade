//! Compact binary forms of operations and of whole CRDT states, and the state digest.
//!
//! An operation is what the broadcast layer carries; a state is the snapshot a late-joining
//! replica installs before applying the operations delivered after it. Integers are LEB128
//! varints in their minimal form (signed ones zigzag-mapped first), byte strings and lists are
//! prefixed by their length, and every enum starts with a one-byte tag. Decoding is strict:
//! it enforces [`Limits`], refuses unknown tags, over-long varints and trailing bytes, and
//! accepts a state only in its canonical form (ascending, distinct keys, no empty tag set or
//! empty slot), so an accepted state re-encodes to the same bytes and the encoding of a state
//! is unique. [`Crdt::digest`] hashes that encoding: equal states have equal digests and
//! different states different ones.
//!
//! Operation layout (`kind` tag: register 0, counter 1, set 2, map 3; then a variant tag):
//! - register assign `0 0`: lamport, node, value;
//! - counter add `1 0`: amount;
//! - set add / remove `2 0` / `2 1`: element, dots;
//! - map update `3 0`: key, nested operation (a register, counter or set operation as above);
//! - map remove `3 1`: key, dots, marks (node, counter, sum each).
//!
//! State layout (`kind` tag, then):
//! - register: `0`, or `1` lamport, node, dot, then `0` or `1` value;
//! - counter: per node, ascending: node, sum;
//! - set: per element, ascending: element, its tags (ascending dots, at least one);
//! - map: per key, ascending: key, a slot bitmap (register 1, counter 2, set 4, not 0), then
//!   the register as above, the counter's per-node tallies (node, last, sum, removed last,
//!   removed sum) and the set as above, for each slot present.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::counter::{Counter, CounterMark, CounterOp, NodeTally, ResetCounter};
use crate::crdt::{Crdt, Op};
use crate::dot::Dot;
use crate::error::{CodecError, CrdtError};
use crate::kind::Kind;
use crate::map::{Entry, Map, MapOp, NestedOp};
use crate::register::{Register, RegisterOp, Stamp, Winner};
use crate::set::{Set, SetOp};

/// Bounds a decoder enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest byte string (register value, set element, map key) accepted; default 1 MiB.
    pub value_bytes_max: usize,
    /// The most collection items (set elements, tags, dots, map keys, counter nodes, marks) one
    /// decode accepts in total; default 1,048,576.
    pub elements_max: usize,
    /// The deepest nesting accepted, counting a register, counter or set as 1 and a map as one
    /// more than its values; default 2, the deepest this crate's types nest (1 refuses maps).
    pub depth_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            value_bytes_max: 1 << 20,
            elements_max: 1 << 20,
            depth_max: 2,
        }
    }
}

const TAG_REGISTER: u8 = 0;
const TAG_COUNTER: u8 = 1;
const TAG_SET: u8 = 2;
const TAG_MAP: u8 = 3;
const SLOT_REGISTER: u8 = 1;
const SLOT_COUNTER: u8 = 2;
const SLOT_SET: u8 = 4;

const DIGEST_CONTEXT: &str = "tagma-crdt 2025 canonical state digest";

fn kind_tag(kind: Kind) -> u8 {
    match kind {
        Kind::Register => TAG_REGISTER,
        Kind::Counter => TAG_COUNTER,
        Kind::Set => TAG_SET,
        Kind::Map => TAG_MAP,
    }
}

fn put_uvarint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_ivarint(out: &mut Vec<u8>, value: i64) {
    put_uvarint(out, ((value << 1) ^ (value >> 63)) as u64);
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    put_uvarint(out, len as u64);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn put_dot(out: &mut Vec<u8>, dot: Dot) {
    put_uvarint(out, u64::from(dot.node));
    put_uvarint(out, dot.counter);
}

fn put_dots<'a>(out: &mut Vec<u8>, len: usize, dots: impl Iterator<Item = &'a Dot>) {
    put_len(out, len);
    dots.for_each(|dot| put_dot(out, *dot));
}

fn put_register_op(out: &mut Vec<u8>, op: &RegisterOp) {
    let RegisterOp::Assign { stamp, value } = op;
    out.push(0);
    put_uvarint(out, stamp.lamport);
    put_uvarint(out, u64::from(stamp.node));
    put_bytes(out, value);
}

fn put_counter_op(out: &mut Vec<u8>, op: &CounterOp) {
    let CounterOp::Add(amount) = op;
    out.push(0);
    put_ivarint(out, *amount);
}

fn put_set_op(out: &mut Vec<u8>, op: &SetOp) {
    let (variant, element, observed) = match op {
        SetOp::Add { element, observed } => (0, element, observed),
        SetOp::Remove { element, observed } => (1, element, observed),
    };
    out.push(variant);
    put_bytes(out, element);
    put_dots(out, observed.len(), observed.iter());
}

fn put_map_op(out: &mut Vec<u8>, op: &MapOp) {
    match op {
        MapOp::Update { key, op } => {
            out.push(0);
            put_bytes(out, key);
            out.push(kind_tag(op.kind()));
            match op {
                NestedOp::Register(op) => put_register_op(out, op),
                NestedOp::Counter(op) => put_counter_op(out, op),
                NestedOp::Set(op) => put_set_op(out, op),
            }
        }
        MapOp::Remove { key, dots, marks } => {
            out.push(1);
            put_bytes(out, key);
            put_dots(out, dots.len(), dots.iter());
            put_len(out, marks.len());
            for mark in marks {
                put_uvarint(out, u64::from(mark.node));
                put_uvarint(out, mark.counter);
                put_ivarint(out, mark.sum);
            }
        }
    }
}

/// The binary form of `op`.
pub fn encode_op(op: &Op) -> Vec<u8> {
    let mut out = vec![kind_tag(op.kind())];
    match op {
        Op::Register(op) => put_register_op(&mut out, op),
        Op::Counter(op) => put_counter_op(&mut out, op),
        Op::Set(op) => put_set_op(&mut out, op),
        Op::Map(op) => put_map_op(&mut out, op),
    }
    out
}

fn put_register(out: &mut Vec<u8>, register: &Register) {
    match register.winner() {
        None => out.push(0),
        Some(winner) => {
            out.push(1);
            put_uvarint(out, winner.stamp.lamport);
            put_uvarint(out, u64::from(winner.stamp.node));
            put_dot(out, winner.dot);
            match &winner.value {
                None => out.push(0),
                Some(value) => {
                    out.push(1);
                    put_bytes(out, value);
                }
            }
        }
    }
}

fn put_set(out: &mut Vec<u8>, set: &Set) {
    put_len(out, set.len());
    for (element, tags) in set.tagged() {
        put_bytes(out, element);
        put_dots(out, tags.len(), tags.iter());
    }
}

fn put_reset_counter(out: &mut Vec<u8>, counter: &ResetCounter) {
    put_len(out, counter.tallies().len());
    for (node, tally) in counter.tallies() {
        put_uvarint(out, u64::from(*node));
        put_uvarint(out, tally.last);
        put_ivarint(out, tally.sum);
        put_uvarint(out, tally.removed_last);
        put_ivarint(out, tally.removed_sum);
    }
}

fn put_map(out: &mut Vec<u8>, map: &Map) {
    put_len(out, map.entries().count());
    for (key, entry) in map.entries() {
        put_bytes(out, key);
        let slots = [
            (entry.register.is_some(), SLOT_REGISTER),
            (entry.counter.is_some(), SLOT_COUNTER),
            (entry.set.is_some(), SLOT_SET),
        ];
        out.push(
            slots
                .iter()
                .filter(|(present, _)| *present)
                .fold(0, |bits, (_, bit)| bits | bit),
        );
        if let Some(register) = &entry.register {
            put_register(out, register);
        }
        if let Some(counter) = &entry.counter {
            put_reset_counter(out, counter);
        }
        if let Some(set) = &entry.set {
            put_set(out, set);
        }
    }
}

/// The canonical binary form of a whole state (a snapshot).
pub fn encode_state(crdt: &Crdt) -> Vec<u8> {
    let mut out = vec![kind_tag(crdt.kind())];
    match crdt {
        Crdt::Register(register) => put_register(&mut out, register),
        Crdt::Counter(counter) => {
            put_len(&mut out, counter.sums().len());
            for (node, sum) in counter.sums() {
                put_uvarint(&mut out, u64::from(*node));
                put_ivarint(&mut out, *sum);
            }
        }
        Crdt::Set(set) => put_set(&mut out, set),
        Crdt::Map(map) => put_map(&mut out, map),
    }
    out
}

impl Crdt {
    /// A BLAKE3 hash of the canonical state encoding: replicas that applied the same
    /// operations have equal digests, whatever the delivery order.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_derive_key(DIGEST_CONTEXT);
        hasher.update(&encode_state(self));
        *hasher.finalize().as_bytes()
    }
}

/// A cursor over the input that enforces the limits.
struct Reader<'a> {
    input: &'a [u8],
    pos: usize,
    limits: &'a Limits,
    items: usize,
}

impl<'a> Reader<'a> {
    fn new(input: &'a [u8], limits: &'a Limits) -> Self {
        Self {
            input,
            pos: 0,
            limits,
            items: 0,
        }
    }

    fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    fn u8(&mut self) -> Result<u8, CodecError> {
        let byte = *self.input.get(self.pos).ok_or(CodecError::Truncated)?;
        self.pos += 1;
        Ok(byte)
    }

    fn uvarint(&mut self) -> Result<u64, CodecError> {
        let mut value = 0u64;
        for index in 0..10 {
            let byte = self.u8()?;
            if index == 9 && byte > 1 {
                return Err(CodecError::BadVarint);
            }
            value |= u64::from(byte & 0x7f) << (7 * index);
            if byte & 0x80 == 0 {
                if index > 0 && byte == 0 {
                    return Err(CodecError::BadVarint);
                }
                return Ok(value);
            }
        }
        Err(CodecError::BadVarint)
    }

    fn ivarint(&mut self) -> Result<i64, CodecError> {
        let raw = self.uvarint()?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    fn node(&mut self) -> Result<u32, CodecError> {
        let value = self.uvarint()?;
        u32::try_from(value).map_err(|_| CodecError::OutOfRange {
            what: "node",
            value,
        })
    }

    fn dot(&mut self) -> Result<Dot, CodecError> {
        Ok(Dot::new(self.node()?, self.uvarint()?))
    }

    fn bytes(&mut self) -> Result<Bytes, CodecError> {
        // Copied, never a slice of the message: a replica keeps the value as long as the
        // element lives, and a slice would keep the whole frame it arrived in alive with it.
        self.bytes_ref().map(Bytes::copy_from_slice)
    }

    /// A byte string, checked, not copied.
    fn bytes_ref(&mut self) -> Result<&'a [u8], CodecError> {
        let len = self.uvarint()?;
        if len > self.limits.value_bytes_max as u64 {
            return Err(CodecError::ValueTooLarge {
                len,
                max: self.limits.value_bytes_max,
            });
        }
        if len > self.remaining() as u64 {
            return Err(CodecError::Truncated);
        }
        let end = self.pos + len as usize;
        let bytes = &self.input[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// A list length, charged against `elements_max`; every item takes at least one byte, so a
    /// length beyond the remaining input is refused before anything is allocated.
    fn count(&mut self) -> Result<usize, CodecError> {
        let count = self.uvarint()?;
        let total = (self.items as u64).saturating_add(count);
        if total > self.limits.elements_max as u64 {
            return Err(CodecError::TooManyElements {
                max: self.limits.elements_max,
            });
        }
        if count > self.remaining() as u64 {
            return Err(CodecError::Truncated);
        }
        self.items = total as usize;
        Ok(count as usize)
    }

    fn dots(&mut self) -> Result<Vec<Dot>, CodecError> {
        let count = self.count()?;
        (0..count).map(|_| self.dot()).collect()
    }

    fn flag(&mut self, what: &'static str) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(CodecError::UnknownTag { what, tag }),
        }
    }

    /// The kind tag of a CRDT at nesting `level` (1 for the outermost): a map needs one level
    /// more for its values, and a map's value cannot be a map.
    fn kind(&mut self, level: usize) -> Result<Kind, CodecError> {
        let kind = match self.u8()? {
            TAG_REGISTER => Kind::Register,
            TAG_COUNTER => Kind::Counter,
            TAG_SET => Kind::Set,
            TAG_MAP => Kind::Map,
            tag => return Err(CodecError::UnknownTag { what: "kind", tag }),
        };
        let depth = if kind == Kind::Map { level + 1 } else { level };
        if depth > self.limits.depth_max {
            return Err(CodecError::TooDeep {
                depth,
                max: self.limits.depth_max,
            });
        }
        if kind == Kind::Map && level > 1 {
            return Err(CodecError::NestedMap);
        }
        Ok(kind)
    }

    fn finish(&self) -> Result<(), CodecError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(CodecError::TrailingBytes { count }),
        }
    }

    fn register_op(&mut self) -> Result<RegisterOp, CodecError> {
        let (stamp, value) = self.register_assign()?;
        Ok(RegisterOp::Assign {
            stamp,
            value: Bytes::copy_from_slice(value),
        })
    }

    /// A register assignment's stamp and value, the value not copied.
    fn register_assign(&mut self) -> Result<(Stamp, &'a [u8]), CodecError> {
        match self.u8()? {
            0 => {
                let lamport = self.uvarint()?;
                let node = self.node()?;
                Ok((Stamp { lamport, node }, self.bytes_ref()?))
            }
            tag => Err(CodecError::UnknownTag {
                what: "register operation",
                tag,
            }),
        }
    }

    fn counter_op(&mut self) -> Result<CounterOp, CodecError> {
        match self.u8()? {
            0 => Ok(CounterOp::Add(self.ivarint()?)),
            tag => Err(CodecError::UnknownTag {
                what: "counter operation",
                tag,
            }),
        }
    }

    fn set_op(&mut self) -> Result<SetOp, CodecError> {
        let variant = self.u8()?;
        if variant > 1 {
            return Err(CodecError::UnknownTag {
                what: "set operation",
                tag: variant,
            });
        }
        let element = self.bytes()?;
        let observed = self.dots()?;
        Ok(if variant == 0 {
            SetOp::Add { element, observed }
        } else {
            SetOp::Remove { element, observed }
        })
    }

    fn map_op(&mut self) -> Result<MapOp, CodecError> {
        match self.u8()? {
            0 => {
                let key = self.bytes()?;
                let op = match self.kind(2)? {
                    Kind::Register => NestedOp::Register(self.register_op()?),
                    Kind::Counter => NestedOp::Counter(self.counter_op()?),
                    Kind::Set => NestedOp::Set(self.set_op()?),
                    Kind::Map => return Err(CodecError::NestedMap),
                };
                Ok(MapOp::Update { key, op })
            }
            1 => {
                let key = self.bytes()?;
                let dots = self.dots()?;
                let count = self.count()?;
                let marks = (0..count)
                    .map(|_| {
                        Ok(CounterMark {
                            node: self.node()?,
                            counter: self.uvarint()?,
                            sum: self.ivarint()?,
                        })
                    })
                    .collect::<Result<Vec<_>, CodecError>>()?;
                Ok(MapOp::Remove { key, dots, marks })
            }
            tag => Err(CodecError::UnknownTag {
                what: "map operation",
                tag,
            }),
        }
    }

    fn op(&mut self) -> Result<Op, CodecError> {
        Ok(match self.kind(1)? {
            Kind::Register => Op::Register(self.register_op()?),
            Kind::Counter => Op::Counter(self.counter_op()?),
            Kind::Set => Op::Set(self.set_op()?),
            Kind::Map => Op::Map(self.map_op()?),
        })
    }

    fn register(&mut self) -> Result<Register, CodecError> {
        if !self.flag("register state")? {
            return Ok(Register::new());
        }
        let lamport = self.uvarint()?;
        let node = self.node()?;
        let dot = self.dot()?;
        let value = if self.flag("register value")? {
            Some(self.bytes()?)
        } else {
            None
        };
        Ok(Register::from_winner(Some(Winner {
            stamp: Stamp { lamport, node },
            dot,
            value,
        })))
    }

    fn counter(&mut self) -> Result<Counter, CodecError> {
        let count = self.count()?;
        let mut sums = BTreeMap::new();
        let mut previous = None;
        for _ in 0..count {
            let node = self.node()?;
            ascending(&mut previous, node, "counter nodes")?;
            sums.insert(node, self.ivarint()?);
        }
        Ok(Counter::from_sums(sums))
    }

    fn reset_counter(&mut self) -> Result<ResetCounter, CodecError> {
        let count = self.count()?;
        let mut tallies = BTreeMap::new();
        let mut previous = None;
        for _ in 0..count {
            let node = self.node()?;
            ascending(&mut previous, node, "counter nodes")?;
            let tally = NodeTally {
                last: self.uvarint()?,
                sum: self.ivarint()?,
                removed_last: self.uvarint()?,
                removed_sum: self.ivarint()?,
            };
            tallies.insert(node, tally);
        }
        Ok(ResetCounter::from_tallies(tallies))
    }

    fn set(&mut self) -> Result<Set, CodecError> {
        let count = self.count()?;
        let mut elements = BTreeMap::new();
        let mut previous = None;
        for _ in 0..count {
            let element = self.bytes()?;
            ascending(&mut previous, element.clone(), "set elements")?;
            let tag_count = self.count()?;
            if tag_count == 0 {
                return Err(CodecError::NotCanonical {
                    what: "a set element without tags",
                });
            }
            let mut tags = BTreeSet::new();
            let mut previous_tag = None;
            for _ in 0..tag_count {
                let tag = self.dot()?;
                ascending(&mut previous_tag, tag, "set tags")?;
                tags.insert(tag);
            }
            elements.insert(element, tags);
        }
        Ok(Set::from_tags(elements))
    }

    fn map(&mut self) -> Result<Map, CodecError> {
        let count = self.count()?;
        let mut entries = BTreeMap::new();
        let mut previous = None;
        for _ in 0..count {
            let key = self.bytes()?;
            ascending(&mut previous, key.clone(), "map keys")?;
            let slots = self.u8()?;
            if slots & !(SLOT_REGISTER | SLOT_COUNTER | SLOT_SET) != 0 {
                return Err(CodecError::UnknownTag {
                    what: "map slots",
                    tag: slots,
                });
            }
            if slots == 0 {
                return Err(CodecError::NotCanonical {
                    what: "a map key without slots",
                });
            }
            let mut entry = Entry::default();
            if slots & SLOT_REGISTER != 0 {
                entry.register = Some(self.register()?);
            }
            if slots & SLOT_COUNTER != 0 {
                entry.counter = Some(self.reset_counter()?);
            }
            if slots & SLOT_SET != 0 {
                let set = self.set()?;
                if set.is_empty() {
                    return Err(CodecError::NotCanonical {
                        what: "an empty map set slot",
                    });
                }
                entry.set = Some(set);
            }
            entries.insert(key, entry);
        }
        Ok(Map::from_entries(entries))
    }

    fn state(&mut self) -> Result<Crdt, CodecError> {
        Ok(match self.kind(1)? {
            Kind::Register => Crdt::Register(self.register()?),
            Kind::Counter => Crdt::Counter(self.counter()?),
            Kind::Set => Crdt::Set(self.set()?),
            Kind::Map => Crdt::Map(self.map()?),
        })
    }
}

/// Refuses `next` unless it is above `previous`, then remembers it.
fn ascending<T: Ord>(
    previous: &mut Option<T>,
    next: T,
    what: &'static str,
) -> Result<(), CodecError> {
    if previous.as_ref().is_some_and(|previous| *previous >= next) {
        return Err(CodecError::NotCanonical { what });
    }
    *previous = Some(next);
    Ok(())
}

/// Decodes an operation under the default [`Limits`].
pub fn decode_op(input: &[u8]) -> Result<Op, CodecError> {
    decode_op_with(input, &Limits::default())
}

/// Decodes an operation under `limits`.
pub fn decode_op_with(input: &[u8], limits: &Limits) -> Result<Op, CodecError> {
    let mut reader = Reader::new(input, limits);
    let op = reader.op()?;
    reader.finish()?;
    Ok(op)
}

/// Decodes an operation under the default [`Limits`] and applies it to `crdt` with id
/// `dot`: what [`decode_op`] and [`Crdt::apply`] do one after the other, except that a
/// register assignment's value is copied only if the assignment wins. A register that many
/// replicas assign concurrently receives mostly assignments that lose, and decoding each
/// would copy its value for nothing.
pub fn decode_and_apply(
    crdt: &mut Crdt,
    dot: Dot,
    input: &[u8],
) -> Result<Result<(), CrdtError>, CodecError> {
    let limits = Limits::default();
    let mut reader = Reader::new(input, &limits);
    match crdt {
        Crdt::Register(register) if input.first() == Some(&TAG_REGISTER) => {
            reader.kind(1)?;
            let (stamp, value) = reader.register_assign()?;
            reader.finish()?;
            register.apply_lazily(dot, stamp, || Bytes::copy_from_slice(value));
            Ok(Ok(()))
        }
        crdt => {
            let op = reader.op()?;
            reader.finish()?;
            Ok(crdt.apply(dot, &op))
        }
    }
}

/// Decodes a state under the default [`Limits`].
pub fn decode_state(input: &[u8]) -> Result<Crdt, CodecError> {
    decode_state_with(input, &Limits::default())
}

/// Decodes a state under `limits`.
pub fn decode_state_with(input: &[u8], limits: &Limits) -> Result<Crdt, CodecError> {
    let mut reader = Reader::new(input, limits);
    let crdt = reader.state()?;
    reader.finish()?;
    Ok(crdt)
}
