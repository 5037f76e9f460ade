//! String commands: `GET`, `SET` and its options, `SETNX`, `GETSET`, `GETDEL`, `MGET`, `MSET`,
//! `MSETNX`, `INCR`/`DECR`/`INCRBY`/`DECRBY`, `APPEND`, `STRLEN`. Arity is checked before a
//! handler runs ([`super::table`]); a handler checks everything else.

use bytes::{Bytes, BytesMut};
use tagma_resp::Reply;

use super::args::{
    OVERFLOW, STRING_MAX, SYNTAX, TOO_LONG, WRONGTYPE, deadline, int, int_arg, int_bytes,
    invalid_expire, is, wrong_arity,
};
use crate::store::{Store, Ttl, Value};

/// The string at `key` or the WRONGTYPE error.
fn string<'a>(store: &'a Store, key: &[u8]) -> Result<Option<&'a Bytes>, Reply> {
    store.get_string(key).map_err(|_| Reply::error(WRONGTYPE))
}

macro_rules! try_reply {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(reply) => return reply,
        }
    };
}
pub(crate) use try_reply;

pub fn get(store: &Store, args: &[Bytes]) -> Reply {
    Reply::bulk_or_nil(try_reply!(string(store, &args[1])).cloned())
}

pub fn strlen(store: &Store, args: &[Bytes]) -> Reply {
    let len = try_reply!(string(store, &args[1])).map_or(0, |s| s.len());
    Reply::Integer(len as i64)
}

pub fn mget(store: &Store, args: &[Bytes]) -> Reply {
    // A key of another type reads as nil.
    Reply::Array(
        (args[1..].iter())
            .map(|k| Reply::bulk_or_nil(store.get_string(k).ok().flatten().cloned()))
            .collect(),
    )
}

/// `SET key value [NX | XX] [GET] [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL]`.
pub fn set(store: &mut Store, args: &[Bytes]) -> Reply {
    let (key, value) = (&args[1], &args[2]);
    let (mut nx, mut xx, mut get, mut keep) = (false, false, false, false);
    let mut expiry: Option<(i64, i64, bool)> = None;
    let mut i = 3;
    while i < args.len() {
        let a = &args[i];
        let has_next = i + 1 < args.len();
        if is(a, "NX") && !xx {
            nx = true;
        } else if is(a, "XX") && !nx {
            xx = true;
        } else if is(a, "GET") {
            get = true;
        } else if is(a, "KEEPTTL") && expiry.is_none() {
            keep = true;
        } else if has_next && expiry.is_none() && !keep {
            let (unit, absolute) = if is(a, "EX") {
                (1000, false)
            } else if is(a, "PX") {
                (1, false)
            } else if is(a, "EXAT") {
                (1000, true)
            } else if is(a, "PXAT") {
                (1, true)
            } else {
                return Reply::error(SYNTAX);
            };
            let amount = match int(&args[i + 1]) {
                Some(v) => v,
                None => return Reply::error(super::args::NOT_INTEGER),
            };
            expiry = Some((amount, unit, absolute));
            i += 1;
        } else {
            return Reply::error(SYNTAX);
        }
        i += 1;
    }
    let ttl = match expiry {
        Some((amount, unit, absolute)) => {
            match deadline(store.now_ms(), amount, unit, absolute).filter(|_| amount > 0) {
                Some(at) if at > 0 => Ttl::At(at as u64),
                _ => return invalid_expire("set"),
            }
        }
        None if keep => Ttl::Keep,
        None => Ttl::Clear,
    };
    if value.len() > STRING_MAX {
        return Reply::error(TOO_LONG);
    }
    let old = if get {
        try_reply!(string(store, key)).cloned()
    } else {
        None
    };
    let exists = store.get(key).is_some();
    if (nx && exists) || (xx && !exists) {
        return if get {
            Reply::bulk_or_nil(old)
        } else {
            Reply::Nil
        };
    }
    store.insert(key.clone(), Value::String(value.clone()), ttl);
    if get {
        Reply::bulk_or_nil(old)
    } else {
        Reply::ok()
    }
}

pub fn setnx(store: &mut Store, args: &[Bytes]) -> Reply {
    if store.get(&args[1]).is_some() {
        return Reply::Integer(0);
    }
    store.insert(args[1].clone(), Value::String(args[2].clone()), Ttl::Clear);
    Reply::Integer(1)
}

pub fn getset(store: &mut Store, args: &[Bytes]) -> Reply {
    let old = try_reply!(string(store, &args[1])).cloned();
    store.insert(args[1].clone(), Value::String(args[2].clone()), Ttl::Clear);
    Reply::bulk_or_nil(old)
}

pub fn getdel(store: &mut Store, args: &[Bytes]) -> Reply {
    let old = try_reply!(string(store, &args[1])).cloned();
    if old.is_some() {
        store.remove(&args[1]);
    }
    Reply::bulk_or_nil(old)
}

pub fn mset(store: &mut Store, args: &[Bytes]) -> Reply {
    if args.len().is_multiple_of(2) {
        return wrong_arity(&String::from_utf8_lossy(&args[0]));
    }
    for pair in args[1..].chunks(2) {
        store.insert(pair[0].clone(), Value::String(pair[1].clone()), Ttl::Clear);
    }
    Reply::ok()
}

pub fn msetnx(store: &mut Store, args: &[Bytes]) -> Reply {
    if args.len().is_multiple_of(2) {
        return wrong_arity("msetnx");
    }
    if args[1..]
        .chunks(2)
        .any(|pair| store.get(&pair[0]).is_some())
    {
        return Reply::Integer(0);
    }
    mset(store, args);
    Reply::Integer(1)
}

/// Adds `delta` to the integer at `key` (absent: 0); the key keeps its deadline.
fn add(store: &mut Store, key: &Bytes, delta: i64) -> Reply {
    let current = match try_reply!(string(store, key)) {
        None => 0,
        Some(s) => match int(s) {
            Some(v) => v,
            None => return Reply::error(super::args::NOT_INTEGER),
        },
    };
    let Some(value) = current.checked_add(delta) else {
        return Reply::error(OVERFLOW);
    };
    store.insert(key.clone(), Value::String(int_bytes(value)), Ttl::Keep);
    Reply::Integer(value)
}

pub fn incr(store: &mut Store, args: &[Bytes]) -> Reply {
    add(store, &args[1], 1)
}

pub fn decr(store: &mut Store, args: &[Bytes]) -> Reply {
    add(store, &args[1], -1)
}

pub fn incrby(store: &mut Store, args: &[Bytes]) -> Reply {
    let delta = try_reply!(int_arg(&args[2]));
    add(store, &args[1], delta)
}

pub fn decrby(store: &mut Store, args: &[Bytes]) -> Reply {
    let delta = try_reply!(int_arg(&args[2]));
    match delta.checked_neg() {
        Some(delta) => add(store, &args[1], delta),
        None => Reply::error(OVERFLOW),
    }
}

pub fn append(store: &mut Store, args: &[Bytes]) -> Reply {
    let current = try_reply!(string(store, &args[1]));
    let len = current.map_or(0, |s| s.len()) + args[2].len();
    if len > STRING_MAX {
        return Reply::error(TOO_LONG);
    }
    let mut joined = BytesMut::with_capacity(len);
    if let Some(s) = current {
        joined.extend_from_slice(s);
    }
    joined.extend_from_slice(&args[2]);
    store.insert(args[1].clone(), Value::String(joined.freeze()), Ttl::Keep);
    Reply::Integer(len as i64)
}
