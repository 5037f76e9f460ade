//! Tests of sealing: round trips over every quorum, faulty replicas, faulty writers, readers
//! and replicas that try to read what is not theirs, and the decoder on hostile input.

use super::*;

const AAD: &[u8] = b"space accounts | public fields (\"alice\", 7)";
const CONTEXT: &[u8] = b"read request 42 of client 9";
const PLAINTEXT: &[u8] = b"the private field: a password, a balance";
/// A decoding limit that no test encoding reaches.
const SEALED_MAX: usize = 1 << 20;

fn group(n: usize) -> Vec<IdentityKey> {
    (0..n)
        .map(|i| IdentityKey::from_seed([i as u8 + 1; 32]))
        .collect()
}

fn publics(keys: &[IdentityKey]) -> Vec<PublicKey> {
    keys.iter().map(IdentityKey::public).collect()
}

/// What an honest replica at position `index` sends `reader`, opened by the reader.
fn honest_share(
    keys: &[IdentityKey],
    sealed: &SealedSecret,
    index: usize,
    reader: &ShareReader,
) -> Share {
    let share = keys[index].open_share(sealed, index).unwrap();
    let reply = keys[index]
        .reseal_share(&share, &reader.public(), CONTEXT)
        .unwrap();
    assert_eq!(reply.len(), REPLY_LEN);
    reader
        .open_reply(index, &keys[index].public(), &reply, CONTEXT)
        .unwrap()
}

/// A share for `index` that is not the one sealed (one bit of its value flipped), as a
/// faulty replica would send it, encrypted to the reader like an honest reply.
fn wrong_share(
    keys: &[IdentityKey],
    sealed: &SealedSecret,
    index: usize,
    reader: &ShareReader,
) -> Share {
    let mut share = keys[index].open_share(sealed, index).unwrap();
    share.bytes[5] ^= 1;
    let reply = keys[index]
        .reseal_share(&share, &reader.public(), CONTEXT)
        .unwrap();
    reader
        .open_reply(index, &keys[index].public(), &reply, CONTEXT)
        .unwrap()
}

/// Every subset of `0..n` of size `k`, as position lists.
fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
    (0u32..1 << n)
        .filter(|mask| mask.count_ones() as usize == k)
        .map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).collect())
        .collect()
}

#[test]
fn every_quorum_of_threshold_replicas_opens_and_fewer_cannot() {
    for (n, t) in [(4, 2), (7, 3), (1, 1), (3, 1), (4, 4)] {
        let keys = group(n);
        let sealed = seal(PLAINTEXT, AAD, &publics(&keys), t).unwrap();
        assert_eq!((sealed.shares(), sealed.threshold()), (n, t));
        let reader = ShareReader::new();
        let all: Vec<Share> = (0..n)
            .map(|i| honest_share(&keys, &sealed, i, &reader))
            .collect();
        let quorums = subsets(n, t);
        assert!(!quorums.is_empty());
        for quorum in quorums {
            let shares: Vec<(usize, Share)> = quorum.iter().map(|&i| (i, all[i].clone())).collect();
            let opened = combine(&sealed, AAD, &shares).unwrap();
            assert_eq!(opened.plaintext, PLAINTEXT, "n={n} t={t} quorum {quorum:?}");
            assert!(opened.wrong_shares.is_empty());
        }
        for fewer in subsets(n, t - 1) {
            let shares: Vec<(usize, Share)> = fewer.iter().map(|&i| (i, all[i].clone())).collect();
            assert_eq!(
                combine(&sealed, AAD, &shares),
                Err(SealError::NotEnoughShares {
                    good: t - 1,
                    threshold: t
                })
            );
        }
    }
}

