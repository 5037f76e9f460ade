//! Protected spaces: sealed tuples are stored, returned, snapshotted and digested with their
//! tuples; what breaks a space's protection is refused; `share` is answered only unordered,
//! with this replica's own share, only to readers the policy admits; a taken tuple's sealed
//! part stays for its taker until the keep time ends, within the buffer's bounds.

mod common;

use bytes::Bytes;
use common::*;
use tagma_crypto::IdentityKey;
use tagma_crypto::sealing::{ShareReader, combine, seal};
use tagma_exec::Service;
use tagma_exec::conformance::check_service;
use tagma_space::protection::{COMPARABLE_HASH_LEN, sealed_aad, share_context};
use tagma_space::{
    Field, Policy, ProtectionError, SpaceError, SpaceReply, SpaceRequest, TypedTuple,
};
use tagma_space_service::{SpaceLimits, SpaceService};
use tagma_wire::PublicKey;

const PROTECTION: &str = "public,comparable,private";

fn replica_key(i: usize) -> IdentityKey {
    IdentityKey::from_seed([i as u8 + 1; 32])
}

fn replicas() -> Vec<PublicKey> {
    (0..4).map(|i| replica_key(i).public()).collect()
}

/// A harness whose service answers `share` as replica `index` of four.
fn replica(index: usize, limits: SpaceLimits) -> Harness {
    let mut h = Harness::with(limits, 1);
    h.service = std::mem::take(&mut h.service).with_replica_key(replica_key(index), replicas());
    h
}

fn create_protected(space: &str, policy: &str) -> SpaceRequest {
    SpaceRequest::Create {
        space: space.into(),
        policy: policy.parse().unwrap_or_else(|_| Policy::default()),
        protection: Some(PROTECTION.parse().unwrap()),
    }
}

/// What a writer stores for `("job", <hash>, 0x)` and the sealed original with `secret`.
fn sealed_tuple(space: &str, secret: &str) -> (TypedTuple, Bytes) {
    let stored = TypedTuple(vec![
        Field::Str("job".into()),
        Field::Bytes(Bytes::from(vec![0xab; COMPARABLE_HASH_LEN])),
        Field::Bytes(Bytes::new()),
    ]);
    let original = TypedTuple(vec![
        Field::Str("job".into()),
        Field::Str("build".into()),
        Field::Str(secret.into()),
    ]);
    let sealed = seal(
        &original.encode(),
        &sealed_aad(space, &stored),
        &replicas(),
        2,
    )
    .unwrap();
    (stored, Bytes::from(sealed.encode()))
}

fn out_sealed(space: &str, tuple: &TypedTuple, sealed: Option<Bytes>) -> SpaceRequest {
    SpaceRequest::Out {
        space: space.into(),
        tuple: tuple.clone(),
        lease_ms: None,
        sealed,
    }
}

fn share(space: &str, revision: u64, reader: &ShareReader) -> SpaceRequest {
    SpaceRequest::Share {
        space: space.into(),
        revision,
        reader: reader.public(),
    }
}

fn protection_error(reply: &SpaceReply) -> &ProtectionError {
    match reply {
        SpaceReply::Error(SpaceError::Protection(e)) => e,
        other => panic!("expected a protection error, got {other:?}"),
    }
}

