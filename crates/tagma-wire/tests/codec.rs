//! Round-trip, exact-length, zero-copy and rejection tests for the wire codec.

mod common;

use std::fmt::Debug;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tagma_wire::*;

/// Round-trips `value`, checks `encoded_len`, and checks that every strict prefix and every
/// one-byte extension of the encoding is rejected (without panicking).
fn check<T: Encode + Decode + PartialEq + Debug>(value: &T) -> Bytes {
    let bytes = value.to_bytes();
    assert_eq!(bytes.len(), value.encoded_len(), "encoded_len of {value:?}");
    // `encode` appends to an existing buffer.
    let mut out = BytesMut::from(&b"xyz"[..]);
    value.encode(&mut out);
    assert_eq!(&out[3..], &bytes[..]);

    assert_eq!(&T::decode(&bytes).unwrap(), value);
    for n in 0..bytes.len() {
        let prefix = bytes.slice(..n);
        assert!(
            T::decode(&prefix).is_err(),
            "prefix {n} of {value:?} decoded"
        );
    }
    let mut longer = BytesMut::from(&bytes[..]);
    longer.extend_from_slice(&[0]);
    assert_eq!(
        T::decode(&longer.freeze()),
        Err(WireError::TrailingBytes { count: 1 })
    );
    bytes
}

fn assert_within(outer: &Bytes, inner: &Bytes) {
    let range = outer.as_ptr_range();
    if !inner.is_empty() {
        assert!(range.contains(&inner.as_ptr()), "not a slice of the input");
    }
}

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
fn peer_messages_round_trip() {
    for (_, msg) in common::peer_messages() {
        check(&msg);
    }
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

fn with_byte(bytes: &Bytes, at: usize, value: u8) -> Bytes {
    let mut v = bytes.to_vec();
    v[at] = value;
    Bytes::from(v)
}

type DecodeFn = fn(&Bytes) -> Result<(), WireError>;

fn all_top_level() -> Vec<(&'static str, Bytes, DecodeFn)> {
    fn d<T: Decode>(b: &Bytes) -> Result<(), WireError> {
        T::decode(b).map(|_| ())
    }
    let mut out: Vec<(&'static str, Bytes, DecodeFn)> = vec![];
    for (name, m) in common::handshakes() {
        out.push((name, m.to_bytes(), d::<Handshake>));
    }
    for (name, m) in common::peer_messages() {
        out.push((name, m.to_bytes(), d::<PeerMessage>));
    }
    for (name, m) in common::client_messages() {
        out.push((name, m.to_bytes(), d::<ClientMessage>));
    }
    for (name, m) in common::replica_messages() {
        out.push((name, m.to_bytes(), d::<ReplicaMessage>));
    }
    out
}

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
        for tag in [0u8, 5, 0x80, 0xff] {
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
        Request::decode(&with_byte(&req, 16, 2)),
        Err(WireError::UnknownTag { tag: 2, .. })
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
    }
}

// ------------------------------------------------------------------------------------------
// Property tests
// ------------------------------------------------------------------------------------------

fn payload() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..48).prop_map(Bytes::from)
}

fn kind() -> impl Strategy<Value = RequestKind> {
    prop_oneof![Just(RequestKind::Ordered), Just(RequestKind::Unordered)]
}

fn arb_request() -> impl Strategy<Value = Request> {
    (any::<u64>(), any::<u64>(), kind(), any::<u32>(), payload()).prop_map(
        |(client, seq, kind, view, payload)| Request {
            client: ClientId(client),
            seq: RequestSeq(seq),
            kind,
            view: ViewId(view),
            payload,
        },
    )
}

fn arb_envelope() -> impl Strategy<Value = RequestEnvelope> {
    let auth = prop_oneof![
        proptest::collection::vec(any::<[u8; 16]>().prop_map(MacTag), 0..8)
            .prop_map(RequestAuth::Macs),
        proptest::collection::vec(any::<u8>(), 64)
            .prop_map(|v| { RequestAuth::Signature(Signature(v.try_into().unwrap())) }),
    ];
    (arb_request(), auth).prop_map(|(request, auth)| RequestEnvelope { request, auth })
}

fn arb_batch() -> impl Strategy<Value = Batch> {
    (
        any::<u64>(),
        any::<u64>(),
        proptest::collection::vec(arb_envelope(), 0..4),
    )
        .prop_map(|(timestamp_ms, seed, requests)| Batch {
            timestamp_ms,
            seed,
            requests,
        })
}

fn arb_peer() -> impl Strategy<Value = PeerMessage> {
    let vote = (any::<u64>(), any::<u32>(), any::<[u8; 32]>()).prop_map(|(c, e, h)| Vote {
        cid: ConsensusId(c),
        epoch: Epoch(e),
        hash: Digest(h),
    });
    prop_oneof![
        (any::<u64>(), any::<u32>(), arb_batch()).prop_map(|(c, e, b)| {
            PeerMessage::Propose(Propose {
                cid: ConsensusId(c),
                epoch: Epoch(e),
                batch: b.to_bytes(),
            })
        }),
        vote.clone().prop_map(PeerMessage::Write),
        vote.prop_map(PeerMessage::Accept),
        arb_envelope().prop_map(PeerMessage::Forward),
    ]
}

