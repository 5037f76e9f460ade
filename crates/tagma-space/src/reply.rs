//! [`SpaceReply`]: the service's answers, and their encoding (the payload of a reply).
//!
//! Every tuple a reply returns comes as a [`Stored`]: the tuple, its revision and its lease's
//! end. The revision is assigned by the service when the tuple is inserted, from a counter of
//! its space that only grows (a space created again under an old name continues above the
//! old space's revisions), so it serves as a fencing token: a client holding a lock tuple
//! hands its revision to the resource it protects, which refuses any revision lower than the
//! newest it has seen. A lease alone never guarantees exclusion: a paused client can
//! outlive its lease.
//!
//! Encoding: a tag `u8`, then the fields in the layout of [`crate::codec`]:
//!
//! | tag | reply | fields |
//! |---|---|---|
//! | 1 | created | — |
//! | 2 | destroyed | — |
//! | 3 | inserted | receipt |
//! | 4 | tuple | `0`, or `1` and a stored tuple |
//! | 5 | tuples | `count u32` stored tuples |
//! | 6 | cas | `1` receipt (inserted), or `2` stored tuple (exists) |
//! | 7 | replaced | `0`, or `1`, the stored tuple taken and the receipt of the one inserted |
//! | 8 | renewed | `u32` |
//! | 9 | timed out | — |
//! | 10 | spaces | `count u32` × (space name, tuples `u32`, waiting `u32`) |
//! | 11 | denied | reason (`len u16` UTF-8) |
//! | 12 | error | [`SpaceError`] |
//! | 13 | share | `len u16 | bytes`: one replica's share, encrypted to the reader |
//! | 14 | spaces, some protected | `count u32` × (space name, tuples `u32`, waiting `u32`, `0` or `1 | protection`) |
//!
//! A list of spaces none of which is protected is always tag 10 (so tag 14 lists at least
//! one protected space). A stored tuple is `tuple | revision u64 | extras u8 | [lease end
//! u64] | [sealed]`: bit 0 of `extras` says a lease end (agreed time in ms) follows, bit 1 a
//! sealed tuple (`len u32 | bytes`); a tuple without either has the bytes of a tuple with
//! no lease (`extras` 0), one with only a lease those of a leased one (`extras` 1). A
//! receipt is `revision u64 | lease end` (an optional `u64`).

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{DecodeError, Reader, put_opt_u64, put_sealed, put_space_name, put_text};
use crate::error::SpaceError;
use crate::protection::Protections;
use crate::typed::{Limits, TypedTuple};

/// The most bytes of a share reply (one is 73 bytes: a nonce and an encrypted share).
pub const SHARE_REPLY_BYTES_MAX: usize = 1024;

/// A tuple as the space holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub tuple: TypedTuple,
    /// Assigned by the service at insertion; grows with every insertion into the space.
    pub revision: u64,
    /// When the tuple's lease ends (agreed time, ms since the Unix epoch); `None`: it stays
    /// until taken.
    pub lease_expires_ms: Option<u64>,
    /// In a protected space, the original tuple sealed among the replicas
    /// ([`crate::protection`]); `tuple` then holds hashes and placeholders.
    pub sealed: Option<Bytes>,
}

/// What an insertion assigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub revision: u64,
    pub lease_expires_ms: Option<u64>,
}

/// The outcome of a `cas`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CasOutcome {
    /// No tuple matched: the new tuple was inserted (a lock acquired, with its fencing
    /// revision).
    Inserted(Receipt),
    /// The oldest tuple that matched (the lock's holder); nothing was inserted.
    Exists(Stored),
}

/// What a `replace` did when a tuple matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replacement {
    pub taken: Stored,
    pub inserted: Receipt,
}

/// One space, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpaceInfo {
    pub name: String,
    pub tuples: u32,
    /// Operations waiting in the space (blocked `rd` and `in`).
    pub waiting: u32,
    /// The field protection it was created with, if any.
    pub protection: Option<Protections>,
}

/// The service's answer to a [`crate::SpaceRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpaceReply {
    Created,
    Destroyed,
    /// `out`: the tuple's revision and lease end.
    Inserted(Receipt),
    /// `rdp`, `inp`, `rd`, `in`: the tuple (none: no match, for `rdp` and `inp`).
    Tuple(Option<Stored>),
    /// `rdAll`, `inAll`: oldest first.
    Tuples(Vec<Stored>),
    Cas(CasOutcome),
    /// `replace`: none if no tuple matched (and nothing was inserted).
    Replaced(Option<Replacement>),
    /// `renew`: how many leases were renewed.
    Renewed(u32),
    /// A waiting `rd` or `in` reached its deadline with no match.
    TimedOut,
    Spaces(Vec<SpaceInfo>),
    /// The space's policy refused the operation; nothing changed.
    Denied(String),
    /// The operation was refused; nothing changed.
    Error(SpaceError),
    /// `share`: this replica's share of a sealed tuple, encrypted to the reader's one-time
    /// key (different at every replica, so never voted on).
    Share(Bytes),
}

