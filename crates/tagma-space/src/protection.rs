//! Field protection of a confidential space (the confidentiality layer of Bessani, Alchieri,
//! Correia, Fraga: "DepSpace: A Byzantine Fault-Tolerant Coordination Service"): what the
//! replicas hold of each field of a tuple, fixed when the space is created, and the rules a
//! stored tuple and a template of such a space keep — checked alike by a client before it
//! sends and by every replica as it executes.
//!
//! - **public**: the field is stored as it is;
//! - **comparable**: the replicas hold a 32-byte keyed hash of the field (its position and
//!   canonical encoding under a key only clients hold), so a template with the hashed value
//!   still finds it by equality;
//! - **private**: the replicas hold an empty placeholder (`0x`).
//!
//! A tuple with a comparable or private field carries the whole original tuple *sealed*
//! ([`tagma_crypto::sealing`]): encrypted under a fresh key that is secret-shared among the
//! replicas, any f+1 of which let a reader decrypt it; fewer never can. The associated data
//! of the sealing is [`sealed_aad`]: the space's name and the stored tuple's encoding, so a
//! sealed tuple cannot be moved to another space or another stored tuple.
//!
//! In a protected space every tuple and template has the protection's arity. A template holds
//! at a comparable position `*`, `*bytes` or a 32-byte hash, at a private position `*` or
//! `*bytes`: typed wildcards and values cannot match what the replicas hold there. A policy's
//! field rules name public fields only, and its `unique` templates keep the template rules.
//!
//! Text: the kinds separated by commas, `public,comparable,private`. Encoding: `count u8 |
//! kind u8*` (0 public, 1 comparable, 2 private), count 1 to 255.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};
use tagma_crypto::sealing::SealedSecret;

use crate::codec::{DecodeError, Reader};
use crate::policy::{Policy, Rule};
use crate::typed::{Field, FieldType, Limits, Pattern, TypedTemplate, TypedTuple};

/// Bytes of a comparable field's keyed hash.
pub const COMPARABLE_HASH_LEN: usize = 32;

/// Associated-data prefix of a sealed tuple.
const SEALED_AAD_DOMAIN: &[u8] = b"tagma v1 space sealed tuple\0";
/// Prefix of the context a replica binds its share reply to.
const SHARE_CONTEXT_DOMAIN: &[u8] = b"tagma v1 space share\0";

/// How one field of a protected space's tuples is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protection {
    /// Stored as it is.
    Public,
    /// Stored as a keyed hash: matched by equality, never read back from the replicas.
    Comparable,
    /// Stored as an empty placeholder: only the sealed tuple holds it.
    Private,
}

impl Protection {
    pub fn name(self) -> &'static str {
        match self {
            Protection::Public => "public",
            Protection::Comparable => "comparable",
            Protection::Private => "private",
        }
    }

    fn code(self) -> u8 {
        match self {
            Protection::Public => 0,
            Protection::Comparable => 1,
            Protection::Private => 2,
        }
    }
}

/// A space's protection: one [`Protection`] per field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Protections(pub Vec<Protection>);

/// Why a tuple, template, policy, sealed tuple or share request does not fit a space's
/// protection. Every message says what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtectionError {
    #[error(
        "a protection of {width} fields: give 1 to {max} (the service's arity_max), one of \
         public, comparable, private per field"
    )]
    Width { width: u32, max: u32 },
    #[error(
        "{arity} fields where the space's protection has {protected}: tuples and templates \
         of a protected space have its arity"
    )]
    Arity { arity: u32, protected: u32 },
    #[error(
        "field {index} is private: the replicas hold the empty placeholder 0x there (seal the \
         tuple with a space key: SpaceClient's confidential operations, or --space-key)"
    )]
    NotPlaceholder { index: u32 },
    #[error(
        "field {index} is comparable: the replicas hold its 32-byte keyed hash there (hash it \
         with the space key: SpaceClient's confidential operations, or --space-key)"
    )]
    NotHash { index: u32 },
    #[error(
        "field {index} of the template is protected: use `*` or `*bytes` there, or (if it is \
         comparable) a value, which the space key hashes"
    )]
    TemplatePattern { index: u32 },
    #[error(
        "the tuple has comparable or private fields but carries no sealed tuple: insert it \
         with the space key (SpaceClient's confidential operations, or --space-key)"
    )]
    SealedMissing,
    #[error(
        "a sealed tuple for a space without comparable or private fields: insert the tuple \
         without one"
    )]
    SealedUnexpected,
    #[error("the sealed tuple does not decode: {0}")]
    SealedMalformed(String),
    #[error(
        "the tuple with its sealed part takes {len} bytes, more than the {max} allowed \
         (tuple_bytes_max): make the tuple smaller"
    )]
    SealedTooLarge { len: u64, max: u64 },
    #[error(
        "the policy's rule on field {field} names a comparable or private field: field rules \
         apply to public fields only"
    )]
    PolicyField { field: u32 },
    #[error(
        "no sealed tuple of revision {revision} here: it was never inserted sealed, it is gone \
         (taken more than the taken tuples' keep time ago, or its lease ended), or this \
         replica has not executed its insertion yet (ask again)"
    )]
    NoSealedTuple { revision: u64 },
    #[error(
        "this replica holds no share key (started without its key and the replicas' list): \
         ask the other replicas"
    )]
    NoReplicaKey,
    #[error(
        "this replica's share of revision {revision} does not open: the writer sealed it \
         wrongly for this replica ({reason})"
    )]
    ShareUnopenable { revision: u64, reason: String },
    #[error(
        "`share` is answered by each replica for itself: send it unordered to every replica \
         (SpaceClient's confidential operations do)"
    )]
    ShareOrdered,
}

