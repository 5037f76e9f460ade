//! The binary encoding: traits, typed errors, and the byte-level reader/writer.
//!
//! # Layout
//!
//! - Integers are fixed-width little-endian (`u8`, `u32`, `u64`); identifiers are encoded as
//!   their inner integer, fixed-size values ([`Digest`], [`MacTag`], [`Signature`], ...) as
//!   their raw bytes.
//! - Variable-length byte fields (payloads, the batch carried by a PROPOSE) are a `u32` length
//!   followed by the bytes. Vector counts are `u32`, except MAC vectors whose count is a `u8`
//!   (at most [`MAX_MAC_ENTRIES`] entries).
//! - Before anything is allocated for a length or count, it is checked against the bytes that
//!   remain (`count × minimum element size ≤ remaining`), so hostile input can never make the
//!   decoder allocate more than the input size; violations are [`WireError::Truncated`] (byte
//!   fields) or [`WireError::TooLong`] (counts).
//! - Enumerations are a `u8` tag; an unknown tag is [`WireError::UnknownTag`]. Every value has
//!   exactly one encoding, so decode-then-encode reproduces the input bytes exactly.
//! - Byte fields decode as zero-copy [`Bytes::slice`]s of the input buffer.
//! - Decoding a whole value rejects trailing bytes ([`WireError::TrailingBytes`]).
//!
//! | type | encoding |
//! |------|----------|
//! | `Request` | client `u64`, seq `u64`, kind `u8` (0 ordered, 1 unordered, 2 reconfigure), view `u32`, payload (`u32` len + bytes) — 25 bytes + payload |
//! | `ViewMember` | id `u32`, address (`u32` len + UTF-8), key 32 bytes |
//! | `View` | id `u32`, f `u32`, count `u32`, members (ids strictly ascending) |
//! | `ViewOp` | tag `u8`: 0 = Add (`ViewMember`); 1 = Remove (id `u32`); 2 = SetF (f `u32`) |
//! | `ReconfigureOutcome` | tag `u8`: 0 = Installed (`View`); 1 = Refused (reason: `u32` len + UTF-8) |
//! | `ViewChange` | view `u32`, count `u32`, ops, signature 64 bytes; signed bytes: `"tagma/view-change/v1"`, view `u32`, count `u32`, ops |
//! | `RequestAuth` | tag `u8`: 0 = Macs (`u8` count, count × 16 bytes); 1 = Signature (64 bytes) |
//! | `RequestEnvelope` | `Request` then `RequestAuth` |
//! | `Batch` | version `u8` ([`WIRE_VERSION`]), timestamp_ms `u64`, seed `u64`, count `u32`, envelopes |
//! | `Option<T>` | `u8` 0 (`None`) or 1 (`Some`, then `T`); any other byte is [`WireError::UnknownTag`] |
//! | `Vote` | cid `u64`, epoch `u32`, hash 32 bytes — 44 bytes |
//! | `Accept` | `Vote` then signature 64 bytes — 108 bytes |
//! | `DecisionProof` | epoch `u32`, count `u32`, count × (replica `u32`, signature 64 bytes); signers strictly ascending |
//! | `DecidedInstance` | cid `u64`, batch (`u32` len + encoded `Batch`, carried opaquely), `DecisionProof` |
//! | `Stop` | regency `u32`, count `u32`, envelopes |
//! | `Collect` | replica `u32`, regency `u32`, cid `u64`, write_quorum `Option<(epoch u32, hash 32 bytes)>`, count `u32`, count × (epoch `u32`, batch `u32` len + bytes); epochs strictly ascending |
//! | `SignedCollect` | `Collect` then signature 64 bytes |
//! | `StopData` | regency `u32`, last_decided `Option<DecidedInstance>`, `SignedCollect` |
//! | `Sync` | regency `u32`, last_decided `Option<DecidedInstance>`, count `u32`, count × `SignedCollect`, proposal (`u32` len + bytes) |
//!
//! These standalone encodings carry no version byte (like `Request`); the version is that of
//! the enclosing top-level message. Ordering constraints (proof signers, write-set epochs) make
//! the encoding canonical: the decoder rejects a violation as [`WireError::Invalid`] (`"proof
//! signers order"`, `"write set order"`), and the encoder writes vectors as given, so a value
//! that breaks them encodes to bytes that do not decode. A [`SignedCollect`]'s signature covers
//! [`collect_signing_bytes`]: `"tagma v1 collect\0"` followed by the `Collect` encoding.
//!
//! A zero-length-payload ordered request with a 4-entry MAC authenticator (a 4-replica view)
//! encodes as a **91-byte** envelope: 25 (request) + 1 (auth tag) + 1 (count) + 4 × 16 (MACs).
//!
//! Top-level messages ([`PeerMessage`], [`ClientMessage`], [`ReplicaMessage`], [`Handshake`])
//! start with the version byte (`WIRE_VERSION`, otherwise [`WireError::Version`]) and a tag
//! byte, then the fields:
//!
//! | message | tag | fields |
//! |---------|-----|--------|
//! | `PeerMessage::Propose` | 1 | cid `u64`, epoch `u32`, batch (`u32` len + encoded `Batch`, carried opaquely) |
//! | `PeerMessage::Write` | 2 | cid `u64`, epoch `u32`, hash 32 bytes |
//! | `PeerMessage::Accept` | 3 | `Accept`: cid `u64`, epoch `u32`, hash 32 bytes, signature 64 bytes |
//! | `PeerMessage::Forward` | 4 | `RequestEnvelope` |
//! | `PeerMessage::Stop` | 5 | `Stop` |
//! | `PeerMessage::StopData` | 6 | `StopData` |
//! | `PeerMessage::Sync` | 7 | `Sync` |
//! | `PeerMessage::DecisionRequest` | 8 | cid `u64` |
//! | `PeerMessage::Decision` | 9 | `DecidedInstance` |
//! | `PeerMessage::Position` | 10 | next `u64`, reply `u8` (0 or 1) |
//! | `PeerMessage::StateQuery` | 11 | next `u64` |
//! | `PeerMessage::StateOffer` | 12 | checkpoint (`u8` 0 = none, 1 = some; then cid `u64`, len `u64`, digest 32 bytes), next `u64` |
//! | `PeerMessage::ChunkRequest` | 13 | cid `u64`, offset `u64`, len `u32` |
//! | `PeerMessage::Chunk` | 14 | cid `u64`, offset `u64`, data (`u32` len + bytes) |
//! | `PeerMessage::LogRequest` | 15 | from `u64`, count `u32` |
//! | `PeerMessage::LogEntry` | 16 | `DecidedInstance` |
//! | `PeerMessage::ViewQuery` | 17 | (nothing) |
//! | `PeerMessage::ViewInfo` | 18 | count `u32`, count × `ViewChange` |
//! | `PeerMessage::StateVote` | 19 | cid `u64`, digest 32 bytes |
//! | `ClientMessage::Request` | 1 | `RequestEnvelope` |
//! | `ClientMessage::StateQuery` | 2 | nonce `u64` |
//! | `ClientMessage::ViewQuery` | 3 | (nothing) |
//! | `ClientMessage::ViewHistoryQuery` | 4 | (nothing) |
//! | `ReplicaMessage::Reply` | 1 | client `u64`, seq `u64`, kind `u8`, view `u32`, payload (`u32` len + bytes) |
//! | `ReplicaMessage::StateInfo` | 2 | nonce `u64`, replica `u32`, executed_instances `u64`, executed_requests `u64`, state_digest 32 bytes |
//! | `ReplicaMessage::CurrentView` | 3 | `View` |
//! | `ReplicaMessage::ViewHistory` | 4 | count `u32`, count × `ViewChange` |
//! | `Handshake::Hello` | 1 | role (`u8` tag: 0 = Replica, 1 = Client; then `u32`), identity 32 bytes, ephemeral 32 bytes |
//! | `Handshake::Proof` | 2 | signature 64 bytes |
//!
//! Encoding cannot fail; it panics only on values that cannot be represented (a MAC vector of
//! more than 255 entries, a byte field or vector of more than `u32::MAX` bytes/entries), which
//! are programming errors, never outside input. Decoding never panics.

