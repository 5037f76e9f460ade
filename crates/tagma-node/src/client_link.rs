//! Connections: accepting TCP connections, the handshake that tells clients from peers, and a
//! client connection's reader (MAC check, decode, request authentication, hand-off to the
//! consensus or execution queue).

use std::{
    collections::HashSet,
    net::{TcpListener, TcpStream},
    sync::{Arc, atomic::Ordering},
    thread,
    time::Duration,
};

use bytes::Bytes;
use crossbeam_channel::bounded;
use tagma_net::{FrameReader, FrameWriter, LocalIdentity, NetError};
use tagma_wire::{
    ClientId, ClientMessage, Decode, Encode, LeaderHint, Regency, ReplicaId, ReplicaMessage,
    RequestEnvelope, RequestKind, Role, ViewId,
};
use tracing::{debug, info_span};

use crate::{
    CLIENTS_PER_CONNECTION_MAX, membership,
    peer_link::{peer_reader, write_loop},
    shared::{ConnHandle, ConsensusEvent, ExecEvent, Shared, name_this_thread, spawn},
};

/// Accepts connections. Handshakes in progress are bounded (unauthenticated peers cannot
/// exhaust threads); failures to accept or to start a thread back off instead of spinning.
pub(crate) fn accept_loop(sh: &Arc<Shared>, listener: TcpListener) {
    let pause = || thread::sleep(Duration::from_millis(10));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                sh.reject("accept_failed", format_args!("accept failed: {e}"));
                pause();
                continue;
            }
        };
        let limit = sh.cfg.raw.limits.connections_max as u64;
        if sh.handshakes.fetch_add(1, Ordering::Relaxed) >= limit {
            sh.handshakes.fetch_sub(1, Ordering::Relaxed);
            sh.reject(
                "too_many_handshakes",
                format_args!("{limit} handshakes in progress"),
            );
            continue;
        }
        let sh2 = sh.clone();
        let me = sh.me;
        let started = thread::Builder::new().name("conn".into()).spawn(move || {
            let _span = info_span!("replica", id = me.0, thread = "conn").entered();
            serve_connection(&sh2, stream)
        });
        if let Err(e) = started {
            sh.handshakes.fetch_sub(1, Ordering::Relaxed);
            sh.reject(
                "thread_spawn_failed",
                format_args!("cannot start a connection thread: {e}"),
            );
            pause();
        }
    }
}

/// Runs the handshake, then serves the connection as a peer or a client.
pub(crate) fn serve_connection(sh: &Arc<Shared>, stream: TcpStream) {
    let peer_addr = stream.peer_addr().ok();
    let me = LocalIdentity {
        role: Role::Replica(sh.me),
        key: &sh.key,
    };
    let directory = membership::Directory {
        cfg: &sh.cfg,
        roster: &sh.roster,
    };
    let handshake = tagma_net::accept(stream, &me, &directory, sh.limits);
    sh.handshakes.fetch_sub(1, Ordering::Relaxed);
    let (role, reader, writer) = match handshake {
        Ok(x) => x,
        Err(e) => {
            sh.reject(
                e.reason(),
                format_args!("handshake from {peer_addr:?}: {e}"),
            );
            return;
        }
    };
    match role {
        Role::Replica(from) => {
            name_this_thread(&format!("peer-in-{from}"));
            peer_reader(sh, from, reader, writer)
        }
        Role::Client(principal) => {
            name_this_thread(&format!("client-in-{principal}"));
            client_connection(sh, principal, reader, writer)
        }
    }
}

