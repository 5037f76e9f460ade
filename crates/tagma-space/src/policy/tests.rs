//! Tests of policies: their text, their encoding, and what they admit.

use bytes::Bytes;

use super::*;
use crate::typed::{FieldType, Pattern};

const EXAMPLE: &str = "\
read: any
insert: 7, 1, 2, 2
take: any
admin: 1
# owners only
insert requires field 0 = invoker
unique (\"lock\", *str, *)
";

fn example() -> Policy {
    EXAMPLE.parse().unwrap()
}

#[test]
fn the_text_parses_to_the_policy_it_says() {
    let policy = example();
    assert_eq!(policy.read, Principals::Any);
    assert_eq!(policy.insert, Principals::only([1, 2, 7]));
    assert_eq!(policy.take, Principals::Any);
    assert_eq!(policy.admin, Principals::only([1]));
    assert_eq!(
        policy.rules,
        vec![
            Rule::FieldIsInvoker {
                class: OpClass::Insert,
                field: 0
            },
            Rule::Unique(TypedTemplate(vec![
                Pattern::Is(Field::Str("lock".into())),
                Pattern::AnyOf(FieldType::Str),
                Pattern::Any,
            ])),
        ]
    );
}

#[test]
fn display_writes_every_class_and_parses_back() {
    let policy = example();
    let text = policy.to_string();
    assert_eq!(
        text,
        "read: any\ninsert: 1, 2, 7\ntake: any\nadmin: 1\n\
         insert requires field 0 = invoker\nunique (\"lock\", *str, *)\n"
    );
    assert_eq!(text.parse::<Policy>().unwrap(), policy);
    let default = Policy::default();
    assert_eq!(
        default.to_string(),
        "read: any\ninsert: any\ntake: any\nadmin: creator\n"
    );
    assert_eq!("".parse::<Policy>().unwrap(), default);
    let mixed: Policy = "read: none\ntake: creator, 9\ntake requires field 2 = invoker"
        .parse()
        .unwrap();
    assert_eq!(mixed.read, Principals::none());
    assert_eq!(
        mixed.take,
        Principals::Listed {
            creator: true,
            ids: vec![9]
        }
    );
    assert_eq!(mixed.to_string().parse::<Policy>().unwrap(), mixed);
}

#[test]
fn bad_text_names_the_mistake() {
    let cases: [(&str, PolicyError); 8] = [
        ("write: any", PolicyError::UnknownClass("write".into())),
        ("read any", PolicyError::BadLine("read any".into())),
        (
            "read: everyone",
            PolicyError::BadPrincipal("everyone".into()),
        ),
        ("read: 1, -2", PolicyError::BadPrincipal("-2".into())),
        (
            "read: any\nread: 1",
            PolicyError::DuplicateClass(OpClass::Read),
        ),
        (
            "admin requires field 0 = invoker",
            PolicyError::AdminFieldRule,
        ),
        (
            "take requires field 0 = me",
            PolicyError::BadLine("take requires field 0 = me".into()),
        ),
        (
            "take requires field 300 = invoker",
            PolicyError::BadLine("take requires field 300 = invoker".into()),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(text.parse::<Policy>(), Err(expected), "{text}");
    }
    let e = "unique (\"lock\"".parse::<Policy>().unwrap_err();
    assert!(matches!(e, PolicyError::Template { .. }), "{e:?}");
    assert!(e.to_string().contains("unique"), "{e}");
    let many = (0..=POLICY_RULES_MAX)
        .map(|i| format!("read requires field {} = invoker", i % 4))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        many.parse::<Policy>(),
        Err(PolicyError::TooManyRules {
            count: POLICY_RULES_MAX + 1,
            max: POLICY_RULES_MAX
        })
    );
    let ids = (0..=POLICY_PRINCIPALS_MAX as u32)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert!(matches!(
        format!("read: {ids}").parse::<Policy>(),
        Err(PolicyError::TooManyPrincipals { .. })
    ));
}

#[test]
fn check_holds_rules_to_the_limits() {
    let limits = Limits {
        arity_max: 4,
        ..Limits::default()
    };
    let beyond: Policy = "insert requires field 4 = invoker".parse().unwrap();
    assert_eq!(
        beyond.check(&limits),
        Err(PolicyError::FieldBeyondArity {
            field: 4,
            arity_max: 4
        })
    );
    let wide: Policy = "unique (*, *, *, *, *)".parse().unwrap();
    assert!(matches!(wide.check(&limits), Err(PolicyError::Shape(_))));
    assert_eq!(example().check(&limits), Ok(()));
}

#[test]
fn classes_admit_their_principals_and_the_creator_where_named() {
    let policy = example();
    assert!(policy.allows(OpClass::Read, 99, 5));
    assert!(policy.allows(OpClass::Insert, 7, 5));
    assert!(
        !policy.allows(OpClass::Insert, 5, 5),
        "the creator is not listed"
    );
    assert!(policy.allows(OpClass::Admin, 1, 5));
    let default = Policy::default();
    assert!(default.allows(OpClass::Admin, 5, 5));
    assert!(!default.allows(OpClass::Admin, 6, 5));
    let closed = Policy {
        take: Principals::none(),
        ..Policy::default()
    };
    assert!(!closed.allows(OpClass::Take, 5, 5));
}

#[test]
fn field_rules_and_unique_templates_apply_to_their_tuples() {
    let policy = example();
    let own = TypedTuple(vec![Field::Int(7), Field::Str("x".into())]);
    let other = TypedTuple(vec![Field::Int(8), Field::Str("x".into())]);
    let text = TypedTuple(vec![Field::Str("7".into())]);
    assert!(policy.field_rules_hold(OpClass::Insert, 7, &own));
    assert!(!policy.field_rules_hold(OpClass::Insert, 7, &other));
    assert!(!policy.field_rules_hold(OpClass::Insert, 7, &text));
    // No rule on reads: every tuple passes.
    assert!(policy.field_rules_hold(OpClass::Read, 7, &other));
    let lock = TypedTuple(vec![
        Field::Str("lock".into()),
        Field::Str("a".into()),
        Field::Int(7),
    ]);
    assert_eq!(policy.unique_templates(&lock).count(), 1);
    assert_eq!(policy.unique_templates(&own).count(), 0);
}

#[test]
fn the_encoding_round_trips_and_rejects_what_is_not_canonical() {
    let limits = Limits::default();
    for policy in [Policy::default(), example(), "read: none".parse().unwrap()] {
        let bytes = policy.encode();
        assert_eq!(Policy::decode(&bytes, &limits).unwrap(), policy);
    }
    // Principals out of order.
    let mut bytes = vec![1u8, 0, 2, 0];
    bytes.extend_from_slice(&5u32.to_le_bytes());
    bytes.extend_from_slice(&4u32.to_le_bytes());
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    assert!(matches!(
        Policy::decode(&Bytes::from(bytes), &limits),
        Err(DecodeError::NotCanonical(_))
    ));
    // A field rule on admin, an unknown rule, too many rules, trailing bytes.
    let cases: [&[u8]; 5] = [
        &[0, 0, 0, 0, 1, 1, 3, 0],
        &[0, 0, 0, 0, 1, 9],
        &[0, 0, 0, 0, 17],
        &[0, 0, 0, 0, 0, 0],
        &[0, 0, 2],
    ];
    for bytes in cases {
        assert!(
            Policy::decode(&Bytes::from_static(bytes), &limits).is_err(),
            "{bytes:?}"
        );
    }
    // Every prefix of a valid encoding is an error, never a panic.
    let bytes = example().encode();
    for cut in 0..bytes.len() {
        assert!(Policy::decode(&bytes.slice(..cut), &limits).is_err());
    }
}
