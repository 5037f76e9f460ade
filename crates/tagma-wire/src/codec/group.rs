//! The group envelope: an ordered request's payload that names its conflict group, for a
//! replica that executes requests in parallel by groups.
//!
//! | type | encoding |
//! |------|----------|
//! | `GroupEnvelope` | group tag `u8` (0 = None, 1 = All, 2 = Worker, 3 = Custom), for tags 2 and 3 the id `u32`, then the operation: the rest of the payload, no length |
//!
//! The envelope is the whole payload, so the operation needs no length; it decodes as a
//! zero-copy slice of the payload. There is no version byte: the request that carries the
//! payload belongs to a versioned message.

use bytes::{BufMut, Bytes, BytesMut};

use super::primitives::{Decode, Encode, Reader, WireError, decode_all};
use crate::message::{Group, GroupEnvelope};

const GROUP_NONE: u8 = 0;
const GROUP_ALL: u8 = 1;
const GROUP_WORKER: u8 = 2;
const GROUP_CUSTOM: u8 = 3;

impl Encode for GroupEnvelope {
    fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        match self.group {
            Group::None => out.put_u8(GROUP_NONE),
            Group::All => out.put_u8(GROUP_ALL),
            Group::Worker(t) => {
                out.put_u8(GROUP_WORKER);
                out.put_u32_le(t);
            }
            Group::Custom(id) => {
                out.put_u8(GROUP_CUSTOM);
                out.put_u32_le(id);
            }
        }
        out.put_slice(&self.op);
    }
    fn encoded_len(&self) -> usize {
        let id = match self.group {
            Group::None | Group::All => 0,
            Group::Worker(_) | Group::Custom(_) => 4,
        };
        1 + id + self.op.len()
    }
}

fn read_group_envelope(r: &mut Reader<'_>) -> Result<GroupEnvelope, WireError> {
    let group = match r.u8()? {
        GROUP_NONE => Group::None,
        GROUP_ALL => Group::All,
        GROUP_WORKER => Group::Worker(r.u32()?),
        GROUP_CUSTOM => Group::Custom(r.u32()?),
        tag => return Err(WireError::UnknownTag { what: "group", tag }),
    };
    Ok(GroupEnvelope {
        group,
        op: r.rest(),
    })
}

impl Decode for GroupEnvelope {
    fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        decode_all(bytes, read_group_envelope)
    }
}