pub(crate) fn client_connection(
    sh: &Arc<Shared>,
    principal: u32,
    mut reader: FrameReader,
    mut writer: FrameWriter,
) {
    let open = sh
        .metrics
        .client_connections
        .fetch_add(1, Ordering::Relaxed)
        + 1;
    if open as usize > sh.cfg.raw.limits.connections_max {
        sh.metrics
            .client_connections
            .fetch_sub(1, Ordering::Relaxed);
        sh.reject(
            "too_many_connections",
            format_args!("client principal {principal}: {open} connections open"),
        );
        writer.shutdown();
        return;
    }
    let id = sh.next_conn_id.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = bounded::<Bytes>(sh.cfg.raw.limits.connection_queue_max);
    let conn = ConnHandle { id, tx };
    let me = sh.me;
    let metrics = sh.metrics.clone();
    let writer_thread = spawn(format!("client-out-{id}"), me, move || {
        let _ = write_loop(&rx, &mut writer, &metrics);
        writer.shutdown();
    });
    debug!(conn = id, principal, "client connected");
    let mut routed: HashSet<ClientId> = HashSet::new();
    let mut hinted = None;
    let reason = loop {
        let frame = match reader.read_frame() {
            Ok(f) => f,
            Err(NetError::Closed) => break None,
            Err(e) => break Some(e),
        };
        let msg = match ClientMessage::decode(&frame) {
            Ok(m) => m,
            Err(e) => {
                sh.reject(
                    "malformed_message",
                    format_args!("from client principal {principal}: {e}"),
                );
                continue;
            }
        };
        match msg {
            ClientMessage::Request(request) => {
                sh.metrics.requests_received.fetch_add(1, Ordering::Relaxed);
                let client = request.request.client;
                if client.principal() != principal {
                    sh.reject("principal_mismatch", format_args!("connection of principal {principal} sent a request as client {client:?}"));
                    continue;
                }
                if !routed.contains(&client) {
                    if routed.len() >= CLIENTS_PER_CONNECTION_MAX {
                        sh.reject(
                            "too_many_clients",
                            format_args!("connection {id} carries {} clients", routed.len()),
                        );
                        continue;
                    }
                    routed.insert(client);
                    if sh
                        .exec_tx
                        .send(ExecEvent::Route {
                            client,
                            conn: conn.clone(),
                        })
                        .is_err()
                    {
                        break None;
                    }
                }
                if request.request.kind == RequestKind::Ordered {
                    hint_leader(sh, &conn, &mut hinted);
                }
                if !accept_request(sh, request, &conn) {
                    break None;
                }
            }
            ClientMessage::StateQuery { nonce } => {
                if sh
                    .exec_tx
                    .send(ExecEvent::StateQuery {
                        nonce,
                        conn: conn.clone(),
                    })
                    .is_err()
                {
                    break None;
                }
            }
            ClientMessage::ViewQuery => {
                if sh
                    .exec_tx
                    .send(ExecEvent::ViewQuery { conn: conn.clone() })
                    .is_err()
                {
                    break None;
                }
            }
            ClientMessage::ViewHistoryQuery => {
                if sh
                    .exec_tx
                    .send(ExecEvent::ViewHistoryQuery { conn: conn.clone() })
                    .is_err()
                {
                    break None;
                }
            }
        }
    };
    if let Some(e) = reason {
        if e.is_disconnect() {
            // A client that exits resets its connections: normal, so counted but quiet.
            sh.metrics.reject(e.reason());
            debug!(
                reason = e.reason(),
                "client principal {principal} (connection {id}): {e}; connection closed"
            );
        } else {
            sh.reject(
                e.reason(),
                format_args!(
                    "client principal {principal} (connection {id}): {e}; connection closed"
                ),
            );
        }
    }
    let _ = sh.exec_tx.send(ExecEvent::Unroute { conn_id: id });
    drop(conn);
    let _ = writer_thread.join();
    sh.metrics
        .client_connections
        .fetch_sub(1, Ordering::Relaxed);
}

/// Whether a request checked on a client connection may come back in a PROPOSE to this
/// replica, so that keeping it (`verified.rs`) spares a second check: not at the leader, which
/// relays requests rather than receiving them relayed, nor at the unreplicated server.
fn may_be_relayed_here(sh: &Shared) -> bool {
    !sh.unreplicated && sh.metrics.leader.load(Ordering::Relaxed) != u64::from(sh.me.0)
}