#[test]
fn empty_and_large_plaintexts_round_trip() {
    let keys = group(4);
    for plaintext in [Vec::new(), vec![0xa5; 100_000]] {
        let sealed = seal(&plaintext, AAD, &publics(&keys), 2).unwrap();
        assert_eq!(sealed.ciphertext().len(), plaintext.len() + TAG_LEN);
        let reader = ShareReader::new();
        let shares = vec![
            (3, honest_share(&keys, &sealed, 3, &reader)),
            (1, honest_share(&keys, &sealed, 1, &reader)),
        ];
        assert_eq!(combine(&sealed, AAD, &shares).unwrap().plaintext, plaintext);
    }
}

#[test]
fn each_seal_uses_a_fresh_key_and_nonce() {
    let keys = group(4);
    let a = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let b = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    assert_ne!(a.nonce(), b.nonce());
    assert_ne!(a.ephemeral(), b.ephemeral());
    assert_ne!(a.key_check(), b.key_check());
    assert_ne!(a.ciphertext(), b.ciphertext());
    assert_ne!(a.commitments(), b.commitments());
    let plaintext_in_ciphertext = a
        .ciphertext()
        .windows(PLAINTEXT.len())
        .any(|window| window == PLAINTEXT);
    assert!(!plaintext_in_ciphertext);
}

#[test]
fn a_wrong_share_is_detected_and_the_others_still_open() {
    let keys = group(4);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let reader = ShareReader::new();
    let shares = vec![
        (0, honest_share(&keys, &sealed, 0, &reader)),
        (1, wrong_share(&keys, &sealed, 1, &reader)),
        (2, honest_share(&keys, &sealed, 2, &reader)),
    ];
    let opened = combine(&sealed, AAD, &shares).unwrap();
    assert_eq!(opened.plaintext, PLAINTEXT);
    assert_eq!(opened.wrong_shares, vec![1]);

    // The wrong share comes first in position order: it must not be among those combined.
    let shares = vec![
        (3, honest_share(&keys, &sealed, 3, &reader)),
        (0, wrong_share(&keys, &sealed, 0, &reader)),
        (2, honest_share(&keys, &sealed, 2, &reader)),
    ];
    let opened = combine(&sealed, AAD, &shares).unwrap();
    assert_eq!(opened.plaintext, PLAINTEXT);
    assert_eq!(opened.wrong_shares, vec![0]);
}

#[test]
fn a_share_presented_for_another_position_is_wrong() {
    let keys = group(4);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let reader = ShareReader::new();
    let shares = vec![
        (0, honest_share(&keys, &sealed, 0, &reader)),
        (2, honest_share(&keys, &sealed, 1, &reader)),
        (3, honest_share(&keys, &sealed, 3, &reader)),
    ];
    let opened = combine(&sealed, AAD, &shares).unwrap();
    assert_eq!(opened.plaintext, PLAINTEXT);
    assert_eq!(opened.wrong_shares, vec![2]);
}

#[test]
fn too_few_good_shares_name_the_wrong_replicas() {
    let keys = group(4);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let reader = ShareReader::new();
    let shares = vec![
        (3, wrong_share(&keys, &sealed, 3, &reader)),
        (0, honest_share(&keys, &sealed, 0, &reader)),
        (2, wrong_share(&keys, &sealed, 2, &reader)),
    ];
    let err = combine(&sealed, AAD, &shares).unwrap_err();
    assert_eq!(
        err,
        SealError::WrongShares {
            replicas: vec![2, 3],
            good: 1,
            threshold: 2
        }
    );
    assert!(err.to_string().contains("[2, 3]"), "{err}");
}

#[test]
fn a_repeated_share_counts_once() {
    let keys = group(4);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let reader = ShareReader::new();
    let share = honest_share(&keys, &sealed, 1, &reader);
    let shares = vec![(1, share.clone()), (1, share)];
    assert_eq!(
        combine(&sealed, AAD, &shares),
        Err(SealError::NotEnoughShares {
            good: 1,
            threshold: 2
        })
    );
}

