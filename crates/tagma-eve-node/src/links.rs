//! Connections: accepting and authenticating them, client readers and writers, and the
//! links to the other servers.

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use tagma_config::ValidConfig;
use tagma_crypto::IdentityKey;
use tagma_net::{FrameReader, FrameWriter, KeyDirectory, LocalIdentity, NetError, NetLimits};
use tagma_node::auth::RequestVerifier;
use tagma_wire::{
    ClientMessage, Decode, Encode, EveMessage, EveRequest, PublicKey, ReplicaId, ReplicaMessage,
    RequestEnvelope, Role,
};
use tracing::{debug, warn};

/// What the reader threads hand the protocol thread.
pub(crate) enum Event {
    /// An authenticated client request and the queue of its connection's writer.
    Request {
        request: EveRequest,
        kind: tagma_wire::RequestKind,
        conn: Sender<Bytes>,
    },
    /// A message from another server.
    Peer {
        from: ReplicaId,
        message: EveMessage,
    },
}

/// What every connection thread shares.
pub(crate) struct Links {
    pub(crate) cfg: ValidConfig,
    pub(crate) me: ReplicaId,
    pub(crate) key: IdentityKey,
    pub(crate) limits: NetLimits,
    pub(crate) verifier: RequestVerifier,
    pub(crate) events: Sender<Event>,
    /// The committed state as the stage last saw it: batch, requests, root digest.
    pub(crate) committed: std::sync::Mutex<Committed>,
}

/// What a state query is answered with.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Committed {
    pub(crate) seq: u64,
    pub(crate) requests: u64,
    pub(crate) root: tagma_wire::Digest,
}

impl KeyDirectory for Links {
    fn lookup(&self, role: &Role) -> Option<PublicKey> {
        match role {
            Role::Replica(id) => self.cfg.replica(*id).map(|r| r.public_key),
            Role::Client(p) => self.cfg.client_key(*p),
        }
    }
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new().name(name.clone()).spawn(f) {
        warn!("cannot start thread {name}: {e}");
    }
}

/// Takes connections until the listener fails.
pub(crate) fn accept_loop(links: &Arc<Links>, listener: TcpListener) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                let links = links.clone();
                spawn("handshake".into(), move || serve(&links, stream));
            }
            Err(e) => warn!("accept: {e}"),
        }
    }
}

fn serve(links: &Arc<Links>, stream: TcpStream) {
    let me = LocalIdentity {
        role: Role::Replica(links.me),
        key: &links.key,
    };
    let (role, reader, writer) = match tagma_net::accept(stream, &me, &**links, links.limits) {
        Ok(x) => x,
        Err(e) => {
            debug!("handshake refused: {e}");
            return;
        }
    };
    match role {
        Role::Replica(from) if from != links.me => peer_reader(links, from, reader),
        Role::Replica(_) => {}
        Role::Client(principal) => client_connection(links, principal, reader, writer),
    }
}

fn peer_reader(links: &Links, from: ReplicaId, mut reader: FrameReader) {
    loop {
        let frame = match reader.read_frame() {
            Ok(f) => f,
            Err(e) => {
                if !e.is_disconnect() {
                    warn!("frame from server {from}: {e}");
                }
                return;
            }
        };
        match EveMessage::decode(&frame) {
            Ok(m) => {
                if links.events.send(Event::Peer { from, message: m }).is_err() {
                    return;
                }
            }
            Err(e) => warn!("malformed message from server {from}: {e}"),
        }
    }
}

