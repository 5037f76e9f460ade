//! Nodes wired to each other through an in-memory queue with a fixed delay per message,
//! crashes and losses chosen by the test.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::*;
use crate::store::Store;

/// Records the operations applied, in order; its snapshot is that list.
#[derive(Default)]
struct Log(Vec<(u32, u64)>);

impl Store for Log {
    fn apply(&mut self, _: TopicId, id: MsgId, _: &Bytes) {
        self.0.push((id.source.0, id.counter));
    }
    fn snapshot(&self, _: TopicId) -> Bytes {
        let mut out = Vec::new();
        for (s, c) in &self.0 {
            out.extend_from_slice(&s.to_le_bytes());
            out.extend_from_slice(&c.to_le_bytes());
        }
        Bytes::from(out)
    }
    fn install(&mut self, _: TopicId, state: &Bytes) -> Result<(), String> {
        if !state.len().is_multiple_of(12) {
            return Err("not a log".into());
        }
        self.0 = (state.chunks(12))
            .map(|c| {
                (
                    u32::from_le_bytes(c[..4].try_into().unwrap()),
                    u64::from_le_bytes(c[4..].try_into().unwrap()),
                )
            })
            .collect();
        Ok(())
    }
}

const T: TopicId = TopicId(1);

/// Decides whether a message from one node to another is lost.
type Loss = Box<dyn FnMut(NodeId, NodeId, &Message) -> bool>;

struct Net {
    now_ms: u64,
    nodes: Vec<Option<Node<Log>>>,
    queue: BTreeMap<(u64, u64), (NodeId, NodeId, Message)>,
    seq: u64,
    /// Drops the message when true.
    lose: Loss,
    sent: u64,
}

fn config() -> NodeConfig {
    NodeConfig {
        detector: DetectorConfig {
            round_ms: 200,
            test_timeout_ms: 50,
            misses_max: 2,
        },
        retransmit_ms: 50,
        ack_misses_max: 3,
        tick_ms: 10,
        fetch_after_ms: 100,
        sync_ms: 300,
        sync_grace_ms: 100,
        snapshot_retry_ms: 100,
        ..NodeConfig::default()
    }
}

impl Net {
    /// Starts node `i` now without state (a late joiner), `subscribers` subscribing to `T`.
    fn start_joining(&mut self, i: u32, subscribers: &[u32]) {
        let subs = BTreeMap::from([(T, subscribers.iter().map(|&j| NodeId(j)).collect())]);
        let cube = Cube::new(self.nodes.len() as u32).unwrap();
        let node = Node::new(
            cube,
            NodeId(i),
            config(),
            &subs,
            Log::default(),
            true,
            self.now_ms,
        );
        self.nodes[i as usize] = Some(node.unwrap());
    }

    fn new(n: u32, subscribers: &[u32]) -> Net {
        let cube = Cube::new(n).unwrap();
        let subs = BTreeMap::from([(
            T,
            subscribers
                .iter()
                .map(|&i| NodeId(i))
                .collect::<BTreeSet<_>>(),
        )]);
        Net {
            now_ms: 0,
            nodes: (0..n)
                .map(|i| {
                    Some(
                        Node::new(cube, NodeId(i), config(), &subs, Log::default(), false, 0)
                            .unwrap(),
                    )
                })
                .collect(),
            queue: BTreeMap::new(),
            seq: 0,
            lose: Box::new(|_, _, _| false),
            sent: 0,
        }
    }

    fn drain(&mut self, i: u32) {
        while let Some(action) = self.nodes[i as usize]
            .as_mut()
            .and_then(|n| n.poll_action())
        {
            if let Action::Send { to, message } = action {
                self.sent += 1;
                if (self.lose)(NodeId(i), to, &message) {
                    continue;
                }
                self.seq += 1;
                self.queue
                    .insert((self.now_ms + 5, self.seq), (NodeId(i), to, message));
            }
        }
    }

