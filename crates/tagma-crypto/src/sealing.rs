//! Sealing private data so that no fewer than `threshold` replicas can ever read it: the
//! building block of private tuple fields in the coordination service (the confidentiality
//! scheme of Bessani, Alchieri, Correia, Fraga: "DepSpace: A Byzantine Fault-Tolerant
//! Coordination Service", with per-replica encryption and read-time share checks in place of
//! publicly verifiable secret sharing).
//!
//! # Scheme
//!
//! **Writer** ([`seal`]). A fresh random 32-byte secret `s` yields the data key
//! (`derive_key("tagma v1 sealing data key", s)`), which encrypts the plaintext with
//! XChaCha20-Poly1305 under a random 24-byte nonce and the caller's associated data (the
//! context the data belongs to: the space and the public part of the tuple). `s` is split
//! with Shamir's scheme over GF(256) (threshold `t`, one share per replica; share `i` has
//! x coordinate `i + 1`). One one-time X25519 key `E` per secret encrypts share `i` to
//! replica `i`: the key comes from X25519(E, R_i), with R_i the replica's Ed25519 key in
//! Montgomery form, derived together with E, R_i, the nonce and `i`. Published with the
//! secret are a commitment per share, `c_i = derive_key("tagma v1 sealing share
//! commitment", share_i | nonce | i)`, and a key check `derive_key("tagma v1 sealing key
//! check", s | nonce)`.
//!
//! **Replica** ([`IdentityKey::open_share`], [`IdentityKey::reseal_share`]). Replica `i`
//! decrypts its own share, and only its own: no other replica's key yields that share's
//! key. It checks the share against `c_i`, and, for a reader, encrypts the share to the
//! reader's one-time key (X25519 between the replica's identity key and the reader's key,
//! with the reader's request context as associated data).
//!
//! **Reader** ([`ShareReader`], [`combine`]). The reader decrypts each replica's reply,
//! drops every share that does not match its published commitment (so a faulty replica's
//! share is caught without trusting it, and its position is reported), rebuilds `s` from
//! `t` good shares, checks it against the key check, and decrypts.
//!
//! # Why each part is there
//!
//! - *Commitments leak nothing useful.* The shared secret is a fresh uniform 256-bit value,
//!   never the data itself. Any `t - 1` shares are uniform and independent of it; every
//!   further share is a bijective function of the secret once `t - 1` shares are fixed. So
//!   a coalition of `t - 1` replicas, holding every commitment, learns one-way hashes of a
//!   256-bit unknown: testing a guess against them is as hard as guessing the key. The nonce
//!   in each commitment keeps equal shares of different secrets from being linked.
//! - *The key check makes readers agree.* Poly1305 is not key-committing: a faulty writer
//!   can build one ciphertext that decrypts under two keys (Dodis, Grubbs, Ristenpart,
//!   Woodage: "Fast Message Franking: From Invisible Salamanders to Encryptment"; Len,
//!   Grubbs, Ristenpart: "Partitioning Oracle Attacks"), and hand different replicas shares
//!   of different polynomials, so readers that combine different subsets would read
//!   different data. A rebuilt secret must match the published one-way check, so every
//!   reader that succeeds holds the same key and reads the same plaintext; a reader whose
//!   `t` commitment-matching shares rebuild another secret gets
//!   [`SealError::InconsistentTuple`], which is evidence that the writer is faulty.
//! - *A replica checks only its own share.* With per-replica encryption no replica can
//!   check the others' shares, so whether a sealed secret is well formed differs between
//!   replicas and must not decide replicated state; faults show up at read time, in
//!   [`combine`], where the reader sees which replica or the writer was at fault.
//! - *Replies need no replica one-time key.* A reply is readable with the replica's
//!   identity key, but that key already opens the replica's share from the stored secret,
//!   so a later leak of it exposes nothing more. The reader's key is fresh per read.
//! - *Constant-time sharing.* The GF(256) arithmetic (vsss-rs) uses no lookup tables, so
//!   its timing and memory accesses do not depend on the secret.
//! - With `t = 1` (a group that tolerates no fault) every share is the secret itself.
//!
//! Secrets, shares, derived keys and the random generator's state are zeroized after use.

mod sealed;

