//! What the simulator asks of a protocol: one node's state machine, fed messages and time,
//! publishing operations, and telling what it sends and delivers. VCube-Sync's node and
//! the baselines implement it, so every protocol runs on the same link model, the same
//! workload and the same message accounting.

use tagma_vcube::{MsgId, NodeId, TopicId};

/// Bytes of a message by what they carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Operations' payloads.
    pub payload: usize,
    /// Causal metadata (barriers, vector clocks).
    pub metadata: usize,
    /// Headers, acknowledgements, tree maintenance (IHAVE, GRAFT, PRUNE), repair requests.
    pub control: usize,
    /// Failure detection.
    pub detector: usize,
}

impl Sizes {
    pub fn total(&self) -> usize {
        self.payload + self.metadata + self.control + self.detector
    }
}

/// What a node did.
#[derive(Clone, Debug)]
pub enum Effect<M> {
    Send {
        to: NodeId,
        message: M,
    },
    /// An operation was delivered (applied to the node's replica) after `hops` hops.
    Deliver {
        topic: TopicId,
        id: MsgId,
        hops: u8,
    },
    /// A snapshot of the topic covering these counters was installed.
    Installed {
        topic: TopicId,
        delivered: Vec<(NodeId, u64)>,
    },
}

/// One node of a protocol.
pub trait Protocol {
    type Message: Clone;

    /// The message's bytes by class, as it would be encoded.
    fn sizes(message: &Self::Message) -> Sizes;

    /// Reads what handling `message` will read first, a message ahead: its memory is then
    /// on its way into the cache while the node handles the message before it (a message's
    /// contents, shared by the nodes it passes, are mostly out of a node's cache).
    fn warm(_message: &Self::Message) {}

    fn handle(
        &mut self,
        now_ms: u64,
        from: NodeId,
        message: Self::Message,
        out: &mut Vec<Effect<Self::Message>>,
    );
    fn tick(&mut self, now_ms: u64, out: &mut Vec<Effect<Self::Message>>);
    fn next_timeout_ms(&self) -> u64;
    /// Publishes an operation built from the node's replica (`draw` picks what it does);
    /// its id and bytes, or `None` when the node refuses (not subscribed, back-pressure).
    fn publish(
        &mut self,
        now_ms: u64,
        topic: TopicId,
        draw: u64,
        out: &mut Vec<Effect<Self::Message>>,
    ) -> Option<(MsgId, usize)>;
    /// Subscribes the node to `topic` (`subscribe`) or unsubscribes it, at run time;
    /// whether the protocol can (the baselines cannot).
    fn change_subscription(
        &mut self,
        _now_ms: u64,
        _topic: TopicId,
        _subscribe: bool,
        _out: &mut Vec<Effect<Self::Message>>,
    ) -> bool {
        false
    }
    /// A digest of the node's replica of `topic` (equal digests: equal states).
    fn digest(&self, topic: TopicId) -> [u8; 32];
    /// Messages received again (a payload it had already).
    fn duplicates(&self) -> u64;
}
