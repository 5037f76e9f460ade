//! Execute-verify messages ([`EveMessage`]).
//!
//! | message | tag | fields |
//! |---------|-----|--------|
//! | `ExecuteBatch` | 1 | view `u64`, run `u32`, committed `u64`, sequential `u8` (0/1), batch: seq `u64`, seed `u64`, timestamp_ms `u64`, count `u32`, count × (client `u64`, seq `u64`, payload (`u32` len + bytes)) |
//! | `Token` | 2 | view `u64`, run `u32`, seq `u64`, token 32 bytes |
//! | `Commit` | 3 | view `u64`, committed `u64` |
//! | `Rollback` | 4 | view `u64`, run `u32`, seq `u64` |
//! | `Join` | 5 | view `u64` |
//! | `StateOffer` | 6 | view `u64`, run `u32`, seq `u64`, token 32 bytes, root 32 bytes, proof (`u8` 0 = none, 1 = some; then outputs 32 bytes, previous 32 bytes), count `u32`, count × (client `u64`, seq `u64`, floor `u64`, last_batch `u64`, reply (`u32` len + bytes)) |
//! | `TreeQuery` | 7 | seq `u64`, count `u32`, count × prefix |
//! | `TreeNodes` | 8 | seq `u64`, count `u32`, count × (prefix, node) |
//! | `Joined` | 9 | view `u64`, seq `u64` |
//!
//! A prefix is depth `u8` (≤ 16) and bits `u64` (zero below the depth's slots). A node is a
//! tag `u8`: 0 absent, 1 empty, 2 leaf (id `u64`, value (`u32` len + bytes)), 3 branch
//! (count `u8` ≤ 16, count × (slot `u8`, digest 32 bytes), slots ascending and below 16).
//! Violations are [`WireError::Invalid`].

use bytes::{BufMut, Bytes, BytesMut};

use super::primitives::{
    Decode, Encode, HEADER_LEN, Reader, WireError, decode_all, put_bytes, put_header, put_len,
};
use crate::eve::*;
use crate::ids::*;

const EXECUTE_BATCH: u8 = 1;
const TOKEN: u8 = 2;
const COMMIT: u8 = 3;
const ROLLBACK: u8 = 4;
const JOIN: u8 = 5;
const STATE_OFFER: u8 = 6;
const TREE_QUERY: u8 = 7;
const TREE_NODES: u8 = 8;
const JOINED: u8 = 9;

const NODE_ABSENT: u8 = 0;
const NODE_EMPTY: u8 = 1;
const NODE_LEAF: u8 = 2;
const NODE_BRANCH: u8 = 3;

/// Slots of a branch; levels of a path.
const FANOUT: u8 = 16;
const PREFIX_LEN: usize = 1 + 8;
/// A session entry without its reply's bytes.
const SESSION_LEN: usize = 8 + 8 + 8 + 8 + 4;

fn put_prefix(out: &mut BytesMut, p: &TreePrefix) {
    out.put_u8(p.depth);
    out.put_u64_le(p.bits);
}

fn read_prefix(r: &mut Reader<'_>) -> Result<TreePrefix, WireError> {
    let depth = r.u8()?;
    let bits = r.u64()?;
    let depth_bits = u32::from(depth) * 4;
    if depth > FANOUT || (depth_bits < u64::BITS && bits << depth_bits != 0) {
        return Err(WireError::Invalid {
            what: "tree prefix",
        });
    }
    Ok(TreePrefix { depth, bits })
}

fn node_len(node: &TreeNode) -> usize {
    1 + match node {
        TreeNode::Absent | TreeNode::Empty => 0,
        TreeNode::Leaf { value, .. } => 8 + 4 + value.len(),
        TreeNode::Branch { children } => 1 + children.len() * (1 + Digest::LEN),
    }
}

fn put_node(out: &mut BytesMut, node: &TreeNode) {
    match node {
        TreeNode::Absent => out.put_u8(NODE_ABSENT),
        TreeNode::Empty => out.put_u8(NODE_EMPTY),
        TreeNode::Leaf { id, value } => {
            out.put_u8(NODE_LEAF);
            out.put_u64_le(*id);
            put_bytes(out, value);
        }
        TreeNode::Branch { children } => {
            out.put_u8(NODE_BRANCH);
            let count = u8::try_from(children.len()).expect("a branch has at most 16 children");
            out.put_u8(count);
            for (slot, digest) in children {
                out.put_u8(*slot);
                out.put_slice(&digest.0);
            }
        }
    }
}

