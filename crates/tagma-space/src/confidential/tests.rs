//! The client-side transformation and the reading path, with the replicas' side of `share`
//! done in place (open the replica's share, reseal it to the reader): keyed, position-bound
//! hashes; placeholders; template rules; a tuple opened from f+1 shares; wrong shares named
//! and outvoted; a faulty writer detected.

use bytes::Bytes;
use tagma_crypto::IdentityKey;
use tagma_crypto::sealing::{SealedSecret, ShareReader, seal};
use tagma_wire::ReplicaId;

use super::*;
use crate::protection::{COMPARABLE_HASH_LEN, ProtectionError, sealed_aad, share_context};
use crate::typed::{Field, Pattern, TypedTemplate, TypedTuple};
use crate::{SpaceReply, Stored};

fn replica_key(i: usize) -> IdentityKey {
    IdentityKey::from_seed([i as u8 + 40; 32])
}

/// Four replicas, f = 1.
fn group() -> SealingGroup {
    SealingGroup::new(
        (0..4)
            .map(|i| (ReplicaId(i as u32), replica_key(i).public()))
            .collect(),
        2,
    )
    .unwrap()
}

fn key() -> SpaceKey {
    SpaceKey::new([7; 32])
}

fn vault() -> Confidential {
    Confidential::new(
        "vault",
        "public,comparable,private".parse().unwrap(),
        &key(),
        group(),
    )
}

fn secret_tuple() -> TypedTuple {
    "(\"db\", \"alice\", \"hunter2\")".parse().unwrap()
}

/// What a read returns for `tuple` inserted through `c`, at revision 5.
fn stored_of(c: &Confidential, tuple: &TypedTuple) -> Stored {
    let (stored, sealed) = c.protect(tuple).unwrap();
    Stored {
        tuple: stored,
        revision: 5,
        lease_expires_ms: None,
        sealed,
    }
}

/// Replica `i`'s answer to `share` for `reader`, as the service gives it.
fn answer(c: &Confidential, stored: &Stored, i: usize, reader: &ShareReader) -> Bytes {
    let sealed = SealedSecret::decode(stored.sealed.as_ref().unwrap(), usize::MAX).unwrap();
    let key = replica_key(i);
    let share = key.open_share(&sealed, i).unwrap();
    let reply = key
        .reseal_share(
            &share,
            &reader.public(),
            &share_context(c.space(), stored.revision),
        )
        .unwrap();
    SpaceReply::Share(reply).encode()
}

fn answers(
    c: &Confidential,
    stored: &Stored,
    reader: &ShareReader,
    replicas: &[usize],
) -> Vec<(ReplicaId, Bytes)> {
    replicas
        .iter()
        .map(|&i| (ReplicaId(i as u32), answer(c, stored, i, reader)))
        .collect()
}

#[test]
fn comparable_hashes_are_keyed_position_bound_typed_and_per_space() {
    let c = vault();
    let alice = Field::Str("alice".into());
    let h = c.comparable_hash(1, &alice);
    assert_eq!(h.len(), COMPARABLE_HASH_LEN);
    assert_eq!(h, c.comparable_hash(1, &alice), "deterministic");
    assert_ne!(h, c.comparable_hash(0, &alice), "position-bound");
    assert_ne!(
        c.comparable_hash(1, &Field::Int(5)),
        c.comparable_hash(1, &Field::Str("5".into())),
        "type-bound"
    );
    let other_key = Confidential::new(
        "vault",
        c.protection().clone(),
        &SpaceKey::new([8; 32]),
        group(),
    );
    assert_ne!(h, other_key.comparable_hash(1, &alice), "keyed");
    let other_space = Confidential::new("vault2", c.protection().clone(), &key(), group());
    assert_ne!(h, other_space.comparable_hash(1, &alice), "per space");
    // Not a plain hash of the field: without the key nobody computes it.
    let mut encoded = bytes::BytesMut::new();
    alice.encode(&mut encoded);
    assert_ne!(&h[..], tagma_crypto::digest(&encoded).as_bytes());
}