use bytes::Bytes;
use chacha20::ChaCha20Rng;
use chacha20::rand_core::{Rng, SeedableRng};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use tagma_wire::{Digest, KexPublic, PublicKey};
use vsss_rs::{Gf256, IdentifierGf256};
use zeroize::{Zeroize, Zeroizing};

pub use sealed::{
    DecodeError, ENCRYPTED_SHARE_LEN, NONCE_LEN, PLAINTEXT_BYTES_MAX, SECRET_LEN, SHARE_LEN,
    SHARES_MAX, SealedSecret, TAG_LEN,
};

use crate::{EphemeralKey, IdentityKey, ct_eq, montgomery, os_random};

/// `derive_key` context of the data encryption key.
const DATA_KEY_CONTEXT: &str = "tagma v1 sealing data key";
/// `derive_key` context of the published key check.
const KEY_CHECK_CONTEXT: &str = "tagma v1 sealing key check";
/// `derive_key` context of the key that encrypts share `i` to replica `i`.
const SHARE_KEY_CONTEXT: &str = "tagma v1 sealing share key";
/// `derive_key` context of the published share commitments.
const COMMITMENT_CONTEXT: &str = "tagma v1 sealing share commitment";
/// `derive_key` context of the key that encrypts a share to a reader.
const REPLY_KEY_CONTEXT: &str = "tagma v1 sealing share reply key";
/// Associated-data prefix of an encrypted share.
const SHARE_AAD_DOMAIN: &[u8] = b"tagma v1 sealed share\0";
/// Associated-data prefix of a share encrypted to a reader.
const REPLY_AAD_DOMAIN: &[u8] = b"tagma v1 sealed share reply\0";
/// Length of a replica's reply: a random nonce and the encrypted share.
pub const REPLY_LEN: usize = NONCE_LEN + ENCRYPTED_SHARE_LEN;

/// Why sealing, opening or combining failed. Each message says who is at fault where the
/// failure shows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("cannot seal for {replicas} replicas: between 1 and {SHARES_MAX} are supported")]
    ReplicaCount { replicas: usize },
    #[error("threshold {threshold} is not between 1 and the number of replicas ({replicas})")]
    Threshold { threshold: usize, replicas: usize },
    #[error("plaintext of {bytes} bytes exceeds the limit of {PLAINTEXT_BYTES_MAX} bytes")]
    PlaintextTooLong { bytes: usize },
    #[error(
        "the public key of replica {index} is not a usable Ed25519 key (not a curve point, \
         or of small order)"
    )]
    InvalidReplicaKey { index: usize },
    #[error("secret sharing failed: {reason}")]
    Sharing { reason: String },
    #[error("malformed sealed secret: {0}")]
    Malformed(#[from] DecodeError),
    #[error("replica index {index} is out of range: the secret has {shares} shares")]
    UnknownReplica { index: usize, shares: usize },
    #[error("replica index {index} is out of range: a secret has at most {SHARES_MAX} shares")]
    ReplicaIndexTooLarge { index: usize },
    #[error("the writer's one-time key has small order: the writer is faulty")]
    InvalidEphemeralKey,
    #[error(
        "share {index} does not decrypt with this replica's key: it is another replica's \
         share, or the writer sealed it wrongly"
    )]
    ShareUnreadable { index: usize },
    #[error(
        "share {index} does not match its published commitment or position: the writer \
         sealed a wrong share"
    )]
    ShareMismatch { index: usize },
    #[error("the reader's one-time key has small order: refusing to encrypt a share to it")]
    InvalidReaderKey,
    #[error(
        "the reply of replica {index} does not decrypt: it was meant for another reader or \
         request, or it was altered"
    )]
    ReplyUnreadable { index: usize },
    #[error(
        "the reply of replica {index} carries the share of another position: the replica is \
         faulty"
    )]
    ReplyPosition { index: usize },
    #[error("only {good} shares given, {threshold} needed")]
    NotEnoughShares { good: usize, threshold: usize },
    #[error(
        "the shares of replicas {replicas:?} do not match their commitments; the {good} \
         others are fewer than the {threshold} needed"
    )]
    WrongShares {
        replicas: Vec<usize>,
        good: usize,
        threshold: usize,
    },
    #[error(
        "shares that match their commitments rebuild a key other than the committed one: the \
         writer sealed inconsistent shares"
    )]
    InconsistentTuple,
    #[error(
        "the ciphertext does not authenticate with the rebuilt key: it was sealed with other \
         associated data, or altered"
    )]
    Decryption,
}

