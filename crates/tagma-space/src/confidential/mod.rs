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

mod error;
mod keys;
mod space;
mod transform;

pub use error::ConfidentialError;
pub use keys::{SealingGroup, SpaceKey};
pub use space::{ConfidentialCas, ConfidentialSpace, RevealedReplacement, SHARE_TIMEOUT};
pub use transform::{Confidential, Revealed};

#[cfg(test)]
mod tests;