/// The fewest bytes of an encoded stored tuple: a one-field tuple of an empty string (6),
/// the revision (8) and an absent lease (1).
const STORED_BYTES_MIN: usize = 15;
/// The fewest bytes of a listed space: a one-byte name (2) and two counts (8).
const SPACE_INFO_BYTES_MIN: usize = 10;

fn put_receipt(out: &mut BytesMut, receipt: &Receipt) {
    out.put_u64_le(receipt.revision);
    put_opt_u64(out, receipt.lease_expires_ms);
}

fn get_receipt(r: &mut Reader) -> Result<Receipt, DecodeError> {
    Ok(Receipt {
        revision: r.u64("a revision")?,
        lease_expires_ms: r.opt_u64("a lease end")?,
    })
}

/// `extras` bit: a lease end follows.
const EXTRA_LEASE: u8 = 1;
/// `extras` bit: a sealed tuple follows.
const EXTRA_SEALED: u8 = 2;

impl Stored {
    fn encode_into(&self, out: &mut BytesMut) {
        self.tuple.encode_into(out);
        out.put_u64_le(self.revision);
        let mut extras = 0;
        if self.lease_expires_ms.is_some() {
            extras |= EXTRA_LEASE;
        }
        if self.sealed.is_some() {
            extras |= EXTRA_SEALED;
        }
        out.put_u8(extras);
        if let Some(end) = self.lease_expires_ms {
            out.put_u64_le(end);
        }
        if let Some(sealed) = &self.sealed {
            put_sealed(out, sealed);
        }
    }

    fn decode_from(r: &mut Reader, limits: &Limits) -> Result<Self, DecodeError> {
        let tuple = r.tuple(limits)?;
        let revision = r.u64("a revision")?;
        let extras = r.u8("a stored tuple's extras")?;
        if extras > (EXTRA_LEASE | EXTRA_SEALED) {
            return Err(DecodeError::UnknownTag {
                what: "stored tuple's extras",
                tag: extras,
            });
        }
        let lease_expires_ms = match extras & EXTRA_LEASE {
            0 => None,
            _ => Some(r.u64("a lease end")?),
        };
        let sealed = match extras & EXTRA_SEALED {
            0 => None,
            _ => Some(r.sealed(limits.tuple_bytes_max)?),
        };
        Ok(Stored {
            tuple,
            revision,
            lease_expires_ms,
            sealed,
        })
    }

    /// The bytes the tuple takes in a reply.
    pub fn encoded_len(&self) -> usize {
        self.tuple.encoded_len()
            + 8
            + 1
            + if self.lease_expires_ms.is_some() {
                8
            } else {
                0
            }
            + self.sealed.as_ref().map_or(0, |s| 4 + s.len())
    }
}