/// One replica's share of a sealed secret's key, as opened by the replica or by a reader.
/// Its bytes are zeroized when it is dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Share {
    bytes: [u8; SHARE_LEN],
}

impl Share {
    /// The position of the replica this share belongs to.
    pub fn index(&self) -> usize {
        // Constructors only accept x coordinates 1..=255.
        usize::from(self.bytes[0]) - 1
    }
    /// A share from its bytes, which must carry the x coordinate of position `index`.
    fn parse(bytes: &[u8], index: usize) -> Option<Share> {
        let bytes: [u8; SHARE_LEN] = bytes.try_into().ok()?;
        let share = Share { bytes };
        (index < SHARES_MAX && usize::from(share.bytes[0]) == index + 1).then_some(share)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl std::fmt::Debug for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Share(replica {}, ..)", self.index())
    }
}

/// The result of [`combine`]: the data, and the positions of the replicas whose shares did
/// not match their commitments (faulty replicas, to report or suspect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub plaintext: Vec<u8>,
    pub wrong_shares: Vec<usize>,
}

/// Seals `plaintext` for `replicas` (the group's public keys in member order) so that any
/// `threshold` of them together, and no fewer, can let a reader decrypt it. `aad` binds the
/// ciphertext to its context; a reader must present the same bytes to [`combine`].
pub fn seal(
    plaintext: &[u8],
    aad: &[u8],
    replicas: &[PublicKey],
    threshold: usize,
) -> Result<SealedSecret, SealError> {
    let count = replicas.len();
    if count == 0 || count > SHARES_MAX {
        return Err(SealError::ReplicaCount { replicas: count });
    }
    if threshold == 0 || threshold > count {
        return Err(SealError::Threshold {
            threshold,
            replicas: count,
        });
    }
    if plaintext.len() > PLAINTEXT_BYTES_MAX {
        return Err(SealError::PlaintextTooLong {
            bytes: plaintext.len(),
        });
    }
    let replica_kex = replicas
        .iter()
        .enumerate()
        .map(|(index, key)| montgomery(key).map_err(|_| SealError::InvalidReplicaKey { index }))
        .collect::<Result<Vec<_>, _>>()?;

    let mut seed = Zeroizing::new([0u8; 32]);
    os_random(seed.as_mut());
    let mut rng = ChaCha20Rng::from_seed(*seed);
    let mut secret = Zeroizing::new([0u8; SECRET_LEN]);
    rng.fill_bytes(secret.as_mut());
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill_bytes(&mut nonce);

    let ciphertext = aead_seal(&data_key(&secret), &nonce, plaintext, aad).ok_or(
        SealError::PlaintextTooLong {
            bytes: plaintext.len(),
        },
    )?;
    let shares = split(&secret, threshold, count, &mut rng)?;

    let ephemeral = EphemeralKey::generate();
    let ephemeral_public = ephemeral.public();
    let mut encrypted_shares = Vec::with_capacity(count);
    let mut commitments = Vec::with_capacity(count);
    for (index, share) in shares.iter().enumerate() {
        let shared = Zeroizing::new(
            ephemeral
                .agree(&replica_kex[index])
                .map_err(|_| SealError::InvalidReplicaKey { index })?,
        );
        let key = share_key(&shared, &ephemeral_public, &replicas[index], &nonce, index);
        let sealed = aead_seal(&key, &nonce, &share.bytes, &share_aad(&nonce, index))
            .and_then(|bytes| <[u8; ENCRYPTED_SHARE_LEN]>::try_from(bytes).ok())
            .ok_or_else(|| SealError::Sharing {
                reason: format!("share {index} did not encrypt to {ENCRYPTED_SHARE_LEN} bytes"),
            })?;
        encrypted_shares.push(sealed);
        commitments.push(commitment(share, &nonce, index));
    }
    Ok(SealedSecret {
        // 1 <= threshold <= count <= 255, checked above.
        threshold: threshold as u8,
        nonce,
        ephemeral: ephemeral_public,
        key_check: key_check(&secret, &nonce),
        ciphertext: Bytes::from(ciphertext),
        encrypted_shares,
        commitments,
    })
}