    fn publish(&mut self, i: u32) -> MsgId {
        let now = self.now_ms;
        let id = self.nodes[i as usize]
            .as_mut()
            .unwrap()
            .publish(now, T, Bytes::from_static(b"op"))
            .unwrap();
        self.drain(i);
        id
    }

    fn run(&mut self, ms: u64) {
        let end = self.now_ms + ms;
        while self.now_ms < end {
            self.now_ms += 1;
            while let Some(entry) = self.queue.first_entry() {
                if entry.key().0 > self.now_ms {
                    break;
                }
                let (from, to, message) = entry.remove();
                let now = self.now_ms;
                if let Some(node) = self.nodes[to.0 as usize].as_mut() {
                    node.handle(now, Input::Message { from, message });
                    self.drain(to.0);
                }
            }
            for i in 0..self.nodes.len() as u32 {
                let now = self.now_ms;
                let due = self.nodes[i as usize]
                    .as_ref()
                    .is_some_and(|n| n.next_timeout_ms() <= now);
                if due {
                    self.nodes[i as usize]
                        .as_mut()
                        .unwrap()
                        .handle(now, Input::Tick);
                    self.drain(i);
                }
            }
        }
    }

    fn log(&self, i: u32) -> &[(u32, u64)] {
        &self.nodes[i as usize].as_ref().unwrap().store().0
    }
}

#[test]
fn a_message_reaches_every_subscriber_once_and_no_one_else() {
    let subscribers = [0, 3, 6, 9, 12, 15];
    let mut net = Net::new(16, &subscribers);
    net.run(300); // past the first testing round
    net.publish(0);
    net.run(100);
    for i in 0..16 {
        let node = net.nodes[i as usize].as_ref().unwrap();
        let expected: &[(u32, u64)] = if subscribers.contains(&i) {
            &[(0, 1)]
        } else {
            &[]
        };
        assert_eq!(net.log(i), expected, "node {i}");
        assert_eq!(node.stats().duplicates, 0);
    }
}

#[test]
fn causal_order_holds_when_a_successor_overtakes_its_predecessor() {
    let all: Vec<u32> = (0..8).collect();
    let mut net = Net::new(8, &all);
    // Node 0's message to 4 is lost twice: 4's subtree gets it late.
    let mut lost = 0;
    net.lose = Box::new(move |from, to, m| {
        let hit =
            from == NodeId(0) && to == NodeId(4) && matches!(m, Message::Data { .. }) && lost < 2;
        lost += u32::from(hit);
        hit
    });
    net.run(300);
    let first = net.publish(0);
    net.run(8);
    let second = net.publish(1); // after delivering `first`
    net.run(400);
    for i in 0..8 {
        let log = net.log(i);
        let a = log
            .iter()
            .position(|&e| e == (first.source.0, first.counter))
            .unwrap();
        let b = log
            .iter()
            .position(|&e| e == (second.source.0, second.counter))
            .unwrap();
        assert!(a < b, "node {i} delivered {log:?}");
    }
}

#[test]
fn a_crashed_relay_is_replaced_and_its_subtree_still_delivers() {
    let all: Vec<u32> = (0..16).collect();
    let mut net = Net::new(16, &all);
    net.run(300);
    net.nodes[8] = None; // relays 0's messages to 9..16
    for _ in 0..5 {
        net.publish(0);
        net.run(20);
    }
    net.run(2_000);
    for i in (0..16).filter(|&i| i != 8) {
        assert_eq!(net.log(i).len(), 5, "node {i}");
    }
    let stats = net.nodes[0].as_ref().unwrap().stats();
    assert!(stats.replacements > 0, "{stats:?}");
}

