//! Requests and replies: every variant round-trips through its encoding, malformed bytes are
//! typed errors, and no damaged encoding panics or decodes to something that encodes
//! differently.

use bytes::Bytes;
use tagma_crypto::IdentityKey;
use tagma_space::typed;
use tagma_space::{
    CasOutcome, DecodeError, Field, Limits, Pattern, Policy, ProtectionError, Protections, Receipt,
    Replacement, ShapeError, SpaceError, SpaceInfo, SpaceReply, SpaceRequest, Stored,
    TypedTemplate, TypedTuple, WaitScope,
};
use tagma_wire::KexPublic;

fn tuple() -> TypedTuple {
    "(\"lock\", \"db\", 7, 0x00ff)".parse().unwrap()
}

fn template() -> TypedTemplate {
    "(\"lock\", *str, *, *bytes)".parse().unwrap()
}

fn space() -> String {
    "locks.v1".into()
}

/// A real sealed secret (what a protected space's insertions carry) for 4 replicas.
fn sealed() -> Bytes {
    let replicas: Vec<_> = (1..=4u8)
        .map(|i| IdentityKey::from_seed([i; 32]).public())
        .collect();
    let secret = tagma_crypto::sealing::seal(b"the original tuple", b"aad", &replicas, 2).unwrap();
    Bytes::from(secret.encode())
}

fn protection() -> Protections {
    "public,comparable,private,public".parse().unwrap()
}

fn requests() -> Vec<SpaceRequest> {
    vec![
        SpaceRequest::Create {
            space: space(),
            policy: Policy::default(),
            protection: None,
        },
        SpaceRequest::Create {
            space: space(),
            policy: "read: 1, 2\nunique (\"lock\", *, *, *)".parse().unwrap(),
            protection: None,
        },
        SpaceRequest::Create {
            space: space(),
            policy: "take requires field 0 = invoker".parse().unwrap(),
            protection: Some(protection()),
        },
        SpaceRequest::Destroy { space: space() },
        SpaceRequest::ListSpaces,
        SpaceRequest::Out {
            space: space(),
            tuple: tuple(),
            lease_ms: None,
            sealed: None,
        },
        SpaceRequest::Out {
            space: space(),
            tuple: tuple(),
            lease_ms: Some(30_000),
            sealed: None,
        },
        SpaceRequest::Out {
            space: space(),
            tuple: tuple(),
            lease_ms: Some(30_000),
            sealed: Some(sealed()),
        },
        SpaceRequest::Rdp {
            space: space(),
            template: template(),
        },
        SpaceRequest::Inp {
            space: space(),
            template: template(),
        },
        SpaceRequest::Rd {
            space: space(),
            template: template(),
            timeout_ms: 5_000,
        },
        SpaceRequest::In {
            space: space(),
            template: template(),
            timeout_ms: u64::MAX,
        },
        SpaceRequest::Cas {
            space: space(),
            template: template(),
            tuple: tuple(),
            lease_ms: Some(1),
            sealed: None,
        },
        SpaceRequest::Cas {
            space: space(),
            template: template(),
            tuple: tuple(),
            lease_ms: None,
            sealed: Some(sealed()),
        },
        SpaceRequest::Replace {
            space: space(),
            template: template(),
            tuple: tuple(),
            lease_ms: None,
            sealed: None,
        },
        SpaceRequest::Replace {
            space: space(),
            template: template(),
            tuple: tuple(),
            lease_ms: Some(5),
            sealed: Some(sealed()),
        },
        SpaceRequest::RdAll {
            space: space(),
            template: template(),
            max: 10,
        },
        SpaceRequest::InAll {
            space: space(),
            template: template(),
            max: 0,
        },
        SpaceRequest::Renew {
            space: space(),
            template: template(),
            lease_ms: 60_000,
        },
        SpaceRequest::RdAfter {
            space: space(),
            template: template(),
            after: 41,
            timeout_ms: 30_000,
        },
        SpaceRequest::Share {
            space: space(),
            revision: 7,
            reader: KexPublic([9; 32]),
        },
    ]
}

fn stored() -> Stored {
    Stored {
        tuple: tuple(),
        revision: 42,
        lease_expires_ms: Some(1_700_000_000_000),
        sealed: None,
    }
}