impl IdentityKey {
    /// Replica side: decrypts share `index` of `sealed` (this replica's position in the
    /// group it was sealed for) and checks it against its published commitment.
    pub fn open_share(&self, sealed: &SealedSecret, index: usize) -> Result<Share, SealError> {
        let encrypted = sealed
            .encrypted_share(index)
            .ok_or(SealError::UnknownReplica {
                index,
                shares: sealed.shares(),
            })?;
        let shared = Zeroizing::new(
            self.agree(sealed.ephemeral())
                .map_err(|_| SealError::InvalidEphemeralKey)?,
        );
        let key = share_key(
            &shared,
            sealed.ephemeral(),
            &self.public(),
            sealed.nonce(),
            index,
        );
        let plain = aead_open(
            &key,
            sealed.nonce(),
            encrypted,
            &share_aad(sealed.nonce(), index),
        )
        .ok_or(SealError::ShareUnreadable { index })?;
        Share::parse(&plain, index)
            .filter(|share| share_matches(sealed, share, index))
            .ok_or(SealError::ShareMismatch { index })
    }

    /// Replica side: `share` encrypted to a reader's one-time key `reader`, bound to the
    /// reader's request by `context` (the reader passes the same bytes to
    /// [`ShareReader::open_reply`]). The reply must travel over this replica's
    /// authenticated connection, so the reader knows which replica sent it.
    pub fn reseal_share(
        &self,
        share: &Share,
        reader: &KexPublic,
        context: &[u8],
    ) -> Result<Bytes, SealError> {
        let index = share.index();
        let shared = Zeroizing::new(
            self.agree(reader)
                .map_err(|_| SealError::InvalidReaderKey)?,
        );
        let key = reply_key(&shared, reader, &self.public(), index);
        let mut reply = Vec::with_capacity(REPLY_LEN);
        let mut nonce = [0u8; NONCE_LEN];
        os_random(&mut nonce);
        reply.extend_from_slice(&nonce);
        let sealed = aead_seal(&key, &nonce, &share.bytes, &reply_aad(index, context)).ok_or(
            SealError::Sharing {
                reason: "a share did not encrypt".to_string(),
            },
        )?;
        reply.extend_from_slice(&sealed);
        Ok(Bytes::from(reply))
    }
}

/// Reader side: a one-time X25519 key that replicas encrypt their shares to.
#[derive(Debug)]
pub struct ShareReader {
    key: EphemeralKey,
}

impl Default for ShareReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ShareReader {
    /// A reader with a fresh one-time key (OS randomness); use one per read.
    pub fn new() -> Self {
        ShareReader {
            key: EphemeralKey::generate(),
        }
    }
    /// The public key to send to the replicas with the read request.
    pub fn public(&self) -> KexPublic {
        self.key.public()
    }
    /// Decrypts the reply of the replica at position `replica_index`, whose identity key is
    /// `replica_public`; `context` is what the request bound the reply to. The share is not
    /// yet checked against its commitment: [`combine`] does that.
    pub fn open_reply(
        &self,
        replica_index: usize,
        replica_public: &PublicKey,
        reply: &[u8],
        context: &[u8],
    ) -> Result<Share, SealError> {
        if replica_index >= SHARES_MAX {
            return Err(SealError::ReplicaIndexTooLarge {
                index: replica_index,
            });
        }
        let unreadable = SealError::ReplyUnreadable {
            index: replica_index,
        };
        if reply.len() != REPLY_LEN {
            return Err(unreadable);
        }
        let replica_kex = montgomery(replica_public).map_err(|_| SealError::InvalidReplicaKey {
            index: replica_index,
        })?;
        let shared = Zeroizing::new(self.key.agree(&replica_kex).map_err(|_| {
            SealError::InvalidReplicaKey {
                index: replica_index,
            }
        })?);
        let key = reply_key(&shared, &self.public(), replica_public, replica_index);
        let (nonce, sealed) = reply.split_at(NONCE_LEN);
        let nonce: &[u8; NONCE_LEN] = nonce.try_into().map_err(|_| unreadable.clone())?;
        let plain =
            aead_open(&key, nonce, sealed, &reply_aad(replica_index, context)).ok_or(unreadable)?;
        Share::parse(&plain, replica_index).ok_or(SealError::ReplyPosition {
            index: replica_index,
        })
    }
}

