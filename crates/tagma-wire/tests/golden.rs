//! Golden vectors: they pin the wire format. Each constant is the encoding of one fixed sample
//! from `common`, written field by field (spaces separate fields and are ignored). If one of
//! these tests fails, the wire format changed: that needs a `WIRE_VERSION` bump, not a new
//! vector.
//!
//! Shared pieces, for reading the vectors:
//! - request header: client `03000000 07000000` (principal 7, instance 3), seq `2a00…` (42),
//!   kind (`00` ordered / `01` unordered), view `02000000`, payload length, payload;
//! - MAC auth: tag `00`, count `02`, 2 × 16 bytes; signature auth: tag `01`, 64 bytes;
//! - top-level messages: version `01`, tag, fields;
//! - options: `00` (none) or `01` then the value; vector counts and byte lengths: `u32`;
//! - decided instance: cid `05…`, batch length `07000000` + `\x01opaque`, proof epoch
//!   `01000000`, count `02000000`, signer `00000000` + 64 × `10`, signer `02000000` + 64 × `12`;
//! - collect (full): replica `01000000`, regency `01000000`, cid `05…`, write quorum `01`
//!   epoch `00000000` hash 32 × `cc`, write set count `02000000`: (epoch 0, `0161`),
//!   (epoch 1, `0162`); signed by 64 × `5c`.

mod common;

use std::fmt::Debug;

use bytes::Bytes;
use tagma_wire::*;

const HANDSHAKE_HELLO_REPLICA: &str = "01 01 00 03000000 1111111111111111111111111111111111111111111111111111111111111111 2222222222222222222222222222222222222222222222222222222222222222";
const HANDSHAKE_HELLO_CLIENT: &str = "01 01 01 09000000 3333333333333333333333333333333333333333333333333333333333333333 4444444444444444444444444444444444444444444444444444444444444444";
const HANDSHAKE_PROOF: &str = "01 02 55555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555";
const HANDSHAKE_REFUSED: &str = "01 03 00";
const REQUEST: &str = "03000000 07000000 2a00000000000000 00 02000000 07000000 707574206b2076";
const ENVELOPE_MACS: &str = "03000000 07000000 2a00000000000000 00 02000000 07000000 707574206b2076 00 02 a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1 b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
const ENVELOPE_SIG: &str = "03000000 07000000 2a00000000000000 01 02000000 05000000 676574206b 01 5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";
const BATCH: &str = "01 0068e5cf8b010000 efcdab8967452301 02000000 03000000 07000000 2a00000000000000 00 02000000 07000000 707574206b2076 00 02 a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1 b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2 03000000 07000000 2a00000000000000 01 02000000 05000000 676574206b 01 5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";
const PEER_PROPOSE: &str = "01 01 0500000000000000 01000000 07000000 016f7061717565";
const PEER_WRITE: &str = "01 02 0500000000000000 01000000 cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
const PEER_ACCEPT: &str = "01 03 0500000000000000 01000000 cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee";
const PEER_FORWARD: &str = "01 04 03000000 07000000 2a00000000000000 00 02000000 07000000 707574206b2076 00 02 a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1 b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
const PEER_STOP: &str = "01 05 01000000 01000000 03000000 07000000 2a00000000000000 00 02000000 07000000 707574206b2076 00 02 a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1 b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
const PEER_STOP_DATA: &str = "01 06 01000000 00 03000000 01000000 0500000000000000 00 00000000 5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e";
const PEER_SYNC: &str = "01 07 01000000 01 0500000000000000 07000000 016f7061717565 01000000 02000000 00000000 10101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010 02000000 12121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212 01000000 01000000 01000000 0500000000000000 01 00000000 cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc 02000000 00000000 02000000 0161 01000000 02000000 0162 5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c 04000000 016e6577";
const PEER_DECISION_REQUEST: &str = "01 08 0500000000000000";
const PEER_POSITION: &str = "01 0a 0500000000000000 01";
const PEER_STATE_QUERY: &str = "01 0b 0900000000000000";
const PEER_STATE_OFFER: &str = "01 0c 01 0700000000000000 0300000000000000 cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd 0c00000000000000";
const PEER_STATE_VOTE: &str =
    "01 13 0700000000000000 cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd";
