//! Stand-in replicas for the proxy's tests: real TCP listeners and real handshakes
//! (`tagma-net`), without consensus. An echo replica answers every request with its payload
//! (a payload `sleep:<ms>` after that many milliseconds, as a service that defers its reply;
//! `whoami` with `replica <id>`, a reply that differs by replica; `silent:<id>` from every
//! replica but `<id>`, which does not answer it; `never`, which no replica answers), a view
//! query with the configured view and
//! a state query with an empty state;
//! a hung replica's listener accepts TCP connections and never reads (a stopped process: the
//! kernel completes the connection, nobody answers the handshake).

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use tagma_config::{Config, ValidConfig};
use tagma_crypto::IdentityKey;
use tagma_net::{KeyDirectory, LocalIdentity, NetLimits};
use tagma_wire::{
    ClientMessage, Decode, Digest, Encode, PublicKey, ReplicaId, ReplicaMessage, Reply, Role,
    StateInfo, View,
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
    /// Accepts TCP connections and never reads from them.
    Hung,
}

/// A 4-replica BFT cluster (f = 1) of stand-ins, one per entry of `behaviours`, with
/// `handshake_timeout_ms`; returns its configuration. The listeners live as long as the test
/// process.
pub fn cluster(behaviours: [Behaviour; 4], handshake_timeout_ms: u64) -> ValidConfig {
    cluster_with(behaviours, handshake_timeout_ms, "")
}

/// [`cluster`] with more lines for its `[timeouts]` section.
pub fn cluster_with(
    behaviours: [Behaviour; 4],
    handshake_timeout_ms: u64,
    timeouts: &str,
) -> ValidConfig {
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
        "[[client]]\nid = {PRINCIPAL}\npublic_key = \"{}\"\n\n[timeouts]\nhandshake_timeout_ms = {handshake_timeout_ms}\n{timeouts}\n",
        client_key().public().to_hex()
    ));
    let cfg = Config::from_toml(&toml).unwrap();
    for (id, (listener, behaviour)) in listeners.into_iter().zip(behaviours).enumerate() {
        match behaviour {
            Behaviour::Echo => spawn_echo(listener, id as u32, &cfg),
            // Kept open, never accepted: connections wait in the backlog.
            Behaviour::Hung => std::mem::forget(listener),
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
    let view = cfg.initial_view();
    let limits = NetLimits {
        frame_bytes_max: cfg.raw.limits.frame_bytes_max,
        handshake_timeout: Duration::from_millis(cfg.raw.timeouts.handshake_timeout_ms),
    };
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let (clients, view) = (Clients(clients.clone()), view.clone());
            thread::spawn(move || echo(stream, id, &clients, &view, limits));
        }
    });
}

/// Serves one connection: the handshake, then the answers.
fn echo(stream: TcpStream, id: u32, clients: &Clients, view: &View, limits: NetLimits) {
    let key = replica_key(id);
    let me = LocalIdentity {
        role: Role::Replica(ReplicaId(id)),
        key: &key,
    };
    let Ok((_, mut reader, mut writer)) = tagma_net::accept(stream, &me, clients, limits) else {
        return;
    };
    while let Ok(frame) = reader.read_frame() {
        let reply = match ClientMessage::decode(&frame) {
            Ok(ClientMessage::Request(envelope)) => {
                let text = std::str::from_utf8(&envelope.request.payload).unwrap_or("");
                if let Some(ms) = text.strip_prefix("sleep:").and_then(|ms| ms.parse().ok()) {
                    thread::sleep(Duration::from_millis(ms));
                }
                if text == "never" || text.strip_prefix("silent:") == Some(id.to_string().as_str())
                {
                    continue;
                }
                let payload = match text {
                    "whoami" => format!("replica {id}").into(),
                    _ => envelope.request.payload,
                };
                ReplicaMessage::Reply(Reply {
                    client: envelope.request.client,
                    seq: envelope.request.seq,
                    kind: envelope.request.kind,
                    view: envelope.request.view,
                    payload,
                })
            }
            Ok(ClientMessage::ViewQuery) => ReplicaMessage::CurrentView(view.clone()),
            Ok(ClientMessage::StateQuery { nonce }) => ReplicaMessage::StateInfo(StateInfo {
                nonce,
                replica: ReplicaId(id),
                executed_instances: 0,
                executed_requests: 0,
                state_digest: Digest([0; 32]),
            }),
            _ => continue,
        };
        if writer.push(&reply.to_bytes()).is_err() || writer.flush().is_err() {
            return;
        }
    }
}