/// Reader side: checks `shares` (each with the position of the replica that sent it)
/// against their commitments, rebuilds the key from `threshold` good ones (lowest positions
/// first), checks it against the key check and decrypts with `aad`.
///
/// Succeeds while at least `threshold` shares are good, and reports the others in
/// [`Opened::wrong_shares`].
pub fn combine(
    sealed: &SealedSecret,
    aad: &[u8],
    shares: &[(usize, Share)],
) -> Result<Opened, SealError> {
    let count = sealed.shares();
    let threshold = sealed.threshold();
    let mut good: Vec<&Share> = Vec::with_capacity(threshold);
    let mut is_good = [false; SHARES_MAX];
    let mut wrong: Vec<usize> = Vec::new();
    for (index, share) in shares {
        let index = *index;
        if index >= count {
            return Err(SealError::UnknownReplica {
                index,
                shares: count,
            });
        }
        if share.index() != index || !share_matches(sealed, share, index) {
            wrong.push(index);
        } else if !is_good[index] {
            is_good[index] = true;
            good.push(share);
        }
    }
    wrong.sort_unstable();
    wrong.dedup();
    if good.len() < threshold {
        return Err(if wrong.is_empty() {
            SealError::NotEnoughShares {
                good: good.len(),
                threshold,
            }
        } else {
            SealError::WrongShares {
                replicas: wrong,
                good: good.len(),
                threshold,
            }
        });
    }
    good.sort_unstable_by_key(|share| share.index());
    good.truncate(threshold);
    let secret = rebuild(&good)?;
    if !ct_eq(&key_check(&secret, sealed.nonce()).0, &sealed.key_check().0) {
        return Err(SealError::InconsistentTuple);
    }
    let plaintext = aead_open(&data_key(&secret), sealed.nonce(), sealed.ciphertext(), aad)
        .map(|mut plaintext| std::mem::take(&mut *plaintext))
        .ok_or(SealError::Decryption)?;
    Ok(Opened {
        plaintext,
        wrong_shares: wrong,
    })
}

/// Shamir shares of `secret`, share `i` with x coordinate `i + 1`.
fn split(
    secret: &[u8; SECRET_LEN],
    threshold: usize,
    count: usize,
    rng: &mut ChaCha20Rng,
) -> Result<Vec<Share>, SealError> {
    if threshold == 1 {
        // A constant polynomial: every share is the secret.
        let shares = (0..count)
            .map(|index| {
                let mut bytes = [0u8; SHARE_LEN];
                bytes[0] = (index + 1) as u8;
                bytes[1..].copy_from_slice(secret);
                Share { bytes }
            })
            .collect();
        return Ok(shares);
    }
    let ids = (1..=count).map(|x| IdentifierGf256(Gf256(x as u8)));
    let mut raw = Gf256::split_bytes_with_participant_ids_iter(threshold, count, secret, rng, ids)
        .map_err(|e| SealError::Sharing {
            reason: e.to_string(),
        })?;
    let shares = raw
        .iter()
        .enumerate()
        .map(|(index, bytes)| Share::parse(bytes, index))
        .collect::<Option<Vec<_>>>();
    for bytes in &mut raw {
        bytes.zeroize();
    }
    shares.ok_or_else(|| SealError::Sharing {
        reason: "the sharing returned shares of an unexpected form".to_string(),
    })
}

/// The secret that `shares` (exactly the threshold, distinct positions) interpolate to.
fn rebuild(shares: &[&Share]) -> Result<Zeroizing<[u8; SECRET_LEN]>, SealError> {
    let mut secret = Zeroizing::new([0u8; SECRET_LEN]);
    if let [share] = shares {
        secret.copy_from_slice(&share.bytes[1..]);
        return Ok(secret);
    }
    let mut raw: Vec<Vec<u8>> = shares.iter().map(|share| share.bytes.to_vec()).collect();
    let combined = Gf256::combine_bytes(&raw).map(Zeroizing::new);
    for bytes in &mut raw {
        bytes.zeroize();
    }
    let combined = combined.map_err(|e| SealError::Sharing {
        reason: e.to_string(),
    })?;
    if combined.len() != SECRET_LEN {
        return Err(SealError::Sharing {
            reason: format!("rebuilt {} bytes, not {SECRET_LEN}", combined.len()),
        });
    }
    secret.copy_from_slice(&combined);
    Ok(secret)
}

