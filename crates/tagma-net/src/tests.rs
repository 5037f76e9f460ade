use std::net::{SocketAddr, TcpListener};
use std::thread;

use tagma_wire::{KexPublic, Refusal, ReplicaId, Signature};

use super::*;

const MAX: usize = 1 << 20;

fn limits() -> NetLimits {
    NetLimits {
        frame_bytes_max: MAX,
        handshake_timeout: Duration::from_secs(5),
    }
}

struct Dir(Vec<(Role, PublicKey)>);

impl KeyDirectory for Dir {
    fn lookup(&self, role: &Role) -> Option<PublicKey> {
        self.0.iter().find(|(r, _)| r == role).map(|(_, k)| *k)
    }
}

const SERVER: Role = Role::Replica(ReplicaId(0));
const CLIENT: Role = Role::Client(5);

fn key(seed: u8) -> IdentityKey {
    IdentityKey::from_seed([seed; 32])
}

fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

type Accepted = Result<(Role, FrameReader, FrameWriter), NetError>;

/// Spawns a responder (`SERVER` with key seed 100) that accepts one connection with `dir`.
fn spawn_responder(dir: Dir, limits: NetLimits) -> (SocketAddr, thread::JoinHandle<Accepted>) {
    let (l, addr) = listener();
    let handle = thread::spawn(move || {
        let (stream, _) = l.accept().unwrap();
        let k = key(100);
        let me = LocalIdentity {
            role: SERVER,
            key: &k,
        };
        accept(stream, &me, &dir, limits)
    });
    (addr, handle)
}

fn connect_as(
    addr: SocketAddr,
    role: Role,
    k: &IdentityKey,
    expected_role: Role,
    expected_key: &PublicKey,
) -> Result<(FrameReader, FrameWriter), NetError> {
    let me = LocalIdentity { role, key: k };
    connect(
        addr,
        &me,
        expected_role,
        expected_key,
        limits(),
        Duration::from_secs(5),
    )
}

/// A connected, authenticated pair: (client side, server side).
fn pair() -> ((FrameReader, FrameWriter), (FrameReader, FrameWriter)) {
    let client_key = key(1);
    let (addr, server) = spawn_responder(Dir(vec![(CLIENT, client_key.public())]), limits());
    let client = connect_as(addr, CLIENT, &client_key, SERVER, &key(100).public()).unwrap();
    let (role, r, w) = server.join().unwrap().unwrap();
    assert_eq!(role, CLIENT);
    (client, (r, w))
}

fn write_raw(w: &FrameWriter, bytes: &[u8]) {
    (&w.stream).write_all(bytes).unwrap();
}

#[test]
fn handshake_and_frames_both_ways() {
    let ((mut cr, mut cw), (mut sr, mut sw)) = pair();

    cw.push(b"hello").unwrap();
    cw.push(b"").unwrap();
    assert_eq!(cw.pending_bytes(), 2 * (4 + 16) + 5);
    cw.flush().unwrap();
    assert_eq!(cw.pending_bytes(), 0);
    assert_eq!(&sr.read_frame().unwrap()[..], b"hello");
    assert_eq!(&sr.read_frame().unwrap()[..], b"");
    assert_eq!(sr.frames_read(), 2);

    // Many frames pushed before a single flush.
    for i in 0..1000u32 {
        sw.push(format!("frame {i}").as_bytes()).unwrap();
    }
    sw.flush().unwrap();
    for i in 0..1000u32 {
        assert_eq!(cr.read_frame().unwrap(), format!("frame {i}").as_bytes());
    }

    // Large frames (several reads each), including one at the limit, from a writer thread.
    let big: Vec<u8> = (0..MAX).map(|i| (i % 251) as u8).collect();
    let big2 = big.clone();
    let writer = thread::spawn(move || {
        cw.push(&big2[..300_000]).unwrap();
        cw.push(&big2).unwrap();
        cw.push(b"tail").unwrap();
        cw.flush().unwrap();
        cw
    });
    assert_eq!(sr.read_frame().unwrap(), &big[..300_000]);
    assert_eq!(sr.read_frame().unwrap(), &big[..]);
    assert_eq!(&sr.read_frame().unwrap()[..], b"tail");
    let cw = writer.join().unwrap();

    // A body over the limit is refused by the writer.
    let mut sw = sw;
    assert!(matches!(
        sw.push(&vec![0; MAX + 1]),
        Err(NetError::FrameTooLarge { len, max: MAX }) if len == MAX + 1
    ));

    // Clean close: the reader sees `Closed`.
    cw.shutdown();
    assert!(matches!(sr.read_frame(), Err(NetError::Closed)));
    drop(cr);
}

