//! [`SpaceRequest`]: the operations a client asks of the coordination service, and their
//! encoding (the payload of a replicated request).
//!
//! Encoding: an operation tag `u8`, then the operation's fields in declaration order, in the
//! layout of [`crate::codec`]: a space name, a tuple or template in its own encoding, a
//! policy as in [`crate::policy`], a protection as in [`crate::protection`], a lease as an
//! optional `u64`, a timeout as `u64`, a count as `u32`, a sealed tuple as `len u32 | bytes`.
//! Fields marked *opt* are optional trailing sections: present exactly when given, so a
//! request without them has the bytes it always had.
//!
//! | tag | operation | fields |
//! |---|---|---|
//! | 1 | create | space, policy, protection *opt* |
//! | 2 | destroy | space |
//! | 3 | list spaces | — |
//! | 4 | out | space, tuple, lease, sealed *opt* |
//! | 5 | rdp | space, template |
//! | 6 | inp | space, template |
//! | 7 | rd | space, template, timeout |
//! | 8 | in | space, template, timeout |
//! | 9 | cas | space, template, tuple, lease, sealed *opt* |
//! | 10 | replace | space, template, tuple, lease, sealed *opt* |
//! | 11 | rdAll | space, template, max |
//! | 12 | inAll | space, template, max |
//! | 13 | renew | space, template, lease (`u64`, not optional) |
//! | 14 | rdAfter | space, template, revision `u64`, timeout |
//! | 15 | share | space, revision `u64`, reader's one-time X25519 key `[32]` |
//!
//! [`SpaceRequest::decode`] rejects unknown tags, bad space names, tuples and templates
//! beyond the limits, and trailing bytes; what it accepts encodes back to the same bytes.

use bytes::{BufMut, Bytes, BytesMut};
use tagma_wire::KexPublic;

use crate::codec::{DecodeError, Reader, put_opt_u64, put_sealed, put_space_name};
use crate::error::SpaceError;
use crate::name::check_space_name;
use crate::policy::Policy;
use crate::protection::{Protections, check_sealed};
use crate::typed::{Limits, TypedTemplate, TypedTuple};

/// An operation on the coordination service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpaceRequest {
    /// Creates a space with an access policy and, if given, a field protection (a
    /// confidential space, [`crate::protection`]); the invoker is its creator.
    Create {
        space: String,
        policy: Policy,
        protection: Option<Protections>,
    },
    /// Destroys a space (admin); its waiting operations are answered `UnknownSpace`.
    Destroy { space: String },
    /// Every space, by name, with its tuple and waiter counts.
    ListSpaces,
    /// Inserts a tuple, for `lease_ms` from the agreed time if given; in a protected space
    /// with its sealed original.
    Out {
        space: String,
        tuple: TypedTuple,
        lease_ms: Option<u64>,
        sealed: Option<Bytes>,
    },
    /// The oldest matching tuple, or none.
    Rdp {
        space: String,
        template: TypedTemplate,
    },
    /// The oldest matching tuple, taken, or none.
    Inp {
        space: String,
        template: TypedTemplate,
    },
    /// The oldest matching tuple; waits for one up to `timeout_ms` if none exists.
    Rd {
        space: String,
        template: TypedTemplate,
        timeout_ms: u64,
    },
    /// The oldest matching tuple, taken; waits for one up to `timeout_ms` if none exists.
    In {
        space: String,
        template: TypedTemplate,
        timeout_ms: u64,
    },
    /// Inserts `tuple` if no tuple matches `template`; else returns the oldest match.
    Cas {
        space: String,
        template: TypedTemplate,
        tuple: TypedTuple,
        lease_ms: Option<u64>,
        sealed: Option<Bytes>,
    },
    /// Takes the oldest tuple matching `template` and inserts `tuple` in its place; nothing
    /// if no tuple matches.
    Replace {
        space: String,
        template: TypedTemplate,
        tuple: TypedTuple,
        lease_ms: Option<u64>,
        sealed: Option<Bytes>,
    },
    /// Up to `max` matching tuples, oldest first.
    RdAll {
        space: String,
        template: TypedTemplate,
        max: u32,
    },
    /// Up to `max` matching tuples, oldest first, taken.
    InAll {
        space: String,
        template: TypedTemplate,
        max: u32,
    },
    /// Sets the lease of every matching leased tuple the invoker inserted to end `lease_ms`
    /// after the agreed time; answers how many.
    Renew {
        space: String,
        template: TypedTemplate,
        lease_ms: u64,
    },
    /// The oldest matching tuple inserted after revision `after`; waits up to `timeout_ms`
    /// for one if none exists (a watch: every tuple inserted later has a higher revision).
    RdAfter {
        space: String,
        template: TypedTemplate,
        after: u64,
        timeout_ms: u64,
    },
    /// This replica's share of the sealed tuple of `revision` (stored, or taken by the
    /// invoker's principal a short while ago), encrypted to the reader's one-time key
    /// `reader`. Unordered only: every replica answers with its own share.
    Share {
        space: String,
        revision: u64,
        reader: KexPublic,
    },
}

