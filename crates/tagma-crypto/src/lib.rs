//! `tagma-crypto`: digests, MACs, signatures, key files, the key-exchange primitives and the
//! sealing of private data among replicas ([`sealing`]).
//!
//! Choices (each the fastest well-kept crate measured for its job): BLAKE3 for every hash, keyed BLAKE3
//! truncated to 16 bytes for MACs, Ed25519 (ed25519-dalek) for identities and signatures,
//! X25519 for key exchange. One crate for the whole cryptographic surface keeps the choices in
//! one place.

use std::fmt;
use std::io::Read;
use std::path::Path;

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use tagma_wire::{Digest, KexPublic, MacTag, PublicKey, Request, Signature};

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

/// Domain separator of [`request_digest`].
const REQUEST_DOMAIN: &[u8] = b"tagma v1 request\0";
/// `derive_key` context of the static client/replica request MAC keys.
const REQUEST_MAC_CONTEXT: &str = "tagma v1 request mac";
/// First line prefix of a secret key file.
const KEY_FILE_PREFIX: &str = "tagma-secret-key v1 ";
/// Largest secret key file we read (the real one is 85 bytes).
const KEY_FILE_MAX: u64 = 4096;

/// BLAKE3 of `bytes`.
pub fn digest(bytes: &[u8]) -> Digest {
    Digest(*blake3::hash(bytes).as_bytes())
}

/// BLAKE3 of the concatenation of `parts` (no allocation).
pub fn digest_parts(parts: &[&[u8]]) -> Digest {
    let mut hasher = blake3::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    Digest(*hasher.finalize().as_bytes())
}

/// The digest that a request's MACs and signature cover: BLAKE3 over a fixed domain
/// separator, the request's header fields (client, seq, kind, view) and its payload.
///
/// Layout hashed: `"tagma v1 request\0" | client u64 LE | seq u64 LE | kind u8 | view u32 LE |
/// payload length u64 LE | payload`.
pub fn request_digest(request: &Request) -> Digest {
    let mut hasher = blake3::Hasher::new();
    hasher.update(REQUEST_DOMAIN);
    hasher.update(&request.client.0.to_le_bytes());
    hasher.update(&request.seq.0.to_le_bytes());
    hasher.update(&[request.kind as u8]);
    hasher.update(&request.view.0.to_le_bytes());
    hasher.update(&(request.payload.len() as u64).to_le_bytes());
    hasher.update(&request.payload);
    Digest(*hasher.finalize().as_bytes())
}

/// A 32-byte MAC key.
#[derive(Clone)]
pub struct MacKey(pub [u8; 32]);

impl fmt::Debug for MacKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MacKey(..)")
    }
}

impl MacKey {
    /// Keyed BLAKE3 over `data`, truncated to 16 bytes.
    pub fn tag(&self, data: &[u8]) -> MacTag {
        self.tag_parts(&[data])
    }
    /// Keyed BLAKE3 over the concatenation of `parts` (no allocation), truncated.
    pub fn tag_parts(&self, parts: &[&[u8]]) -> MacTag {
        let mut hasher = blake3::Hasher::new_keyed(&self.0);
        for part in parts {
            hasher.update(part);
        }
        let full = hasher.finalize();
        let mut tag = [0u8; MacTag::LEN];
        tag.copy_from_slice(&full.as_bytes()[..MacTag::LEN]);
        MacTag(tag)
    }
    /// Keyed BLAKE3 over the concatenation of `parts`, all 32 bytes: a pseudorandom
    /// function of the data under this key (what a keyed lookup hash needs, where a MAC tag's
    /// 16 bytes would do for authentication only).
    pub fn keyed_digest(&self, parts: &[&[u8]]) -> Digest {
        let mut hasher = blake3::Hasher::new_keyed(&self.0);
        for part in parts {
            hasher.update(part);
        }
        Digest(*hasher.finalize().as_bytes())
    }
    /// Constant-time comparison of `tag` with the tag of `parts`.
    pub fn verify_parts(&self, parts: &[&[u8]], tag: &MacTag) -> bool {
        let expected = self.tag_parts(parts);
        ct_eq(&expected.0, &tag.0)
    }
}

/// Constant-time equality of two equal-length byte arrays.
fn ct_eq<const N: usize>(a: &[u8; N], b: &[u8; N]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b.iter()) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// Derives a key from `context` (a fixed, unique domain string) and key material
/// (BLAKE3 `derive_key`).
pub fn derive_key(context: &str, material: &[u8]) -> MacKey {
    MacKey(blake3::derive_key(context, material))
}

/// Fills `buf` from the operating system's randomness source (keys a caller generates, such
/// as a coordination service's space keys).
///
/// # Panics
/// If the OS refuses to provide randomness (no safe way to continue).
pub fn random_bytes(buf: &mut [u8]) {
    os_random(buf);
}

