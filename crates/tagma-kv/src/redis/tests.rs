//! Command semantics against Redis's documented replies, through the bundle interface the
//! gateway uses.

use bytes::Bytes;
use tagma_resp::{Reply, parse_reply};

use super::*;

fn args(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect()
}

/// Runs one command line (arguments separated by single spaces) and decodes its reply.
fn run_line(store: &mut Store, line: &str) -> Reply {
    let bundle = Bundle {
        entries: vec![Entry::Command(args(line))],
    };
    decode(&execute(store, &bundle)[0])
}

fn decode(bytes: &Bytes) -> Reply {
    let (reply, used) = parse_reply(bytes).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    reply
}

fn int(v: i64) -> Reply {
    Reply::Integer(v)
}

fn bulk(s: &str) -> Reply {
    Reply::bulk(s.to_owned())
}

fn err(s: &str) -> Reply {
    Reply::error(s)
}

/// Checks a script: each line's reply.
fn script(store: &mut Store, lines: &[(&str, Reply)]) {
    for (line, want) in lines {
        assert_eq!(&run_line(store, line), want, "{line}");
    }
}

#[test]
fn strings_behave_as_in_redis() {
    let mut s = Store::default();
    script(
        &mut s,
        &[
            ("GET k", Reply::Nil),
            ("SET k v", Reply::ok()),
            ("get k", bulk("v")),
            ("SET k w NX", Reply::Nil),
            ("SET k w XX GET", bulk("v")),
            ("SET absent x XX", Reply::Nil),
            ("SET k v NX XX", err(args::SYNTAX)),
            ("SET k v EX", err(args::SYNTAX)),
            (
                "SET k v EX 0",
                err("ERR invalid expire time in 'set' command"),
            ),
            ("SET k v EX x", err(args::NOT_INTEGER)),
            ("SET k v BOGUS", err(args::SYNTAX)),
            ("SETNX k z", int(0)),
            ("SETNX n 1", int(1)),
            ("GETSET k new", bulk("w")),
            ("GETDEL k", bulk("new")),
            ("GETDEL k", Reply::Nil),
            ("MSET a 1 b 2", Reply::ok()),
            (
                "MSET a 1 b",
                err("ERR wrong number of arguments for 'mset' command"),
            ),
            (
                "MGET a b nope",
                Reply::Array(vec![bulk("1"), bulk("2"), Reply::Nil]),
            ),
            ("MSETNX a 9 c 3", int(0)),
            ("MSETNX c 3 d 4", int(1)),
            ("EXISTS a a nope", int(2)),
            ("DEL a b nope", int(2)),
            ("APPEND s hello", int(5)),
            ("APPEND s _world", int(11)),
            ("STRLEN s", int(11)),
            ("STRLEN nope", int(0)),
        ],
    );
}

#[test]
fn counters_refuse_what_is_not_an_integer_and_overflow() {
    let mut s = Store::default();
    script(
        &mut s,
        &[
            ("INCR c", int(1)),
            ("INCRBY c 41", int(42)),
            ("DECR c", int(41)),
            ("DECRBY c 50", int(-9)),
            ("GET c", bulk("-9")),
            ("SET t text", Reply::ok()),
            ("INCR t", err(args::NOT_INTEGER)),
            ("INCRBY c 1.5", err(args::NOT_INTEGER)),
            ("SET max 9223372036854775807", Reply::ok()),
            ("INCR max", err(args::OVERFLOW)),
            ("DECRBY c -9223372036854775808", err(args::OVERFLOW)),
        ],
    );
}

