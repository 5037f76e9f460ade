//! The binary forms: operations and states round-trip, snapshots resume replication, decoding
//! enforces its limits and never panics, and accepted states are canonical.

mod support;

use bytes::Bytes;
use proptest::prelude::*;
use support::Network;
use tagma_crdt::{
    CodecError, CounterMark, CounterOp, Crdt, Dot, Kind, Limits, MapOp, NestedOp, Op, RegisterOp,
    SetOp, Stamp, decode_and_apply, decode_op, decode_op_with, decode_state, decode_state_with,
    encode_op, encode_state,
};

fn bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..8).prop_map(Bytes::from)
}

fn dots() -> impl Strategy<Value = Vec<Dot>> {
    prop::collection::vec(
        (any::<u32>(), any::<u64>()).prop_map(|(n, c)| Dot::new(n, c)),
        0..4,
    )
}

fn register_op() -> impl Strategy<Value = RegisterOp> {
    (any::<u64>(), any::<u32>(), bytes()).prop_map(|(lamport, node, value)| RegisterOp::Assign {
        stamp: Stamp { lamport, node },
        value,
    })
}

fn set_op() -> impl Strategy<Value = SetOp> {
    (any::<bool>(), bytes(), dots()).prop_map(|(add, element, observed)| {
        if add {
            SetOp::Add { element, observed }
        } else {
            SetOp::Remove { element, observed }
        }
    })
}

fn map_op() -> impl Strategy<Value = MapOp> {
    let nested = prop_oneof![
        register_op().prop_map(NestedOp::Register),
        any::<i64>().prop_map(|amount| NestedOp::Counter(CounterOp::Add(amount))),
        set_op().prop_map(NestedOp::Set),
    ];
    let marks =
        prop::collection::vec(
            (any::<u32>(), any::<u64>(), any::<i64>())
                .prop_map(|(node, counter, sum)| CounterMark { node, counter, sum }),
            0..4,
        );
    prop_oneof![
        (bytes(), nested).prop_map(|(key, op)| MapOp::Update { key, op }),
        (bytes(), dots(), marks).prop_map(|(key, dots, marks)| MapOp::Remove { key, dots, marks }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        register_op().prop_map(Op::Register),
        any::<i64>().prop_map(|amount| Op::Counter(CounterOp::Add(amount))),
        set_op().prop_map(Op::Set),
        map_op().prop_map(Op::Map),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    prop::sample::select(Kind::ALL.to_vec())
}

fn steps() -> impl Strategy<Value = Vec<(u8, usize, u64)>> {
    prop::collection::vec((any::<u8>(), 0usize..8, any::<u64>()), 1..60)
}

/// A state reached by a random history.
fn state(kind: Kind, steps: &[(u8, usize, u64)]) -> Crdt {
    Network::play(kind, 3, true, steps).replicas[0].crdt.clone()
}

/// Decodes `input` as an operation and a state under the default and under tight limits;
/// an accepted state must re-encode to `input`.
fn decode_everything(input: &[u8]) {
    let tight = Limits {
        value_bytes_max: 3,
        elements_max: 4,
        depth_max: 1,
    };
    for limits in [Limits::default(), tight] {
        if let Ok(op) = decode_op_with(input, &limits) {
            assert_eq!(decode_op(&encode_op(&op)), Ok(op));
        }
        if let Ok(crdt) = decode_state_with(input, &limits) {
            assert_eq!(encode_state(&crdt), input);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn operations_round_trip(op in op()) {
        prop_assert_eq!(decode_op(&encode_op(&op)), Ok(op));
    }

    #[test]
    fn states_round_trip(kind in kind(), steps in steps()) {
        let crdt = state(kind, &steps);
        let encoded = encode_state(&crdt);
        let decoded = decode_state(&encoded).unwrap();
        prop_assert_eq!(decoded.digest(), crdt.digest());
        prop_assert_eq!(decoded, crdt);
    }

    /// Decoding and applying in one step ends in the state, and the error, of decoding and
    /// then applying: for encoded operations of every kind (registers whose assignments win
    /// and lose) and for corrupted ones.
    #[test]
    fn decoding_and_applying_at_once_matches_the_two_steps(
        kind in kind(),
        steps in steps(),
        op in op(),
        dot in (any::<u32>(), any::<u64>()).prop_map(|(n, c)| Dot::new(n, c)),
        cut in any::<prop::sample::Index>(),
        flip in any::<u8>(),
    ) {
        let start = state(kind, &steps);
        let encoded = encode_op(&op);
        let mut corrupt = encoded.clone();
        let at = cut.index(corrupt.len());
        corrupt[at] ^= flip;
        for input in [encoded.clone(), corrupt, encoded[..at].to_vec()] {
            let mut two_steps = start.clone();
            let expected = decode_op(&input).map(|op| two_steps.apply(dot, &op));
            let mut at_once = start.clone();
            prop_assert_eq!(decode_and_apply(&mut at_once, dot, &input), expected);
            prop_assert_eq!(at_once, two_steps);
        }
    }

    #[test]
    fn random_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..96)) {
        decode_everything(&input);
    }

    #[test]
    fn random_bytes_after_a_valid_tag_never_panic(
        tag in 0u8..4,
        variant in 0u8..2,
        rest in prop::collection::vec(any::<u8>(), 0..96),
    ) {
        let mut input = vec![tag, variant];
        input.extend(rest);
        decode_everything(&input);
    }

    #[test]
    fn mutated_encodings_never_panic(
        kind in kind(),
        steps in steps(),
        op in op(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..4),
    ) {
        for mut input in [encode_state(&state(kind, &steps)), encode_op(&op)] {
            for &(position, byte, edit) in &edits {
                let position = position % (input.len() + 1);
                match edit {
                    0 if position < input.len() => input[position] = byte,
                    1 => input.insert(position, byte),
                    _ if position < input.len() => {
                        input.remove(position);
                    }
                    _ => input.push(byte),
                }
            }
            decode_everything(&input);
        }
    }
}

#[test]
fn a_snapshot_then_the_same_operations_give_the_same_digest() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut caught_up = 0;
    for kind in Kind::ALL {
        for _ in 0..32 {
            let steps =
                proptest::strategy::ValueTree::current(&steps().new_tree(&mut runner).unwrap());
            let mut network = Network::play(kind, 3, true, &steps);
            // A late joiner installs replica 0's snapshot (checked equal by `join`) and both
            // then receive the operations replica 0 had not delivered.
            network.join(0);
            let delivered: u64 = network.replicas[0].clock.iter().sum();
            caught_up += network.log.len() - delivered as usize;
            network.drain(&[1, 2, 3]);
            let joiner = network.replicas.last().unwrap();
            assert_eq!(
                joiner.crdt.digest(),
                network.replicas[0].crdt.digest(),
                "{kind}"
            );
            assert_eq!(joiner.crdt, network.replicas[0].crdt);
        }
    }
    assert!(caught_up > 0, "operations were applied after the snapshots");
}

#[test]
fn digests_tell_states_apart() {
    let empty: Vec<[u8; 32]> = Kind::ALL
        .iter()
        .map(|kind| Crdt::new(*kind).digest())
        .collect();
    for (index, digest) in empty.iter().enumerate() {
        assert_eq!(
            empty.iter().filter(|other| *other == digest).count(),
            1,
            "{index}"
        );
    }
    let mut a = Crdt::new(Kind::Set);
    let mut b = Crdt::new(Kind::Set);
    let add = |element: &'static [u8]| {
        Op::Set(SetOp::Add {
            element: Bytes::from_static(element),
            observed: Vec::new(),
        })
    };
    a.apply(Dot::new(1, 1), &add(b"x")).unwrap();
    b.apply(Dot::new(2, 1), &add(b"x")).unwrap();
    assert_eq!(a.value(), b.value());
    assert_ne!(
        a.digest(),
        b.digest(),
        "the same element with other tags is another state"
    );
    b.apply(Dot::new(1, 1), &add(b"x")).unwrap();
    a.apply(Dot::new(2, 1), &add(b"x")).unwrap();
    assert_eq!(a.digest(), b.digest());
}

