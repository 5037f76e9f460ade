//! Redis commands executed by the replicated key-value service: what the Redis-protocol
//! gateway sends. A request carries a [`Bundle`] — commands from many client connections,
//! gathered by the gateway into one ordered request — and its reply holds one RESP2-encoded
//! reply per entry, which the gateway writes to the right connection as it is.
//!
//! An entry is a single command, a transaction (`MULTI` … `EXEC`: its commands run one
//! after the other inside one ordered request, so every replica applies all of them at the
//! same point of the order, with nothing in between), or a `WATCH` (the digests of the keys'
//! current values, which a later `EXEC` compares: a transaction whose watched keys changed
//! meanwhile — in value, type or expiry — does nothing and replies with a nil array).
//!
//! Command semantics follow Redis (replies, error texts), with time as the cluster's agreed
//! time: a key's deadline passes at the same point of the order on every replica.

pub mod args;
pub mod glob;
pub mod hashes;
pub mod keys;
pub mod strings;
pub mod table;

use bytes::Bytes;
use tagma_resp::Reply;

use crate::KvCodecError;
use crate::codec::{Reader, Writer};
use crate::store::{Store, Value};
use table::Handler;

/// A watched key's digest: 16 bytes of BLAKE3 over its type, contents and deadline.
pub type KeyDigest = [u8; 16];

/// One entry of a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// One command: its name and arguments.
    Command(Vec<Bytes>),
    /// A transaction: runs `commands` unless a watched key's digest changed.
    Exec {
        watched: Vec<(Bytes, KeyDigest)>,
        commands: Vec<Vec<Bytes>>,
    },
    /// The digests of these keys now (an array of 16-byte bulk strings).
    Watch(Vec<Bytes>),
}

/// Entries executed in order, each with its own reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bundle {
    pub entries: Vec<Entry>,
}

mod tag {
    pub const COMMAND: u8 = 1;
    pub const EXEC: u8 = 2;
    pub const WATCH: u8 = 3;
}

impl Bundle {
    /// Whether every entry may run unordered (read-only commands only).
    pub fn is_read_only(&self) -> bool {
        self.entries.iter().all(|e| match e {
            Entry::Command(args) => is_read_only(args),
            _ => false,
        })
    }