#[test]
fn a_late_joiner_installs_a_snapshot_then_follows_the_stream() {
    let all: Vec<u32> = (0..8).collect();
    let mut net = Net::new(8, &all);
    let joiner = net.nodes[5].take();
    drop(joiner);
    net.run(300);
    for _ in 0..3 {
        net.publish(2);
        net.run(20);
    }
    net.start_joining(5, &all);
    net.run(1_000);
    net.publish(2);
    net.run(1_000);
    assert_eq!(net.log(5), &[(2, 1), (2, 2), (2, 3), (2, 4)]);
    assert_eq!(net.log(5), net.log(2));
    assert!(!net.nodes[5].as_ref().unwrap().is_joining(T));
}

#[test]
fn lost_messages_are_resent_and_every_subscriber_converges() {
    let all: Vec<u32> = (0..32).collect();
    let mut net = Net::new(32, &all);
    let mut draw = 1u64;
    net.lose = Box::new(move |_, _, _| {
        draw = draw
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (draw >> 33) % 100 < 10
    });
    net.run(300);
    for k in 0..20 {
        net.publish(k % 32);
        net.run(30);
    }
    net.run(5_000);
    let reference: BTreeSet<(u32, u64)> = net.log(0).iter().copied().collect();
    assert_eq!(reference.len(), 20);
    for i in 0..32 {
        let got: BTreeSet<(u32, u64)> = net.log(i).iter().copied().collect();
        assert_eq!(got, reference, "node {i}");
        assert_eq!(net.log(i).len(), 20, "node {i} applied an operation twice");
    }
}

#[test]
fn bad_input_is_refused_without_panicking() {
    let mut net = Net::new(4, &[0, 1, 2, 3]);
    let node = net.nodes[0].as_mut().unwrap();
    node.handle(
        0,
        Input::Message {
            from: NodeId(9),
            message: Message::Test,
        },
    );
    let stray = Message::Data {
        data: Data::new(
            Published::new(
                TopicId(77),
                MsgId {
                    source: NodeId(99),
                    counter: 1,
                },
                vec![],
                Bytes::new(),
            ),
            0,
        ),
        repair: true,
    };
    node.handle(
        0,
        Input::Message {
            from: NodeId(1),
            message: stray,
        },
    );
    assert_eq!(node.stats().rejected, 2);
    assert!(matches!(
        node.publish(0, TopicId(77), Bytes::new()),
        Err(VcubeError::NotSubscribed { topic: 77 })
    ));
    let cube = Cube::new(4).unwrap();
    let subs = BTreeMap::from([(T, BTreeSet::from([NodeId(4)]))]);
    assert!(Node::new(cube, NodeId(0), config(), &subs, Log::default(), false, 0).is_err());
}

#[test]
fn a_node_subscribes_at_run_time_fetches_the_state_and_follows() {
    let mut net = Net::new(8, &[0, 1, 2, 3, 4, 5, 6]);
    net.run(300);
    for _ in 0..3 {
        net.publish(2);
        net.run(20);
    }
    assert!(net.log(7).is_empty());
    let now = net.now_ms;
    net.nodes[7].as_mut().unwrap().subscribe(now, T).unwrap();
    net.drain(7);
    net.run(1_000);
    for i in 0..7 {
        let view = net.nodes[i].as_ref().unwrap().subscribers_of(T).unwrap();
        assert!(
            view.contains(&NodeId(7)),
            "node {i} learnt of the subscription"
        );
    }
    net.publish(2);
    net.run(1_000);
    assert_eq!(net.log(7), &[(2, 1), (2, 2), (2, 3), (2, 4)]);
    assert!(net.nodes[7].as_ref().unwrap().subscribes(T));
}

#[test]
fn a_node_that_unsubscribes_gets_no_more_of_the_topic() {
    let all: Vec<u32> = (0..8).collect();
    let mut net = Net::new(8, &all);
    net.run(300);
    net.publish(0);
    net.run(100);
    let now = net.now_ms;
    net.nodes[5].as_mut().unwrap().unsubscribe(now, T).unwrap();
    net.drain(5);
    net.run(1_000);
    net.publish(0);
    net.run(1_000);
    assert_eq!(net.log(5), &[(0, 1)], "nothing after it left");
    for i in (0..8).filter(|&i| i != 5) {
        assert_eq!(net.log(i).len(), 2, "node {i}");
    }
    let node = net.nodes[5].as_mut().unwrap();
    assert!(!node.subscribes(T));
    assert!(matches!(
        node.unsubscribe(now, T),
        Err(VcubeError::NotSubscribed { .. })
    ));
    assert!(node.publish(now, MEMBERSHIP, Bytes::new()).is_err());
    assert!(node.subscribe(now, MEMBERSHIP).is_err());
}