impl Protections {
    /// How many fields the space's tuples have.
    pub fn arity(&self) -> usize {
        self.0.len()
    }

    /// Whether tuples of the space carry a sealed part: some field is comparable or
    /// private.
    pub fn seals(&self) -> bool {
        self.0.iter().any(|p| *p != Protection::Public)
    }

    /// Checks the width against `limits`.
    pub fn check(&self, limits: &Limits) -> Result<(), ProtectionError> {
        let max = limits.arity_max.min(u8::MAX as usize);
        if self.0.is_empty() || self.0.len() > max {
            return Err(ProtectionError::Width {
                width: self.0.len().min(u32::MAX as usize) as u32,
                max: max as u32,
            });
        }
        Ok(())
    }

    fn check_arity(&self, arity: usize) -> Result<(), ProtectionError> {
        if arity == self.0.len() {
            Ok(())
        } else {
            Err(ProtectionError::Arity {
                arity: arity.min(u32::MAX as usize) as u32,
                protected: self.0.len() as u32,
            })
        }
    }

    /// Checks a tuple as the replicas store it: the arity, a 32-byte hash at each comparable
    /// position, the empty placeholder at each private one, and a sealed part exactly when
    /// the space seals.
    pub fn check_stored(
        &self,
        tuple: &TypedTuple,
        sealed: Option<&Bytes>,
    ) -> Result<(), ProtectionError> {
        self.check_arity(tuple.0.len())?;
        for (index, (protection, field)) in self.0.iter().zip(&tuple.0).enumerate() {
            let index = index as u32;
            match (protection, field) {
                (Protection::Public, _) => {}
                (Protection::Comparable, Field::Bytes(b)) if b.len() == COMPARABLE_HASH_LEN => {}
                (Protection::Comparable, _) => return Err(ProtectionError::NotHash { index }),
                (Protection::Private, Field::Bytes(b)) if b.is_empty() => {}
                (Protection::Private, _) => {
                    return Err(ProtectionError::NotPlaceholder { index });
                }
            }
        }
        match (self.seals(), sealed) {
            (true, None) => Err(ProtectionError::SealedMissing),
            (false, Some(_)) => Err(ProtectionError::SealedUnexpected),
            _ => Ok(()),
        }
    }

    /// Checks a template as the replicas match it: the arity, and at protected positions
    /// only what can match there (see the module docs).
    pub fn check_template(&self, template: &TypedTemplate) -> Result<(), ProtectionError> {
        self.check_arity(template.0.len())?;
        for (index, (protection, pattern)) in self.0.iter().zip(&template.0).enumerate() {
            let fits = match (protection, pattern) {
                (Protection::Public, _) => true,
                (_, Pattern::Any | Pattern::AnyOf(FieldType::Bytes)) => true,
                (Protection::Comparable, Pattern::Is(Field::Bytes(b))) => {
                    b.len() == COMPARABLE_HASH_LEN
                }
                _ => false,
            };
            if !fits {
                return Err(ProtectionError::TemplatePattern {
                    index: index as u32,
                });
            }
        }
        Ok(())
    }

