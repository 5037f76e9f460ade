//! The leader change's messages: STOP, the collects a replica signs, STOPDATA and SYNC.
//!
//! | type | encoding |
//! |------|----------|
//! | `Stop` | regency `u32`, count `u32`, envelopes |
//! | `Collect` | replica `u32`, regency `u32`, cid `u64`, write_quorum `Option<(epoch u32, hash 32 bytes)>`, count `u32`, count × (epoch `u32`, batch `u32` len + bytes); epochs strictly ascending |
//! | `SignedCollect` | `Collect` then signature 64 bytes |
//! | `StopData` | regency `u32`, last_decided `Option<DecidedInstance>`, `SignedCollect` |
//! | `Sync` | regency `u32`, last_decided `Option<DecidedInstance>`, count `u32`, count × `SignedCollect`, proposal (`u32` len + bytes) |
//!
//! Ordering constraints (write-set epochs strictly ascending) keep the encoding canonical: the
//! decoder rejects a violation as [`WireError::Invalid`] (`"write set order"`). A
//! [`SignedCollect`]'s signature covers [`collect_signing_bytes`]: `"tagma v1 collect\0"`
//! followed by the `Collect` encoding.

use bytes::{BufMut, Bytes, BytesMut};

use super::consensus::{last_decided_len, put_decided, read_decided};
use super::primitives::{
    Decode, Encode, Reader, WireError, decode_all, option_len, put_bytes, put_len, put_option,
    read_option, standalone,
};
use super::request::{envelopes_len, put_envelopes, read_envelopes};
use crate::ids::*;
use crate::message::*;

/// Smallest possible encoded [`Collect`]: replica, regency, cid, `None`, empty write set.
const COLLECT_MIN_LEN: usize = 4 + 4 + 8 + 1 + 4;

/// Smallest possible encoded [`SignedCollect`].
const SIGNED_COLLECT_MIN_LEN: usize = COLLECT_MIN_LEN + Signature::LEN;

/// Smallest possible encoded write-set entry: epoch and an empty byte field.
const WRITE_ENTRY_MIN_LEN: usize = 4 + 4;

/// Domain separator of [`collect_signing_bytes`].
const COLLECT_DOMAIN: &[u8] = b"tagma v1 collect\0";

pub(super) fn stop_len(stop: &Stop) -> usize {
    4 + envelopes_len(&stop.requests)
}

pub(super) fn put_stop(out: &mut BytesMut, stop: &Stop) {
    out.put_u32_le(stop.regency.0);
    put_envelopes(out, &stop.requests, "stop requests");
}

pub(super) fn read_stop(r: &mut Reader<'_>) -> Result<Stop, WireError> {
    Ok(Stop {
        regency: Regency(r.u32()?),
        requests: read_envelopes(r, "stop requests")?,
    })
}

fn collect_len(collect: &Collect) -> usize {
    4 + 4
        + 8
        + option_len(collect.write_quorum.as_ref(), |_| 4 + Digest::LEN)
        + 4
        + collect
            .write_set
            .iter()
            .map(|(_, batch)| 4 + 4 + batch.len())
            .sum::<usize>()
}

fn put_collect(out: &mut BytesMut, collect: &Collect) {
    out.put_u32_le(collect.replica.0);
    out.put_u32_le(collect.regency.0);
    out.put_u64_le(collect.cid.0);
    put_option(out, collect.write_quorum.as_ref(), |out, (epoch, hash)| {
        out.put_u32_le(epoch.0);
        out.put_slice(&hash.0);
    });
    put_len(out, collect.write_set.len(), "write set");
    for (epoch, batch) in &collect.write_set {
        out.put_u32_le(epoch.0);
        put_bytes(out, batch);
    }
}

