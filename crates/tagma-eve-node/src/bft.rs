//! An executor of the BFT deployment as a process: the sans-IO
//! [`ExecutorCore`](tagma_eve::bft::ExecutorCore) driven with real TCP, a real clock, and a
//! `tagma-client` proxy to the verifier cluster.
//!
//! Threads besides the connections' (see the crate's documentation):
//! - `protocol`: owns the core; takes client requests, the other executors' messages, the
//!   stage's answers, the verifiers' decisions and the time; sends messages and replies,
//!   hands VERIFYs and complaints to the verifier callers and work to the stage;
//! - `stage`: owns the [`Stage`](tagma_eve::Stage) and carries the work out in order; the
//!   state nodes it sends go to the executor the core named;
//! - `verify-N`: callers, each making one ordered request to the verifier cluster at a time
//!   (a VERIFY's reply waits until its batch is decided) and handing the decision, which the
//!   proxy accepted from `r + 1` matching verifiers, to the protocol thread.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded, select};
use tagma_client::{ClientOptions, Proxy};
use tagma_config::ValidConfig;
use tagma_crypto::IdentityKey;
use tagma_eve::bft::{Action, BftConfig, ExecutorCore, ExecutorStats, Input};
use tagma_eve::verify::{
    Decision, VerifyCodecError, encode_complaint, encode_query, encode_verify,
};
use tagma_eve::{EveService, Mixer, ObjectTree, Resilience, Token};
use tagma_eve::{Work, stage::Done};
use tagma_wire::{Encode, ReplicaId};
use tracing::{debug, info, warn};

use crate::lies::Lies;
use crate::links::{Event, send_peer};
use crate::routes::Routes;
use crate::server::{EveNodeError, Handle, Listening, listen, thread};
use crate::stage_thread::start_stage;

/// How an executor reaches the verifiers.
pub struct VerifierLink {
    /// The verifier cluster's configuration.
    pub cfg: ValidConfig,
    /// This executor's client principal there, and its key.
    pub principal: u32,
    pub key: IdentityKey,
}

/// The application an executor serves: its service, its mixer and the initial state.
pub struct Application<S, M> {
    pub service: S,
    pub mixer: M,
    pub initial: ObjectTree,
}

/// What a running executor shows of itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecutorStatus {
    pub view: u64,
    pub primary: u32,
    pub committed: u64,
    pub fetching: bool,
    pub stats: ExecutorStats,
}

/// A running executor.
pub type ExecutorHandle = Handle<ExecutorStatus>;

fn status_of(core: &ExecutorCore) -> ExecutorStatus {
    ExecutorStatus {
        view: core.view(),
        primary: core.primary(),
        committed: core.committed(),
        fetching: core.is_fetching(),
        stats: core.stats(),
    }
}

