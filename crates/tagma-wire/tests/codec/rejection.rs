//! Rejection of malformed top-level messages: wrong version, unknown tags, huge lengths, empty
//! and tiny inputs.

use bytes::Bytes;
use tagma_wire::*;

use crate::common;
use crate::support::*;

#[test]
fn wrong_version_is_rejected() {
    for (name, bytes, decode) in all_top_level() {
        for v in [0, WIRE_VERSION + 1, 0xff] {
            assert_eq!(
                decode(&with_byte(&bytes, 0, v)),
                Err(WireError::Version {
                    found: v,
                    expected: WIRE_VERSION
                }),
                "{name}"
            );
        }
    }
    let batch = common::batch().to_bytes();
    assert!(matches!(
        Batch::decode(&with_byte(&batch, 0, 2)),
        Err(WireError::Version { found: 2, .. })
    ));
}

#[test]
fn unknown_message_tags_are_rejected() {
    for (name, bytes, decode) in all_top_level() {
        for tag in [0u8, 20, 0x80, 0xff] {
            let r = decode(&with_byte(&bytes, 1, tag));
            assert!(
                matches!(r, Err(WireError::UnknownTag { tag: t, .. }) if t == tag),
                "{name} tag {tag}: {r:?}"
            );
        }
    }
}

#[test]
fn bad_inner_tags_are_rejected() {
    // Request kind (offset 16 inside a request).
    let req = common::request(RequestKind::Ordered, b"p").to_bytes();
    assert!(matches!(
        Request::decode(&with_byte(&req, 16, 3)),
        Err(WireError::UnknownTag { tag: 3, .. })
    ));
    // Reply kind (offset 2 + 16).
    let (_, reply) = common::replica_messages().remove(0);
    let reply = reply.to_bytes();
    assert!(matches!(
        ReplicaMessage::decode(&with_byte(&reply, 18, 7)),
        Err(WireError::UnknownTag { tag: 7, .. })
    ));
    // Auth tag (right after the request).
    let env = common::mac_envelope();
    let at = env.request.encoded_len();
    let bytes = env.to_bytes();
    assert!(matches!(
        RequestEnvelope::decode(&with_byte(&bytes, at, 2)),
        Err(WireError::UnknownTag { tag: 2, .. })
    ));
    // Role tag (offset 2).
    let (_, hello) = common::handshakes().remove(0);
    let hello = hello.to_bytes();
    assert!(matches!(
        Handshake::decode(&with_byte(&hello, 2, 2)),
        Err(WireError::UnknownTag { tag: 2, .. })
    ));
    // Refusal reason (offset 2).
    let refused = Handshake::Refused {
        reason: Refusal::UnknownKey,
    }
    .to_bytes();
    assert_eq!(
        Handshake::decode(&with_byte(&refused, 2, 7)),
        Err(WireError::UnknownTag {
            what: "handshake refusal",
            tag: 7
        })
    );
}

#[test]
fn huge_lengths_fail_without_allocating() {
    // Request payload length (offset 21) = u32::MAX.
    let mut req = common::request(RequestKind::Ordered, b"")
        .to_bytes()
        .to_vec();
    req[21..25].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        Request::decode(&Bytes::from(req)),
        Err(WireError::Truncated { .. })
    ));

    // Propose batch length (offset 2 + 8 + 4).
    let mut propose = vec![WIRE_VERSION, 1];
    propose.extend_from_slice(&[0; 12]);
    propose.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        PeerMessage::decode(&Bytes::from(propose)),
        Err(WireError::Truncated { .. })
    ));

    // Batch count = u32::MAX with no envelopes behind it: a naive `Vec::with_capacity` would
    // abort the process; the check rejects it first.
    let mut batch = vec![WIRE_VERSION];
    batch.extend_from_slice(&[0; 16]);
    batch.extend_from_slice(&u32::MAX.to_le_bytes());
    batch.extend_from_slice(&[0; 40]);
    assert_eq!(
        Batch::decode(&Bytes::from(batch)),
        Err(WireError::TooLong {
            what: "batch",
            len: u32::MAX as usize,
            max: 1,
        })
    );

    // MAC count = 255 with only two tags present.
    let env = common::mac_envelope();
    let at = env.request.encoded_len() + 1;
    let bytes = env.to_bytes();
    assert!(matches!(
        RequestEnvelope::decode(&with_byte(&bytes, at, 255)),
        Err(WireError::TooLong { len: 255, .. })
    ));
}

#[test]
fn empty_and_tiny_inputs_are_rejected() {
    for input in [&b""[..], &[WIRE_VERSION][..], &[WIRE_VERSION, 1][..]] {
        let b = Bytes::copy_from_slice(input);
        assert!(Handshake::decode(&b).is_err());
        assert!(PeerMessage::decode(&b).is_err());
        assert!(ClientMessage::decode(&b).is_err());
        assert!(ReplicaMessage::decode(&b).is_err());
        assert!(Batch::decode(&b).is_err());
        assert!(Request::decode(&b).is_err());
        assert!(RequestEnvelope::decode(&b).is_err());
        assert!(Accept::decode(&b).is_err());
        assert!(DecisionProof::decode(&b).is_err());
        assert!(DecidedInstance::decode(&b).is_err());
        assert!(Stop::decode(&b).is_err());
        assert!(Collect::decode(&b).is_err());
        assert!(SignedCollect::decode(&b).is_err());
        assert!(StopData::decode(&b).is_err());
        assert!(Sync::decode(&b).is_err());
    }
}
