//! The stored form of a sealed secret ([`SealedSecret`]) and its canonical byte encoding.
//!
//! The encoding is what a writer sends and what the replicas store and return: every field
//! has one representation, integers are little-endian, and the decoder rejects anything else
//! (unknown version, bad threshold, truncation, trailing bytes) with a [`DecodeError`] instead
//! of panicking. Its size is bounded twice: at most [`SHARES_MAX`] shares, and at most the
//! `sealed_bytes_max` the caller passes to [`SealedSecret::decode`].
//!
//! Layout: `version u8 (1) | threshold u8 | share count u8 | nonce [24] | ephemeral X25519
//! public key [32] | key check [32] | ciphertext length u32 | ciphertext | share count ×
//! encrypted share [49] | share count × share commitment [32]`.

use bytes::Bytes;
use tagma_wire::{Digest, KexPublic};

/// Length of the XChaCha20-Poly1305 nonce.
pub const NONCE_LEN: usize = 24;
/// Length of the Poly1305 tag that every ciphertext carries.
pub const TAG_LEN: usize = 16;
/// Length of the secret data key that is shared among the replicas.
pub const SECRET_LEN: usize = 32;
/// Length of one share: its x coordinate (the replica's position plus one) and one
/// GF(256) value per byte of the data key.
pub const SHARE_LEN: usize = 1 + SECRET_LEN;
/// Length of one share encrypted to its replica.
pub const ENCRYPTED_SHARE_LEN: usize = SHARE_LEN + TAG_LEN;
/// The most shares (replicas) a secret can be shared among: GF(256) has 255 non-zero
/// x coordinates.
pub const SHARES_MAX: usize = 255;
/// The longest plaintext that can be sealed (the ciphertext length is a u32).
pub const PLAINTEXT_BYTES_MAX: usize = u32::MAX as usize - TAG_LEN;

/// Encoding version written first.
const VERSION: u8 = 1;
/// Bytes before the ciphertext: version, threshold, share count, nonce, ephemeral key, key
/// check, ciphertext length.
const HEADER_LEN: usize = 3 + NONCE_LEN + 32 + 32 + 4;

/// Why bytes are not a [`SealedSecret`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("sealed secret of {bytes} bytes exceeds the limit of {max} bytes")]
    TooLong { bytes: usize, max: usize },
    #[error("sealed secret truncated: {needed} bytes needed, {available} present")]
    Truncated { needed: usize, available: usize },
    #[error("unknown sealed secret version {found} (this build reads version {VERSION})")]
    Version { found: u8 },
    #[error("sealed secret has no shares")]
    NoShares,
    #[error("sealed secret threshold {threshold} is not between 1 and its {shares} shares")]
    Threshold { threshold: usize, shares: usize },
    #[error(
        "sealed secret ciphertext of {bytes} bytes is shorter than its {TAG_LEN}-byte \
         authentication tag"
    )]
    CiphertextTooShort { bytes: usize },
    #[error("{count} bytes follow the end of the sealed secret")]
    TrailingBytes { count: usize },
}

/// Private data sealed for a group of replicas: the data encrypted under a fresh key, that
/// key split into one share per replica (any `threshold` of which rebuild it), each share
/// encrypted to its replica, and the public checks a reader uses to spot wrong shares.
///
/// Share `i` belongs to the replica at position `i` of the replica list given to
/// [`super::seal`]. The fields hold the invariants the decoder checks (1 ≤ threshold ≤
/// shares ≤ 255, one commitment per share, a ciphertext at least a tag long), so
/// [`SealedSecret::encode`] cannot fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub(super) threshold: u8,
    pub(super) nonce: [u8; NONCE_LEN],
    pub(super) ephemeral: KexPublic,
    pub(super) key_check: Digest,
    pub(super) ciphertext: Bytes,
    pub(super) encrypted_shares: Vec<[u8; ENCRYPTED_SHARE_LEN]>,
    pub(super) commitments: Vec<Digest>,
}

