//! [`SpaceError`]: why the service refused an operation, as a reply carries it, with a
//! message that names the fix; and its encoding.
//!
//! Encoding: a tag `u8` and the variant's fields in order: a space name as in
//! [`crate::codec`], a text as `len u16 | UTF-8`, numbers as `u64` (sizes, times) or `u32`
//! (counts). A [`ShapeError`] is a sub-tag (1 empty, 2 too many fields, 3 field too large,
//! 4 tuple too large) and its numbers as `u64`; a [`ProtectionError`] is a sub-tag and its
//! fields (see [`crate::protection`]).

use bytes::{BufMut, BytesMut};

use crate::codec::{DecodeError, Reader, put_space_name, put_text};
use crate::protection::ProtectionError;
use crate::typed::ShapeError;

/// Which cap on waiting operations a refused `rd` or `in` met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitScope {
    /// The invoker's principal waits in as many operations as `waits_per_client_max`.
    Client,
    /// The space holds as many waiting operations as `waits_per_space_max`.
    Space,
}

/// Why the service refused an operation. Every message says what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpaceError {
    #[error("no space named `{0}`: create it first (list the spaces to see which exist)")]
    UnknownSpace(String),
    #[error("a space named `{0}` exists already: pick another name, or use the one there")]
    SpaceExists(String),
    #[error("{0}")]
    Shape(ShapeError),
    #[error("a wait of {timeout_ms} ms: give 1 to {max_ms} ms (the service's wait_ms_max)")]
    BadTimeout { timeout_ms: u64, max_ms: u64 },
    #[error(
        "a lease of {lease_ms} ms: give 1 to {max_ms} ms (the service's lease_ms_max), or no \
         lease for a tuple that stays until taken"
    )]
    BadLease { lease_ms: u64, max_ms: u64 },
    #[error("the service holds {max} spaces, its most (spaces_max): destroy one first")]
    TooManySpaces { max: u32 },
    #[error(
        "space `{space}` holds {max} tuples, its most (tuples_per_space_max): take some out first"
    )]
    SpaceFull { space: String, max: u32 },
    #[error(
        "space `{space}` would hold more than {bytes_max} bytes of tuples and waiting templates \
         (space_bytes_max): take some out first"
    )]
    SpaceTooLarge { space: String, bytes_max: u64 },
    #[error("{}", too_many_waits(*scope, *max))]
    TooManyWaits { scope: WaitScope, max: u32 },
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error(
        "`{0}` changes the state or waits: send it ordered (only rdp, rdAll and share run \
         unordered)"
    )]
    NotOrdered(String),
    #[error(
        "the template has {template} fields and the tuple {tuple}: cas and replace need \
         both of the same arity"
    )]
    ArityMismatch { template: u32, tuple: u32 },
    #[error("a count of {max}: ask for 1 to {limit} tuples (the service's all_max)")]
    BadCount { max: u32, limit: u32 },
    #[error("the policy does not fit this service: {0}")]
    BadPolicy(String),
    #[error("{0}")]
    Protection(ProtectionError),
}

fn too_many_waits(scope: WaitScope, max: u32) -> String {
    match scope {
        WaitScope::Client => format!(
            "this client already waits in {max} rd/in operations (waits_per_client_max): \
             let one finish or time out first"
        ),
        WaitScope::Space => format!(
            "{max} rd/in operations already wait in this space (waits_per_space_max): \
             retry later or use another space"
        ),
    }
}

fn put_usize(out: &mut BytesMut, v: usize) {
    out.put_u64_le(v as u64);
}

fn get_usize(r: &mut Reader, what: &'static str) -> Result<usize, DecodeError> {
    let v = r.u64(what)?;
    usize::try_from(v).map_err(|_| DecodeError::TooLong {
        what,
        len: usize::MAX,
        max: usize::MAX,
    })
}

