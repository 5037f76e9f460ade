//! VCube-Sync's node, sans-IO (de Araujo, Arantes, Duarte, Rodrigues, Sens: "VCube-PS: A
//! Causal Broadcast Topic-based Publish/Subscribe System"; Duarte, Bona, Ruoso: "VCube: A
//! Provably Scalable Distributed Diagnosis Algorithm"): the hypercube overlay ([`cube`]),
//! its failure detector ([`detector`]), per-topic trees over subscribers ([`tree`]) and
//! causal delivery with causal barriers ([`causal`]), and the node that puts them together
//! ([`node`]) over a reliable hop-by-hop channel with repair, replicating a [`Store`].

pub mod causal;
pub mod cube;
pub mod detector;
pub mod error;
pub mod fast;
pub mod kernel;
pub mod message;
pub mod node;
pub mod replica;
pub mod store;
pub mod tree;
pub mod varint;

pub use causal::{Carried, Causal, Delivered, MsgId, Received};
pub use cube::{Cube, NodeId};
pub use detector::{Change, Detector, DetectorConfig};
pub use error::VcubeError;
pub use kernel::Kernel;
pub use message::{Data, Limits, Message, Published, TopicId, TopicSnapshot};
pub use node::{Action, Input, MEMBERSHIP, Node, NodeConfig, NodeStats};
pub use replica::{CounterHandle, MapHandle, RegisterHandle, Replica, SetHandle};
pub use store::{NoStore, Store};
