//! The keys of a protected space's clients: the [`SpaceKey`] they share, and the
//! [`SealingGroup`] of replicas they seal for.

use tagma_crypto::sealing;
use tagma_wire::{PublicKey, ReplicaId, View};
use zeroize::Zeroize;

use super::error::ConfidentialError;

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

    pub(super) fn keys(&self) -> Vec<PublicKey> {
        self.replicas.iter().map(|(_, key)| *key).collect()
    }

    pub(super) fn position(&self, id: ReplicaId) -> Option<usize> {
        self.replicas.iter().position(|(r, _)| *r == id)
    }
}
