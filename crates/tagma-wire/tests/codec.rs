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
fn consensus_types_round_trip_standalone() {
    check(&common::accept());
    check(&common::proof());
    check(&DecisionProof {
        epoch: Epoch(u32::MAX),
        accepts: vec![],
    });
    check(&common::decided());
    check(&common::collect());
    check(&common::empty_collect());
    // `Some` with epoch 0 is distinct from `None`.
    let mut epoch0 = common::empty_collect();
    epoch0.write_quorum = Some((Epoch(0), Digest([0; 32])));
    let none = check(&common::empty_collect());
    let some = check(&epoch0);
    assert_ne!(none, some);
    check(&common::signed_collect());
    check(&common::signed_empty_collect());
    check(&common::stop());
    check(&Stop {
        regency: Regency(9),
        requests: vec![common::mac_envelope(), common::sig_envelope()],
    });
    check(&common::stop_data());
    check(&StopData {
        regency: Regency(1),
        last_decided: Some(common::decided()),
        collect: common::signed_collect(),
    });
    check(&common::sync());
    check(&Sync {
        regency: Regency(4),
        last_decided: None,
        collects: vec![common::signed_collect(), common::signed_empty_collect()],
        proposal: Bytes::new(),
    });
}

#[test]
fn standalone_lengths() {
    assert_eq!(common::accept().encoded_len(), 44 + 64);
    assert_eq!(PeerMessage::Accept(common::accept()).encoded_len(), 2 + 108);
    // replica, regency, cid, None, count.
    assert_eq!(common::empty_collect().encoded_len(), 4 + 4 + 8 + 1 + 4);
    // + (epoch, hash) + 2 × (epoch, len, 2 bytes).
    assert_eq!(
        common::collect().encoded_len(),
        21 + 4 + 32 + 2 * (4 + 4 + 2)
    );
    // epoch, count, 2 × (signer, signature).
    assert_eq!(common::proof().encoded_len(), 8 + 2 * 68);
}

#[test]
fn peer_message_bodies_match_standalone_encodings() {
    fn body(msg: &PeerMessage) -> Bytes {
        msg.to_bytes().slice(2..)
    }
    assert_eq!(
        body(&PeerMessage::Accept(common::accept())),
        common::accept().to_bytes()
    );
    assert_eq!(
        body(&PeerMessage::Stop(common::stop())),
        common::stop().to_bytes()
    );
    assert_eq!(
        body(&PeerMessage::StopData(common::stop_data())),
        common::stop_data().to_bytes()
    );
    assert_eq!(
        body(&PeerMessage::Sync(common::sync())),
        common::sync().to_bytes()
    );
    assert_eq!(
        body(&PeerMessage::Decision(common::decided())),
        common::decided().to_bytes()
    );
}

#[test]
fn collect_signing_bytes_are_domain_separated_encoding() {
    for collect in [common::collect(), common::empty_collect()] {
        let signing = collect_signing_bytes(&collect);
        assert_eq!(&signing[..17], b"tagma v1 collect\0");
        assert_eq!(signing.slice(17..), collect.to_bytes());
    }
    assert_ne!(
        collect_signing_bytes(&common::collect()),
        collect_signing_bytes(&common::empty_collect())
    );
}

#[test]
fn consensus_byte_fields_are_zero_copy() {
    let wire = PeerMessage::Sync(common::sync()).to_bytes();
    let PeerMessage::Sync(sync) = PeerMessage::decode(&wire).unwrap() else {
        panic!("not a sync")
    };
    assert_within(&wire, &sync.proposal);
    assert_within(&wire, &sync.last_decided.unwrap().batch);
    for (_, batch) in &sync.collects[0].collect.write_set {
        assert_within(&wire, batch);
    }
}

fn invalid<T>(what: &'static str) -> Result<T, WireError> {
    Err(WireError::Invalid { what })
}

/// Offset of the first signer in an encoded [`DecidedInstance`] (cid, batch, proof epoch,
/// count).
fn first_signer_at(decided: &DecidedInstance) -> usize {
    8 + 4 + decided.batch.len() + 4 + 4
}