#[test]
fn sealed_tuples_are_stored_returned_snapshotted_and_digested() {
    let mut h = replica(0, SpaceLimits::default());
    assert_eq!(h.now(1, create_protected("vault", "")), SpaceReply::Created);
    let (stored, sealed) = sealed_tuple("vault", "hunter2");
    h.now(1, out_sealed("vault", &stored, Some(sealed.clone())));
    let got = h.now(1, rdp("vault", "(\"job\", *, *)"));
    assert_eq!(found(&got).tuple, stored);
    assert_eq!(found(&got).sealed.as_ref(), Some(&sealed));
    let SpaceReply::Spaces(spaces) = h.now(1, list()) else {
        panic!("a list")
    };
    assert_eq!(spaces[0].protection, Some(PROTECTION.parse().unwrap()));

    // A restored service holds the same sealed part and the same digest.
    let restored = h.fork(1);
    assert_eq!(
        restored.service.state_digest(),
        h.service.state_digest(),
        "same state"
    );
    let again = restored.unordered(1, &rdp("vault", "(*, *, *)"), h.now_ms);
    assert_eq!(found(&again).sealed.as_ref(), Some(&sealed));
    // The sealed part is in the digest: another seal of the same tuple differs.
    let mut other = replica(0, SpaceLimits::default());
    other.now(1, create_protected("vault", ""));
    let (_, resealed) = sealed_tuple("vault", "hunter2");
    other.now(1, out_sealed("vault", &stored, Some(resealed)));
    assert_ne!(other.service.state_digest(), h.service.state_digest());
    // Neither the snapshot nor the stored tuple holds the private plaintext.
    let snapshot = h.service.snapshot();
    assert!(
        !snapshot.windows(7).any(|w| w == b"hunter2"),
        "the private field is only sealed"
    );
}

#[test]
fn what_breaks_a_spaces_protection_is_refused_and_changes_nothing() {
    let mut h = replica(0, SpaceLimits::default());
    h.now(1, create_protected("vault", ""));
    h.now(1, create("plain"));
    let (stored, sealed) = sealed_tuple("vault", "s");
    let before = h.service.state_digest();
    let r = h.now(1, out_sealed("vault", &stored, None));
    assert_eq!(protection_error(&r), &ProtectionError::SealedMissing);
    let mut plain = stored.clone();
    plain.0[2] = Field::Str("secret".into());
    let r = h.now(1, out_sealed("vault", &plain, Some(sealed.clone())));
    assert_eq!(
        protection_error(&r),
        &ProtectionError::NotPlaceholder { index: 2 }
    );
    let r = h.now(
        1,
        out_sealed("vault", &stored, Some(Bytes::from_static(b"junk"))),
    );
    assert!(matches!(
        protection_error(&r),
        ProtectionError::SealedMalformed(_)
    ));
    let r = h.now(1, out_sealed("plain", &stored, Some(sealed.clone())));
    assert_eq!(protection_error(&r), &ProtectionError::SealedUnexpected);
    for request in [
        rdp("vault", "(\"job\", *, \"secret\")"),
        inp("vault", "(\"job\", *str, *)"),
        rd("vault", "(*, *, *int)", 1_000),
        renew("vault", "(\"job\", *)", 1_000),
    ] {
        let r = h.now(1, request.clone());
        assert!(
            matches!(
                protection_error(&r),
                ProtectionError::TemplatePattern { .. } | ProtectionError::Arity { .. }
            ),
            "{request:?}: {r:?}"
        );
    }
    let r = h.now(
        1,
        create_protected("ruled", "read requires field 2 = invoker"),
    );
    assert_eq!(
        protection_error(&r),
        &ProtectionError::PolicyField { field: 2 }
    );
    assert_eq!(h.service.state_digest(), before, "nothing changed");
}