#[test]
fn a_position_outside_the_group_is_refused() {
    let keys = group(4);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let reader = ShareReader::new();
    let shares = vec![(4, honest_share(&keys, &sealed, 0, &reader))];
    assert_eq!(
        combine(&sealed, AAD, &shares),
        Err(SealError::UnknownReplica {
            index: 4,
            shares: 4
        })
    );
    assert_eq!(
        keys[0].open_share(&sealed, 4),
        Err(SealError::UnknownReplica {
            index: 4,
            shares: 4
        })
    );
    assert_eq!(
        reader.open_reply(255, &keys[0].public(), &[0; REPLY_LEN], CONTEXT),
        Err(SealError::ReplicaIndexTooLarge { index: 255 })
    );
}

#[test]
fn a_replica_cannot_open_another_replicas_share() {
    let keys = group(4);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    for owner in 0..4 {
        for other in (0..4).filter(|&other| other != owner) {
            assert_eq!(
                keys[other].open_share(&sealed, owner),
                Err(SealError::ShareUnreadable { index: owner })
            );
        }
        assert!(keys[owner].open_share(&sealed, owner).is_ok());
    }
    let outsider = IdentityKey::from_seed([99; 32]);
    assert_eq!(
        outsider.open_share(&sealed, 0),
        Err(SealError::ShareUnreadable { index: 0 })
    );
}

#[test]
fn a_reply_opens_only_for_its_reader_context_and_replica() {
    let keys = group(4);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let reader = ShareReader::new();
    let share = keys[2].open_share(&sealed, 2).unwrap();
    let reply = keys[2]
        .reseal_share(&share, &reader.public(), CONTEXT)
        .unwrap();
    let unreadable = Err(SealError::ReplyUnreadable { index: 2 });

    let other_reader = ShareReader::new();
    assert_eq!(
        other_reader.open_reply(2, &keys[2].public(), &reply, CONTEXT),
        unreadable
    );
    assert_eq!(
        reader.open_reply(2, &keys[2].public(), &reply, b"another request"),
        unreadable
    );
    // Replica 3 cannot pass replica 2's reply off as its own, nor under 2's position.
    assert_eq!(
        reader.open_reply(2, &keys[3].public(), &reply, CONTEXT),
        unreadable
    );
    assert_eq!(
        reader.open_reply(3, &keys[2].public(), &reply, CONTEXT),
        Err(SealError::ReplyUnreadable { index: 3 })
    );
    let mut altered = reply.to_vec();
    altered[REPLY_LEN - 1] ^= 1;
    assert_eq!(
        reader.open_reply(2, &keys[2].public(), &altered, CONTEXT),
        unreadable
    );
    assert_eq!(
        reader.open_reply(2, &keys[2].public(), &reply[..REPLY_LEN - 1], CONTEXT),
        unreadable
    );
    let opened = reader
        .open_reply(2, &keys[2].public(), &reply, CONTEXT)
        .unwrap();
    assert_eq!(opened, share);
}

#[test]
fn a_reply_with_the_share_of_another_position_is_refused() {
    let keys = group(4);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let reader = ShareReader::new();
    // Replica 1 relays replica 0's share (say, one it learned) under its own identity:
    // through `reseal_share` the reply is bound to position 0, so it does not open as 1's.
    let share = keys[0].open_share(&sealed, 0).unwrap();
    let reply = keys[1]
        .reseal_share(&share, &reader.public(), CONTEXT)
        .unwrap();
    assert_eq!(
        reader.open_reply(1, &keys[1].public(), &reply, CONTEXT),
        Err(SealError::ReplyUnreadable { index: 1 })
    );
    // A replica that builds the reply itself, bound to its own position, is caught too.
    let shared = keys[1].agree(&reader.public()).unwrap();
    let key = reply_key(&shared, &reader.public(), &keys[1].public(), 1);
    let nonce = [3u8; NONCE_LEN];
    let mut reply = nonce.to_vec();
    reply.extend(aead_seal(&key, &nonce, &share.bytes, &reply_aad(1, CONTEXT)).unwrap());
    assert_eq!(
        reader.open_reply(1, &keys[1].public(), &reply, CONTEXT),
        Err(SealError::ReplyPosition { index: 1 })
    );
}

