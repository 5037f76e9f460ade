//! Property tests: arbitrary values round-trip; arbitrary and mutated bytes never panic and
//! decode only canonically.

use bytes::Bytes;
use proptest::prelude::*;
use tagma_wire::*;

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
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(v, g, l)| {
            ReplicaMessage::Leader(LeaderHint {
                view: ViewId(v),
                regency: Regency(g),
                leader: ReplicaId(l),
            })
        }),
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
        Just(Handshake::Refused {
            reason: Refusal::UnknownKey
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
        canonical::<GroupEnvelope>(&bytes);
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