#[test]
fn non_canonical_proof_order_is_rejected() {
    let decided = common::decided();
    let second = first_signer_at(&decided) + 68;
    let bytes = decided.to_bytes();
    // Duplicate signer (0, 0) and descending signers (0, ... then 2 → first set to 3).
    assert_eq!(
        DecidedInstance::decode(&with_byte(&bytes, second, 0)),
        invalid("proof signers order")
    );
    assert_eq!(
        DecidedInstance::decode(&with_byte(&bytes, second - 68, 3)),
        invalid("proof signers order")
    );
    // The same through the peer message and the standalone proof.
    let msg = PeerMessage::Decision(decided.clone()).to_bytes();
    assert_eq!(
        PeerMessage::decode(&with_byte(&msg, 2 + second, 0)),
        invalid("proof signers order")
    );
    let proof = common::proof().to_bytes();
    assert_eq!(
        DecisionProof::decode(&with_byte(&proof, 8 + 68, 0)),
        invalid("proof signers order")
    );
    // Encoding an out-of-order proof yields bytes the decoder refuses.
    let mut unordered = decided;
    unordered.proof.accepts.reverse();
    assert_eq!(
        DecidedInstance::decode(&unordered.to_bytes()),
        invalid("proof signers order")
    );
}

#[test]
fn non_canonical_write_set_order_is_rejected() {
    let collect = common::collect();
    // replica, regency, cid, Some, (epoch, hash), count, then the first entry's epoch.
    let first = 4 + 4 + 8 + 1 + 4 + 32 + 4;
    let second = first + 4 + 4 + 2;
    let bytes = collect.to_bytes();
    assert_eq!(
        Collect::decode(&with_byte(&bytes, second, 0)),
        invalid("write set order")
    );
    assert_eq!(
        Collect::decode(&with_byte(&bytes, first, 2)),
        invalid("write set order")
    );
    let mut unordered = collect.clone();
    unordered.write_set.reverse();
    assert_eq!(
        Collect::decode(&unordered.to_bytes()),
        invalid("write set order")
    );
    // Inside a SYNC: regency, Some, decided, count, then the collect.
    let sync = common::sync();
    let at = 2 + 4 + 1 + sync.last_decided.as_ref().unwrap().encoded_len() + 4 + second;
    let wire = PeerMessage::Sync(sync).to_bytes();
    assert_eq!(
        PeerMessage::decode(&with_byte(&wire, at, 0)),
        invalid("write set order")
    );
}

#[test]
fn invalid_option_tags_are_rejected() {
    let bad = |r: Result<(), WireError>, tag: u8| {
        assert!(
            matches!(r, Err(WireError::UnknownTag { what: "option", tag: t }) if t == tag),
            "{r:?}"
        );
    };
    // Collect write quorum at offset 16.
    let collect = common::collect().to_bytes();
    for tag in [2, 0xff] {
        bad(
            Collect::decode(&with_byte(&collect, 16, tag)).map(|_| ()),
            tag,
        );
    }
    // StopData / Sync last_decided right after the regency (offset 4 standalone, 6 in a
    // peer message).
    let sd = common::stop_data().to_bytes();
    bad(StopData::decode(&with_byte(&sd, 4, 2)).map(|_| ()), 2);
    let sync = PeerMessage::Sync(common::sync()).to_bytes();
    bad(PeerMessage::decode(&with_byte(&sync, 6, 7)).map(|_| ()), 7);
}