/// Fills `buf` from the operating system's randomness source.
///
/// # Panics
/// If the OS refuses to provide randomness (no safe way to continue).
fn os_random(buf: &mut [u8]) {
    if let Err(e) = getrandom::fill(buf) {
        panic!("operating system randomness unavailable: {e}");
    }
}

/// A long-term Ed25519 identity (replica, client principal or administrator).
#[derive(Clone)]
pub struct IdentityKey {
    signing: SigningKey,
}

impl fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdentityKey(public {})", self.public().to_hex())
    }
}

impl IdentityKey {
    /// A new random key (OS randomness).
    pub fn generate() -> Self {
        let mut seed = [0u8; 32];
        os_random(&mut seed);
        let key = Self::from_seed(seed);
        seed.fill(0);
        key
    }
    pub fn from_seed(seed: [u8; 32]) -> Self {
        IdentityKey {
            signing: SigningKey::from_bytes(&seed),
        }
    }
    pub fn public(&self) -> PublicKey {
        PublicKey(self.signing.verifying_key().to_bytes())
    }
    pub fn sign(&self, message: &[u8]) -> Signature {
        Signature(self.signing.sign(message).to_bytes())
    }
    /// The static MAC key shared with `peer` for request authenticators: X25519 between this
    /// key and the peer's (both Ed25519 keys converted to Montgomery form), fed to
    /// `derive_key("tagma v1 request mac", ...)` together with both public keys in a
    /// canonical (sorted) order, so both ends derive the same key without talking.
    pub fn request_mac_key(&self, peer: &PublicKey) -> Result<MacKey, CryptoError> {
        let mut shared = self.agree(&montgomery(peer)?)?;
        let own = self.public();
        let (lo, hi) = if own.0 <= peer.0 {
            (own.0, peer.0)
        } else {
            (peer.0, own.0)
        };
        let mut material = [0u8; 96];
        material[..32].copy_from_slice(&shared);
        material[32..64].copy_from_slice(&lo);
        material[64..].copy_from_slice(&hi);
        let key = derive_key(REQUEST_MAC_CONTEXT, &material);
        material.fill(0);
        shared.fill(0);
        Ok(key)
    }
    /// X25519 between this key's scalar and `peer` (an X25519 public key, or an Ed25519 key
    /// in Montgomery form); refuses a small-order peer key, whose "shared" secret would be
    /// all zeros and so known to everyone.
    pub(crate) fn agree(&self, peer: &KexPublic) -> Result<[u8; 32], CryptoError> {
        let mut scalar = self.signing.to_scalar_bytes();
        let shared = x25519_dalek::x25519(scalar, peer.0);
        scalar.fill(0);
        if shared == [0u8; 32] {
            return Err(CryptoError::InvalidPublicKey);
        }
        Ok(shared)
    }
    /// Writes the secret seed as a text file (`tagma-secret-key v1 <hex>`), mode 0600.
    pub fn write_file(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        // `mode` only applies when the file is created: tighten a pre-existing file too.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        let line = format!(
            "{KEY_FILE_PREFIX}{}\n",
            hex::encode(self.signing.as_bytes())
        );
        file.write_all(line.as_bytes())?;
        file.sync_all()
    }
    /// Reads a file written by [`IdentityKey::write_file`]; errors name the path and the fix.
    pub fn read_file(path: &Path) -> Result<Self, CryptoError> {
        let shown = path.display().to_string();
        let err = |reason: String| CryptoError::KeyFile {
            path: shown.clone(),
            reason,
        };
        let file = std::fs::File::open(path).map_err(|e| {
            err(match e.kind() {
                std::io::ErrorKind::NotFound => {
                    format!("file not found: run `tagma keygen --out {shown}` or `tagma init`")
                }
                std::io::ErrorKind::PermissionDenied => "permission denied: the file must be \
                     readable by the user running tagma (and by nobody else: chmod 600)"
                    .to_string(),
                _ => format!("cannot open: {e}"),
            })
        })?;
        let mut text = String::new();
        file.take(KEY_FILE_MAX + 1)
            .read_to_string(&mut text)
            .map_err(|e| {
                err(match e.kind() {
                    std::io::ErrorKind::InvalidData => {
                        "not a tagma secret key (not UTF-8 text); regenerate it with \
                         `tagma keygen --out PATH`"
                            .to_string()
                    }
                    _ => format!("cannot read: {e}"),
                })
            })?;
        let bad_format = || {
            err(format!(
                "not a tagma secret key (expected one line `{KEY_FILE_PREFIX}<64 hex digits>`); \
                 regenerate it with `tagma keygen --out {shown}`"
            ))
        };
        if text.len() as u64 > KEY_FILE_MAX {
            return Err(bad_format());
        }
        let hex_part = text
            .trim_end()
            .strip_prefix(KEY_FILE_PREFIX)
            .ok_or_else(bad_format)?;
        if hex_part.len() != 64 {
            return Err(bad_format());
        }
        let mut seed = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut seed).map_err(|_| bad_format())?;
        let key = Self::from_seed(seed);
        seed.fill(0);
        Ok(key)
    }
}

