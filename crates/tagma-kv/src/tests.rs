use bytes::Bytes;
use tagma_exec::conformance::check_service;
use tagma_exec::{Context, Service};
use tagma_wire::{ClientId, ConsensusId, RequestSeq};

use crate::{KvCodecError, KvOp, KvReply, KvService, SCAN_LIMIT_MAX};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn put(key: &str, value: &str) -> KvOp {
    KvOp::Put {
        key: b(key),
        value: b(value),
    }
}

fn get(key: &str) -> KvOp {
    KvOp::Get { key: b(key) }
}

fn ctx() -> Context {
    Context {
        client: ClientId(1),
        seq: RequestSeq(1),
        cid: Some(ConsensusId(0)),
        timestamp_ms: 0,
        seed: 0,
    }
}

fn err_reply(message: &str) -> KvReply {
    KvReply::Error {
        message: message.into(),
    }
}

#[test]
fn put_get_delete() {
    let mut kv = KvService::new();
    assert!(kv.is_empty());
    assert_eq!(kv.apply(put("a", "1")), KvReply::Put { previous: None });
    assert_eq!(
        kv.apply(put("a", "2")),
        KvReply::Put {
            previous: Some(b("1"))
        }
    );
    assert_eq!(
        kv.apply(get("a")),
        KvReply::Get {
            value: Some(b("2"))
        }
    );
    assert_eq!(kv.apply(get("b")), KvReply::Get { value: None });
    assert_eq!(
        kv.apply(KvOp::Delete { key: b("a") }),
        KvReply::Delete {
            previous: Some(b("2"))
        }
    );
    assert_eq!(
        kv.apply(KvOp::Delete { key: b("a") }),
        KvReply::Delete { previous: None }
    );
    assert_eq!(kv.apply(get("a")), KvReply::Get { value: None });
    assert!(kv.is_empty());
}

#[test]
fn cas_semantics() {
    let mut kv = KvService::new();
    // Expected absent, key absent: applies.
    assert_eq!(
        kv.apply(KvOp::Cas {
            key: b("k"),
            expected: None,
            new: b("v1"),
        }),
        KvReply::Cas {
            applied: true,
            current: Some(b("v1"))
        }
    );
    // Expected absent, key present: fails, reports current.
    assert_eq!(
        kv.apply(KvOp::Cas {
            key: b("k"),
            expected: None,
            new: b("v2"),
        }),
        KvReply::Cas {
            applied: false,
            current: Some(b("v1"))
        }
    );
    // Wrong expected value.
    assert_eq!(
        kv.apply(KvOp::Cas {
            key: b("k"),
            expected: Some(b("nope")),
            new: b("v2"),
        }),
        KvReply::Cas {
            applied: false,
            current: Some(b("v1"))
        }
    );
    // Right expected value.
    assert_eq!(
        kv.apply(KvOp::Cas {
            key: b("k"),
            expected: Some(b("v1")),
            new: b("v2"),
        }),
        KvReply::Cas {
            applied: true,
            current: Some(b("v2"))
        }
    );
    // Expected present, key absent.
    assert_eq!(
        kv.apply(KvOp::Cas {
            key: b("other"),
            expected: Some(b("v1")),
            new: b("x"),
        }),
        KvReply::Cas {
            applied: false,
            current: None
        }
    );
    assert_eq!(kv.get(b"k"), Some(&b("v2")));
    assert_eq!(kv.get(b"other"), None);
}

#[test]
fn incr_semantics() {
    let mut kv = KvService::new();
    let incr = |key: &str, delta| KvOp::Incr { key: b(key), delta };
    assert_eq!(kv.apply(incr("c", 5)), KvReply::Incr { value: 5 });
    assert_eq!(kv.apply(incr("c", -7)), KvReply::Incr { value: -2 });
    assert_eq!(kv.get(b"c").unwrap()[..], (-2i64).to_le_bytes());
    // A value put as 8 LE bytes is a counter.
    kv.apply(KvOp::Put {
        key: b("d"),
        value: Bytes::copy_from_slice(&100i64.to_le_bytes()),
    });
    assert_eq!(kv.apply(incr("d", 1)), KvReply::Incr { value: 101 });
    // Not a counter: error, state unchanged.
    kv.apply(put("s", "hello"));
    assert!(matches!(kv.apply(incr("s", 1)), KvReply::Error { .. }));
    assert_eq!(kv.get(b"s"), Some(&b("hello")));
    // Overflow: error, state unchanged.
    assert_eq!(
        kv.apply(incr("m", i64::MAX)),
        KvReply::Incr { value: i64::MAX }
    );
    assert!(matches!(kv.apply(incr("m", 1)), KvReply::Error { .. }));
    assert_eq!(kv.get(b"m").unwrap()[..], i64::MAX.to_le_bytes());
}

