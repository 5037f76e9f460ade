//! `tagma-crypto`: digests, MACs, signatures, key files and the key-exchange primitives.
//!
//! Choices (measured in `shared/reference/deps.md`): BLAKE3 for every hash, keyed BLAKE3
//! truncated to 16 bytes for MACs, Ed25519 (ed25519-dalek) for identities and signatures,
//! X25519 for key exchange. One crate for the whole cryptographic surface keeps the choices in
//! one place.
//!
//! TO BE COMPLETED (helper): every `todo!()` below, plus unit tests.

use bytes::Bytes;
use tagma_wire::{Digest, MacTag, PublicKey, Request, Signature};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    #[error("bad signature")]
    BadSignature,
    #[error("invalid public key")]
    InvalidPublicKey,
    #[error("invalid key file {path}: {reason}")]
    KeyFile { path: String, reason: String },
    #[error("invalid hex key: {0}")]
    Hex(String),
}

/// BLAKE3 of `bytes`.
pub fn digest(bytes: &[u8]) -> Digest {
    todo!()
}

/// The digest that a request's MACs and signature cover: BLAKE3 over a fixed domain
/// separator, the request's header fields (client, seq, kind, view) and its payload.
pub fn request_digest(request: &Request) -> Digest {
    todo!()
}

/// A 32-byte MAC key.
#[derive(Clone)]
pub struct MacKey(pub [u8; 32]);

impl MacKey {
    /// Keyed BLAKE3 over `data`, truncated to 16 bytes.
    pub fn tag(&self, data: &[u8]) -> MacTag {
        todo!()
    }
    /// Keyed BLAKE3 over the concatenation of `parts` (no allocation), truncated.
    pub fn tag_parts(&self, parts: &[&[u8]]) -> MacTag {
        todo!()
    }
    /// Constant-time comparison of `tag` with the tag of `parts`.
    pub fn verify_parts(&self, parts: &[&[u8]], tag: &MacTag) -> bool {
        todo!()
    }
}

/// Derives a key from `context` (a fixed, unique domain string) and key material
/// (BLAKE3 `derive_key`).
pub fn derive_key(context: &str, material: &[u8]) -> MacKey {
    todo!()
}

/// A long-term Ed25519 identity (replica, client principal or administrator).
pub struct IdentityKey {
    // ed25519_dalek::SigningKey
}

impl IdentityKey {
    /// A new random key (OS randomness).
    pub fn generate() -> Self {
        todo!()
    }
    pub fn from_seed(seed: [u8; 32]) -> Self {
        todo!()
    }
    pub fn public(&self) -> PublicKey {
        todo!()
    }
    pub fn sign(&self, message: &[u8]) -> Signature {
        todo!()
    }
    /// The static MAC key shared with `peer` for request authenticators: X25519 between this
    /// key and the peer's (both Ed25519 keys converted to Montgomery form), fed to
    /// `derive_key("tagma v1 request mac", ...)` together with both public keys in a
    /// canonical (sorted) order, so both ends derive the same key without talking.
    pub fn request_mac_key(&self, peer: &PublicKey) -> Result<MacKey, CryptoError> {
        todo!()
    }
    /// Writes the secret seed as a text file (`tagma-secret-key v1 <hex>`), mode 0600.
    pub fn write_file(&self, path: &std::path::Path) -> std::io::Result<()> {
        todo!()
    }
    /// Reads a file written by [`IdentityKey::write_file`]; errors name the path and the fix.
    pub fn read_file(path: &std::path::Path) -> Result<Self, CryptoError> {
        todo!()
    }
}

/// Verifies an Ed25519 signature (strict verification).
pub fn verify(
    public: &PublicKey,
    message: &[u8],
    signature: &Signature,
) -> Result<(), CryptoError> {
    todo!()
}

/// Parses a 64-hex-digit public key (as written in `tagma.toml`).
pub fn public_key_from_hex(s: &str) -> Result<PublicKey, CryptoError> {
    todo!()
}

/// Client side: precomputed request MAC keys for every replica of a view, in ascending
/// replica-id order, to build [`tagma_wire::RequestAuth::Macs`].
pub struct Authenticator {
    pub keys: Vec<MacKey>,
}

impl Authenticator {
    /// `replicas`: the replicas' public keys in ascending id order.
    pub fn new(client: &IdentityKey, replicas: &[PublicKey]) -> Result<Self, CryptoError> {
        todo!()
    }
    /// One tag per replica over the request digest.
    pub fn tags(&self, request_digest: &Digest) -> Vec<MacTag> {
        todo!()
    }
}

/// Keeps `bytes` referenced so the crate's API can mention `Bytes` (placeholder).
pub type Payload = Bytes;