#[test]
fn protect_keeps_public_fields_hashes_comparable_ones_and_hides_private_ones() {
    let c = vault();
    let tuple = secret_tuple();
    let (stored, sealed) = c.protect(&tuple).unwrap();
    assert_eq!(stored.0[0], Field::Str("db".into()));
    assert_eq!(stored.0[1], Field::Bytes(c.comparable_hash(1, &tuple.0[1])));
    assert_eq!(stored.0[2], Field::Bytes(Bytes::new()), "the placeholder");
    let sealed = sealed.expect("the space seals");
    assert_eq!(c.protection().check_stored(&stored, Some(&sealed)), Ok(()));
    assert!(
        !sealed.windows(7).any(|w| w == b"hunter2"),
        "the sealed part is encrypted"
    );
    // Sealing is fresh every time; the stored form is not.
    let (again, resealed) = c.protect(&tuple).unwrap();
    assert_eq!(again, stored);
    assert_ne!(resealed.unwrap(), sealed);
    // A space of public fields only stores the tuple as it is, with nothing sealed.
    let public = Confidential::new("p", "public,public".parse().unwrap(), &key(), group());
    let plain: TypedTuple = "(1, 2)".parse().unwrap();
    assert_eq!(public.protect(&plain).unwrap(), (plain, None));
    // The arity is the protection's.
    assert!(matches!(
        c.protect(&"(1)".parse().unwrap()),
        Err(ConfidentialError::Protection(ProtectionError::Arity {
            arity: 1,
            protected: 3
        }))
    ));
}

#[test]
fn templates_hash_comparable_values_and_refuse_what_cannot_match() {
    let c = vault();
    let template: TypedTemplate = "(\"db\", \"alice\", *)".parse().unwrap();
    let t = c.template(&template).unwrap();
    assert_eq!(
        t.0[1],
        Pattern::Is(Field::Bytes(
            c.comparable_hash(1, &Field::Str("alice".into()))
        ))
    );
    assert_eq!(c.protection().check_template(&t), Ok(()));
    let (stored, _) = c.protect(&secret_tuple()).unwrap();
    assert!(t.matches(&stored), "the hashed template finds the tuple");
    let bob = c
        .template(&"(\"db\", \"bob\", *)".parse().unwrap())
        .unwrap();
    assert!(!bob.matches(&stored));
    for (text, index) in [
        ("(*, *str, *)", 1),
        ("(*, *, \"hunter2\")", 2),
        ("(*, *, *str)", 2),
    ] {
        assert!(
            matches!(
                c.template(&text.parse().unwrap()),
                Err(ConfidentialError::Protection(ProtectionError::TemplatePattern { index: i })) if i == index
            ),
            "{text}"
        );
    }
}

#[test]
fn f_plus_one_shares_reveal_the_original_tuple() {
    let c = vault();
    let stored = stored_of(&c, &secret_tuple());
    let reader = ShareReader::new();
    let revealed = c
        .reveal(&stored, &reader, &answers(&c, &stored, &reader, &[3, 1]))
        .unwrap();
    assert_eq!(revealed.tuple, secret_tuple());
    assert_eq!(revealed.revision, 5);
    assert!(revealed.wrong_shares.is_empty());
    // One share is not enough; the error says how many and who did not answer.
    let e = c
        .reveal(&stored, &reader, &answers(&c, &stored, &reader, &[2]))
        .unwrap_err();
    assert!(
        matches!(&e, ConfidentialError::Shares { good: 1, needed: 2, wrong, missing, .. }
            if wrong.is_empty() && missing.contains("replica 0 (no answer)")),
        "{e}"
    );
    // Another reader's answers do not open for this one.
    let other = ShareReader::new();
    let e = c
        .reveal(&stored, &reader, &answers(&c, &stored, &other, &[0, 1, 2]))
        .unwrap_err();
    assert!(
        matches!(&e, ConfidentialError::Shares { good: 0, wrong, .. } if wrong.len() == 3),
        "{e}"
    );
}