#[test]
fn scan_prefix_limit_and_order() {
    let mut kv = KvService::new();
    for key in [
        "b", "user/3", "user/1", "user/2", "user", "usez", "a", "user/10",
    ] {
        kv.apply(put(key, &format!("v-{key}")));
    }
    let scan = |kv: &KvService, prefix: &str, limit| {
        kv.query(&KvOp::Scan {
            prefix: b(prefix),
            limit,
        })
    };
    let pairs = |keys: &[&str]| KvReply::Scan {
        pairs: keys.iter().map(|k| (b(k), b(&format!("v-{k}")))).collect(),
    };
    assert_eq!(
        scan(&kv, "user/", 10),
        pairs(&["user/1", "user/10", "user/2", "user/3"])
    );
    assert_eq!(scan(&kv, "user/", 2), pairs(&["user/1", "user/10"]));
    assert_eq!(
        scan(&kv, "user", 100),
        pairs(&["user", "user/1", "user/10", "user/2", "user/3"])
    );
    assert_eq!(scan(&kv, "user/", 0), pairs(&[]));
    assert_eq!(scan(&kv, "zzz", 10), pairs(&[]));
    assert_eq!(
        scan(&kv, "", 100),
        pairs(&[
            "a", "b", "user", "user/1", "user/10", "user/2", "user/3", "usez"
        ])
    );
    // Ordered scan gives the same.
    assert_eq!(
        kv.apply(KvOp::Scan {
            prefix: b("user/"),
            limit: 1
        }),
        pairs(&["user/1"])
    );
}