impl SealedSecret {
    /// How many shares rebuild the data key (f+1 for a group that tolerates f faults).
    pub fn threshold(&self) -> usize {
        usize::from(self.threshold)
    }
    /// How many shares there are: one per replica of the group it was sealed for.
    pub fn shares(&self) -> usize {
        self.encrypted_shares.len()
    }
    /// The random nonce of the data encryption; it also separates this secret's share keys
    /// and commitments from every other secret's.
    pub fn nonce(&self) -> &[u8; NONCE_LEN] {
        &self.nonce
    }
    /// The writer's one-time X25519 public key, against which replica `i` derives the key
    /// of its share.
    pub fn ephemeral(&self) -> &KexPublic {
        &self.ephemeral
    }
    /// A one-way check value of the data key: a rebuilt key that does not match it did not
    /// come from consistent shares.
    pub fn key_check(&self) -> &Digest {
        &self.key_check
    }
    /// The data encrypted with XChaCha20-Poly1305 (tag included).
    pub fn ciphertext(&self) -> &Bytes {
        &self.ciphertext
    }
    /// Share `index` encrypted to replica `index`, or `None` past the last share.
    pub fn encrypted_share(&self, index: usize) -> Option<&[u8; ENCRYPTED_SHARE_LEN]> {
        self.encrypted_shares.get(index)
    }
    /// The published commitment of every share, in replica order.
    pub fn commitments(&self) -> &[Digest] {
        &self.commitments
    }

    /// Length of [`SealedSecret::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.ciphertext.len() + self.shares() * (ENCRYPTED_SHARE_LEN + Digest::LEN)
    }

    /// The canonical encoding (layout in the module documentation).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(VERSION);
        out.push(self.threshold);
        // At most SHARES_MAX (255) shares and a ciphertext of at most u32::MAX bytes, by
        // construction (seal) or by decoding.
        out.push(self.shares() as u8);
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(&self.ephemeral.0);
        out.extend_from_slice(&self.key_check.0);
        out.extend_from_slice(&(self.ciphertext.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.ciphertext);
        for share in &self.encrypted_shares {
            out.extend_from_slice(share);
        }
        for commitment in &self.commitments {
            out.extend_from_slice(&commitment.0);
        }
        out
    }

    /// Decodes [`SealedSecret::encode`]'s output, refusing input longer than
    /// `sealed_bytes_max` and anything that is not exactly one canonical encoding.
    pub fn decode(input: &[u8], sealed_bytes_max: usize) -> Result<Self, DecodeError> {
        if input.len() > sealed_bytes_max {
            return Err(DecodeError::TooLong {
                bytes: input.len(),
                max: sealed_bytes_max,
            });
        }
        let mut reader = Reader { input, at: 0 };
        let [version, threshold, shares] = reader.array::<3>()?;
        if version != VERSION {
            return Err(DecodeError::Version { found: version });
        }
        if shares == 0 {
            return Err(DecodeError::NoShares);
        }
        if threshold == 0 || threshold > shares {
            return Err(DecodeError::Threshold {
                threshold: usize::from(threshold),
                shares: usize::from(shares),
            });
        }
        let nonce = reader.array::<NONCE_LEN>()?;
        let ephemeral = KexPublic(reader.array::<32>()?);
        let key_check = Digest(reader.array::<32>()?);
        let ciphertext_len = u32::from_le_bytes(reader.array::<4>()?) as usize;
        if ciphertext_len < TAG_LEN {
            return Err(DecodeError::CiphertextTooShort {
                bytes: ciphertext_len,
            });
        }
        let ciphertext = Bytes::copy_from_slice(reader.take(ciphertext_len)?);
        let shares = usize::from(shares);
        // Check the whole remaining length before allocating for the shares.
        let rest = shares * (ENCRYPTED_SHARE_LEN + Digest::LEN);
        reader.ensure(rest)?;
        let mut encrypted_shares = Vec::with_capacity(shares);
        for _ in 0..shares {
            encrypted_shares.push(reader.array::<ENCRYPTED_SHARE_LEN>()?);
        }
        let mut commitments = Vec::with_capacity(shares);
        for _ in 0..shares {
            commitments.push(Digest(reader.array::<32>()?));
        }
        let trailing = input.len() - reader.at;
        if trailing != 0 {
            return Err(DecodeError::TrailingBytes { count: trailing });
        }
        Ok(SealedSecret {
            threshold,
            nonce,
            ephemeral,
            key_check,
            ciphertext,
            encrypted_shares,
            commitments,
        })
    }
}

/// A cursor over the input that never reads past its end.
struct Reader<'a> {
    input: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn ensure(&self, len: usize) -> Result<(), DecodeError> {
        let available = self.input.len() - self.at;
        if len > available {
            return Err(DecodeError::Truncated {
                needed: self.at.saturating_add(len),
                available: self.input.len(),
            });
        }
        Ok(())
    }
    fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        self.ensure(len)?;
        let slice = &self.input[self.at..self.at + len];
        self.at += len;
        Ok(slice)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
}
