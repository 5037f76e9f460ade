//! Votes, ACCEPTs, decision proofs, collects and the peer messages that carry them: round
//! trips, exact lengths, zero-copy fields, canonical order, and counts that would allocate.

use bytes::Bytes;
use tagma_wire::*;

use crate::common;
use crate::support::*;

#[test]
fn peer_messages_round_trip() {
    for (_, msg) in common::peer_messages() {
        check(&msg);
    }
}

#[test]
fn consensus_types_round_trip_standalone() {
    check(&common::accept());
    check(&common::proof());
    check(&DecisionProof {
        epoch: Epoch(u32::MAX),
        accepts: vec![],
    });
    check(&common::decided());
    check(&common::collect());
    check(&common::empty_collect());
    // `Some` with epoch 0 is distinct from `None`.
    let mut epoch0 = common::empty_collect();
    epoch0.write_quorum = Some((Epoch(0), Digest([0; 32])));
    let none = check(&common::empty_collect());
    let some = check(&epoch0);
    assert_ne!(none, some);
    check(&common::signed_collect());
    check(&common::signed_empty_collect());
    check(&common::stop());
    check(&Stop {
        regency: Regency(9),
        requests: vec![common::mac_envelope(), common::sig_envelope()],
    });
    check(&common::stop_data());
    check(&StopData {
        regency: Regency(1),
        last_decided: Some(common::decided()),
        collect: common::signed_collect(),
    });
    check(&common::sync());
    check(&Sync {
        regency: Regency(4),
        last_decided: None,
        collects: vec![common::signed_collect(), common::signed_empty_collect()],
        proposal: Bytes::new(),
    });
}

#[test]
fn standalone_lengths() {
    assert_eq!(common::accept().encoded_len(), 44 + 64);
    assert_eq!(PeerMessage::Accept(common::accept()).encoded_len(), 2 + 108);
    // replica, regency, cid, None, count.
    assert_eq!(common::empty_collect().encoded_len(), 4 + 4 + 8 + 1 + 4);
    // + (epoch, hash) + 2 × (epoch, len, 2 bytes).
    assert_eq!(
        common::collect().encoded_len(),
        21 + 4 + 32 + 2 * (4 + 4 + 2)
    );
    // epoch, count, 2 × (signer, signature).
    assert_eq!(common::proof().encoded_len(), 8 + 2 * 68);
}

#[test]
fn peer_message_bodies_match_standalone_encodings() {
    fn body(msg: &PeerMessage) -> Bytes {
        msg.to_bytes().slice(2..)
    }
    assert_eq!(
        body(&PeerMessage::Accept(common::accept())),
        common::accept().to_bytes()
    );
    assert_eq!(
        body(&PeerMessage::Stop(common::stop())),
        common::stop().to_bytes()
    );
    assert_eq!(
        body(&PeerMessage::StopData(common::stop_data())),
        common::stop_data().to_bytes()
    );
    assert_eq!(
        body(&PeerMessage::Sync(common::sync())),
        common::sync().to_bytes()
    );
    assert_eq!(
        body(&PeerMessage::Decision(common::decided())),
        common::decided().to_bytes()
    );
}

#[test]
fn collect_signing_bytes_are_domain_separated_encoding() {
    for collect in [common::collect(), common::empty_collect()] {
        let signing = collect_signing_bytes(&collect);
        assert_eq!(&signing[..17], b"tagma v1 collect\0");
        assert_eq!(signing.slice(17..), collect.to_bytes());
    }
    assert_ne!(
        collect_signing_bytes(&common::collect()),
        collect_signing_bytes(&common::empty_collect())
    );
}

#[test]
fn consensus_byte_fields_are_zero_copy() {
    let wire = PeerMessage::Sync(common::sync()).to_bytes();
    let PeerMessage::Sync(sync) = PeerMessage::decode(&wire).unwrap() else {
        panic!("not a sync")
    };
    assert_within(&wire, &sync.proposal);
    assert_within(&wire, &sync.last_decided.unwrap().batch);
    for (_, batch) in &sync.collects[0].collect.write_set {
        assert_within(&wire, batch);
    }
}

/// Offset of the first signer in an encoded [`DecidedInstance`] (cid, batch, proof epoch,
/// count).
fn first_signer_at(decided: &DecidedInstance) -> usize {
    8 + 4 + decided.batch.len() + 4 + 4
}

#[test]
fn non_canonical_proof_order_is_rejected() {
    let decided = common::decided();
    let second = first_signer_at(&decided) + 68;
    let bytes = decided.to_bytes();
    // Duplicate signer (0, 0) and descending signers (0, ... then 2 → first set to 3).
    assert_eq!(
        DecidedInstance::decode(&with_byte(&bytes, second, 0)),
        invalid("proof signers order")
    );
    assert_eq!(
        DecidedInstance::decode(&with_byte(&bytes, second - 68, 3)),
        invalid("proof signers order")
    );
    // The same through the peer message and the standalone proof.
    let msg = PeerMessage::Decision(decided.clone()).to_bytes();
    assert_eq!(
        PeerMessage::decode(&with_byte(&msg, 2 + second, 0)),
        invalid("proof signers order")
    );
    let proof = common::proof().to_bytes();
    assert_eq!(
        DecisionProof::decode(&with_byte(&proof, 8 + 68, 0)),
        invalid("proof signers order")
    );
    // Encoding an out-of-order proof yields bytes the decoder refuses.
    let mut unordered = decided;
    unordered.proof.accepts.reverse();
    assert_eq!(
        DecidedInstance::decode(&unordered.to_bytes()),
        invalid("proof signers order")
    );
}

