//! The Redis-protocol gateway against a real 4-replica BFT cluster: real `tagma replica` and
//! `tagma gateway` processes, a RESP client over TCP. (Tests with redis-cli, redis-py and
//! redis-benchmark are in `scripts/gateway-clients.sh`, which CI runs.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tagma_cluster::LocalCluster;
use tagma_core::Mode;
use tagma_resp::{Reply, parse_reply};

mod common;
use common::exe;

static SERIAL: Mutex<()> = Mutex::new(());

/// A `tagma gateway` process, killed when dropped.
struct GatewayProcess {
    child: Child,
    addr: SocketAddr,
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

fn gateway(c: &LocalCluster, extra: &[&str]) -> GatewayProcess {
    let addr = free_addr();
    let child = Command::new(exe())
        .args(["gateway", "--dir"])
        .arg(&c.dir)
        .args(["--listen", &addr.to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tagma gateway");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "the gateway never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    GatewayProcess { child, addr }
}

/// A RESP client.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect to the gateway");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    fn encode(line: &str) -> Vec<u8> {
        let args: Vec<&str> = line.split(' ').collect();
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        out
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// The next reply; `None` if the gateway closed the connection.
    fn read_reply(&mut self) -> Option<Reply> {
        loop {
            if let Some((reply, used)) = parse_reply(&self.buf).expect("a well-formed reply") {
                self.buf.drain(..used);
                return Some(reply);
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn call(&mut self, line: &str) -> Reply {
        self.send_raw(&Self::encode(line));
        self.read_reply().expect("a reply")
    }

    /// Sends every line in one write, then reads the replies.
    fn pipeline(&mut self, lines: &[String]) -> Vec<Reply> {
        let bytes: Vec<u8> = lines.iter().flat_map(|l| Self::encode(l)).collect();
        self.send_raw(&bytes);
        lines
            .iter()
            .map(|_| self.read_reply().expect("a reply"))
            .collect()
    }
}

fn ok() -> Reply {
    Reply::ok()
}

fn int(v: i64) -> Reply {
    Reply::Integer(v)
}

fn bulk(s: &str) -> Reply {
    Reply::bulk(s.to_owned())
}

fn launch() -> LocalCluster {
    LocalCluster::launch(exe(), 4, Mode::Bft, |_| {}).expect("start a local cluster")
}

#[test]
fn redis_commands_pipelines_and_transactions_work_through_the_gateway() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = launch();
    let gw = gateway(&cluster, &[]);
    let mut a = Client::connect(gw.addr);
    // Every family, with Redis's replies.
    let script: Vec<(&str, Reply)> = vec![
        ("PING", Reply::Simple("PONG".into())),
        ("ECHO hi", bulk("hi")),
        ("SELECT 0", ok()),
        ("SET k v", ok()),
        ("GET k", bulk("v")),
        ("SET k w NX", Reply::Nil),
        ("SET k w XX GET", bulk("v")),
        ("APPEND k 42", int(3)),
        ("STRLEN k", int(3)),
        ("INCR n", int(1)),
        ("INCRBY n 9", int(10)),
        ("DECR n", int(9)),
        (
            "INCR k",
            Reply::error("ERR value is not an integer or out of range"),
        ),
        ("MSET a 1 b 2", ok()),
        (
            "MGET a b zz",
            Reply::Array(vec![bulk("1"), bulk("2"), Reply::Nil]),
        ),
        ("EXISTS a b zz", int(2)),
        ("DEL a", int(1)),
        ("HSET h f 1 g 2", int(2)),
        ("HINCRBY h f 4", int(5)),
        ("HGET h f", bulk("5")),
        ("HLEN h", int(2)),
        ("TYPE h", Reply::Simple("hash".into())),
        (
            "GET h",
            Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ),
        ("SET t x EX 100", ok()),
        ("TTL t", int(100)),
        ("PERSIST t", int(1)),
        ("TTL t", int(-1)),
        ("PEXPIRE t 1", int(1)),
        (
            "LPUSH l a",
            Reply::error("ERR unknown command 'LPUSH', with args beginning with: 'l' 'a' "),
        ),
        (
            "GET",
            Reply::error("ERR wrong number of arguments for 'get' command"),
        ),
        ("CLIENT SETNAME me", ok()),
        ("CLIENT GETNAME", bulk("me")),
    ];
    for (line, want) in &script {
        assert_eq!(&a.call(line), want, "{line}");
    }
    // The key with a 1 ms deadline is gone once the agreed time passes it (the next batches
    // carry a later time).
    std::thread::sleep(Duration::from_millis(20));
    a.call("PING");
    assert_eq!(a.call("EXISTS t"), int(0));
    let Reply::Bulk(info) = a.call("INFO replication") else {
        panic!("INFO replies with text")
    };
    let info = String::from_utf8_lossy(&info);
    assert!(
        info.contains("tagma_f:1") && info.contains("tagma_replicas:4"),
        "{info}"
    );

    // A pipeline of 500 commands: replies in order, each write seen by the next read.
    let mut lines = Vec::new();
    for i in 0..250 {
        lines.push(format!("SET p{i} {i}"));
        lines.push(format!("GET p{i}"));
    }
    let replies = a.pipeline(&lines);
    for i in 0..250 {
        assert_eq!(replies[2 * i], ok());
        assert_eq!(replies[2 * i + 1], bulk(&i.to_string()));
    }

    // A transaction runs whole; WATCH makes it conditional.
    assert_eq!(a.call("MULTI"), ok());
    assert_eq!(a.call("INCR tx"), Reply::Simple("QUEUED".into()));
    assert_eq!(a.call("HGET k f"), Reply::Simple("QUEUED".into()));
    assert_eq!(
        a.call("EXEC"),
        Reply::Array(vec![
            int(1),
            Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value")
        ])
    );
    let mut b = Client::connect(gw.addr);
    assert_eq!(a.call("WATCH tx"), ok());
    assert_eq!(
        b.call("INCR tx"),
        int(2),
        "another client changes the watched key"
    );
    assert_eq!(a.call("MULTI"), ok());
    assert_eq!(a.call("SET tx 100"), Reply::Simple("QUEUED".into()));
    assert_eq!(a.call("EXEC"), Reply::NilArray);
    assert_eq!(a.call("GET tx"), bulk("2"));
    assert_eq!(a.call("WATCH tx"), ok());
    assert_eq!(a.call("MULTI"), ok());
    assert_eq!(a.call("SET tx 100"), Reply::Simple("QUEUED".into()));
    assert_eq!(a.call("EXEC"), Reply::Array(vec![ok()]));
    assert_eq!(a.call("MULTI"), ok());
    assert!(a.call("NOSUCH").is_error());
    assert_eq!(
        a.call("EXEC"),
        Reply::error("EXECABORT Transaction discarded because of previous errors.")
    );

    // Many connections at once, each adding to one counter.
    let threads: Vec<_> = (0..200)
        .map(|_| {
            let addr = gw.addr;
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let lines: Vec<String> = (0..10).map(|_| "INCR shared".to_owned()).collect();
                for r in c.pipeline(&lines) {
                    assert!(matches!(r, Reply::Integer(_)), "{r:?}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a client thread");
    }
    assert_eq!(a.call("GET shared"), bulk("2000"));

    // A long pipeline (100,000 commands written while replies are read): the gateway holds
    // at most a bounded number in flight, and answers every one in order.
    let mut long = Client::connect(gw.addr);
    let mut writer = long.stream.try_clone().expect("a second handle");
    let total = 100_000;
    let sender = std::thread::spawn(move || {
        let one = Client::encode("INCR long");
        let mut chunk = Vec::new();
        for _ in 0..1_000 {
            chunk.extend_from_slice(&one);
        }
        for _ in 0..total / 1_000 {
            writer.write_all(&chunk).expect("write the pipeline");
        }
    });
    for i in 1..=total {
        assert_eq!(long.read_reply(), Some(int(i as i64)));
    }
    sender.join().expect("the writer");

    // A broken stream gets Redis's protocol error and is closed; other connections go on.
    let mut bad = Client::connect(gw.addr);
    bad.send_raw(b"*1\r\n$-7\r\n");
    assert_eq!(
        bad.read_reply(),
        Some(Reply::error("ERR Protocol error: invalid bulk length"))
    );
    assert_eq!(bad.read_reply(), None, "closed after a protocol error");
    let mut huge = Client::connect(gw.addr);
    huge.send_raw(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$999999999999\r\n");
    assert!(huge.read_reply().is_some_and(|r| r.is_error()));
    assert_eq!(b.call("GET k"), bulk("w42"));
    assert_eq!(a.call("QUIT"), ok());
    assert_eq!(a.read_reply(), None);
}

#[test]
fn a_password_guards_the_gateway_and_reads_may_go_unordered() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = launch();
    let gw = gateway(&cluster, &["--password", "pw", "--unordered-reads"]);
    let mut c = Client::connect(gw.addr);
    assert_eq!(
        c.call("GET k"),
        Reply::error("NOAUTH Authentication required.")
    );
    assert!(c.call("AUTH wrong").is_error());
    assert_eq!(c.call("AUTH pw"), ok());
    assert_eq!(c.call("SET k v"), ok());
    assert_eq!(c.call("GET k"), bulk("v"));
    let Reply::Bulk(info) = c.call("INFO replication") else {
        panic!("INFO replies with text")
    };
    assert!(String::from_utf8_lossy(&info).contains("tagma_reads:unordered"));
}

#[test]
fn a_replica_killed_under_load_through_the_gateway_loses_no_acknowledged_write() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = launch();
    let gw = gateway(&cluster, &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (addr, stop) = (gw.addr, stop.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut acked = Vec::new();
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let lines: Vec<String> = (0..8)
                        .map(|k| format!("SET w{w}:{} x{}", i + k, i + k))
                        .collect();
                    for (k, r) in c.pipeline(&lines).into_iter().enumerate() {
                        if r == Reply::ok() {
                            acked.push(i + k);
                        }
                    }
                    i += 8;
                }
                (w, acked)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let leader = cluster.current_leader();
    cluster.kill(leader);
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut check = Client::connect(gw.addr);
    let mut total = 0;
    for t in writers {
        let (w, acked) = t.join().expect("a writer");
        total += acked.len();
        for chunk in acked.chunks(200) {
            let lines: Vec<String> = chunk.iter().map(|i| format!("GET w{w}:{i}")).collect();
            for (i, r) in chunk.iter().zip(check.pipeline(&lines)) {
                assert_eq!(r, bulk(&format!("x{i}")), "acknowledged SET w{w}:{i} lost");
            }
        }
    }
    assert!(total > 100, "the load went on: {total} acknowledged writes");
}
