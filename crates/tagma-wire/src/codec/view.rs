//! Views, the administrator's view changes (and the bytes it signs) and the outcome of a
//! reconfiguration.
//!
//! | type | encoding |
//! |------|----------|
//! | `ViewMember` | id `u32`, address (`u32` len + UTF-8), key 32 bytes |
//! | `View` | id `u32`, f `u32`, count `u32`, members (ids strictly ascending) |
//! | `ViewOp` | tag `u8`: 0 = Add (`ViewMember`); 1 = Remove (id `u32`); 2 = SetF (f `u32`) |
//! | `ReconfigureOutcome` | tag `u8`: 0 = Installed (`View`); 1 = Refused (reason: `u32` len + UTF-8) |
//! | `ViewChange` | view `u32`, count `u32`, ops, signature 64 bytes; signed bytes: `"tagma/view-change/v1"`, view `u32`, count `u32`, ops |

use bytes::{BufMut, Bytes, BytesMut};

use super::primitives::{
    Decode, Encode, Reader, WireError, decode_all, put_bytes, put_len, standalone,
};
use crate::ids::*;
use crate::message::*;

/// The longest member address accepted (a host name and port).
pub const ADDR_BYTES_MAX: usize = 255;
const MEMBER_MIN_LEN: usize = 4 + 4 + 32;
const VIEW_OP_MIN_LEN: usize = 1 + 4;
const OP_ADD: u8 = 0;
const OP_REMOVE: u8 = 1;
const OP_SET_F: u8 = 2;
const VIEW_CHANGE_DOMAIN: &[u8] = b"tagma/view-change/v1";

fn put_member(out: &mut BytesMut, m: &ViewMember) {
    out.put_u32_le(m.id.0);
    put_bytes(out, m.addr.as_bytes());
    out.put_slice(&m.key.0);
}

fn member_len(m: &ViewMember) -> usize {
    MEMBER_MIN_LEN + m.addr.len()
}

fn read_member(r: &mut Reader<'_>) -> Result<ViewMember, WireError> {
    let id = ReplicaId(r.u32()?);
    let addr = r.bytes()?;
    if addr.len() > ADDR_BYTES_MAX {
        return Err(WireError::TooLong {
            what: "member address",
            len: addr.len(),
            max: ADDR_BYTES_MAX,
        });
    }
    let addr = String::from_utf8(addr.to_vec()).map_err(|_| WireError::Invalid {
        what: "member address (not UTF-8)",
    })?;
    Ok(ViewMember {
        id,
        addr,
        key: PublicKey(r.array()?),
    })
}

pub(super) fn put_view(out: &mut BytesMut, v: &View) {
    out.put_u32_le(v.id.0);
    out.put_u32_le(v.f);
    put_len(out, v.members.len(), "view members");
    for m in &v.members {
        put_member(out, m);
    }
}

pub(super) fn view_len(v: &View) -> usize {
    12 + v.members.iter().map(member_len).sum::<usize>()
}

pub(super) fn read_view(r: &mut Reader<'_>) -> Result<View, WireError> {
    let id = ViewId(r.u32()?);
    let f = r.u32()?;
    let count = r.u32()? as usize;
    let count = r.check_count(count, MEMBER_MIN_LEN, "view members")?;
    let mut members: Vec<ViewMember> = Vec::with_capacity(count);
    for _ in 0..count {
        let m = read_member(r)?;
        if members.last().is_some_and(|last| last.id >= m.id) {
            return Err(WireError::Invalid {
                what: "view members (ids not strictly ascending)",
            });
        }
        members.push(m);
    }
    Ok(View { id, f, members })
}

fn put_ops(out: &mut BytesMut, ops: &[ViewOp]) {
    put_len(out, ops.len(), "view operations");
    for op in ops {
        match op {
            ViewOp::Add(m) => {
                out.put_u8(OP_ADD);
                put_member(out, m);
            }
            ViewOp::Remove(id) => {
                out.put_u8(OP_REMOVE);
                out.put_u32_le(id.0);
            }
            ViewOp::SetF(f) => {
                out.put_u8(OP_SET_F);
                out.put_u32_le(*f);
            }
        }
    }
}

fn ops_len(ops: &[ViewOp]) -> usize {
    4 + ops
        .iter()
        .map(|op| match op {
            ViewOp::Add(m) => 1 + member_len(m),
            ViewOp::Remove(_) | ViewOp::SetF(_) => VIEW_OP_MIN_LEN,
        })
        .sum::<usize>()
}