use bytes::{BufMut, Bytes, BytesMut};

use crate::WIRE_VERSION;
use crate::ids::*;
use crate::message::*;

/// Why bytes could not be decoded. Every variant is a rejection of outside input, never a bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    #[error("unsupported wire version {found} (this build speaks {expected})")]
    Version { found: u8, expected: u8 },
    #[error("unknown {what} tag {tag}")]
    UnknownTag { what: &'static str, tag: u8 },
    #[error("{what} length {len} exceeds limit {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{count} trailing bytes after the message")]
    TrailingBytes { count: usize },
    #[error("invalid field {what}")]
    Invalid { what: &'static str },
}

/// Types with a canonical byte encoding.
pub trait Encode {
    /// Appends the encoding to `out`.
    fn encode(&self, out: &mut BytesMut);
    /// Exact length of the encoding (used to reserve buffers once).
    fn encoded_len(&self) -> usize;
    /// Convenience: encodes into a fresh buffer.
    fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out.freeze()
    }
}

/// Types that can be decoded from bytes received from outside. Decoding takes a `Bytes` so
/// payload fields become zero-copy slices of it.
pub trait Decode: Sized {
    /// Decodes a whole buffer; trailing bytes are an error.
    fn decode(bytes: &Bytes) -> Result<Self, WireError>;
}

/// Most MAC entries a [`RequestAuth::Macs`] authenticator can carry (its count is a `u8`).
pub const MAX_MAC_ENTRIES: usize = u8::MAX as usize;

/// Encoded size of a [`Request`] without its payload bytes.
pub const REQUEST_HEADER_LEN: usize = 8 + 8 + 1 + 4 + 4;

/// Smallest possible encoded [`RequestEnvelope`] (empty payload, empty MAC vector).
const ENVELOPE_MIN_LEN: usize = REQUEST_HEADER_LEN + 2;

/// Version + tag.
const HEADER_LEN: usize = 2;

// ----------------------------------------------------------------------------------------------
// Tags
// ----------------------------------------------------------------------------------------------

const KIND_ORDERED: u8 = 0;
const KIND_UNORDERED: u8 = 1;
const KIND_RECONFIGURE: u8 = 2;

const AUTH_MACS: u8 = 0;
const AUTH_SIGNATURE: u8 = 1;

const ROLE_REPLICA: u8 = 0;
const ROLE_CLIENT: u8 = 1;

const PEER_PROPOSE: u8 = 1;
const PEER_WRITE: u8 = 2;
const PEER_ACCEPT: u8 = 3;
const PEER_FORWARD: u8 = 4;
const PEER_STOP: u8 = 5;
const PEER_STOP_DATA: u8 = 6;
const PEER_SYNC: u8 = 7;
const PEER_DECISION_REQUEST: u8 = 8;
const PEER_DECISION: u8 = 9;
const PEER_POSITION: u8 = 10;
const PEER_STATE_QUERY: u8 = 11;
const PEER_STATE_OFFER: u8 = 12;
const PEER_CHUNK_REQUEST: u8 = 13;
const PEER_CHUNK: u8 = 14;
const PEER_LOG_REQUEST: u8 = 15;
const PEER_LOG_ENTRY: u8 = 16;
const PEER_VIEW_QUERY: u8 = 17;
const PEER_VIEW_INFO: u8 = 18;
const PEER_STATE_VOTE: u8 = 19;