fn read_collect(r: &mut Reader<'_>) -> Result<Collect, WireError> {
    let replica = ReplicaId(r.u32()?);
    let regency = Regency(r.u32()?);
    let cid = ConsensusId(r.u64()?);
    let write_quorum = read_option(r, |r| Ok((Epoch(r.u32()?), Digest(r.array()?))))?;
    let count = r.u32()? as usize;
    let count = r.check_count(count, WRITE_ENTRY_MIN_LEN, "write set")?;
    let mut write_set: Vec<(Epoch, Bytes)> = Vec::with_capacity(count);
    for _ in 0..count {
        let epoch = Epoch(r.u32()?);
        if write_set.last().is_some_and(|(prev, _)| prev.0 >= epoch.0) {
            return Err(WireError::Invalid {
                what: "write set order",
            });
        }
        write_set.push((epoch, r.bytes()?));
    }
    Ok(Collect {
        replica,
        regency,
        cid,
        write_quorum,
        write_set,
    })
}

fn signed_collect_len(signed: &SignedCollect) -> usize {
    collect_len(&signed.collect) + Signature::LEN
}

fn put_signed_collect(out: &mut BytesMut, signed: &SignedCollect) {
    put_collect(out, &signed.collect);
    out.put_slice(&signed.signature.0);
}

fn read_signed_collect(r: &mut Reader<'_>) -> Result<SignedCollect, WireError> {
    Ok(SignedCollect {
        collect: read_collect(r)?,
        signature: Signature(r.array()?),
    })
}

pub(super) fn stop_data_len(sd: &StopData) -> usize {
    4 + last_decided_len(&sd.last_decided) + signed_collect_len(&sd.collect)
}

pub(super) fn put_stop_data(out: &mut BytesMut, sd: &StopData) {
    out.put_u32_le(sd.regency.0);
    put_option(out, sd.last_decided.as_ref(), put_decided);
    put_signed_collect(out, &sd.collect);
}

pub(super) fn read_stop_data(r: &mut Reader<'_>) -> Result<StopData, WireError> {
    Ok(StopData {
        regency: Regency(r.u32()?),
        last_decided: read_option(r, read_decided)?,
        collect: read_signed_collect(r)?,
    })
}

pub(super) fn sync_len(sync: &Sync) -> usize {
    4 + last_decided_len(&sync.last_decided)
        + 4
        + sync.collects.iter().map(signed_collect_len).sum::<usize>()
        + 4
        + sync.proposal.len()
}

pub(super) fn put_sync(out: &mut BytesMut, sync: &Sync) {
    out.put_u32_le(sync.regency.0);
    put_option(out, sync.last_decided.as_ref(), put_decided);
    put_len(out, sync.collects.len(), "sync collects");
    for signed in &sync.collects {
        put_signed_collect(out, signed);
    }
    put_bytes(out, &sync.proposal);
}

pub(super) fn read_sync(r: &mut Reader<'_>) -> Result<Sync, WireError> {
    let regency = Regency(r.u32()?);
    let last_decided = read_option(r, read_decided)?;
    let count = r.u32()? as usize;
    let count = r.check_count(count, SIGNED_COLLECT_MIN_LEN, "sync collects")?;
    let mut collects = Vec::with_capacity(count);
    for _ in 0..count {
        collects.push(read_signed_collect(r)?);
    }
    Ok(Sync {
        regency,
        last_decided,
        collects,
        proposal: r.bytes()?,
    })
}

/// The bytes a [`SignedCollect`] signature covers: the domain separator `"tagma v1 collect\0"`
/// followed by the collect's encoding.
pub fn collect_signing_bytes(collect: &Collect) -> Bytes {
    let mut out = BytesMut::with_capacity(COLLECT_DOMAIN.len() + collect_len(collect));
    out.put_slice(COLLECT_DOMAIN);
    put_collect(&mut out, collect);
    out.freeze()
}

standalone!(Stop, put_stop, read_stop, stop_len);
standalone!(Collect, put_collect, read_collect, collect_len);
standalone!(
    SignedCollect,
    put_signed_collect,
    read_signed_collect,
    signed_collect_len
);
standalone!(StopData, put_stop_data, read_stop_data, stop_data_len);
standalone!(Sync, put_sync, read_sync, sync_len);