fn replies() -> Vec<SpaceReply> {
    let receipt = Receipt {
        revision: 9,
        lease_expires_ms: None,
    };
    let mut replies = vec![
        SpaceReply::Created,
        SpaceReply::Destroyed,
        SpaceReply::Inserted(receipt),
        SpaceReply::Tuple(None),
        SpaceReply::Tuple(Some(stored())),
        SpaceReply::Tuples(vec![]),
        SpaceReply::Tuples(vec![
            stored(),
            Stored {
                lease_expires_ms: None,
                ..stored()
            },
            Stored {
                sealed: Some(sealed()),
                ..stored()
            },
            Stored {
                lease_expires_ms: None,
                sealed: Some(sealed()),
                ..stored()
            },
        ]),
        SpaceReply::Cas(CasOutcome::Inserted(receipt)),
        SpaceReply::Cas(CasOutcome::Exists(stored())),
        SpaceReply::Replaced(None),
        SpaceReply::Replaced(Some(Replacement {
            taken: stored(),
            inserted: receipt,
        })),
        SpaceReply::Renewed(3),
        SpaceReply::TimedOut,
        SpaceReply::Spaces(vec![]),
        SpaceReply::Spaces(vec![
            SpaceInfo {
                name: "a".into(),
                tuples: 3,
                waiting: 1,
                protection: None,
            },
            SpaceInfo {
                name: space(),
                tuples: 0,
                waiting: 0,
                protection: None,
            },
        ]),
        SpaceReply::Spaces(vec![
            SpaceInfo {
                name: "a".into(),
                tuples: 3,
                waiting: 1,
                protection: None,
            },
            SpaceInfo {
                name: space(),
                tuples: 0,
                waiting: 0,
                protection: Some(protection()),
            },
        ]),
        SpaceReply::Denied("insert: principal 3 is not admitted".into()),
        SpaceReply::Share(Bytes::from(vec![5u8; 73])),
    ];
    let errors = [
        SpaceError::UnknownSpace(space()),
        SpaceError::SpaceExists(space()),
        SpaceError::Shape(ShapeError::Empty),
        SpaceError::Shape(ShapeError::TooManyFields { arity: 20, max: 16 }),
        SpaceError::Shape(ShapeError::FieldTooLarge {
            index: 1,
            len: 100,
            max: 10,
        }),
        SpaceError::Shape(ShapeError::TupleTooLarge { len: 100, max: 10 }),
        SpaceError::BadTimeout {
            timeout_ms: 0,
            max_ms: 60_000,
        },
        SpaceError::BadLease {
            lease_ms: 0,
            max_ms: 60_000,
        },
        SpaceError::TooManySpaces { max: 10 },
        SpaceError::SpaceFull {
            space: space(),
            max: 10,
        },
        SpaceError::SpaceTooLarge {
            space: space(),
            bytes_max: 1 << 20,
        },
        SpaceError::TooManyWaits {
            scope: WaitScope::Client,
            max: 4,
        },
        SpaceError::TooManyWaits {
            scope: WaitScope::Space,
            max: 4,
        },
        SpaceError::Malformed("the input ends inside a space name".into()),
        SpaceError::NotOrdered("in".into()),
        SpaceError::ArityMismatch {
            template: 2,
            tuple: 3,
        },
        SpaceError::BadCount { max: 0, limit: 100 },
        SpaceError::BadPolicy("admin operations touch no tuple".into()),
        SpaceError::Protection(ProtectionError::Width { width: 0, max: 16 }),
        SpaceError::Protection(ProtectionError::Arity {
            arity: 2,
            protected: 3,
        }),
        SpaceError::Protection(ProtectionError::NotPlaceholder { index: 2 }),
        SpaceError::Protection(ProtectionError::NotHash { index: 1 }),
        SpaceError::Protection(ProtectionError::TemplatePattern { index: 1 }),
        SpaceError::Protection(ProtectionError::SealedMissing),
        SpaceError::Protection(ProtectionError::SealedUnexpected),
        SpaceError::Protection(ProtectionError::SealedMalformed("truncated".into())),
        SpaceError::Protection(ProtectionError::SealedTooLarge { len: 300, max: 200 }),
        SpaceError::Protection(ProtectionError::PolicyField { field: 2 }),
        SpaceError::Protection(ProtectionError::NoSealedTuple { revision: 9 }),
        SpaceError::Protection(ProtectionError::NoReplicaKey),
        SpaceError::Protection(ProtectionError::ShareUnopenable {
            revision: 9,
            reason: "share 2 does not decrypt".into(),
        }),
        SpaceError::Protection(ProtectionError::ShareOrdered),
    ];
    replies.extend(errors.into_iter().map(SpaceReply::Error));
    replies
}

