//! The parallel-execution benchmark service: a linked list of integers with `add`, `remove`,
//! `get` and `contains`. Every operation walks the list (as a Java `LinkedList` does), so a
//! request costs time in proportion to the list's length. `add` and `remove` conflict with
//! everything; `get` and `contains` with nothing (they only read).
//!
//! Operations: tag `u8` (1 add, 2 remove, 3 get, 4 contains) | value or index `i64` LE.
//! Replies: `add`/`remove`/`contains`: one byte, 1 if it added/removed/found; `get`: one byte
//! (1 if the index exists) and the value `i64` LE.

use std::collections::LinkedList;
use std::sync::{PoisonError, RwLock};

use bytes::{BufMut, Bytes, BytesMut};

use crate::access::Access;
use crate::sched::ParallelService;

/// A list operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListOp {
    /// Appends the value if absent.
    Add(i64),
    /// Removes the value if present.
    Remove(i64),
    /// The value at an index.
    Get(i64),
    /// Whether the value is present.
    Contains(i64),
}

impl ListOp {
    pub fn encode(self) -> Bytes {
        let (tag, v) = match self {
            ListOp::Add(v) => (1, v),
            ListOp::Remove(v) => (2, v),
            ListOp::Get(i) => (3, i),
            ListOp::Contains(v) => (4, v),
        };
        let mut out = BytesMut::with_capacity(9);
        out.put_u8(tag);
        out.put_i64_le(v);
        out.freeze()
    }

    /// `None` for bytes that are not a list operation.
    pub fn decode(bytes: &[u8]) -> Option<ListOp> {
        let (&tag, rest) = bytes.split_first()?;
        let v = i64::from_le_bytes(rest.try_into().ok()?);
        Some(match tag {
            1 => ListOp::Add(v),
            2 => ListOp::Remove(v),
            3 => ListOp::Get(v),
            4 => ListOp::Contains(v),
            _ => return None,
        })
    }

    /// Whether it changes the list (and so conflicts with every other operation).
    pub fn writes(self) -> bool {
        matches!(self, ListOp::Add(_) | ListOp::Remove(_))
    }
}

/// The replicated list.
#[derive(Debug, Default)]
pub struct ListService {
    list: RwLock<LinkedList<i64>>,
}

impl ListService {
    /// A list holding `0..entries` (the benchmark's set-up: 100k entries).
    pub fn with_entries(entries: i64) -> Self {
        ListService {
            list: RwLock::new((0..entries).collect()),
        }
    }

    pub fn len(&self) -> usize {
        self.list
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const REFUSED: &[u8] = b"\xffnot a list operation";

impl ParallelService for ListService {
    fn execute(&self, op: &Bytes) -> Bytes {
        let Some(op) = ListOp::decode(op) else {
            return Bytes::from_static(REFUSED);
        };
        let flag = |b: bool| Bytes::from_static(if b { &[1] } else { &[0] });
        match op {
            ListOp::Add(v) => {
                let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
                let absent = !list.contains(&v);
                if absent {
                    list.push_back(v);
                }
                flag(absent)
            }
            ListOp::Remove(v) => {
                let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
                match list.iter().position(|x| *x == v) {
                    Some(at) => {
                        let mut tail = list.split_off(at);
                        tail.pop_front();
                        list.append(&mut tail);
                        flag(true)
                    }
                    None => flag(false),
                }
            }
            ListOp::Get(i) => {
                let list = self.list.read().unwrap_or_else(PoisonError::into_inner);
                let found = usize::try_from(i).ok().and_then(|i| list.iter().nth(i));
                let mut out = BytesMut::with_capacity(9);
                out.put_u8(u8::from(found.is_some()));
                out.put_i64_le(found.copied().unwrap_or(0));
                out.freeze()
            }
            ListOp::Contains(v) => {
                let list = self.list.read().unwrap_or_else(PoisonError::into_inner);
                flag(list.contains(&v))
            }
        }
    }

    fn classify(&self, op: &Bytes) -> Access {
        match ListOp::decode(op) {
            Some(op) if !op.writes() => Access::none(),
            // Writes, and bytes that are no operation (refused alike everywhere), conflict
            // with everything.
            _ => Access::all(),
        }
    }

    fn digest(&self) -> [u8; 32] {
        let list = self.list.read().unwrap_or_else(PoisonError::into_inner);
        let mut h = blake3::Hasher::new();
        for v in list.iter() {
            h.update(&v.to_le_bytes());
        }
        *h.finalize().as_bytes()
    }
}

impl crate::replica::ParallelState for ListService {
    fn execute_unordered(&self, op: &Bytes) -> Bytes {
        match ListOp::decode(op) {
            Some(read) if !read.writes() => self.execute(op),
            _ => Bytes::from_static(b"\xffonly get and contains run unordered"),
        }
    }

    /// Count `u64` LE, then every value `i64` LE, in list order.
    fn snapshot(&self) -> Bytes {
        let list = self.list.read().unwrap_or_else(PoisonError::into_inner);
        let mut out = BytesMut::with_capacity(8 + 8 * list.len());
        out.put_u64_le(list.len() as u64);
        for v in list.iter() {
            out.put_i64_le(*v);
        }
        out.freeze()
    }

    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), String> {
        let (count, rest) = snapshot
            .split_first_chunk::<8>()
            .ok_or("list snapshot: truncated count")?;
        let count = u64::from_le_bytes(*count) as usize;
        if rest.len() != count.saturating_mul(8) {
            return Err(format!(
                "list snapshot: {count} values announced, {} bytes follow",
                rest.len()
            ));
        }
        let list = rest
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        *self.list.get_mut().unwrap_or_else(PoisonError::into_inner) = list;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_behave_like_a_list() {
        let l = ListService::with_entries(5);
        let run = |op: ListOp| l.execute(&op.encode());
        assert_eq!(&run(ListOp::Add(3))[..], [0]);
        assert_eq!(&run(ListOp::Add(9))[..], [1]);
        assert_eq!(&run(ListOp::Remove(0))[..], [1]);
        assert_eq!(&run(ListOp::Remove(0))[..], [0]);
        assert_eq!(&run(ListOp::Contains(9))[..], [1]);
        let got = run(ListOp::Get(4));
        assert_eq!(
            (got[0], i64::from_le_bytes(got[1..].try_into().unwrap())),
            (1, 9)
        );
        assert_eq!(run(ListOp::Get(99))[0], 0);
        assert_eq!(l.len(), 5);
        assert_eq!(&l.execute(&Bytes::from_static(b"zz"))[..], REFUSED);
        for op in [
            ListOp::Add(-1),
            ListOp::Remove(7),
            ListOp::Get(2),
            ListOp::Contains(0),
        ] {
            assert_eq!(ListOp::decode(&op.encode()), Some(op));
        }
        assert!(l.classify(&ListOp::Add(1).encode()).all);
        assert_eq!(l.classify(&ListOp::Get(1).encode()), Access::none());
    }
}
