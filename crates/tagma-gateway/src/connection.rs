//! One client connection's thread: reads what the client sent, parses every whole command in
//! it (a pipeline), takes each through the session, submits the cluster's part to the
//! connection's shard, and writes the replies in order, coalesced into one write. At most
//! `pipeline_max` commands wait for replies at once; beyond that the thread stops reading
//! until they are answered, so a client cannot make the gateway hold unbounded work.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use tagma_kv::redis::{Entry, KeyDigest};
use tagma_resp::{Protocol, Reply, parse_command, parse_reply};

use crate::server::Shared;
use crate::session::{Session, Shape, Step};
use crate::shard::{Completion, Shard};

/// A reply in the connection's order: ready, or awaited from the cluster (with the shape a
/// RESP3 client gets it in).
enum Pending {
    Ready(Bytes),
    Waiting(Arc<Completion>, Shape),
}

/// How long a read waits; a stopping gateway notices within this time.
const READ_TICK: std::time::Duration = std::time::Duration::from_millis(500);

/// Serves connection `id` until the client leaves, sends `QUIT`, breaks the protocol or the
/// gateway stops.
pub fn serve(mut stream: TcpStream, shared: &Shared, shard: &Shard, id: u64) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(READ_TICK));
    let mut session = Session::new(id, &shared.options.settings);
    let mut conn = Conn {
        shared,
        shard,
        pending: VecDeque::new(),
        out: BytesMut::new(),
        waiting: 0,
        protocol: Protocol::Resp2,
    };
    let mut buf = BytesMut::with_capacity(16 << 10);
    let mut chunk = vec![0u8; 16 << 10];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if shared.stopping.load(Ordering::Relaxed) {
                    return;
                }
                continue;
            }
            Err(_) => return,
        };
        buf.extend_from_slice(&chunk[..n]);
        let open = loop {
            match parse_command(&mut buf, &shared.options.limits) {
                Ok(None) => break true,
                Ok(Some(args)) if args.is_empty() => {}
                Ok(Some(args)) => {
                    shared.commands.fetch_add(1, Ordering::Relaxed);
                    if !conn.step(&mut session, args) {
                        break false;
                    }
                    if conn.waiting >= shared.options.pipeline_max && !conn.flush(&mut stream) {
                        return;
                    }
                }
                Err(e) => {
                    conn.ready(Reply::error(format!("ERR {e}")));
                    break false;
                }
            }
        };
        if buf.len() > shared.options.query_buffer_max {
            conn.ready(Reply::error(format!(
                "ERR Protocol error: a command longer than the query buffer limit ({} bytes)",
                shared.options.query_buffer_max
            )));
            let _ = conn.flush(&mut stream);
            return;
        }
        if !conn.flush(&mut stream) || !open {
            return;
        }
    }
}

struct Conn<'a> {
    shared: &'a Shared,
    shard: &'a Shard,
    pending: VecDeque<Pending>,
    out: BytesMut,
    /// Entries of `pending` awaited from the cluster.
    waiting: usize,
    /// The session's protocol, as of the last command.
    protocol: Protocol,
}

