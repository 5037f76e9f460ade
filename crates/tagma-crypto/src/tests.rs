use super::*;
use bytes::Bytes;
use tagma_wire::{ClientId, RequestKind, RequestSeq, ViewId};

fn request(payload: &'static [u8]) -> Request {
    Request {
        client: ClientId::new(7, 3),
        seq: RequestSeq(42),
        kind: RequestKind::Ordered,
        view: ViewId(1),
        payload: Bytes::from_static(payload),
    }
}

/// A fresh, unique scratch directory (removed by the caller).
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).unwrap();
    let dir = std::env::temp_dir().join(format!(
        "tagma-crypto-{name}-{}-{}",
        std::process::id(),
        hex::encode(nonce)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn digest_is_blake3() {
    assert_eq!(digest(b"abc").0, *blake3::hash(b"abc").as_bytes());
    assert_eq!(digest_parts(&[b"a", b"", b"bc"]), digest(b"abc"));
}

#[test]
fn request_digest_covers_every_field() {
    let base = request(b"put x 1");
    let d = request_digest(&base);
    assert_eq!(d, request_digest(&base.clone()));

    let mut r = base.clone();
    r.client = ClientId::new(7, 4);
    assert_ne!(request_digest(&r), d);
    let mut r = base.clone();
    r.seq = RequestSeq(43);
    assert_ne!(request_digest(&r), d);
    let mut r = base.clone();
    r.kind = RequestKind::Unordered;
    assert_ne!(request_digest(&r), d);
    let mut r = base.clone();
    r.view = ViewId(2);
    assert_ne!(request_digest(&r), d);
    let mut r = base.clone();
    r.payload = Bytes::from_static(b"put x 2");
    assert_ne!(request_digest(&r), d);
    let mut r = base.clone();
    r.payload = Bytes::new();
    assert_ne!(request_digest(&r), d);
}

#[test]
fn request_digest_layout() {
    let r = request(b"xyz");
    let mut expected = Vec::new();
    expected.extend_from_slice(b"tagma v1 request\0");
    expected.extend_from_slice(&r.client.0.to_le_bytes());
    expected.extend_from_slice(&42u64.to_le_bytes());
    expected.push(0);
    expected.extend_from_slice(&1u32.to_le_bytes());
    expected.extend_from_slice(&3u64.to_le_bytes());
    expected.extend_from_slice(b"xyz");
    assert_eq!(request_digest(&r), digest(&expected));
}

#[test]
fn mac_tag_and_verify() {
    let key = MacKey([9; 32]);
    let tag = key.tag(b"hello world");
    assert_eq!(tag, key.tag_parts(&[b"hello", b" ", b"world"]));
    assert_eq!(
        tag.0[..],
        blake3::keyed_hash(&[9; 32], b"hello world").as_bytes()[..16]
    );
    assert!(key.verify_parts(&[b"hello world"], &tag));
    assert!(key.verify_parts(&[b"hello ", b"world"], &tag));
    // Tampered message.
    assert!(!key.verify_parts(&[b"hello worle"], &tag));
    assert!(!key.verify_parts(&[b"hello world", b"!"], &tag));
    // Tampered tag.
    let mut bad = tag;
    bad.0[15] ^= 1;
    assert!(!key.verify_parts(&[b"hello world"], &bad));
    // Other key.
    assert!(!MacKey([8; 32]).verify_parts(&[b"hello world"], &tag));
}

#[test]
fn keyed_digest_is_full_keyed_blake3_and_depends_on_the_key() {
    let key = MacKey([9; 32]);
    let d = key.keyed_digest(&[b"hello", b" ", b"world"]);
    assert_eq!(
        d.0,
        *blake3::keyed_hash(&[9; 32], b"hello world").as_bytes()
    );
    assert_eq!(d.0[..16], key.tag(b"hello world").0[..]);
    assert_ne!(d, MacKey([8; 32]).keyed_digest(&[b"hello world"]));
    assert_ne!(d, digest(b"hello world"), "keyed, not a plain hash");
}

#[test]
fn random_bytes_differ_between_calls() {
    let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
    random_bytes(&mut a);
    random_bytes(&mut b);
    assert_ne!(a, b);
    assert_ne!(a, [0u8; 32]);
}

#[test]
fn derive_key_separates_contexts() {
    let a = derive_key("tagma test a", b"material");
    let b = derive_key("tagma test b", b"material");
    let c = derive_key("tagma test a", b"materiaL");
    assert_eq!(a.0, derive_key("tagma test a", b"material").0);
    assert_ne!(a.0, b.0);
    assert_ne!(a.0, c.0);
    assert_eq!(a.0, blake3::derive_key("tagma test a", b"material"));
}

#[test]
fn sign_and_verify() {
    let key = IdentityKey::from_seed([1; 32]);
    let sig = key.sign(b"message");
    verify(&key.public(), b"message", &sig).unwrap();
    // Deterministic signatures and public keys from a seed.
    assert_eq!(sig, IdentityKey::from_seed([1; 32]).sign(b"message"));
    // Tampered message.
    assert_eq!(
        verify(&key.public(), b"messagE", &sig),
        Err(CryptoError::BadSignature)
    );
    // Tampered signature.
    let mut bad = sig;
    bad.0[3] ^= 0x40;
    assert_eq!(
        verify(&key.public(), b"message", &bad),
        Err(CryptoError::BadSignature)
    );
    // Other key.
    let other = IdentityKey::generate();
    assert_eq!(
        verify(&other.public(), b"message", &sig),
        Err(CryptoError::BadSignature)
    );
}

#[test]
fn verify_rejects_invalid_public_key() {
    let sig = IdentityKey::generate().sign(b"m");
    let invalid = find_invalid_point();
    assert_eq!(
        verify(&invalid, b"m", &sig),
        Err(CryptoError::InvalidPublicKey)
    );
}

#[test]
fn verify_rejects_non_canonical_s() {
    // Strict verification: s + L is not accepted.
    let key = IdentityKey::from_seed([5; 32]);
    let sig = key.sign(b"m");
    // L = 2^252 + 27742317777372353535851937790883648493, little endian.
    const L: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
        0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];
    let mut s = [0u8; 32];
    s.copy_from_slice(&sig.0[32..]);
    let mut carry = 0u16;
    for i in 0..32 {
        let v = s[i] as u16 + L[i] as u16 + carry;
        s[i] = v as u8;
        carry = v >> 8;
    }
    let mut malleated = sig;
    malleated.0[32..].copy_from_slice(&s);
    assert_eq!(
        verify(&key.public(), b"m", &malleated),
        Err(CryptoError::BadSignature)
    );
}

/// 32 bytes that do not decompress to a curve point.
fn find_invalid_point() -> PublicKey {
    for i in 0u8..=255 {
        let mut b = [i; 32];
        b[31] &= 0x7f;
        if VerifyingKey::from_bytes(&b).is_err() {
            return PublicKey(b);
        }
    }
    panic!("no invalid point found");
}

#[test]
fn request_mac_key_is_shared_pairwise() {
    let client = IdentityKey::generate();
    let replica = IdentityKey::generate();
    let third = IdentityKey::generate();
    let k_cr = client.request_mac_key(&replica.public()).unwrap();
    let k_rc = replica.request_mac_key(&client.public()).unwrap();
    assert_eq!(k_cr.0, k_rc.0);
    let k_tr = third.request_mac_key(&replica.public()).unwrap();
    let k_rt = replica.request_mac_key(&third.public()).unwrap();
    assert_eq!(k_tr.0, k_rt.0);
    assert_ne!(k_cr.0, k_tr.0);
    let k_ct = client.request_mac_key(&third.public()).unwrap();
    assert_ne!(k_ct.0, k_cr.0);
    assert_ne!(k_ct.0, k_tr.0);
    // A MAC by the client verifies at the replica, not with the third party's key.
    let d = request_digest(&request(b"op"));
    let tag = k_cr.tag(d.as_bytes());
    assert!(k_rc.verify_parts(&[d.as_bytes()], &tag));
    assert!(!k_rt.verify_parts(&[d.as_bytes()], &tag));
}

#[test]
fn request_mac_key_rejects_invalid_peer() {
    let me = IdentityKey::generate();
    assert_eq!(
        me.request_mac_key(&find_invalid_point()).err(),
        Some(CryptoError::InvalidPublicKey)
    );
    // The identity point (small order): decompresses but gives an all-zero shared secret.
    let mut identity = [0u8; 32];
    identity[0] = 1;
    assert_eq!(
        me.request_mac_key(&PublicKey(identity)).err(),
        Some(CryptoError::InvalidPublicKey)
    );
}

#[test]
fn authenticator_tags_per_replica() {
    let client = IdentityKey::generate();
    let replicas: Vec<IdentityKey> = (0..4).map(|_| IdentityKey::generate()).collect();
    let publics: Vec<PublicKey> = replicas.iter().map(|r| r.public()).collect();
    let auth = Authenticator::new(&client, &publics).unwrap();
    assert_eq!(auth.keys.len(), 4);
    let req = request(b"op");
    let d = request_digest(&req);
    let tags = auth.tags(&d);
    assert_eq!(tags.len(), 4);
    for (i, replica) in replicas.iter().enumerate() {
        let k = replica.request_mac_key(&client.public()).unwrap();
        assert!(k.verify_parts(&[d.as_bytes()], &tags[i]));
        // Each replica's key only checks its own entry.
        for (j, tag) in tags.iter().enumerate() {
            if j != i {
                assert!(!k.verify_parts(&[d.as_bytes()], tag));
            }
        }
        // A tampered request fails.
        let mut tampered = req.clone();
        tampered.payload = Bytes::from_static(b"oq");
        let td = request_digest(&tampered);
        assert!(!k.verify_parts(&[td.as_bytes()], &tags[i]));
    }
    let mut bad = publics.clone();
    bad[2] = find_invalid_point();
    assert_eq!(
        Authenticator::new(&client, &bad).err(),
        Some(CryptoError::InvalidPublicKey)
    );
}

#[test]
fn ephemeral_agreement() {
    let a = EphemeralKey::generate();
    let b = EphemeralKey::generate();
    assert_ne!(a.public(), b.public());
    assert_eq!(a.agree(&b.public()).unwrap(), b.agree(&a.public()).unwrap());
    assert_eq!(
        a.agree(&KexPublic([0; 32])),
        Err(CryptoError::InvalidPublicKey)
    );
}

#[test]
fn public_key_hex_round_trip_and_errors() {
    let key = IdentityKey::generate();
    let hex = key.public().to_hex();
    assert_eq!(public_key_from_hex(&hex).unwrap(), key.public());
    assert_eq!(
        public_key_from_hex(&hex.to_uppercase()).unwrap(),
        key.public()
    );
    for bad in [
        "",
        &hex[..63],
        &format!("{hex}0"),
        &format!("{}zz", &hex[..62]),
        &format!(" {}", &hex[..63]),
    ] {
        match public_key_from_hex(bad) {
            Err(CryptoError::Hex(msg)) => assert!(msg.contains("64 hex digits"), "{msg}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let invalid = find_invalid_point().to_hex();
    match public_key_from_hex(&invalid) {
        Err(CryptoError::Hex(msg)) => assert!(msg.contains("not an Ed25519 public key")),
        other => panic!("{other:?}"),
    }
    let mut identity = [0u8; 32];
    identity[0] = 1;
    assert!(matches!(
        public_key_from_hex(&PublicKey(identity).to_hex()),
        Err(CryptoError::Hex(_))
    ));
}

#[test]
fn key_file_round_trip_and_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("roundtrip");
    let path = dir.join("replica0.key");
    let key = IdentityKey::generate();
    key.write_file(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("tagma-secret-key v1 "));
    assert!(text.ends_with('\n'));
    assert_eq!(text.len(), "tagma-secret-key v1 ".len() + 64 + 1);
    let back = IdentityKey::read_file(&path).unwrap();
    assert_eq!(back.public(), key.public());

    // Overwriting a pre-existing, world-readable file leaves it at 0600.
    let loose = dir.join("loose.key");
    std::fs::write(&loose, "x").unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    key.write_file(&loose).unwrap();
    let mode = std::fs::metadata(&loose).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        IdentityKey::read_file(&loose).unwrap().public(),
        key.public()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn key_file_errors_name_path_and_fix() {
    let dir = scratch_dir("errors");
    let missing = dir.join("missing.key");
    match IdentityKey::read_file(&missing) {
        Err(CryptoError::KeyFile { path, reason }) => {
            assert_eq!(path, missing.display().to_string());
            assert!(reason.contains("not found"), "{reason}");
            assert!(reason.contains("tagma keygen"), "{reason}");
            assert!(reason.contains("tagma init"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let seed_hex = hex::encode([3u8; 32]);
    for (name, content) in [
        ("empty", String::new()),
        ("public", format!("tagma-public-key v1 {seed_hex}\n")),
        (
            "short",
            format!("tagma-secret-key v1 {}\n", &seed_hex[..62]),
        ),
        (
            "nothex",
            format!("tagma-secret-key v1 {}zz\n", &seed_hex[..62]),
        ),
        ("v2", format!("tagma-secret-key v2 {seed_hex}\n")),
        ("extra", format!("tagma-secret-key v1 {seed_hex} x\n")),
        ("huge", "a".repeat(10_000)),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, &content).unwrap();
        match IdentityKey::read_file(&path) {
            Err(CryptoError::KeyFile { path: p, reason }) => {
                assert_eq!(p, path.display().to_string());
                assert!(reason.contains("tagma keygen"), "{name}: {reason}");
                // The secret never appears in the error.
                assert!(!reason.contains(&seed_hex[..16]), "{name}: {reason}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    let binary = dir.join("binary");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    assert!(matches!(
        IdentityKey::read_file(&binary),
        Err(CryptoError::KeyFile { .. })
    ));
    // Without the trailing newline is accepted.
    let no_nl = dir.join("nonl");
    std::fs::write(&no_nl, format!("tagma-secret-key v1 {seed_hex}")).unwrap();
    assert_eq!(
        IdentityKey::read_file(&no_nl).unwrap().public(),
        IdentityKey::from_seed([3; 32]).public()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn debug_does_not_leak_secrets() {
    let key = IdentityKey::from_seed([0xab; 32]);
    let shown = format!("{key:?}");
    assert!(!shown.contains("abababab"), "{shown}");
    assert!(shown.contains(&key.public().to_hex()));
    assert_eq!(format!("{:?}", MacKey([0xab; 32])), "MacKey(..)");
}

/// A key decompressed once verifies exactly as `verify` does: the signer's signature of the
/// message, nothing else; a public key that is not a curve point is refused up front.
#[test]
fn verify_key_agrees_with_verify() {
    let signer = IdentityKey::from_seed([3; 32]);
    let other = IdentityKey::from_seed([4; 32]);
    let key = VerifyKey::new(&signer.public()).unwrap();
    assert_eq!(key.public(), &signer.public());
    let sig = signer.sign(b"accept 7");
    for (message, signature) in [
        (&b"accept 7"[..], sig),
        (&b"accept 8"[..], sig),
        (&b"accept 7"[..], other.sign(b"accept 7")),
    ] {
        assert_eq!(
            key.verify(message, &signature),
            verify(&signer.public(), message, &signature)
        );
    }
    assert_eq!(key.verify(b"accept 7", &sig), Ok(()));
    assert_eq!(
        key.verify(b"accept 8", &sig),
        Err(CryptoError::BadSignature)
    );
    // y = 2 is not the y-coordinate of a point on the curve.
    let mut not_a_point = [0u8; 32];
    not_a_point[0] = 2;
    assert_eq!(
        VerifyKey::new(&PublicKey(not_a_point)).map(|_| ()),
        Err(CryptoError::InvalidPublicKey)
    );
}