impl SpaceError {
    pub(crate) fn encode_into(&self, out: &mut BytesMut) {
        match self {
            SpaceError::UnknownSpace(space) => {
                out.put_u8(1);
                put_space_name(out, space);
            }
            SpaceError::SpaceExists(space) => {
                out.put_u8(2);
                put_space_name(out, space);
            }
            SpaceError::Shape(shape) => {
                out.put_u8(3);
                match shape {
                    ShapeError::Empty => out.put_u8(1),
                    ShapeError::TooManyFields { arity, max } => {
                        out.put_u8(2);
                        put_usize(out, *arity);
                        put_usize(out, *max);
                    }
                    ShapeError::FieldTooLarge { index, len, max } => {
                        out.put_u8(3);
                        put_usize(out, *index);
                        put_usize(out, *len);
                        put_usize(out, *max);
                    }
                    ShapeError::TupleTooLarge { len, max } => {
                        out.put_u8(4);
                        put_usize(out, *len);
                        put_usize(out, *max);
                    }
                }
            }
            SpaceError::BadTimeout { timeout_ms, max_ms } => {
                out.put_u8(4);
                out.put_u64_le(*timeout_ms);
                out.put_u64_le(*max_ms);
            }
            SpaceError::BadLease { lease_ms, max_ms } => {
                out.put_u8(5);
                out.put_u64_le(*lease_ms);
                out.put_u64_le(*max_ms);
            }
            SpaceError::TooManySpaces { max } => {
                out.put_u8(6);
                out.put_u32_le(*max);
            }
            SpaceError::SpaceFull { space, max } => {
                out.put_u8(7);
                put_space_name(out, space);
                out.put_u32_le(*max);
            }
            SpaceError::SpaceTooLarge { space, bytes_max } => {
                out.put_u8(8);
                put_space_name(out, space);
                out.put_u64_le(*bytes_max);
            }
            SpaceError::TooManyWaits { scope, max } => {
                out.put_u8(9);
                out.put_u8(match scope {
                    WaitScope::Client => 0,
                    WaitScope::Space => 1,
                });
                out.put_u32_le(*max);
            }
            SpaceError::Malformed(text) => {
                out.put_u8(10);
                put_text(out, text);
            }
            SpaceError::NotOrdered(op) => {
                out.put_u8(11);
                put_text(out, op);
            }
            SpaceError::ArityMismatch { template, tuple } => {
                out.put_u8(12);
                out.put_u32_le(*template);
                out.put_u32_le(*tuple);
            }
            SpaceError::BadCount { max, limit } => {
                out.put_u8(13);
                out.put_u32_le(*max);
                out.put_u32_le(*limit);
            }
            SpaceError::BadPolicy(text) => {
                out.put_u8(14);
                put_text(out, text);
            }
            SpaceError::Protection(e) => {
                out.put_u8(15);
                e.encode_into(out);
            }
        }
    }

    pub(crate) fn decode_from(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8("an error")? {
            1 => SpaceError::UnknownSpace(r.space_name()?),
            2 => SpaceError::SpaceExists(r.space_name()?),
            3 => SpaceError::Shape(match r.u8("a shape error")? {
                1 => ShapeError::Empty,
                2 => ShapeError::TooManyFields {
                    arity: get_usize(r, "a shape error")?,
                    max: get_usize(r, "a shape error")?,
                },
                3 => ShapeError::FieldTooLarge {
                    index: get_usize(r, "a shape error")?,
                    len: get_usize(r, "a shape error")?,
                    max: get_usize(r, "a shape error")?,
                },
                4 => ShapeError::TupleTooLarge {
                    len: get_usize(r, "a shape error")?,
                    max: get_usize(r, "a shape error")?,
                },
                tag => {
                    return Err(DecodeError::UnknownTag {
                        what: "shape error",
                        tag,
                    });
                }
            }),
            4 => SpaceError::BadTimeout {
                timeout_ms: r.u64("an error")?,
                max_ms: r.u64("an error")?,
            },
            5 => SpaceError::BadLease {
                lease_ms: r.u64("an error")?,
                max_ms: r.u64("an error")?,
            },
            6 => SpaceError::TooManySpaces {
                max: r.u32("an error")?,
            },
            7 => SpaceError::SpaceFull {
                space: r.space_name()?,
                max: r.u32("an error")?,
            },
            8 => SpaceError::SpaceTooLarge {
                space: r.space_name()?,
                bytes_max: r.u64("an error")?,
            },
            9 => SpaceError::TooManyWaits {
                scope: match r.u8("a wait scope")? {
                    0 => WaitScope::Client,
                    1 => WaitScope::Space,
                    tag => {
                        return Err(DecodeError::UnknownTag {
                            what: "wait scope",
                            tag,
                        });
                    }
                },
                max: r.u32("an error")?,
            },
            10 => SpaceError::Malformed(r.text("an error's message")?),
            11 => SpaceError::NotOrdered(r.text("an operation's name")?),
            12 => SpaceError::ArityMismatch {
                template: r.u32("an error")?,
                tuple: r.u32("an error")?,
            },
            13 => SpaceError::BadCount {
                max: r.u32("an error")?,
                limit: r.u32("an error")?,
            },
            14 => SpaceError::BadPolicy(r.text("an error's message")?),
            15 => SpaceError::Protection(ProtectionError::decode_from(r)?),
            tag => return Err(DecodeError::UnknownTag { what: "error", tag }),
        })
    }
}