const PEER_CHUNK_REQUEST: &str = "01 0d 0700000000000000 0010000000000000 00040000";
const PEER_CHUNK: &str = "01 0e 0700000000000000 0200000000000000 03000000 78797a";
const PEER_LOG_REQUEST: &str = "01 0f 0800000000000000 40000000";
const PEER_LOG_ENTRY: &str = "01 10 0500000000000000 07000000 016f7061717565 01000000 02000000 00000000 10101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010 02000000 12121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212";
const PEER_DECISION: &str = "01 09 0500000000000000 07000000 016f7061717565 01000000 02000000 00000000 10101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010 02000000 12121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212121212";
const CLIENT_REQUEST_MACS: &str = "01 01 03000000 07000000 2a00000000000000 00 02000000 07000000 707574206b2076 00 02 a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1 b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
const CLIENT_REQUEST_SIG: &str = "01 01 03000000 07000000 2a00000000000000 01 02000000 05000000 676574206b 01 5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";
const CLIENT_STATE_QUERY: &str = "01 02 4d00000000000000";
const REPLICA_REPLY: &str = "01 01 03000000 07000000 2a00000000000000 00 02000000 02000000 6f6b";
const VIEW: &str = "02000000 01000000 02000000 00000000 03000000 683a30 3030303030303030303030303030303030303030303030303030303030303030 04000000 03000000 683a34 3434343434343434343434343434343434343434343434343434343434343434";
const VIEW_CHANGE: &str = "02000000 03000000 00 05000000 03000000 683a35 3535353535353535353535353535353535353535353535353535353535353535 01 01000000 02 02000000 77777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777";
const OUTCOME_REFUSED: &str = "01 03000000 6e6f21";
const REQUEST_RECONFIGURE: &str = "03000000 07000000 2a00000000000000 02 02000000 00000000";
const GROUP_NONE: &str = "00 6f70";
const GROUP_ALL: &str = "01 6f70";
const GROUP_WORKER: &str = "02 03000000 6f70";
const GROUP_CUSTOM: &str = "03 4d000000";
const REPLICA_LEADER: &str = "01 05 02000000 03000000 03000000";
const REPLICA_STATE_INFO: &str = "01 02 4d00000000000000 01000000 0a00000000000000 fa00000000000000 dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd";

