//! A message's causal barrier as the message keeps it. Every receiver walks the barrier of
//! every message it receives, so its size is memory each delivery reads: while every
//! counter in it fits 32 bits (all but the longest-lived, busiest topics), an id takes 8
//! bytes instead of 16.

use crate::causal::MsgId;
use crate::cube::NodeId;

/// An id whose counter fits 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NarrowId {
    source: u32,
    counter: u32,
}

/// An id as a barrier keeps it.
pub(super) trait Entry: Copy {
    fn id(self) -> MsgId;
}

impl Entry for NarrowId {
    #[inline(always)]
    fn id(self) -> MsgId {
        MsgId {
            source: NodeId(self.source),
            counter: u64::from(self.counter),
        }
    }
}

impl Entry for MsgId {
    #[inline(always)]
    fn id(self) -> MsgId {
        self
    }
}

/// A barrier: its ids, in 8 bytes each where every counter fits 32 bits. Made only from
/// a list of ids ([`Barrier::from`]), which picks the form, so equal barriers compare equal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Barrier {
    Narrow(Box<[NarrowId]>),
    Wide(Box<[MsgId]>),
}

impl From<Vec<MsgId>> for Barrier {
    fn from(ids: Vec<MsgId>) -> Barrier {
        if ids.iter().all(|id| u32::try_from(id.counter).is_ok()) {
            Barrier::Narrow(
                (ids.iter())
                    .map(|id| NarrowId {
                        source: id.source.0,
                        counter: id.counter as u32,
                    })
                    .collect(),
            )
        } else {
            Barrier::Wide(ids.into_boxed_slice())
        }
    }
}

impl Barrier {
    pub fn ids(&self) -> Ids<'_> {
        match self {
            Barrier::Narrow(ids) => Ids::Narrow(ids),
            Barrier::Wide(ids) => Ids::Wide(ids),
        }
    }
}

/// A barrier's ids, borrowed.
#[derive(Clone, Copy, Debug)]
pub enum Ids<'a> {
    Narrow(&'a [NarrowId]),
    Wide(&'a [MsgId]),
}

impl<'a> Ids<'a> {
    pub fn len(&self) -> usize {
        match self {
            Ids::Narrow(ids) => ids.len(),
            Ids::Wide(ids) => ids.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = MsgId> + 'a {
        let (narrow, wide) = match *self {
            Ids::Narrow(ids) => (ids, &[][..]),
            Ids::Wide(ids) => (&[][..], ids),
        };
        narrow.iter().map(|e| e.id()).chain(wide.iter().copied())
    }

    pub fn to_vec(&self) -> Vec<MsgId> {
        self.iter().collect()
    }
}

impl<'a> From<&'a [MsgId]> for Ids<'a> {
    fn from(ids: &'a [MsgId]) -> Ids<'a> {
        Ids::Wide(ids)
    }
}

/// Runs `$body` with `$ids` bound to the barrier's slice, whatever its width.
macro_rules! with_ids {
    ($barrier:expr, $ids:ident => $body:expr) => {
        match $barrier {
            $crate::causal::barrier::Ids::Narrow($ids) => $body,
            $crate::causal::barrier::Ids::Wide($ids) => $body,
        }
    };
}
pub(super) use with_ids;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_barrier_is_narrow_while_its_counters_fit_32_bits() {
        let id = |s, c| MsgId::new(NodeId(s), c);
        let narrow = Barrier::from(vec![id(0, 1), id(7, u64::from(u32::MAX))]);
        assert!(matches!(narrow, Barrier::Narrow(_)));
        assert_eq!(
            narrow.ids().to_vec(),
            vec![id(0, 1), id(7, u64::from(u32::MAX))]
        );
        let wide = Barrier::from(vec![id(0, 1), id(7, 1 << 32)]);
        assert!(matches!(wide, Barrier::Wide(_)));
        assert_eq!(wide.ids().to_vec(), vec![id(0, 1), id(7, 1 << 32)]);
        assert_eq!(wide.ids().len(), 2);
        assert!(Barrier::from(vec![]).ids().is_empty());
    }
}
