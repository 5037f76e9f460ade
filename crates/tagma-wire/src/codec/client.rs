//! Client-to-replica messages ([`ClientMessage`]) and the replicas' answers
//! ([`ReplicaMessage`]).
//!
//! | message | tag | fields |
//! |---------|-----|--------|
//! | `ClientMessage::Request` | 1 | `RequestEnvelope` |
//! | `ClientMessage::StateQuery` | 2 | nonce `u64` |
//! | `ClientMessage::ViewQuery` | 3 | (nothing) |
//! | `ClientMessage::ViewHistoryQuery` | 4 | (nothing) |
//! | `ReplicaMessage::Reply` | 1 | client `u64`, seq `u64`, kind `u8`, view `u32`, payload (`u32` len + bytes) |
//! | `ReplicaMessage::StateInfo` | 2 | nonce `u64`, replica `u32`, executed_instances `u64`, executed_requests `u64`, state_digest 32 bytes |
//! | `ReplicaMessage::CurrentView` | 3 | `View` |
//! | `ReplicaMessage::ViewHistory` | 4 | count `u32`, count × `ViewChange` |
//! | `ReplicaMessage::Leader` | 5 | view `u32`, regency `u32`, leader `u32` |

use bytes::{BufMut, Bytes, BytesMut};

use super::primitives::{Decode, Encode, HEADER_LEN, WireError, decode_all, put_bytes, put_header};
use super::request::{envelope_len, kind_tag, put_envelope, read_envelope, read_kind};
use super::view::{
    put_view, put_view_history, read_view, read_view_history, view_history_len, view_len,
};
use crate::ids::*;
use crate::message::*;

const CLIENT_REQUEST: u8 = 1;
const CLIENT_STATE_QUERY: u8 = 2;
const CLIENT_VIEW_QUERY: u8 = 3;
const CLIENT_VIEW_HISTORY_QUERY: u8 = 4;

const REPLICA_REPLY: u8 = 1;
const REPLICA_STATE_INFO: u8 = 2;
const REPLICA_CURRENT_VIEW: u8 = 3;
const REPLICA_VIEW_HISTORY: u8 = 4;
const REPLICA_LEADER: u8 = 5;

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
            ReplicaMessage::Leader(hint) => {
                put_header(out, REPLICA_LEADER);
                out.put_u32_le(hint.view.0);
                out.put_u32_le(hint.regency.0);
                out.put_u32_le(hint.leader.0);
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
                ReplicaMessage::Leader(_) => 12,
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
            REPLICA_LEADER => Ok(ReplicaMessage::Leader(LeaderHint {
                view: ViewId(r.u32()?),
                regency: Regency(r.u32()?),
                leader: ReplicaId(r.u32()?),
            })),
            tag => Err(WireError::UnknownTag {
                what: "replica message",
                tag,
            }),
        })
    }
}
