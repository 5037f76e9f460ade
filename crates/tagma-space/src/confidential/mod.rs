//! The client side of a protected space (the confidentiality layer of Bessani, Alchieri,
//! Correia, Fraga: "DepSpace: A Byzantine Fault-Tolerant Coordination Service"; what the
//! replicas hold is in [`crate::protection`]).
//!
//! [`Confidential`] is the transformation, without IO:
//! - **Insert** ([`Confidential::protect`]): public fields stay as they are; a comparable
//!   field becomes `Field::Bytes` of its keyed hash — keyed BLAKE3 under a key derived from
//!   the client-held [`SpaceKey`] and the space's name, over the field's position and its
//!   canonical encoding (type included), so equal values at the same position of the same
//!   space hash alike and nothing else does; a private field becomes the empty placeholder.
//!   The whole original tuple is sealed ([`tagma_crypto::sealing::seal`]) for the
//!   [`SealingGroup`] (the replicas' public keys in member order, threshold f+1), with the
//!   space's name and the stored tuple's encoding as associated data.
//! - **Templates** ([`Confidential::template`]): values at comparable positions are hashed
//!   the same way; at comparable and private positions only `*` is allowed besides, since a
//!   typed wildcard cannot be checked against a hash or a placeholder.
//! - **Reading** ([`Confidential::reveal`]): with the stored tuple a read returned (its
//!   sealed part included) and the replicas' answers to `share` (each replica's share
//!   encrypted to the reader's one-time key), it opens every answer, checks every share
//!   against its published commitment, rebuilds the data key from f+1 good shares, decrypts,
//!   and checks that the plaintext is a tuple whose public, comparable and private fields give
//!   back the stored ones. A replica whose share is wrong is named in
//!   [`Revealed::wrong_shares`] and does not stop the read while f+1 good shares exist; a
//!   sealed tuple that cannot be consistent is the writer's fault
//!   ([`ConfidentialError::FaultyWriter`]).
//!
//! [`ConfidentialSpace`] runs the operations of a protected space over a
//! [`SpaceClient`](crate::SpaceClient): every insertion protected, every template
//! transformed, every tuple read opened with the replicas' shares
//! ([`tagma_client::Proxy::invoke_unordered_each_until`]).
//!
//! What the replicas learn: public fields; which tuples have equal comparable fields at a
//! position (and, for a value a replica can guess, nothing more without the space key);
//! never a private field, unless f+1 of them pool their shares. Who learns the data: clients
//! holding the space key (for comparable values) and readers the space's policy admits to
//! the shares. Tuples are sealed for the replicas of the configuration the writer used: a
//! tuple stays readable while its sealing replicas (the same keys at the same positions)
//! can answer.

mod space;

use bytes::{Bytes, BytesMut};
use tagma_crypto::sealing::{self, SealError, SealedSecret, ShareReader};
use tagma_crypto::{MacKey, derive_key};
use tagma_wire::{PublicKey, ReplicaId, View};
use zeroize::Zeroize;

pub use space::{ConfidentialCas, ConfidentialSpace, RevealedReplacement, SHARE_TIMEOUT};

use crate::client::SpaceClientError;
use crate::protection::{
    COMPARABLE_HASH_LEN, Protection, ProtectionError, Protections, sealed_aad, share_context,
};
use crate::typed::{Field, Limits, Pattern, TypedTemplate, TypedTuple};
use crate::{SpaceError, SpaceReply, SpaceRequest, Stored};

/// `derive_key` context of a space's comparable-field hashing key.
const COMPARABLE_KEY_CONTEXT: &str = "tagma v1 space comparable field key";

/// The 32-byte secret key of a protected space, held by its clients only: it keys the hashes
/// of comparable fields. Zeroized when dropped.
#[derive(Clone)]
pub struct SpaceKey([u8; 32]);

impl SpaceKey {
    pub const LEN: usize = 32;

    pub fn new(bytes: [u8; 32]) -> Self {
        SpaceKey(bytes)
    }

    /// A fresh random key (OS randomness).
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        tagma_crypto::random_bytes(&mut bytes);
        SpaceKey(bytes)
    }

    /// A key from exactly 32 bytes (a key file's contents).
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ConfidentialError> {
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| ConfidentialError::KeyLength { len: bytes.len() })?;
        Ok(SpaceKey(bytes))
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl Drop for SpaceKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl std::fmt::Debug for SpaceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpaceKey(..)")
    }
}

/// The replicas a tuple is sealed for, in member order (share `i` belongs to the `i`-th),
/// and how many of them rebuild its key (f+1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealingGroup {
    replicas: Vec<(ReplicaId, PublicKey)>,
    threshold: usize,
}