#[test]
fn replica_to_replica_handshake() {
    let r1 = key(1);
    let role1 = Role::Replica(ReplicaId(1));
    let (addr, server) = spawn_responder(Dir(vec![(role1, r1.public())]), limits());
    let (mut cr, mut cw) = connect_as(addr, role1, &r1, SERVER, &key(100).public()).unwrap();
    let (role, mut sr, mut sw) = server.join().unwrap().unwrap();
    assert_eq!(role, role1);
    sw.push(b"ping").unwrap();
    sw.flush().unwrap();
    assert_eq!(&cr.read_frame().unwrap()[..], b"ping");
    cw.push(b"pong").unwrap();
    cw.flush().unwrap();
    assert_eq!(&sr.read_frame().unwrap()[..], b"pong");
}

#[test]
fn responder_refuses_unknown_client() {
    let (addr, server) = spawn_responder(Dir(vec![(CLIENT, key(1).public())]), limits());
    let other = key(2);
    let client = connect_as(addr, Role::Client(9), &other, SERVER, &key(100).public());
    assert!(matches!(
        server.join().unwrap(),
        Err(NetError::UnknownKey {
            role: Role::Client(9)
        })
    ));
    // The responder says why before it closes the connection.
    let err = client.err().unwrap();
    assert!(
        matches!(err, NetError::Refused(Refusal::UnknownKey)),
        "{err:?}"
    );
    assert_eq!(err.reason(), "refused_unknown_key");
}

#[test]
fn responder_refuses_impersonator() {
    let role1 = Role::Replica(ReplicaId(1));
    let (addr, server) = spawn_responder(Dir(vec![(role1, key(1).public())]), limits());
    let impostor = key(66);
    let client = connect_as(addr, role1, &impostor, SERVER, &key(100).public());
    let err = server.join().unwrap().err().unwrap();
    assert!(matches!(err, NetError::UnknownKey { role } if role == role1));
    assert_eq!(err.reason(), "unknown_key");
    assert!(client.is_err());
}

#[test]
fn responder_refuses_bad_proof() {
    // Presents replica 1's real public key but cannot sign with it.
    let role1 = Role::Replica(ReplicaId(1));
    let real = key(1);
    let (addr, server) = spawn_responder(Dir(vec![(role1, real.public())]), limits());
    let stream = TcpStream::connect(addr).unwrap();
    let io = HandshakeIo::new(&stream, Duration::from_secs(5));
    let eph = EphemeralKey::generate();
    let hello = io
        .send(&Handshake::Hello {
            role: role1,
            identity: real.public(),
            ephemeral: eph.public(),
        })
        .unwrap();
    let (_, their_hello) = io.recv().unwrap();
    let t = transcript(&hello, &their_hello);
    io.send(&Handshake::Proof {
        signature: key(66).sign(&labelled(INITIATOR_LABEL, &t)),
    })
    .unwrap();
    assert!(matches!(
        server.join().unwrap(),
        Err(NetError::BadSignature)
    ));
    // Fail closed: nothing more comes, the socket is closed.
    assert!(matches!(io.recv(), Err(NetError::Closed | NetError::Io(_))));
}

