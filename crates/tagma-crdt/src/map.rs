//! Map from byte-string keys to nested registers, counters and sets, with update-wins key
//! removal.
//!
//! An update names a key and carries a register, counter or set operation, which applies to
//! the key's value of that kind with the update's dot. A key's kind is set by its first update:
//! the update builders ([`Map::update`] and the shorthands) refuse, with
//! [`MapError::KindMismatch`], an update of another kind to a key that holds a value. That
//! check runs at the origin because it is the only place where it gives the same answer on
//! every replica: two replicas that create a key concurrently with different kinds cannot see
//! each other's choice, and rejecting whichever update arrives second would keep a different
//! update on each replica. The map therefore keeps one slot per kind for every key and applies
//! every update to its own slot. When concurrent creations left a key with more than one live
//! slot, the key shows the first live one in [`Kind`] order (register, counter, set), updates of
//! that kind only are built for it, and a key removal clears all of them.
//!
//! Removing a key is a reset: [`Map::remove`] carries what its origin had seen of the key and
//! takes away exactly those contributions, so an update concurrent with the removal keeps the
//! key (update wins):
//! - set: the removal carries the tags it saw and deletes them, as a set remove does;
//! - counter: the removal carries a [`CounterMark`] per node (the node's last add it saw and
//!   the node's sum up to it) and takes away that prefix of the node's adds
//!   ([`ResetCounter`]);
//! - register: the removal carries the dot of the assignment holding the value and drops the
//!   value if that assignment still holds it. The register keeps the winning stamp, so a
//!   concurrent assignment with a larger stamp takes effect and one with a smaller stamp, which
//!   had already lost to the removed value, stays lost ([`Register::reset`]).
//!
//! A key is present while some slot is live: a register with a value, a counter with an add no
//! removal took away, a set with an element. A removed key leaves a tombstone of a few integers
//! (the register's stamp, the counter's per-node marks) so that late concurrent updates resolve
//! the same way on every replica.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::counter::{CounterMark, CounterOp, ResetCounter};
use crate::dot::Dot;
use crate::error::MapError;
use crate::kind::Kind;
use crate::register::{Register, RegisterOp};
use crate::set::{Set, SetOp};
use crate::value::Value;

/// An operation on a map value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NestedOp {
    Register(RegisterOp),
    Counter(CounterOp),
    Set(SetOp),
}

impl NestedOp {
    /// The kind of value the operation is for.
    pub fn kind(&self) -> Kind {
        match self {
            NestedOp::Register(_) => Kind::Register,
            NestedOp::Counter(_) => Kind::Counter,
            NestedOp::Set(_) => Kind::Set,
        }
    }
}

/// A map operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapOp {
    /// Applies `op` to the value of its kind at `key`.
    Update { key: Bytes, op: NestedOp },
    /// Takes away the contributions to `key` its origin had seen: the set tags and register
    /// assignment in `dots`, the counter prefixes in `marks`.
    Remove {
        key: Bytes,
        dots: Vec<Dot>,
        marks: Vec<CounterMark>,
    },
}

impl MapOp {
    /// The key the operation is about.
    pub fn key(&self) -> &Bytes {
        match self {
            MapOp::Update { key, .. } | MapOp::Remove { key, .. } => key,
        }
    }
}

/// A key's slots, one per kind; a slot exists once an update of its kind applied (a set slot
/// while it has an element).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub(crate) register: Option<Register>,
    pub(crate) counter: Option<ResetCounter>,
    pub(crate) set: Option<Set>,
}

impl Entry {
    /// The register slot (possibly a tombstone without a value).
    pub fn register(&self) -> Option<&Register> {
        self.register.as_ref()
    }

    /// The counter slot (possibly a tombstone with every add taken away).
    pub fn counter(&self) -> Option<&ResetCounter> {
        self.counter.as_ref()
    }

    /// The set slot (never empty).
    pub fn set(&self) -> Option<&Set> {
        self.set.as_ref()
    }

    /// The kinds whose slot is live, in [`Kind`] order.
    pub fn live_kinds(&self) -> Vec<Kind> {
        let register = self.register.as_ref().is_some_and(|r| r.value().is_some());
        let counter = self.counter.as_ref().is_some_and(ResetCounter::is_live);
        let set = self.set.as_ref().is_some_and(|s| !s.is_empty());
        [
            (register, Kind::Register),
            (counter, Kind::Counter),
            (set, Kind::Set),
        ]
        .into_iter()
        .filter_map(|(live, kind)| live.then_some(kind))
        .collect()
    }

