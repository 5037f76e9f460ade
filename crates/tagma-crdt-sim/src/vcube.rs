//! VCube-Sync in the simulator: the very node of `tagma-vcube`, its actions turned into the
//! simulator's effects and its messages sized by their encoding.

use tagma_vcube::{Action, Carried, Input, MEMBERSHIP, Message, MsgId, Node, NodeId, TopicId};

use crate::proto::{Effect, Protocol, Sizes};
use tagma_vcube::Kernel;

/// A VCube-Sync node with its replicas.
pub struct VcubeNode(pub Node<Kernel>);

impl VcubeNode {
    fn drain(&mut self, out: &mut Vec<Effect<Message>>) {
        while let Some(action) = self.0.poll_action() {
            match action {
                Action::Send { to, message } => out.push(Effect::Send { to, message }),
                Action::Deliver { topic, id, hops } => {
                    out.push(Effect::Deliver { topic, id, hops })
                }
                // The membership topic is the node's own business, not a replica's.
                Action::Installed { topic, .. } if topic == MEMBERSHIP => {}
                Action::Installed { topic, delivered } => {
                    out.push(Effect::Installed { topic, delivered })
                }
            }
        }
    }
}

impl Protocol for VcubeNode {
    type Message = Message;

    fn sizes(message: &Message) -> Sizes {
        let total = message.encoded_len();
        match message {
            Message::Data { data, .. } => {
                let metadata = data.barrier_len();
                let payload = data.payload().len();
                Sizes {
                    payload,
                    metadata,
                    control: total - payload - metadata,
                    detector: 0,
                }
            }
            Message::Snapshot(s) => Sizes {
                payload: s.state.len(),
                control: total - s.state.len(),
                ..Sizes::default()
            },
            Message::Test | Message::TestReply { .. } => Sizes {
                detector: total,
                ..Sizes::default()
            },
            _ => Sizes {
                control: total,
                ..Sizes::default()
            },
        }
    }

    fn warm(message: &Message) {
        if let Message::Data { data, .. } = message {
            // The message's id, then the start of its barrier (a further pointer away).
            std::hint::black_box(data.id());
            std::hint::black_box(data.barrier().iter().next());
        }
    }

    fn handle(
        &mut self,
        now_ms: u64,
        from: NodeId,
        message: Message,
        out: &mut Vec<Effect<Message>>,
    ) {
        self.0.handle(now_ms, Input::Message { from, message });
        self.drain(out);
    }

    fn tick(&mut self, now_ms: u64, out: &mut Vec<Effect<Message>>) {
        self.0.handle(now_ms, Input::Tick);
        self.drain(out);
    }

    fn next_timeout_ms(&self) -> u64 {
        self.0.next_timeout_ms()
    }

    fn publish(
        &mut self,
        now_ms: u64,
        topic: TopicId,
        draw: u64,
        out: &mut Vec<Effect<Message>>,
    ) -> Option<(MsgId, usize)> {
        let op = self.0.store().operation(topic, draw);
        let len = op.len();
        let id = self.0.publish(now_ms, topic, op).ok();
        self.drain(out);
        id.map(|id| (id, len))
    }

    fn change_subscription(
        &mut self,
        now_ms: u64,
        topic: TopicId,
        subscribe: bool,
        out: &mut Vec<Effect<Message>>,
    ) -> bool {
        let changed = if subscribe {
            self.0.subscribe(now_ms, topic)
        } else {
            self.0.unsubscribe(now_ms, topic)
        };
        self.drain(out);
        changed.is_ok()
    }

    fn digest(&self, topic: TopicId) -> [u8; 32] {
        self.0.store().digest(topic)
    }

    fn duplicates(&self) -> u64 {
        self.0.stats().duplicates
    }
}
