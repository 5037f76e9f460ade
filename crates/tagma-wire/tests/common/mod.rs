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
    ]
}

pub fn peer_messages() -> Vec<(&'static str, PeerMessage)> {
    let vote = Vote {
        cid: ConsensusId(5),
        epoch: Epoch(1),
        hash: Digest([0xcc; 32]),
    };
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
        ("accept", PeerMessage::Accept(vote)),
        ("forward", PeerMessage::Forward(mac_envelope())),
    ]
}

pub fn client_messages() -> Vec<(&'static str, ClientMessage)> {
    vec![
        ("request_macs", ClientMessage::Request(mac_envelope())),
        ("request_sig", ClientMessage::Request(sig_envelope())),
        ("state_query", ClientMessage::StateQuery { nonce: 77 }),
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
    ]
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