#[test]
fn every_request_round_trips() {
    let limits = Limits::default();
    for request in requests() {
        let bytes = request.encode();
        assert_eq!(
            SpaceRequest::decode(&bytes, &limits).as_ref(),
            Ok(&request),
            "{request:?}"
        );
    }
}

#[test]
fn every_reply_round_trips() {
    let limits = Limits::default();
    for reply in replies() {
        let bytes = reply.encode();
        assert_eq!(
            SpaceReply::decode(&bytes, &limits).as_ref(),
            Ok(&reply),
            "{reply:?}"
        );
    }
}

#[test]
fn malformed_requests_are_typed_errors() {
    let limits = Limits::default();
    let decode = |bytes: &[u8]| SpaceRequest::decode(&Bytes::copy_from_slice(bytes), &limits);
    assert_eq!(decode(b""), Err(DecodeError::Truncated("an operation")));
    assert_eq!(
        decode(b"\x10"),
        Err(DecodeError::UnknownTag {
            what: "operation",
            tag: 16
        })
    );
    assert_eq!(
        decode(b"\x00"),
        Err(DecodeError::UnknownTag {
            what: "operation",
            tag: 0
        })
    );
    assert_eq!(decode(b"\x03\x00"), Err(DecodeError::TrailingBytes(1)));
    assert!(matches!(
        decode(b"\x02\x03a b"),
        Err(DecodeError::BadSpaceName(_))
    ));
    assert!(matches!(
        decode(b"\x02\x00"),
        Err(DecodeError::BadSpaceName(_))
    ));
    assert!(matches!(
        decode(b"\x02\x41aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        Err(DecodeError::TooLong { .. })
    ));
    // A tuple beyond the limits is a shape error inside the decode error.
    let wide = SpaceRequest::Out {
        space: space(),
        tuple: TypedTuple(vec![Field::Int(0); 17]),
        lease_ms: None,
        sealed: None,
    }
    .encode();
    assert_eq!(
        SpaceRequest::decode(&wide, &limits),
        Err(DecodeError::Field(typed::DecodeError::Shape(
            ShapeError::TooManyFields { arity: 17, max: 16 }
        )))
    );
    // A wildcard where the tuple of an out belongs.
    let mut bytes = vec![4u8, 1, b'a'];
    bytes.extend_from_slice(&template().encode());
    bytes.push(0);
    assert!(matches!(
        decode(&bytes),
        Err(DecodeError::Field(typed::DecodeError::WildcardInTuple(1)))
    ));
    // A lease flag other than 0 or 1.
    let mut bytes = vec![4u8, 1, b'a'];
    bytes.extend_from_slice(&tuple().encode());
    bytes.push(2);
    assert!(matches!(
        decode(&bytes),
        Err(DecodeError::UnknownTag { .. })
    ));
}

#[test]
fn malformed_replies_are_typed_errors() {
    let limits = Limits::default();
    let decode = |bytes: &[u8]| SpaceReply::decode(&Bytes::copy_from_slice(bytes), &limits);
    assert_eq!(decode(b""), Err(DecodeError::Truncated("a reply")));
    assert!(matches!(
        decode(b"\x00"),
        Err(DecodeError::UnknownTag { .. })
    ));
    assert_eq!(decode(b"\x09\x00"), Err(DecodeError::TrailingBytes(1)));
    // A list count the input cannot hold fails before allocating.
    assert_eq!(
        decode(b"\x05\xff\xff\xff\xff"),
        Err(DecodeError::Truncated("a list of tuples"))
    );
    assert_eq!(
        decode(b"\x0a\xff\xff\xff\x7f"),
        Err(DecodeError::Truncated("a list of spaces"))
    );
    assert!(matches!(
        decode(b"\x0c\x63"),
        Err(DecodeError::UnknownTag { .. })
    ));
    assert!(matches!(
        decode(b"\x0b\x02\x00\xff\xfe"),
        Err(DecodeError::NotUtf8(_))
    ));
    assert!(matches!(
        decode(b"\x0c\x09\x02\x01\x00\x00\x00"),
        Err(DecodeError::UnknownTag { .. })
    ));
}

/// Every prefix and every one-byte change of every valid encoding either fails with a typed
/// error or decodes to something that encodes back to exactly those bytes.
#[test]
fn damaged_encodings_never_panic_and_what_decodes_is_canonical() {
    let limits = Limits::default();
    let mut decoded = 0usize;
    let mut check = |input: Bytes| {
        if let Ok(request) = SpaceRequest::decode(&input, &limits) {
            assert_eq!(request.encode(), input, "{request:?}");
            decoded += 1;
        }
        if let Ok(reply) = SpaceReply::decode(&input, &limits) {
            assert_eq!(reply.encode(), input, "{reply:?}");
            decoded += 1;
        }
    };
    let encodings: Vec<Bytes> = requests()
        .iter()
        .map(SpaceRequest::encode)
        .chain(replies().iter().map(SpaceReply::encode))
        .collect();
    for bytes in &encodings {
        for cut in 0..bytes.len() {
            check(bytes.slice(..cut));
        }
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut damaged = bytes.to_vec();
                damaged[at] ^= flip;
                check(Bytes::from(damaged));
            }
        }
        check(bytes.clone());
    }
    assert!(
        decoded >= encodings.len(),
        "every undamaged encoding decodes"
    );
}