fn read_ops(r: &mut Reader<'_>) -> Result<Vec<ViewOp>, WireError> {
    let count = r.u32()? as usize;
    let count = r.check_count(count, VIEW_OP_MIN_LEN, "view operations")?;
    let mut ops = Vec::with_capacity(count);
    for _ in 0..count {
        ops.push(match r.u8()? {
            OP_ADD => ViewOp::Add(read_member(r)?),
            OP_REMOVE => ViewOp::Remove(ReplicaId(r.u32()?)),
            OP_SET_F => ViewOp::SetF(r.u32()?),
            tag => {
                return Err(WireError::UnknownTag {
                    what: "view operation",
                    tag,
                });
            }
        });
    }
    Ok(ops)
}

pub(super) fn put_view_history(out: &mut BytesMut, changes: &[ViewChange]) {
    put_len(out, changes.len(), "view history");
    for c in changes {
        put_view_change(out, c);
    }
}

pub(super) fn view_history_len(changes: &[ViewChange]) -> usize {
    4 + changes.iter().map(view_change_len).sum::<usize>()
}

pub(super) fn read_view_history(r: &mut Reader<'_>) -> Result<Vec<ViewChange>, WireError> {
    let count = r.u32()? as usize;
    // A change is at least its view, an operation count and a signature.
    let count = r.check_count(count, 4 + 4 + Signature::LEN, "view history")?;
    let mut changes = Vec::with_capacity(count);
    for _ in 0..count {
        changes.push(read_view_change(r)?);
    }
    Ok(changes)
}

fn put_view_change(out: &mut BytesMut, c: &ViewChange) {
    out.put_u32_le(c.view.0);
    put_ops(out, &c.ops);
    out.put_slice(&c.signature.0);
}

fn view_change_len(c: &ViewChange) -> usize {
    4 + ops_len(&c.ops) + Signature::LEN
}

fn read_view_change(r: &mut Reader<'_>) -> Result<ViewChange, WireError> {
    Ok(ViewChange {
        view: ViewId(r.u32()?),
        ops: read_ops(r)?,
        signature: Signature(r.array()?),
    })
}

/// The bytes the administrator signs for a view change: a domain tag, then the view and the
/// operations as encoded in [`ViewChange`] (one encoding per value, so one signed form).
pub fn view_change_signing_bytes(view: ViewId, ops: &[ViewOp]) -> Bytes {
    let mut out = BytesMut::with_capacity(VIEW_CHANGE_DOMAIN.len() + 4 + ops_len(ops));
    out.put_slice(VIEW_CHANGE_DOMAIN);
    out.put_u32_le(view.0);
    put_ops(&mut out, ops);
    out.freeze()
}

const OUTCOME_INSTALLED: u8 = 0;
const OUTCOME_REFUSED: u8 = 1;

fn put_outcome(out: &mut BytesMut, o: &ReconfigureOutcome) {
    match o {
        ReconfigureOutcome::Installed(v) => {
            out.put_u8(OUTCOME_INSTALLED);
            put_view(out, v);
        }
        ReconfigureOutcome::Refused(reason) => {
            out.put_u8(OUTCOME_REFUSED);
            put_bytes(out, reason.as_bytes());
        }
    }
}

fn outcome_len(o: &ReconfigureOutcome) -> usize {
    1 + match o {
        ReconfigureOutcome::Installed(v) => view_len(v),
        ReconfigureOutcome::Refused(reason) => 4 + reason.len(),
    }
}

fn read_outcome(r: &mut Reader<'_>) -> Result<ReconfigureOutcome, WireError> {
    match r.u8()? {
        OUTCOME_INSTALLED => Ok(ReconfigureOutcome::Installed(read_view(r)?)),
        OUTCOME_REFUSED => String::from_utf8(r.bytes()?.to_vec())
            .map(ReconfigureOutcome::Refused)
            .map_err(|_| WireError::Invalid {
                what: "refusal reason (not UTF-8)",
            }),
        tag => Err(WireError::UnknownTag {
            what: "reconfigure outcome",
            tag,
        }),
    }
}

standalone!(View, put_view, read_view, view_len);
standalone!(ReconfigureOutcome, put_outcome, read_outcome, outcome_len);
standalone!(
    ViewChange,
    put_view_change,
    read_view_change,
    view_change_len
);
