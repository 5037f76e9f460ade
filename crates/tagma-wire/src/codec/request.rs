//! Requests as clients send them and batches as the leader proposes them.
//!
//! | type | encoding |
//! |------|----------|
//! | `Request` | client `u64`, seq `u64`, kind `u8` (0 ordered, 1 unordered, 2 reconfigure), view `u32`, payload (`u32` len + bytes) — 25 bytes + payload |
//! | `RequestAuth` | tag `u8`: 0 = Macs (`u8` count, count × 16 bytes); 1 = Signature (64 bytes) |
//! | `RequestEnvelope` | `Request` then `RequestAuth` |
//! | `Batch` | version `u8` ([`WIRE_VERSION`]), timestamp_ms `u64`, seed `u64`, count `u32`, envelopes |
//!
//! A zero-length-payload ordered request with a 4-entry MAC authenticator (a 4-replica view)
//! encodes as a **91-byte** envelope: 25 (request) + 1 (auth tag) + 1 (count) + 4 × 16 (MACs).

use bytes::{BufMut, Bytes, BytesMut};

use super::primitives::{Decode, Encode, Reader, WireError, decode_all, put_bytes, put_len};
use crate::WIRE_VERSION;
use crate::ids::*;
use crate::message::*;

/// Most MAC entries a [`RequestAuth::Macs`] authenticator can carry (its count is a `u8`).
pub const MAX_MAC_ENTRIES: usize = u8::MAX as usize;

/// Encoded size of a [`Request`] without its payload bytes.
pub const REQUEST_HEADER_LEN: usize = 8 + 8 + 1 + 4 + 4;

/// Smallest possible encoded [`RequestEnvelope`] (empty payload, empty MAC vector).
const ENVELOPE_MIN_LEN: usize = REQUEST_HEADER_LEN + 2;

const KIND_ORDERED: u8 = 0;
const KIND_UNORDERED: u8 = 1;
const KIND_RECONFIGURE: u8 = 2;

const AUTH_MACS: u8 = 0;
const AUTH_SIGNATURE: u8 = 1;

pub(super) fn kind_tag(kind: RequestKind) -> u8 {
    match kind {
        RequestKind::Ordered => KIND_ORDERED,
        RequestKind::Unordered => KIND_UNORDERED,
        RequestKind::Reconfigure => KIND_RECONFIGURE,
    }
}

pub(super) fn read_kind(r: &mut Reader<'_>) -> Result<RequestKind, WireError> {
    match r.u8()? {
        KIND_ORDERED => Ok(RequestKind::Ordered),
        KIND_UNORDERED => Ok(RequestKind::Unordered),
        KIND_RECONFIGURE => Ok(RequestKind::Reconfigure),
        tag => Err(WireError::UnknownTag {
            what: "request kind",
            tag,
        }),
    }
}

fn put_request(out: &mut BytesMut, req: &Request) {
    out.put_u64_le(req.client.0);
    out.put_u64_le(req.seq.0);
    out.put_u8(kind_tag(req.kind));
    out.put_u32_le(req.view.0);
    put_bytes(out, &req.payload);
}

fn read_request(r: &mut Reader<'_>) -> Result<Request, WireError> {
    Ok(Request {
        client: ClientId(r.u64()?),
        seq: RequestSeq(r.u64()?),
        kind: read_kind(r)?,
        view: ViewId(r.u32()?),
        payload: r.bytes()?,
    })
}

fn auth_len(auth: &RequestAuth) -> usize {
    match auth {
        RequestAuth::Macs(macs) => 2 + macs.len() * MacTag::LEN,
        RequestAuth::Signature(_) => 1 + Signature::LEN,
    }
}

fn put_auth(out: &mut BytesMut, auth: &RequestAuth) {
    match auth {
        RequestAuth::Macs(macs) => {
            let count = u8::try_from(macs.len())
                .unwrap_or_else(|_| panic!("at most {MAX_MAC_ENTRIES} MAC entries"));
            out.put_u8(AUTH_MACS);
            out.put_u8(count);
            for mac in macs {
                out.put_slice(&mac.0);
            }
        }
        RequestAuth::Signature(sig) => {
            out.put_u8(AUTH_SIGNATURE);
            out.put_slice(&sig.0);
        }
    }
}