#[test]
fn a_late_joiner_learns_the_subscription_changes_made_before_it_started() {
    let mut net = Net::new(8, &[0, 1, 2, 3]);
    net.nodes[6] = None;
    net.run(300);
    let now = net.now_ms;
    net.nodes[4].as_mut().unwrap().subscribe(now, T).unwrap();
    net.drain(4);
    net.run(1_000);
    net.start_joining(6, &[0, 1, 2, 3]);
    net.run(1_500);
    let view = net.nodes[6].as_ref().unwrap().subscribers_of(T).unwrap();
    assert!(view.contains(&NodeId(4)), "{view:?}");
}

/// The acknowledgements a node sends, taken from its actions.
fn acks_sent(node: &mut Node<Log>) -> Vec<(NodeId, Vec<MsgId>)> {
    std::iter::from_fn(|| node.poll_action())
        .filter_map(|a| match a {
            Action::Send {
                to,
                message: Message::Ack { ids, .. },
            } => Some((to, ids.into_vec())),
            _ => None,
        })
        .collect()
}

fn tree_message(source: u32, counter: u64) -> Message {
    let id = MsgId {
        source: NodeId(source),
        counter,
    };
    Message::Data {
        data: Data::new(Published::new(T, id, vec![], Bytes::from_static(b"op")), 0),
        repair: false,
    }
}

#[test]
fn acknowledgements_gather_until_the_tick_and_go_out_when_the_batch_is_full() {
    let cube = Cube::new(4).unwrap();
    let subs = BTreeMap::from([(T, (0..4).map(NodeId).collect::<BTreeSet<_>>())]);
    let mut node = Node::new(cube, NodeId(1), config(), &subs, Log::default(), false, 0).unwrap();
    node.handle(0, Input::Tick);
    assert_eq!(acks_sent(&mut node), vec![]);
    for counter in 1..=3 {
        let message = tree_message(0, counter);
        node.handle(
            1,
            Input::Message {
                from: NodeId(0),
                message,
            },
        );
    }
    node.handle(
        1,
        Input::Message {
            from: NodeId(2),
            message: tree_message(2, 1),
        },
    );
    assert_eq!(acks_sent(&mut node), vec![], "nothing before the tick");
    assert_eq!(node.store().0, vec![(0, 1), (0, 2), (0, 3), (2, 1)]);
    let tick_ms = config().tick_ms;
    node.handle(tick_ms, Input::Tick);
    let id = |source, counter| MsgId {
        source: NodeId(source),
        counter,
    };
    assert_eq!(
        acks_sent(&mut node),
        vec![
            (NodeId(0), vec![id(0, 1), id(0, 2), id(0, 3)]),
            (NodeId(2), vec![id(2, 1)])
        ],
        "one acknowledgement per sender"
    );

    let small = NodeConfig {
        ack_batch_max: 2,
        ..config()
    };
    let mut node = Node::new(cube, NodeId(1), small, &subs, Log::default(), false, 0).unwrap();
    node.handle(0, Input::Tick);
    let _ = acks_sent(&mut node);
    node.handle(
        1,
        Input::Message {
            from: NodeId(0),
            message: tree_message(0, 1),
        },
    );
    assert_eq!(acks_sent(&mut node), vec![]);
    node.handle(
        1,
        Input::Message {
            from: NodeId(0),
            message: tree_message(0, 2),
        },
    );
    assert_eq!(
        acks_sent(&mut node),
        vec![(NodeId(0), vec![id(0, 1), id(0, 2)])],
        "a full batch goes out at once"
    );
}