fn read_node(r: &mut Reader<'_>) -> Result<TreeNode, WireError> {
    match r.u8()? {
        NODE_ABSENT => Ok(TreeNode::Absent),
        NODE_EMPTY => Ok(TreeNode::Empty),
        NODE_LEAF => Ok(TreeNode::Leaf {
            id: r.u64()?,
            value: r.bytes()?,
        }),
        NODE_BRANCH => {
            let count = r.u8()?;
            if count > FANOUT {
                return Err(WireError::Invalid { what: "branch" });
            }
            let mut children = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                let slot = r.u8()?;
                let digest = Digest(r.array()?);
                let ascending = children.last().is_none_or(|(last, _)| *last < slot);
                if slot >= FANOUT || !ascending {
                    return Err(WireError::Invalid { what: "branch" });
                }
                children.push((slot, digest));
            }
            Ok(TreeNode::Branch { children })
        }
        tag => Err(WireError::UnknownTag {
            what: "tree node",
            tag,
        }),
    }
}

fn batch_len(batch: &EveBatch) -> usize {
    8 + 8
        + 8
        + 4
        + (batch.requests.iter())
            .map(|q| 8 + 8 + 4 + q.payload.len())
            .sum::<usize>()
}

fn put_batch(out: &mut BytesMut, batch: &EveBatch) {
    out.put_u64_le(batch.seq);
    out.put_u64_le(batch.seed);
    out.put_u64_le(batch.timestamp_ms);
    put_len(out, batch.requests.len(), "batch");
    for q in &batch.requests {
        out.put_u64_le(q.client.0);
        out.put_u64_le(q.seq.0);
        put_bytes(out, &q.payload);
    }
}

fn read_batch(r: &mut Reader<'_>) -> Result<EveBatch, WireError> {
    let seq = r.u64()?;
    let seed = r.u64()?;
    let timestamp_ms = r.u64()?;
    let count = r.u32()? as usize;
    let count = r.check_count(count, 8 + 8 + 4, "eve batch")?;
    let mut requests = Vec::with_capacity(count);
    for _ in 0..count {
        requests.push(EveRequest {
            client: ClientId(r.u64()?),
            seq: RequestSeq(r.u64()?),
            payload: r.bytes()?,
        });
    }
    Ok(EveBatch {
        seq,
        seed,
        timestamp_ms,
        requests,
    })
}

impl Encode for EveMessage {
    fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        match self {
            EveMessage::ExecuteBatch {
                view,
                run,
                committed,
                sequential,
                batch,
            } => {
                put_header(out, EXECUTE_BATCH);
                out.put_u64_le(*view);
                out.put_u32_le(*run);
                out.put_u64_le(*committed);
                out.put_u8(u8::from(*sequential));
                put_batch(out, batch);
            }
            EveMessage::Token {
                view,
                run,
                seq,
                token,
            } => {
                put_header(out, TOKEN);
                out.put_u64_le(*view);
                out.put_u32_le(*run);
                out.put_u64_le(*seq);
                out.put_slice(&token.0);
            }
            EveMessage::Commit { view, committed } => {
                put_header(out, COMMIT);
                out.put_u64_le(*view);
                out.put_u64_le(*committed);
            }
            EveMessage::Rollback { view, run, seq } => {
                put_header(out, ROLLBACK);
                out.put_u64_le(*view);
                out.put_u32_le(*run);
                out.put_u64_le(*seq);
            }
            EveMessage::Join { view } => {
                put_header(out, JOIN);
                out.put_u64_le(*view);
            }
            EveMessage::StateOffer {
                view,
                run,
                seq,
                token,
                root,
                proof,
                sessions,
            } => {
                put_header(out, STATE_OFFER);
                out.put_u64_le(*view);
                out.put_u32_le(*run);
                out.put_u64_le(*seq);
                out.put_slice(&token.0);
                out.put_slice(&root.0);
                match proof {
                    None => out.put_u8(0),
                    Some(p) => {
                        out.put_u8(1);
                        out.put_slice(&p.outputs.0);
                        out.put_slice(&p.previous.0);
                    }
                }
                put_len(out, sessions.len(), "sessions");
                for s in sessions {
                    out.put_u64_le(s.client.0);
                    out.put_u64_le(s.seq.0);
                    out.put_u64_le(s.floor.0);
                    out.put_u64_le(s.last_batch);
                    put_bytes(out, &s.reply);
                }
            }
            EveMessage::TreeQuery { seq, prefixes } => {
                put_header(out, TREE_QUERY);
                out.put_u64_le(*seq);
                put_len(out, prefixes.len(), "tree query");
                for p in prefixes {
                    put_prefix(out, p);
                }
            }
            EveMessage::TreeNodes { seq, nodes } => {
                put_header(out, TREE_NODES);
                out.put_u64_le(*seq);
                put_len(out, nodes.len(), "tree nodes");
                for (p, node) in nodes {
                    put_prefix(out, p);
                    put_node(out, node);
                }
            }
            EveMessage::Joined { view, seq } => {
                put_header(out, JOINED);
                out.put_u64_le(*view);
                out.put_u64_le(*seq);
            }
        }
    }

    fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                EveMessage::ExecuteBatch { batch, .. } => 8 + 4 + 8 + 1 + batch_len(batch),
                EveMessage::Token { .. } => 8 + 4 + 8 + Digest::LEN,
                EveMessage::Commit { .. } => 8 + 8,
                EveMessage::Rollback { .. } => 8 + 4 + 8,
                EveMessage::Join { .. } => 8,
                EveMessage::StateOffer {
                    sessions, proof, ..
                } => {
                    8 + 4
                        + 8
                        + 2 * Digest::LEN
                        + 1
                        + proof.map_or(0, |_| 2 * Digest::LEN)
                        + 4
                        + sessions
                            .iter()
                            .map(|s| SESSION_LEN + s.reply.len())
                            .sum::<usize>()
                }
                EveMessage::TreeQuery { prefixes, .. } => 8 + 4 + prefixes.len() * PREFIX_LEN,
                EveMessage::TreeNodes { nodes, .. } => {
                    8 + 4
                        + nodes
                            .iter()
                            .map(|(_, n)| PREFIX_LEN + node_len(n))
                            .sum::<usize>()
                }
                EveMessage::Joined { .. } => 8 + 8,
            }
    }
}