impl Conn<'_> {
    fn ready(&mut self, reply: Reply) {
        let mut out = BytesMut::new();
        reply.encode_as(&mut out, self.protocol);
        self.pending.push_back(Pending::Ready(out.freeze()));
    }

    /// Takes one command; `false` when the connection is to close after the replies.
    fn step(&mut self, session: &mut Session, args: Vec<Bytes>) -> bool {
        let step = session.command(args, &self.shared.options.settings);
        self.protocol = session.protocol();
        match step {
            Step::Reply(reply) => self.ready(reply),
            Step::Close(reply) => {
                self.ready(reply);
                return false;
            }
            Step::Info(sections) => {
                let text = self.shared.info(&sections);
                self.ready(Reply::Bulk(Bytes::from(text)));
            }
            Step::Submit { entry, ordered } => {
                // A read behind this connection's own writes is ordered too, so that the
                // connection reads what it wrote.
                let ordered = ordered || self.waiting > 0;
                self.submit(entry, ordered);
            }
            Step::Watch(keys) => {
                // The digests are needed now: the replies before it come first.
                let done = self.submit_now(Entry::Watch(keys.clone()));
                match done.and_then(|bytes| digests(&bytes, keys.len())) {
                    Ok(digests) => {
                        session.watched(keys, digests);
                        self.ready(Reply::ok());
                    }
                    Err(why) => self.ready(cluster_error(&why)),
                }
            }
        }
        true
    }

    fn submit(&mut self, entry: Entry, ordered: bool) {
        let bytes = entry_bytes(&entry);
        let max = self.shared.options.request_bytes_max;
        if bytes > max {
            self.ready(Reply::error(format!(
                "ERR the command takes {bytes} bytes, more than the cluster's limits.request_bytes_max ({max})"
            )));
            return;
        }
        let shape = Shape::of(&entry);
        let done = self.shard.submit(entry, ordered, bytes);
        self.pending.push_back(Pending::Waiting(done, shape));
        self.waiting += 1;
    }

    /// Submits an ordered entry and waits for its reply.
    fn submit_now(&mut self, entry: Entry) -> Result<Bytes, String> {
        let bytes = entry_bytes(&entry);
        self.shard.submit(entry, true, bytes).wait()
    }

    /// Writes every pending reply, in order, waiting for those the cluster still owes.
    fn flush(&mut self, stream: &mut TcpStream) -> bool {
        while let Some(p) = self.pending.pop_front() {
            match p {
                Pending::Ready(bytes) => self.out.extend_from_slice(&bytes),
                Pending::Waiting(done, shape) => {
                    self.waiting -= 1;
                    match (done.wait(), self.protocol) {
                        // The store's RESP2 bytes go out as they are.
                        (Ok(bytes), Protocol::Resp2) => self.out.extend_from_slice(&bytes),
                        (Ok(bytes), Protocol::Resp3) => match parse_reply(&bytes) {
                            Ok(Some((reply, _))) => {
                                shape.apply(reply).encode_as(&mut self.out, Protocol::Resp3)
                            }
                            _ => cluster_error("an undecodable reply")
                                .encode_as(&mut self.out, Protocol::Resp3),
                        },
                        (Err(why), protocol) => {
                            cluster_error(&why).encode_as(&mut self.out, protocol)
                        }
                    }
                }
            }
        }
        if self.out.is_empty() {
            return true;
        }
        let ok = stream.write_all(&self.out).is_ok();
        self.out.clear();
        ok
    }
}

/// Bytes an entry takes in a bundle, about.
fn entry_bytes(entry: &Entry) -> usize {
    let args = |a: &[Bytes]| 4 + a.iter().map(|x| 4 + x.len()).sum::<usize>();
    match entry {
        Entry::Command(a) | Entry::Watch(a) => 1 + args(a),
        Entry::Exec { watched, commands } => {
            9 + watched.iter().map(|(k, _)| 20 + k.len()).sum::<usize>()
                + commands.iter().map(|c| args(c)).sum::<usize>()
        }
    }
}

/// The digests in a `WATCH` entry's reply.
fn digests(reply: &[u8], keys: usize) -> Result<Vec<KeyDigest>, String> {
    let parsed = parse_reply(reply).map_err(|e| e.to_string())?;
    let Some((Reply::Array(items), _)) = parsed else {
        return Err("unexpected reply to WATCH".to_owned());
    };
    let digests: Option<Vec<KeyDigest>> = (items.iter())
        .map(|i| match i {
            Reply::Bulk(b) => <KeyDigest>::try_from(&b[..]).ok(),
            _ => None,
        })
        .collect();
    digests
        .filter(|d| d.len() == keys)
        .ok_or_else(|| "unexpected reply to WATCH".to_owned())
}

/// The reply when the cluster gave none.
fn cluster_error(why: &str) -> Reply {
    Reply::error(format!("ERR tagma cluster: {why}"))
}
