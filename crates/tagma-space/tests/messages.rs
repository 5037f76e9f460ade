//! Requests and replies: every variant round-trips through its encoding, malformed bytes are
//! typed errors, and no damaged encoding panics or decodes to something that encodes
//! differently.

use bytes::Bytes;
use tagma_space::typed;
use tagma_space::{
    CasOutcome, DecodeError, Field, Limits, Pattern, Policy, Receipt, Replacement, ShapeError,
    SpaceError, SpaceInfo, SpaceReply, SpaceRequest, Stored, TypedTemplate, TypedTuple, WaitScope,
};

fn tuple() -> TypedTuple {
    "(\"lock\", \"db\", 7, 0x00ff)".parse().unwrap()
}

fn template() -> TypedTemplate {
    "(\"lock\", *str, *, *bytes)".parse().unwrap()
}

fn space() -> String {
    "locks.v1".into()
}

fn requests() -> Vec<SpaceRequest> {
    vec![
        SpaceRequest::Create {
            space: space(),
            policy: Policy::default(),
        },
        SpaceRequest::Create {
            space: space(),
            policy: "read: 1, 2\nunique (\"lock\", *, *, *)".parse().unwrap(),
        },
        SpaceRequest::Destroy { space: space() },
        SpaceRequest::ListSpaces,
        SpaceRequest::Out {
            space: space(),
            tuple: tuple(),
            lease_ms: None,
        },
        SpaceRequest::Out {
            space: space(),
            tuple: tuple(),
            lease_ms: Some(30_000),
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
        },
        SpaceRequest::Replace {
            space: space(),
            template: template(),
            tuple: tuple(),
            lease_ms: None,
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
    ]
}

fn stored() -> Stored {
    Stored {
        tuple: tuple(),
        revision: 42,
        lease_expires_ms: Some(1_700_000_000_000),
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
            },
            SpaceInfo {
                name: space(),
                tuples: 0,
                waiting: 0,
            },
        ]),
        SpaceReply::Denied("insert: principal 3 is not admitted".into()),
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
        decode(b"\x0f"),
        Err(DecodeError::UnknownTag {
            what: "operation",
            tag: 15
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
    for (message, key) in messages.iter().zip([
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
    ]) {
        assert!(message.contains(key), "{message:?} lacks {key:?}");
    }
}