impl Decode for EveMessage {
    fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        decode_all(bytes, |r| match r.header()? {
            EXECUTE_BATCH => Ok(EveMessage::ExecuteBatch {
                view: r.u64()?,
                run: r.u32()?,
                committed: r.u64()?,
                sequential: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(WireError::Invalid { what: "sequential" }),
                },
                batch: read_batch(r)?,
            }),
            TOKEN => Ok(EveMessage::Token {
                view: r.u64()?,
                run: r.u32()?,
                seq: r.u64()?,
                token: Digest(r.array()?),
            }),
            COMMIT => Ok(EveMessage::Commit {
                view: r.u64()?,
                committed: r.u64()?,
            }),
            ROLLBACK => Ok(EveMessage::Rollback {
                view: r.u64()?,
                run: r.u32()?,
                seq: r.u64()?,
            }),
            JOIN => Ok(EveMessage::Join { view: r.u64()? }),
            STATE_OFFER => {
                let view = r.u64()?;
                let run = r.u32()?;
                let seq = r.u64()?;
                let token = Digest(r.array()?);
                let root = Digest(r.array()?);
                let proof = match r.u8()? {
                    0 => None,
                    1 => Some(EveTokenProof {
                        outputs: Digest(r.array()?),
                        previous: Digest(r.array()?),
                    }),
                    _ => return Err(WireError::Invalid { what: "proof" }),
                };
                let count = r.u32()? as usize;
                let count = r.check_count(count, SESSION_LEN, "sessions")?;
                let mut sessions = Vec::with_capacity(count);
                for _ in 0..count {
                    sessions.push(EveSession {
                        client: ClientId(r.u64()?),
                        seq: RequestSeq(r.u64()?),
                        floor: RequestSeq(r.u64()?),
                        last_batch: r.u64()?,
                        reply: r.bytes()?,
                    });
                }
                Ok(EveMessage::StateOffer {
                    view,
                    run,
                    seq,
                    token,
                    root,
                    proof,
                    sessions,
                })
            }
            TREE_QUERY => {
                let seq = r.u64()?;
                let count = r.u32()? as usize;
                let count = r.check_count(count, PREFIX_LEN, "tree query")?;
                let prefixes = (0..count)
                    .map(|_| read_prefix(r))
                    .collect::<Result<_, _>>()?;
                Ok(EveMessage::TreeQuery { seq, prefixes })
            }
            TREE_NODES => {
                let seq = r.u64()?;
                let count = r.u32()? as usize;
                let count = r.check_count(count, PREFIX_LEN + 1, "tree nodes")?;
                let mut nodes = Vec::with_capacity(count);
                for _ in 0..count {
                    nodes.push((read_prefix(r)?, read_node(r)?));
                }
                Ok(EveMessage::TreeNodes { seq, nodes })
            }
            JOINED => Ok(EveMessage::Joined {
                view: r.u64()?,
                seq: r.u64()?,
            }),
            tag => Err(WireError::UnknownTag {
                what: "eve message",
                tag,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(message: EveMessage) {
        let bytes = message.to_bytes();
        assert_eq!(bytes.len(), message.encoded_len());
        assert_eq!(EveMessage::decode(&bytes).unwrap(), message);
    }

    #[test]
    fn every_message_decodes_to_itself() {
        let request = |c: u64| EveRequest {
            client: ClientId(c),
            seq: RequestSeq(c + 1),
            payload: Bytes::from(vec![c as u8; c as usize]),
        };
        roundtrip(EveMessage::ExecuteBatch {
            view: 3,
            run: 1,
            committed: 9,
            sequential: true,
            batch: EveBatch {
                seq: 10,
                seed: 77,
                timestamp_ms: 1_700_000_000_000,
                requests: vec![request(1), request(5)],
            },
        });
        roundtrip(EveMessage::Token {
            view: 3,
            run: 0,
            seq: 10,
            token: Digest([7; 32]),
        });
        roundtrip(EveMessage::Commit {
            view: 3,
            committed: 10,
        });
        roundtrip(EveMessage::Rollback {
            view: 3,
            run: 2,
            seq: 11,
        });
        roundtrip(EveMessage::Join { view: 4 });
        roundtrip(EveMessage::StateOffer {
            view: 4,
            run: 2,
            seq: 10,
            token: Digest([1; 32]),
            root: Digest([2; 32]),
            proof: Some(EveTokenProof {
                outputs: Digest([3; 32]),
                previous: Digest([4; 32]),
            }),
            sessions: vec![EveSession {
                client: ClientId(8),
                seq: RequestSeq(3),
                floor: RequestSeq(1),
                last_batch: 9,
                reply: Bytes::from_static(b"ok"),
            }],
        });
        let prefix = TreePrefix {
            depth: 2,
            bits: 0xab << 56,
        };
        roundtrip(EveMessage::TreeQuery {
            seq: 10,
            prefixes: vec![
                TreePrefix { depth: 0, bits: 0 },
                prefix,
                TreePrefix {
                    depth: 16,
                    bits: u64::MAX,
                },
            ],
        });
        roundtrip(EveMessage::TreeNodes {
            seq: 10,
            nodes: vec![
                (prefix, TreeNode::Absent),
                (prefix, TreeNode::Empty),
                (
                    prefix,
                    TreeNode::Leaf {
                        id: 5,
                        value: Bytes::from_static(b"v"),
                    },
                ),
                (
                    prefix,
                    TreeNode::Branch {
                        children: vec![(0, Digest([3; 32])), (15, Digest([4; 32]))],
                    },
                ),
            ],
        });
        roundtrip(EveMessage::Joined { view: 4, seq: 10 });
    }

    #[test]
    fn prefixes_and_branches_out_of_shape_are_rejected() {
        let nodes = |prefix: TreePrefix, node: TreeNode| {
            EveMessage::TreeNodes {
                seq: 1,
                nodes: vec![(prefix, node)],
            }
            .to_bytes()
        };
        let root = TreePrefix { depth: 0, bits: 0 };
        for bad in [
            nodes(TreePrefix { depth: 1, bits: 1 }, TreeNode::Absent),
            nodes(TreePrefix { depth: 17, bits: 0 }, TreeNode::Absent),
            nodes(
                root,
                TreeNode::Branch {
                    children: vec![(3, Digest([0; 32])), (3, Digest([0; 32]))],
                },
            ),
            nodes(
                root,
                TreeNode::Branch {
                    children: vec![(16, Digest([0; 32]))],
                },
            ),
        ] {
            assert!(matches!(
                EveMessage::decode(&bad),
                Err(WireError::Invalid { .. })
            ));
        }
        let mut sequential = EveMessage::ExecuteBatch {
            view: 0,
            run: 0,
            committed: 0,
            sequential: false,
            batch: EveBatch {
                seq: 1,
                seed: 0,
                timestamp_ms: 0,
                requests: Vec::new(),
            },
        }
        .to_bytes()
        .to_vec();
        sequential[2 + 8 + 4 + 8] = 2;
        assert!(EveMessage::decode(&Bytes::from(sequential)).is_err());
    }
}