fn client_connection(links: &Links, principal: u32, mut reader: FrameReader, writer: FrameWriter) {
    let (tx, rx) = bounded::<Bytes>(links.cfg.raw.limits.connection_queue_max);
    spawn(format!("client-out-{principal}"), move || {
        write_loop(&rx, writer);
    });
    loop {
        let frame = match reader.read_frame() {
            Ok(f) => f,
            Err(_) => return,
        };
        match ClientMessage::decode(&frame) {
            Ok(ClientMessage::Request(env)) => {
                if let Some(event) = take_request(links, principal, env, &tx)
                    && links.events.send(event).is_err()
                {
                    return;
                }
            }
            Ok(ClientMessage::ViewQuery) => {
                let view = ReplicaMessage::CurrentView(links.cfg.initial_view()).to_bytes();
                let _ = tx.try_send(view);
            }
            Ok(ClientMessage::StateQuery { nonce }) => {
                let c = *links
                    .committed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let info = ReplicaMessage::StateInfo(tagma_wire::StateInfo {
                    nonce,
                    replica: links.me,
                    executed_instances: c.seq,
                    executed_requests: c.requests,
                    state_digest: c.root,
                });
                let _ = tx.try_send(info.to_bytes());
            }
            // View histories belong to ordered clusters.
            Ok(ClientMessage::ViewHistoryQuery) => {}
            Err(e) => debug!("malformed client message from principal {principal}: {e}"),
        }
    }
}

fn take_request(
    links: &Links,
    principal: u32,
    env: RequestEnvelope,
    conn: &Sender<Bytes>,
) -> Option<Event> {
    if env.request.client.principal() != principal {
        debug!("principal {principal} sent a request of another client");
        return None;
    }
    if env.request.payload.len() > links.cfg.raw.limits.request_bytes_max {
        debug!(
            "a request of {} bytes: over the limit",
            env.request.payload.len()
        );
        return None;
    }
    if let Err(e) = links.verifier.verify(&env) {
        debug!("request refused: {e}");
        return None;
    }
    let request = env.request;
    Some(Event::Request {
        request: EveRequest {
            client: request.client,
            seq: request.seq,
            payload: request.payload,
        },
        kind: request.kind,
        conn: conn.clone(),
    })
}

/// Writes what is queued for one connection, everything queued at once.
fn write_loop(rx: &Receiver<Bytes>, mut writer: FrameWriter) {
    while let Ok(first) = rx.recv() {
        let mut frame = Some(first);
        while let Some(body) = frame {
            if writer.push(&body).is_err() {
                writer.shutdown();
                return;
            }
            frame = rx.try_recv().ok();
        }
        if writer.flush().is_err() {
            writer.shutdown();
            return;
        }
    }
    writer.shutdown();
}

/// Keeps the outbound connection to server `peer` and writes its queue; frames queued
/// while it is unreachable are dropped (the protocol repeats what matters).
pub(crate) fn peer_writer(links: &Links, peer: ReplicaId, rx: &Receiver<Bytes>) {
    let Some(info) = links.cfg.replica(peer).cloned() else {
        return;
    };
    let me = LocalIdentity {
        role: Role::Replica(links.me),
        key: &links.key,
    };
    let t = &links.cfg.raw.timeouts;
    loop {
        let conn = tagma_net::connect(
            info.addr,
            &me,
            Role::Replica(peer),
            &info.public_key,
            links.limits,
            Duration::from_millis(t.connect_timeout_ms),
        );
        let (_reader, mut writer) = match conn {
            Ok(c) => c,
            Err(e) => {
                if matches!(e, NetError::UnknownKey { .. } | NetError::WrongPeer { .. }) {
                    warn!("server {peer} at {}: {e}", info.addr);
                }
                // Whatever was queued meanwhile is stale.
                while rx.try_recv().is_ok() {}
                std::thread::sleep(Duration::from_millis(t.reconnect_delay_ms.clamp(5, 50)));
                continue;
            }
        };
        debug!("connected to server {peer}");
        loop {
            let Ok(first) = rx.recv() else {
                return;
            };
            let mut frame = Some(first);
            let mut failed = false;
            while let Some(body) = frame {
                if writer.push(&body).is_err() {
                    failed = true;
                    break;
                }
                frame = rx.try_recv().ok();
            }
            if failed || writer.flush().is_err() {
                break;
            }
        }
    }
}

/// Queues a frame for the other server, dropping it when the queue is full (the link is
/// down or far behind: the protocol's heartbeats and joins recover).
pub(crate) fn send_peer(tx: &Sender<Bytes>, body: Bytes) {
    if let Err(TrySendError::Full(_)) = tx.try_send(body) {
        debug!("the link to the other server is full: a message dropped");
    }
}