#[test]
fn initiator_refuses_wrong_responder_key() {
    let client_key = key(1);
    let (addr, server) = spawn_responder(Dir(vec![(CLIENT, client_key.public())]), limits());
    let err = connect_as(addr, CLIENT, &client_key, SERVER, &key(101).public())
        .err()
        .unwrap();
    assert!(matches!(err, NetError::UnknownKey { role: SERVER }));
    assert!(server.join().unwrap().is_err());
}

#[test]
fn initiator_refuses_wrong_role() {
    let client_key = key(1);
    let (addr, server) = spawn_responder(Dir(vec![(CLIENT, client_key.public())]), limits());
    let expected = Role::Replica(ReplicaId(3));
    let err = connect_as(addr, CLIENT, &client_key, expected, &key(100).public())
        .err()
        .unwrap();
    assert!(matches!(
        err,
        NetError::WrongPeer { expected: e, found: SERVER } if e == expected
    ));
    assert_eq!(err.reason(), "wrong_peer");
    assert!(server.join().unwrap().is_err());
}

#[test]
fn initiator_refuses_bad_responder_proof() {
    // A fake responder that presents the expected public key without its secret.
    let (l, addr) = listener();
    let expected = key(100).public();
    let fake = thread::spawn(move || {
        let (stream, _) = l.accept().unwrap();
        let io = HandshakeIo::new(&stream, Duration::from_secs(5));
        let (_, their_hello) = io.recv().unwrap();
        let eph = EphemeralKey::generate();
        let hello = io
            .send(&Handshake::Hello {
                role: SERVER,
                identity: expected,
                ephemeral: eph.public(),
            })
            .unwrap();
        let t = transcript(&their_hello, &hello);
        let _ = io.recv().unwrap();
        io.send(&Handshake::Proof {
            signature: key(66).sign(&labelled(RESPONDER_LABEL, &t)),
        })
        .unwrap();
    });
    let err = connect_as(addr, CLIENT, &key(1), SERVER, &expected)
        .err()
        .unwrap();
    assert!(matches!(err, NetError::BadSignature), "{err:?}");
    fake.join().unwrap();
}

#[test]
fn tampered_frame_fails_mac() {
    let ((_cr, mut cw), (mut sr, _sw)) = pair();
    cw.push(b"transfer 10 to alice").unwrap();
    let mut wire = cw.buf.split().to_vec();
    wire[4 + 9] ^= 0x01;
    write_raw(&cw, &wire);
    assert!(matches!(sr.read_frame(), Err(NetError::BadMac)));
}

#[test]
fn tampered_tag_fails_mac() {
    let ((_cr, mut cw), (mut sr, _sw)) = pair();
    cw.push(b"x").unwrap();
    let mut wire = cw.buf.split().to_vec();
    let last = wire.len() - 1;
    wire[last] ^= 0x80;
    write_raw(&cw, &wire);
    assert!(matches!(sr.read_frame(), Err(NetError::BadMac)));
}

#[test]
fn replayed_frame_fails_mac() {
    let ((_cr, mut cw), (mut sr, _sw)) = pair();
    cw.push(b"pay once").unwrap();
    let wire = cw.buf.to_vec();
    cw.flush().unwrap();
    assert_eq!(&sr.read_frame().unwrap()[..], b"pay once");
    write_raw(&cw, &wire);
    let err = sr.read_frame().err().unwrap();
    assert!(matches!(err, NetError::BadMac));
    assert_eq!(err.reason(), "bad_mac");
}

#[test]
fn frame_from_other_direction_fails_mac() {
    // A frame the server sealed (responder->initiator key) reflected back to the server.
    let ((_cr, cw), (mut sr, mut sw)) = pair();
    sw.push(b"reflect me").unwrap();
    let wire = sw.buf.split().to_vec();
    write_raw(&cw, &wire);
    assert!(matches!(sr.read_frame(), Err(NetError::BadMac)));
}