#[test]
fn keys_expire_in_agreed_time_and_report_their_ttl() {
    let mut s = Store::default();
    s.advance(10_000);
    script(
        &mut s,
        &[
            ("SET k v EX 10", Reply::ok()),
            ("TTL k", int(10)),
            ("PTTL k", int(10_000)),
            ("SET p v PX 1500", Reply::ok()),
            ("INCR n", int(1)),
            ("EXPIRE n 5", int(1)),
            ("EXPIRE n 50 LT", int(0)),
            ("EXPIRE n 50 GT", int(1)),
            ("PEXPIRE nope 5", int(0)),
            ("TTL nope", int(-2)),
            ("TTL missing", int(-2)),
            ("SET q v", Reply::ok()),
            ("TTL q", int(-1)),
            ("PERSIST q", int(0)),
            ("SET k2 v EX 10", Reply::ok()),
            ("PERSIST k2", int(1)),
            ("TTL k2", int(-1)),
            ("SET keep v PX 5000", Reply::ok()),
            ("SET keep w KEEPTTL", Reply::ok()),
            ("PTTL keep", int(5000)),
            ("INCR n", int(2)),
            ("TTL n", int(50)),
            ("EXPIRE q -1", int(1)),
            ("EXISTS q", int(0)),
        ],
    );
    s.advance(11_499);
    assert_eq!(run_line(&mut s, "PTTL p"), int(1));
    s.advance(11_500);
    assert_eq!(run_line(&mut s, "GET p"), Reply::Nil);
    s.advance(20_000);
    assert_eq!(run_line(&mut s, "EXISTS k keep n"), int(1));
    assert_eq!(run_line(&mut s, "DBSIZE"), int(2), "k2 and n remain");
}

#[test]
fn hashes_behave_as_in_redis() {
    let mut s = Store::default();
    script(
        &mut s,
        &[
            ("HSET h a 1 b 2", int(2)),
            ("HSET h a 3 c 4", int(1)),
            (
                "HSET h a",
                err("ERR wrong number of arguments for 'hset' command"),
            ),
            ("HGET h a", bulk("3")),
            ("HGET h zz", Reply::Nil),
            ("HLEN h", int(3)),
            ("HINCRBY h b 5", int(7)),
            ("HINCRBY h new -1", int(-1)),
            ("HSET h t x", int(1)),
            ("HINCRBY h t 1", err("ERR hash value is not an integer")),
            ("HDEL h a zz", int(1)),
            ("HEXISTS h a", int(0)),
            ("HMGET h b zz", Reply::Array(vec![bulk("7"), Reply::Nil])),
            (
                "HGETALL h",
                Reply::Array(vec![
                    bulk("b"),
                    bulk("7"),
                    bulk("c"),
                    bulk("4"),
                    bulk("new"),
                    bulk("-1"),
                    bulk("t"),
                    bulk("x"),
                ]),
            ),
            ("TYPE h", Reply::Simple("hash".into())),
            ("GET h", err(args::WRONGTYPE)),
            ("INCR h", err(args::WRONGTYPE)),
            ("SET s v", Reply::ok()),
            ("HSET s f v", err(args::WRONGTYPE)),
            ("TYPE s", Reply::Simple("string".into())),
            ("TYPE none", Reply::Simple("none".into())),
            ("HDEL h b c new t", int(4)),
            ("EXISTS h", int(0)),
            ("HGETALL h", Reply::Array(vec![])),
        ],
    );
}

#[test]
fn unknown_commands_and_wrong_arity_are_refused_with_redis_texts() {
    let mut s = Store::default();
    script(
        &mut s,
        &[
            (
                "LPUSH l a",
                err("ERR unknown command 'LPUSH', with args beginning with: 'l' 'a' "),
            ),
            (
                "GET",
                err("ERR wrong number of arguments for 'get' command"),
            ),
            (
                "GET a b",
                err("ERR wrong number of arguments for 'get' command"),
            ),
        ],
    );
}