fn arb_client() -> impl Strategy<Value = ClientMessage> {
    prop_oneof![
        arb_envelope().prop_map(ClientMessage::Request),
        any::<u64>().prop_map(|nonce| ClientMessage::StateQuery { nonce }),
    ]
}

fn arb_replica() -> impl Strategy<Value = ReplicaMessage> {
    prop_oneof![
        (any::<u64>(), any::<u64>(), kind(), any::<u32>(), payload()).prop_map(
            |(client, seq, kind, view, payload)| ReplicaMessage::Reply(Reply {
                client: ClientId(client),
                seq: RequestSeq(seq),
                kind,
                view: ViewId(view),
                payload,
            })
        ),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<[u8; 32]>()
        )
            .prop_map(|(nonce, r, i, q, d)| ReplicaMessage::StateInfo(StateInfo {
                nonce,
                replica: ReplicaId(r),
                executed_instances: i,
                executed_requests: q,
                state_digest: Digest(d),
            })),
    ]
}

fn arb_handshake() -> impl Strategy<Value = Handshake> {
    let role = prop_oneof![
        any::<u32>().prop_map(|r| Role::Replica(ReplicaId(r))),
        any::<u32>().prop_map(Role::Client),
    ];
    prop_oneof![
        (role, any::<[u8; 32]>(), any::<[u8; 32]>()).prop_map(|(role, i, e)| {
            Handshake::Hello {
                role,
                identity: PublicKey(i),
                ephemeral: KexPublic(e),
            }
        }),
        proptest::collection::vec(any::<u8>(), 64).prop_map(|v| Handshake::Proof {
            signature: Signature(v.try_into().unwrap()),
        }),
    ]
}

/// Decodes `bytes` as `T`; on success the re-encoding must be identical (canonical encoding).
fn canonical<T: Encode + Decode>(bytes: &Bytes) {
    if let Ok(v) = T::decode(bytes) {
        assert_eq!(&v.to_bytes(), bytes);
    }
}

proptest! {
    #[test]
    fn prop_batch_round_trips(b in arb_batch()) {
        let bytes = b.to_bytes();
        prop_assert_eq!(bytes.len(), b.encoded_len());
        prop_assert_eq!(Batch::decode(&bytes).unwrap(), b);
    }

    #[test]
    fn prop_peer_round_trips(m in arb_peer()) {
        let bytes = m.to_bytes();
        prop_assert_eq!(bytes.len(), m.encoded_len());
        prop_assert_eq!(PeerMessage::decode(&bytes).unwrap(), m);
    }

    #[test]
    fn prop_client_round_trips(m in arb_client()) {
        let bytes = m.to_bytes();
        prop_assert_eq!(bytes.len(), m.encoded_len());
        prop_assert_eq!(ClientMessage::decode(&bytes).unwrap(), m);
    }

    #[test]
    fn prop_replica_round_trips(m in arb_replica()) {
        let bytes = m.to_bytes();
        prop_assert_eq!(bytes.len(), m.encoded_len());
        prop_assert_eq!(ReplicaMessage::decode(&bytes).unwrap(), m);
    }

    #[test]
    fn prop_handshake_round_trips(m in arb_handshake()) {
        let bytes = m.to_bytes();
        prop_assert_eq!(bytes.len(), m.encoded_len());
        prop_assert_eq!(Handshake::decode(&bytes).unwrap(), m);
    }

    /// Arbitrary bytes never panic any decoder, and whatever decodes re-encodes identically.
    #[test]
    fn prop_arbitrary_bytes_are_safe_and_canonical(
        v in proptest::collection::vec(any::<u8>(), 0..200),
        version_first in any::<bool>(),
    ) {
        let mut v = v;
        if version_first && !v.is_empty() {
            v[0] = WIRE_VERSION; // reach past the version check more often
        }
        let bytes = Bytes::from(v);
        canonical::<Handshake>(&bytes);
        canonical::<PeerMessage>(&bytes);
        canonical::<ClientMessage>(&bytes);
        canonical::<ReplicaMessage>(&bytes);
        canonical::<Batch>(&bytes);
        canonical::<Request>(&bytes);
        canonical::<RequestEnvelope>(&bytes);
    }

    /// Single-byte corruptions of valid encodings never panic and stay canonical.
    #[test]
    fn prop_mutations_are_safe_and_canonical(
        m in arb_peer(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut v = m.to_bytes().to_vec();
        let i = at.index(v.len());
        v[i] = byte;
        let bytes = Bytes::from(v);
        canonical::<PeerMessage>(&bytes);
    }
}
