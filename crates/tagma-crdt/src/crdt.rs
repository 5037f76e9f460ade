//! One replica's CRDT of any kind, the operations of every kind, and applying one to the other.
//!
//! A topic replicates one CRDT: every replica starts it with [`Crdt::new`] and the same
//! [`Kind`], and applies each delivered operation with its dot. The canonical digest
//! ([`Crdt::digest`]) and the snapshot form live with the binary encoding in
//! [`crate::codec`].

use bytes::Bytes;

use crate::counter::{Counter, CounterOp};
use crate::dot::Dot;
use crate::error::CrdtError;
use crate::kind::Kind;
use crate::map::{Map, MapOp};
use crate::register::{Register, RegisterOp};
use crate::set::{Set, SetOp};
use crate::value::Value;

/// An operation of any kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Register(RegisterOp),
    Counter(CounterOp),
    Set(SetOp),
    Map(MapOp),
}

impl Op {
    /// The kind of CRDT the operation is for.
    pub fn kind(&self) -> Kind {
        match self {
            Op::Register(_) => Kind::Register,
            Op::Counter(_) => Kind::Counter,
            Op::Set(_) => Kind::Set,
            Op::Map(_) => Kind::Map,
        }
    }
}

impl From<RegisterOp> for Op {
    fn from(op: RegisterOp) -> Self {
        Op::Register(op)
    }
}

impl From<CounterOp> for Op {
    fn from(op: CounterOp) -> Self {
        Op::Counter(op)
    }
}

impl From<SetOp> for Op {
    fn from(op: SetOp) -> Self {
        Op::Set(op)
    }
}

impl From<MapOp> for Op {
    fn from(op: MapOp) -> Self {
        Op::Map(op)
    }
}

/// A CRDT of any kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Crdt {
    Register(Register),
    Counter(Counter),
    Set(Set),
    Map(Map),
}

impl Crdt {
    /// An initial CRDT of `kind`: an unassigned register, a zero counter, an empty set or map.
    pub fn new(kind: Kind) -> Self {
        match kind {
            Kind::Register => Crdt::Register(Register::new()),
            Kind::Counter => Crdt::Counter(Counter::new()),
            Kind::Set => Crdt::Set(Set::new()),
            Kind::Map => Crdt::Map(Map::new()),
        }
    }

    /// The CRDT's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Crdt::Register(_) => Kind::Register,
            Crdt::Counter(_) => Kind::Counter,
            Crdt::Set(_) => Kind::Set,
            Crdt::Map(_) => Kind::Map,
        }
    }

    /// Applies the operation with id `dot`. An operation for another kind is refused with
    /// [`CrdtError::KindMismatch`] and changes nothing.
    pub fn apply(&mut self, dot: Dot, op: &Op) -> Result<(), CrdtError> {
        match (self, op) {
            (Crdt::Register(register), Op::Register(op)) => register.apply(dot, op),
            (Crdt::Counter(counter), Op::Counter(op)) => counter.apply(dot, op),
            (Crdt::Set(set), Op::Set(op)) => set.apply(dot, op),
            (Crdt::Map(map), Op::Map(op)) => map.apply(dot, op),
            (crdt, op) => {
                return Err(CrdtError::KindMismatch {
                    crdt: crdt.kind(),
                    op: op.kind(),
                });
            }
        }
        Ok(())
    }

    /// The current value.
    pub fn value(&self) -> Value {
        match self {
            Crdt::Register(register) => Value::Register(register.value().cloned()),
            Crdt::Counter(counter) => Value::Counter(counter.value()),
            Crdt::Set(set) => Value::Set(set.iter().cloned().collect::<Vec<Bytes>>()),
            Crdt::Map(map) => Value::Map(map.value()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Crdt, Op};
    use crate::counter::CounterOp;
    use crate::dot::Dot;
    use crate::error::CrdtError;
    use crate::kind::Kind;
    use crate::value::Value;

    #[test]
    fn an_operation_of_another_kind_is_refused_and_changes_nothing() {
        for kind in Kind::ALL {
            let mut crdt = Crdt::new(kind);
            assert_eq!(crdt.kind(), kind);
            let before = crdt.clone();
            let op = if kind == Kind::Counter {
                Op::Set(crate::set::Set::new().add(bytes::Bytes::from_static(b"x")))
            } else {
                Op::Counter(CounterOp::Add(1))
            };
            let result = crdt.apply(Dot::new(1, 1), &op);
            assert_eq!(
                result,
                Err(CrdtError::KindMismatch {
                    crdt: kind,
                    op: op.kind()
                })
            );
            assert_eq!(crdt, before);
        }
    }

    #[test]
    fn values_of_initial_crdts() {
        assert_eq!(Crdt::new(Kind::Register).value(), Value::Register(None));
        assert_eq!(Crdt::new(Kind::Counter).value(), Value::Counter(0));
        assert_eq!(Crdt::new(Kind::Set).value(), Value::Set(Vec::new()));
        let mut counter = Crdt::new(Kind::Counter);
        counter
            .apply(Dot::new(1, 1), &CounterOp::Add(4).into())
            .unwrap();
        assert_eq!(counter.value(), Value::Counter(4));
    }
}
