//! One key of the key-value store as the exported histories see it: a string or nothing.
//! `put` sets it, `append` appends to it (an absent key counts as empty), `delete` removes
//! it, `cas` sets it only if it holds the expected value (or is absent, when "absent" is
//! expected), `get` reads it. A history is checked key by key.

use std::collections::BTreeMap;

use crate::format::{OpKind, Record};
use crate::search::{Entry, LinError, Model, check};

/// An operation on the register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Get,
    Put(String),
    Append(String),
    Delete,
    Cas { from: Option<String>, to: String },
}

/// What the client saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ret {
    /// The value read.
    Get(Option<String>),
    /// Whether a `cas` swapped.
    Cas(bool),
    /// Any other operation's acknowledgement.
    Done,
}

/// The register.
#[derive(Clone, Copy, Debug, Default)]
pub struct Register;

impl Model for Register {
    type State = Option<String>;
    type Op = Op;
    type Ret = Ret;

    fn step(&self, state: &Option<String>, op: &Op, ret: Option<&Ret>) -> Option<Option<String>> {
        let (next, seen) = match op {
            Op::Get => (state.clone(), Ret::Get(state.clone())),
            Op::Put(v) => (Some(v.clone()), Ret::Done),
            Op::Append(v) => {
                let mut s = state.clone().unwrap_or_default();
                s.push_str(v);
                (Some(s), Ret::Done)
            }
            Op::Delete => (None, Ret::Done),
            Op::Cas { from, to } => {
                if state == from {
                    (Some(to.clone()), Ret::Cas(true))
                } else {
                    (state.clone(), Ret::Cas(false))
                }
            }
        };
        match ret {
            Some(r) if *r != seen => None,
            _ => Some(next),
        }
    }
}

/// What checking a history found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryVerdict {
    pub operations: usize,
    pub keys: usize,
    /// Keys no linearization explains.
    pub not_linearizable: Vec<String>,
    /// Keys whose search gave up.
    pub inconclusive: Vec<String>,
}

impl HistoryVerdict {
    pub fn linearizable(&self) -> bool {
        self.not_linearizable.is_empty() && self.inconclusive.is_empty()
    }
}

/// The entry a record becomes, if it can have taken effect.
fn entry(r: &Record) -> Option<Entry<Op, Ret>> {
    if r.fail {
        return None;
    }
    let value = || r.value.clone().unwrap_or_default();
    let (op, ret) = match r.op {
        // A read whose outcome is unknown says nothing.
        OpKind::Get => (Op::Get, Ret::Get(r.value.clone())),
        OpKind::Put => (Op::Put(value()), Ret::Done),
        OpKind::Append => (Op::Append(value()), Ret::Done),
        OpKind::Delete => (Op::Delete, Ret::Done),
        OpKind::Cas => (
            Op::Cas {
                from: r.from.clone(),
                to: value(),
            },
            Ret::Cas(r.ok.unwrap_or(false)),
        ),
    };
    if r.ret.is_none() && r.op == OpKind::Get {
        return None;
    }
    Some(Entry {
        op,
        invoke: r.call,
        response: r.ret.map(|t| (t, ret)),
    })
}

/// Checks `records`, key by key, each key starting absent.
pub fn check_history(records: &[Record]) -> HistoryVerdict {
    let mut by_key: BTreeMap<&str, Vec<Entry<Op, Ret>>> = BTreeMap::new();
    for r in records {
        by_key.entry(&r.key).or_default().extend(entry(r));
    }
    let mut verdict = HistoryVerdict {
        operations: records.len(),
        keys: by_key.len(),
        not_linearizable: Vec::new(),
        inconclusive: Vec::new(),
    };
    for (key, history) in by_key {
        match check(&Register, &history, None) {
            Ok(()) => {}
            Err(LinError::NotLinearizable) => verdict.not_linearizable.push(key.to_owned()),
            Err(LinError::Inconclusive) => verdict.inconclusive.push(key.to_owned()),
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(client: u64, op: OpKind, value: Option<&str>, call: u64, ret: Option<u64>) -> Record {
        Record {
            client,
            op,
            key: "k".into(),
            value: value.map(str::to_owned),
            from: None,
            ok: None,
            call,
            ret,
            fail: false,
        }
    }

    #[test]
    fn sequential_and_overlapping_histories_are_accepted() {
        let h = vec![
            rec(1, OpKind::Put, Some("a"), 0, Some(10)),
            rec(1, OpKind::Append, Some("b"), 11, Some(20)),
            rec(2, OpKind::Get, Some("ab"), 21, Some(30)),
            // Overlapping: the read may see the value before or after the delete.
            rec(1, OpKind::Delete, None, 31, Some(50)),
            rec(2, OpKind::Get, Some("ab"), 32, Some(40)),
        ];
        assert!(check_history(&h).linearizable());
    }

    #[test]
    fn a_stale_read_and_a_wrong_cas_are_refused() {
        let stale = vec![
            rec(1, OpKind::Put, Some("a"), 0, Some(10)),
            rec(1, OpKind::Put, Some("b"), 11, Some(20)),
            rec(2, OpKind::Get, Some("a"), 21, Some(30)),
        ];
        assert_eq!(check_history(&stale).not_linearizable, vec!["k".to_owned()]);
        let mut cas = rec(2, OpKind::Cas, Some("c"), 21, Some(30));
        cas.from = Some("a".into());
        cas.ok = Some(true);
        let wrong = vec![rec(1, OpKind::Put, Some("b"), 0, Some(10)), cas.clone()];
        assert!(!check_history(&wrong).linearizable());
        // The same cas is fine while a put of "a" may still take effect first.
        let pending = vec![rec(1, OpKind::Put, Some("a"), 0, None), cas];
        assert!(check_history(&pending).linearizable());
    }

    #[test]
    fn failed_operations_never_take_effect() {
        let mut failed = rec(1, OpKind::Put, Some("x"), 0, Some(5));
        failed.fail = true;
        let h = vec![failed, rec(2, OpKind::Get, Some("x"), 10, Some(20))];
        assert!(!check_history(&h).linearizable());
    }
}