#[test]
fn check_finds_what_the_service_would_refuse() {
    let limits = Limits::default();
    for request in requests() {
        assert_eq!(request.check(&limits), Ok(()), "{request:?}");
    }
    let bad_name = SpaceRequest::Destroy {
        space: "no spaces".into(),
    };
    assert!(matches!(
        bad_name.check(&limits),
        Err(SpaceError::Malformed(_))
    ));
    let empty = SpaceRequest::Rdp {
        space: space(),
        template: TypedTemplate(vec![]),
    };
    assert_eq!(
        empty.check(&limits),
        Err(SpaceError::Shape(ShapeError::Empty))
    );
    let policy = SpaceRequest::Create {
        space: space(),
        policy: "read requires field 40 = invoker".parse().unwrap(),
        protection: None,
    };
    assert!(matches!(
        policy.check(&limits),
        Err(SpaceError::BadPolicy(_))
    ));
    let cas = SpaceRequest::Cas {
        space: space(),
        template: TypedTemplate(vec![Pattern::Any]),
        tuple: TypedTuple(vec![Field::Bytes(Bytes::from(vec![0u8; 70 << 10]))]),
        lease_ms: None,
        sealed: None,
    };
    assert!(matches!(
        cas.check(&limits),
        Err(SpaceError::Shape(ShapeError::FieldTooLarge { .. }))
    ));
}

#[test]
fn error_messages_name_the_fix() {
    let messages: Vec<String> = replies()
        .into_iter()
        .filter_map(|r| match r {
            SpaceReply::Error(e) => Some(e.to_string()),
            _ => None,
        })
        .collect();
    let keys = [
        "create it first",
        "pick another name",
        "at least one field",
        "arity_max",
        "field_bytes_max",
        "tuple_bytes_max",
        "wait_ms_max",
        "lease_ms_max",
        "destroy one first",
        "tuples_per_space_max",
        "space_bytes_max",
        "waits_per_client_max",
        "waits_per_space_max",
        "malformed",
        "send it ordered",
        "same arity",
        "all_max",
        "does not fit",
        "arity_max",
        "have its arity",
        "seal the tuple",
        "hash it",
        "use `*` or `*bytes`",
        "insert it with the space key",
        "without one",
        "does not decode",
        "tuple_bytes_max",
        "public fields only",
        "ask again",
        "ask the other replicas",
        "sealed it wrongly",
        "send it unordered",
    ];
    assert_eq!(messages.len(), keys.len());
    for (message, key) in messages.iter().zip(keys) {
        assert!(message.contains(key), "{message:?} lacks {key:?}");
    }
}

