//! The messages between VCube-Sync nodes and their compact encoding (LEB128 varints,
//! length-prefixed payloads). Decoding checks every length against [`Limits`] and rejects
//! trailing bytes; malformed input is a [`VcubeError::Malformed`], never a panic.

use std::ops::Deref;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

pub use crate::causal::barrier_len;
use crate::causal::highest_node;
use crate::causal::{Barrier, Carried, Ids, MsgId};
use crate::cube::NodeId;
use crate::error::VcubeError;
use crate::varint::put_varint;
pub use crate::varint::varint_len;

/// A topic: the key of partial replication (one replicated object per topic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicId(pub u32);

/// A published message, as its publisher made it.
#[derive(Debug, PartialEq, Eq)]
pub struct Published {
    topic: TopicId,
    id: MsgId,
    /// The publisher's causal barrier: the message's direct predecessors.
    barrier: Barrier,
    /// Bytes of the barrier as encoded.
    barrier_len: usize,
    /// The highest node id among the publisher and the barrier's entries.
    highest_node: NodeId,
    payload: Bytes,
}

impl Published {
    pub fn new(topic: TopicId, id: MsgId, barrier: Vec<MsgId>, payload: Bytes) -> Published {
        Published {
            topic,
            id,
            barrier_len: barrier_len(&barrier),
            highest_node: highest_node(id, &barrier),
            barrier: Barrier::from(barrier),
            payload,
        }
    }

    pub fn topic(&self) -> TopicId {
        self.topic
    }

    pub fn id(&self) -> MsgId {
        self.id
    }

    /// The message's direct causal predecessors.
    pub fn barrier(&self) -> Ids<'_> {
        self.barrier.ids()
    }

    /// Bytes of the barrier as encoded ([`barrier_len`]), known without walking it.
    pub fn barrier_len(&self) -> usize {
        self.barrier_len
    }

    pub fn payload(&self) -> &Bytes {
        &self.payload
    }
}

/// A published message on its way down a topic tree: every copy of it shares what its
/// publisher made (cloning one copies a pointer) and counts its own hops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data {
    pub published: Arc<Published>,
    /// Tree hops from the publisher so far.
    pub hops: u8,
}

impl Data {
    pub fn new(published: Published, hops: u8) -> Data {
        Data {
            published: Arc::new(published),
            hops,
        }
    }
}

impl Deref for Data {
    type Target = Published;

    fn deref(&self) -> &Published {
        &self.published
    }
}

impl Carried for Data {
    fn barrier(&self) -> Ids<'_> {
        self.published.barrier()
    }

    /// Known without walking the barrier: every copy of the message shares it.
    fn highest_node(&self) -> NodeId {
        self.published.highest_node
    }
}

/// A message between nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A tree message (`repair`: an answer to a sync or a fetch, not to be relayed).
    Data { data: Data, repair: bool },
    /// The receiver of these tree messages took them (hop-by-hop reliable channel); a node
    /// gathers its acknowledgements to one sender until its next tick.
    Ack { topic: TopicId, ids: Box<[MsgId]> },
    /// A failure detector test.
    Test,
    /// The answer to a test: the tested node's non-zero event counters.
    TestReply { events: Box<[(u32, u32)]> },
    /// Anti-entropy: what the sender delivered on a topic; the receiver sends back what
    /// it holds beyond that.
    SyncRequest {
        topic: TopicId,
        delivered: Box<[(NodeId, u64)]>,
    },
    /// Fetch these messages (predecessors that buffered messages have waited on).
    Fetch { topic: TopicId, ids: Box<[MsgId]> },
    /// A joining or lagging node asks for the topic's state.
    SnapshotRequest { topic: TopicId },
    /// The topic's replicated state and the counters it covers (boxed: it is rare, and
    /// inline it would double the size of every message).
    Snapshot(Box<TopicSnapshot>),
}