#[test]
fn altered_ciphertext_or_other_associated_data_fail_to_decrypt() {
    let keys = group(4);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let reader = ShareReader::new();
    let shares = vec![
        (0, honest_share(&keys, &sealed, 0, &reader)),
        (1, honest_share(&keys, &sealed, 1, &reader)),
    ];
    assert_eq!(
        combine(
            &sealed,
            b"space accounts | public fields (\"alice\", 8)",
            &shares
        ),
        Err(SealError::Decryption)
    );
    for at in [0, PLAINTEXT.len(), PLAINTEXT.len() + TAG_LEN - 1] {
        let mut altered = sealed.clone();
        let mut ciphertext = altered.ciphertext.to_vec();
        ciphertext[at] ^= 0x40;
        altered.ciphertext = Bytes::from(ciphertext);
        assert_eq!(
            combine(&altered, AAD, &shares),
            Err(SealError::Decryption),
            "byte {at}"
        );
    }
    assert_eq!(combine(&sealed, AAD, &shares).unwrap().plaintext, PLAINTEXT);
}

#[test]
fn an_altered_encrypted_share_is_unreadable_to_its_replica() {
    let keys = group(4);
    let mut sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    sealed.encrypted_shares[1][0] ^= 1;
    assert_eq!(
        keys[1].open_share(&sealed, 1),
        Err(SealError::ShareUnreadable { index: 1 })
    );
    assert!(keys[0].open_share(&sealed, 0).is_ok());
}

#[test]
fn a_share_that_misses_its_commitment_is_caught_by_its_replica_and_the_reader() {
    let keys = group(4);
    let mut sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let reader = ShareReader::new();
    let share = keys[1].open_share(&sealed, 1).unwrap();
    sealed.commitments[1].0[0] ^= 1;
    assert_eq!(
        keys[1].open_share(&sealed, 1),
        Err(SealError::ShareMismatch { index: 1 })
    );
    let reply = keys[1]
        .reseal_share(&share, &reader.public(), CONTEXT)
        .unwrap();
    let share = reader
        .open_reply(1, &keys[1].public(), &reply, CONTEXT)
        .unwrap();
    let shares = vec![(1, share), (2, honest_share(&keys, &sealed, 2, &reader))];
    assert_eq!(
        combine(&sealed, AAD, &shares),
        Err(SealError::WrongShares {
            replicas: vec![1],
            good: 1,
            threshold: 2
        })
    );
}

/// What a faulty writer can build: shares 0 and 1 of one secret and shares 2 and 3 of
/// another, each encrypted to its replica and committed to correctly, with the key check
/// and ciphertext of the first secret.
fn inconsistent_sealed(keys: &[IdentityKey]) -> SealedSecret {
    let replicas = publics(keys);
    let mut rng = ChaCha20Rng::from_seed([5; 32]);
    let first = [1u8; SECRET_LEN];
    let second = [2u8; SECRET_LEN];
    let first_shares = split(&first, 2, 4, &mut rng).unwrap();
    let second_shares = split(&second, 2, 4, &mut rng).unwrap();
    let nonce = [9u8; NONCE_LEN];
    let ephemeral = EphemeralKey::generate();
    let mut encrypted_shares = Vec::new();
    let mut commitments = Vec::new();
    for index in 0..4 {
        let share = if index < 2 {
            &first_shares[index]
        } else {
            &second_shares[index]
        };
        let shared = ephemeral
            .agree(&montgomery(&replicas[index]).unwrap())
            .unwrap();
        let key = share_key(
            &shared,
            &ephemeral.public(),
            &replicas[index],
            &nonce,
            index,
        );
        let sealed = aead_seal(&key, &nonce, &share.bytes, &share_aad(&nonce, index)).unwrap();
        encrypted_shares.push(sealed.try_into().unwrap());
        commitments.push(commitment(share, &nonce, index));
    }
    SealedSecret {
        threshold: 2,
        nonce,
        ephemeral: ephemeral.public(),
        key_check: key_check(&first, &nonce),
        ciphertext: Bytes::from(aead_seal(&data_key(&first), &nonce, PLAINTEXT, AAD).unwrap()),
        encrypted_shares,
        commitments,
    }
}