    /// The kind the key shows: its first live kind.
    pub fn kind(&self) -> Option<Kind> {
        self.live_kinds().first().copied()
    }

    /// The value of the slot of `kind`, if that slot is live.
    pub fn value_of(&self, kind: Kind) -> Option<Value> {
        if !self.live_kinds().contains(&kind) {
            return None;
        }
        match kind {
            Kind::Register => self
                .register
                .as_ref()
                .map(|r| Value::Register(r.value().cloned())),
            Kind::Counter => self.counter.as_ref().map(|c| Value::Counter(c.value())),
            Kind::Set => self
                .set
                .as_ref()
                .map(|s| Value::Set(s.iter().cloned().collect())),
            Kind::Map => None,
        }
    }

    /// The value the key shows.
    pub fn value(&self) -> Option<Value> {
        self.kind().and_then(|kind| self.value_of(kind))
    }

    fn has_no_slot(&self) -> bool {
        self.register.is_none() && self.counter.is_none() && self.set.is_none()
    }
}

/// A map from byte-string keys to registers, counters and sets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Map {
    entries: BTreeMap<Bytes, Entry>,
}

impl Map {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn from_entries(entries: BTreeMap<Bytes, Entry>) -> Self {
        Self { entries }
    }

    /// Every key's slots, tombstones included, in ascending key order.
    pub fn entries(&self) -> impl Iterator<Item = (&Bytes, &Entry)> {
        self.entries.iter()
    }

    /// The slots of `key`, if it has any (present or tombstone).
    pub fn entry(&self, key: &[u8]) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// The kind `key` shows, if present.
    pub fn kind(&self, key: &[u8]) -> Option<Kind> {
        self.entries.get(key).and_then(Entry::kind)
    }

    /// The value `key` shows, if present.
    pub fn get(&self, key: &[u8]) -> Option<Value> {
        self.entries.get(key).and_then(Entry::value)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.kind(key).is_some()
    }

    /// The present keys in ascending order.
    pub fn keys(&self) -> impl Iterator<Item = &Bytes> {
        self.entries
            .iter()
            .filter(|(_, entry)| entry.kind().is_some())
            .map(|(key, _)| key)
    }

    /// The number of present keys.
    pub fn len(&self) -> usize {
        self.keys().count()
    }

    /// Whether no key is present.
    pub fn is_empty(&self) -> bool {
        self.keys().next().is_none()
    }

    /// The present keys with their values.
    pub fn value(&self) -> BTreeMap<Bytes, Value> {
        self.entries
            .iter()
            .filter_map(|(key, entry)| entry.value().map(|value| (key.clone(), value)))
            .collect()
    }

    /// Builds the update that applies `op` at `key`, refusing an operation of another kind than
    /// the key shows.
    pub fn update(&self, key: Bytes, op: NestedOp) -> Result<MapOp, MapError> {
        if let Some(shown) = self.kind(&key)
            && shown != op.kind()
        {
            return Err(MapError::KindMismatch {
                key: shown,
                op: op.kind(),
            });
        }
        Ok(MapOp::Update { key, op })
    }

    /// Builds the update by which `node` assigns `value` to the register at `key`.
    pub fn assign(&self, key: Bytes, value: Bytes, node: u32) -> Result<MapOp, MapError> {
        let op = match self.entries.get(&key).and_then(Entry::register) {
            Some(register) => register.assign(value, node),
            None => Register::new().assign(value, node),
        };
        self.update(key, NestedOp::Register(op))
    }

    /// Builds the update that adds `amount` to the counter at `key`.
    pub fn add(&self, key: Bytes, amount: i64) -> Result<MapOp, MapError> {
        self.update(key, NestedOp::Counter(CounterOp::Add(amount)))
    }

    /// Builds the update that adds `element` to the set at `key`.
    pub fn insert(&self, key: Bytes, element: Bytes) -> Result<MapOp, MapError> {
        let op = match self.entries.get(&key).and_then(Entry::set) {
            Some(set) => set.add(element),
            None => Set::new().add(element),
        };
        self.update(key, NestedOp::Set(op))
    }

    /// Builds the update that removes `element` from the set at `key`.
    pub fn remove_element(&self, key: Bytes, element: Bytes) -> Result<MapOp, MapError> {
        let op = match self.entries.get(&key).and_then(Entry::set) {
            Some(set) => set.remove(element),
            None => Set::new().remove(element),
        };
        self.update(key, NestedOp::Set(op))
    }