#[test]
fn oversized_header_is_refused() {
    let ((_cr, cw), (mut sr, _sw)) = pair();
    write_raw(&cw, &((MAX + 1) as u32).to_le_bytes());
    let err = sr.read_frame().err().unwrap();
    assert!(matches!(err, NetError::FrameTooLarge { len, max: MAX } if len == MAX + 1));
    assert_eq!(err.reason(), "frame_too_large");
}

#[test]
fn truncated_stream() {
    let ((_cr, cw), (mut sr, _sw)) = pair();
    let mut wire = 100u32.to_le_bytes().to_vec();
    wire.extend_from_slice(&[7; 10]);
    write_raw(&cw, &wire);
    cw.stream.shutdown(Shutdown::Write).unwrap();
    let err = sr.read_frame().err().unwrap();
    assert!(matches!(err, NetError::Truncated));
    assert_eq!(err.reason(), "truncated");
}

#[test]
fn truncated_header() {
    let ((_cr, cw), (mut sr, _sw)) = pair();
    write_raw(&cw, &[1, 0]);
    cw.stream.shutdown(Shutdown::Write).unwrap();
    assert!(matches!(sr.read_frame(), Err(NetError::Truncated)));
}

fn responder_result_for_raw(bytes: &[u8], close: bool) -> NetError {
    let (addr, server) = spawn_responder(Dir(vec![(CLIENT, key(1).public())]), limits());
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(bytes).unwrap();
    if close {
        stream.shutdown(Shutdown::Write).unwrap();
    }
    let err = server.join().unwrap().err().unwrap();
    // Fail closed: the responder closed the socket.
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty());
    err
}

#[test]
fn garbage_instead_of_hello() {
    // An HTTP request: "GET " read as a length is far above the handshake limit.
    let err = responder_result_for_raw(b"GET / HTTP/1.1\r\nHost: tagma\r\n\r\n", false);
    assert!(matches!(err, NetError::MalformedHandshake(_)), "{err:?}");
    assert_eq!(err.reason(), "malformed_handshake");

    // A small length-prefixed body of garbage.
    let mut framed = 40u32.to_le_bytes().to_vec();
    framed.extend((0..40u8).map(|i| i.wrapping_mul(37).wrapping_add(200)));
    let err = responder_result_for_raw(&framed, false);
    assert!(matches!(err, NetError::MalformedHandshake(_)), "{err:?}");

    // A well-formed Proof where a Hello is expected.
    let proof = Handshake::Proof {
        signature: Signature([1; 64]),
    }
    .to_bytes();
    let mut framed = (proof.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(&proof);
    let err = responder_result_for_raw(&framed, false);
    assert!(matches!(err, NetError::MalformedHandshake(_)), "{err:?}");

    // A Hello with an all-zero (small-order) ephemeral key.
    let hello = Handshake::Hello {
        role: CLIENT,
        identity: key(1).public(),
        ephemeral: KexPublic([0; 32]),
    }
    .to_bytes();
    let mut framed = (hello.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(&hello);
    let err = responder_result_for_raw(&framed, false);
    assert!(matches!(err, NetError::MalformedHandshake(_)), "{err:?}");

    // Closed mid-message, and closed before saying anything.
    let err = responder_result_for_raw(&[50, 0, 0, 0, 1, 2], true);
    assert!(matches!(err, NetError::Truncated), "{err:?}");
    let err = responder_result_for_raw(&[], true);
    assert!(matches!(err, NetError::Closed), "{err:?}");
}

#[test]
fn silent_peer_times_out_responder() {
    let timeout = Duration::from_millis(300);
    let short = NetLimits {
        handshake_timeout: timeout,
        ..limits()
    };
    let (addr, server) = spawn_responder(Dir(vec![(CLIENT, key(1).public())]), short);
    let start = Instant::now();
    let _silent = TcpStream::connect(addr).unwrap();
    let err = server.join().unwrap().err().unwrap();
    let elapsed = start.elapsed();
    assert!(matches!(err, NetError::HandshakeTimeout), "{err:?}");
    assert_eq!(err.reason(), "handshake_timeout");
    assert!(elapsed >= timeout, "{elapsed:?}");
    assert!(elapsed < timeout + Duration::from_secs(2), "{elapsed:?}");
}

#[test]
fn slow_drip_times_out_responder() {
    // Bytes trickling in do not extend the deadline: it covers the whole handshake.
    let timeout = Duration::from_millis(400);
    let short = NetLimits {
        handshake_timeout: timeout,
        ..limits()
    };
    let (addr, server) = spawn_responder(Dir(vec![(CLIENT, key(1).public())]), short);
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).unwrap();
    let drip = thread::spawn(move || {
        stream.write_all(&[80, 0, 0, 0]).unwrap();
        for _ in 0..20 {
            thread::sleep(Duration::from_millis(50));
            if stream.write_all(&[0]).is_err() {
                break;
            }
        }
    });
    let err = server.join().unwrap().err().unwrap();
    assert!(matches!(err, NetError::HandshakeTimeout), "{err:?}");
    assert!(start.elapsed() < timeout + Duration::from_millis(900));
    drip.join().unwrap();
}

#[test]
fn silent_responder_times_out_initiator() {
    let (l, addr) = listener();
    let hold = thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        thread::sleep(Duration::from_millis(800));
        drop(s);
    });
    let k = key(1);
    let me = LocalIdentity {
        role: CLIENT,
        key: &k,
    };
    let start = Instant::now();
    let short = NetLimits {
        handshake_timeout: Duration::from_millis(200),
        ..limits()
    };
    let err = connect(
        addr,
        &me,
        SERVER,
        &key(100).public(),
        short,
        Duration::from_secs(1),
    )
    .err()
    .unwrap();
    assert!(matches!(err, NetError::HandshakeTimeout), "{err:?}");
    assert!(start.elapsed() < Duration::from_millis(700));
    hold.join().unwrap();
}