const CLIENT_REQUEST: u8 = 1;
const CLIENT_STATE_QUERY: u8 = 2;
const CLIENT_VIEW_QUERY: u8 = 3;
const CLIENT_VIEW_HISTORY_QUERY: u8 = 4;

const REPLICA_REPLY: u8 = 1;
const REPLICA_STATE_INFO: u8 = 2;
const REPLICA_CURRENT_VIEW: u8 = 3;
const REPLICA_VIEW_HISTORY: u8 = 4;

const HANDSHAKE_HELLO: u8 = 1;
const HANDSHAKE_PROOF: u8 = 2;

// ----------------------------------------------------------------------------------------------
// Reader
// ----------------------------------------------------------------------------------------------

/// A bounds-checked cursor over a received buffer. Invariant: `pos <= buf.len()`.
struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a Bytes) -> Self {
        Reader { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Advances over `n` bytes and returns their range.
    fn advance(&mut self, n: usize) -> Result<(usize, usize), WireError> {
        let remaining = self.remaining();
        if n > remaining {
            return Err(WireError::Truncated {
                needed: n - remaining,
            });
        }
        let start = self.pos;
        let end = start
            .checked_add(n)
            .ok_or(WireError::Truncated { needed: n })?;
        self.pos = end;
        Ok((start, end))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let (start, end) = self.advance(n)?;
        let buf: &'a [u8] = self.buf;
        buf.get(start..end)
            .ok_or(WireError::Truncated { needed: n })
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let slice = self.take(N)?;
        <[u8; N]>::try_from(slice).map_err(|_| WireError::Truncated { needed: N })
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A `u32`-length-prefixed byte field, as a zero-copy slice of the input.
    fn bytes(&mut self) -> Result<Bytes, WireError> {
        let len = self.u32()? as usize;
        let (start, end) = self.advance(len)?;
        Ok(self.buf.slice(start..end))
    }

    /// Validates a decoded element count against the bytes that remain.
    fn check_count(
        &self,
        count: usize,
        min_elem: usize,
        what: &'static str,
    ) -> Result<usize, WireError> {
        let remaining = self.remaining();
        let fits = count
            .checked_mul(min_elem)
            .is_some_and(|total| total <= remaining);
        if fits {
            Ok(count)
        } else {
            Err(WireError::TooLong {
                what,
                len: count,
                max: remaining / min_elem.max(1),
            })
        }
    }

    /// Checks the version byte and returns the message tag.
    fn header(&mut self) -> Result<u8, WireError> {
        self.version()?;
        self.u8()
    }

    fn version(&mut self) -> Result<(), WireError> {
        let found = self.u8()?;
        if found != WIRE_VERSION {
            return Err(WireError::Version {
                found,
                expected: WIRE_VERSION,
            });
        }
        Ok(())
    }

    fn finish(&self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(WireError::TrailingBytes { count }),
        }
    }
}

/// Decodes a whole buffer with `f`, rejecting trailing bytes.
fn decode_all<T>(
    bytes: &Bytes,
    f: impl FnOnce(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<T, WireError> {
    let mut r = Reader::new(bytes);
    let value = f(&mut r)?;
    r.finish()?;
    Ok(value)
}

// ----------------------------------------------------------------------------------------------
// Writer helpers (no reservation: callers reserve the exact total once)
// ----------------------------------------------------------------------------------------------

fn put_len(out: &mut BytesMut, len: usize, what: &str) {
    let len = u32::try_from(len).unwrap_or_else(|_| panic!("{what} longer than u32::MAX"));
    out.put_u32_le(len);
}

fn put_bytes(out: &mut BytesMut, bytes: &[u8]) {
    put_len(out, bytes.len(), "byte field");
    out.put_slice(bytes);
}

fn put_header(out: &mut BytesMut, tag: u8) {
    out.put_u8(WIRE_VERSION);
    out.put_u8(tag);
}

fn kind_tag(kind: RequestKind) -> u8 {
    match kind {
        RequestKind::Ordered => KIND_ORDERED,
        RequestKind::Unordered => KIND_UNORDERED,
        RequestKind::Reconfigure => KIND_RECONFIGURE,
    }
}

fn read_kind(r: &mut Reader<'_>) -> Result<RequestKind, WireError> {
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

// ----------------------------------------------------------------------------------------------
// Request / RequestAuth / RequestEnvelope / Batch
// ----------------------------------------------------------------------------------------------

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

fn envelope_len(env: &RequestEnvelope) -> usize {
    env.request.encoded_len() + auth_len(&env.auth)
}

fn put_envelope(out: &mut BytesMut, env: &RequestEnvelope) {
    put_request(out, &env.request);
    put_auth(out, &env.auth);
}

fn read_envelope(r: &mut Reader<'_>) -> Result<RequestEnvelope, WireError> {
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

// ----------------------------------------------------------------------------------------------
// Handshake
// ----------------------------------------------------------------------------------------------

impl Encode for Handshake {
    fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        match self {
            Handshake::Hello {
                role,
                identity,
                ephemeral,
            } => {
                put_header(out, HANDSHAKE_HELLO);
                match role {
                    Role::Replica(id) => {
                        out.put_u8(ROLE_REPLICA);
                        out.put_u32_le(id.0);
                    }
                    Role::Client(principal) => {
                        out.put_u8(ROLE_CLIENT);
                        out.put_u32_le(*principal);
                    }
                }
                out.put_slice(&identity.0);
                out.put_slice(&ephemeral.0);
            }
            Handshake::Proof { signature } => {
                put_header(out, HANDSHAKE_PROOF);
                out.put_slice(&signature.0);
            }
        }
    }
    fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Handshake::Hello { .. } => 1 + 4 + PublicKey::LEN + KexPublic::LEN,
                Handshake::Proof { .. } => Signature::LEN,
            }
    }
}

impl Decode for Handshake {
    fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        decode_all(bytes, |r| match r.header()? {
            HANDSHAKE_HELLO => {
                let role = match r.u8()? {
                    ROLE_REPLICA => Role::Replica(ReplicaId(r.u32()?)),
                    ROLE_CLIENT => Role::Client(r.u32()?),
                    tag => return Err(WireError::UnknownTag { what: "role", tag }),
                };
                Ok(Handshake::Hello {
                    role,
                    identity: PublicKey(r.array()?),
                    ephemeral: KexPublic(r.array()?),
                })
            }
            HANDSHAKE_PROOF => Ok(Handshake::Proof {
                signature: Signature(r.array()?),
            }),
            tag => Err(WireError::UnknownTag {
                what: "handshake",
                tag,
            }),
        })
    }
}

// ----------------------------------------------------------------------------------------------
// Votes, ACCEPTs and decision proofs
// ----------------------------------------------------------------------------------------------

const VOTE_LEN: usize = 8 + 4 + Digest::LEN;

/// Encoded size of an [`Accept`]: the vote then the signature.
const ACCEPT_LEN: usize = VOTE_LEN + Signature::LEN;

/// Encoded size of one [`DecisionProof`] entry: signer then signature.
const PROOF_ENTRY_LEN: usize = 4 + Signature::LEN;

/// Smallest possible encoded [`Collect`]: replica, regency, cid, `None`, empty write set.
const COLLECT_MIN_LEN: usize = 4 + 4 + 8 + 1 + 4;

/// Smallest possible encoded [`SignedCollect`].
const SIGNED_COLLECT_MIN_LEN: usize = COLLECT_MIN_LEN + Signature::LEN;

/// Smallest possible encoded write-set entry: epoch and an empty byte field.
const WRITE_ENTRY_MIN_LEN: usize = 4 + 4;

/// Domain separator of [`collect_signing_bytes`].
const COLLECT_DOMAIN: &[u8] = b"tagma v1 collect\0";

const OPTION_NONE: u8 = 0;
const OPTION_SOME: u8 = 1;

fn put_vote(out: &mut BytesMut, vote: &Vote) {
    out.put_u64_le(vote.cid.0);
    out.put_u32_le(vote.epoch.0);
    out.put_slice(&vote.hash.0);
}

fn read_vote(r: &mut Reader<'_>) -> Result<Vote, WireError> {
    Ok(Vote {
        cid: ConsensusId(r.u64()?),
        epoch: Epoch(r.u32()?),
        hash: Digest(r.array()?),
    })
}

fn put_accept(out: &mut BytesMut, accept: &Accept) {
    put_vote(out, &accept.vote);
    out.put_slice(&accept.signature.0);
}

fn read_accept(r: &mut Reader<'_>) -> Result<Accept, WireError> {
    Ok(Accept {
        vote: read_vote(r)?,
        signature: Signature(r.array()?),
    })
}

/// `u8` presence tag (0 = `None`, 1 = `Some`) then the value.
fn option_len<T>(value: Option<&T>, len: impl FnOnce(&T) -> usize) -> usize {
    1 + value.map_or(0, len)
}

fn put_option<T>(out: &mut BytesMut, value: Option<&T>, put: impl FnOnce(&mut BytesMut, &T)) {
    match value {
        None => out.put_u8(OPTION_NONE),
        Some(v) => {
            out.put_u8(OPTION_SOME);
            put(out, v);
        }
    }
}

fn read_option<T>(
    r: &mut Reader<'_>,
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<Option<T>, WireError> {
    match r.u8()? {
        OPTION_NONE => Ok(None),
        OPTION_SOME => read(r).map(Some),
        tag => Err(WireError::UnknownTag {
            what: "option",
            tag,
        }),
    }
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

fn decided_len(decided: &DecidedInstance) -> usize {
    8 + 4 + decided.batch.len() + proof_len(&decided.proof)
}

fn put_decided(out: &mut BytesMut, decided: &DecidedInstance) {
    out.put_u64_le(decided.cid.0);
    put_bytes(out, &decided.batch);
    put_proof(out, &decided.proof);
}

fn read_decided(r: &mut Reader<'_>) -> Result<DecidedInstance, WireError> {
    Ok(DecidedInstance {
        cid: ConsensusId(r.u64()?),
        batch: r.bytes()?,
        proof: read_proof(r)?,
    })
}

fn last_decided_len(decided: &Option<DecidedInstance>) -> usize {
    option_len(decided.as_ref(), decided_len)
}

// ----------------------------------------------------------------------------------------------
// Leader change: STOP, collects, STOPDATA, SYNC
// ----------------------------------------------------------------------------------------------

fn envelopes_len(envs: &[RequestEnvelope]) -> usize {
    4 + envs.iter().map(envelope_len).sum::<usize>()
}

fn put_envelopes(out: &mut BytesMut, envs: &[RequestEnvelope], what: &str) {
    put_len(out, envs.len(), what);
    for env in envs {
        put_envelope(out, env);
    }
}

fn read_envelopes(
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

fn stop_len(stop: &Stop) -> usize {
    4 + envelopes_len(&stop.requests)
}

fn put_stop(out: &mut BytesMut, stop: &Stop) {
    out.put_u32_le(stop.regency.0);
    put_envelopes(out, &stop.requests, "stop requests");
}

fn read_stop(r: &mut Reader<'_>) -> Result<Stop, WireError> {
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

fn stop_data_len(sd: &StopData) -> usize {
    4 + last_decided_len(&sd.last_decided) + signed_collect_len(&sd.collect)
}

fn put_stop_data(out: &mut BytesMut, sd: &StopData) {
    out.put_u32_le(sd.regency.0);
    put_option(out, sd.last_decided.as_ref(), put_decided);
    put_signed_collect(out, &sd.collect);
}

fn read_stop_data(r: &mut Reader<'_>) -> Result<StopData, WireError> {
    Ok(StopData {
        regency: Regency(r.u32()?),
        last_decided: read_option(r, read_decided)?,
        collect: read_signed_collect(r)?,
    })
}

fn sync_len(sync: &Sync) -> usize {
    4 + last_decided_len(&sync.last_decided)
        + 4
        + sync.collects.iter().map(signed_collect_len).sum::<usize>()
        + 4
        + sync.proposal.len()
}

fn put_sync(out: &mut BytesMut, sync: &Sync) {
    out.put_u32_le(sync.regency.0);
    put_option(out, sync.last_decided.as_ref(), put_decided);
    put_len(out, sync.collects.len(), "sync collects");
    for signed in &sync.collects {
        put_signed_collect(out, signed);
    }
    put_bytes(out, &sync.proposal);
}

fn read_sync(r: &mut Reader<'_>) -> Result<Sync, WireError> {
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

/// Standalone `Encode`/`Decode` (no version byte) for a type with `put`/`read`/`len` helpers.
macro_rules! standalone {
    ($ty:ty, $put:ident, $read:ident, $len:expr) => {
        impl Encode for $ty {
            fn encode(&self, out: &mut BytesMut) {
                out.reserve(self.encoded_len());
                $put(out, self);
            }
            fn encoded_len(&self) -> usize {
                ($len)(self)
            }
        }

        impl Decode for $ty {
            fn decode(bytes: &Bytes) -> Result<Self, WireError> {
                decode_all(bytes, $read)
            }
        }
    };
}

standalone!(Accept, put_accept, read_accept, |_: &Accept| ACCEPT_LEN);
standalone!(DecisionProof, put_proof, read_proof, proof_len);
standalone!(DecidedInstance, put_decided, read_decided, decided_len);
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

// ----------------------------------------------------------------------------------------------
// Views and view changes
// ----------------------------------------------------------------------------------------------

/// The longest member address accepted (a host name and port).
pub const ADDR_BYTES_MAX: usize = 255;
const MEMBER_MIN_LEN: usize = 4 + 4 + 32;
const VIEW_OP_MIN_LEN: usize = 1 + 4;
const OP_ADD: u8 = 0;
const OP_REMOVE: u8 = 1;
const OP_SET_F: u8 = 2;
const VIEW_CHANGE_DOMAIN: &[u8] = b"tagma/view-change/v1";

fn put_member(out: &mut BytesMut, m: &ViewMember) {
    out.put_u32_le(m.id.0);
    put_bytes(out, m.addr.as_bytes());
    out.put_slice(&m.key.0);
}

fn member_len(m: &ViewMember) -> usize {
    MEMBER_MIN_LEN + m.addr.len()
}

fn read_member(r: &mut Reader<'_>) -> Result<ViewMember, WireError> {
    let id = ReplicaId(r.u32()?);
    let addr = r.bytes()?;
    if addr.len() > ADDR_BYTES_MAX {
        return Err(WireError::TooLong {
            what: "member address",
            len: addr.len(),
            max: ADDR_BYTES_MAX,
        });
    }
    let addr = String::from_utf8(addr.to_vec()).map_err(|_| WireError::Invalid {
        what: "member address (not UTF-8)",
    })?;
    Ok(ViewMember {
        id,
        addr,
        key: PublicKey(r.array()?),
    })
}

fn put_view(out: &mut BytesMut, v: &View) {
    out.put_u32_le(v.id.0);
    out.put_u32_le(v.f);
    put_len(out, v.members.len(), "view members");
    for m in &v.members {
        put_member(out, m);
    }
}

fn view_len(v: &View) -> usize {
    12 + v.members.iter().map(member_len).sum::<usize>()
}

fn read_view(r: &mut Reader<'_>) -> Result<View, WireError> {
    let id = ViewId(r.u32()?);
    let f = r.u32()?;
    let count = r.u32()? as usize;
    let count = r.check_count(count, MEMBER_MIN_LEN, "view members")?;
    let mut members: Vec<ViewMember> = Vec::with_capacity(count);
    for _ in 0..count {
        let m = read_member(r)?;
        if members.last().is_some_and(|last| last.id >= m.id) {
            return Err(WireError::Invalid {
                what: "view members (ids not strictly ascending)",
            });
        }
        members.push(m);
    }
    Ok(View { id, f, members })
}

fn put_ops(out: &mut BytesMut, ops: &[ViewOp]) {
    put_len(out, ops.len(), "view operations");
    for op in ops {
        match op {
            ViewOp::Add(m) => {
                out.put_u8(OP_ADD);
                put_member(out, m);
            }
            ViewOp::Remove(id) => {
                out.put_u8(OP_REMOVE);
                out.put_u32_le(id.0);
            }
            ViewOp::SetF(f) => {
                out.put_u8(OP_SET_F);
                out.put_u32_le(*f);
            }
        }
    }
}

fn ops_len(ops: &[ViewOp]) -> usize {
    4 + ops
        .iter()
        .map(|op| match op {
            ViewOp::Add(m) => 1 + member_len(m),
            ViewOp::Remove(_) | ViewOp::SetF(_) => VIEW_OP_MIN_LEN,
        })
        .sum::<usize>()
}

fn read_ops(r: &mut Reader<'_>) -> Result<Vec<ViewOp>, WireError> {
    let count = r.u32()? as usize;
    let count = r.check_count(count, VIEW_OP_MIN_LEN, "view operations")?;
    let mut ops = Vec::with_capacity(count);
    for _ in 0..count {
        ops.push(match r.u8()? {
            OP_ADD => ViewOp::Add(read_member(r)?),
            OP_REMOVE => ViewOp::Remove(ReplicaId(r.u32()?)),
            OP_SET_F => ViewOp::SetF(r.u32()?),
            tag => {
                return Err(WireError::UnknownTag {
                    what: "view operation",
                    tag,
                });
            }
        });
    }
    Ok(ops)
}

fn put_view_history(out: &mut BytesMut, changes: &[ViewChange]) {
    put_len(out, changes.len(), "view history");
    for c in changes {
        put_view_change(out, c);
    }
}

fn view_history_len(changes: &[ViewChange]) -> usize {
    4 + changes.iter().map(view_change_len).sum::<usize>()
}

fn read_view_history(r: &mut Reader<'_>) -> Result<Vec<ViewChange>, WireError> {
    let count = r.u32()? as usize;
    // A change is at least its view, an operation count and a signature.
    let count = r.check_count(count, 4 + 4 + Signature::LEN, "view history")?;
    let mut changes = Vec::with_capacity(count);
    for _ in 0..count {
        changes.push(read_view_change(r)?);
    }
    Ok(changes)
}

fn put_view_change(out: &mut BytesMut, c: &ViewChange) {
    out.put_u32_le(c.view.0);
    put_ops(out, &c.ops);
    out.put_slice(&c.signature.0);
}

fn view_change_len(c: &ViewChange) -> usize {
    4 + ops_len(&c.ops) + Signature::LEN
}

fn read_view_change(r: &mut Reader<'_>) -> Result<ViewChange, WireError> {
    Ok(ViewChange {
        view: ViewId(r.u32()?),
        ops: read_ops(r)?,
        signature: Signature(r.array()?),
    })
}

/// The bytes the administrator signs for a view change: a domain tag, then the view and the
/// operations as encoded in [`ViewChange`] (one encoding per value, so one signed form).
pub fn view_change_signing_bytes(view: ViewId, ops: &[ViewOp]) -> Bytes {
    let mut out = BytesMut::with_capacity(VIEW_CHANGE_DOMAIN.len() + 4 + ops_len(ops));
    out.put_slice(VIEW_CHANGE_DOMAIN);
    out.put_u32_le(view.0);
    put_ops(&mut out, ops);
    out.freeze()
}

const OUTCOME_INSTALLED: u8 = 0;
const OUTCOME_REFUSED: u8 = 1;

fn put_outcome(out: &mut BytesMut, o: &ReconfigureOutcome) {
    match o {
        ReconfigureOutcome::Installed(v) => {
            out.put_u8(OUTCOME_INSTALLED);
            put_view(out, v);
        }
        ReconfigureOutcome::Refused(reason) => {
            out.put_u8(OUTCOME_REFUSED);
            put_bytes(out, reason.as_bytes());
        }
    }
}

fn outcome_len(o: &ReconfigureOutcome) -> usize {
    1 + match o {
        ReconfigureOutcome::Installed(v) => view_len(v),
        ReconfigureOutcome::Refused(reason) => 4 + reason.len(),
    }
}

fn read_outcome(r: &mut Reader<'_>) -> Result<ReconfigureOutcome, WireError> {
    match r.u8()? {
        OUTCOME_INSTALLED => Ok(ReconfigureOutcome::Installed(read_view(r)?)),
        OUTCOME_REFUSED => String::from_utf8(r.bytes()?.to_vec())
            .map(ReconfigureOutcome::Refused)
            .map_err(|_| WireError::Invalid {
                what: "refusal reason (not UTF-8)",
            }),
        tag => Err(WireError::UnknownTag {
            what: "reconfigure outcome",
            tag,
        }),
    }
}

standalone!(View, put_view, read_view, view_len);
standalone!(ReconfigureOutcome, put_outcome, read_outcome, outcome_len);
standalone!(
    ViewChange,
    put_view_change,
    read_view_change,
    view_change_len
);

// ----------------------------------------------------------------------------------------------
// PeerMessage
// ----------------------------------------------------------------------------------------------

impl Encode for PeerMessage {
    fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        match self {
            PeerMessage::Propose(p) => {
                put_header(out, PEER_PROPOSE);
                out.put_u64_le(p.cid.0);
                out.put_u32_le(p.epoch.0);
                put_bytes(out, &p.batch);
            }
            PeerMessage::Write(v) => {
                put_header(out, PEER_WRITE);
                put_vote(out, v);
            }
            PeerMessage::Accept(a) => {
                put_header(out, PEER_ACCEPT);
                put_accept(out, a);
            }
            PeerMessage::Forward(env) => {
                put_header(out, PEER_FORWARD);
                put_envelope(out, env);
            }
            PeerMessage::Stop(stop) => {
                put_header(out, PEER_STOP);
                put_stop(out, stop);
            }
            PeerMessage::StopData(sd) => {
                put_header(out, PEER_STOP_DATA);
                put_stop_data(out, sd);
            }
            PeerMessage::Sync(sync) => {
                put_header(out, PEER_SYNC);
                put_sync(out, sync);
            }
            PeerMessage::DecisionRequest { cid } => {
                put_header(out, PEER_DECISION_REQUEST);
                out.put_u64_le(cid.0);
            }
            PeerMessage::Decision(decided) => {
                put_header(out, PEER_DECISION);
                put_decided(out, decided);
            }
            PeerMessage::Position { next, reply } => {
                put_header(out, PEER_POSITION);
                out.put_u64_le(next.0);
                out.put_u8(u8::from(*reply));
            }
            PeerMessage::StateQuery { next } => {
                put_header(out, PEER_STATE_QUERY);
                out.put_u64_le(next.0);
            }
            PeerMessage::StateOffer { checkpoint, next } => {
                put_header(out, PEER_STATE_OFFER);
                match checkpoint {
                    None => out.put_u8(0),
                    Some(c) => {
                        out.put_u8(1);
                        out.put_u64_le(c.cid.0);
                        out.put_u64_le(c.len);
                        out.put_slice(&c.digest.0);
                    }
                }
                out.put_u64_le(next.0);
            }
            PeerMessage::ChunkRequest { cid, offset, len } => {
                put_header(out, PEER_CHUNK_REQUEST);
                out.put_u64_le(cid.0);
                out.put_u64_le(*offset);
                out.put_u32_le(*len);
            }
            PeerMessage::Chunk { cid, offset, data } => {
                put_header(out, PEER_CHUNK);
                out.put_u64_le(cid.0);
                out.put_u64_le(*offset);
                put_bytes(out, data);
            }
            PeerMessage::LogRequest { from, count } => {
                put_header(out, PEER_LOG_REQUEST);
                out.put_u64_le(from.0);
                out.put_u32_le(*count);
            }
            PeerMessage::LogEntry(decided) => {
                put_header(out, PEER_LOG_ENTRY);
                put_decided(out, decided);
            }
            PeerMessage::ViewQuery => put_header(out, PEER_VIEW_QUERY),
            PeerMessage::ViewInfo(history) => {
                put_header(out, PEER_VIEW_INFO);
                put_view_history(out, history);
            }
            PeerMessage::StateVote { cid, digest } => {
                put_header(out, PEER_STATE_VOTE);
                out.put_u64_le(cid.0);
                out.put_slice(&digest.0);
            }
        }
    }
    fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                PeerMessage::Propose(p) => 8 + 4 + 4 + p.batch.len(),
                PeerMessage::Write(_) => VOTE_LEN,
                PeerMessage::Accept(_) => ACCEPT_LEN,
                PeerMessage::Forward(env) => envelope_len(env),
                PeerMessage::Stop(stop) => stop_len(stop),
                PeerMessage::StopData(sd) => stop_data_len(sd),
                PeerMessage::Sync(sync) => sync_len(sync),
                PeerMessage::DecisionRequest { .. } => 8,
                PeerMessage::Decision(decided) => decided_len(decided),
                PeerMessage::Position { .. } => 9,
                PeerMessage::StateQuery { .. } => 8,
                PeerMessage::StateOffer { checkpoint, .. } => {
                    1 + checkpoint.map_or(0, |_| 8 + 8 + 32) + 8
                }
                PeerMessage::ChunkRequest { .. } => 8 + 8 + 4,
                PeerMessage::Chunk { data, .. } => 8 + 8 + 4 + data.len(),
                PeerMessage::LogRequest { .. } => 8 + 4,
                PeerMessage::LogEntry(decided) => decided_len(decided),
                PeerMessage::ViewQuery => 0,
                PeerMessage::ViewInfo(history) => view_history_len(history),
                PeerMessage::StateVote { .. } => 8 + 32,
            }
    }
}

impl Decode for PeerMessage {
    fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        decode_all(bytes, |r| match r.header()? {
            PEER_PROPOSE => Ok(PeerMessage::Propose(Propose {
                cid: ConsensusId(r.u64()?),
                epoch: Epoch(r.u32()?),
                batch: r.bytes()?,
            })),
            PEER_WRITE => Ok(PeerMessage::Write(read_vote(r)?)),
            PEER_ACCEPT => Ok(PeerMessage::Accept(read_accept(r)?)),
            PEER_FORWARD => Ok(PeerMessage::Forward(read_envelope(r)?)),
            PEER_STOP => Ok(PeerMessage::Stop(read_stop(r)?)),
            PEER_STOP_DATA => Ok(PeerMessage::StopData(read_stop_data(r)?)),
            PEER_SYNC => Ok(PeerMessage::Sync(read_sync(r)?)),
            PEER_DECISION_REQUEST => Ok(PeerMessage::DecisionRequest {
                cid: ConsensusId(r.u64()?),
            }),
            PEER_DECISION => Ok(PeerMessage::Decision(read_decided(r)?)),
            PEER_POSITION => Ok(PeerMessage::Position {
                next: ConsensusId(r.u64()?),
                reply: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => {
                        return Err(WireError::Invalid {
                            what: "position reply flag",
                        });
                    }
                },
            }),
            PEER_STATE_QUERY => Ok(PeerMessage::StateQuery {
                next: ConsensusId(r.u64()?),
            }),
            PEER_STATE_OFFER => {
                let checkpoint = match r.u8()? {
                    0 => None,
                    1 => Some(CheckpointInfo {
                        cid: ConsensusId(r.u64()?),
                        len: r.u64()?,
                        digest: Digest(r.array()?),
                    }),
                    _ => {
                        return Err(WireError::Invalid {
                            what: "state offer checkpoint flag",
                        });
                    }
                };
                Ok(PeerMessage::StateOffer {
                    checkpoint,
                    next: ConsensusId(r.u64()?),
                })
            }
            PEER_CHUNK_REQUEST => Ok(PeerMessage::ChunkRequest {
                cid: ConsensusId(r.u64()?),
                offset: r.u64()?,
                len: r.u32()?,
            }),
            PEER_CHUNK => Ok(PeerMessage::Chunk {
                cid: ConsensusId(r.u64()?),
                offset: r.u64()?,
                data: r.bytes()?,
            }),
            PEER_LOG_REQUEST => Ok(PeerMessage::LogRequest {
                from: ConsensusId(r.u64()?),
                count: r.u32()?,
            }),
            PEER_LOG_ENTRY => Ok(PeerMessage::LogEntry(read_decided(r)?)),
            PEER_VIEW_QUERY => Ok(PeerMessage::ViewQuery),
            PEER_VIEW_INFO => Ok(PeerMessage::ViewInfo(read_view_history(r)?)),
            PEER_STATE_VOTE => Ok(PeerMessage::StateVote {
                cid: ConsensusId(r.u64()?),
                digest: Digest(r.array()?),
            }),
            tag => Err(WireError::UnknownTag {
                what: "peer message",
                tag,
            }),
        })
    }
}

// ----------------------------------------------------------------------------------------------
// ClientMessage
// ----------------------------------------------------------------------------------------------

impl Encode for ClientMessage {
    fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        match self {
            ClientMessage::Request(env) => {
                put_header(out, CLIENT_REQUEST);
                put_envelope(out, env);
            }
            ClientMessage::StateQuery { nonce } => {
                put_header(out, CLIENT_STATE_QUERY);
                out.put_u64_le(*nonce);
            }
            ClientMessage::ViewQuery => put_header(out, CLIENT_VIEW_QUERY),
            ClientMessage::ViewHistoryQuery => put_header(out, CLIENT_VIEW_HISTORY_QUERY),
        }
    }
    fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                ClientMessage::Request(env) => envelope_len(env),
                ClientMessage::StateQuery { .. } => 8,
                ClientMessage::ViewQuery | ClientMessage::ViewHistoryQuery => 0,
            }
    }
}