#[test]
fn share_is_answered_only_unordered_and_f_plus_one_shares_open_the_tuple() {
    let mut replicas_h: Vec<Harness> = (0..4).map(|i| replica(i, SpaceLimits::default())).collect();
    let (stored, sealed) = sealed_tuple("vault", "hunter2");
    for h in &mut replicas_h {
        h.now(1, create_protected("vault", ""));
        h.now(1, out_sealed("vault", &stored, Some(sealed.clone())));
        assert!(h.service.share_index().is_some());
    }
    let reader = ShareReader::new();
    let request = share("vault", 1, &reader);
    // Ordered, it is refused alike everywhere: each replica's share differs.
    let ordered = replicas_h[0].now(1, request.clone());
    assert_eq!(protection_error(&ordered), &ProtectionError::ShareOrdered);
    let context = share_context("vault", 1);
    let mut shares = Vec::new();
    for (i, h) in replicas_h.iter().enumerate() {
        let before = h.service.state_digest();
        let SpaceReply::Share(reply) = h.unordered(1, &request, h.now_ms) else {
            panic!("replica {i} answers its share")
        };
        assert_eq!(
            h.service.state_digest(),
            before,
            "unordered reads change nothing"
        );
        let share = reader
            .open_reply(i, &replica_key(i).public(), &reply, &context)
            .unwrap();
        assert_eq!(share.index(), i);
        shares.push((i, share));
    }
    let secret = tagma_crypto::sealing::SealedSecret::decode(&sealed, usize::MAX).unwrap();
    let opened = combine(&secret, &sealed_aad("vault", &stored), &shares[2..]).unwrap();
    let original: TypedTuple = "(\"job\", \"build\", \"hunter2\")".parse().unwrap();
    assert_eq!(opened.plaintext, original.encode().to_vec());

    // Another reader cannot read a reply meant for this one.
    let other = ShareReader::new();
    let SpaceReply::Share(reply) = replicas_h[1].unordered(1, &request, 1_000) else {
        panic!("a share")
    };
    assert!(
        other
            .open_reply(1, &replica_key(1).public(), &reply, &context)
            .is_err()
    );
    // An unknown revision, and a replica without its key.
    let r = replicas_h[0].unordered(1, &share("vault", 9, &reader), 1_000);
    assert_eq!(
        protection_error(&r),
        &ProtectionError::NoSealedTuple { revision: 9 }
    );
    let mut keyless = Harness::new();
    keyless.now(1, create_protected("vault", ""));
    keyless.now(1, out_sealed("vault", &stored, Some(sealed)));
    let r = keyless.unordered(1, &request, 1_000);
    assert_eq!(protection_error(&r), &ProtectionError::NoReplicaKey);
}

#[test]
fn share_is_given_only_to_readers_the_policy_admits() {
    let mut h = replica(2, SpaceLimits::default());
    h.now(1, create_protected("closed", "read: 1"));
    h.now(
        1,
        create_protected("own", "read requires field 0 = invoker"),
    );
    let (stored, sealed) = sealed_tuple("closed", "s");
    h.now(1, out_sealed("closed", &stored, Some(sealed)));
    let reader = ShareReader::new();
    assert!(matches!(
        h.unordered(1, &share("closed", 1, &reader), 1_000),
        SpaceReply::Share(_)
    ));
    assert!(matches!(
        h.unordered(2, &share("closed", 1, &reader), 1_000),
        SpaceReply::Denied(_)
    ));
    // Field 0 names principal 7: only principal 7 sees it; to others it is absent.
    let mut mine = stored.clone();
    mine.0[0] = Field::Int(7);
    let sealed = seal(b"x", &sealed_aad("own", &mine), &replicas(), 2).unwrap();
    let r = h.now(
        7,
        out_sealed("own", &mine, Some(Bytes::from(sealed.encode()))),
    );
    let SpaceReply::Inserted(receipt) = r else {
        panic!("inserted: {r:?}")
    };
    let request = share("own", receipt.revision, &reader);
    assert!(matches!(
        h.unordered(7, &request, 1_000),
        SpaceReply::Share(_)
    ));
    assert_eq!(
        protection_error(&h.unordered(8, &request, 1_000)),
        &ProtectionError::NoSealedTuple {
            revision: receipt.revision
        }
    );
}

