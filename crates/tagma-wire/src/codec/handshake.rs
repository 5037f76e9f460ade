//! The handshake messages that open every connection (the protocol itself is `tagma-net`'s).
//!
//! | message | tag | fields |
//! |---------|-----|--------|
//! | `Handshake::Hello` | 1 | role (`u8` tag: 0 = Replica, 1 = Client; then `u32`), identity 32 bytes, ephemeral 32 bytes |
//! | `Handshake::Proof` | 2 | signature 64 bytes |
//! | `Handshake::Refused` | 3 | reason `u8` (0 = unknown key) |

use bytes::{BufMut, Bytes, BytesMut};

use super::primitives::{Decode, Encode, HEADER_LEN, WireError, decode_all, put_header};
use crate::ids::*;
use crate::message::*;

const ROLE_REPLICA: u8 = 0;
const ROLE_CLIENT: u8 = 1;

const HANDSHAKE_HELLO: u8 = 1;
const HANDSHAKE_PROOF: u8 = 2;
const HANDSHAKE_REFUSED: u8 = 3;

const REFUSAL_UNKNOWN_KEY: u8 = 0;

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
            Handshake::Refused { reason } => {
                put_header(out, HANDSHAKE_REFUSED);
                out.put_u8(match reason {
                    Refusal::UnknownKey => REFUSAL_UNKNOWN_KEY,
                });
            }
        }
    }
    fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Handshake::Hello { .. } => 1 + 4 + PublicKey::LEN + KexPublic::LEN,
                Handshake::Proof { .. } => Signature::LEN,
                Handshake::Refused { .. } => 1,
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
            HANDSHAKE_REFUSED => match r.u8()? {
                REFUSAL_UNKNOWN_KEY => Ok(Handshake::Refused {
                    reason: Refusal::UnknownKey,
                }),
                tag => Err(WireError::UnknownTag {
                    what: "handshake refusal",
                    tag,
                }),
            },
            tag => Err(WireError::UnknownTag {
                what: "handshake",
                tag,
            }),
        })
    }
}
