//! Answering `share`: this replica's share of a sealed tuple, opened with the replica's
//! identity key and encrypted to the reader's one-time key ([`tagma_crypto::sealing`]).
//!
//! The answer differs at every replica (each holds its own share, and encrypts it under a
//! fresh nonce), so it is given only to unordered requests: never in ordered execution,
//! whose replies must be the same at every replica, never in the reply cache, and it reads
//! the state without changing it (the state digest never sees it). Who gets a share is what
//! the space's state and policy decide alike at every replica: for a stored tuple, a
//! principal the read class admits and whose read field rules the tuple passes; for a tuple
//! taken a short while ago ([`crate::taken`]), its taker's principal only.

use tagma_crypto::IdentityKey;
use tagma_crypto::sealing::{SealError, SealedSecret};
use tagma_space::protection::share_context;
use tagma_space::{OpClass, ProtectionError, SpaceError, SpaceReply};
use tagma_wire::{KexPublic, PublicKey};

use crate::limits::SpaceLimits;
use crate::space::Space;

/// This replica's key and its position among the replicas tuples are sealed for.
pub(crate) struct ShareKey {
    key: IdentityKey,
    /// `None`: this replica's key is not among them.
    index: Option<usize>,
}

impl ShareKey {
    /// The key of this replica, whose position is that of its public key in `replicas` (the
    /// cluster configuration's replicas in member order, as writers seal for them).
    pub(crate) fn new(key: IdentityKey, replicas: &[PublicKey]) -> Self {
        let public = key.public();
        let index = replicas.iter().position(|r| *r == public);
        ShareKey { key, index }
    }

    /// This replica's position, if it is one of the sealing replicas.
    pub(crate) fn index(&self) -> Option<usize> {
        self.index
    }
}

/// This replica's answer to `share` of the tuple of `revision` in `space`, for `invoker`,
/// at `now_ms` as this replica sees the agreed time.
pub(crate) fn answer(
    key: Option<&ShareKey>,
    space: &Space,
    revision: u64,
    reader: &KexPublic,
    invoker: u32,
    now_ms: u64,
    limits: &SpaceLimits,
) -> SpaceReply {
    let missing = || {
        SpaceReply::Error(SpaceError::Protection(ProtectionError::NoSealedTuple {
            revision,
        }))
    };
    let sealed = match space.store.get(revision) {
        Some(entry) if entry.live(now_ms) && entry.sealed.is_some() => {
            if let Some(denied) = space.deny(OpClass::Read, invoker) {
                return denied;
            }
            if !space
                .policy
                .field_rules_hold(OpClass::Read, invoker, &entry.tuple)
            {
                // A tuple the invoker may not read is absent to it, as in every read.
                return missing();
            }
            entry.sealed.as_ref()
        }
        _ => match space.taken.get(revision, now_ms) {
            Some(taken) if taken.taker != invoker => {
                return SpaceReply::Denied(format!(
                    "the tuple of revision {revision} in space `{}` was taken by principal {}: \
                     only its taker gets the shares of a taken tuple",
                    space.name, taken.taker
                ));
            }
            Some(taken) => Some(&taken.sealed),
            None => None,
        },
    };
    let Some(sealed) = sealed else {
        return missing();
    };
    let Some((key, index)) = key.and_then(|k| k.index.map(|i| (&k.key, i))) else {
        return SpaceReply::Error(SpaceError::Protection(ProtectionError::NoReplicaKey));
    };
    let unopenable = |e: SealError| {
        SpaceReply::Error(SpaceError::Protection(ProtectionError::ShareUnopenable {
            revision,
            reason: e.to_string(),
        }))
    };
    let secret = match SealedSecret::decode(sealed, limits.typed.tuple_bytes_max) {
        Ok(secret) => secret,
        Err(e) => return unopenable(SealError::Malformed(e)),
    };
    let share = match key.open_share(&secret, index) {
        Ok(share) => share,
        Err(e) => return unopenable(e),
    };
    match key.reseal_share(&share, reader, &share_context(&space.name, revision)) {
        Ok(reply) => SpaceReply::Share(reply),
        Err(e) => SpaceReply::Error(SpaceError::Malformed(e.to_string())),
    }
}