#[test]
fn inconsistent_shares_from_a_faulty_writer_are_reported_not_opened() {
    let keys = group(4);
    let sealed = inconsistent_sealed(&keys);
    let reader = ShareReader::new();
    // Every replica's share matches its commitment: no replica can tell.
    let all: Vec<Share> = (0..4)
        .map(|i| honest_share(&keys, &sealed, i, &reader))
        .collect();
    let pair = |a: usize, b: usize| vec![(a, all[a].clone()), (b, all[b].clone())];
    assert_eq!(
        combine(&sealed, AAD, &pair(0, 1)).unwrap().plaintext,
        PLAINTEXT
    );
    for (a, b) in [(2, 3), (0, 2), (1, 3)] {
        assert_eq!(
            combine(&sealed, AAD, &pair(a, b)),
            Err(SealError::InconsistentTuple),
            "shares {a} and {b}"
        );
    }
}

#[test]
fn seal_refuses_bad_parameters_and_keys() {
    let keys = group(4);
    let replicas = publics(&keys);
    assert_eq!(
        seal(PLAINTEXT, AAD, &replicas, 0),
        Err(SealError::Threshold {
            threshold: 0,
            replicas: 4
        })
    );
    assert_eq!(
        seal(PLAINTEXT, AAD, &replicas, 5),
        Err(SealError::Threshold {
            threshold: 5,
            replicas: 4
        })
    );
    assert_eq!(
        seal(PLAINTEXT, AAD, &[], 1),
        Err(SealError::ReplicaCount { replicas: 0 })
    );
    let many = vec![replicas[0]; SHARES_MAX + 1];
    assert_eq!(
        seal(PLAINTEXT, AAD, &many, 2),
        Err(SealError::ReplicaCount { replicas: 256 })
    );
    // The Ed25519 identity point (small order) and bytes that are no curve point.
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let not_a_point = (0u8..=255)
        .map(|b| [b; 32])
        .find(|bytes| montgomery(&PublicKey(*bytes)).is_err())
        .expect("some constant string is not a point");
    for bad in [identity, not_a_point] {
        let mut with_bad = replicas.clone();
        with_bad[2] = PublicKey(bad);
        assert_eq!(
            seal(PLAINTEXT, AAD, &with_bad, 2),
            Err(SealError::InvalidReplicaKey { index: 2 })
        );
    }
}

#[test]
fn small_order_one_time_keys_are_refused() {
    let keys = group(4);
    let mut sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let share = keys[0].open_share(&sealed, 0).unwrap();
    // X25519 keys of small order: 0 and 1.
    for small in [[0u8; 32], {
        let mut one = [0u8; 32];
        one[0] = 1;
        one
    }] {
        assert_eq!(
            keys[0].reseal_share(&share, &KexPublic(small), CONTEXT),
            Err(SealError::InvalidReaderKey)
        );
        sealed.ephemeral = KexPublic(small);
        assert_eq!(
            keys[0].open_share(&sealed, 0),
            Err(SealError::InvalidEphemeralKey)
        );
    }
}

#[test]
fn share_debug_hides_the_value() {
    let keys = group(4);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap();
    let share = keys[3].open_share(&sealed, 3).unwrap();
    assert_eq!(share.index(), 3);
    assert_eq!(format!("{share:?}"), "Share(replica 3, ..)");
}