    /// Builds the removal of `key` as this replica sees it: every slot's contributions.
    pub fn remove(&self, key: Bytes) -> MapOp {
        let mut dots = Vec::new();
        let mut marks = Vec::new();
        if let Some(entry) = self.entries.get(&key) {
            dots.extend(entry.register.as_ref().and_then(Register::value_dot));
            dots.extend(entry.set.as_ref().map(Set::dots).unwrap_or_default());
            marks = entry
                .counter
                .as_ref()
                .map(ResetCounter::marks)
                .unwrap_or_default();
        }
        dots.sort_unstable();
        dots.dedup();
        MapOp::Remove { key, dots, marks }
    }

    /// Applies the operation with id `dot`.
    pub fn apply(&mut self, dot: Dot, op: &MapOp) {
        match op {
            MapOp::Update { key, op } => {
                let entry = self.entries.entry(key.clone()).or_default();
                match op {
                    NestedOp::Register(op) => {
                        entry.register.get_or_insert_default().apply(dot, op);
                    }
                    NestedOp::Counter(op) => {
                        entry.counter.get_or_insert_default().apply(dot, op);
                    }
                    NestedOp::Set(op) => entry.set.get_or_insert_default().apply(dot, op),
                }
                self.tidy(key);
            }
            MapOp::Remove { key, dots, marks } => {
                let Some(entry) = self.entries.get_mut(key) else {
                    return;
                };
                if let Some(register) = entry.register.as_mut() {
                    register.reset(dots);
                }
                if let Some(counter) = entry.counter.as_mut() {
                    counter.reset(marks);
                }
                if let Some(set) = entry.set.as_mut() {
                    set.remove_tags(dots);
                }
                self.tidy(key);
            }
        }
    }

