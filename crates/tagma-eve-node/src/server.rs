//! Starting a server, and its two working threads: the protocol thread around the core and
//! the stage thread around the executor.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, bounded, select};
use tagma_config::ValidConfig;
use tagma_crypto::IdentityKey;
use tagma_eve::pb::{Action, Input, PbConfig, PbCore, PbStats, Role};
use tagma_eve::{Done, Work};
use tagma_eve::{EveService, Mixer, ObjectTree};
use tagma_net::NetLimits;
use tagma_node::auth::RequestVerifier;
use tagma_wire::{Encode, ReplicaId};
use thiserror::Error;
use tracing::info;

use crate::lies::Lies;
use crate::links::{Committed, Event, Links, accept_loop, peer_writer, send_peer};
use crate::routes::Routes;
use crate::stage_thread::start_stage;

#[derive(Debug, Error)]
pub enum EveNodeError {
    #[error(
        "the primary-backup deployment needs exactly two [[replica]] entries, ids 0 and 1; tagma.toml lists {0}"
    )]
    NotTwoServers(String),
    #[error("server {0} is not a [[replica]] of tagma.toml: pass --id 0 or --id 1")]
    NotAServer(u32),
    #[error(
        "tagma.toml has [cluster] readonly_requests = true: clients would wait for both servers' replies and stop when one crashes; set readonly_requests = false (each request is answered by the first server)"
    )]
    ReadonlyRequests,
    #[error("cannot listen on {addr}: {source} (is another server running there?)")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "u = {u} and r = {r} make {executors} executors, ids 0..{executors}, but tagma.toml lists the [[replica]] ids {listed}: `tagma init --eve --bft` writes a matching directory"
    )]
    Executors {
        u: usize,
        r: usize,
        executors: usize,
        listed: String,
    },
    #[error(
        "cannot reach the verifier cluster: {0} (are its `tagma replica --service eve-verifier` processes running?)"
    )]
    Verifiers(String),
    #[error("the client keys of tagma.toml: {0}")]
    Keys(String),
    #[error("the executor: {0}")]
    Executor(#[from] tagma_eve::EveError),
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
}

/// What a running server shows of itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub role: Role,
    pub view: u64,
    pub committed: u64,
    pub peer_alive: bool,
    pub stats: PbStats,
}

/// A running server (or executor) whose protocol thread shows an `S`.
pub struct Handle<S> {
    pub id: ReplicaId,
    pub local_addr: SocketAddr,
    pub(crate) status: Arc<Mutex<S>>,
    pub(crate) protocol: std::thread::JoinHandle<()>,
}