#[test]
fn encoding_round_trips_and_is_canonical() {
    let keys = group(7);
    let sealed = seal(PLAINTEXT, AAD, &publics(&keys), 3).unwrap();
    let bytes = sealed.encode();
    assert_eq!(bytes.len(), sealed.encoded_len());
    let decoded = SealedSecret::decode(&bytes, SEALED_MAX).unwrap();
    assert_eq!(decoded, sealed);
    assert_eq!(decoded.encode(), bytes);
    // A decoded secret opens like the original.
    let reader = ShareReader::new();
    let shares: Vec<(usize, Share)> = [1, 4, 6]
        .into_iter()
        .map(|i| (i, honest_share(&keys, &decoded, i, &reader)))
        .collect();
    assert_eq!(
        combine(&decoded, AAD, &shares).unwrap().plaintext,
        PLAINTEXT
    );
}

#[test]
fn decoder_names_what_is_wrong() {
    let keys = group(4);
    let bytes = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap().encode();
    let with = |at: usize, value: u8| {
        let mut b = bytes.clone();
        b[at] = value;
        SealedSecret::decode(&b, SEALED_MAX)
    };
    assert_eq!(
        SealedSecret::decode(&bytes, bytes.len() - 1),
        Err(DecodeError::TooLong {
            bytes: bytes.len(),
            max: bytes.len() - 1
        })
    );
    assert_eq!(with(0, 2), Err(DecodeError::Version { found: 2 }));
    assert_eq!(
        with(1, 0),
        Err(DecodeError::Threshold {
            threshold: 0,
            shares: 4
        })
    );
    assert_eq!(
        with(1, 5),
        Err(DecodeError::Threshold {
            threshold: 5,
            shares: 4
        })
    );
    assert_eq!(with(2, 0), Err(DecodeError::NoShares));
    let length_at = 3 + NONCE_LEN + 64;
    let mut short = bytes.clone();
    short[length_at..length_at + 4].copy_from_slice(&15u32.to_le_bytes());
    assert_eq!(
        SealedSecret::decode(&short, SEALED_MAX),
        Err(DecodeError::CiphertextTooShort { bytes: 15 })
    );
    let mut huge = bytes.clone();
    huge[length_at..length_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        SealedSecret::decode(&huge, SEALED_MAX),
        Err(DecodeError::Truncated { .. })
    ));
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert_eq!(
        SealedSecret::decode(&trailing, SEALED_MAX),
        Err(DecodeError::TrailingBytes { count: 1 })
    );
    // More shares claimed than present (the bound is checked before allocating).
    assert!(matches!(with(2, 255), Err(DecodeError::Truncated { .. })));
}

#[test]
fn decoder_survives_every_truncation_and_random_mutations() {
    let keys = group(4);
    let bytes = seal(PLAINTEXT, AAD, &publics(&keys), 2).unwrap().encode();
    for len in 0..bytes.len() {
        assert!(
            SealedSecret::decode(&bytes[..len], SEALED_MAX).is_err(),
            "prefix of {len} bytes"
        );
    }
    let mut rng = ChaCha20Rng::from_seed([17; 32]);
    for round in 0..20_000 {
        let mut mutated = bytes.clone();
        for _ in 0..1 + rng.next_u32() % 4 {
            let at = rng.next_u32() as usize % mutated.len();
            match rng.next_u32() % 3 {
                0 => mutated[at] = rng.next_u32() as u8,
                1 => {
                    mutated.remove(at);
                }
                _ => mutated.insert(at, rng.next_u32() as u8),
            }
        }
        // Whatever decodes is canonical: it re-encodes to the very same bytes.
        if let Ok(decoded) = SealedSecret::decode(&mutated, SEALED_MAX) {
            assert_eq!(decoded.encode(), mutated, "round {round}");
        }
    }
    for len in [0, 1, 3, HEADER_PROBE, 500] {
        let mut garbage = vec![0u8; len];
        rng.fill_bytes(&mut garbage);
        assert!(SealedSecret::decode(&garbage, SEALED_MAX).is_err());
    }
}

/// A garbage length just past the fixed header.
const HEADER_PROBE: usize = 3 + NONCE_LEN + 64 + 4 + 1;