    /// Drops `key`'s set slot if empty and the key if no slot is left, which keeps equal maps
    /// equal in representation.
    fn tidy(&mut self, key: &[u8]) {
        if let Some(entry) = self.entries.get_mut(key) {
            if entry.set.as_ref().is_some_and(Set::is_empty) {
                entry.set = None;
            }
            if entry.has_no_slot() {
                self.entries.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Map, MapOp};
    use crate::dot::Dot;
    use crate::error::MapError;
    use crate::kind::Kind;
    use crate::value::Value;
    use bytes::Bytes;

    fn b(text: &'static str) -> Bytes {
        Bytes::from_static(text.as_bytes())
    }

    /// Applies `ops` to a clone of `base` in the given order.
    fn after(base: &Map, ops: &[(Dot, &MapOp)]) -> Map {
        let mut map = base.clone();
        for (dot, op) in ops {
            map.apply(*dot, op);
        }
        map
    }

    #[test]
    fn an_update_of_another_kind_is_refused_at_the_origin() {
        let mut map = Map::new();
        map.apply(Dot::new(1, 1), &map.add(b("k"), 3).unwrap());
        assert_eq!(map.kind(b"k"), Some(Kind::Counter));
        assert_eq!(
            map.insert(b("k"), b("x")),
            Err(MapError::KindMismatch {
                key: Kind::Counter,
                op: Kind::Set
            })
        );
        assert_eq!(
            map.assign(b("k"), b("v"), 1),
            Err(MapError::KindMismatch {
                key: Kind::Counter,
                op: Kind::Register
            })
        );
        // After a removal the key takes any kind.
        map.apply(Dot::new(1, 2), &map.remove(b("k")));
        assert!(!map.contains_key(b"k"));
        let op = map.insert(b("k"), b("x")).unwrap();
        map.apply(Dot::new(1, 3), &op);
        assert_eq!(map.get(b"k"), Some(Value::Set(vec![b("x")])));
    }

    #[test]
    fn concurrent_creations_of_different_kinds_converge() {
        let base = Map::new();
        let set = base.insert(b("k"), b("x")).unwrap();
        let counter = base.add(b("k"), 7).unwrap();
        let (set_dot, counter_dot) = (Dot::new(1, 1), Dot::new(2, 1));
        let a = after(&base, &[(set_dot, &set), (counter_dot, &counter)]);
        let b_map = after(&base, &[(counter_dot, &counter), (set_dot, &set)]);
        assert_eq!(a, b_map);
        assert_eq!(
            a.entry(b"k").unwrap().live_kinds(),
            [Kind::Counter, Kind::Set]
        );
        assert_eq!(a.get(b"k"), Some(Value::Counter(7)));
        // A removal that saw both clears both.
        let mut cleared = a.clone();
        cleared.apply(Dot::new(1, 2), &a.remove(b("k")));
        assert!(cleared.is_empty());
    }

    #[test]
    fn a_concurrent_set_update_keeps_the_key() {
        let mut base = Map::new();
        base.apply(Dot::new(1, 1), &base.insert(b("k"), b("x")).unwrap());
        let remove = base.remove(b("k"));
        let insert = base.insert(b("k"), b("y")).unwrap();
        let (remove_dot, insert_dot) = (Dot::new(2, 1), Dot::new(3, 1));
        let a = after(&base, &[(remove_dot, &remove), (insert_dot, &insert)]);
        let b_map = after(&base, &[(insert_dot, &insert), (remove_dot, &remove)]);
        assert_eq!(a, b_map);
        assert_eq!(a.get(b"k"), Some(Value::Set(vec![b("y")])));
    }

    #[test]
    fn a_concurrent_counter_update_keeps_only_its_own_add() {
        let mut base = Map::new();
        base.apply(Dot::new(1, 1), &base.add(b("k"), 10).unwrap());
        base.apply(Dot::new(2, 1), &base.add(b("k"), 20).unwrap());
        let remove = base.remove(b("k"));
        let add = base.add(b("k"), 5).unwrap();
        let (remove_dot, add_dot) = (Dot::new(3, 1), Dot::new(1, 2));
        let a = after(&base, &[(remove_dot, &remove), (add_dot, &add)]);
        let b_map = after(&base, &[(add_dot, &add), (remove_dot, &remove)]);
        assert_eq!(a, b_map);
        assert_eq!(a.get(b"k"), Some(Value::Counter(5)));
        // A removal that saw everything leaves the key absent.
        let mut cleared = a.clone();
        cleared.apply(Dot::new(3, 2), &a.remove(b("k")));
        assert_eq!(cleared.get(b"k"), None);
        assert!(cleared.entry(b"k").is_some(), "the counter's marks stay");
    }

    #[test]
    fn register_removal_resolves_concurrent_assignments_by_stamp() {
        let mut base = Map::new();
        base.apply(Dot::new(1, 1), &base.assign(b("k"), b("seen"), 1).unwrap());
        base.apply(Dot::new(1, 2), &base.assign(b("k"), b("seen2"), 1).unwrap());
        let remove = base.remove(b("k"));
        // Node 2 had seen nothing of the key: its stamp (1, 2) is below (2, 1).
        let lower = Map::new().assign(b("k"), b("lower"), 2).unwrap();
        // Node 3 had seen the key: its stamp (3, 3) is above.
        let higher = base.assign(b("k"), b("higher"), 3).unwrap();
        let (remove_dot, lower_dot, higher_dot) = (Dot::new(4, 1), Dot::new(2, 1), Dot::new(3, 1));
        let orders: [[(Dot, &MapOp); 2]; 2] = [
            [(remove_dot, &remove), (lower_dot, &lower)],
            [(lower_dot, &lower), (remove_dot, &remove)],
        ];
        let results: Vec<Map> = orders.iter().map(|order| after(&base, order)).collect();
        assert_eq!(results[0], results[1]);
        assert_eq!(results[0].get(b"k"), None);
        let orders: [[(Dot, &MapOp); 2]; 2] = [
            [(remove_dot, &remove), (higher_dot, &higher)],
            [(higher_dot, &higher), (remove_dot, &remove)],
        ];
        let results: Vec<Map> = orders.iter().map(|order| after(&base, order)).collect();
        assert_eq!(results[0], results[1]);
        assert_eq!(
            results[0].get(b"k"),
            Some(Value::Register(Some(b("higher"))))
        );
    }

    #[test]
    fn removing_an_absent_key_changes_nothing() {
        let mut map = Map::new();
        map.apply(Dot::new(1, 1), &map.assign(b("a"), b("1"), 1).unwrap());
        let before = map.clone();
        map.apply(Dot::new(1, 2), &map.remove(b("zzz")));
        assert_eq!(map, before);
        assert_eq!(map.keys().collect::<Vec<_>>(), vec![&b("a")]);
        assert_eq!(map.len(), 1);
    }
}