    /// Checks a policy for this protection: field rules on public fields only, `unique`
    /// templates that keep the template rules.
    pub fn check_policy(&self, policy: &Policy) -> Result<(), ProtectionError> {
        for rule in &policy.rules {
            match rule {
                Rule::FieldIsInvoker { field, .. } => {
                    if self.0.get(*field as usize) != Some(&Protection::Public) {
                        return Err(ProtectionError::PolicyField {
                            field: u32::from(*field),
                        });
                    }
                }
                Rule::Unique(template) => self.check_template(template)?,
            }
        }
        Ok(())
    }

    pub fn encode_into(&self, out: &mut BytesMut) {
        out.put_u8(self.0.len() as u8);
        for p in &self.0 {
            out.put_u8(p.code());
        }
    }

    /// Decodes a protection from `r`, checking its width against `limits`.
    pub fn decode_from(r: &mut Reader, limits: &Limits) -> Result<Self, DecodeError> {
        let count = r.u8("a protection")? as usize;
        let mut kinds = Vec::with_capacity(count);
        for _ in 0..count {
            kinds.push(match r.u8("a protection")? {
                0 => Protection::Public,
                1 => Protection::Comparable,
                2 => Protection::Private,
                tag => {
                    return Err(DecodeError::UnknownTag {
                        what: "protection",
                        tag,
                    });
                }
            });
        }
        if count == 0 {
            return Err(DecodeError::NotCanonical(
                "a protection has at least one field",
            ));
        }
        let protections = Protections(kinds);
        if protections.check(limits).is_err() {
            return Err(DecodeError::TooLong {
                what: "a protection",
                len: count,
                max: limits.arity_max.min(u8::MAX as usize),
            });
        }
        Ok(protections)
    }
}

/// Checks a sealed tuple's bytes: they decode as a [`SealedSecret`], and with the stored
/// tuple they fit `tuple_bytes_max`. Whether each replica's share opens is checked only by
/// that replica, and whether the shares are consistent only by readers (see
/// [`tagma_crypto::sealing`]): neither may decide replicated state.
pub fn check_sealed(
    tuple: &TypedTuple,
    sealed: &Bytes,
    limits: &Limits,
) -> Result<(), ProtectionError> {
    let len = tuple.encoded_len() + sealed.len();
    if len > limits.tuple_bytes_max {
        return Err(ProtectionError::SealedTooLarge {
            len: len as u64,
            max: limits.tuple_bytes_max as u64,
        });
    }
    SealedSecret::decode(sealed, limits.tuple_bytes_max)
        .map(|_| ())
        .map_err(|e| ProtectionError::SealedMalformed(e.to_string()))
}

/// The associated data a tuple of `space` stored as `stored` is sealed with.
pub fn sealed_aad(space: &str, stored: &TypedTuple) -> Vec<u8> {
    let mut aad = BytesMut::with_capacity(SEALED_AAD_DOMAIN.len() + 1 + space.len() + 64);
    aad.put_slice(SEALED_AAD_DOMAIN);
    crate::codec::put_space_name(&mut aad, space);
    stored.encode_into(&mut aad);
    aad.to_vec()
}

/// The context a replica binds its share of the tuple of `revision` in `space` to, for the
/// reader that asked.
pub fn share_context(space: &str, revision: u64) -> Vec<u8> {
    let mut context = BytesMut::with_capacity(SHARE_CONTEXT_DOMAIN.len() + 1 + space.len() + 8);
    context.put_slice(SHARE_CONTEXT_DOMAIN);
    crate::codec::put_space_name(&mut context, space);
    context.put_u64_le(revision);
    context.to_vec()
}

impl fmt::Display for Protections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|p| p.name()).collect();
        f.write_str(&names.join(","))
    }
}

/// Why text is not a protection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is no field protection: write public, comparable or private per field, separated \
     by commas (e.g. public,comparable,private)"
)]
pub struct ProtectionTextError(pub String);

impl std::str::FromStr for Protections {
    type Err = ProtectionTextError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.split(',')
            .map(|word| match word.trim() {
                "public" => Ok(Protection::Public),
                "comparable" => Ok(Protection::Comparable),
                "private" => Ok(Protection::Private),
                other => Err(ProtectionTextError(other.to_owned())),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Protections)
    }
}

fn put_u32(out: &mut BytesMut, v: u32) {
    out.put_u32_le(v);
}

