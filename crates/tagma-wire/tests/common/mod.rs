//! Fixed sample instances shared by the codec and golden-vector tests.
#![allow(dead_code)]

use bytes::Bytes;
use tagma_wire::*;

pub fn request(kind: RequestKind, payload: &'static [u8]) -> Request {
    Request {
        client: ClientId::new(7, 3),
        seq: RequestSeq(42),
        kind,
        view: ViewId(2),
        payload: Bytes::from_static(payload),
    }
}

pub fn mac_envelope() -> RequestEnvelope {
    RequestEnvelope {
        request: request(RequestKind::Ordered, b"put k v"),
        auth: RequestAuth::Macs(vec![MacTag([0xa1; 16]), MacTag([0xb2; 16])]),
    }
}

pub fn sig_envelope() -> RequestEnvelope {
    RequestEnvelope {
        request: request(RequestKind::Unordered, b"get k"),
        auth: RequestAuth::Signature(Signature([0x5a; 64])),
    }
}

pub fn batch() -> Batch {
    Batch {
        timestamp_ms: 1_700_000_000_000,
        seed: 0x0123_4567_89ab_cdef,
        requests: vec![mac_envelope(), sig_envelope()],
    }
}

pub fn handshakes() -> Vec<(&'static str, Handshake)> {
    vec![
        (
            "hello_replica",
            Handshake::Hello {
                role: Role::Replica(ReplicaId(3)),
                identity: PublicKey([0x11; 32]),
                ephemeral: KexPublic([0x22; 32]),
            },
        ),
        (
            "hello_client",
            Handshake::Hello {
                role: Role::Client(9),
                identity: PublicKey([0x33; 32]),
                ephemeral: KexPublic([0x44; 32]),
            },
        ),
        (
            "proof",
            Handshake::Proof {
                signature: Signature([0x55; 64]),
            },
        ),
        (
            "refused",
            Handshake::Refused {
                reason: Refusal::UnknownKey,
            },
        ),
    ]
}

pub fn vote() -> Vote {
    Vote {
        cid: ConsensusId(5),
        epoch: Epoch(1),
        hash: Digest([0xcc; 32]),
    }
}

pub fn accept() -> Accept {
    Accept {
        vote: vote(),
        signature: Signature([0xee; 64]),
    }
}

/// Signed by replicas 0 and 2 (ascending).
pub fn proof() -> DecisionProof {
    DecisionProof {
        epoch: Epoch(1),
        accepts: vec![
            (ReplicaId(0), Signature([0x10; 64])),
            (ReplicaId(2), Signature([0x12; 64])),
        ],
    }
}

pub fn decided() -> DecidedInstance {
    DecidedInstance {
        cid: ConsensusId(5),
        batch: Bytes::from_static(b"\x01opaque"),
        proof: proof(),
    }
}

/// A collect with a write quorum and a two-entry write set.
pub fn collect() -> Collect {
    Collect {
        replica: ReplicaId(1),
        regency: Regency(1),
        cid: ConsensusId(5),
        write_quorum: Some((Epoch(0), Digest([0xcc; 32]))),
        write_set: vec![
            (Epoch(0), Bytes::from_static(b"\x01a")),
            (Epoch(1), Bytes::from_static(b"\x01b")),
        ],
    }
}

/// A collect from a replica that never saw a write quorum nor wrote anything.
pub fn empty_collect() -> Collect {
    Collect {
        replica: ReplicaId(3),
        regency: Regency(1),
        cid: ConsensusId(5),
        write_quorum: None,
        write_set: vec![],
    }
}

pub fn signed_collect() -> SignedCollect {
    SignedCollect {
        collect: collect(),
        signature: Signature([0x5c; 64]),
    }
}

pub fn signed_empty_collect() -> SignedCollect {
    SignedCollect {
        collect: empty_collect(),
        signature: Signature([0x5e; 64]),
    }
}

pub fn stop() -> Stop {
    Stop {
        regency: Regency(1),
        requests: vec![mac_envelope()],
    }
}

/// No last decided instance; an empty collect.
pub fn stop_data() -> StopData {
    StopData {
        regency: Regency(1),
        last_decided: None,
        collect: signed_empty_collect(),
    }
}

pub fn sync() -> Sync {
    Sync {
        regency: Regency(1),
        last_decided: Some(decided()),
        collects: vec![signed_collect()],
        proposal: Bytes::from_static(b"\x01new"),
    }
}

