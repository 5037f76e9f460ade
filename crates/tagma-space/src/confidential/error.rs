//! [`ConfidentialError`]: why an operation on a protected space did not give its result.

use tagma_crypto::sealing::SealError;
use tagma_wire::ReplicaId;

use crate::client::SpaceClientError;
use crate::protection::ProtectionError;

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