fn register_state(value: &'static [u8]) -> Crdt {
    let mut crdt = Crdt::new(Kind::Register);
    let op = RegisterOp::Assign {
        stamp: Stamp {
            lamport: 1,
            node: 1,
        },
        value: Bytes::from_static(value),
    };
    crdt.apply(Dot::new(1, 1), &op.into()).unwrap();
    crdt
}

fn set_state(elements: usize) -> Crdt {
    let mut crdt = Crdt::new(Kind::Set);
    for index in 0..elements {
        let op = SetOp::Add {
            element: Bytes::from(vec![index as u8]),
            observed: Vec::new(),
        };
        crdt.apply(Dot::new(1, index as u64 + 1), &op.into())
            .unwrap();
    }
    crdt
}

#[test]
fn value_bytes_max_is_enforced() {
    let limits = Limits {
        value_bytes_max: 4,
        ..Limits::default()
    };
    assert!(decode_state_with(&encode_state(&register_state(b"four")), &limits).is_ok());
    let encoded = encode_state(&register_state(b"fives"));
    assert_eq!(
        decode_state_with(&encoded, &limits),
        Err(CodecError::ValueTooLarge { len: 5, max: 4 })
    );
    let op = encode_op(&Op::Set(SetOp::Add {
        element: Bytes::from_static(b"fives"),
        observed: Vec::new(),
    }));
    assert_eq!(
        decode_op_with(&op, &limits),
        Err(CodecError::ValueTooLarge { len: 5, max: 4 })
    );
}