impl<S: Copy> Handle<S> {
    pub fn status(&self) -> S {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs until the process is killed.
    pub fn join(self) {
        let _ = self.protocol.join();
    }
}

/// A running server of a primary-backup pair.
pub type EveNodeHandle = Handle<Status>;

pub(crate) fn thread(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, EveNodeError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(EveNodeError::Thread)
}

/// Starts server `me` of `cfg` running `service` with `mixer` on the initial state `initial`
/// (`joining`: it fetches the state from the other server first).
pub fn start<S, M>(
    cfg: ValidConfig,
    me: ReplicaId,
    key: IdentityKey,
    service: S,
    mixer: M,
    initial: ObjectTree,
    joining: bool,
) -> Result<EveNodeHandle, EveNodeError>
where
    S: EveService<Request = Bytes> + 'static,
    M: Mixer<Bytes> + Sync + Send + 'static,
{
    let ids: Vec<u32> = cfg.replicas.iter().map(|r| r.id.0).collect();
    if ids != [0, 1] {
        return Err(EveNodeError::NotTwoServers(format!("{ids:?}")));
    }
    let info = cfg
        .replica(me)
        .cloned()
        .ok_or(EveNodeError::NotAServer(me.0))?;
    if cfg.raw.cluster.readonly_requests {
        return Err(EveNodeError::ReadonlyRequests);
    }
    let eve = cfg.raw.eve.clone();
    let Listening {
        links,
        local_addr,
        events: events_rx,
        peers,
    } = listen(cfg, me, key, info.addr)?;
    let peer_tx = peers[1 - me.0 as usize].clone().expect("the other server");
    let (stage_tx, answers_rx) = start_stage(
        (service, mixer, initial),
        &eve,
        &links,
        &peers,
        Lies::default(),
    )?;
    let pb = PbConfig {
        me: me.0 as u8,
        batch_size_max: eve.batch_size_max,
        pipeline_max: eve.pipeline_max,
        queue_max: eve.queue_max,
        catch_up_max: eve.catch_up_max,
        heartbeat_ms: eve.heartbeat_ms,
        takeover_ms: eve.takeover_ms,
        replies_per_client: links.cfg.raw.limits.reply_cache_per_client,
        sessions_max: links.cfg.raw.limits.clients_max,
    };
    let clock = Instant::now();
    let core = PbCore::new(pb, 0, joining);
    let status = Arc::new(Mutex::new(status_of(&core)));
    let shown = status.clone();
    let protocol = thread("protocol", move || {
        protocol_loop(
            core,
            &clock,
            &events_rx,
            &answers_rx,
            &stage_tx,
            (1 - me.0, &peer_tx),
            &shown,
        );
    })?;
    info!(
        server = me.0,
        addr = %local_addr,
        joining,
        "execute-verify server listening"
    );
    Ok(EveNodeHandle {
        id: me,
        local_addr,
        status,
        protocol,
    })
}

/// A server's connections, up and accepting.
pub(crate) struct Listening {
    pub(crate) links: Arc<Links>,
    pub(crate) local_addr: SocketAddr,
    /// Requests and peer messages, for the protocol thread.
    pub(crate) events: Receiver<Event>,
    /// The queue of the writer to each other server (`None` for this one), by id.
    pub(crate) peers: Vec<Option<Sender<Bytes>>>,
}

/// Listens on `addr` as server `me` of `cfg` and keeps an outbound link to every other
/// `[[replica]]`.
pub(crate) fn listen(
    cfg: ValidConfig,
    me: ReplicaId,
    key: IdentityKey,
    addr: SocketAddr,
) -> Result<Listening, EveNodeError> {
    let verifier =
        RequestVerifier::new(&cfg, me, &key).map_err(|e| EveNodeError::Keys(e.to_string()))?;
    let listener =
        TcpListener::bind(addr).map_err(|source| EveNodeError::Listen { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| EveNodeError::Listen { addr, source })?;
    let limits = NetLimits {
        frame_bytes_max: cfg.raw.limits.frame_bytes_max,
        handshake_timeout: Duration::from_millis(cfg.raw.timeouts.handshake_timeout_ms),
    };
    let queue_max = cfg.raw.limits.connection_queue_max;
    let (events_tx, events_rx) = bounded::<Event>(cfg.raw.eve.queue_max);
    let ids: Vec<ReplicaId> = cfg.replicas.iter().map(|r| r.id).collect();
    let links = Arc::new(Links {
        cfg,
        me,
        key,
        limits,
        verifier,
        events: events_tx,
        committed: Mutex::new(Committed::default()),
    });
    let mut peers = vec![None; ids.iter().map(|i| i.0 as usize + 1).max().unwrap_or(0)];
    for peer in ids.into_iter().filter(|&p| p != me) {
        let (tx, rx) = bounded::<Bytes>(queue_max);
        let links = links.clone();
        thread(&format!("peer-out-{}", peer.0), move || {
            peer_writer(&links, peer, &rx)
        })?;
        peers[peer.0 as usize] = Some(tx);
    }
    {
        let links = links.clone();
        thread("accept", move || accept_loop(&links, listener))?;
    }
    Ok(Listening {
        links,
        local_addr,
        events: events_rx,
        peers,
    })
}

fn status_of(core: &PbCore) -> Status {
    Status {
        role: core.role(),
        view: core.view(),
        committed: core.committed(),
        peer_alive: core.peer_alive(),
        stats: core.stats(),
    }
}

fn protocol_loop(
    mut core: PbCore,
    clock: &Instant,
    events: &Receiver<Event>,
    answers: &Receiver<Done>,
    stage: &Sender<(Work, Option<u32>)>,
    (other, peer): (u32, &Sender<Bytes>),
    status: &Mutex<Status>,
) {
    // The stage's state messages go to the other server too.
    let other = Some(other);
    let now = || clock.elapsed().as_millis() as u64;
    let mut routes = Routes::default();
    let mut role = core.role();
    loop {
        let wait_ms = core.next_timeout_ms().saturating_sub(now()).clamp(1, 100);
        let input = select! {
            recv(events) -> event => match event {
                Ok(Event::Request { request, kind, conn }) => {
                    routes.note(&request, kind, conn);
                    Input::Request(request)
                }
                Ok(Event::Peer { message, .. }) => Input::Peer(message),
                Err(_) => return,
            },
            recv(answers) -> done => match done {
                Ok(done) => Input::Stage(done),
                Err(_) => return,
            },
            default(Duration::from_millis(wait_ms)) => Input::Tick,
        };
        let at = now();
        core.handle(at, input);
        if core.next_timeout_ms() <= at {
            core.handle(at, Input::Tick);
        }
        while let Some(action) = core.poll_action() {
            match action {
                Action::Send(message) => send_peer(peer, message.to_bytes()),
                Action::Reply { client, seq, reply } => routes.reply(client, seq, reply),
                Action::Stage(work) => {
                    if stage.send((work, other)).is_err() {
                        return;
                    }
                }
            }
        }
        if core.role() != role {
            info!(view = core.view(), "now {:?} (was {:?})", core.role(), role);
            role = core.role();
        }
        *status.lock().unwrap_or_else(PoisonError::into_inner) = status_of(&core);
    }
}
