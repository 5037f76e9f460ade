//! Stand-in replicas for the proxy's tests: real TCP listeners and real handshakes
//! (`tagma-net`), without consensus. An echo replica answers every request with its payload.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use tagma_config::{Config, ValidConfig};
use tagma_crypto::IdentityKey;
use tagma_net::{KeyDirectory, LocalIdentity, NetLimits};
use tagma_wire::{
    ClientMessage, Decode, Encode, PublicKey, ReplicaId, ReplicaMessage, Reply, Role,
};

/// The client principal of the test configurations.
pub const PRINCIPAL: u32 = 1;

/// The key of the configured client.
pub fn client_key() -> IdentityKey {
    IdentityKey::from_seed([200; 32])
}

/// A key the configuration does not know.
pub fn stranger_key() -> IdentityKey {
    IdentityKey::from_seed([201; 32])
}

fn replica_key(id: u32) -> IdentityKey {
    IdentityKey::from_seed([id as u8 + 1; 32])
}

/// How a stand-in replica behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Completes handshakes with the configured client and echoes every request.
    Echo,
}

/// A 4-replica BFT cluster (f = 1) of stand-ins, one per entry of `behaviours`, with
/// `handshake_timeout_ms`; returns its configuration. The listeners live as long as the test
/// process.
pub fn cluster(behaviours: [Behaviour; 4], handshake_timeout_ms: u64) -> ValidConfig {
    let listeners: Vec<TcpListener> = (0..4)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let mut toml = String::from("[cluster]\nmode = \"bft\"\nf = 1\n\n");
    for (id, addr) in addrs.iter().enumerate() {
        toml.push_str(&format!(
            "[[replica]]\nid = {id}\naddr = \"{addr}\"\npublic_key = \"{}\"\n\n",
            replica_key(id as u32).public().to_hex()
        ));
    }
    toml.push_str(&format!(
        "[[client]]\nid = {PRINCIPAL}\npublic_key = \"{}\"\n\n[timeouts]\nhandshake_timeout_ms = {handshake_timeout_ms}\n",
        client_key().public().to_hex()
    ));
    let cfg = Config::from_toml(&toml).unwrap();
    for (id, (listener, behaviour)) in listeners.into_iter().zip(behaviours).enumerate() {
        match behaviour {
            Behaviour::Echo => spawn_echo(listener, id as u32, &cfg),
        }
    }
    cfg
}

struct Clients(Vec<(u32, PublicKey)>);

impl KeyDirectory for Clients {
    fn lookup(&self, role: &Role) -> Option<PublicKey> {
        match role {
            Role::Client(p) => self.0.iter().find(|(q, _)| q == p).map(|(_, k)| *k),
            Role::Replica(_) => None,
        }
    }
}

fn spawn_echo(listener: TcpListener, id: u32, cfg: &ValidConfig) {
    let clients = cfg.clients.clone();
    let limits = NetLimits {
        frame_bytes_max: cfg.raw.limits.frame_bytes_max,
        handshake_timeout: Duration::from_millis(cfg.raw.timeouts.handshake_timeout_ms),
    };
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let clients = Clients(clients.clone());
            thread::spawn(move || echo(stream, id, &clients, limits));
        }
    });
}

/// Serves one connection: the handshake, then a reply with the payload of every request.
fn echo(stream: TcpStream, id: u32, clients: &Clients, limits: NetLimits) {
    let key = replica_key(id);
    let me = LocalIdentity {
        role: Role::Replica(ReplicaId(id)),
        key: &key,
    };
    let Ok((_, mut reader, mut writer)) = tagma_net::accept(stream, &me, clients, limits) else {
        return;
    };
    while let Ok(frame) = reader.read_frame() {
        let Ok(ClientMessage::Request(envelope)) = ClientMessage::decode(&frame) else {
            continue;
        };
        let request = envelope.request;
        let reply = ReplicaMessage::Reply(Reply {
            client: request.client,
            seq: request.seq,
            kind: request.kind,
            view: request.view,
            payload: request.payload,
        });
        if writer.push(&reply.to_bytes()).is_err() || writer.flush().is_err() {
            return;
        }
    }
}
