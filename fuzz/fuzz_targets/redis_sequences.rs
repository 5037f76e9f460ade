//! Structure-aware: sequences of well-formed Redis commands (names from the command table,
//! arguments drawn from a few keys, numbers, option words and short strings), some inside
//! MULTI/EXEC with watched keys, run as ordered key-value requests while the agreed time
//! moves on. Raw bytes rarely decode into a bundle at all; these reach the commands' own
//! argument checks, expiry and hash paths. Besides not panicking, execution must be
//! deterministic (a second service fed the same requests gives the same replies and state
//! digest) and a snapshot must restore the same state.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tagma_exec::{Context, Service};
use tagma_kv::redis::{Bundle, Entry};
use tagma_kv::{KvOp, KvService};
use tagma_wire::{ClientId, ConsensusId, RequestSeq};

const COMMANDS: &[&str] = &[
    "GET",
    "SET",
    "SETNX",
    "GETSET",
    "GETDEL",
    "MGET",
    "MSET",
    "MSETNX",
    "DEL",
    "UNLINK",
    "EXISTS",
    "INCR",
    "DECR",
    "INCRBY",
    "DECRBY",
    "APPEND",
    "STRLEN",
    "TYPE",
    "SCAN",
    "KEYS",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "TTL",
    "PTTL",
    "PERSIST",
    "DBSIZE",
    "HSET",
    "HMSET",
    "HGET",
    "HMGET",
    "HDEL",
    "HGETALL",
    "HKEYS",
    "HVALS",
    "HEXISTS",
    "HINCRBY",
    "HLEN",
    "PING",
    "ECHO",
    "NOSUCHCOMMAND",
];

const WORDS: &[&str] = &[
    "NX", "XX", "GT", "LT", "GET", "EX", "PX", "EXAT", "PXAT", "KEEPTTL", "MATCH", "COUNT", "TYPE",
    "string", "hash", "*", "k?", "[a-c]*", "0",
];

#[derive(Arbitrary, Debug)]
enum Arg {
    Key(u8),
    Int(i64),
    Small(u8),
    Word(u8),
    Text(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Command {
    name: u8,
    args: Vec<Arg>,
}

#[derive(Arbitrary, Debug)]
enum Step {
    One(Command),
    Transaction {
        watched: Vec<u8>,
        commands: Vec<Command>,
    },
    /// Moves the agreed time on by this many milliseconds.
    Wait(u16),
}

fn key(k: u8) -> Bytes {
    Bytes::from(format!("k{}", k % 6))
}

fn args(c: &Command) -> Vec<Bytes> {
    let mut out = vec![Bytes::from_static(
        COMMANDS[usize::from(c.name) % COMMANDS.len()].as_bytes(),
    )];
    for a in c.args.iter().take(12) {
        out.push(match a {
            Arg::Key(k) => key(*k),
            Arg::Int(i) => Bytes::from(i.to_string()),
            Arg::Small(i) => Bytes::from(i.to_string()),
            Arg::Word(w) => Bytes::from_static(WORDS[usize::from(*w) % WORDS.len()].as_bytes()),
            Arg::Text(t) => Bytes::copy_from_slice(&t[..t.len().min(64)]),
        });
    }
    out
}

fuzz_target!(|steps: Vec<Step>| {
    let mut a = KvService::new();
    let mut b = KvService::new();
    let mut now = 1_700_000_000_000u64;
    for (i, step) in steps.iter().take(64).enumerate() {
        let entry = match step {
            Step::Wait(ms) => {
                now += u64::from(*ms);
                continue;
            }
            Step::One(c) => Entry::Command(args(c)),
            Step::Transaction { watched, commands } => Entry::Exec {
                // Digests of the keys as they are now: the transaction runs unless one changed.
                watched: watched
                    .iter()
                    .take(4)
                    .map(|&k| (key(k), tagma_kv::redis::key_digest(a.store(), &key(k))))
                    .collect(),
                commands: commands.iter().take(8).map(args).collect(),
            },
        };
        let request = KvOp::Redis(Bundle {
            entries: vec![entry],
        })
        .encode();
        let ctx = Context {
            client: ClientId(1),
            seq: RequestSeq(i as u64 + 1),
            cid: Some(ConsensusId(i as u64)),
            timestamp_ms: now,
            seed: 0,
        };
        let ra = a.execute_ordered(&request, &ctx);
        let rb = b.execute_ordered(&request, &ctx);
        assert_eq!(ra, rb, "the same request gave two replies");
        let _ = a.execute_unordered(&request, &ctx);
    }
    assert_eq!(
        a.state_digest(),
        b.state_digest(),
        "the same requests gave two states"
    );
    let mut restored = KvService::new();
    restored
        .install_snapshot(&a.snapshot())
        .expect("a snapshot restores");
    assert_eq!(
        restored.state_digest(),
        a.state_digest(),
        "a snapshot restored another state"
    );
});
