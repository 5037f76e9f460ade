//! Views, view changes and reconfiguration outcomes.

use bytes::Bytes;
use proptest::prelude::*;
use tagma_wire::*;

use crate::common;
use crate::support::*;

#[test]
fn views_round_trip_and_reject_what_is_not_canonical() {
    check(&common::view());
    check(&common::view_change());
    check(&ReconfigureOutcome::Installed(common::view()));
    check(&PeerMessage::ViewQuery);
    check(&PeerMessage::ViewInfo(vec![common::view_change()]));
    check(&ClientMessage::ViewHistoryQuery);
    check(&ReplicaMessage::ViewHistory(vec![]));
    check(&ReplicaMessage::ViewHistory(vec![
        common::view_change(),
        common::view_change(),
    ]));
    check(&ReconfigureOutcome::Refused(
        "replica 9 is not a member".into(),
    ));
    check(&View {
        id: ViewId(0),
        f: 0,
        members: vec![],
    });
    // Members out of order, or twice, are not a view.
    let mut unordered = common::view();
    unordered.members.reverse();
    assert_eq!(
        View::decode(&unordered.to_bytes()),
        invalid("view members (ids not strictly ascending)")
    );
    let mut twice = common::view();
    twice.members[1] = twice.members[0].clone();
    assert!(View::decode(&twice.to_bytes()).is_err());
    // An address that is not UTF-8, or too long.
    let mut bad = common::view();
    bad.members[0].addr = "h:0".into();
    let mut bytes = bad.to_bytes().to_vec();
    bytes[20] = 0xff; // first address byte (after id, f, count, member id, length)
    assert_eq!(
        View::decode(&Bytes::from(bytes)),
        invalid("member address (not UTF-8)")
    );
    let mut long = common::view();
    long.members[0].addr = "a".repeat(ADDR_BYTES_MAX + 1);
    assert!(matches!(
        View::decode(&long.to_bytes()),
        Err(WireError::TooLong {
            what: "member address",
            ..
        })
    ));
    // An unknown operation tag.
    let change = common::view_change().to_bytes();
    assert_eq!(
        ViewChange::decode(&with_byte(&change, 8, 9)),
        Err(WireError::UnknownTag {
            what: "view operation",
            tag: 9
        })
    );
    // A count far beyond the input fails without allocating.
    let mut huge = change.to_vec();
    huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        ViewChange::decode(&Bytes::from(huge)),
        Err(WireError::TooLong { .. })
    ));
}

proptest! {
    #[test]
    fn arbitrary_view_changes_round_trip(
        view in any::<u32>(),
        ops in proptest::collection::vec((0u8..3, any::<u32>(), "[a-z0-9.:]{0,20}", any::<[u8; 32]>()), 0..6),
        sig in any::<[u8; 32]>(),
    ) {
        let ops = ops
            .into_iter()
            .map(|(kind, n, addr, key)| match kind {
                0 => ViewOp::Add(ViewMember { id: ReplicaId(n), addr, key: PublicKey(key) }),
                1 => ViewOp::Remove(ReplicaId(n)),
                _ => ViewOp::SetF(n),
            })
            .collect();
        let mut signature = [0u8; 64];
        signature[..32].copy_from_slice(&sig);
        let change = ViewChange { view: ViewId(view), ops, signature: Signature(signature) };
        prop_assert_eq!(ViewChange::decode(&change.to_bytes()).unwrap(), change);
    }

    #[test]
    fn view_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let bytes = Bytes::from(bytes);
        let _ = View::decode(&bytes);
        let _ = ViewChange::decode(&bytes);
    }
}
