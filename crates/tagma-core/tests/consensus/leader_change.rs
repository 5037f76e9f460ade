//! Leader change (STOP, STOPDATA, SYNC): what a replica makes of an invalid SYNC. A regency
//! adopted without its SYNC is in the scenario `leader-change-adopted-regency.txt`; whole
//! clusters replacing crashed or faulty leaders, in `clusters`; the regency a restarted
//! replica goes on in, in `durable_votes`.

use bytes::Bytes;
use tagma_core::{PeerInput, Rejection};
use tagma_wire::{PeerMessage, Regency};

use crate::harness::*;

#[test]
fn a_sync_for_the_highest_regency_does_not_panic() {
    let mut follower = bft(0);
    let sync = tagma_wire::Sync {
        regency: Regency(u32::MAX),
        last_decided: None,
        collects: vec![],
        proposal: Bytes::new(),
    };
    // The leader of regency u32::MAX in a 4-member view is replica 3.
    let result = follower.receive(
        1,
        r(3),
        PeerInput::from_message(PeerMessage::Sync(sync), |_| true).expect("a consensus message"),
    );
    assert!(
        matches!(result, Err(Rejection::InvalidSync { .. })),
        "{result:?}"
    );
}