/// A topic's replicated state and the counters it covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicSnapshot {
    pub topic: TopicId,
    pub delivered: Vec<(NodeId, u64)>,
    pub state: Bytes,
}

/// Bounds on what a decoded message may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub payload_bytes_max: usize,
    pub state_bytes_max: usize,
    /// Entries of a barrier, a fetch, an acknowledgement, a counter vector or a test reply.
    pub entries_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            payload_bytes_max: 64 * 1024,
            state_bytes_max: 16 * 1024 * 1024,
            entries_max: 1 << 20,
        }
    }
}

fn put_id(out: &mut BytesMut, id: &MsgId) {
    put_varint(out, u64::from(id.source.0));
    put_varint(out, id.counter);
}

fn put_ids(out: &mut BytesMut, ids: &[MsgId]) {
    put_varint(out, ids.len() as u64);
    for id in ids {
        put_id(out, id);
    }
}

fn put_counters(out: &mut BytesMut, counters: &[(NodeId, u64)]) {
    put_varint(out, counters.len() as u64);
    for (node, c) in counters {
        put_varint(out, u64::from(node.0));
        put_varint(out, *c);
    }
}

fn put_bytes(out: &mut BytesMut, b: &Bytes) {
    put_varint(out, b.len() as u64);
    out.put_slice(b);
}

impl Message {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        match self {
            Message::Data { data, repair } => {
                out.put_u8(if *repair { 2 } else { 1 });
                put_varint(&mut out, u64::from(data.topic().0));
                put_id(&mut out, &data.id());
                let barrier = data.barrier();
                put_varint(&mut out, barrier.len() as u64);
                for id in barrier.iter() {
                    put_id(&mut out, &id);
                }
                out.put_u8(data.hops);
                put_bytes(&mut out, data.payload());
            }
            Message::Ack { topic, ids } => {
                out.put_u8(3);
                put_varint(&mut out, u64::from(topic.0));
                put_ids(&mut out, ids);
            }
            Message::Test => out.put_u8(4),
            Message::TestReply { events } => {
                out.put_u8(5);
                put_varint(&mut out, events.len() as u64);
                for (node, c) in events {
                    put_varint(&mut out, u64::from(*node));
                    put_varint(&mut out, u64::from(*c));
                }
            }
            Message::SyncRequest { topic, delivered } => {
                out.put_u8(6);
                put_varint(&mut out, u64::from(topic.0));
                put_counters(&mut out, delivered);
            }
            Message::Fetch { topic, ids } => {
                out.put_u8(7);
                put_varint(&mut out, u64::from(topic.0));
                put_ids(&mut out, ids);
            }
            Message::SnapshotRequest { topic } => {
                out.put_u8(8);
                put_varint(&mut out, u64::from(topic.0));
            }
            Message::Snapshot(s) => {
                let TopicSnapshot {
                    topic,
                    delivered,
                    state,
                } = &**s;
                out.put_u8(9);
                put_varint(&mut out, u64::from(topic.0));
                put_counters(&mut out, delivered);
                put_bytes(&mut out, state);
            }
        }
        debug_assert_eq!(out.len(), self.encoded_len());
        out.freeze()
    }

    /// Bytes of [`Message::encode`], computed without encoding.
    pub fn encoded_len(&self) -> usize {
        let counters = |c: &[(NodeId, u64)]| {
            varint_len(c.len() as u64)
                + (c.iter())
                    .map(|(n, v)| varint_len(u64::from(n.0)) + varint_len(*v))
                    .sum::<usize>()
        };
        let bytes = |b: &Bytes| varint_len(b.len() as u64) + b.len();
        1 + match self {
            Message::Data { data, .. } => {
                varint_len(u64::from(data.topic().0))
                    + data.id().encoded_len()
                    + data.barrier_len()
                    + 1
                    + bytes(data.payload())
            }
            Message::Ack { topic, ids } => varint_len(u64::from(topic.0)) + barrier_len(ids),
            Message::Test => 0,
            Message::TestReply { events } => {
                varint_len(events.len() as u64)
                    + (events.iter())
                        .map(|(n, c)| varint_len(u64::from(*n)) + varint_len(u64::from(*c)))
                        .sum::<usize>()
            }
            Message::SyncRequest { topic, delivered } => {
                varint_len(u64::from(topic.0)) + counters(delivered)
            }
            Message::Fetch { topic, ids } => varint_len(u64::from(topic.0)) + barrier_len(ids),
            Message::SnapshotRequest { topic } => varint_len(u64::from(topic.0)),
            Message::Snapshot(s) => {
                varint_len(u64::from(s.topic.0)) + counters(&s.delivered) + bytes(&s.state)
            }
        }
    }

    pub fn decode(bytes: &Bytes, limits: &Limits) -> Result<Message, VcubeError> {
        let mut r = Reader { bytes, at: 0 };
        let tag = r.u8()?;
        let message = match tag {
            1 | 2 => {
                let topic = r.topic()?;
                let id = r.id()?;
                let barrier = r.ids(limits)?;
                let hops = r.u8()?;
                let payload = r.bytes(limits.payload_bytes_max)?;
                Message::Data {
                    data: Data::new(Published::new(topic, id, barrier, payload), hops),
                    repair: tag == 2,
                }
            }
            3 => Message::Ack {
                topic: r.topic()?,
                ids: r.ids(limits)?.into(),
            },
            4 => Message::Test,
            5 => {
                let n = r.count(limits)?;
                let events = (0..n)
                    .map(|_| Ok((r.u32()?, r.u32()?)))
                    .collect::<Result<_, VcubeError>>()?;
                Message::TestReply { events }
            }
            6 => Message::SyncRequest {
                topic: r.topic()?,
                delivered: r.counters(limits)?.into(),
            },
            7 => Message::Fetch {
                topic: r.topic()?,
                ids: r.ids(limits)?.into(),
            },
            8 => Message::SnapshotRequest { topic: r.topic()? },
            9 => Message::Snapshot(Box::new(TopicSnapshot {
                topic: r.topic()?,
                delivered: r.counters(limits)?,
                state: r.bytes(limits.state_bytes_max)?,
            })),
            _ => return Err(VcubeError::Malformed("unknown message tag")),
        };
        if r.at != bytes.len() {
            return Err(VcubeError::Malformed("trailing bytes"));
        }
        Ok(message)
    }
}