impl Decode for ClientMessage {
    fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        decode_all(bytes, |r| match r.header()? {
            CLIENT_REQUEST => Ok(ClientMessage::Request(read_envelope(r)?)),
            CLIENT_STATE_QUERY => Ok(ClientMessage::StateQuery { nonce: r.u64()? }),
            CLIENT_VIEW_QUERY => Ok(ClientMessage::ViewQuery),
            CLIENT_VIEW_HISTORY_QUERY => Ok(ClientMessage::ViewHistoryQuery),
            tag => Err(WireError::UnknownTag {
                what: "client message",
                tag,
            }),
        })
    }
}

// ----------------------------------------------------------------------------------------------
// ReplicaMessage
// ----------------------------------------------------------------------------------------------

const STATE_INFO_LEN: usize = 8 + 4 + 8 + 8 + Digest::LEN;

impl Encode for ReplicaMessage {
    fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        match self {
            ReplicaMessage::Reply(reply) => {
                put_header(out, REPLICA_REPLY);
                out.put_u64_le(reply.client.0);
                out.put_u64_le(reply.seq.0);
                out.put_u8(kind_tag(reply.kind));
                out.put_u32_le(reply.view.0);
                put_bytes(out, &reply.payload);
            }
            ReplicaMessage::StateInfo(info) => {
                put_header(out, REPLICA_STATE_INFO);
                out.put_u64_le(info.nonce);
                out.put_u32_le(info.replica.0);
                out.put_u64_le(info.executed_instances);
                out.put_u64_le(info.executed_requests);
                out.put_slice(&info.state_digest.0);
            }
            ReplicaMessage::CurrentView(view) => {
                put_header(out, REPLICA_CURRENT_VIEW);
                put_view(out, view);
            }
            ReplicaMessage::ViewHistory(changes) => {
                put_header(out, REPLICA_VIEW_HISTORY);
                put_view_history(out, changes);
            }
        }
    }
    fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                ReplicaMessage::Reply(reply) => 8 + 8 + 1 + 4 + 4 + reply.payload.len(),
                ReplicaMessage::StateInfo(_) => STATE_INFO_LEN,
                ReplicaMessage::CurrentView(view) => view_len(view),
                ReplicaMessage::ViewHistory(changes) => view_history_len(changes),
            }
    }
}

impl Decode for ReplicaMessage {
    fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        decode_all(bytes, |r| match r.header()? {
            REPLICA_REPLY => Ok(ReplicaMessage::Reply(Reply {
                client: ClientId(r.u64()?),
                seq: RequestSeq(r.u64()?),
                kind: read_kind(r)?,
                view: ViewId(r.u32()?),
                payload: r.bytes()?,
            })),
            REPLICA_STATE_INFO => Ok(ReplicaMessage::StateInfo(StateInfo {
                nonce: r.u64()?,
                replica: ReplicaId(r.u32()?),
                executed_instances: r.u64()?,
                executed_requests: r.u64()?,
                state_digest: Digest(r.array()?),
            })),
            REPLICA_CURRENT_VIEW => Ok(ReplicaMessage::CurrentView(read_view(r)?)),
            REPLICA_VIEW_HISTORY => Ok(ReplicaMessage::ViewHistory(read_view_history(r)?)),
            tag => Err(WireError::UnknownTag {
                what: "replica message",
                tag,
            }),
        })
    }
}