#[test]
fn huge_consensus_counts_fail_without_allocating() {
    let too_long = |r: Result<(), WireError>, what: &str| match r {
        Err(WireError::TooLong { what: w, len, .. }) => {
            assert_eq!(w, what);
            assert_eq!(len, u32::MAX as usize);
        }
        other => panic!("{what}: {other:?}"),
    };
    let max = u32::MAX.to_le_bytes();

    // Proof count (after cid, batch, epoch).
    let decided = common::decided();
    let at = first_signer_at(&decided) - 4;
    let mut v = decided.to_bytes().to_vec();
    v[at..at + 4].copy_from_slice(&max);
    too_long(
        DecidedInstance::decode(&Bytes::from(v)).map(|_| ()),
        "decision proof",
    );

    // Write-set count (after replica, regency, cid, None).
    let mut v = common::empty_collect().to_bytes().to_vec();
    v[17..21].copy_from_slice(&max);
    v.extend_from_slice(&[0; 64]);
    too_long(Collect::decode(&Bytes::from(v)).map(|_| ()), "write set");

    // STOP request count (after the regency).
    let mut v = common::stop().to_bytes().to_vec();
    v[4..8].copy_from_slice(&max);
    too_long(Stop::decode(&Bytes::from(v)).map(|_| ()), "stop requests");

    // SYNC collect count (after regency, None).
    let mut v = vec![WIRE_VERSION, 7, 1, 0, 0, 0, 0];
    v.extend_from_slice(&max);
    v.extend_from_slice(&[0; 100]);
    too_long(
        PeerMessage::decode(&Bytes::from(v)).map(|_| ()),
        "sync collects",
    );

    // Byte fields: decided batch, write-set entry, SYNC proposal.
    let mut v = vec![WIRE_VERSION, 9];
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&max);
    assert!(matches!(
        PeerMessage::decode(&Bytes::from(v)),
        Err(WireError::Truncated { .. })
    ));
    let mut v = common::empty_collect().to_bytes().to_vec();
    v[17..21].copy_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&[0; 4]);
    v.extend_from_slice(&max);
    assert!(matches!(
        Collect::decode(&Bytes::from(v)),
        Err(WireError::Truncated { .. })
    ));
    let mut v = common::sync().to_bytes().to_vec();
    let at = v.len() - 4 - 4;
    v[at..at + 4].copy_from_slice(&max);
    assert!(matches!(
        Sync::decode(&Bytes::from(v)),
        Err(WireError::Truncated { .. })
    ));
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

fn arb_signature() -> impl Strategy<Value = Signature> {
    proptest::collection::vec(any::<u8>(), 64).prop_map(|v| Signature(v.try_into().unwrap()))
}

fn arb_vote() -> impl Strategy<Value = Vote> {
    (any::<u64>(), any::<u32>(), any::<[u8; 32]>()).prop_map(|(c, e, h)| Vote {
        cid: ConsensusId(c),
        epoch: Epoch(e),
        hash: Digest(h),
    })
}

fn arb_accept() -> impl Strategy<Value = Accept> {
    (arb_vote(), arb_signature()).prop_map(|(vote, signature)| Accept { vote, signature })
}

/// Signers come out of a `BTreeMap`: strictly ascending, as the encoding requires.
fn arb_proof() -> impl Strategy<Value = DecisionProof> {
    (
        any::<u32>(),
        proptest::collection::btree_map(0u32..16, arb_signature(), 0..5),
    )
        .prop_map(|(epoch, signers)| DecisionProof {
            epoch: Epoch(epoch),
            accepts: signers
                .into_iter()
                .map(|(r, s)| (ReplicaId(r), s))
                .collect(),
        })
}

fn arb_decided() -> impl Strategy<Value = DecidedInstance> {
    (any::<u64>(), payload(), arb_proof()).prop_map(|(cid, batch, proof)| DecidedInstance {
        cid: ConsensusId(cid),
        batch,
        proof,
    })
}

fn arb_collect() -> impl Strategy<Value = Collect> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        proptest::option::of((any::<u32>(), any::<[u8; 32]>())),
        proptest::collection::btree_map(any::<u32>(), payload(), 0..4),
    )
        .prop_map(|(replica, regency, cid, wq, ws)| Collect {
            replica: ReplicaId(replica),
            regency: Regency(regency),
            cid: ConsensusId(cid),
            write_quorum: wq.map(|(e, h)| (Epoch(e), Digest(h))),
            write_set: ws.into_iter().map(|(e, b)| (Epoch(e), b)).collect(),
        })
}

fn arb_signed_collect() -> impl Strategy<Value = SignedCollect> {
    (arb_collect(), arb_signature())
        .prop_map(|(collect, signature)| SignedCollect { collect, signature })
}

fn arb_stop() -> impl Strategy<Value = Stop> {
    (
        any::<u32>(),
        proptest::collection::vec(arb_envelope(), 0..3),
    )
        .prop_map(|(regency, requests)| Stop {
            regency: Regency(regency),
            requests,
        })
}

