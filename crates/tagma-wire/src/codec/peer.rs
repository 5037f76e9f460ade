//! Replica-to-replica messages ([`PeerMessage`]): the normal case, request forwarding, the
//! leader change, catch-up, state transfer, views and the hash vote.
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

use bytes::{BufMut, Bytes, BytesMut};

use super::consensus::{
    ACCEPT_LEN, VOTE_LEN, decided_len, put_accept, put_decided, put_vote, read_accept,
    read_decided, read_vote,
};
use super::leader_change::{
    put_stop, put_stop_data, put_sync, read_stop, read_stop_data, read_sync, stop_data_len,
    stop_len, sync_len,
};
use super::primitives::{Decode, Encode, HEADER_LEN, WireError, decode_all, put_bytes, put_header};
use super::request::{envelope_len, put_envelope, read_envelope};
use super::view::{put_view_history, read_view_history, view_history_len};
use crate::ids::*;
use crate::message::*;

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