/// Starts executor `me` of `cfg` (whose `[[replica]]` entries are the `u + max(u, r) + 1`
/// executors and whose `[eve]` section names u and r) serving `app`, verified by the cluster
/// `verifiers` reaches, telling `lies` (none but in tests).
pub fn start_executor<S, M>(
    cfg: ValidConfig,
    me: ReplicaId,
    key: IdentityKey,
    verifiers: VerifierLink,
    app: Application<S, M>,
    lies: Lies,
) -> Result<ExecutorHandle, EveNodeError>
where
    S: EveService<Request = Bytes> + 'static,
    M: Mixer<Bytes> + Sync + Send + 'static,
{
    let eve = cfg.raw.eve.clone();
    let resilience = Resilience::new(eve.u, eve.r).map_err(EveNodeError::Executor)?;
    let ids: Vec<u32> = cfg.replicas.iter().map(|r| r.id.0).collect();
    if ids != (0..resilience.executors() as u32).collect::<Vec<_>>() {
        return Err(EveNodeError::Executors {
            u: eve.u,
            r: eve.r,
            executors: resilience.executors(),
            listed: format!("{ids:?}"),
        });
    }
    if cfg.raw.cluster.readonly_requests {
        return Err(EveNodeError::ReadonlyRequests);
    }
    let info = (cfg.replica(me).cloned()).ok_or(EveNodeError::NotAServer(me.0))?;
    let replies_per_client = cfg.raw.limits.reply_cache_per_client;
    let sessions_max = cfg.raw.limits.clients_max;
    let Listening {
        links,
        local_addr,
        events,
        peers,
    } = listen(cfg, me, key, info.addr)?;
    let proxy = Proxy::connect(
        &verifiers.cfg,
        verifiers.key,
        ClientOptions::new(verifiers.principal),
    )
    .map_err(|e| EveNodeError::Verifiers(e.to_string()))?;
    let proxy = Arc::new(proxy);

    let Application {
        service,
        mixer,
        initial,
    } = app;
    let genesis = Token::genesis(&initial.hash().root);
    let (work_tx, answers_rx) = start_stage((service, mixer, initial), &eve, &links, &peers, lies)?;
    // One call per batch in the pipeline, one for a complaint, one to spare.
    let callers = eve.pipeline_max + 2;
    let (calls_tx, calls_rx) = bounded::<Call>(eve.queue_max);
    let (decided_tx, decided_rx) = bounded::<Decision>(eve.queue_max);
    let wait = Duration::from_millis(verifiers.cfg.raw.eve.verify_timeout_ms.saturating_mul(4));
    for i in 0..callers {
        let (proxy, calls, decided) = (proxy.clone(), calls_rx.clone(), decided_tx.clone());
        thread(&format!("verify-{i}"), move || {
            caller_loop(&proxy, &calls, &decided, wait)
        })?;
    }
    let bft = BftConfig {
        batch_size_max: eve.batch_size_max,
        pipeline_max: eve.pipeline_max,
        queue_max: eve.queue_max,
        progress_ms: eve.progress_ms,
        fetch_ms: eve.fetch_ms,
        replies_per_client,
        sessions_max,
        ..BftConfig::new(me.0, resilience)
    };
    let clock = Instant::now();
    let core = ExecutorCore::new(bft, genesis, 0);
    let status = Arc::new(Mutex::new(status_of(&core)));
    let shown = status.clone();
    let protocol = thread("protocol", move || {
        let queues = Queues {
            events,
            answers: answers_rx,
            decided: decided_rx,
            work: work_tx,
            calls: calls_tx,
            peers,
        };
        protocol_loop(core, &clock, &queues, &shown, lies);
    })?;
    info!(
        executor = me.0,
        addr = %local_addr,
        u = eve.u,
        r = eve.r,
        "execute-verify executor listening"
    );
    Ok(ExecutorHandle {
        id: me,
        local_addr,
        status,
        protocol,
    })
}

/// What the protocol thread reads and writes.
struct Queues {
    events: Receiver<Event>,
    answers: Receiver<Done>,
    decided: Receiver<Decision>,
    work: Sender<(Work, Option<u32>)>,
    calls: Sender<Call>,
    peers: Vec<Option<Sender<Bytes>>>,
}

/// A request to the verifiers.
enum Call {
    /// An ordered request (a VERIFY or a complaint), answered with a decision.
    Ordered(Bytes),
    /// An unordered read of the view in force and the last committed batch.
    Status,
}

impl Queues {
    fn send(&self, to: u32, frame: Bytes) {
        if let Some(Some(tx)) = self.peers.get(to as usize) {
            send_peer(tx, frame);
        }
    }

    /// Queues a request to the verifiers; a full queue drops it (the executor complains,
    /// and its next VERIFY or complaint tells it where things stand).
    fn call(&self, call: Call) {
        if let Err(TrySendError::Full(_)) = self.calls.try_send(call) {
            debug!("the queue to the verifiers is full: a request dropped");
        }
    }
}