#[test]
fn connect_refused_is_io() {
    let (l, addr) = listener();
    drop(l);
    let k = key(1);
    let me = LocalIdentity {
        role: CLIENT,
        key: &k,
    };
    let err = connect(
        addr,
        &me,
        SERVER,
        &key(100).public(),
        limits(),
        Duration::from_secs(1),
    )
    .err()
    .unwrap();
    assert!(matches!(err, NetError::Io(_)), "{err:?}");
    assert_eq!(err.reason(), "io");
}

#[test]
fn a_peer_that_goes_away_is_a_disconnect_and_a_bad_frame_is_not() {
    use std::io::{Error, ErrorKind};
    for kind in [
        ErrorKind::ConnectionReset,
        ErrorKind::ConnectionAborted,
        ErrorKind::BrokenPipe,
        ErrorKind::UnexpectedEof,
    ] {
        assert!(NetError::Io(Error::from(kind)).is_disconnect(), "{kind:?}");
    }
    assert!(NetError::Closed.is_disconnect());
    assert!(!NetError::Io(Error::from(ErrorKind::PermissionDenied)).is_disconnect());
    assert!(!NetError::BadMac.is_disconnect());
    assert!(!NetError::FrameTooLarge { len: 2, max: 1 }.is_disconnect());
}

#[test]
fn reasons_are_stable() {
    let all = [
        (NetError::Io(std::io::Error::other("x")), "io"),
        (NetError::Closed, "closed"),
        (NetError::Truncated, "truncated"),
        (
            NetError::FrameTooLarge { len: 2, max: 1 },
            "frame_too_large",
        ),
        (NetError::BadMac, "bad_mac"),
        (
            NetError::MalformedHandshake("x".into()),
            "malformed_handshake",
        ),
        (NetError::UnknownKey { role: CLIENT }, "unknown_key"),
        (
            NetError::Refused(Refusal::UnknownKey),
            "refused_unknown_key",
        ),
        (NetError::BadSignature, "bad_signature"),
        (
            NetError::WrongPeer {
                expected: CLIENT,
                found: SERVER,
            },
            "wrong_peer",
        ),
        (NetError::HandshakeTimeout, "handshake_timeout"),
    ];
    for (e, label) in all {
        assert_eq!(e.reason(), label);
    }
}