#[test]
fn a_taken_sealed_tuple_stays_for_its_taker_until_the_keep_time_ends() {
    let limits = SpaceLimits {
        taken_keep_ms: 5_000,
        ..SpaceLimits::default()
    };
    let mut h = replica(1, limits);
    h.now(1, create_protected("vault", ""));
    let (stored, sealed) = sealed_tuple("vault", "s");
    h.now(1, out_sealed("vault", &stored, Some(sealed.clone())));
    // Taken by principal 3 (at 1000): its share is for principal 3 only.
    let taken = h.now(3, inp("vault", "(*, *, *)"));
    assert_eq!(found(&taken).sealed.as_ref(), Some(&sealed));
    assert!(h.now(1, rdp("vault", "(*, *, *)")) == SpaceReply::Tuple(None));
    let reader = ShareReader::new();
    let request = share("vault", 1, &reader);
    assert!(matches!(
        h.unordered(3, &request, 2_000),
        SpaceReply::Share(_)
    ));
    let denied = h.unordered(1, &request, 2_000);
    assert!(
        matches!(&denied, SpaceReply::Denied(reason) if reason.contains("principal 3")),
        "{denied:?}"
    );

    // A blocked `in` that takes a tuple as it is inserted gets the same.
    assert_eq!(h.call(4, in_("vault", "(*, *, *)", 10_000)), None);
    h.now(1, out_sealed("vault", &stored, Some(sealed)));
    let late = h.late();
    assert_eq!(late.len(), 1);
    let waited = share("vault", 2, &reader);
    assert!(matches!(
        h.unordered(4, &waited, 2_000),
        SpaceReply::Share(_)
    ));

    // The buffer is part of the state: a restored replica answers alike.
    let mut restored = h.fork(1);
    restored.service =
        std::mem::take(&mut restored.service).with_replica_key(replica_key(1), replicas());
    assert_eq!(restored.service.state_digest(), h.service.state_digest());
    assert!(matches!(
        restored.unordered(3, &request, 2_000),
        SpaceReply::Share(_)
    ));

    // At the end of the keep time (agreed time 6000) the sealed part is gone.
    h.time_passes_to(6_000);
    assert_eq!(
        protection_error(&h.unordered(3, &request, 6_000)),
        &ProtectionError::NoSealedTuple { revision: 1 }
    );
    assert_ne!(restored.service.state_digest(), h.service.state_digest());
    restored.time_passes_to(6_000);
    assert_eq!(restored.service.state_digest(), h.service.state_digest());
}

#[test]
fn the_taken_buffer_keeps_at_most_its_limit_dropping_what_ends_first() {
    let limits = SpaceLimits {
        taken_per_space_max: 2,
        ..SpaceLimits::default()
    };
    let mut h = replica(0, limits);
    h.now(1, create_protected("vault", ""));
    for _ in 0..3 {
        let (stored, sealed) = sealed_tuple("vault", "s");
        h.now(1, out_sealed("vault", &stored, Some(sealed)));
    }
    let taken = h.now(1, in_all("vault", "(*, *, *)", 10));
    let SpaceReply::Tuples(taken) = taken else {
        panic!("tuples")
    };
    assert_eq!(taken.len(), 3);
    let reader = ShareReader::new();
    let answers: Vec<bool> = (1..=3)
        .map(|revision| {
            matches!(
                h.unordered(1, &share("vault", revision, &reader), h.now_ms),
                SpaceReply::Share(_)
            )
        })
        .collect();
    // Taken at the same time, the lowest revision ends first and is dropped.
    assert_eq!(answers, [false, true, true]);
}

/// A workload on protected spaces: sealed inserts, takes into the taken buffer (whose keep
/// time runs out during it), reads, waits, and `share` sent ordered.
fn protected_workload() -> Vec<Bytes> {
    let mut w: Vec<SpaceRequest> = vec![create_protected("v", ""), create("p")];
    for i in 0..8u8 {
        let (stored, sealed) = sealed_tuple("v", &format!("secret {i}"));
        w.push(out_sealed("v", &stored, Some(sealed.clone())));
        w.push(out_sealed("p", &stored, Some(sealed)));
        w.push(in_("v", "(\"job\", *, *)", 10 + u64::from(i)));
        w.push(inp("v", "(*, *, *)"));
        w.push(rdp("v", "(\"job\", *, *bytes)"));
        w.push(SpaceRequest::Share {
            space: "v".into(),
            revision: u64::from(i),
            reader: ShareReader::new().public(),
        });
        if i % 3 == 0 {
            w.push(in_all("v", "(*, *, *)", 3));
            w.push(list());
        }
    }
    w.iter().map(SpaceRequest::encode).collect()
}