fn protocol_loop(
    mut core: ExecutorCore,
    clock: &Instant,
    q: &Queues,
    status: &Mutex<ExecutorStatus>,
    lies: Lies,
) {
    let now = || clock.elapsed().as_millis() as u64;
    let mut routes = Routes::default();
    let mut view = core.view();
    let mut fetching = false;
    let mut fetches_failed = 0;
    loop {
        let wait_ms = core.next_timeout_ms().saturating_sub(now()).clamp(1, 100);
        let input = select! {
            recv(q.events) -> event => match event {
                Ok(Event::Request { request, kind, conn }) => {
                    routes.note(&request, kind, conn);
                    Input::Request(request)
                }
                Ok(Event::Peer { from, message }) => Input::Peer { from: from.0, message },
                Err(_) => return,
            },
            recv(q.answers) -> done => match done {
                Ok(done) => Input::Stage(done),
                Err(_) => return,
            },
            recv(q.decided) -> decision => match decision {
                Ok(decision) => Input::Decided(decision),
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
                Action::Send { to, message } => q.send(to, message.to_bytes()),
                Action::Broadcast(message) => {
                    let frame = message.to_bytes();
                    for to in 0..q.peers.len() as u32 {
                        q.send(to, frame.clone());
                    }
                }
                Action::Verify(v) => q.call(Call::Ordered(Bytes::from(encode_verify(
                    v.view,
                    v.seq,
                    lies.token(v.token),
                    v.previous,
                )))),
                Action::Complain { view } => {
                    info!(view, "no progress: complaining to the verifiers");
                    q.call(Call::Ordered(Bytes::from(encode_complaint(view))));
                }
                Action::Poll => q.call(Call::Status),
                Action::Query { seq } => q.call(Call::Ordered(Bytes::from(encode_query(seq)))),
                Action::Reply { client, seq, reply } => {
                    routes.reply(client, seq, lies.reply(reply))
                }
                Action::Work { work, peer } => {
                    if q.work.send((work, peer)).is_err() {
                        return;
                    }
                }
            }
        }
        if core.view() != view {
            view = core.view();
            info!(view, primary = core.primary(), "entered a new view");
        }
        if core.stats().fetches_failed > fetches_failed {
            fetches_failed = core.stats().fetches_failed;
            warn!(
                fetches_failed,
                "a fetched state did not check out against the decided token: asking another executor"
            );
        }
        if core.is_fetching() != fetching {
            fetching = core.is_fetching();
            if fetching {
                info!(
                    committed = core.committed(),
                    "behind the verifiers' decisions: fetching the committed state"
                );
            } else {
                info!(committed = core.committed(), "fetched the committed state");
            }
        }
        *status.lock().unwrap_or_else(PoisonError::into_inner) = status_of(&core);
    }
}

/// Makes one request to the verifiers at a time and hands on the decisions it brings.
fn caller_loop(proxy: &Proxy, calls: &Receiver<Call>, decided: &Sender<Decision>, wait: Duration) {
    while let Ok(call) = calls.recv() {
        let decisions = match call {
            Call::Ordered(payload) => proxy
                .invoke_ordered_waiting(payload, wait)
                .map(|reply| Decision::decode(&reply).map(|d| vec![d])),
            Call::Status => proxy
                .invoke_unordered(Bytes::new())
                .map(|reply| status_decisions(&reply)),
        };
        match decisions {
            Ok(Ok(decisions)) => {
                for decision in decisions {
                    if decided.send(decision).is_err() {
                        return;
                    }
                }
            }
            Ok(Err(e)) => warn!("the verifiers answered something that is no decision: {e}"),
            Err(e) => debug!("a request to the verifiers failed: {e}"),
        }
    }
}

/// The verifiers' status (the view in force, then the last committed batch's decision) as
/// the two decisions it stands for: the rollback into that view, and the commit.
fn status_decisions(reply: &[u8]) -> Result<Vec<Decision>, VerifyCodecError> {
    let view = (reply.get(..8))
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .ok_or(VerifyCodecError::Truncated)?;
    let last = Decision::decode(&reply[8..])?;
    let Decision::Commit { seq, .. } = last else {
        return Err(VerifyCodecError::Invalid("a status names a commit"));
    };
    Ok(vec![Decision::Rollback { seq: seq + 1, view }, last])
}
