//! Real namespaces and the emulator carrying TCP between them (needs root, as CI has).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tagma_netns::{LinkFaults, NetnsError, Network, host_addr};

fn network(hosts: usize) -> Option<Network> {
    match Network::create(hosts, 42) {
        Ok(n) => Some(n),
        Err(NetnsError::NotRoot) => {
            eprintln!("not root: network namespaces cannot be created here");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Runs `f` on a thread moved onto host `host`.
fn on_host<T: Send + 'static>(
    net: &Network,
    host: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/run/netns/{}", net.netns(host));
    std::thread::spawn(move || {
        let file = std::fs::File::open(path).unwrap();
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&file),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        f()
    })
}

fn echo_server(net: &Network, host: usize, port: u16) {
    let (tx, rx) = std::sync::mpsc::channel();
    on_host(net, host, move || {
        let l = TcpListener::bind((host_addr(host), port)).unwrap();
        tx.send(()).unwrap();
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    rx.recv().unwrap();
}

/// Connects from `from` to the echo server and round-trips `bytes` bytes.
fn round_trip(
    net: &Network,
    from: usize,
    to: SocketAddr,
    bytes: usize,
) -> std::io::Result<Duration> {
    on_host(net, from, move || {
        let start = Instant::now();
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let data: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
        s.write_all(&data)?;
        let mut back = vec![0u8; bytes];
        s.read_exact(&mut back)?;
        assert_eq!(back, data);
        Ok(start.elapsed())
    })
    .join()
    .unwrap()
}

#[test]
fn hosts_talk_through_the_emulator_and_its_faults_apply() {
    let Some(net) = network(3) else { return };
    echo_server(&net, 1, 7000);
    let server = SocketAddr::from((host_addr(1), 7000));
    // Perfect links: a quick round trip, and the loopback of a host is its own.
    round_trip(&net, 0, server, 100_000).unwrap();
    // A cut link: the connection cannot be made, in one direction only.
    net.set_link(0, 1, LinkFaults::cut());
    assert!(round_trip(&net, 0, server, 10).is_err());
    round_trip(&net, 2, server, 10).unwrap();
    net.heal();
    round_trip(&net, 0, server, 10).unwrap();
    // Delay: 50 ms each way makes a round trip (handshake and echo) take ≥ 200 ms.
    net.set_between(
        &[0],
        &[1],
        LinkFaults {
            delay: Duration::from_millis(50),
            ..LinkFaults::default()
        },
    );
    let took = round_trip(&net, 0, server, 10).unwrap();
    assert!(took >= Duration::from_millis(200), "{took:?}");
    // Loss, duplication and reordering: TCP still delivers every byte in order.
    net.set_all(LinkFaults {
        loss: 0.05,
        duplicate: 0.01,
        delay: Duration::from_millis(5),
        jitter: Duration::from_millis(4),
        ..LinkFaults::default()
    });
    round_trip(&net, 0, server, 200_000).unwrap();
    let stats = net.stats();
    assert!(
        stats.dropped_lost > 0 && stats.duplicated > 0 && stats.dropped_blocked > 0,
        "{stats:?}"
    );
    // A rate limit: 200 kB at 1 Mbit/s takes over a second.
    net.set_all(LinkFaults::default());
    net.set_link(
        1,
        0,
        LinkFaults {
            rate_bps: Some(1_000_000),
            ..LinkFaults::default()
        },
    );
    let took = round_trip(&net, 0, server, 200_000).unwrap();
    assert!(took >= Duration::from_millis(1_500), "{took:?}");
    let names: Vec<String> = (0..3).map(|i| net.netns(i).to_string()).collect();
    drop(net);
    for name in names {
        assert!(
            !std::path::Path::new(&format!("/run/netns/{name}")).exists(),
            "{name} left behind"
        );
    }
}
