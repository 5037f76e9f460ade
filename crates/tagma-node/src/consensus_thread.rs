//! The consensus thread: the only driver of the sans-IO core in production. It turns queue
//! events into [`tagma_core::Input`]s, carries out the core's actions (sends, deliveries to the
//! execution thread, log appends, vote records), and gives the core back what those actions
//! wait for.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tagma_core::{Action, Input, Replica};
use tagma_wire::Encode;
use tracing::info;

use crate::{
    membership,
    peer_link::{add_link, send_peer},
    shared::{Clock, ConsensusEvent, ExecEvent, Shared},
    storage,
};

/// Where the consensus thread sends what its actions ask for.
pub(crate) struct Links {
    pub(crate) peers: membership::PeerLinks,
    pub(crate) exec_tx: Sender<ExecEvent>,
    /// The log thread (on disk, or in memory without durability).
    pub(crate) storage_tx: Sender<storage::StorageEvent>,
    /// Durable replicas: this thread writes its votes itself.
    pub(crate) votes: Option<std::cell::RefCell<storage::VoteWriter>>,
    pub(crate) transfer_tx: Sender<storage::TransferJob>,
    /// The instance the core waits to see in the log (`Action::AwaitLogDurable`), until this
    /// thread has reported it: looked at before every wait for an event, so a wake-up the
    /// storage thread could not queue (a full internal channel) delays the report by one event
    /// at most.
    pub(crate) awaited_log: std::cell::Cell<Option<u64>>,
}