#[test]
fn elements_max_counts_every_item() {
    // Three elements with one tag each: six items.
    let encoded = encode_state(&set_state(3));
    for (max, accepted) in [(6, true), (5, false)] {
        let limits = Limits {
            elements_max: max,
            ..Limits::default()
        };
        let result = decode_state_with(&encoded, &limits);
        if accepted {
            assert_eq!(result, Ok(set_state(3)));
        } else {
            assert_eq!(result, Err(CodecError::TooManyElements { max }));
        }
    }
    let op = encode_op(&Op::Set(SetOp::Remove {
        element: Bytes::new(),
        observed: vec![Dot::new(1, 1), Dot::new(1, 2)],
    }));
    let limits = Limits {
        elements_max: 1,
        ..Limits::default()
    };
    assert_eq!(
        decode_op_with(&op, &limits),
        Err(CodecError::TooManyElements { max: 1 })
    );
}

#[test]
fn depth_max_is_enforced() {
    let flat = Limits {
        depth_max: 1,
        ..Limits::default()
    };
    let map = Crdt::new(Kind::Map);
    assert_eq!(
        decode_state_with(&encode_state(&map), &flat),
        Err(CodecError::TooDeep { depth: 2, max: 1 })
    );
    assert!(decode_state_with(&encode_state(&set_state(1)), &flat).is_ok());
    let op = encode_op(&Op::Map(MapOp::Update {
        key: Bytes::from_static(b"k"),
        op: NestedOp::Counter(CounterOp::Add(1)),
    }));
    assert_eq!(
        decode_op_with(&op, &flat),
        Err(CodecError::TooDeep { depth: 2, max: 1 })
    );
    assert!(decode_op(&op).is_ok());
    // A map inside a map: refused for depth by default, as unsupported when deeper is allowed.
    let mut nested_map = op.clone();
    let kind_position = nested_map.len() - 3;
    assert_eq!(nested_map[kind_position], 1, "the nested kind tag");
    nested_map[kind_position] = 3;
    assert_eq!(
        decode_op(&nested_map),
        Err(CodecError::TooDeep { depth: 3, max: 2 })
    );
    let deep = Limits {
        depth_max: 5,
        ..Limits::default()
    };
    assert_eq!(
        decode_op_with(&nested_map, &deep),
        Err(CodecError::NestedMap)
    );
}

#[test]
fn malformed_inputs_get_typed_errors() {
    let op = encode_op(&Op::Counter(CounterOp::Add(-2)));
    assert_eq!(op, [1, 0, 3]);
    let mut trailing = op.clone();
    trailing.push(0);
    assert_eq!(
        decode_op(&trailing),
        Err(CodecError::TrailingBytes { count: 1 })
    );
    assert_eq!(decode_op(&op[..2]), Err(CodecError::Truncated));
    assert_eq!(decode_op(&[]), Err(CodecError::Truncated));
    assert_eq!(
        decode_op(&[9]),
        Err(CodecError::UnknownTag {
            what: "kind",
            tag: 9
        })
    );
    assert_eq!(decode_op(&[1, 0, 0x83, 0x00]), Err(CodecError::BadVarint));
    assert_eq!(
        decode_op(&[
            1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02
        ]),
        Err(CodecError::BadVarint)
    );
    // A node id beyond u32.
    assert_eq!(
        decode_op(&[0, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0]),
        Err(CodecError::OutOfRange {
            what: "node",
            value: 1 << 32
        })
    );
    // A list longer than the input.
    assert_eq!(decode_state(&[2, 100]), Err(CodecError::Truncated));
}

#[test]
fn non_canonical_states_are_refused() {
    // Set elements out of order: "b" before "a".
    let unordered = [2, 2, 1, b'b', 1, 1, 1, 1, b'a', 1, 1, 2];
    assert_eq!(
        decode_state(&unordered),
        Err(CodecError::NotCanonical {
            what: "set elements"
        })
    );
    // The same elements in order decode and re-encode byte for byte.
    let ordered = [2, 2, 1, b'a', 1, 1, 2, 1, b'b', 1, 1, 1];
    let crdt = decode_state(&ordered).unwrap();
    assert_eq!(encode_state(&crdt), ordered);
    // An element without tags.
    assert_eq!(
        decode_state(&[2, 1, 1, b'a', 0]),
        Err(CodecError::NotCanonical {
            what: "a set element without tags"
        })
    );
    // A map key without slots.
    assert_eq!(
        decode_state(&[3, 1, 1, b'k', 0]),
        Err(CodecError::NotCanonical {
            what: "a map key without slots"
        })
    );
    // Counter nodes repeated.
    assert_eq!(
        decode_state(&[1, 2, 5, 2, 5, 2]),
        Err(CodecError::NotCanonical {
            what: "counter nodes"
        })
    );
}

#[test]
fn decoded_values_are_copies_that_keep_no_message_alive() {
    let value = Bytes::from(vec![7u8; 1024]);
    let op = Op::Register(RegisterOp::Assign {
        stamp: Stamp {
            lamport: 3,
            node: 1,
        },
        value: value.clone(),
    });
    let encoded = Bytes::from(encode_op(&op));
    let Ok(Op::Register(RegisterOp::Assign { value: decoded, .. })) = decode_op(&encoded) else {
        panic!("not the assignment");
    };
    assert_eq!(decoded, value);
    assert!(!encoded.as_ptr_range().contains(&decoded.as_ptr()));
}