#[test]
fn protected_spaces_pass_the_conformance_suite_and_damaged_snapshots_never_panic() {
    let limits = SpaceLimits {
        taken_keep_ms: 20,
        taken_per_space_max: 3,
        ..SpaceLimits::default()
    };
    let workload = protected_workload();
    check_service(|| SpaceService::new(limits).unwrap(), &workload).unwrap();
    check_service(
        || {
            SpaceService::new(limits)
                .unwrap()
                .with_threads(2)
                .unwrap()
                .with_parallel_min(1)
                .with_replica_key(replica_key(0), replicas())
        },
        &workload,
    )
    .unwrap();

    let mut h = replica(0, limits);
    h.now(1, create_protected("v", ""));
    for _ in 0..3 {
        let (stored, sealed) = sealed_tuple("v", "s");
        h.now(1, out_sealed("v", &stored, Some(sealed)));
    }
    h.now(2, inp("v", "(*, *, *)"));
    let valid = h.service.snapshot();
    for cut in 0..valid.len() {
        assert!(
            SpaceService::new(limits)
                .unwrap()
                .install_snapshot(&valid.slice(..cut))
                .is_err(),
            "cut at {cut}"
        );
    }
    for at in (0..valid.len()).step_by(3) {
        let mut damaged = valid.to_vec();
        damaged[at] ^= 0x5a;
        let damaged = Bytes::from(damaged);
        let mut other = SpaceService::new(limits).unwrap();
        if other.install_snapshot(&damaged).is_ok() {
            assert_eq!(other.snapshot(), damaged, "byte {at}");
        }
    }
}

#[test]
fn sealed_parts_count_against_the_space_budget_and_the_tuple_limit() {
    let (stored, sealed) = sealed_tuple("vault", "s");
    let combined = stored.encoded_len() + sealed.len();
    let limits = SpaceLimits {
        typed: tagma_space::Limits {
            tuple_bytes_max: combined + 10,
            ..tagma_space::Limits::default()
        },
        space_bytes_max: combined + 10 + 64,
        reply_bytes_max: 4_096,
        ..SpaceLimits::default()
    };
    let mut h = replica(0, limits);
    h.now(1, create_protected("vault", ""));
    assert!(matches!(
        h.now(1, out_sealed("vault", &stored, Some(sealed.clone()))),
        SpaceReply::Inserted(_)
    ));
    // The stored tuples alone would fit many times over; with their sealed parts, one does.
    assert!(3 * (stored.encoded_len() + 64) < limits.space_bytes_max);
    assert!(matches!(
        h.now(1, out_sealed("vault", &stored, Some(sealed))),
        SpaceReply::Error(SpaceError::SpaceTooLarge { .. })
    ));
    // A sealed part that passes the tuple limit with its tuple is refused.
    let tight = SpaceLimits {
        typed: tagma_space::Limits {
            tuple_bytes_max: combined - 1,
            ..tagma_space::Limits::default()
        },
        space_bytes_max: 1 << 20,
        ..SpaceLimits::default()
    };
    let mut h = replica(0, tight);
    h.now(1, create_protected("vault", ""));
    let (stored, sealed) = sealed_tuple("vault", "s");
    let r = h.now(1, out_sealed("vault", &stored, Some(sealed)));
    assert_eq!(
        protection_error(&r),
        &ProtectionError::SealedTooLarge {
            len: combined as u64,
            max: combined as u64 - 1
        }
    );
}
