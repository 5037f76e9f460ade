//! The kinds of CRDT this crate replicates, named in errors and chosen when a replica starts.

use std::fmt;

/// A CRDT kind. The order (register, counter, set, map) is the order a map uses to pick which
/// of a key's values it shows when concurrent updates gave the key more than one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Last-writer-wins register ([`crate::Register`]).
    Register,
    /// Positive-negative counter ([`crate::Counter`]).
    Counter,
    /// Observed-remove, add-wins set ([`crate::Set`]).
    Set,
    /// Map from byte-string keys to registers, counters and sets ([`crate::Map`]).
    Map,
}

impl Kind {
    /// Every kind, in order.
    pub const ALL: [Kind; 4] = [Kind::Register, Kind::Counter, Kind::Set, Kind::Map];

    /// The kind's name in lower case.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Register => "register",
            Kind::Counter => "counter",
            Kind::Set => "set",
            Kind::Map => "map",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