impl SpaceRequest {
    /// The space the operation acts on (`None` for listing the spaces).
    pub fn space(&self) -> Option<&str> {
        match self {
            SpaceRequest::ListSpaces => None,
            SpaceRequest::Create { space, .. }
            | SpaceRequest::Destroy { space }
            | SpaceRequest::Out { space, .. }
            | SpaceRequest::Rdp { space, .. }
            | SpaceRequest::Inp { space, .. }
            | SpaceRequest::Rd { space, .. }
            | SpaceRequest::In { space, .. }
            | SpaceRequest::Cas { space, .. }
            | SpaceRequest::Replace { space, .. }
            | SpaceRequest::RdAll { space, .. }
            | SpaceRequest::InAll { space, .. }
            | SpaceRequest::Renew { space, .. }
            | SpaceRequest::RdAfter { space, .. }
            | SpaceRequest::Share { space, .. } => Some(space),
        }
    }

    /// The sealed tuple an insertion carries.
    pub fn sealed(&self) -> Option<&Bytes> {
        match self {
            SpaceRequest::Out { sealed, .. }
            | SpaceRequest::Cas { sealed, .. }
            | SpaceRequest::Replace { sealed, .. } => sealed.as_ref(),
            _ => None,
        }
    }

    /// The operation's name, as messages use it.
    pub fn op_name(&self) -> &'static str {
        match self {
            SpaceRequest::Create { .. } => "create",
            SpaceRequest::Destroy { .. } => "destroy",
            SpaceRequest::ListSpaces => "list",
            SpaceRequest::Out { .. } => "out",
            SpaceRequest::Rdp { .. } => "rdp",
            SpaceRequest::Inp { .. } => "inp",
            SpaceRequest::Rd { .. } => "rd",
            SpaceRequest::In { .. } => "in",
            SpaceRequest::Cas { .. } => "cas",
            SpaceRequest::Replace { .. } => "replace",
            SpaceRequest::RdAll { .. } => "rdAll",
            SpaceRequest::InAll { .. } => "inAll",
            SpaceRequest::Renew { .. } => "renew",
            SpaceRequest::RdAfter { .. } => "rdAfter",
            SpaceRequest::Share { .. } => "share",
        }
    }

    /// Whether the operation acts on the set of spaces rather than inside one (create,
    /// destroy, list): it runs alone, never beside another space's operations.
    pub fn is_global(&self) -> bool {
        matches!(
            self,
            SpaceRequest::Create { .. } | SpaceRequest::Destroy { .. } | SpaceRequest::ListSpaces
        )
    }

    /// Whether the operation may run unordered: it only reads and never waits (rdp, rdAll,
    /// and share, which runs unordered only).
    pub fn runs_unordered(&self) -> bool {
        matches!(
            self,
            SpaceRequest::Rdp { .. } | SpaceRequest::RdAll { .. } | SpaceRequest::Share { .. }
        )
    }

    /// What the service checks of the request before running it, checked here: the space
    /// name, the shapes of its tuple and template under `limits`, its policy's bounds, its
    /// protection's width, and that a sealed tuple decodes and fits with its tuple. A client
    /// finds a mistake with this before sending. (What depends on the space, such as its
    /// protection, the service checks.)
    pub fn check(&self, limits: &Limits) -> Result<(), SpaceError> {
        if let Some(space) = self.space() {
            check_space_name(space).map_err(SpaceError::Malformed)?;
        }
        let (template, tuple) = match self {
            SpaceRequest::Create {
                policy, protection, ..
            } => {
                policy
                    .check(limits)
                    .map_err(|e| SpaceError::BadPolicy(e.to_string()))?;
                if let Some(protection) = protection {
                    protection
                        .check(limits)
                        .and_then(|()| protection.check_policy(policy))
                        .map_err(SpaceError::Protection)?;
                }
                (None, None)
            }
            SpaceRequest::Destroy { .. }
            | SpaceRequest::ListSpaces
            | SpaceRequest::Share { .. } => (None, None),
            SpaceRequest::Out { tuple, .. } => (None, Some(tuple)),
            SpaceRequest::Cas {
                template, tuple, ..
            }
            | SpaceRequest::Replace {
                template, tuple, ..
            } => (Some(template), Some(tuple)),
            SpaceRequest::Rdp { template, .. }
            | SpaceRequest::Inp { template, .. }
            | SpaceRequest::Rd { template, .. }
            | SpaceRequest::In { template, .. }
            | SpaceRequest::RdAll { template, .. }
            | SpaceRequest::InAll { template, .. }
            | SpaceRequest::Renew { template, .. }
            | SpaceRequest::RdAfter { template, .. } => (Some(template), None),
        };
        if let Some(template) = template {
            template.check(limits).map_err(SpaceError::Shape)?;
        }
        if let Some(tuple) = tuple {
            tuple.check(limits).map_err(SpaceError::Shape)?;
            if let Some(sealed) = self.sealed() {
                check_sealed(tuple, sealed, limits).map_err(SpaceError::Protection)?;
            }
        }
        Ok(())
    }

    /// The request's bytes. A request that [`SpaceRequest::check`] refuses encodes to bytes
    /// the service answers as malformed.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        let tag = match self {
            SpaceRequest::Create { .. } => 1,
            SpaceRequest::Destroy { .. } => 2,
            SpaceRequest::ListSpaces => 3,
            SpaceRequest::Out { .. } => 4,
            SpaceRequest::Rdp { .. } => 5,
            SpaceRequest::Inp { .. } => 6,
            SpaceRequest::Rd { .. } => 7,
            SpaceRequest::In { .. } => 8,
            SpaceRequest::Cas { .. } => 9,
            SpaceRequest::Replace { .. } => 10,
            SpaceRequest::RdAll { .. } => 11,
            SpaceRequest::InAll { .. } => 12,
            SpaceRequest::Renew { .. } => 13,
            SpaceRequest::RdAfter { .. } => 14,
            SpaceRequest::Share { .. } => 15,
        };
        out.put_u8(tag);
        if let Some(space) = self.space() {
            put_space_name(&mut out, space);
        }
        match self {
            SpaceRequest::Create {
                policy, protection, ..
            } => {
                policy.encode_into(&mut out);
                if let Some(protection) = protection {
                    protection.encode_into(&mut out);
                }
            }
            SpaceRequest::Destroy { .. } | SpaceRequest::ListSpaces => {}
            SpaceRequest::Out {
                tuple,
                lease_ms,
                sealed,
                ..
            } => {
                tuple.encode_into(&mut out);
                put_opt_u64(&mut out, *lease_ms);
                if let Some(sealed) = sealed {
                    put_sealed(&mut out, sealed);
                }
            }
            SpaceRequest::Rdp { template, .. } | SpaceRequest::Inp { template, .. } => {
                template.encode_into(&mut out)
            }
            SpaceRequest::Rd {
                template,
                timeout_ms,
                ..
            }
            | SpaceRequest::In {
                template,
                timeout_ms,
                ..
            } => {
                template.encode_into(&mut out);
                out.put_u64_le(*timeout_ms);
            }
            SpaceRequest::Cas {
                template,
                tuple,
                lease_ms,
                sealed,
                ..
            }
            | SpaceRequest::Replace {
                template,
                tuple,
                lease_ms,
                sealed,
                ..
            } => {
                template.encode_into(&mut out);
                tuple.encode_into(&mut out);
                put_opt_u64(&mut out, *lease_ms);
                if let Some(sealed) = sealed {
                    put_sealed(&mut out, sealed);
                }
            }
            SpaceRequest::RdAll { template, max, .. }
            | SpaceRequest::InAll { template, max, .. } => {
                template.encode_into(&mut out);
                out.put_u32_le(*max);
            }
            SpaceRequest::Renew {
                template, lease_ms, ..
            } => {
                template.encode_into(&mut out);
                out.put_u64_le(*lease_ms);
            }
            SpaceRequest::RdAfter {
                template,
                after,
                timeout_ms,
                ..
            } => {
                template.encode_into(&mut out);
                out.put_u64_le(*after);
                out.put_u64_le(*timeout_ms);
            }
            SpaceRequest::Share {
                revision, reader, ..
            } => {
                out.put_u64_le(*revision);
                out.put_slice(&reader.0);
            }
        }
        out.freeze()
    }

    /// Decodes a whole request; its tuples, templates and policy are checked against
    /// `limits` as they decode.
    pub fn decode(bytes: &Bytes, limits: &Limits) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let tag = r.u8("an operation")?;
        if tag == 3 {
            r.finish()?;
            return Ok(SpaceRequest::ListSpaces);
        }
        if !(1..=15).contains(&tag) {
            return Err(DecodeError::UnknownTag {
                what: "operation",
                tag,
            });
        }
        let space = r.space_name()?;
        // An optional trailing section: present exactly when bytes are left.
        let sealed = |r: &mut Reader| -> Result<Option<Bytes>, DecodeError> {
            match r.remaining() {
                0 => Ok(None),
                _ => r.sealed(limits.tuple_bytes_max).map(Some),
            }
        };
        let request = match tag {
            1 => SpaceRequest::Create {
                space,
                policy: Policy::decode_from(&mut r, limits)?,
                protection: match r.remaining() {
                    0 => None,
                    _ => Some(Protections::decode_from(&mut r, limits)?),
                },
            },
            2 => SpaceRequest::Destroy { space },
            4 => SpaceRequest::Out {
                space,
                tuple: r.tuple(limits)?,
                lease_ms: r.opt_u64("a lease")?,
                sealed: sealed(&mut r)?,
            },
            5 => SpaceRequest::Rdp {
                space,
                template: r.template(limits)?,
            },
            6 => SpaceRequest::Inp {
                space,
                template: r.template(limits)?,
            },
            7 | 8 => {
                let template = r.template(limits)?;
                let timeout_ms = r.u64("a timeout")?;
                if tag == 7 {
                    SpaceRequest::Rd {
                        space,
                        template,
                        timeout_ms,
                    }
                } else {
                    SpaceRequest::In {
                        space,
                        template,
                        timeout_ms,
                    }
                }
            }
            9 | 10 => {
                let template = r.template(limits)?;
                let tuple = r.tuple(limits)?;
                let lease_ms = r.opt_u64("a lease")?;
                let sealed = sealed(&mut r)?;
                if tag == 9 {
                    SpaceRequest::Cas {
                        space,
                        template,
                        tuple,
                        lease_ms,
                        sealed,
                    }
                } else {
                    SpaceRequest::Replace {
                        space,
                        template,
                        tuple,
                        lease_ms,
                        sealed,
                    }
                }
            }
            11 | 12 => {
                let template = r.template(limits)?;
                let max = r.u32("a count")?;
                if tag == 11 {
                    SpaceRequest::RdAll {
                        space,
                        template,
                        max,
                    }
                } else {
                    SpaceRequest::InAll {
                        space,
                        template,
                        max,
                    }
                }
            }
            13 => SpaceRequest::Renew {
                space,
                template: r.template(limits)?,
                lease_ms: r.u64("a lease")?,
            },
            14 => SpaceRequest::RdAfter {
                space,
                template: r.template(limits)?,
                after: r.u64("a revision")?,
                timeout_ms: r.u64("a timeout")?,
            },
            _ => SpaceRequest::Share {
                space,
                revision: r.u64("a revision")?,
                reader: KexPublic(r.array("a reader's key")?),
            },
        };
        r.finish()?;
        Ok(request)
    }
}
