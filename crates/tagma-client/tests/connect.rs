//! The proxy against stand-in replicas (`replicas`): real TCP and real handshakes.

mod replicas;

use std::time::{Duration, Instant};

use bytes::Bytes;
use replicas::{Behaviour, PRINCIPAL, client_key, cluster, cluster_with, stranger_key};
use tagma_client::{ClientError, ClientOptions, Proxy};
use tagma_wire::{ReplicaId, RequestKind};

#[test]
fn a_key_the_replicas_do_not_know_is_reported_as_the_key_not_as_unreachable() {
    let cfg = cluster([Behaviour::Echo; 4], 5_000);
    let err = Proxy::connect(&cfg, stranger_key(), ClientOptions::new(PRINCIPAL))
        .err()
        .expect("the replicas refuse a key they do not know");
    assert!(
        matches!(&err, ClientError::UnknownKey { principal, refused_by, .. }
            if *principal == PRINCIPAL && refused_by == "0, 1, 2, 3"),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("do not know this client's key"), "{text}");
    assert!(text.contains(&stranger_key().public().to_hex()), "{text}");
    assert!(!text.contains("start the replicas"), "{text}");
    // The configured key gets through to the same replicas.
    let proxy = Proxy::connect(&cfg, client_key(), ClientOptions::new(PRINCIPAL)).unwrap();
    let reply = proxy.invoke_ordered(Bytes::from_static(b"ping")).unwrap();
    assert_eq!(&reply[..], b"ping");
}

/// A stopped replica (SIGSTOP) accepts TCP connections, but nothing answers the handshake:
/// the proxy starts and serves calls with the other three, a reply quorum, without waiting
/// for it (the handshake timeout here is 10 s).
#[test]
fn a_replica_that_never_answers_the_handshake_holds_up_neither_connect_nor_calls() {
    let cfg = cluster(
        [
            Behaviour::Hung,
            Behaviour::Echo,
            Behaviour::Echo,
            Behaviour::Echo,
        ],
        10_000,
    );
    let started = Instant::now();
    let proxy = Proxy::connect(&cfg, client_key(), ClientOptions::new(PRINCIPAL)).unwrap();
    let connected = started.elapsed();
    let reply = proxy.invoke_ordered(Bytes::from_static(b"ping")).unwrap();
    assert_eq!(&reply[..], b"ping");
    let called = started.elapsed();
    // What `tagma status` asks: the installed view, then every replica's state.
    let view = proxy.current_view(Duration::from_secs(5)).unwrap();
    assert_eq!(view, cfg.initial_view());
    let states = proxy.query_states(Duration::from_secs(5));
    let queried = started.elapsed();
    assert_eq!(states.len(), 4);
    for (id, state) in &states {
        assert_eq!(state.is_some(), *id != ReplicaId(0), "replica {id}");
    }
    assert!(
        queried < Duration::from_secs(3),
        "connect {connected:?}, ordered call {called:?}, view and states {queried:?}"
    );
}

/// A reply that comes later than the invocation timeout: a plain call gives up at the
/// timeout; a call made for a deferred reply waits as long as it was told to.
#[test]
fn a_call_for_a_deferred_reply_waits_beyond_the_invocation_timeout() {
    let cfg = cluster_with(
        [Behaviour::Echo; 4],
        5_000,
        "client_invoke_timeout_ms = 300\nclient_retransmit_ms = 5000",
    );
    let proxy = Proxy::connect(&cfg, client_key(), ClientOptions::new(PRINCIPAL)).unwrap();
    let started = Instant::now();
    let err = proxy
        .invoke_ordered(Bytes::from_static(b"sleep:900"))
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Timeout { after_ms: 300, .. }),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_millis(850));

    let proxy = Proxy::connect(&cfg, client_key(), ClientOptions::new(PRINCIPAL)).unwrap();
    let reply = proxy
        .invoke_ordered_waiting(
            Bytes::from_static(b"sleep:900"),
            Duration::from_millis(2_000),
        )
        .unwrap();
    assert_eq!(&reply[..], b"sleep:900");
}

/// A proxy with at most four requests in flight that sends every request to every stand-in
/// (they answer only what they receive: no leader relays requests here).
fn four_in_flight(cfg: &tagma_config::ValidConfig) -> Proxy {
    let mut options = ClientOptions::new(PRINCIPAL);
    options.outstanding_max = 4;
    options.leader_first = false;
    Proxy::connect(cfg, client_key(), options).unwrap()
}

/// Replicas keep only the replies of a client with the highest sequence numbers, so an
/// unanswered ordered request holds back every ordered request `outstanding_max` or more
/// above it, however many of those between them have completed: otherwise its reply could
/// be evicted before a retransmission asks for it again.
#[test]
fn an_unanswered_ordered_request_holds_the_window_of_later_ones() {
    let cfg = cluster_with(
        [Behaviour::Echo; 4],
        5_000,
        "client_invoke_timeout_ms = 400\nclient_retransmit_ms = 5000",
    );
    let proxy = four_in_flight(&cfg);
    let stuck = proxy
        .invoke_async(Bytes::from_static(b"never"), RequestKind::Ordered)
        .unwrap();
    // Three more fit in the window (sequence numbers 2 to 4) and complete.
    for _ in 0..3 {
        let reply = proxy.invoke_ordered(Bytes::from_static(b"x")).unwrap();
        assert_eq!(&reply[..], b"x");
    }
    // Only one request is in flight now, but a fifth would be 4 above the unanswered one.
    let started = Instant::now();
    let err = proxy.invoke_ordered(Bytes::from_static(b"y")).unwrap_err();
    assert!(
        matches!(err, ClientError::Timeout { replies: 0, .. }),
        "{err}"
    );
    assert!(started.elapsed() >= Duration::from_millis(400));
    // Unordered requests have no window: they still go.
    let reply = proxy.invoke_unordered(Bytes::from_static(b"z")).unwrap();
    assert_eq!(&reply[..], b"z");
    assert!(matches!(
        stuck.wait(),
        Err(ClientError::Timeout { replies: 0, .. })
    ));

    // A request whose reply is deferred (a blocked take) holds a slot but not the window:
    // the client's later requests go on while it waits.
    let proxy = four_in_flight(&cfg);
    let _blocked = proxy
        .invoke_async_waiting(
            Bytes::from_static(b"never"),
            RequestKind::Ordered,
            Duration::from_secs(30),
        )
        .unwrap();
    for _ in 0..8 {
        let reply = proxy.invoke_ordered(Bytes::from_static(b"x")).unwrap();
        assert_eq!(&reply[..], b"x");
    }
}
