//! State transfer: the serving side's answers to chunk requests, and a replica that fetches its
//! state while it synchronises after a restart (the fetching plan itself is tested beside
//! `tagma_core::transfer`).

use bytes::Bytes;
use tagma_core::transfer::{InstallOutcome, TransferInput};
use tagma_core::{Action, Mode, PeerInput, Replica};
use tagma_wire::{ClientId, ConsensusId, PeerMessage, RequestSeq};

use crate::harness::*;

/// A chunk request for a checkpoint released since it was offered (two newer ones were
/// written) is answered with an empty chunk, which sends the fetcher to fresh offers at once
/// instead of waiting out its stall timeouts; a chunk of a checkpoint held is read.
#[test]
fn a_chunk_of_a_released_checkpoint_is_answered_with_an_empty_chunk() {
    let mut r0 = durable(Mode::Bft, 4, 0);
    for cid in [10, 20, 30] {
        r0.report_checkpoint(0, ckp_info(cid, cid as u8));
    }
    drain(&mut r0);
    let ask = |r0: &mut Replica, cid: u64| {
        r0.receive(
            1,
            r(3),
            PeerInput::Transfer(TransferInput::ChunkRequest {
                cid: ConsensusId(cid),
                offset: 0,
                len: 16,
            }),
        )
    };
    ask(&mut r0, 10).unwrap();
    assert_eq!(
        drain(&mut r0),
        vec![Action::Send {
            to: r(3),
            msg: PeerMessage::Chunk {
                cid: ConsensusId(10),
                offset: 0,
                data: Bytes::new(),
            },
        }]
    );
    for held in [20, 30] {
        ask(&mut r0, held).unwrap();
        assert_eq!(
            drain(&mut r0),
            vec![Action::ReadChunk {
                to: r(3),
                cid: ConsensusId(held),
                offset: 0,
                len: 16,
            }]
        );
    }
}

/// A replica that fetches its state by state transfer while it synchronises (the others are
/// too far ahead) holds a state f+1 digests vouched for, not its disk's: no state vote.
#[test]
fn a_state_fetched_while_synchronising_is_not_voted_on() {
    let mut r3 = restarted_at_3_with_peers_at(500);
    let actions = drain(&mut r3);
    assert!(
        actions.contains(&Action::StateTransferNeeded {
            next_cid: ConsensusId(3),
            known_decided: ConsensusId(499),
        }) && actions.contains(&Action::Broadcast(PeerMessage::StateQuery {
            next: ConsensusId(3)
        })),
        "500 is too far ahead for decision forwarding: it fetches the state: {actions:?}"
    );
    for from in [0, 1, 2] {
        offer_from(&mut r3, 102, from, Some((499, 0xbb)), 500);
    }
    let chunk = drain(&mut r3)
        .into_iter()
        .find_map(|a| match a {
            Action::Send {
                to,
                msg: PeerMessage::ChunkRequest { .. },
            } => Some(to),
            _ => None,
        })
        .expect("the checkpoint is fetched");
    let install = deliver_checkpoint(&mut r3, 103, chunk, 499);
    assert!(!install.repair);
    r3.report_state_installed(
        104,
        InstallOutcome::Installed {
            last: ConsensusId(499),
            timestamp_ms: 2,
            sessions: vec![(ClientId(9), RequestSeq(3))],
            view: None,
        },
    );
    assert!(!r3.is_starting_up(), "ordering at once");
    assert_eq!(r3.stats().state_transfers, 1);
    assert!(!hashes_or_checkpoints(&mut r3));
}