pub(crate) fn consensus_loop(
    sh: &Arc<Shared>,
    mut core: Replica,
    rx: Receiver<ConsensusEvent>,
    internal_rx: Receiver<ConsensusEvent>,
    links: &Links,
    clock: &Clock,
) {
    const IDLE_WAKE_MS: u64 = 100;
    // What the core asked for when it started (a recovered or joining replica talks at once).
    if !carry_out_actions(sh, &mut core, links, clock) {
        return;
    }
    loop {
        if !report_log_reached(sh, &mut core, links, clock) {
            return;
        }
        let now = clock.now_ms();
        let wait_ms = core
            .next_timeout_ms()
            .map_or(IDLE_WAKE_MS, |t| t.saturating_sub(now))
            .min(IDLE_WAKE_MS);
        let event = crossbeam_channel::select! {
            recv(internal_rx) -> e => e.map_err(|_| RecvTimeoutError::Disconnected),
            recv(rx) -> e => e.map_err(|_| RecvTimeoutError::Disconnected),
            default(Duration::from_millis(wait_ms)) => Err(RecvTimeoutError::Timeout),
        };
        let input = match event {
            Ok(ConsensusEvent::Request(request)) => Some(Input::ClientRequest(request)),
            Ok(ConsensusEvent::Peer { from, input }) => Some(Input::Peer { from, input }),
            Ok(ConsensusEvent::Checkpointed(info)) => Some(Input::CheckpointWritten(info)),
            Ok(ConsensusEvent::LogServed { to, unused }) => Some(Input::LogServed { to, unused }),
            Ok(ConsensusEvent::ServiceDue {
                executed_through,
                due_ms,
            }) => Some(Input::ServiceDue {
                executed_through,
                due_ms,
            }),
            Ok(ConsensusEvent::StateDigest { cid, digest }) => {
                Some(Input::StateDigest { cid, digest })
            }
            // The storage thread's wake-up: the position is reported before the next wait.
            Ok(ConsensusEvent::Durable) => None,
            Ok(ConsensusEvent::Installed { outcome, log }) => {
                // The installed state's decisions go to the log before any later instance's
                // (sent from here, in order with the appends, never from execution).
                if let Some(event) = log
                    && links.storage_tx.send(event).is_err()
                {
                    return;
                }
                let installed = matches!(
                    outcome,
                    tagma_core::transfer::InstallOutcome::Installed { .. }
                );
                if !feed(sh, &mut core, links, clock, Input::StateInstalled(outcome)) {
                    return;
                }
                if installed {
                    let ms = core.stats().last_state_transfer_ms;
                    sh.metrics.state_transfer_ms.store(ms, Ordering::Relaxed);
                }
                None
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if let Some(input) = input
            && !feed(sh, &mut core, links, clock, input)
        {
            return;
        }
        // Timers are checked after every event, not only when the queue is idle: a steady
        // stream of messages must not starve the request timers (leader failure detection).
        if core.next_timeout_ms().is_some_and(|t| t <= clock.now_ms())
            && !feed(sh, &mut core, links, clock, Input::Tick)
        {
            return;
        }
    }
}

/// Gives the core one input and carries out what it asks for; false when the replica is
/// shutting down or cannot write its votes.
pub(crate) fn feed(
    sh: &Arc<Shared>,
    core: &mut Replica,
    links: &Links,
    clock: &Clock,
    input: Input,
) -> bool {
    if let Err(rejection) = core.handle(clock.now_ms(), input) {
        // Stale messages are the normal tail of every instance: count, don't log.
        if matches!(rejection, tagma_core::Rejection::Stale { .. }) {
            sh.metrics.reject(rejection.reason());
        } else {
            sh.reject(rejection.reason(), format_args!("{rejection:?}"));
        }
    }
    let stats = core.stats();
    let m = &sh.metrics;
    m.answers_refused
        .store(stats.answers_refused, Ordering::Relaxed);
    m.state_unconfirmed
        .store(stats.state_unconfirmed, Ordering::Relaxed);
    m.state_checks_confirmed
        .store(stats.state_checks_confirmed, Ordering::Relaxed);
    m.state_checks_contradicted
        .store(stats.state_checks_contradicted, Ordering::Relaxed);
    m.time_batches_proposed
        .store(stats.time_batches_proposed, Ordering::Relaxed);
    m.due_suspicions
        .store(stats.due_suspicions, Ordering::Relaxed);
    m.batch_holds_filled
        .store(stats.batch_holds_filled, Ordering::Relaxed);
    m.batch_holds_expired
        .store(stats.batch_holds_expired, Ordering::Relaxed);
    carry_out_actions(sh, core, links, clock)
}

/// The log position the storage thread published, as the core's input (`None` before the
/// first instance is durable).
pub(crate) fn log_durable(sh: &Shared) -> Option<Input> {
    let below = sh.durable_below.load(Ordering::SeqCst);
    below
        .checked_sub(1)
        .map(|last| Input::LogDurable(tagma_wire::ConsensusId(last)))
}

/// Reports the log's position once it reaches the instance the core awaits (if it does):
/// the only place that answers `Action::AwaitLogDurable`. A report that falls short is
/// answered by the core with a new `AwaitLogDurable`. False when the replica stops.
fn report_log_reached(sh: &Arc<Shared>, core: &mut Replica, links: &Links, clock: &Clock) -> bool {
    let Some(cid) = links.awaited_log.get() else {
        return true;
    };
    if sh.durable_below.load(Ordering::SeqCst) <= cid {
        return true;
    }
    sh.wake_on_durable.store(false, Ordering::SeqCst);
    links.awaited_log.set(None);
    match log_durable(sh) {
        Some(input) => feed(sh, core, links, clock, input),
        None => true,
    }
}

/// Carries out the core's actions in order, giving it back the answers to those that wait
/// for the runtime (votes flushed, the log durable); false when the replica is shutting down
/// or cannot write its votes.
pub(crate) fn carry_out_actions(
    sh: &Arc<Shared>,
    core: &mut Replica,
    links: &Links,
    clock: &Clock,
) -> bool {
    let (peers, exec_tx) = (&links.peers, &links.exec_tx);
    let (storage_tx, transfer_tx) = (&links.storage_tx, &links.transfer_tx);
    while let Some(action) = core.poll_action() {
        match action {
            Action::Broadcast(msg) => {
                let body = msg.to_bytes();
                peers.for_each(|tx| send_peer(sh, tx, body.clone()));
            }
            Action::Send { to, msg } => {
                if let Some(tx) = peers.get(to) {
                    send_peer(sh, &tx, msg.to_bytes());
                }
            }
            Action::Deliver(decision) => {
                sh.metrics.decided_instances.fetch_add(1, Ordering::Relaxed);
                // Parallel logging: the storage thread logs the instance (with its proof)
                // while the execution thread executes it.
                let event = storage::StorageEvent::Append {
                    cid: decision.cid.0,
                    decided: decision.logged.clone(),
                };
                if storage_tx.send(event).is_err() {
                    return false;
                }
                if exec_tx.send(ExecEvent::Deliver(decision)).is_err() {
                    return false;
                }
            }
            Action::PersistVote { seq, votes } => {
                let Some(writer) = &links.votes else {
                    unreachable!("only durable replicas persist votes");
                };
                writer.borrow_mut().add(seq, &votes);
            }
            Action::WriteVotes { flush, .. } => {
                let Some(writer) = &links.votes else {
                    unreachable!("only durable replicas write votes");
                };
                let flushed = writer.borrow_mut().flush(sh, flush);
                match flushed {
                    Ok(Some(seq)) => {
                        let input = Input::VotesDurable { seq };
                        if let Err(rejection) = core.handle(clock.now_ms(), input) {
                            sh.reject(rejection.reason(), format_args!("{rejection:?}"));
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!("{e}; this replica stops");
                        return false;
                    }
                }
            }
            Action::AwaitLogDurable { cid } => {
                // The storage thread wakes this thread after its next flush (`Durable`), and
                // the position is read before the next wait (`report_log_reached`). The flag is
                // raised before the position is read, and the storage thread publishes the
                // position before it looks at the flag, so no flush goes unnoticed.
                sh.wake_on_durable.store(true, Ordering::SeqCst);
                links.awaited_log.set(Some(cid.0));
            }
            Action::SendCurrentView { client, view } => {
                if exec_tx
                    .send(ExecEvent::CurrentView { client, view })
                    .is_err()
                {
                    return false;
                }
            }
            Action::ResendReply { client, seq } => {
                if exec_tx.send(ExecEvent::Resend { client, seq }).is_err() {
                    return false;
                }
            }
            Action::RegencyInstalled { regency, leader } => {
                sh.metrics
                    .regency
                    .store(u64::from(regency.0), Ordering::Relaxed);
                sh.metrics
                    .leader
                    .store(u64::from(leader.0), Ordering::Relaxed);
                info!(
                    regency = regency.0,
                    leader = leader.0,
                    "leader change: new regency installed"
                );
            }
            Action::ViewInstalled { cid, view, member } => {
                sh.metrics
                    .view
                    .store(u64::from(view.id.0), Ordering::Relaxed);
                info!(
                    cid = cid.0,
                    view = view.id.0,
                    n = view.members.len(),
                    f = view.f,
                    member,
                    "view installed"
                );
                if !member {
                    info!("this replica is not a member of the new view: it stops ordering");
                    sh.metrics.left_view.store(1, Ordering::Relaxed);
                }
                // Added members become known (their handshakes are accepted) and get links.
                sh.roster
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .install(&view);
                sh.verifier.note_view(&view);
                for m in &view.members {
                    add_link(sh, peers, m);
                }
            }
            Action::StateTransferNeeded {
                next_cid,
                known_decided,
            } => {
                info!(
                    next = next_cid.0,
                    decided_elsewhere = known_decided.0,
                    "too far behind for decision forwarding: fetching the state"
                );
            }
            Action::ReadChunk {
                to,
                cid,
                offset,
                len,
            } => {
                // Dropped when the transfer thread is busy: the fetcher asks again.
                let _ = transfer_tx.try_send(storage::TransferJob::ReadChunk {
                    to,
                    cid: cid.0,
                    offset,
                    len,
                });
            }
            Action::ReadLog {
                to,
                from,
                count,
                bytes_max,
            } => {
                let _ = storage_tx.try_send(storage::StorageEvent::ReadLog {
                    to,
                    from: from.0,
                    count,
                    bytes_max,
                });
            }
            Action::StoreChunk { offset, data, .. } => {
                let job = storage::TransferJob::StoreChunk { offset, data };
                if transfer_tx.send(job).is_err() {
                    return false;
                }
            }
            Action::CheckpointNow { cid } => {
                if exec_tx
                    .send(ExecEvent::CheckpointNow { cid: cid.0 })
                    .is_err()
                {
                    return false;
                }
            }
            Action::DigestState { cid } => {
                if exec_tx.send(ExecEvent::DigestState { cid: cid.0 }).is_err() {
                    return false;
                }
            }
            Action::InstallState(state) => {
                // Through the transfer thread, after the chunks it is still writing.
                if transfer_tx
                    .send(storage::TransferJob::Install(state))
                    .is_err()
                {
                    return false;
                }
            }
        }
    }
    true
}