/// Requests and replies without the confidentiality sections keep the bytes they always had:
/// the sections are trailing or flagged by bits that were zero.
#[test]
fn encodings_without_protection_or_sealed_parts_keep_their_bytes() {
    let t = TypedTuple(vec![Field::Int(5)]);
    let mut tuple_bytes = vec![1u8, 1];
    tuple_bytes.extend_from_slice(&5i64.to_le_bytes());
    let out = SpaceRequest::Out {
        space: "s".into(),
        tuple: t.clone(),
        lease_ms: None,
        sealed: None,
    };
    let mut expected = vec![4u8, 1, b's'];
    expected.extend_from_slice(&tuple_bytes);
    expected.push(0);
    assert_eq!(&out.encode()[..], &expected[..]);
    let create = SpaceRequest::Create {
        space: "s".into(),
        policy: Policy::default(),
        protection: None,
    };
    let mut expected = vec![1u8, 1, b's'];
    expected.extend_from_slice(&Policy::default().encode());
    assert_eq!(&create.encode()[..], &expected[..]);
    let leased = SpaceReply::Tuple(Some(Stored {
        tuple: t.clone(),
        revision: 3,
        lease_expires_ms: Some(10),
        sealed: None,
    }));
    let mut expected = vec![4u8, 1];
    expected.extend_from_slice(&tuple_bytes);
    expected.extend_from_slice(&3u64.to_le_bytes());
    expected.push(1);
    expected.extend_from_slice(&10u64.to_le_bytes());
    assert_eq!(&leased.encode()[..], &expected[..]);
    let listed = SpaceReply::Spaces(vec![SpaceInfo {
        name: "s".into(),
        tuples: 2,
        waiting: 1,
        protection: None,
    }]);
    let mut expected = vec![10u8, 1, 0, 0, 0, 1, b's'];
    expected.extend_from_slice(&2u32.to_le_bytes());
    expected.extend_from_slice(&1u32.to_le_bytes());
    assert_eq!(&listed.encode()[..], &expected[..]);
}

#[test]
fn sealed_parts_and_protections_are_checked_before_sending() {
    let limits = Limits::default();
    let out = |sealed: Bytes| SpaceRequest::Out {
        space: space(),
        tuple: tuple(),
        lease_ms: None,
        sealed: Some(sealed),
    };
    assert!(matches!(
        out(Bytes::from_static(b"not a sealed secret")).check(&limits),
        Err(SpaceError::Protection(ProtectionError::SealedMalformed(_)))
    ));
    let small = Limits {
        tuple_bytes_max: 200,
        ..limits
    };
    assert!(matches!(
        out(sealed()).check(&small),
        Err(SpaceError::Protection(ProtectionError::SealedTooLarge {
            max: 200,
            ..
        }))
    ));
    let on_private = SpaceRequest::Create {
        space: space(),
        policy: "read requires field 2 = invoker".parse().unwrap(),
        protection: Some(protection()),
    };
    assert_eq!(
        on_private.check(&limits),
        Err(SpaceError::Protection(ProtectionError::PolicyField {
            field: 2
        }))
    );
    let wide = SpaceRequest::Create {
        space: space(),
        policy: Policy::default(),
        protection: Some(Protections(vec![tagma_space::Protection::Public; 17])),
    };
    assert_eq!(
        wide.check(&limits),
        Err(SpaceError::Protection(ProtectionError::Width {
            width: 17,
            max: 16
        }))
    );
    // A sealed part longer than the tuple limit does not even decode.
    let bytes = out(sealed()).encode();
    assert!(matches!(
        SpaceRequest::decode(&bytes, &small),
        Err(DecodeError::TooLong {
            what: "a sealed tuple",
            ..
        })
    ));
}

#[test]
fn a_protected_list_without_a_protected_space_is_not_canonical() {
    let limits = Limits::default();
    let mut bytes = vec![14u8, 1, 0, 0, 0, 1, b's'];
    bytes.extend_from_slice(&[0; 8]);
    bytes.push(0);
    assert_eq!(
        SpaceReply::decode(&Bytes::from(bytes.clone()), &limits),
        Err(DecodeError::NotCanonical(
            "a list without protected spaces is tag 10"
        ))
    );
    *bytes.last_mut().unwrap() = 1;
    bytes.extend_from_slice(&[1, 2]);
    let reply = SpaceReply::decode(&Bytes::from(bytes), &limits).unwrap();
    let SpaceReply::Spaces(spaces) = reply else {
        panic!("a list")
    };
    assert_eq!(spaces[0].protection, Some("private".parse().unwrap()));
    // A stored tuple's extras beyond the lease and sealed bits are refused.
    let mut stored = vec![4u8, 1];
    stored.extend_from_slice(&tuple().encode());
    stored.extend_from_slice(&1u64.to_le_bytes());
    stored.push(4);
    assert!(matches!(
        SpaceReply::decode(&Bytes::from(stored), &limits),
        Err(DecodeError::UnknownTag { .. })
    ));
}