impl SealingGroup {
    /// `replicas` in member order; `threshold` of them (f+1) open a tuple, fewer never can.
    pub fn new(
        replicas: Vec<(ReplicaId, PublicKey)>,
        threshold: usize,
    ) -> Result<Self, ConfidentialError> {
        if replicas.is_empty()
            || replicas.len() > sealing::SHARES_MAX
            || threshold == 0
            || threshold > replicas.len()
        {
            return Err(ConfidentialError::Group {
                replicas: replicas.len(),
                threshold,
            });
        }
        Ok(SealingGroup {
            replicas,
            threshold,
        })
    }

    /// The members of `view`, threshold f+1.
    pub fn from_view(view: &View) -> Result<Self, ConfidentialError> {
        SealingGroup::new(
            view.members.iter().map(|m| (m.id, m.key)).collect(),
            view.f as usize + 1,
        )
    }

    pub fn replicas(&self) -> &[(ReplicaId, PublicKey)] {
        &self.replicas
    }

    pub fn threshold(&self) -> usize {
        self.threshold
    }

    fn keys(&self) -> Vec<PublicKey> {
        self.replicas.iter().map(|(_, key)| *key).collect()
    }

    fn position(&self, id: ReplicaId) -> Option<usize> {
        self.replicas.iter().position(|(r, _)| *r == id)
    }
}

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

/// Why an operation on a protected space did not give its result.
#[derive(Debug, thiserror::Error)]
pub enum ConfidentialError {
    #[error(transparent)]
    Space(#[from] SpaceClientError),
    #[error(transparent)]
    Protection(#[from] ProtectionError),
    #[error("space `{0}` has no field protection: use the plain operations (no space key)")]
    NotProtected(String),
    #[error("no space named `{0}`: create it first (list the spaces to see which exist)")]
    UnknownSpace(String),
    #[error(
        "a space key is 32 bytes, this one {len}: make one with `tagma space keygen FILE` (or \
         `head -c 32 /dev/urandom > FILE`)"
    )]
    KeyLength { len: usize },
    #[error(
        "{replicas} replicas with threshold {threshold}: seal for 1 to 255 replicas with a \
         threshold between 1 and their number (f+1)"
    )]
    Group { replicas: usize, threshold: usize },
    #[error("cannot seal the tuple: {0}")]
    Seal(SealError),
    #[error(
        "the tuple of revision {revision} carries no sealed part although its space seals: \
         the replicas that answered are faulty"
    )]
    NotSealed { revision: u64 },
    #[error(
        "the tuple of revision {revision}: {good} good shares, {needed} needed; wrong shares \
         from replicas: {}; no share from: {missing} — fix: check that f+1 replicas run and \
         answer unordered requests (readonly_requests = true) and that the policy admits this \
         principal to read",
        replica_list(wrong)
    )]
    Shares {
        revision: u64,
        good: usize,
        needed: usize,
        wrong: Vec<ReplicaId>,
        missing: String,
    },
    #[error("the tuple of revision {revision} was sealed by a faulty writer: {reason}")]
    FaultyWriter { revision: u64, reason: String },
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
            self.group.threshold,
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
        if secret.shares() != self.group.replicas.len()
            || secret.threshold() != self.group.threshold
        {
            return Err(faulty(format!(
                "sealed for {} replicas with threshold {}, not these {} with threshold {}",
                secret.shares(),
                secret.threshold(),
                self.group.replicas.len(),
                self.group.threshold
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
                    match reader.open_reply(index, &self.group.replicas[index].1, &reply, &context)
                    {
                        Ok(share) => shares.push((index, share)),
                        Err(_) => wrong.push(*id),
                    }
                }
                Ok(SpaceReply::Error(e)) => missing.push(format!("replica {id} ({e})")),
                Ok(SpaceReply::Denied(reason)) => missing.push(format!("replica {id} ({reason})")),
                Ok(_) | Err(_) => wrong.push(*id),
            }
        }
        let id_of = |index: usize| self.group.replicas[index].0;
        let shares_error = |good: usize, wrong: Vec<ReplicaId>, missing: &[String]| {
            let answered: Vec<ReplicaId> = answers.iter().map(|(id, _)| *id).collect();
            let mut missing = missing.to_vec();
            missing.extend(
                self.group
                    .replicas
                    .iter()
                    .filter(|(id, _)| !answered.contains(id))
                    .map(|(id, _)| format!("replica {id} (no answer)")),
            );
            ConfidentialError::Shares {
                revision,
                good,
                needed: self.group.threshold,
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

/// `1, 3`, or `none`.
fn replica_list(ids: &[ReplicaId]) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(ReplicaId::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn sorted(mut ids: Vec<ReplicaId>) -> Vec<ReplicaId> {
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Whether a replica's answer says it may have the share later (it has not executed the
/// insertion yet), so asking again can help.
fn may_come_later(answer: &Bytes, limits: &Limits) -> bool {
    matches!(
        SpaceReply::decode(answer, limits),
        Ok(SpaceReply::Error(SpaceError::Protection(
            ProtectionError::NoSealedTuple { .. }
        )) | SpaceReply::Error(SpaceError::UnknownSpace(_)))
    )
}

#[cfg(test)]
mod tests;
