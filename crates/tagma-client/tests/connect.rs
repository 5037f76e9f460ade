//! The proxy against stand-in replicas (`replicas`): real TCP and real handshakes.

mod replicas;

use bytes::Bytes;
use replicas::{Behaviour, PRINCIPAL, client_key, cluster, stranger_key};
use tagma_client::{ClientError, ClientOptions, Proxy};

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
