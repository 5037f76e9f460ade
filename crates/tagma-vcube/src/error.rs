//! Typed errors of the VCube node: bad configuration, ids outside the cube, and malformed or
//! unexpected messages (rejected, never a panic).

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum VcubeError {
    #[error("a cube holds 1 to 2^20 nodes, not {n}")]
    CubeSize { n: u32 },
    #[error("node {id} is outside the cube of {n} nodes")]
    NodeOutsideCube { id: u32, n: u32 },
    #[error("topic {topic} is unknown here (subscribe to it first)")]
    UnknownTopic { topic: u32 },
    #[error("only subscribers publish: this node is not subscribed to topic {topic}")]
    NotSubscribed { topic: u32 },
    #[error(
        "the causal buffer of topic {topic} is full ({max} messages): a predecessor never arrived"
    )]
    BufferFull { topic: u32, max: usize },
    #[error("{pending} publishes await acknowledgement (at most {max}): publish more slowly")]
    Backpressure { pending: usize, max: usize },
    #[error(
        "this node has numbered 2^63 - 1 messages on topic {topic}: no further one can be numbered"
    )]
    CounterExhausted { topic: u32 },
    #[error("malformed message: {0}")]
    Malformed(&'static str),
    #[error("message too large: {bytes} bytes (at most {max})")]
    TooLarge { bytes: usize, max: usize },
    #[error("invalid configuration: {0}")]
    Config(String),
}
