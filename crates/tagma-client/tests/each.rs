//! Collecting every replica's own reply to an unordered request (`invoke_unordered_each`)
//! against stand-in replicas (`replicas`): replies that differ by replica all come back, a
//! replica that is down or silent is reported, and the caller can stop once it has enough.

mod replicas;

use std::time::{Duration, Instant};

use bytes::Bytes;
use replicas::{Behaviour, PRINCIPAL, client_key, cluster};
use tagma_client::{ClientError, ClientOptions, Proxy};
use tagma_wire::ReplicaId;

fn text(reply: &Result<Bytes, ClientError>) -> String {
    match reply {
        Ok(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn every_replica_answers_for_itself_without_a_vote() {
    let cfg = cluster([Behaviour::Echo; 4], 5_000);
    let proxy = Proxy::connect(&cfg, client_key(), ClientOptions::new(PRINCIPAL)).unwrap();
    // Voted, replies that differ everywhere never make a quorum (the unordered call falls
    // back to ordered, which disagrees too).
    assert!(
        proxy
            .invoke_unordered(Bytes::from_static(b"whoami"))
            .is_err()
    );
    let started = Instant::now();
    let replies = proxy
        .invoke_unordered_each(Bytes::from_static(b"whoami"), Duration::from_secs(10))
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "returns once all answered"
    );
    let got: Vec<(ReplicaId, String)> = replies.iter().map(|(id, r)| (*id, text(r))).collect();
    let expected: Vec<(ReplicaId, String)> = (0..4)
        .map(|i| (ReplicaId(i), format!("replica {i}")))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn a_replica_down_or_silent_is_reported_and_the_others_still_count() {
    let cfg = cluster(
        [
            Behaviour::Hung,
            Behaviour::Echo,
            Behaviour::Echo,
            Behaviour::Echo,
        ],
        2_000,
    );
    let proxy = Proxy::connect(&cfg, client_key(), ClientOptions::new(PRINCIPAL)).unwrap();
    // Replica 0 never completes its handshake: not connected, not waited for.
    let started = Instant::now();
    let replies = proxy
        .invoke_unordered_each(Bytes::from_static(b"whoami"), Duration::from_secs(10))
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(&replies[0], (ReplicaId(0), Err(ClientError::NoAnswer { replica: 0, reason }))
            if reason == "not connected"),
        "{:?}",
        replies[0]
    );
    assert_eq!(text(&replies[3].1), "replica 3");

    // Replica 2 is connected but does not answer this one: the call waits for the timeout.
    let started = Instant::now();
    let replies = proxy
        .invoke_unordered_each(Bytes::from_static(b"silent:2"), Duration::from_millis(400))
        .unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(400), "{took:?}");
    assert_eq!(text(&replies[1].1), "silent:2");
    assert!(
        matches!(&replies[2].1, Err(ClientError::NoAnswer { replica: 2, reason })
            if reason.contains("400 ms")),
        "{:?}",
        replies[2]
    );

    // Asked to stop at two replies, it does not wait for the silent one.
    let started = Instant::now();
    let replies = proxy
        .invoke_unordered_each_until(
            Bytes::from_static(b"silent:2"),
            Duration::from_secs(10),
            |got| got.len() >= 2,
        )
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(replies.iter().filter(|(_, r)| r.is_ok()).count(), 2);
}