impl ProtectionError {
    /// Encoding inside a [`crate::SpaceError`]: a sub-tag and the fields (numbers `u32` or
    /// `u64`, texts `len u16 | UTF-8`).
    pub(crate) fn encode_into(&self, out: &mut BytesMut) {
        match self {
            ProtectionError::Width { width, max } => {
                out.put_u8(1);
                put_u32(out, *width);
                put_u32(out, *max);
            }
            ProtectionError::Arity { arity, protected } => {
                out.put_u8(2);
                put_u32(out, *arity);
                put_u32(out, *protected);
            }
            ProtectionError::NotPlaceholder { index } => {
                out.put_u8(3);
                put_u32(out, *index);
            }
            ProtectionError::NotHash { index } => {
                out.put_u8(4);
                put_u32(out, *index);
            }
            ProtectionError::TemplatePattern { index } => {
                out.put_u8(5);
                put_u32(out, *index);
            }
            ProtectionError::SealedMissing => out.put_u8(6),
            ProtectionError::SealedUnexpected => out.put_u8(7),
            ProtectionError::SealedMalformed(reason) => {
                out.put_u8(8);
                crate::codec::put_text(out, reason);
            }
            ProtectionError::SealedTooLarge { len, max } => {
                out.put_u8(9);
                out.put_u64_le(*len);
                out.put_u64_le(*max);
            }
            ProtectionError::PolicyField { field } => {
                out.put_u8(10);
                put_u32(out, *field);
            }
            ProtectionError::NoSealedTuple { revision } => {
                out.put_u8(11);
                out.put_u64_le(*revision);
            }
            ProtectionError::NoReplicaKey => out.put_u8(12),
            ProtectionError::ShareUnopenable { revision, reason } => {
                out.put_u8(13);
                out.put_u64_le(*revision);
                crate::codec::put_text(out, reason);
            }
            ProtectionError::ShareOrdered => out.put_u8(14),
        }
    }

