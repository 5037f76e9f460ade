//! The stage thread, the same for both deployments: carries out the protocol core's work on
//! the [`Stage`] in order, hands what it did back to the protocol thread, sends the state
//! messages it produces to the server the core named, and keeps the committed state that
//! state queries are answered with.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, bounded};
use tagma_config::eve::EveSection;
use tagma_eve::{Done, EveService, Executor, Mixer, ObjectTree, Stage, StageOutput, Work};
use tagma_wire::Encode;
use tracing::warn;

use crate::lies::Lies;
use crate::links::{Committed, Links, send_peer};
use crate::server::{EveNodeError, thread};

/// The protocol thread's ends of the stage's queues: work in, what was done out.
pub(crate) type StageQueues = (Sender<(Work, Option<u32>)>, Receiver<Done>);

/// Starts the stage thread around an executor of `service` and `mixer` from `initial`, set
/// up by `eve`; its state messages go to `peers`.
pub(crate) fn start_stage<S, M>(
    (service, mixer, initial): (S, M, ObjectTree),
    eve: &EveSection,
    links: &Arc<Links>,
    peers: &[Option<Sender<Bytes>>],
    lies: Lies,
) -> Result<StageQueues, EveNodeError>
where
    S: EveService<Request = Bytes> + 'static,
    M: Mixer<Bytes> + Sync + Send + 'static,
{
    let executor = Executor::new(
        service,
        mixer,
        eve.threads,
        initial,
        eve.pipeline_max + eve.catch_up_max,
    )?;
    let stage = Stage::new(executor, eve.tree_query_max);
    let (work_tx, work_rx) = bounded::<(Work, Option<u32>)>(eve.queue_max);
    // The stage answers at most once per piece of work: twice the work queue never fills,
    // so the two threads cannot wait on each other.
    let (answers_tx, answers_rx) = bounded::<Done>(2 * eve.queue_max + 2);
    let peers = peers.to_vec();
    let links = links.clone();
    thread("stage", move || {
        stage_loop(stage, &work_rx, &answers_tx, &peers, &links.committed, lies);
    })?;
    Ok((work_tx, answers_rx))
}

/// Runs until the protocol thread is gone. `work` brings each piece of work and the server
/// its messages go to; `peers` holds the queue of the writer to each server, by id.
fn stage_loop<S, M>(
    mut stage: Stage<S, M>,
    work: &Receiver<(Work, Option<u32>)>,
    answers: &Sender<Done>,
    peers: &[Option<Sender<Bytes>>],
    committed: &Mutex<Committed>,
    lies: Lies,
) where
    S: EveService<Request = Bytes>,
    M: Mixer<Bytes> + Sync,
{
    let mut requests = 0u64;
    while let Ok((work, peer)) = work.recv() {
        let changes_stable = matches!(
            work,
            Work::Commit { .. } | Work::TreeNodes { .. } | Work::Fetch { .. }
        );
        if let Work::Commit { seq, .. } = &work
            && let Some(executed) = stage.executor().pending().find(|e| e.seq == *seq)
        {
            requests += executed.outputs.len() as u64;
        }
        let outputs = stage.apply(work);
        if changes_stable {
            let stable = stage.executor().stable();
            *committed.lock().unwrap_or_else(PoisonError::into_inner) = Committed {
                seq: stable.seq,
                requests,
                root: tagma_wire::Digest(stable.tree.hash().root),
            };
        }
        for out in outputs {
            match out {
                StageOutput::Done(done) => {
                    if answers.send(done).is_err() {
                        warn!("the protocol thread is gone");
                        return;
                    }
                }
                StageOutput::Send(message) => {
                    if let Some(Some(tx)) = peer.and_then(|p| peers.get(p as usize)) {
                        send_peer(tx, lies.nodes(message).to_bytes());
                    }
                }
            }
        }
    }
}