/// A Byzantine replica answers with a well-encrypted share of another secret (it passes
/// decryption, not its commitment), another with garbage: both are named, and the two good
/// shares still open the tuple. With only one good share left the read fails, naming them.
#[test]
fn wrong_shares_are_named_and_do_not_stop_a_read_with_f_plus_one_good_ones() {
    let c = vault();
    let stored = stored_of(&c, &secret_tuple());
    let reader = ShareReader::new();
    let decoy = stored_of(&c, &secret_tuple());
    let mut got = answers(&c, &stored, &reader, &[0, 3]);
    got.push((ReplicaId(1), answer(&c, &decoy, 1, &reader)));
    let mut garbled = answer(&c, &stored, 2, &reader).to_vec();
    let last = garbled.len() - 1;
    garbled[last] ^= 1;
    got.push((ReplicaId(2), Bytes::from(garbled)));
    let revealed = c.reveal(&stored, &reader, &got).unwrap();
    assert_eq!(revealed.tuple, secret_tuple());
    assert_eq!(revealed.wrong_shares, [ReplicaId(1), ReplicaId(2)]);

    got.retain(|(id, _)| *id != ReplicaId(3));
    let e = c.reveal(&stored, &reader, &got).unwrap_err();
    assert!(
        matches!(&e, ConfidentialError::Shares { good: 1, wrong, .. }
            if wrong == &[ReplicaId(1), ReplicaId(2)]),
        "{e}"
    );
    assert!(
        e.to_string().contains("wrong shares from replicas: 1, 2;"),
        "{e}"
    );
}

#[test]
fn a_sealed_tuple_that_disagrees_with_its_stored_fields_is_the_writers_fault() {
    let c = vault();
    let reader = ShareReader::new();
    // The writer stores ("db", hash(alice), 0x) but seals ("other", "alice", "x"), with the
    // right associated data: it decrypts, and does not give back the stored fields.
    let (stored_tuple, _) = c.protect(&secret_tuple()).unwrap();
    let lie: TypedTuple = "(\"other\", \"alice\", \"x\")".parse().unwrap();
    let keys: Vec<_> = group().replicas().iter().map(|(_, k)| *k).collect();
    let sealed = seal(&lie.encode(), &sealed_aad("vault", &stored_tuple), &keys, 2).unwrap();
    let stored = Stored {
        tuple: stored_tuple.clone(),
        revision: 5,
        lease_expires_ms: None,
        sealed: Some(Bytes::from(sealed.encode())),
    };
    let e = c
        .reveal(&stored, &reader, &answers(&c, &stored, &reader, &[0, 1]))
        .unwrap_err();
    assert!(
        matches!(&e, ConfidentialError::FaultyWriter { revision: 5, reason } if reason.contains("stored")),
        "{e}"
    );
    // Sealed for another stored tuple (other associated data): it does not decrypt.
    let sealed = seal(&secret_tuple().encode(), b"other aad", &keys, 2).unwrap();
    let stored = Stored {
        sealed: Some(Bytes::from(sealed.encode())),
        ..stored
    };
    let e = c
        .reveal(&stored, &reader, &answers(&c, &stored, &reader, &[0, 1]))
        .unwrap_err();
    assert!(matches!(e, ConfidentialError::FaultyWriter { .. }), "{e}");
    // Sealed with threshold 1: one replica alone could read it.
    let sealed = seal(&secret_tuple().encode(), b"", &keys, 1).unwrap();
    let stored = Stored {
        sealed: Some(Bytes::from(sealed.encode())),
        ..stored
    };
    let e = c.reveal(&stored, &reader, &[]).unwrap_err();
    assert!(
        matches!(&e, ConfidentialError::FaultyWriter { reason, .. } if reason.contains("threshold 1")),
        "{e}"
    );
    // A stored tuple of a sealing space without its sealed part.
    let bare = Stored {
        sealed: None,
        ..stored
    };
    assert!(matches!(
        c.reveal(&bare, &reader, &[]),
        Err(ConfidentialError::NotSealed { revision: 5 })
    ));
}

#[test]
fn space_keys_and_groups_are_checked() {
    assert!(SpaceKey::from_slice(&[1; 32]).is_ok());
    let e = SpaceKey::from_slice(&[1; 31]).unwrap_err();
    assert!(e.to_string().contains("keygen"), "{e}");
    assert_eq!(format!("{:?}", SpaceKey::new([9; 32])), "SpaceKey(..)");
    assert!(SealingGroup::new(Vec::new(), 1).is_err());
    assert!(SealingGroup::new(group().replicas().to_vec(), 5).is_err());
    assert!(SealingGroup::new(group().replicas().to_vec(), 0).is_err());
    let view = tagma_wire::View {
        id: tagma_wire::ViewId(0),
        f: 1,
        members: group()
            .replicas()
            .iter()
            .map(|(id, key)| tagma_wire::ViewMember {
                id: *id,
                addr: "127.0.0.1:1".into(),
                key: *key,
            })
            .collect(),
    };
    assert_eq!(SealingGroup::from_view(&view).unwrap(), group());
}