#[test]
fn a_message_the_causal_order_refuses_is_still_relayed_once() {
    // Node 0's buffer holds one message: the second message waiting on a predecessor is
    // refused, yet relayed; receiving it again is a duplicate, not a second relay.
    let cube = Cube::new(4).unwrap();
    let subs = BTreeMap::from([(T, (0..4).map(NodeId).collect::<BTreeSet<_>>())]);
    let tight = NodeConfig {
        buffer_max: 1,
        ..config()
    };
    let mut node = Node::new(cube, NodeId(0), tight, &subs, Log::default(), false, 0).unwrap();
    node.handle(0, Input::Tick);
    let _ = std::iter::from_fn(|| node.poll_action()).count();
    let relays = |node: &mut Node<Log>| {
        std::iter::from_fn(|| node.poll_action())
            .filter(|a| {
                matches!(
                    a,
                    Action::Send {
                        message: Message::Data { .. },
                        ..
                    }
                )
            })
            .count()
    };
    // From node 3 (cluster 2 of node 0): relayed to cluster 1, node 1.
    node.handle(
        1,
        Input::Message {
            from: NodeId(3),
            message: tree_message(3, 2),
        },
    );
    assert_eq!(relays(&mut node), 1);
    node.handle(
        1,
        Input::Message {
            from: NodeId(3),
            message: tree_message(3, 3),
        },
    );
    assert_eq!(relays(&mut node), 1, "relayed though refused");
    assert_eq!(node.stats().rejected, 1);
    node.handle(
        2,
        Input::Message {
            from: NodeId(3),
            message: tree_message(3, 3),
        },
    );
    assert_eq!(relays(&mut node), 0, "seen already");
    assert_eq!(node.stats().duplicates, 1);
}

#[test]
fn a_counter_far_ahead_keeps_the_remembered_fetches_within_a_batch() {
    // One message whose counter is far ahead names more missing predecessors than any
    // buffer holds: the node asks for one batch, and when no answer comes within
    // `fetch_after_ms` asks for the oldest missing ones again; it never remembers more
    // than a batch of asks.
    let cube = Cube::new(4).unwrap();
    let subs = BTreeMap::from([(T, (0..4).map(NodeId).collect::<BTreeSet<_>>())]);
    // No test round ends within the minute: the publisher is not suspected for its silence.
    let tight = NodeConfig {
        repair_batch_max: 30,
        detector: DetectorConfig {
            round_ms: 3_600_000,
            ..config().detector
        },
        ..config()
    };
    let mut node = Node::new(cube, NodeId(1), tight, &subs, Log::default(), false, 0).unwrap();
    node.handle(
        0,
        Input::Message {
            from: NodeId(0),
            message: tree_message(0, (1 << 63) - 1),
        },
    );
    let mut asked = BTreeSet::new();
    let mut last_ask_ms = 0;
    let mut most = 0;
    let mut now_ms = 0;
    while now_ms < 60_000 {
        now_ms += tight.tick_ms;
        node.handle(now_ms, Input::Tick);
        for action in std::iter::from_fn(|| node.poll_action()) {
            if let Action::Send {
                message: Message::Fetch { ids, .. },
                ..
            } = action
            {
                assert!(ids.len() <= tight.repair_batch_max);
                asked.extend(ids);
                last_ask_ms = now_ms;
            }
        }
        most = most.max(node.topics[&T].fetched.len());
    }
    assert!(most <= tight.repair_batch_max, "{most} asks remembered");
    let oldest: BTreeSet<MsgId> = (1..=tight.repair_batch_max as u64)
        .map(|counter| MsgId {
            source: NodeId(0),
            counter,
        })
        .collect();
    assert_eq!(asked, oldest, "the oldest missing messages are asked for");
    assert!(
        now_ms - last_ask_ms <= tight.fetch_after_ms,
        "asking went on"
    );
}