    /// `u32` entry count, then each entry: its tag, then for a command its arguments (`u32`
    /// count, byte strings); for a transaction the watched keys (`u32` count, key and 16-byte
    /// digest each) and its commands (`u32` count, each as a command); for a watch its keys.
    pub(crate) fn write(&self, w: &mut Writer) {
        w.u32(len32(self.entries.len()));
        for entry in &self.entries {
            match entry {
                Entry::Command(args) => {
                    w.u8(tag::COMMAND);
                    write_args(w, args);
                }
                Entry::Exec { watched, commands } => {
                    w.u8(tag::EXEC);
                    w.u32(len32(watched.len()));
                    for (key, digest) in watched {
                        w.bytes(key);
                        w.0.extend_from_slice(digest);
                    }
                    w.u32(len32(commands.len()));
                    for args in commands {
                        write_args(w, args);
                    }
                }
                Entry::Watch(keys) => {
                    w.u8(tag::WATCH);
                    write_args(w, keys);
                }
            }
        }
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Bundle, KvCodecError> {
        let count = r.u32("bundle entry count")? as usize;
        // Every entry takes at least a tag and a count.
        if count > r.remaining() / 5 {
            return Err(KvCodecError::Malformed("bundle entry count"));
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            entries.push(match r.u8("bundle entry tag")? {
                tag::COMMAND => Entry::Command(read_args(r)?),
                tag::EXEC => {
                    let n = r.u32("watched count")? as usize;
                    if n > r.remaining() / 20 {
                        return Err(KvCodecError::Malformed("watched count"));
                    }
                    let mut watched = Vec::with_capacity(n);
                    for _ in 0..n {
                        let key = r.bytes("watched key")?;
                        let digest: KeyDigest = r.array("watched digest")?;
                        watched.push((key, digest));
                    }
                    let n = r.u32("transaction length")? as usize;
                    if n > r.remaining() / 4 {
                        return Err(KvCodecError::Malformed("transaction length"));
                    }
                    let mut commands = Vec::with_capacity(n);
                    for _ in 0..n {
                        commands.push(read_args(r)?);
                    }
                    Entry::Exec { watched, commands }
                }
                tag::WATCH => Entry::Watch(read_args(r)?),
                _ => return Err(KvCodecError::Malformed("unknown bundle entry tag")),
            });
        }
        Ok(Bundle { entries })
    }
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 2^32 items")
}

fn write_args(w: &mut Writer, args: &[Bytes]) {
    w.u32(len32(args.len()));
    for a in args {
        w.bytes(a);
    }
}

fn read_args(r: &mut Reader<'_>) -> Result<Vec<Bytes>, KvCodecError> {
    let n = r.u32("argument count")? as usize;
    if n > r.remaining() / 4 {
        return Err(KvCodecError::Malformed("argument count"));
    }
    (0..n).map(|_| r.bytes("argument")).collect()
}

/// Whether `args` is a known read-only command.
fn is_read_only(args: &[Bytes]) -> bool {
    args.first()
        .and_then(|name| table::lookup(name))
        .is_some_and(|c| c.is_read_only())
}

/// Runs one command on the state: a known command of the service, with the right arity.
pub fn run(store: &mut Store, args: &[Bytes]) -> Reply {
    match checked(args) {
        Ok(Handler::Read(f)) => f(store, args),
        Ok(Handler::Write(f)) => f(store, args),
        Ok(Handler::Gateway) => gateway_only(args),
        Err(reply) => reply,
    }
}

/// Runs one read-only command; any other gets an error.
pub fn read(store: &Store, args: &[Bytes]) -> Reply {
    match checked(args) {
        Ok(Handler::Read(f)) => f(store, args),
        Ok(Handler::Write(_)) => Reply::error("ERR write commands must be ordered"),
        Ok(Handler::Gateway) => gateway_only(args),
        Err(reply) => reply,
    }
}

fn checked(args: &[Bytes]) -> Result<Handler, Reply> {
    let Some(name) = args.first() else {
        return Err(Reply::error("ERR empty command"));
    };
    let Some(command) = table::lookup(name) else {
        return Err(args::unknown_command(args));
    };
    if !command.arity_ok(args.len()) {
        return Err(args::wrong_arity(command.name));
    }
    Ok(command.handler)
}

/// A connection command inside a transaction: `PING` and `ECHO` answer as they would outside
/// it; the others belong to the gateway.
fn gateway_only(args: &[Bytes]) -> Reply {
    if args[0].eq_ignore_ascii_case(b"ping") {
        return match args.get(1) {
            Some(text) => Reply::Bulk(text.clone()),
            None => Reply::Simple("PONG".to_owned()),
        };
    }
    if args[0].eq_ignore_ascii_case(b"echo") {
        return Reply::Bulk(args[1].clone());
    }
    Reply::error(format!(
        "ERR '{}' is answered by the gateway, not the store",
        String::from_utf8_lossy(&args[0]).to_ascii_lowercase()
    ))
}

/// The digest of `key` now ([`KeyDigest`]); an absent key has its own.
pub fn key_digest(store: &Store, key: &[u8]) -> KeyDigest {
    let mut h = blake3::Hasher::new();
    h.update(b"tagma-kv/watch/v1");
    match store.get(key) {
        None => {
            h.update(&[0]);
        }
        Some(value) => {
            match value {
                Value::String(s) => {
                    h.update(&[1]);
                    h.update(&(s.len() as u64).to_le_bytes());
                    h.update(s);
                }
                Value::Hash(fields) => {
                    h.update(&[2]);
                    h.update(&(fields.len() as u64).to_le_bytes());
                    for (f, v) in fields {
                        h.update(&(f.len() as u64).to_le_bytes());
                        h.update(f);
                        h.update(&(v.len() as u64).to_le_bytes());
                        h.update(v);
                    }
                }
            }
            h.update(&store.deadline(key).unwrap_or(0).to_le_bytes());
        }
    }
    let mut digest = [0; 16];
    digest.copy_from_slice(&h.finalize().as_bytes()[..16]);
    digest
}

/// Executes an ordered bundle: one RESP2 reply per entry.
pub fn execute(store: &mut Store, bundle: &Bundle) -> Vec<Bytes> {
    (bundle.entries.iter())
        .map(|entry| match entry {
            Entry::Command(args) => run(store, args),
            Entry::Exec { watched, commands } => {
                if watched.iter().any(|(k, d)| key_digest(store, k) != *d) {
                    Reply::NilArray
                } else {
                    Reply::Array(commands.iter().map(|args| run(store, args)).collect())
                }
            }
            Entry::Watch(keys) => Reply::Array(
                (keys.iter())
                    .map(|k| Reply::bulk(key_digest(store, k).to_vec()))
                    .collect(),
            ),
        })
        .map(|reply| reply.to_bytes())
        .collect()
}

/// Answers a bundle without ordering: read-only commands run, anything else is refused.
pub fn query(store: &Store, bundle: &Bundle) -> Vec<Bytes> {
    (bundle.entries.iter())
        .map(|entry| match entry {
            Entry::Command(args) => read(store, args),
            _ => Reply::error("ERR transactions and WATCH must be ordered"),
        })
        .map(|reply| reply.to_bytes())
        .collect()
}

#[cfg(test)]
mod tests;