/// Whether `share` is the one the writer committed to for position `index`.
fn share_matches(sealed: &SealedSecret, share: &Share, index: usize) -> bool {
    sealed
        .commitments()
        .get(index)
        .is_some_and(|published| ct_eq(&commitment(share, sealed.nonce(), index).0, &published.0))
}

fn commitment(share: &Share, nonce: &[u8; NONCE_LEN], index: usize) -> Digest {
    let mut hasher = blake3::Hasher::new_derive_key(COMMITMENT_CONTEXT);
    hasher.update(&share.bytes);
    hasher.update(nonce);
    hasher.update(&(index as u32).to_le_bytes());
    Digest(*hasher.finalize().as_bytes())
}

fn key_check(secret: &[u8; SECRET_LEN], nonce: &[u8; NONCE_LEN]) -> Digest {
    let mut hasher = blake3::Hasher::new_derive_key(KEY_CHECK_CONTEXT);
    hasher.update(secret);
    hasher.update(nonce);
    Digest(*hasher.finalize().as_bytes())
}

fn data_key(secret: &[u8; SECRET_LEN]) -> Zeroizing<[u8; 32]> {
    Zeroizing::new(blake3::derive_key(DATA_KEY_CONTEXT, secret))
}

/// The key of share `index`: X25519 between the writer's one-time key and the replica's,
/// with both public keys, the nonce and the position.
fn share_key(
    shared: &[u8; 32],
    ephemeral: &KexPublic,
    replica: &PublicKey,
    nonce: &[u8; NONCE_LEN],
    index: usize,
) -> Zeroizing<[u8; 32]> {
    let mut hasher = blake3::Hasher::new_derive_key(SHARE_KEY_CONTEXT);
    hasher.update(shared);
    hasher.update(&ephemeral.0);
    hasher.update(&replica.0);
    hasher.update(nonce);
    hasher.update(&(index as u32).to_le_bytes());
    Zeroizing::new(*hasher.finalize().as_bytes())
}

/// The key of a reply: X25519 between the replica's identity key and the reader's one-time
/// key, with both public keys and the replica's position.
fn reply_key(
    shared: &[u8; 32],
    reader: &KexPublic,
    replica: &PublicKey,
    index: usize,
) -> Zeroizing<[u8; 32]> {
    let mut hasher = blake3::Hasher::new_derive_key(REPLY_KEY_CONTEXT);
    hasher.update(shared);
    hasher.update(&reader.0);
    hasher.update(&replica.0);
    hasher.update(&(index as u32).to_le_bytes());
    Zeroizing::new(*hasher.finalize().as_bytes())
}

fn share_aad(nonce: &[u8; NONCE_LEN], index: usize) -> Vec<u8> {
    let mut aad = Vec::with_capacity(SHARE_AAD_DOMAIN.len() + NONCE_LEN + 4);
    aad.extend_from_slice(SHARE_AAD_DOMAIN);
    aad.extend_from_slice(nonce);
    aad.extend_from_slice(&(index as u32).to_le_bytes());
    aad
}

fn reply_aad(index: usize, context: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(REPLY_AAD_DOMAIN.len() + 4 + context.len());
    aad.extend_from_slice(REPLY_AAD_DOMAIN);
    aad.extend_from_slice(&(index as u32).to_le_bytes());
    aad.extend_from_slice(context);
    aad
}

fn aead_seal(key: &[u8; 32], nonce: &[u8; NONCE_LEN], msg: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
    let cipher = XChaCha20Poly1305::new(&Key::from(*key));
    cipher
        .encrypt(&XNonce::from(*nonce), Payload { msg, aad })
        .ok()
}

/// Decrypts into a buffer that is zeroized when dropped.
fn aead_open(
    key: &[u8; 32],
    nonce: &[u8; NONCE_LEN],
    ciphertext: &[u8],
    aad: &[u8],
) -> Option<Zeroizing<Vec<u8>>> {
    let cipher = XChaCha20Poly1305::new(&Key::from(*key));
    cipher
        .decrypt(
            &XNonce::from(*nonce),
            Payload {
                msg: ciphertext,
                aad,
            },
        )
        .ok()
        .map(Zeroizing::new)
}

#[cfg(test)]
mod tests;
