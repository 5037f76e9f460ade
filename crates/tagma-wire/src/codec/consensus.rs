//! The normal case's votes and what they prove: WRITE and ACCEPT votes, signed ACCEPTs, decision
//! proofs (a quorum of signed ACCEPTs, signers strictly ascending) and decided instances.
//!
//! | type | encoding |
//! |------|----------|
//! | `Vote` | cid `u64`, epoch `u32`, hash 32 bytes — 44 bytes |
//! | `Accept` | `Vote` then signature 64 bytes — 108 bytes |
//! | `DecisionProof` | epoch `u32`, count `u32`, count × (replica `u32`, signature 64 bytes); signers strictly ascending |
//! | `DecidedInstance` | cid `u64`, batch (`u32` len + encoded `Batch`, carried opaquely), `DecisionProof` |

use bytes::{BufMut, Bytes, BytesMut};

use super::primitives::{
    Decode, Encode, Reader, WireError, decode_all, option_len, put_bytes, put_len, standalone,
};
use crate::ids::*;
use crate::message::*;

pub(super) const VOTE_LEN: usize = 8 + 4 + Digest::LEN;

/// Encoded size of an [`Accept`]: the vote then the signature.
pub(super) const ACCEPT_LEN: usize = VOTE_LEN + Signature::LEN;

/// Encoded size of one [`DecisionProof`] entry: signer then signature.
const PROOF_ENTRY_LEN: usize = 4 + Signature::LEN;

pub(super) fn put_vote(out: &mut BytesMut, vote: &Vote) {
    out.put_u64_le(vote.cid.0);
    out.put_u32_le(vote.epoch.0);
    out.put_slice(&vote.hash.0);
}

pub(super) fn read_vote(r: &mut Reader<'_>) -> Result<Vote, WireError> {
    Ok(Vote {
        cid: ConsensusId(r.u64()?),
        epoch: Epoch(r.u32()?),
        hash: Digest(r.array()?),
    })
}

pub(super) fn put_accept(out: &mut BytesMut, accept: &Accept) {
    put_vote(out, &accept.vote);
    out.put_slice(&accept.signature.0);
}

pub(super) fn read_accept(r: &mut Reader<'_>) -> Result<Accept, WireError> {
    Ok(Accept {
        vote: read_vote(r)?,
        signature: Signature(r.array()?),
    })
}

fn proof_len(proof: &DecisionProof) -> usize {
    4 + 4 + proof.accepts.len() * PROOF_ENTRY_LEN
}

fn put_proof(out: &mut BytesMut, proof: &DecisionProof) {
    out.put_u32_le(proof.epoch.0);
    put_len(out, proof.accepts.len(), "decision proof");
    for (signer, signature) in &proof.accepts {
        out.put_u32_le(signer.0);
        out.put_slice(&signature.0);
    }
}

fn read_proof(r: &mut Reader<'_>) -> Result<DecisionProof, WireError> {
    let epoch = Epoch(r.u32()?);
    let count = r.u32()? as usize;
    let count = r.check_count(count, PROOF_ENTRY_LEN, "decision proof")?;
    let mut accepts: Vec<(ReplicaId, Signature)> = Vec::with_capacity(count);
    for _ in 0..count {
        let signer = ReplicaId(r.u32()?);
        if accepts.last().is_some_and(|(prev, _)| prev.0 >= signer.0) {
            return Err(WireError::Invalid {
                what: "proof signers order",
            });
        }
        accepts.push((signer, Signature(r.array()?)));
    }
    Ok(DecisionProof { epoch, accepts })
}

pub(super) fn decided_len(decided: &DecidedInstance) -> usize {
    8 + 4 + decided.batch.len() + proof_len(&decided.proof)
}

pub(super) fn put_decided(out: &mut BytesMut, decided: &DecidedInstance) {
    out.put_u64_le(decided.cid.0);
    put_bytes(out, &decided.batch);
    put_proof(out, &decided.proof);
}

pub(super) fn read_decided(r: &mut Reader<'_>) -> Result<DecidedInstance, WireError> {
    Ok(DecidedInstance {
        cid: ConsensusId(r.u64()?),
        batch: r.bytes()?,
        proof: read_proof(r)?,
    })
}

pub(super) fn last_decided_len(decided: &Option<DecidedInstance>) -> usize {
    option_len(decided.as_ref(), decided_len)
}

standalone!(Accept, put_accept, read_accept, |_: &Accept| ACCEPT_LEN);
standalone!(DecisionProof, put_proof, read_proof, proof_len);
standalone!(DecidedInstance, put_decided, read_decided, decided_len);
