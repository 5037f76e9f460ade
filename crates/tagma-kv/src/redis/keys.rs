//! Commands on keys of any type: `DEL`/`UNLINK`, `EXISTS`, `TYPE`, `EXPIRE` and its kin,
//! `TTL`, `PTTL`, `PERSIST`, `SCAN`, `KEYS`, `DBSIZE`. Deadlines are in the cluster's agreed
//! time ([`Store::now_ms`]).

use bytes::Bytes;
use tagma_resp::Reply;

use super::args::{SYNTAX, deadline, int_arg, is};
use super::glob;
use super::strings::try_reply;
use crate::store::Store;

/// The most keys `KEYS` returns; beyond, it refuses and names `SCAN`.
pub const KEYS_MAX: usize = 100_000;
/// The most keys one `SCAN` call looks at, whatever `COUNT` asks.
pub const SCAN_COUNT_MAX: usize = 10_000;

pub fn del(store: &mut Store, args: &[Bytes]) -> Reply {
    let removed = args[1..]
        .iter()
        .filter(|k| store.remove(k).is_some())
        .count();
    Reply::Integer(removed as i64)
}

pub fn exists(store: &Store, args: &[Bytes]) -> Reply {
    let n = args[1..].iter().filter(|k| store.get(k).is_some()).count();
    Reply::Integer(n as i64)
}

pub fn type_of(store: &Store, args: &[Bytes]) -> Reply {
    Reply::Simple(
        store
            .get(&args[1])
            .map_or("none", |v| v.type_name())
            .to_owned(),
    )
}

pub fn dbsize(store: &Store, _args: &[Bytes]) -> Reply {
    Reply::Integer(store.len() as i64)
}

/// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT` with `NX | XX | GT | LT`.
fn expire_with(store: &mut Store, args: &[Bytes], unit_ms: i64, absolute: bool) -> Reply {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let amount = try_reply!(int_arg(&args[2]));
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for a in &args[3..] {
        if is(a, "NX") {
            nx = true;
        } else if is(a, "XX") {
            xx = true;
        } else if is(a, "GT") {
            gt = true;
        } else if is(a, "LT") {
            lt = true;
        } else {
            return Reply::error(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(a)
            ));
        }
    }
    if nx && (xx || gt || lt) {
        return Reply::error("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return Reply::error("ERR GT and LT options at the same time are not compatible");
    }
    let Some(at) = deadline(store.now_ms(), amount, unit_ms, absolute) else {
        return Reply::error(format!("ERR invalid expire time in '{name}' command"));
    };
    let key = &args[1];
    if store.get(key).is_none() {
        return Reply::Integer(0);
    }
    // No deadline counts as an infinite one for GT and LT.
    let current = store.deadline(key);
    let allowed = (!nx || current.is_none())
        && (!xx || current.is_some())
        && (!gt || current.is_some_and(|c| at > c as i64))
        && (!lt || current.is_none_or(|c| at < c as i64));
    if !allowed {
        return Reply::Integer(0);
    }
    if at <= store.now_ms() as i64 {
        store.remove(key);
    } else {
        store.set_expiry(key, Some(at as u64));
    }
    Reply::Integer(1)
}

pub fn expire(store: &mut Store, args: &[Bytes]) -> Reply {
    expire_with(store, args, 1000, false)
}

pub fn pexpire(store: &mut Store, args: &[Bytes]) -> Reply {
    expire_with(store, args, 1, false)
}

pub fn expireat(store: &mut Store, args: &[Bytes]) -> Reply {
    expire_with(store, args, 1000, true)
}

pub fn pexpireat(store: &mut Store, args: &[Bytes]) -> Reply {
    expire_with(store, args, 1, true)
}

/// The time `key` has left in ms: `Err(-2)` absent, `Err(-1)` no deadline.
fn left_ms(store: &Store, key: &[u8]) -> Result<u64, i64> {
    store.get(key).ok_or(-2)?;
    let at = store.deadline(key).ok_or(-1)?;
    Ok(at.saturating_sub(store.now_ms()))
}

pub fn ttl(store: &Store, args: &[Bytes]) -> Reply {
    match left_ms(store, &args[1]) {
        Ok(ms) => Reply::Integer(((ms + 500) / 1000) as i64),
        Err(code) => Reply::Integer(code),
    }
}

pub fn pttl(store: &Store, args: &[Bytes]) -> Reply {
    match left_ms(store, &args[1]) {
        Ok(ms) => Reply::Integer(ms as i64),
        Err(code) => Reply::Integer(code),
    }
}

pub fn persist(store: &mut Store, args: &[Bytes]) -> Reply {
    let key = &args[1];
    if store.get(key).is_none() || store.deadline(key).is_none() {
        return Reply::Integer(0);
    }
    store.set_expiry(key, None);
    Reply::Integer(1)
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`: looks at about `count` keys
/// (default 10) in scan order from the cursor, and returns the next cursor (0: done) with
/// the keys among them that match. Keys sharing a hash are never split between calls.
pub fn scan(store: &Store, args: &[Bytes]) -> Reply {
    let cursor = match std::str::from_utf8(&args[1])
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
    {
        Some(c) => c,
        None => return Reply::error("ERR invalid cursor"),
    };
    let (mut pattern, mut count, mut kind): (Option<&Bytes>, usize, Option<&Bytes>) =
        (None, 10, None);
    let mut i = 2;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Reply::error(SYNTAX);
        }
        let value = &args[i + 1];
        if is(&args[i], "MATCH") {
            pattern = Some(value);
        } else if is(&args[i], "COUNT") {
            match try_reply!(int_arg(value)) {
                n if n >= 1 => count = (n as usize).min(SCAN_COUNT_MAX),
                _ => return Reply::error(SYNTAX),
            }
        } else if is(&args[i], "TYPE") {
            kind = Some(value);
        } else {
            return Reply::error(SYNTAX);
        }
        i += 2;
    }
    let mut keys = Vec::new();
    let mut next = 0;
    let mut last_hash = None;
    for (looked, (hash, key)) in store.scan_from(cursor).enumerate() {
        if looked >= count && last_hash != Some(hash) {
            next = hash;
            break;
        }
        last_hash = Some(hash);
        let type_ok = kind.is_none_or(|k| {
            store
                .get(key)
                .is_some_and(|v| k.eq_ignore_ascii_case(v.type_name().as_bytes()))
        });
        if type_ok && pattern.is_none_or(|p| glob::matches(p, key)) {
            keys.push(Reply::Bulk(key.clone()));
        }
    }
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(keys)])
}

pub fn keys(store: &Store, args: &[Bytes]) -> Reply {
    let pattern = &args[1];
    let mut found = Vec::new();
    for key in store.keys() {
        if glob::matches(pattern, key) {
            if found.len() == KEYS_MAX {
                return Reply::error(format!(
                    "ERR KEYS matches more than {KEYS_MAX} keys; use SCAN to walk them"
                ));
            }
            found.push(Reply::Bulk(key.clone()));
        }
    }
    Reply::Array(found)
}