impl SpaceReply {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        match self {
            SpaceReply::Created => out.put_u8(1),
            SpaceReply::Destroyed => out.put_u8(2),
            SpaceReply::Inserted(receipt) => {
                out.put_u8(3);
                put_receipt(&mut out, receipt);
            }
            SpaceReply::Tuple(stored) => {
                out.put_u8(4);
                match stored {
                    None => out.put_u8(0),
                    Some(stored) => {
                        out.put_u8(1);
                        stored.encode_into(&mut out);
                    }
                }
            }
            SpaceReply::Tuples(tuples) => {
                out.put_u8(5);
                out.put_u32_le(tuples.len() as u32);
                for stored in tuples {
                    stored.encode_into(&mut out);
                }
            }
            SpaceReply::Cas(outcome) => {
                out.put_u8(6);
                match outcome {
                    CasOutcome::Inserted(receipt) => {
                        out.put_u8(1);
                        put_receipt(&mut out, receipt);
                    }
                    CasOutcome::Exists(stored) => {
                        out.put_u8(2);
                        stored.encode_into(&mut out);
                    }
                }
            }
            SpaceReply::Replaced(replacement) => {
                out.put_u8(7);
                match replacement {
                    None => out.put_u8(0),
                    Some(Replacement { taken, inserted }) => {
                        out.put_u8(1);
                        taken.encode_into(&mut out);
                        put_receipt(&mut out, inserted);
                    }
                }
            }
            SpaceReply::Renewed(count) => {
                out.put_u8(8);
                out.put_u32_le(*count);
            }
            SpaceReply::TimedOut => out.put_u8(9),
            SpaceReply::Spaces(spaces) => {
                let protected = spaces.iter().any(|s| s.protection.is_some());
                out.put_u8(if protected { 14 } else { 10 });
                out.put_u32_le(spaces.len() as u32);
                for info in spaces {
                    put_space_name(&mut out, &info.name);
                    out.put_u32_le(info.tuples);
                    out.put_u32_le(info.waiting);
                    if protected {
                        match &info.protection {
                            None => out.put_u8(0),
                            Some(protection) => {
                                out.put_u8(1);
                                protection.encode_into(&mut out);
                            }
                        }
                    }
                }
            }
            SpaceReply::Denied(reason) => {
                out.put_u8(11);
                put_text(&mut out, reason);
            }
            SpaceReply::Error(error) => {
                out.put_u8(12);
                error.encode_into(&mut out);
            }
            SpaceReply::Share(share) => {
                out.put_u8(13);
                let share = &share[..share.len().min(SHARE_REPLY_BYTES_MAX)];
                out.put_u16_le(share.len() as u16);
                out.put_slice(share);
            }
        }
        out.freeze()
    }

    /// Decodes a whole reply; its tuples are checked against `limits` (a client decodes
    /// with limits at least the service's).
    pub fn decode(bytes: &Bytes, limits: &Limits) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let reply = match r.u8("a reply")? {
            1 => SpaceReply::Created,
            2 => SpaceReply::Destroyed,
            3 => SpaceReply::Inserted(get_receipt(&mut r)?),
            4 => SpaceReply::Tuple(match r.flag("a tuple reply")? {
                false => None,
                true => Some(Stored::decode_from(&mut r, limits)?),
            }),
            5 => {
                let count = r.count("a list of tuples", STORED_BYTES_MIN)?;
                let mut tuples = Vec::with_capacity(count);
                for _ in 0..count {
                    tuples.push(Stored::decode_from(&mut r, limits)?);
                }
                SpaceReply::Tuples(tuples)
            }
            6 => SpaceReply::Cas(match r.u8("a cas outcome")? {
                1 => CasOutcome::Inserted(get_receipt(&mut r)?),
                2 => CasOutcome::Exists(Stored::decode_from(&mut r, limits)?),
                tag => {
                    return Err(DecodeError::UnknownTag {
                        what: "cas outcome",
                        tag,
                    });
                }
            }),
            7 => SpaceReply::Replaced(match r.flag("a replace reply")? {
                false => None,
                true => Some(Replacement {
                    taken: Stored::decode_from(&mut r, limits)?,
                    inserted: get_receipt(&mut r)?,
                }),
            }),
            8 => SpaceReply::Renewed(r.u32("a count")?),
            9 => SpaceReply::TimedOut,
            tag @ (10 | 14) => {
                let protected = tag == 14;
                let item_bytes_min = SPACE_INFO_BYTES_MIN + usize::from(protected);
                let count = r.count("a list of spaces", item_bytes_min)?;
                let mut spaces = Vec::with_capacity(count);
                for _ in 0..count {
                    spaces.push(SpaceInfo {
                        name: r.space_name()?,
                        tuples: r.u32("a count")?,
                        waiting: r.u32("a count")?,
                        protection: match protected && r.flag("a space's protection")? {
                            false => None,
                            true => Some(Protections::decode_from(&mut r, limits)?),
                        },
                    });
                }
                if protected && spaces.iter().all(|s| s.protection.is_none()) {
                    return Err(DecodeError::NotCanonical(
                        "a list without protected spaces is tag 10",
                    ));
                }
                SpaceReply::Spaces(spaces)
            }
            11 => SpaceReply::Denied(r.text("a reason")?),
            12 => SpaceReply::Error(SpaceError::decode_from(&mut r)?),
            13 => {
                let len = r.u16("a share")? as usize;
                if len > SHARE_REPLY_BYTES_MAX {
                    return Err(DecodeError::TooLong {
                        what: "a share",
                        len,
                        max: SHARE_REPLY_BYTES_MAX,
                    });
                }
                SpaceReply::Share(r.bytes(len, "a share")?)
            }
            tag => return Err(DecodeError::UnknownTag { what: "reply", tag }),
        };
        r.finish()?;
        Ok(reply)
    }
}