// ---- open_frame / seal_frame ----

fn mac() -> MacKey {
    MacKey([42; 32])
}

#[test]
fn open_frame_partial_buffers() {
    let key = mac();
    let mut wire = BytesMut::new();
    seal_frame(&mut wire, &key, 0, b"first body");
    seal_frame(&mut wire, &key, 1, b"");
    seal_frame(&mut wire, &key, 2, b"third");
    let wire = wire.freeze();
    let first_len = 4 + 10 + 16;

    // Byte by byte: nothing until the first frame is complete, nothing consumed meanwhile.
    let mut buf = BytesMut::new();
    let mut bodies = Vec::new();
    let mut counter = 0;
    for (i, b) in wire.iter().enumerate() {
        buf.put_u8(*b);
        let before = buf.len();
        match open_frame(&mut buf, &key, counter, 64).unwrap() {
            None => assert_eq!(buf.len(), before),
            Some(body) => {
                if counter == 0 {
                    assert_eq!(i + 1, first_len);
                }
                assert!(buf.is_empty());
                bodies.push(body);
                counter += 1;
            }
        }
    }
    assert_eq!(bodies, vec![&b"first body"[..], b"", b"third"]);

    // Everything at once: frames come out in order, the rest stays.
    let mut buf = BytesMut::from(&wire[..wire.len() - 1]);
    assert_eq!(
        &open_frame(&mut buf, &key, 0, 64).unwrap().unwrap()[..],
        b"first body"
    );
    assert_eq!(
        &open_frame(&mut buf, &key, 1, 64).unwrap().unwrap()[..],
        b""
    );
    assert!(open_frame(&mut buf, &key, 2, 64).unwrap().is_none());
    assert_eq!(buf.len(), 4 + 5 + 15);
    buf.put_u8(wire[wire.len() - 1]);
    assert_eq!(
        &open_frame(&mut buf, &key, 2, 64).unwrap().unwrap()[..],
        b"third"
    );
    assert!(buf.is_empty());
    assert!(open_frame(&mut buf, &key, 3, 64).unwrap().is_none());
}

