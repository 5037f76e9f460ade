//! [`Confidential`]: the transformation of one protected space's tuples and templates, and
//! the opening of a tuple read from it (see the parent module's docs), without IO.

use bytes::{Bytes, BytesMut};
use tagma_crypto::sealing::{self, SealError, SealedSecret, ShareReader};
use tagma_crypto::{MacKey, derive_key};
use tagma_wire::ReplicaId;
use zeroize::Zeroize;

use super::error::ConfidentialError;
use super::keys::{SealingGroup, SpaceKey};
use crate::protection::{
    COMPARABLE_HASH_LEN, Protection, ProtectionError, Protections, sealed_aad, share_context,
};
use crate::typed::{Field, Limits, Pattern, TypedTemplate, TypedTuple};
use crate::{SpaceError, SpaceReply, SpaceRequest, Stored};

/// `derive_key` context of a space's comparable-field hashing key.
const COMPARABLE_KEY_CONTEXT: &str = "tagma v1 space comparable field key";

/// A tuple of a protected space as its writer inserted it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revealed {
    /// The original tuple.
    pub tuple: TypedTuple,
    pub revision: u64,
    pub lease_expires_ms: Option<u64>,
    /// Replicas whose share (or share reply) was wrong: faulty replicas to report.
    pub wrong_shares: Vec<ReplicaId>,
}

/// The transformation of one protected space's tuples and templates (see the module docs).
#[derive(Clone)]
pub struct Confidential {
    space: String,
    protection: Protections,
    hash_key: MacKey,
    group: SealingGroup,
    limits: Limits,
}

impl Confidential {
    /// The transformation of `space`, created with `protection`, for clients holding `key`,
    /// sealing for `group`.
    pub fn new(space: &str, protection: Protections, key: &SpaceKey, group: SealingGroup) -> Self {
        let mut material = Vec::with_capacity(SpaceKey::LEN + 1 + space.len());
        material.extend_from_slice(key.as_bytes());
        material.push(space.len() as u8);
        material.extend_from_slice(space.as_bytes());
        let hash_key = derive_key(COMPARABLE_KEY_CONTEXT, &material);
        material.zeroize();
        Confidential {
            space: space.to_owned(),
            protection,
            hash_key,
            group,
            limits: Limits::default(),
        }
    }