    pub(crate) fn decode_from(r: &mut Reader) -> Result<Self, DecodeError> {
        const WHAT: &str = "a protection error";
        Ok(match r.u8(WHAT)? {
            1 => ProtectionError::Width {
                width: r.u32(WHAT)?,
                max: r.u32(WHAT)?,
            },
            2 => ProtectionError::Arity {
                arity: r.u32(WHAT)?,
                protected: r.u32(WHAT)?,
            },
            3 => ProtectionError::NotPlaceholder {
                index: r.u32(WHAT)?,
            },
            4 => ProtectionError::NotHash {
                index: r.u32(WHAT)?,
            },
            5 => ProtectionError::TemplatePattern {
                index: r.u32(WHAT)?,
            },
            6 => ProtectionError::SealedMissing,
            7 => ProtectionError::SealedUnexpected,
            8 => ProtectionError::SealedMalformed(r.text(WHAT)?),
            9 => ProtectionError::SealedTooLarge {
                len: r.u64(WHAT)?,
                max: r.u64(WHAT)?,
            },
            10 => ProtectionError::PolicyField {
                field: r.u32(WHAT)?,
            },
            11 => ProtectionError::NoSealedTuple {
                revision: r.u64(WHAT)?,
            },
            12 => ProtectionError::NoReplicaKey,
            13 => ProtectionError::ShareUnopenable {
                revision: r.u64(WHAT)?,
                reason: r.text(WHAT)?,
            },
            14 => ProtectionError::ShareOrdered,
            tag => {
                return Err(DecodeError::UnknownTag {
                    what: "protection error",
                    tag,
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Protections {
        text.parse().unwrap()
    }

    fn hash() -> Field {
        Field::Bytes(Bytes::from(vec![7u8; COMPARABLE_HASH_LEN]))
    }

    #[test]
    fn text_round_trips_and_bad_words_name_the_kinds() {
        let all = p("public, comparable,private");
        assert_eq!(
            all.0,
            [
                Protection::Public,
                Protection::Comparable,
                Protection::Private
            ]
        );
        assert_eq!(all.to_string(), "public,comparable,private");
        assert_eq!(p(&all.to_string()), all);
        let e = "public,secret".parse::<Protections>().unwrap_err();
        assert!(e.to_string().contains("`secret`"), "{e}");
        assert!(e.to_string().contains("comparable"), "{e}");
    }

    #[test]
    fn stored_tuples_keep_hashes_placeholders_and_the_sealed_part() {
        let prot = p("public,comparable,private");
        let sealed = Bytes::from_static(b"sealed");
        let good = TypedTuple(vec![
            Field::Str("x".into()),
            hash(),
            Field::Bytes(Bytes::new()),
        ]);
        assert_eq!(prot.check_stored(&good, Some(&sealed)), Ok(()));
        assert_eq!(
            prot.check_stored(&good, None),
            Err(ProtectionError::SealedMissing)
        );
        let mut plain = good.clone();
        plain.0[2] = Field::Str("secret".into());
        assert_eq!(
            prot.check_stored(&plain, Some(&sealed)),
            Err(ProtectionError::NotPlaceholder { index: 2 })
        );
        let mut short = good.clone();
        short.0[1] = Field::Bytes(Bytes::from_static(b"short"));
        assert_eq!(
            prot.check_stored(&short, Some(&sealed)),
            Err(ProtectionError::NotHash { index: 1 })
        );
        assert_eq!(
            prot.check_stored(&TypedTuple(vec![Field::Int(1)]), Some(&sealed)),
            Err(ProtectionError::Arity {
                arity: 1,
                protected: 3
            })
        );
        let public = p("public,public");
        let tuple = TypedTuple(vec![Field::Int(1), Field::Int(2)]);
        assert_eq!(public.check_stored(&tuple, None), Ok(()));
        assert_eq!(
            public.check_stored(&tuple, Some(&sealed)),
            Err(ProtectionError::SealedUnexpected)
        );
    }

    #[test]
    fn templates_hold_only_what_can_match_at_protected_positions() {
        let prot = p("public,comparable,private");
        let ok: TypedTemplate = "(*int, *, *bytes)".parse().unwrap();
        assert_eq!(prot.check_template(&ok), Ok(()));
        let hashed = TypedTemplate(vec![
            Pattern::Is(Field::Int(1)),
            Pattern::Is(hash()),
            Pattern::Any,
        ]);
        assert_eq!(prot.check_template(&hashed), Ok(()));
        for (text, index) in [
            ("(1, *str, *)", 1),
            ("(1, \"plain\", *)", 1),
            ("(1, *, \"secret\")", 2),
            ("(1, *, *int)", 2),
        ] {
            let template: TypedTemplate = text.parse().unwrap();
            assert_eq!(
                prot.check_template(&template),
                Err(ProtectionError::TemplatePattern { index }),
                "{text}"
            );
        }
    }

    #[test]
    fn policies_may_rule_on_public_fields_only() {
        let prot = p("public,comparable,private");
        let ok: Policy = "take requires field 0 = invoker\nunique (*, *, *)"
            .parse()
            .unwrap();
        assert_eq!(prot.check_policy(&ok), Ok(()));
        let on_private: Policy = "read requires field 2 = invoker".parse().unwrap();
        assert_eq!(
            prot.check_policy(&on_private),
            Err(ProtectionError::PolicyField { field: 2 })
        );
        let beyond: Policy = "read requires field 5 = invoker".parse().unwrap();
        assert!(prot.check_policy(&beyond).is_err());
        let unique: Policy = "unique (\"lock\", \"name\", *)".parse().unwrap();
        assert_eq!(
            prot.check_policy(&unique),
            Err(ProtectionError::TemplatePattern { index: 1 })
        );
    }

    #[test]
    fn encoding_round_trips_and_bad_widths_and_kinds_are_refused() {
        let limits = Limits::default();
        let prot = p("private,public,comparable");
        let mut out = BytesMut::new();
        prot.encode_into(&mut out);
        assert_eq!(&out[..], &[3, 2, 0, 1]);
        let bytes = out.freeze();
        let mut r = Reader::new(&bytes);
        assert_eq!(Protections::decode_from(&mut r, &limits), Ok(prot));
        r.finish().unwrap();
        for bad in [&b"\x00"[..], b"\x01\x03", b"\x02\x00"] {
            let bytes = Bytes::copy_from_slice(bad);
            assert!(Protections::decode_from(&mut Reader::new(&bytes), &limits).is_err());
        }
        let wide = Protections(vec![Protection::Public; 17]);
        assert_eq!(
            wide.check(&limits),
            Err(ProtectionError::Width { width: 17, max: 16 })
        );
    }

    #[test]
    fn contexts_bind_space_tuple_and_revision() {
        let t = TypedTuple(vec![Field::Int(1)]);
        let u = TypedTuple(vec![Field::Int(2)]);
        assert_ne!(sealed_aad("a", &t), sealed_aad("b", &t));
        assert_ne!(sealed_aad("a", &t), sealed_aad("a", &u));
        assert_ne!(share_context("a", 1), share_context("a", 2));
        assert_ne!(share_context("a", 1), share_context("b", 1));
    }
}