fn arb_stop_data() -> impl Strategy<Value = StopData> {
    (
        any::<u32>(),
        proptest::option::of(arb_decided()),
        arb_signed_collect(),
    )
        .prop_map(|(regency, last_decided, collect)| StopData {
            regency: Regency(regency),
            last_decided,
            collect,
        })
}

fn arb_sync() -> impl Strategy<Value = Sync> {
    (
        any::<u32>(),
        proptest::option::of(arb_decided()),
        proptest::collection::vec(arb_signed_collect(), 0..3),
        payload(),
    )
        .prop_map(|(regency, last_decided, collects, proposal)| Sync {
            regency: Regency(regency),
            last_decided,
            collects,
            proposal,
        })
}

fn arb_peer() -> impl Strategy<Value = PeerMessage> {
    prop_oneof![
        (any::<u64>(), any::<u32>(), arb_batch()).prop_map(|(c, e, b)| {
            PeerMessage::Propose(Propose {
                cid: ConsensusId(c),
                epoch: Epoch(e),
                batch: b.to_bytes(),
            })
        }),
        arb_vote().prop_map(PeerMessage::Write),
        arb_accept().prop_map(PeerMessage::Accept),
        arb_envelope().prop_map(PeerMessage::Forward),
        arb_stop().prop_map(PeerMessage::Stop),
        arb_stop_data().prop_map(PeerMessage::StopData),
        arb_sync().prop_map(PeerMessage::Sync),
        any::<u64>().prop_map(|cid| PeerMessage::DecisionRequest {
            cid: ConsensusId(cid)
        }),
        arb_decided().prop_map(PeerMessage::Decision),
        (any::<u64>(), any::<bool>()).prop_map(|(next, reply)| PeerMessage::Position {
            next: ConsensusId(next),
            reply
        }),
        any::<u64>().prop_map(|next| PeerMessage::StateQuery {
            next: ConsensusId(next)
        }),
        (
            proptest::option::of((any::<u64>(), any::<u64>(), any::<[u8; 32]>())),
            any::<u64>()
        )
            .prop_map(|(checkpoint, next)| PeerMessage::StateOffer {
                checkpoint: checkpoint.map(|(cid, len, digest)| CheckpointInfo {
                    cid: ConsensusId(cid),
                    len,
                    digest: Digest(digest),
                }),
                next: ConsensusId(next),
            }),
        (any::<u64>(), any::<[u8; 32]>()).prop_map(|(cid, digest)| PeerMessage::StateVote {
            cid: ConsensusId(cid),
            digest: Digest(digest),
        }),
        (any::<u64>(), any::<u64>(), any::<u32>()).prop_map(|(cid, offset, len)| {
            PeerMessage::ChunkRequest {
                cid: ConsensusId(cid),
                offset,
                len,
            }
        }),
        (any::<u64>(), any::<u64>(), payload()).prop_map(|(cid, offset, data)| {
            PeerMessage::Chunk {
                cid: ConsensusId(cid),
                offset,
                data,
            }
        }),
        (any::<u64>(), any::<u32>()).prop_map(|(from, count)| PeerMessage::LogRequest {
            from: ConsensusId(from),
            count
        }),
        arb_decided().prop_map(PeerMessage::LogEntry),
        Just(PeerMessage::ViewQuery),
    ]
}