    /// The same, decoding opened tuples with these limits (the service's).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn space(&self) -> &str {
        &self.space
    }

    pub fn protection(&self) -> &Protections {
        &self.protection
    }

    pub fn group(&self) -> &SealingGroup {
        &self.group
    }

    /// The keyed hash a comparable `field` at position `index` is stored as.
    pub fn comparable_hash(&self, index: usize, field: &Field) -> Bytes {
        let mut encoded = BytesMut::new();
        field.encode(&mut encoded);
        let position = (index as u32).to_le_bytes();
        let digest = self.hash_key.keyed_digest(&[&position, &encoded]);
        debug_assert_eq!(digest.0.len(), COMPARABLE_HASH_LEN);
        Bytes::copy_from_slice(&digest.0)
    }

    fn check_arity(&self, arity: usize) -> Result<(), ProtectionError> {
        if arity == self.protection.arity() {
            Ok(())
        } else {
            Err(ProtectionError::Arity {
                arity: arity as u32,
                protected: self.protection.arity() as u32,
            })
        }
    }

    /// The tuple as the replicas store it: hashes and placeholders in place of the
    /// protected fields.
    fn stored_form(&self, tuple: &TypedTuple) -> Result<TypedTuple, ProtectionError> {
        self.check_arity(tuple.0.len())?;
        let fields = self
            .protection
            .0
            .iter()
            .zip(&tuple.0)
            .enumerate()
            .map(|(index, (protection, field))| match protection {
                Protection::Public => field.clone(),
                Protection::Comparable => Field::Bytes(self.comparable_hash(index, field)),
                Protection::Private => Field::Bytes(Bytes::new()),
            })
            .collect();
        Ok(TypedTuple(fields))
    }

    /// What an insertion of `tuple` sends: the tuple as the replicas store it and, if the
    /// space seals, the original sealed for the group.
    pub fn protect(
        &self,
        tuple: &TypedTuple,
    ) -> Result<(TypedTuple, Option<Bytes>), ConfidentialError> {
        let stored = self.stored_form(tuple)?;
        if !self.protection.seals() {
            return Ok((stored, None));
        }
        let sealed = sealing::seal(
            &tuple.encode(),
            &sealed_aad(&self.space, &stored),
            &self.group.keys(),
            self.group.threshold(),
        )
        .map_err(ConfidentialError::Seal)?;
        Ok((stored, Some(Bytes::from(sealed.encode()))))
    }

    /// `template` as the replicas match it: values at comparable positions hashed.
    pub fn template(&self, template: &TypedTemplate) -> Result<TypedTemplate, ConfidentialError> {
        self.check_arity(template.0.len())?;
        let patterns = self
            .protection
            .0
            .iter()
            .zip(&template.0)
            .enumerate()
            .map(
                |(index, (protection, pattern))| match (protection, pattern) {
                    (Protection::Public, p) | (_, p @ Pattern::Any) => Ok(p.clone()),
                    (Protection::Comparable, Pattern::Is(value)) => Ok(Pattern::Is(Field::Bytes(
                        self.comparable_hash(index, value),
                    ))),
                    _ => Err(ProtectionError::TemplatePattern {
                        index: index as u32,
                    }),
                },
            )
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TypedTemplate(patterns))
    }

    /// The `share` request for the tuple of `revision`, answered to `reader`.
    pub fn share_request(&self, revision: u64, reader: &ShareReader) -> SpaceRequest {
        SpaceRequest::Share {
            space: self.space.clone(),
            revision,
            reader: reader.public(),
        }
    }

    /// The original of `stored`, opened with the replicas' encoded answers to
    /// [`Confidential::share_request`] for `reader` (see the module docs).
    pub fn reveal(
        &self,
        stored: &Stored,
        reader: &ShareReader,
        answers: &[(ReplicaId, Bytes)],
    ) -> Result<Revealed, ConfidentialError> {
        let revision = stored.revision;
        let revealed = |tuple: TypedTuple, wrong_shares: Vec<ReplicaId>| Revealed {
            tuple,
            revision,
            lease_expires_ms: stored.lease_expires_ms,
            wrong_shares,
        };
        if !self.protection.seals() {
            return Ok(revealed(stored.tuple.clone(), Vec::new()));
        }
        let faulty = |reason: String| ConfidentialError::FaultyWriter { revision, reason };
        let Some(sealed) = &stored.sealed else {
            return Err(ConfidentialError::NotSealed { revision });
        };
        let secret = SealedSecret::decode(sealed, usize::MAX).map_err(|e| faulty(e.to_string()))?;
        if secret.shares() != self.group.replicas().len()
            || secret.threshold() != self.group.threshold()
        {
            return Err(faulty(format!(
                "sealed for {} replicas with threshold {}, not these {} with threshold {}",
                secret.shares(),
                secret.threshold(),
                self.group.replicas().len(),
                self.group.threshold()
            )));
        }
        let context = share_context(&self.space, revision);
        let mut wrong: Vec<ReplicaId> = Vec::new();
        let mut shares = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        for (id, answer) in answers {
            let Some(index) = self.group.position(*id) else {
                continue;
            };
            match SpaceReply::decode(answer, &self.limits) {
                Ok(SpaceReply::Share(reply)) => {
                    match reader.open_reply(
                        index,
                        &self.group.replicas()[index].1,
                        &reply,
                        &context,
                    ) {
                        Ok(share) => shares.push((index, share)),
                        Err(_) => wrong.push(*id),
                    }
                }
                Ok(SpaceReply::Error(e)) => missing.push(format!("replica {id} ({e})")),
                Ok(SpaceReply::Denied(reason)) => missing.push(format!("replica {id} ({reason})")),
                Ok(_) | Err(_) => wrong.push(*id),
            }
        }
        let id_of = |index: usize| self.group.replicas()[index].0;
        let shares_error = |good: usize, wrong: Vec<ReplicaId>, missing: &[String]| {
            let answered: Vec<ReplicaId> = answers.iter().map(|(id, _)| *id).collect();
            let mut missing = missing.to_vec();
            missing.extend(
                self.group
                    .replicas()
                    .iter()
                    .filter(|(id, _)| !answered.contains(id))
                    .map(|(id, _)| format!("replica {id} (no answer)")),
            );
            ConfidentialError::Shares {
                revision,
                good,
                needed: self.group.threshold(),
                wrong,
                missing: if missing.is_empty() {
                    "none".into()
                } else {
                    missing.join(", ")
                },
            }
        };
        let aad = sealed_aad(&self.space, &stored.tuple);
        let opened = match sealing::combine(&secret, &aad, &shares) {
            Ok(opened) => opened,
            Err(SealError::NotEnoughShares { good, .. }) => {
                return Err(shares_error(good, sorted(wrong), &missing));
            }
            Err(SealError::WrongShares { replicas, good, .. }) => {
                wrong.extend(replicas.into_iter().map(id_of));
                return Err(shares_error(good, sorted(wrong), &missing));
            }
            Err(e) => return Err(faulty(e.to_string())),
        };
        wrong.extend(opened.wrong_shares.iter().map(|i| id_of(*i)));
        let original = TypedTuple::decode(&Bytes::from(opened.plaintext), &self.limits)
            .map_err(|e| faulty(format!("the sealed data is not a tuple ({e})")))?;
        if self.stored_form(&original).ok().as_ref() != Some(&stored.tuple) {
            return Err(faulty(
                "the sealed tuple does not give back the stored tuple's public, comparable \
                 and private fields"
                    .into(),
            ));
        }
        Ok(revealed(original, sorted(wrong)))
    }
}

fn sorted(mut ids: Vec<ReplicaId>) -> Vec<ReplicaId> {
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Whether a replica's answer says it may have the share later (it has not executed the
/// insertion yet), so asking again can help.
pub(super) fn may_come_later(answer: &Bytes, limits: &Limits) -> bool {
    matches!(
        SpaceReply::decode(answer, limits),
        Ok(SpaceReply::Error(SpaceError::Protection(
            ProtectionError::NoSealedTuple { .. }
        )) | SpaceReply::Error(SpaceError::UnknownSpace(_)))
    )
}