/// Tells a client that sent this replica an ordered request which replica leads, when this
/// one does not: clients send ordered requests to the leader first, and learn a new one from
/// these hints. At most one hint per connection and regency (`hinted`: the last one sent).
fn hint_leader(sh: &Shared, conn: &ConnHandle, hinted: &mut Option<LeaderHint>) {
    if sh.unreplicated {
        return;
    }
    let m = &sh.metrics;
    let hint = LeaderHint {
        view: ViewId(m.view.load(Ordering::Relaxed) as u32),
        regency: Regency(m.regency.load(Ordering::Relaxed) as u32),
        leader: ReplicaId(m.leader.load(Ordering::Relaxed) as u32),
    };
    if hint.leader == sh.me || *hinted == Some(hint) {
        return;
    }
    // A full queue drops the hint, to be sent with a later request (the client sends to every
    // replica meanwhile).
    if conn
        .tx
        .try_send(ReplicaMessage::Leader(hint).to_bytes())
        .is_ok()
    {
        *hinted = Some(hint);
    }
}

/// Authenticates a client request and hands it on. Returns false when the replica is
/// shutting down.
pub(crate) fn accept_request(
    sh: &Arc<Shared>,
    request: RequestEnvelope,
    conn: &ConnHandle,
) -> bool {
    let max = sh.cfg.raw.limits.request_bytes_max;
    if request.request.payload.len() > max {
        sh.reject(
            "request_too_large",
            format_args!(
                "{} bytes > request_bytes_max {max}",
                request.request.payload.len()
            ),
        );
        return true;
    }
    if request.request.kind == RequestKind::Reconfigure && sh.unreplicated {
        sh.reject(
            "reconfigure_unreplicated",
            "a view change sent to the unreplicated server, which has no view",
        );
        return true;
    }
    if request.request.kind.is_ordered() && !sh.unreplicated {
        let installed = sh
            .roster
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .view()
            .clone();
        if request.request.view < installed.id {
            // A request of an older view (its authenticator names that view's members): tell
            // the client the installed view — public, so no authentication is needed first.
            let _ = conn
                .tx
                .try_send(ReplicaMessage::CurrentView(installed).to_bytes());
            sh.metrics.reject("older_view");
            return true;
        }
    }
    match request.request.kind {
        RequestKind::Unordered => {
            if !sh.cfg.raw.cluster.readonly_requests {
                sh.reject(
                    "unordered_disabled",
                    "unordered request while readonly_requests = false",
                );
                return true;
            }
            // Unordered requests are answered only to this connection; the channel MAC
            // authenticates them, so only the principal check above applies.
            sh.exec_tx
                .send(ExecEvent::Unordered {
                    request,
                    conn: conn.clone(),
                })
                .is_ok()
        }
        // The unreplicated server executes requests in arrival order, so it verifies on the
        // connection's own thread (keeping each client's order; connections still verify in
        // parallel); a replica hands signatures to the pool, whose reordering the core undoes.
        RequestKind::Ordered | RequestKind::Reconfigure => {
            match sh.sig_pool.as_ref().filter(|_| !sh.unreplicated) {
                Some(pool) => {
                    let sh2 = sh.clone();
                    pool.submit(move |verifier| match verifier.verify(&request) {
                        Ok(()) => {
                            if may_be_relayed_here(&sh2) {
                                verifier.keep(&request.request);
                            }
                            let _ = order(&sh2, request);
                        }
                        Err(e) => sh2.reject(
                            e.reason(),
                            format_args!(
                                "request {:?}/{}: {e}",
                                request.request.client, request.request.seq
                            ),
                        ),
                    });
                    true
                }
                None => match sh.verifier.verify(&request) {
                    Ok(()) => {
                        if may_be_relayed_here(sh) {
                            sh.verifier.keep(&request.request);
                        }
                        order(sh, request)
                    }
                    Err(e) => {
                        sh.reject(
                            e.reason(),
                            format_args!(
                                "request {:?}/{}: {e}",
                                request.request.client, request.request.seq
                            ),
                        );
                        true
                    }
                },
            }
        }
    }
}

/// Hands an authenticated ordered request to the consensus thread (or, unreplicated, straight
/// to the execution thread). False when the replica is shutting down.
pub(crate) fn order(sh: &Shared, request: RequestEnvelope) -> bool {
    if sh.unreplicated {
        sh.exec_tx.send(ExecEvent::Execute(request)).is_ok()
    } else {
        sh.consensus_tx
            .send(ConsensusEvent::Request(request))
            .is_ok()
    }
}
