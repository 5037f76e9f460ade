//! Replicas that deliver the same operations in different causal orders converge, to the value
//! the happened-before relation of the operations prescribes, and late joiners that install a
//! snapshot converge with them.

mod support;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use support::Network;
use tagma_crdt::{Kind, Value};

/// Random histories: (action, replica, choice) steps.
fn steps() -> impl Strategy<Value = Vec<(u8, usize, u64)>> {
    prop::collection::vec((any::<u8>(), 0usize..8, any::<u64>()), 1..80)
}

/// Asserts every replica holds the same state, digest and value, and that a snapshot of it
/// decodes to an equal state.
fn assert_converged(network: &Network) {
    let first = &network.replicas[0].crdt;
    for replica in &network.replicas[1..] {
        assert_eq!(replica.crdt.digest(), first.digest());
        assert_eq!(&replica.crdt, first);
        assert_eq!(replica.crdt.value(), first.value());
    }
    let snapshot = tagma_crdt::encode_state(first);
    assert_eq!(&tagma_crdt::decode_state(&snapshot).unwrap(), first);
}

fn check(kind: Kind, publishers: usize, extremes: bool, steps: &[(u8, usize, u64)]) -> Network {
    let network = Network::run(kind, publishers, extremes, steps);
    assert_converged(&network);
    if !extremes {
        assert_eq!(network.replicas[0].crdt.value(), network.expected());
    }
    network
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn registers_converge_to_the_highest_stamp(publishers in 2usize..5, steps in steps()) {
        check(Kind::Register, publishers, false, &steps);
    }

    #[test]
    fn counters_converge_to_the_sum_of_adds(publishers in 2usize..5, steps in steps()) {
        check(Kind::Counter, publishers, false, &steps);
    }

    #[test]
    fn saturating_counters_converge(publishers in 2usize..5, steps in steps()) {
        check(Kind::Counter, publishers, true, &steps);
    }

    #[test]
    fn sets_converge_to_add_wins(publishers in 2usize..5, steps in steps()) {
        check(Kind::Set, publishers, false, &steps);
    }

    #[test]
    fn maps_converge_to_update_wins(publishers in 2usize..5, steps in steps()) {
        check(Kind::Map, publishers, false, &steps);
    }

    #[test]
    fn maps_with_saturating_counters_converge(publishers in 2usize..5, steps in steps()) {
        check(Kind::Map, publishers, true, &steps);
    }
}

/// A fixed history in which replicas see concurrent operations in opposite orders and a late
/// joiner installs a snapshot halfway, for each kind.
#[test]
fn opposite_delivery_orders_and_a_late_joiner_converge() {
    for kind in Kind::ALL {
        let mut steps = Vec::new();
        for round in 0..12u64 {
            steps.push((0, 0, round * 31 + 3));
            steps.push((1, 1, round * 17 + 5));
            steps.push((4, 0, round));
            steps.push((5, 1, round + 1));
            if round == 6 {
                steps.push((9, 0, 0));
            }
        }
        let network = check(kind, 2, false, &steps);
        assert_eq!(
            network.replicas.len(),
            3,
            "{kind}: the late joiner took part"
        );
        assert!(network.log.len() >= 12, "{kind}: operations were published");
        if kind == Kind::Map {
            assert!(matches!(network.expected(), Value::Map(_)));
        }
    }
}

/// The map histories exercise the cases the map's semantics are about.
#[test]
fn map_histories_cover_removals_conflicts_and_refusals() {
    let mut refused = 0;
    let mut conflicts = 0;
    let mut removals = 0;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for _ in 0..64 {
        let steps = steps().new_tree(&mut runner).unwrap().current();
        let network = check(Kind::Map, 3, false, &steps);
        refused += network.refused;
        removals += network
            .log
            .iter()
            .filter(|m| matches!(m.op, tagma_crdt::Op::Map(tagma_crdt::MapOp::Remove { .. })))
            .count();
        if let tagma_crdt::Crdt::Map(map) = &network.replicas[0].crdt {
            conflicts += map
                .entries()
                .filter(|(_, entry)| entry.live_kinds().len() > 1)
                .count();
        }
    }
    assert!(refused > 0, "some updates of another kind were refused");
    assert!(removals > 0, "some keys were removed");
    assert!(
        conflicts > 0,
        "some keys were created concurrently with different kinds"
    );
}
