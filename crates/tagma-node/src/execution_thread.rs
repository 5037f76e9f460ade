//! The execution thread: runs the service on every decided batch in order, answers clients
//! (replies, cached replies, unordered reads), takes checkpoints at this replica's staggered
//! points, and computes state digests and installs fetched states when the core asks.

use std::{
    collections::HashMap,
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use tagma_exec::{Executor, Service};
use tagma_wire::{Batch, ClientId, ConsensusId, Encode, ReplicaMessage, RequestSeq, StateInfo};

use crate::{
    shared::{Clock, ConnHandle, ConsensusEvent, ExecEvent, Shared},
    storage,
};

pub(crate) fn execution_loop<S: Service>(
    sh: &Arc<Shared>,
    mut executor: Executor<S>,
    rx: Receiver<ExecEvent>,
    mut storage: Option<storage::ExecStorage>,
) {
    let clock = Clock::new();
    let mut routes: HashMap<ClientId, ConnHandle> = HashMap::new();
    // Unreplicated mode: the last sequence number executed per client (drops retransmissions).
    let mut last_executed: HashMap<ClientId, RequestSeq> = HashMap::new();
    let send = |conn: &ConnHandle, msg: ReplicaMessage| {
        let counter = match conn.tx.try_send(msg.to_bytes()) {
            Ok(()) => &sh.metrics.replies_sent,
            Err(_) => &sh.metrics.replies_dropped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    };
    let send_replies = |routes: &HashMap<ClientId, ConnHandle>, replies: Vec<tagma_wire::Reply>| {
        sh.metrics
            .executed_requests
            .fetch_add(replies.len() as u64, Ordering::Relaxed);
        for reply in replies {
            match routes.get(&reply.client) {
                Some(conn) => send(conn, ReplicaMessage::Reply(reply)),
                None => {
                    // The client is connected elsewhere or gone; it will retransmit.
                    sh.metrics.replies_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    };
    // The signed view history joining replicas are answered with follows the executed view.
    let mut published_view = None;
    let publish = |executor: &Executor<S>, published: &mut Option<tagma_wire::ViewId>| {
        let current = executor.members().map(|v| v.id);
        if current != *published {
            sh.roster
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .set_history(executor.view_history().to_vec());
            *published = current;
        }
    };
    let mut due = DueReport::default();
    loop {
        // Before every event, and at least every 100 ms when idle: a change executed by the
        // last event before a pause is published too.
        publish(&executor, &mut published_view);
        if sh.unreplicated {
            // No leader orders time-only batches: the agreed time is this replica's clock.
            let now = clock.now_ms();
            if executor.next_due_ms().is_some_and(|t| t <= now) {
                let replies = execute_time_only(&mut executor, now);
                send_replies(&routes, replies);
            }
        } else {
            due.report(sh, &executor);
        }
        let wait = match executor.next_due_ms().filter(|_| sh.unreplicated) {
            Some(t) => t.saturating_sub(clock.now_ms()).clamp(1, 100),
            None => 100,
        };
        let event = match rx.recv_timeout(Duration::from_millis(wait)) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match event {
            ExecEvent::Route { client, conn } => {
                // Connection ids only grow: a late route from an older connection of the same
                // client must not replace the newer one.
                if routes.get(&client).is_none_or(|c| c.id <= conn.id) {
                    routes.insert(client, conn);
                }
            }
            ExecEvent::Unroute { conn_id } => routes.retain(|_, c| c.id != conn_id),
            ExecEvent::Deliver(decision) => {
                let cid = decision.cid.0;
                let Some(replies) = executor.execute_decided(decision.cid, &decision.batch) else {
                    // Decided while this replica fetched state; the state covers it.
                    continue;
                };
                if decision.batch.requests.is_empty() {
                    // A time-only batch: the leader waits for this report before it orders
                    // another.
                    due.executed_time_batch();
                }
                sh.metrics
                    .executed_instances
                    .store(executor.executed_instances(), Ordering::Relaxed);
                // The replies leave at once. With durability the decision is on the disks of
                // the replicas that accepted it (each flushed its vote before its ACCEPT), so
                // a crash of every replica decides this instance again with the same value;
                // the storage thread logs it meanwhile (parallel logging).
                if let Some(d) = storage.as_ref() {
                    d.maybe_checkpoint(cid, &executor);
                }
                send_replies(&routes, replies);
            }
            ExecEvent::CheckpointNow { cid } => {
                if let Some(d) = storage.as_ref() {
                    d.checkpoint_now(cid, &executor);
                }
            }
            ExecEvent::DigestState { cid } => {
                if let Some(d) = storage.as_ref() {
                    d.digest_state(cid, &executor);
                }
            }
            ExecEvent::Install(state) => {
                let Some(d) = storage.as_mut() else {
                    continue;
                };
                let started = Instant::now();
                let (outcome, log) = match d.install(&mut executor, &state) {
                    Ok(done) => done,
                    Err(fatal) => {
                        // The executor may hold a state that is not durable: stop rather
                        // than answer from it.
                        tracing::error!("{fatal}; this replica stops");
                        return;
                    }
                };
                sh.metrics
                    .executed_instances
                    .store(executor.executed_instances(), Ordering::Relaxed);
                if let tagma_core::transfer::InstallOutcome::Installed { .. } = &outcome {
                    sh.metrics.state_transfers.fetch_add(1, Ordering::Relaxed);
                    if state.repair {
                        sh.metrics.state_repaired.fetch_add(1, Ordering::Relaxed);
                    }
                    sh.metrics
                        .state_install_ms
                        .store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
                if sh
                    .internal_tx
                    .send(ConsensusEvent::Installed { outcome, log })
                    .is_err()
                {
                    return;
                }
            }
            ExecEvent::Execute(request) => {
                // Unreplicated: what is due by now happens before the request runs.
                let now = clock.now_ms();
                if executor.next_due_ms().is_some_and(|t| t <= now) {
                    let replies = execute_time_only(&mut executor, now);
                    send_replies(&routes, replies);
                }
                let (client, seq) = (request.request.client, request.request.seq);
                if last_executed.get(&client).is_some_and(|last| seq <= *last) {
                    // A retransmission: answer from the cache, never execute twice.
                    if let (Some(reply), Some(conn)) =
                        (executor.cached_reply(client, seq), routes.get(&client))
                    {
                        sh.metrics.replies_resent.fetch_add(1, Ordering::Relaxed);
                        send(conn, ReplicaMessage::Reply(reply));
                    }
                    continue;
                }
                last_executed.insert(client, seq);
                let cid = ConsensusId(executor.executed_instances());
                let batch = Batch {
                    timestamp_ms: clock.now_ms(),
                    seed: cid.0,
                    requests: vec![request],
                };
                let replies = executor.execute_batch(cid, &batch);
                sh.metrics.decided_instances.fetch_add(1, Ordering::Relaxed);
                send_replies(&routes, replies);
            }
            ExecEvent::CurrentView { client, view } => {
                if let Some(conn) = routes.get(&client) {
                    send(conn, ReplicaMessage::CurrentView(view));
                }
            }
            ExecEvent::Resend { client, seq } => {
                sh.metrics.reject("replayed_request");
                if let (Some(reply), Some(conn)) =
                    (executor.cached_reply(client, seq), routes.get(&client))
                {
                    sh.metrics.replies_resent.fetch_add(1, Ordering::Relaxed);
                    send(conn, ReplicaMessage::Reply(reply));
                }
            }
            ExecEvent::Unordered { request, conn } => {
                let r = &request.request;
                let reply = executor.execute_unordered(r.client, r.seq, &r.payload, clock.now_ms());
                sh.metrics
                    .unordered_executed
                    .fetch_add(1, Ordering::Relaxed);
                send(&conn, ReplicaMessage::Reply(reply));
            }
            ExecEvent::StateQuery { nonce, conn } => {
                let info = StateInfo {
                    nonce,
                    replica: sh.me,
                    executed_instances: executor.executed_instances(),
                    executed_requests: executor.executed_requests(),
                    state_digest: executor.state_digest(),
                };
                send(&conn, ReplicaMessage::StateInfo(info));
            }
            ExecEvent::ViewQuery { conn } => {
                // The unreplicated server has no view to report.
                if let Some(view) = executor.members() {
                    send(&conn, ReplicaMessage::CurrentView(view.clone()));
                }
            }
            ExecEvent::ViewHistoryQuery { conn } => {
                if executor.members().is_some() {
                    let history = executor.view_history().to_vec();
                    send(&conn, ReplicaMessage::ViewHistory(history));
                }
            }
        }
    }
}

/// An unreplicated server's time-only batch at its clock's `now_ms` (never before the last
/// batch's time): the service does what is due by then.
fn execute_time_only<S: Service>(
    executor: &mut Executor<S>,
    now_ms: u64,
) -> Vec<tagma_wire::Reply> {
    let cid = ConsensusId(executor.executed_instances());
    let batch = Batch {
        timestamp_ms: now_ms.max(executor.last_timestamp_ms()),
        seed: cid.0,
        requests: Vec::new(),
    };
    executor.execute_batch(cid, &batch)
}

/// What the execution thread last told the consensus thread about the service's next due
/// time ([`ConsensusEvent::ServiceDue`]): it reports again when the time changes or a
/// time-only batch was executed, and retries a report the internal channel had no room for.
#[derive(Default)]
struct DueReport {
    /// The due time last reported (`None`: none reported yet).
    reported: Option<Option<u64>>,
    /// A time-only batch executed since the last report.
    time_batch_executed: bool,
}

impl DueReport {
    fn executed_time_batch(&mut self) {
        self.time_batch_executed = true;
    }

    fn report<S: Service>(&mut self, sh: &Shared, executor: &Executor<S>) {
        let due_ms = executor.next_due_ms();
        if self.reported == Some(due_ms) && !self.time_batch_executed {
            return;
        }
        let executed_through = executor
            .executed_instances()
            .checked_sub(1)
            .map(ConsensusId);
        let event = ConsensusEvent::ServiceDue {
            executed_through,
            due_ms,
        };
        // The internal channel is shared with the storage and checkpoint threads, which count
        // on its room: never wait on it, never take more than half of it; a report that finds
        // no room is retried after the next event (only the newest counts).
        let room = sh.internal_tx.capacity().unwrap_or(0) / 2;
        if sh.internal_tx.len() < room && sh.internal_tx.try_send(event).is_ok() {
            self.reported = Some(due_ms);
            self.time_batch_executed = false;
        }
    }
}
