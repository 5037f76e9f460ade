//! The stage thread, the same for both deployments: carries out the protocol core's work on
//! the [`Stage`] in order, hands what it did back to the protocol thread, sends the state
//! messages it produces to the server the core named, and keeps the committed state that
//! state queries are answered with.

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use tagma_eve::{Done, EveService, Mixer, Stage, StageOutput, Work};
use tagma_wire::Encode;
use tracing::warn;

use crate::lies::Lies;
use crate::links::{Committed, send_peer};

/// Runs until the protocol thread is gone. `work` brings each piece of work and the server
/// its messages go to; `peers` holds the queue of the writer to each server, by id.
pub(crate) fn stage_loop<S, M>(
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