fn read_auth(r: &mut Reader<'_>) -> Result<RequestAuth, WireError> {
    match r.u8()? {
        AUTH_MACS => {
            let count = r.u8()? as usize;
            let count = r.check_count(count, MacTag::LEN, "MAC vector")?;
            let mut macs = Vec::with_capacity(count);
            for _ in 0..count {
                macs.push(MacTag(r.array()?));
            }
            Ok(RequestAuth::Macs(macs))
        }
        AUTH_SIGNATURE => Ok(RequestAuth::Signature(Signature(r.array()?))),
        tag => Err(WireError::UnknownTag {
            what: "request auth",
            tag,
        }),
    }
}

pub(super) fn envelope_len(env: &RequestEnvelope) -> usize {
    env.request.encoded_len() + auth_len(&env.auth)
}

pub(super) fn put_envelope(out: &mut BytesMut, env: &RequestEnvelope) {
    put_request(out, &env.request);
    put_auth(out, &env.auth);
}

pub(super) fn read_envelope(r: &mut Reader<'_>) -> Result<RequestEnvelope, WireError> {
    Ok(RequestEnvelope {
        request: read_request(r)?,
        auth: read_auth(r)?,
    })
}

fn batch_len(batch: &Batch) -> usize {
    1 + 8 + 8 + 4 + batch.requests.iter().map(envelope_len).sum::<usize>()
}

fn put_batch(out: &mut BytesMut, batch: &Batch) {
    out.put_u8(WIRE_VERSION);
    out.put_u64_le(batch.timestamp_ms);
    out.put_u64_le(batch.seed);
    put_len(out, batch.requests.len(), "batch");
    for env in &batch.requests {
        put_envelope(out, env);
    }
}

fn read_batch(r: &mut Reader<'_>) -> Result<Batch, WireError> {
    r.version()?;
    let timestamp_ms = r.u64()?;
    let seed = r.u64()?;
    let count = r.u32()? as usize;
    let count = r.check_count(count, ENVELOPE_MIN_LEN, "batch")?;
    let mut requests = Vec::with_capacity(count);
    for _ in 0..count {
        requests.push(read_envelope(r)?);
    }
    Ok(Batch {
        timestamp_ms,
        seed,
        requests,
    })
}

impl Encode for Request {
    fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        put_request(out, self);
    }
    fn encoded_len(&self) -> usize {
        REQUEST_HEADER_LEN + self.payload.len()
    }
}

impl Decode for Request {
    fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        decode_all(bytes, read_request)
    }
}

impl Encode for RequestEnvelope {
    fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        put_envelope(out, self);
    }
    fn encoded_len(&self) -> usize {
        envelope_len(self)
    }
}

impl Decode for RequestEnvelope {
    fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        decode_all(bytes, read_envelope)
    }
}

impl Encode for Batch {
    fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        put_batch(out, self);
    }
    fn encoded_len(&self) -> usize {
        batch_len(self)
    }
}

impl Decode for Batch {
    fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        decode_all(bytes, read_batch)
    }
}

pub(super) fn envelopes_len(envs: &[RequestEnvelope]) -> usize {
    4 + envs.iter().map(envelope_len).sum::<usize>()
}

pub(super) fn put_envelopes(out: &mut BytesMut, envs: &[RequestEnvelope], what: &str) {
    put_len(out, envs.len(), what);
    for env in envs {
        put_envelope(out, env);
    }
}

pub(super) fn read_envelopes(
    r: &mut Reader<'_>,
    what: &'static str,
) -> Result<Vec<RequestEnvelope>, WireError> {
    let count = r.u32()? as usize;
    let count = r.check_count(count, ENVELOPE_MIN_LEN, what)?;
    let mut envs = Vec::with_capacity(count);
    for _ in 0..count {
        envs.push(read_envelope(r)?);
    }
    Ok(envs)
}
