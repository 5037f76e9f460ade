//! Requests, batches, the handshake, and the client and replica messages.

use bytes::Bytes;
use tagma_wire::*;

use crate::common;
use crate::support::*;

#[test]
fn handshake_round_trips() {
    for (_, msg) in common::handshakes() {
        check(&msg);
    }
}

#[test]
fn request_types_round_trip() {
    for kind in [RequestKind::Ordered, RequestKind::Unordered] {
        check(&common::request(kind, b""));
        check(&common::request(kind, b"payload"));
    }
    check(&common::mac_envelope());
    check(&common::sig_envelope());
    check(&RequestEnvelope {
        request: common::request(RequestKind::Ordered, b"x"),
        auth: RequestAuth::Macs(vec![]),
    });
    check(&RequestEnvelope {
        request: common::request(RequestKind::Ordered, b"x"),
        auth: RequestAuth::Macs(vec![MacTag([9; 16]); MAX_MAC_ENTRIES]),
    });
    check(&common::batch());
    check(&Batch {
        timestamp_ms: 0,
        seed: 0,
        requests: vec![],
    });
}

#[test]
fn client_messages_round_trip() {
    for (_, msg) in common::client_messages() {
        check(&msg);
    }
}

#[test]
fn replica_messages_round_trip() {
    for (_, msg) in common::replica_messages() {
        check(&msg);
    }
}

#[test]
fn propose_carries_a_real_batch() {
    let batch = common::batch();
    let encoded = batch.to_bytes();
    let msg = PeerMessage::Propose(Propose {
        cid: ConsensusId(9),
        epoch: Epoch(0),
        batch: encoded.clone(),
    });
    let wire = check(&msg);
    let PeerMessage::Propose(p) = PeerMessage::decode(&wire).unwrap() else {
        panic!("not a propose")
    };
    assert_eq!(p.batch, encoded);
    assert_within(&wire, &p.batch);
    let decoded = Batch::decode(&p.batch).unwrap();
    assert_eq!(decoded, batch);
    for env in &decoded.requests {
        assert_within(&wire, &env.request.payload);
    }
}

#[test]
fn payloads_are_zero_copy() {
    let wire = ClientMessage::Request(common::mac_envelope()).to_bytes();
    let ClientMessage::Request(env) = ClientMessage::decode(&wire).unwrap() else {
        panic!("not a request")
    };
    assert_within(&wire, &env.request.payload);

    let (_, reply) = common::replica_messages().remove(0);
    let wire = reply.to_bytes();
    let ReplicaMessage::Reply(r) = ReplicaMessage::decode(&wire).unwrap() else {
        panic!("not a reply")
    };
    assert_within(&wire, &r.payload);
}

/// Compactness: an empty ordered request authenticated for a 4-replica view.
#[test]
fn four_mac_empty_envelope_is_91_bytes() {
    let env = RequestEnvelope {
        request: common::request(RequestKind::Ordered, b""),
        auth: RequestAuth::Macs(vec![MacTag([1; 16]); 4]),
    };
    assert_eq!(env.encoded_len(), 91);
    assert_eq!(env.to_bytes().len(), 91);
    // As a client message: + version + tag.
    assert_eq!(ClientMessage::Request(env).encoded_len(), 93);
}

#[test]
fn group_envelopes_round_trip_with_the_operation_zero_copy() {
    for group in [Group::None, Group::All, Group::Worker(3), Group::Custom(77)] {
        for op in [&b""[..], b"op", &[0xff; 40]] {
            let envelope = GroupEnvelope {
                group,
                op: Bytes::copy_from_slice(op),
            };
            let bytes = envelope.to_bytes();
            assert_eq!(bytes.len(), envelope.encoded_len());
            let decoded = GroupEnvelope::decode(&bytes).unwrap();
            assert_eq!(decoded, envelope);
            assert_within(&bytes, &decoded.op);
        }
    }
}

#[test]
fn what_is_no_group_envelope_is_rejected() {
    assert_eq!(
        GroupEnvelope::decode(&Bytes::new()),
        Err(WireError::Truncated { needed: 1 })
    );
    assert_eq!(
        GroupEnvelope::decode(&Bytes::from_static(b"\x09op")),
        Err(WireError::UnknownTag {
            what: "group",
            tag: 9
        })
    );
    // A worker's or a registered group's id is cut short.
    for tag in [2u8, 3] {
        assert_eq!(
            GroupEnvelope::decode(&Bytes::from(vec![tag, 1])),
            Err(WireError::Truncated { needed: 3 })
        );
    }
}
