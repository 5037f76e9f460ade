//! VCube-Sync's message decoder and node: any bytes decode to a message or a typed error; a
//! decoded message re-encodes to one that decodes to itself; and a node fed a stream of
//! decoded messages from arbitrary peers (then time) refuses what it must without panicking.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tagma_vcube::{Cube, Input, Limits, Message, NoStore, Node, NodeConfig, NodeId, TopicId};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let whole = Bytes::copy_from_slice(data);
    if let Ok(m) = Message::decode(&whole, &limits) {
        let again = m.encode();
        assert_eq!(again.len(), m.encoded_len());
        assert_eq!(Message::decode(&again, &limits).as_ref(), Ok(&m));
    }
    let cube = Cube::new(16).expect("16 nodes");
    let subscriptions: BTreeMap<TopicId, BTreeSet<NodeId>> =
        [(TopicId(0), (0..16).map(NodeId).collect())].into();
    let Ok(mut node) = Node::new(
        cube,
        NodeId(3),
        NodeConfig::default(),
        &subscriptions,
        NoStore,
        false,
        0,
    ) else {
        return;
    };
    // Chunks: one byte for the sender, one for the length, then the message.
    let mut rest = data;
    let mut now_ms = 0;
    while rest.len() >= 2 {
        let from = NodeId(u32::from(rest[0] % 20));
        let len = usize::from(rest[1]).min(rest.len() - 2);
        let chunk = Bytes::copy_from_slice(&rest[2..2 + len]);
        rest = &rest[2 + len..];
        if let Ok(message) = Message::decode(&chunk, &limits) {
            node.handle(now_ms, Input::Message { from, message });
        }
        now_ms += 37;
        node.handle(now_ms, Input::Tick);
        while node.poll_action().is_some() {}
    }
    let _ = node.publish(now_ms, TopicId(0), Bytes::from_static(b"op"));
});