fn unhex(spaced: &str) -> Vec<u8> {
    let hex: Vec<u8> = spaced
        .bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    assert!(hex.len().is_multiple_of(2), "odd hex length");
    hex.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn golden<T: Encode + Decode + PartialEq + Debug>(name: &str, value: &T, expected: &str) {
    let expected = unhex(expected);
    let encoded = value.to_bytes();
    assert_eq!(
        common::hex(&encoded),
        common::hex(&expected),
        "{name}: encoding changed"
    );
    assert_eq!(value.encoded_len(), expected.len(), "{name}: encoded_len");
    assert_eq!(
        &T::decode(&Bytes::from(expected)).unwrap(),
        value,
        "{name}: decode"
    );
}

fn find<T>(list: Vec<(&'static str, T)>, name: &str) -> T {
    list.into_iter().find(|(n, _)| *n == name).unwrap().1
}

#[test]
fn golden_handshake() {
    let hs = common::handshakes;
    golden(
        "hello_replica",
        &find(hs(), "hello_replica"),
        HANDSHAKE_HELLO_REPLICA,
    );
    golden(
        "hello_client",
        &find(hs(), "hello_client"),
        HANDSHAKE_HELLO_CLIENT,
    );
    golden("proof", &find(hs(), "proof"), HANDSHAKE_PROOF);
    golden("refused", &find(hs(), "refused"), HANDSHAKE_REFUSED);
}

#[test]
fn golden_request_types() {
    golden(
        "request",
        &common::request(RequestKind::Ordered, b"put k v"),
        REQUEST,
    );
    golden("envelope_macs", &common::mac_envelope(), ENVELOPE_MACS);
    golden("envelope_sig", &common::sig_envelope(), ENVELOPE_SIG);
    golden("batch", &common::batch(), BATCH);
}

#[test]
fn golden_views() {
    golden("view", &common::view(), VIEW);
    golden("view_query", &ClientMessage::ViewQuery, "01 03");
    let current = ReplicaMessage::CurrentView(common::view()).to_bytes();
    assert_eq!(common::hex(&current[..2]), "0103");
    assert_eq!(&current[2..], &common::view().to_bytes()[..]);
    golden("peer_view_query", &PeerMessage::ViewQuery, "01 11");
    golden(
        "view_history_query",
        &ClientMessage::ViewHistoryQuery,
        "01 04",
    );
    let history = ReplicaMessage::ViewHistory(vec![common::view_change()]).to_bytes();
    assert_eq!(common::hex(&history[..6]), "010401000000");
    assert_eq!(&history[6..], &common::view_change().to_bytes()[..]);
    let info = PeerMessage::ViewInfo(vec![common::view_change()]).to_bytes();
    assert_eq!(common::hex(&info[..6]), "011201000000");
    assert_eq!(&info[6..], &common::view_change().to_bytes()[..]);
    golden("view_change", &common::view_change(), VIEW_CHANGE);
    golden(
        "outcome_refused",
        &ReconfigureOutcome::Refused("no!".into()),
        OUTCOME_REFUSED,
    );
    let installed = ReconfigureOutcome::Installed(common::view()).to_bytes();
    assert_eq!(common::hex(&installed[..1]), "00");
    assert_eq!(&installed[1..], &common::view().to_bytes()[..]);
    golden(
        "request_reconfigure",
        &common::request(RequestKind::Reconfigure, b""),
        REQUEST_RECONFIGURE,
    );
    // The signed form: domain tag, then the view and operations as in the encoding.
    let c = common::view_change();
    let signed = view_change_signing_bytes(c.view, &c.ops);
    let encoded = c.to_bytes();
    assert_eq!(&signed[..20], b"tagma/view-change/v1");
    assert_eq!(&signed[20..], &encoded[..encoded.len() - 64]);
}

#[test]
fn golden_peer() {
    let p = common::peer_messages;
    golden("propose", &find(p(), "propose"), PEER_PROPOSE);
    golden("write", &find(p(), "write"), PEER_WRITE);
    golden("accept", &find(p(), "accept"), PEER_ACCEPT);
    golden("forward", &find(p(), "forward"), PEER_FORWARD);
    golden("stop", &find(p(), "stop"), PEER_STOP);
    golden("stop_data", &find(p(), "stop_data"), PEER_STOP_DATA);
    golden("sync", &find(p(), "sync"), PEER_SYNC);
    golden(
        "decision_request",
        &find(p(), "decision_request"),
        PEER_DECISION_REQUEST,
    );
    golden("decision", &find(p(), "decision"), PEER_DECISION);
    golden("position", &find(p(), "position"), PEER_POSITION);
    golden("state_query", &find(p(), "state_query"), PEER_STATE_QUERY);
    golden("state_offer", &find(p(), "state_offer"), PEER_STATE_OFFER);
    golden("state_vote", &find(p(), "state_vote"), PEER_STATE_VOTE);
    golden(
        "chunk_request",
        &find(p(), "chunk_request"),
        PEER_CHUNK_REQUEST,
    );
    golden("chunk", &find(p(), "chunk"), PEER_CHUNK);
    golden("log_request", &find(p(), "log_request"), PEER_LOG_REQUEST);
    golden("log_entry", &find(p(), "log_entry"), PEER_LOG_ENTRY);
}

#[test]
fn golden_client() {
    let c = common::client_messages;
    golden(
        "request_macs",
        &find(c(), "request_macs"),
        CLIENT_REQUEST_MACS,
    );
    golden("request_sig", &find(c(), "request_sig"), CLIENT_REQUEST_SIG);
    golden("state_query", &find(c(), "state_query"), CLIENT_STATE_QUERY);
}

#[test]
fn golden_replica() {
    let r = common::replica_messages;
    golden("reply", &find(r(), "reply"), REPLICA_REPLY);
    golden("state_info", &find(r(), "state_info"), REPLICA_STATE_INFO);
    golden("leader", &find(r(), "leader"), REPLICA_LEADER);
}

#[test]
fn golden_group_envelopes() {
    let envelope = |group, op: &'static [u8]| GroupEnvelope {
        group,
        op: Bytes::from_static(op),
    };
    golden("group_none", &envelope(Group::None, b"op"), GROUP_NONE);
    golden("group_all", &envelope(Group::All, b"op"), GROUP_ALL);
    golden(
        "group_worker",
        &envelope(Group::Worker(3), b"op"),
        GROUP_WORKER,
    );
    golden(
        "group_custom",
        &envelope(Group::Custom(77), b""),
        GROUP_CUSTOM,
    );
}

#[test]
fn golden_eve_messages() {
    golden(
        "eve_execute_batch",
        &EveMessage::ExecuteBatch {
            view: 3,
            run: 1,
            committed: 9,
            sequential: true,
            batch: EveBatch {
                seq: 10,
                seed: 0x0123_4567_89ab_cdef,
                timestamp_ms: 1_700_000_000_000,
                requests: vec![EveRequest {
                    client: ClientId::new(7, 3),
                    seq: RequestSeq(42),
                    payload: Bytes::from_static(b"put k v"),
                }],
            },
        },
        "01 01 0300000000000000 01000000 0900000000000000 01 0a00000000000000 efcdab8967452301 0068e5cf8b010000 01000000 03000000 07000000 2a00000000000000 07000000 707574206b2076",
    );
    golden(
        "eve_token",
        &EveMessage::Token {
            view: 3,
            run: 1,
            seq: 10,
            token: Digest([0xcc; 32]),
        },
        "01 02 0300000000000000 01000000 0a00000000000000 cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
    );
    golden(
        "eve_tree_nodes",
        &EveMessage::TreeNodes {
            seq: 10,
            nodes: vec![(
                TreePrefix {
                    depth: 1,
                    bits: 0xa << 60,
                },
                TreeNode::Leaf {
                    id: 5,
                    value: Bytes::from_static(b"v"),
                },
            )],
        },
        "01 08 0a00000000000000 01000000 01 00000000000000a0 02 0500000000000000 01000000 76",
    );
}