#[test]
fn non_canonical_write_set_order_is_rejected() {
    let collect = common::collect();
    // replica, regency, cid, Some, (epoch, hash), count, then the first entry's epoch.
    let first = 4 + 4 + 8 + 1 + 4 + 32 + 4;
    let second = first + 4 + 4 + 2;
    let bytes = collect.to_bytes();
    assert_eq!(
        Collect::decode(&with_byte(&bytes, second, 0)),
        invalid("write set order")
    );
    assert_eq!(
        Collect::decode(&with_byte(&bytes, first, 2)),
        invalid("write set order")
    );
    let mut unordered = collect.clone();
    unordered.write_set.reverse();
    assert_eq!(
        Collect::decode(&unordered.to_bytes()),
        invalid("write set order")
    );
    // Inside a SYNC: regency, Some, decided, count, then the collect.
    let sync = common::sync();
    let at = 2 + 4 + 1 + sync.last_decided.as_ref().unwrap().encoded_len() + 4 + second;
    let wire = PeerMessage::Sync(sync).to_bytes();
    assert_eq!(
        PeerMessage::decode(&with_byte(&wire, at, 0)),
        invalid("write set order")
    );
}

#[test]
fn invalid_option_tags_are_rejected() {
    let bad = |r: Result<(), WireError>, tag: u8| {
        assert!(
            matches!(r, Err(WireError::UnknownTag { what: "option", tag: t }) if t == tag),
            "{r:?}"
        );
    };
    // Collect write quorum at offset 16.
    let collect = common::collect().to_bytes();
    for tag in [2, 0xff] {
        bad(
            Collect::decode(&with_byte(&collect, 16, tag)).map(|_| ()),
            tag,
        );
    }
    // StopData / Sync last_decided right after the regency (offset 4 standalone, 6 in a
    // peer message).
    let sd = common::stop_data().to_bytes();
    bad(StopData::decode(&with_byte(&sd, 4, 2)).map(|_| ()), 2);
    let sync = PeerMessage::Sync(common::sync()).to_bytes();
    bad(PeerMessage::decode(&with_byte(&sync, 6, 7)).map(|_| ()), 7);
}

#[test]
fn huge_consensus_counts_fail_without_allocating() {
    let too_long = |r: Result<(), WireError>, what: &str| match r {
        Err(WireError::TooLong { what: w, len, .. }) => {
            assert_eq!(w, what);
            assert_eq!(len, u32::MAX as usize);
        }
        other => panic!("{what}: {other:?}"),
    };
    let max = u32::MAX.to_le_bytes();

    // Proof count (after cid, batch, epoch).
    let decided = common::decided();
    let at = first_signer_at(&decided) - 4;
    let mut v = decided.to_bytes().to_vec();
    v[at..at + 4].copy_from_slice(&max);
    too_long(
        DecidedInstance::decode(&Bytes::from(v)).map(|_| ()),
        "decision proof",
    );

    // Write-set count (after replica, regency, cid, None).
    let mut v = common::empty_collect().to_bytes().to_vec();
    v[17..21].copy_from_slice(&max);
    v.extend_from_slice(&[0; 64]);
    too_long(Collect::decode(&Bytes::from(v)).map(|_| ()), "write set");

    // STOP request count (after the regency).
    let mut v = common::stop().to_bytes().to_vec();
    v[4..8].copy_from_slice(&max);
    too_long(Stop::decode(&Bytes::from(v)).map(|_| ()), "stop requests");

    // SYNC collect count (after regency, None).
    let mut v = vec![WIRE_VERSION, 7, 1, 0, 0, 0, 0];
    v.extend_from_slice(&max);
    v.extend_from_slice(&[0; 100]);
    too_long(
        PeerMessage::decode(&Bytes::from(v)).map(|_| ()),
        "sync collects",
    );

    // Byte fields: decided batch, write-set entry, SYNC proposal.
    let mut v = vec![WIRE_VERSION, 9];
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&max);
    assert!(matches!(
        PeerMessage::decode(&Bytes::from(v)),
        Err(WireError::Truncated { .. })
    ));
    let mut v = common::empty_collect().to_bytes().to_vec();
    v[17..21].copy_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&[0; 4]);
    v.extend_from_slice(&max);
    assert!(matches!(
        Collect::decode(&Bytes::from(v)),
        Err(WireError::Truncated { .. })
    ));
    let mut v = common::sync().to_bytes().to_vec();
    let at = v.len() - 4 - 4;
    v[at..at + 4].copy_from_slice(&max);
    assert!(matches!(
        Sync::decode(&Bytes::from(v)),
        Err(WireError::Truncated { .. })
    ));
}