#[test]
fn scan_limit_is_capped() {
    let mut kv = KvService::new();
    for i in 0..(SCAN_LIMIT_MAX + 50) {
        kv.apply(put(&format!("k{i:05}"), "v"));
    }
    match kv.query(&KvOp::Scan {
        prefix: Bytes::new(),
        limit: u32::MAX,
    }) {
        KvReply::Scan { pairs } => {
            assert_eq!(pairs.len(), SCAN_LIMIT_MAX as usize);
            assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0));
            assert_eq!(pairs[0].0, b("k00000"));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn service_interface() {
    let mut kv = KvService::default();
    let reply = kv.execute_ordered(&put("a", "1").encode(), &ctx());
    assert_eq!(
        KvReply::decode(&reply).unwrap(),
        KvReply::Put { previous: None }
    );
    // Garbage request: error reply, no state change.
    let digest = kv.state_digest();
    let reply = kv.execute_ordered(&Bytes::from_static(&[0xee, 1, 2]), &ctx());
    assert!(matches!(
        KvReply::decode(&reply).unwrap(),
        KvReply::Error { .. }
    ));
    assert_eq!(kv.state_digest(), digest);
    // Unordered reads work; unordered writes are refused.
    let reply = kv.execute_unordered(&get("a").encode(), &ctx());
    assert_eq!(
        KvReply::decode(&reply).unwrap(),
        KvReply::Get {
            value: Some(b("1"))
        }
    );
    for op in [
        put("a", "2"),
        KvOp::Delete { key: b("a") },
        KvOp::Incr {
            key: b("n"),
            delta: 1,
        },
        KvOp::Cas {
            key: b("a"),
            expected: Some(b("1")),
            new: b("3"),
        },
    ] {
        assert!(!op.is_read_only());
        let reply = kv.execute_unordered(&op.encode(), &ctx());
        assert_eq!(
            KvReply::decode(&reply).unwrap(),
            err_reply("write operations must be ordered")
        );
    }
    assert_eq!(kv.state_digest(), digest);
    let reply = kv.execute_unordered(&Bytes::new(), &ctx());
    assert!(matches!(
        KvReply::decode(&reply).unwrap(),
        KvReply::Error { .. }
    ));
}

#[test]
fn digest_and_snapshot() {
    let mut a = KvService::new();
    let mut c = KvService::new();
    assert_eq!(a.state_digest(), c.state_digest());
    // Insertion order does not matter; content does.
    a.apply(put("x", "1"));
    a.apply(put("y", "2"));
    c.apply(put("y", "2"));
    c.apply(put("x", "1"));
    assert_eq!(a.state_digest(), c.state_digest());
    assert_eq!(a.snapshot(), c.snapshot());
    // Ambiguous concatenations differ.
    let mut d = KvService::new();
    d.apply(put("x1", ""));
    d.apply(put("y", "2"));
    assert_ne!(a.state_digest(), d.state_digest());
    assert_ne!(a.state_digest(), KvService::new().state_digest());

    // The streamed snapshot is the same bytes, across its 64 KiB buffer's flushes too.
    let mut big = a.clone();
    for i in 0..300 {
        big.apply(put(&format!("k{i:04}"), &"v".repeat(1000)));
    }
    for service in [&a, &big, &KvService::new()] {
        let mut streamed = Vec::new();
        service.write_snapshot(&mut streamed).unwrap();
        assert_eq!(streamed, service.snapshot().to_vec());
    }

    // A frozen snapshot is the state when it was taken: later writes, overwrites and
    // deletes of the live map do not reach it.
    let before = big.snapshot();
    let frozen = big.freeze().expect("the key-value store freezes");
    big.apply(put("k0000", "changed"));
    big.apply(put("new", "n"));
    big.apply(KvOp::Delete {
        key: Bytes::from_static(b"k0001"),
    });
    assert_ne!(big.snapshot(), before);
    assert_eq!(frozen(), before);

    let mut e = KvService::new();
    e.apply(put("junk", "j"));
    e.install_snapshot(&a.snapshot()).unwrap();
    assert_eq!(e, a);
    assert_eq!(e.state_digest(), a.state_digest());

    // Garbage and truncation give typed errors and keep the state.
    let snap = a.snapshot();
    for cut in 0..snap.len() {
        assert!(e.install_snapshot(&snap.slice(..cut)).is_err(), "cut {cut}");
    }
    let mut trailing = snap.to_vec();
    trailing.push(0);
    assert!(e.install_snapshot(&Bytes::from(trailing)).is_err());
    let mut bad_version = snap.to_vec();
    bad_version[4] = 9;
    assert!(e.install_snapshot(&Bytes::from(bad_version)).is_err());
    // Duplicated / unordered keys are rejected.
    let mut unordered = snap[..5].to_vec();
    unordered.extend_from_slice(&2u64.to_le_bytes());
    for key in ["b", "a"] {
        unordered.extend_from_slice(&1u32.to_le_bytes());
        unordered.extend_from_slice(key.as_bytes());
        unordered.extend_from_slice(&0u32.to_le_bytes());
    }
    assert!(e.install_snapshot(&Bytes::from(unordered)).is_err());
    // A huge claimed entry count is rejected without allocating.
    let mut huge = snap[..5].to_vec();
    huge.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(e.install_snapshot(&Bytes::from(huge)).is_err());
    assert_eq!(e, a);
    // The empty state round-trips.
    e.install_snapshot(&KvService::new().snapshot()).unwrap();
    assert!(e.is_empty());
}

fn all_ops() -> Vec<KvOp> {
    vec![
        put("key", "value"),
        put("", ""),
        get("key"),
        get(""),
        KvOp::Delete { key: b("gone") },
        KvOp::Cas {
            key: b("k"),
            expected: None,
            new: b("n"),
        },
        KvOp::Cas {
            key: b("k"),
            expected: Some(b("old")),
            new: b(""),
        },
        KvOp::Incr {
            key: b("ctr"),
            delta: -42,
        },
        KvOp::Incr {
            key: b("ctr"),
            delta: i64::MIN,
        },
        KvOp::Scan {
            prefix: b("pre"),
            limit: 7,
        },
        KvOp::Scan {
            prefix: Bytes::new(),
            limit: u32::MAX,
        },
        KvOp::Redis(crate::redis::Bundle::default()),
        KvOp::Redis(crate::redis::Bundle {
            entries: vec![
                crate::redis::Entry::Command(vec![b("SET"), b("k"), b("")]),
                crate::redis::Entry::Watch(vec![b("k")]),
                crate::redis::Entry::Exec {
                    watched: vec![(b("k"), [7; 16])],
                    commands: vec![vec![b("INCR"), b("n")], vec![]],
                },
            ],
        }),
    ]
}

fn all_replies() -> Vec<KvReply> {
    vec![
        KvReply::Put { previous: None },
        KvReply::Put {
            previous: Some(b("p")),
        },
        KvReply::Get { value: None },
        KvReply::Get { value: Some(b("")) },
        KvReply::Delete {
            previous: Some(b("d")),
        },
        KvReply::Delete { previous: None },
        KvReply::Cas {
            applied: true,
            current: Some(b("c")),
        },
        KvReply::Cas {
            applied: false,
            current: None,
        },
        KvReply::Incr { value: i64::MIN },
        KvReply::Incr { value: 7 },
        KvReply::Scan { pairs: vec![] },
        KvReply::Scan {
            pairs: vec![(b("a"), b("1")), (b("b"), b("")), (b(""), b("3"))],
        },
        err_reply("boom ✓"),
        err_reply(""),
        KvReply::Redis { replies: vec![] },
        KvReply::Redis {
            replies: vec![b("+OK\r\n"), b("")],
        },
    ]
}

#[test]
fn codec_round_trips() {
    for op in all_ops() {
        let enc = op.encode();
        assert_eq!(KvOp::decode(&enc).unwrap(), op);
    }
    for reply in all_replies() {
        let enc = reply.encode();
        assert_eq!(KvReply::decode(&enc).unwrap(), reply);
    }
}

#[test]
fn codec_layout() {
    assert_eq!(&get("ab").encode()[..], &[2, 2, 0, 0, 0, b'a', b'b'][..]);
    let cas = KvOp::Cas {
        key: b("k"),
        expected: None,
        new: b("n"),
    };
    assert_eq!(
        &cas.encode()[..],
        &[4, 1, 0, 0, 0, b'k', 0, 1, 0, 0, 0, b'n'][..]
    );
    let mut incr = vec![5, 0, 0, 0, 0];
    incr.extend_from_slice(&(-1i64).to_le_bytes());
    assert_eq!(
        &KvOp::Incr {
            key: Bytes::new(),
            delta: -1
        }
        .encode()[..],
        &incr[..]
    );
}

#[test]
fn codec_rejects_truncation_trailing_and_unknown_tags() {
    for op in all_ops() {
        let enc = op.encode();
        for cut in 0..enc.len() {
            assert!(KvOp::decode(&enc.slice(..cut)).is_err(), "{op:?} cut {cut}");
            // Decoding a prefix as the other type must not panic either.
            let _ = KvReply::decode(&enc.slice(..cut));
        }
        let mut trailing = enc.to_vec();
        trailing.push(0);
        assert_eq!(
            KvOp::decode(&Bytes::from(trailing)),
            Err(KvCodecError::Malformed("trailing bytes"))
        );
    }
    for reply in all_replies() {
        let enc = reply.encode();
        for cut in 0..enc.len() {
            assert!(
                KvReply::decode(&enc.slice(..cut)).is_err(),
                "{reply:?} cut {cut}"
            );
            let _ = KvOp::decode(&enc.slice(..cut));
        }
        let mut trailing = enc.to_vec();
        trailing.push(0);
        assert!(KvReply::decode(&Bytes::from(trailing)).is_err());
    }
    for tag in [0u8, 8, 0xff] {
        assert_eq!(
            KvOp::decode(&Bytes::from(vec![tag, 0, 0, 0, 0])),
            Err(KvCodecError::Malformed("unknown op tag"))
        );
    }
    for tag in [0u8, 9, 0xff] {
        assert!(KvReply::decode(&Bytes::from(vec![tag, 0, 0, 0, 0])).is_err());
    }
    // Huge claimed lengths/counts are rejected without allocating.
    assert!(KvOp::decode(&Bytes::from_static(&[2, 0xff, 0xff, 0xff, 0xff, 1])).is_err());
    assert!(KvReply::decode(&Bytes::from_static(&[6, 0xff, 0xff, 0xff, 0xff, 1])).is_err());
    // Invalid option / bool bytes and non-UTF-8 messages.
    assert!(KvReply::decode(&Bytes::from_static(&[2, 2])).is_err());
    assert!(KvReply::decode(&Bytes::from_static(&[4, 2, 0])).is_err());
    assert!(KvReply::decode(&Bytes::from_static(&[7, 1, 0, 0, 0, 0xff])).is_err());
}

#[test]
fn codec_never_panics_on_noise() {
    let mut state = 7u64;
    for len in 0..200usize {
        let bytes: Vec<u8> = (0..len)
            .map(|i| {
                state = tagma_exec::request_seed(state, i);
                // Bias towards valid tags and small lengths.
                if i == 0 {
                    (state % 9) as u8
                } else if state.is_multiple_of(3) {
                    0
                } else {
                    state as u8
                }
            })
            .collect();
        let bytes = Bytes::from(bytes);
        let _ = KvOp::decode(&bytes);
        let _ = KvReply::decode(&bytes);
        let mut kv = KvService::new();
        let _ = kv.execute_ordered(&bytes, &ctx());
        let _ = kv.install_snapshot(&bytes);
    }
}

/// A mixed workload over a small key set: every op kind, conflicting CASes, incr on
/// non-counters, and a few undecodable requests.
fn mixed_workload(n: usize) -> Vec<Bytes> {
    let mut state = 0x00C0_FFEE_u64;
    let mut next = || {
        state = tagma_exec::request_seed(state, 0);
        state
    };
    let keys = ["a", "b", "c", "ctr1", "ctr2", "user/1", "user/2", "user/10"];
    (0..n)
        .map(|i| {
            let r = next();
            let key = b(keys[(r >> 8) as usize % keys.len()]);
            let value = Bytes::from(format!("v{}", (r >> 16) % 5));
            match r % 16 {
                0..=3 => KvOp::Put { key, value }.encode(),
                4..=5 => KvOp::Incr {
                    key,
                    delta: ((r >> 24) % 21) as i64 - 10,
                }
                .encode(),
                6..=7 => KvOp::Cas {
                    key,
                    expected: if (r >> 40).is_multiple_of(3) {
                        None
                    } else {
                        Some(Bytes::from(format!("v{}", (r >> 32) % 5)))
                    },
                    new: value,
                }
                .encode(),
                8 => KvOp::Delete { key }.encode(),
                9..=11 => KvOp::Get { key }.encode(),
                12..=13 => KvOp::Scan {
                    prefix: Bytes::copy_from_slice(&key[..(r >> 48) as usize % 2]),
                    limit: ((r >> 32) % 6) as u32,
                }
                .encode(),
                14 => KvOp::Scan {
                    prefix: b("user/"),
                    limit: 100,
                }
                .encode(),
                _ => {
                    if i.is_multiple_of(2) {
                        Bytes::from(vec![0xee, (r >> 8) as u8])
                    } else {
                        KvOp::Incr {
                            key: b("a"),
                            delta: 1,
                        }
                        .encode()
                    }
                }
            }
        })
        .collect()
}

#[test]
fn conformance_suite() {
    let workload = mixed_workload(400);
    check_service(KvService::new, &workload).unwrap();
    // The workload actually exercises the state.
    let mut kv = KvService::new();
    let mut errors = 0;
    let mut applied_cas = 0;
    for req in &workload {
        match KvReply::decode(&kv.execute_ordered(req, &ctx())).unwrap() {
            KvReply::Error { .. } => errors += 1,
            KvReply::Cas { applied: true, .. } => applied_cas += 1,
            _ => {}
        }
    }
    assert!(!kv.is_empty());
    assert!(errors > 0);
    assert!(applied_cas > 0);
}