/// The X25519 (Montgomery) form of an Ed25519 public key, so that one identity key serves
/// both signatures and key agreement.
pub(crate) fn montgomery(public: &PublicKey) -> Result<KexPublic, CryptoError> {
    let key = VerifyingKey::from_bytes(&public.0).map_err(|_| CryptoError::InvalidPublicKey)?;
    Ok(KexPublic(key.to_montgomery().to_bytes()))
}

/// Verifies an Ed25519 signature (strict verification).
pub fn verify(
    public: &PublicKey,
    message: &[u8],
    signature: &Signature,
) -> Result<(), CryptoError> {
    VerifyKey::new(public)?.verify(message, signature)
}

/// An Ed25519 public key decompressed once, for keys that verify many signatures (the
/// members' keys checking ACCEPTs and collects): saves the point decompression (~6 µs here)
/// that every [`verify`] call pays. Verification is the same strict check as [`verify`].
#[derive(Clone, Debug)]
pub struct VerifyKey {
    key: VerifyingKey,
    public: PublicKey,
}

impl VerifyKey {
    pub fn new(public: &PublicKey) -> Result<Self, CryptoError> {
        let key = VerifyingKey::from_bytes(&public.0).map_err(|_| CryptoError::InvalidPublicKey)?;
        Ok(VerifyKey {
            key,
            public: *public,
        })
    }
    pub fn public(&self) -> &PublicKey {
        &self.public
    }
    pub fn verify(&self, message: &[u8], signature: &Signature) -> Result<(), CryptoError> {
        let sig = ed25519_dalek::Signature::from_bytes(&signature.0);
        self.key
            .verify_strict(message, &sig)
            .map_err(|_| CryptoError::BadSignature)
    }
}

/// Parses a 64-hex-digit public key (as written in `tagma.toml`).
pub fn public_key_from_hex(s: &str) -> Result<PublicKey, CryptoError> {
    if s.len() != 64 {
        return Err(CryptoError::Hex(format!(
            "expected 64 hex digits (an Ed25519 public key), got {} characters",
            s.chars().count()
        )));
    }
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(s, &mut bytes).map_err(|e| {
        CryptoError::Hex(format!(
            "expected 64 hex digits (an Ed25519 public key): {e}"
        ))
    })?;
    let key = VerifyingKey::from_bytes(&bytes).map_err(|_| {
        CryptoError::Hex(format!(
            "{s} is not an Ed25519 public key (not a point on the curve)"
        ))
    })?;
    if key.is_weak() {
        return Err(CryptoError::Hex(format!(
            "{s} is a weak (small-order) Ed25519 public key"
        )));
    }
    Ok(PublicKey(bytes))
}

/// A fresh X25519 key for one handshake (the ephemeral half of the key exchange).
pub struct EphemeralKey {
    secret: x25519_dalek::StaticSecret,
}

impl fmt::Debug for EphemeralKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EphemeralKey(public {})", self.public().to_hex())
    }
}

impl EphemeralKey {
    /// A new random key (OS randomness).
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        os_random(&mut bytes);
        let secret = x25519_dalek::StaticSecret::from(bytes);
        bytes.fill(0);
        EphemeralKey { secret }
    }
    /// The public half, sent in the handshake `Hello`.
    pub fn public(&self) -> KexPublic {
        KexPublic(x25519_dalek::PublicKey::from(&self.secret).to_bytes())
    }
    /// The X25519 shared secret with `peer`; refuses a non-contributory (small-order) peer
    /// key, whose shared secret would be all zeros.
    pub fn agree(&self, peer: &KexPublic) -> Result<[u8; 32], CryptoError> {
        let shared = self
            .secret
            .diffie_hellman(&x25519_dalek::PublicKey::from(peer.0));
        if !shared.was_contributory() {
            return Err(CryptoError::InvalidPublicKey);
        }
        Ok(shared.to_bytes())
    }
}

/// Client side: precomputed request MAC keys for every replica of a view, in ascending
/// replica-id order, to build [`tagma_wire::RequestAuth::Macs`].
pub struct Authenticator {
    pub keys: Vec<MacKey>,
}

impl Authenticator {
    /// `replicas`: the replicas' public keys in ascending id order.
    pub fn new(client: &IdentityKey, replicas: &[PublicKey]) -> Result<Self, CryptoError> {
        let keys = replicas
            .iter()
            .map(|r| client.request_mac_key(r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Authenticator { keys })
    }
    /// One tag per replica over the request digest.
    pub fn tags(&self, request_digest: &Digest) -> Vec<MacTag> {
        self.keys
            .iter()
            .map(|k| k.tag(request_digest.as_bytes()))
            .collect()
    }
}

pub mod sealing;

#[cfg(test)]
mod tests;