struct Reader<'a> {
    bytes: &'a Bytes,
    at: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, VcubeError> {
        let b = *(self.bytes.get(self.at)).ok_or(VcubeError::Malformed("truncated"))?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, VcubeError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            let part = u64::from(b & 0x7f);
            if shift == 63 && part > 1 {
                return Err(VcubeError::Malformed("varint overflows 64 bits"));
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(VcubeError::Malformed("varint longer than 10 bytes"))
    }

    fn u32(&mut self) -> Result<u32, VcubeError> {
        u32::try_from(self.varint()?).map_err(|_| VcubeError::Malformed("value exceeds 32 bits"))
    }

    fn topic(&mut self) -> Result<TopicId, VcubeError> {
        Ok(TopicId(self.u32()?))
    }

    fn id(&mut self) -> Result<MsgId, VcubeError> {
        let source = NodeId(self.u32()?);
        let counter = self.varint()?;
        if counter == 0 {
            return Err(VcubeError::Malformed("message counters start at 1"));
        }
        Ok(MsgId { source, counter })
    }

    fn count(&mut self, limits: &Limits) -> Result<usize, VcubeError> {
        let n = self.varint()?;
        if n > limits.entries_max as u64 || n > (self.bytes.len() - self.at) as u64 {
            return Err(VcubeError::Malformed("too many entries"));
        }
        Ok(n as usize)
    }

    fn ids(&mut self, limits: &Limits) -> Result<Vec<MsgId>, VcubeError> {
        let n = self.count(limits)?;
        (0..n).map(|_| self.id()).collect()
    }

    fn counters(&mut self, limits: &Limits) -> Result<Vec<(NodeId, u64)>, VcubeError> {
        let n = self.count(limits)?;
        (0..n)
            .map(|_| Ok((NodeId(self.u32()?), self.varint()?)))
            .collect()
    }

    fn bytes(&mut self, max: usize) -> Result<Bytes, VcubeError> {
        let n = self.varint()?;
        if n > max as u64 {
            return Err(VcubeError::TooLarge {
                bytes: n.min(usize::MAX as u64) as usize,
                max,
            });
        }
        let end = (self.at)
            .checked_add(n as usize)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(VcubeError::Malformed("truncated"))?;
        let b = self.bytes.slice(self.at..end);
        self.at = end;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn id(source: u32, counter: u64) -> MsgId {
        MsgId::new(NodeId(source), counter)
    }

    #[test]
    fn every_message_round_trips_at_its_computed_length() {
        let messages = vec![
            Message::Data {
                data: Data::new(
                    Published::new(
                        TopicId(7),
                        id(300, 1 << 40),
                        vec![id(1, 2), id(4096, 77)],
                        Bytes::from(vec![9u8; 1024]),
                    ),
                    3,
                ),
                repair: false,
            },
            Message::Data {
                data: Data::new(
                    Published::new(TopicId(0), id(0, 1), vec![], Bytes::new()),
                    0,
                ),
                repair: true,
            },
            // A barrier with a counter beyond 32 bits, kept in 16-byte ids.
            Message::Data {
                data: Data::new(
                    Published::new(
                        TopicId(1),
                        id(2, 5),
                        vec![id(1, 1 << 32), id(9, 3)],
                        Bytes::from_static(b"x"),
                    ),
                    1,
                ),
                repair: false,
            },
            Message::Ack {
                topic: TopicId(1),
                ids: vec![id(5, 9), id(300, 1 << 33)].into(),
            },
            Message::Test,
            Message::TestReply {
                events: vec![(3, 1), (70_000, 4)].into(),
            },
            Message::SyncRequest {
                topic: TopicId(2),
                delivered: vec![(NodeId(1), 10), (NodeId(2), 0)].into(),
            },
            Message::Fetch {
                topic: TopicId(2),
                ids: vec![id(8, 3)].into(),
            },
            Message::SnapshotRequest { topic: TopicId(3) },
            Message::Snapshot(Box::new(TopicSnapshot {
                topic: TopicId(3),
                delivered: vec![(NodeId(9), 4)],
                state: Bytes::from_static(b"state"),
            })),
        ];
        for m in messages {
            let bytes = m.encode();
            assert_eq!(bytes.len(), m.encoded_len());
            assert_eq!(Message::decode(&bytes, &Limits::default()).unwrap(), m);
        }
    }

    #[test]
    fn limits_and_malformed_input_are_typed_errors() {
        let big = Message::Data {
            data: Data::new(
                Published::new(TopicId(0), id(0, 1), vec![], Bytes::from(vec![0u8; 100])),
                0,
            ),
            repair: false,
        }
        .encode();
        let small = Limits {
            payload_bytes_max: 10,
            ..Limits::default()
        };
        assert!(matches!(
            Message::decode(&big, &small),
            Err(VcubeError::TooLarge {
                bytes: 100,
                max: 10
            })
        ));
        let mut trailing = big.to_vec();
        trailing.push(0);
        assert!(Message::decode(&Bytes::from(trailing), &Limits::default()).is_err());
        assert!(Message::decode(&Bytes::from_static(&[3, 0, 0, 0]), &Limits::default()).is_err());
        assert!(Message::decode(&Bytes::new(), &Limits::default()).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Message::decode(&Bytes::from(bytes), &Limits::default());
        }
    }
}