fn arb_client() -> impl Strategy<Value = ClientMessage> {
    prop_oneof![
        arb_envelope().prop_map(ClientMessage::Request),
        any::<u64>().prop_map(|nonce| ClientMessage::StateQuery { nonce }),
        Just(ClientMessage::ViewQuery),
        Just(ClientMessage::ViewHistoryQuery),
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
    fn prop_collect_round_trips(c in arb_collect()) {
        let bytes = c.to_bytes();
        prop_assert_eq!(bytes.len(), c.encoded_len());
        let signing = collect_signing_bytes(&c);
        prop_assert_eq!(&signing[17..], &bytes[..]);
        prop_assert_eq!(Collect::decode(&bytes).unwrap(), c);
    }

    #[test]
    fn prop_stop_data_and_sync_round_trip(sd in arb_stop_data(), sync in arb_sync()) {
        let bytes = sd.to_bytes();
        prop_assert_eq!(bytes.len(), sd.encoded_len());
        prop_assert_eq!(StopData::decode(&bytes).unwrap(), sd);
        let bytes = sync.to_bytes();
        prop_assert_eq!(bytes.len(), sync.encoded_len());
        prop_assert_eq!(Sync::decode(&bytes).unwrap(), sync);
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
        canonical::<Accept>(&bytes);
        canonical::<DecisionProof>(&bytes);
        canonical::<DecidedInstance>(&bytes);
        canonical::<Stop>(&bytes);
        canonical::<Collect>(&bytes);
        canonical::<SignedCollect>(&bytes);
        canonical::<StopData>(&bytes);
        canonical::<Sync>(&bytes);
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

#[test]
fn views_round_trip_and_reject_what_is_not_canonical() {
    check(&common::view());
    check(&common::view_change());
    check(&ReconfigureOutcome::Installed(common::view()));
    check(&PeerMessage::ViewQuery);
    check(&PeerMessage::ViewInfo(vec![common::view_change()]));
    check(&ClientMessage::ViewHistoryQuery);
    check(&ReplicaMessage::ViewHistory(vec![]));
    check(&ReplicaMessage::ViewHistory(vec![
        common::view_change(),
        common::view_change(),
    ]));
    check(&ReconfigureOutcome::Refused(
        "replica 9 is not a member".into(),
    ));
    check(&View {
        id: ViewId(0),
        f: 0,
        members: vec![],
    });
    // Members out of order, or twice, are not a view.
    let mut unordered = common::view();
    unordered.members.reverse();
    assert_eq!(
        View::decode(&unordered.to_bytes()),
        invalid("view members (ids not strictly ascending)")
    );
    let mut twice = common::view();
    twice.members[1] = twice.members[0].clone();
    assert!(View::decode(&twice.to_bytes()).is_err());
    // An address that is not UTF-8, or too long.
    let mut bad = common::view();
    bad.members[0].addr = "h:0".into();
    let mut bytes = bad.to_bytes().to_vec();
    bytes[20] = 0xff; // first address byte (after id, f, count, member id, length)
    assert_eq!(
        View::decode(&Bytes::from(bytes)),
        invalid("member address (not UTF-8)")
    );
    let mut long = common::view();
    long.members[0].addr = "a".repeat(ADDR_BYTES_MAX + 1);
    assert!(matches!(
        View::decode(&long.to_bytes()),
        Err(WireError::TooLong {
            what: "member address",
            ..
        })
    ));
    // An unknown operation tag.
    let change = common::view_change().to_bytes();
    assert_eq!(
        ViewChange::decode(&with_byte(&change, 8, 9)),
        Err(WireError::UnknownTag {
            what: "view operation",
            tag: 9
        })
    );
    // A count far beyond the input fails without allocating.
    let mut huge = change.to_vec();
    huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        ViewChange::decode(&Bytes::from(huge)),
        Err(WireError::TooLong { .. })
    ));
}

proptest! {
    #[test]
    fn arbitrary_view_changes_round_trip(
        view in any::<u32>(),
        ops in proptest::collection::vec((0u8..3, any::<u32>(), "[a-z0-9.:]{0,20}", any::<[u8; 32]>()), 0..6),
        sig in any::<[u8; 32]>(),
    ) {
        let ops = ops
            .into_iter()
            .map(|(kind, n, addr, key)| match kind {
                0 => ViewOp::Add(ViewMember { id: ReplicaId(n), addr, key: PublicKey(key) }),
                1 => ViewOp::Remove(ReplicaId(n)),
                _ => ViewOp::SetF(n),
            })
            .collect();
        let mut signature = [0u8; 64];
        signature[..32].copy_from_slice(&sig);
        let change = ViewChange { view: ViewId(view), ops, signature: Signature(signature) };
        prop_assert_eq!(ViewChange::decode(&change.to_bytes()).unwrap(), change);
    }

    #[test]
    fn view_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let bytes = Bytes::from(bytes);
        let _ = View::decode(&bytes);
        let _ = ViewChange::decode(&bytes);
    }
}