#[test]
fn scan_walks_every_key_once_and_keys_matches_a_pattern() {
    let mut s = Store::default();
    for i in 0..50 {
        run_line(&mut s, &format!("SET user:{i} x"));
        run_line(&mut s, &format!("HSET obj:{i} f v"));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = "0".to_owned();
    let mut calls = 0;
    loop {
        let Reply::Array(parts) = run_line(&mut s, &format!("SCAN {cursor} MATCH user:* COUNT 7"))
        else {
            panic!("scan replies with an array")
        };
        let (Reply::Bulk(next), Reply::Array(keys)) = (&parts[0], &parts[1]) else {
            panic!("cursor and keys")
        };
        for k in keys {
            let Reply::Bulk(k) = k else { panic!("a key") };
            assert!(k.starts_with(b"user:"));
            assert!(seen.insert(k.clone()), "returned twice");
        }
        calls += 1;
        cursor = String::from_utf8(next.to_vec()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 50);
    assert!(calls >= 100 / 7, "COUNT bounds the work of a call");
    let Reply::Array(parts) = run_line(&mut s, "SCAN 0 COUNT 1000 TYPE hash") else {
        panic!()
    };
    let Reply::Array(hashes) = &parts[1] else {
        panic!("SCAN's second part is the keys")
    };
    assert_eq!(
        hashes.len(),
        50,
        "TYPE hash finds the 50 hashes and no string"
    );
    assert_eq!(
        parts[0],
        bulk("0"),
        "a COUNT above the keys walks them all at once"
    );
    assert_eq!(run_line(&mut s, "SCAN x"), err("ERR invalid cursor"));
    assert_eq!(run_line(&mut s, "SCAN 0 COUNT 0"), err(args::SYNTAX));
    let Reply::Array(keys) = run_line(&mut s, "KEYS user:1?") else {
        panic!()
    };
    assert_eq!(keys.len(), 10);
}

#[test]
fn a_transaction_runs_whole_unless_a_watched_key_changed() {
    let mut s = Store::default();
    run_line(&mut s, "SET balance 10");
    let watch = Bundle {
        entries: vec![Entry::Watch(args("balance absent"))],
    };
    let Reply::Array(digests) = decode(&execute(&mut s, &watch)[0]) else {
        panic!()
    };
    let digests: Vec<KeyDigest> = (digests.iter())
        .map(|d| match d {
            Reply::Bulk(b) => b[..].try_into().unwrap(),
            _ => panic!(),
        })
        .collect();
    let exec = |digests: &[KeyDigest]| Bundle {
        entries: vec![Entry::Exec {
            watched: vec![
                (Bytes::from("balance"), digests[0]),
                (Bytes::from("absent"), digests[1]),
            ],
            commands: vec![
                args("DECRBY balance 3"),
                args("INCR t"),
                args("HGET balance f"),
            ],
        }],
    };
    assert_eq!(
        decode(&execute(&mut s, &exec(&digests))[0]),
        Reply::Array(vec![int(7), int(1), err(args::WRONGTYPE)]),
        "a command's error does not stop the others"
    );
    // The transaction itself changed the watched key: the same watch now fails.
    assert_eq!(
        decode(&execute(&mut s, &exec(&digests))[0]),
        Reply::NilArray
    );
    assert_eq!(run_line(&mut s, "GET balance"), bulk("7"));
    // A key absent at WATCH that appears fails it too.
    let fresh = [key_digest(&s, b"balance"), key_digest(&s, b"absent")];
    run_line(&mut s, "SET absent now");
    assert_eq!(decode(&execute(&mut s, &exec(&fresh))[0]), Reply::NilArray);
}

#[test]
fn unordered_bundles_run_reads_and_refuse_writes() {
    let mut s = Store::default();
    run_line(&mut s, "SET k v");
    let bundle = Bundle {
        entries: vec![
            Entry::Command(args("GET k")),
            Entry::Command(args("SET k w")),
        ],
    };
    assert!(!bundle.is_read_only());
    let replies = query(&s, &bundle);
    assert_eq!(decode(&replies[0]), bulk("v"));
    assert_eq!(
        decode(&replies[1]),
        err("ERR write commands must be ordered")
    );
}