#[test]
fn open_frame_checks_counter_key_and_limit() {
    let key = mac();
    let mut wire = BytesMut::new();
    seal_frame(&mut wire, &key, 7, b"body");
    // Wrong counter (replay / reorder / drop).
    let mut buf = wire.clone();
    assert!(matches!(
        open_frame(&mut buf, &key, 6, 64),
        Err(NetError::BadMac)
    ));
    // Wrong key.
    let mut buf = wire.clone();
    assert!(matches!(
        open_frame(&mut buf, &MacKey([43; 32]), 7, 64),
        Err(NetError::BadMac)
    ));
    // Every single-bit flip in body or tag fails; a flip in the length never yields a body.
    for i in 0..wire.len() {
        for bit in 0..8 {
            let mut buf = wire.clone();
            buf[i] ^= 1 << bit;
            match open_frame(&mut buf, &key, 7, 64) {
                Ok(Some(body)) => panic!("byte {i} bit {bit}: accepted {body:?}"),
                Ok(None) => assert!(i < 4),
                Err(NetError::FrameTooLarge { .. }) => assert!(i < 4),
                Err(NetError::BadMac) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    // The limit: a body of exactly the limit is fine, one more byte is refused from the
    // header alone.
    let mut buf = wire.clone();
    assert_eq!(
        &open_frame(&mut buf, &key, 7, 4).unwrap().unwrap()[..],
        b"body"
    );
    let mut buf = BytesMut::from(&wire[..4]);
    assert!(matches!(
        open_frame(&mut buf, &key, 7, 3),
        Err(NetError::FrameTooLarge { len: 4, max: 3 })
    ));
    assert_eq!(buf.len(), 4);
    // The largest header with no limit: incomplete, not a panic.
    let mut buf = BytesMut::from(&u32::MAX.to_le_bytes()[..]);
    assert!(open_frame(&mut buf, &key, 0, usize::MAX).unwrap().is_none());
}

#[test]
fn open_frame_returns_zero_copy_slice() {
    let key = mac();
    let mut buf = BytesMut::new();
    seal_frame(&mut buf, &key, 0, b"zero copy");
    let base = buf.as_ptr() as usize;
    let body = open_frame(&mut buf, &key, 0, 64).unwrap().unwrap();
    assert_eq!(body.as_ptr() as usize, base + 4);
}

#[test]
fn open_frame_never_panics_on_noise() {
    // A small deterministic xorshift generator: arbitrary buffers, lengths and limits.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let key = mac();
    for _ in 0..20_000 {
        let len = (next() % 80) as usize;
        let mut buf: BytesMut = (0..len).map(|_| next() as u8).collect();
        if next() % 2 == 0 && len >= 4 {
            // Plausible small lengths.
            let l = (next() % 64) as u32;
            buf[..4].copy_from_slice(&l.to_le_bytes());
        }
        let max = match next() % 3 {
            0 => 0,
            1 => (next() % 100) as usize,
            _ => usize::MAX,
        };
        let before = buf.len();
        match open_frame(&mut buf, &key, next(), max) {
            Ok(None) | Err(NetError::FrameTooLarge { .. }) => assert_eq!(buf.len(), before),
            Err(NetError::BadMac) => assert!(buf.len() < before),
            Ok(Some(_)) => panic!("forged a MAC by chance"),
            Err(e) => panic!("{e:?}"),
        }
    }
}

/// Times handshakes over loopback: `cargo test -p tagma-net -- --ignored --nocapture`.
#[test]
#[ignore]
fn handshake_cost() {
    let client_key = key(1);
    let server_key = key(100);
    let server_public = server_key.public();
    let (l, addr) = listener();
    let rounds = 500;
    let server = thread::spawn(move || {
        let dir = Dir(vec![(CLIENT, key(1).public())]);
        let me = LocalIdentity {
            role: SERVER,
            key: &server_key,
        };
        for _ in 0..rounds {
            let (s, _) = l.accept().unwrap();
            accept(s, &me, &dir, limits()).unwrap();
        }
    });
    let start = Instant::now();
    for _ in 0..rounds {
        connect_as(addr, CLIENT, &client_key, SERVER, &server_public).unwrap();
    }
    let per = start.elapsed() / rounds;
    server.join().unwrap();
    println!("handshake (connect + 4 messages, loopback): {per:?} per connection");
}

#[test]
fn small_frames_arrive_as_copies_that_free_the_read_buffer() {
    let ((_cr, mut cw), (mut sr, _sw)) = pair();
    for i in 0..1000u32 {
        cw.push(format!("frame {i}").as_bytes()).unwrap();
    }
    let big = vec![7u8; 200_000];
    cw.push(&big).unwrap();
    cw.flush().unwrap();
    // Every small body is kept, as a batch or a cache would keep it: each owns its bytes, so
    // none of them holds the read buffer (and the next read can reuse it).
    let kept: Vec<Bytes> = (0..1000).map(|_| sr.read_frame().unwrap()).collect();
    for (i, body) in kept.into_iter().enumerate() {
        assert_eq!(body, format!("frame {i}").as_bytes());
        assert!(body.is_unique(), "frame {i} shares its buffer");
    }
    // A large body is a slice of a buffer of its own, not a copy.
    let large = sr.read_frame().unwrap();
    assert_eq!(large, &big[..]);
    assert!(!large.is_unique());
}