pub fn peer_messages() -> Vec<(&'static str, PeerMessage)> {
    let vote = vote();
    vec![
        (
            "propose",
            PeerMessage::Propose(Propose {
                cid: ConsensusId(5),
                epoch: Epoch(1),
                batch: Bytes::from_static(b"\x01opaque"),
            }),
        ),
        ("write", PeerMessage::Write(vote)),
        ("accept", PeerMessage::Accept(accept())),
        ("forward", PeerMessage::Forward(mac_envelope())),
        ("stop", PeerMessage::Stop(stop())),
        (
            "stop_empty",
            PeerMessage::Stop(Stop {
                regency: Regency(0),
                requests: vec![],
            }),
        ),
        ("stop_data", PeerMessage::StopData(stop_data())),
        (
            "stop_data_decided",
            PeerMessage::StopData(StopData {
                regency: Regency(2),
                last_decided: Some(decided()),
                collect: signed_collect(),
            }),
        ),
        ("sync", PeerMessage::Sync(sync())),
        (
            "sync_empty",
            PeerMessage::Sync(Sync {
                regency: Regency(3),
                last_decided: None,
                collects: vec![],
                proposal: Bytes::new(),
            }),
        ),
        (
            "decision_request",
            PeerMessage::DecisionRequest {
                cid: ConsensusId(5),
            },
        ),
        ("decision", PeerMessage::Decision(decided())),
        (
            "position",
            PeerMessage::Position {
                next: ConsensusId(5),
                reply: true,
            },
        ),
        (
            "state_query",
            PeerMessage::StateQuery {
                next: ConsensusId(9),
            },
        ),
        (
            "state_offer",
            PeerMessage::StateOffer {
                checkpoint: Some(CheckpointInfo {
                    cid: ConsensusId(7),
                    len: 3,
                    digest: Digest([0xcd; 32]),
                }),
                next: ConsensusId(12),
            },
        ),
        (
            "state_vote",
            PeerMessage::StateVote {
                cid: ConsensusId(7),
                digest: Digest([0xcd; 32]),
            },
        ),
        (
            "state_offer_empty",
            PeerMessage::StateOffer {
                checkpoint: None,
                next: ConsensusId(0),
            },
        ),
        (
            "chunk_request",
            PeerMessage::ChunkRequest {
                cid: ConsensusId(7),
                offset: 4096,
                len: 1024,
            },
        ),
        (
            "chunk",
            PeerMessage::Chunk {
                cid: ConsensusId(7),
                offset: 2,
                data: Bytes::from_static(b"xyz"),
            },
        ),
        (
            "log_request",
            PeerMessage::LogRequest {
                from: ConsensusId(8),
                count: 64,
            },
        ),
        ("log_entry", PeerMessage::LogEntry(decided())),
        (
            "decision_empty_proof",
            PeerMessage::Decision(DecidedInstance {
                cid: ConsensusId(0),
                batch: Bytes::new(),
                proof: DecisionProof {
                    epoch: Epoch(0),
                    accepts: vec![],
                },
            }),
        ),
    ]
}

pub fn client_messages() -> Vec<(&'static str, ClientMessage)> {
    vec![
        ("request_macs", ClientMessage::Request(mac_envelope())),
        ("request_sig", ClientMessage::Request(sig_envelope())),
        ("state_query", ClientMessage::StateQuery { nonce: 77 }),
        ("view_query", ClientMessage::ViewQuery),
    ]
}

pub fn replica_messages() -> Vec<(&'static str, ReplicaMessage)> {
    vec![
        (
            "reply",
            ReplicaMessage::Reply(Reply {
                client: ClientId::new(7, 3),
                seq: RequestSeq(42),
                kind: RequestKind::Ordered,
                view: ViewId(2),
                payload: Bytes::from_static(b"ok"),
            }),
        ),
        (
            "state_info",
            ReplicaMessage::StateInfo(StateInfo {
                nonce: 77,
                replica: ReplicaId(1),
                executed_instances: 10,
                executed_requests: 250,
                state_digest: Digest([0xdd; 32]),
            }),
        ),
        ("current_view", ReplicaMessage::CurrentView(view())),
        (
            "leader",
            ReplicaMessage::Leader(LeaderHint {
                view: ViewId(2),
                regency: Regency(3),
                leader: ReplicaId(3),
            }),
        ),
    ]
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn view_member(id: u32) -> ViewMember {
    ViewMember {
        id: ReplicaId(id),
        addr: format!("h:{id}"),
        key: PublicKey([0x30 + id as u8; 32]),
    }
}

pub fn view() -> View {
    View {
        id: ViewId(2),
        f: 1,
        members: vec![view_member(0), view_member(4)],
    }
}

pub fn view_change() -> ViewChange {
    ViewChange {
        view: ViewId(2),
        ops: vec![
            ViewOp::Add(view_member(5)),
            ViewOp::Remove(ReplicaId(1)),
            ViewOp::SetF(2),
        ],
        signature: Signature([0x77; 64]),
    }
}
