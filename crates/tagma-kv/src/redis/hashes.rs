//! Hash commands: `HSET`/`HMSET`, `HGET`, `HMGET`, `HDEL`, `HGETALL`, `HKEYS`, `HVALS`,
//! `HEXISTS`, `HINCRBY`, `HLEN`. A hash whose last field goes is removed.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_resp::Reply;

use super::args::{OVERFLOW, WRONGTYPE, int, int_arg, int_bytes, wrong_arity};
use super::strings::try_reply;
use crate::store::{Store, Ttl, Value, owned};

/// The hash at `key`, or the WRONGTYPE error.
fn hash<'a>(store: &'a Store, key: &[u8]) -> Result<Option<&'a BTreeMap<Bytes, Bytes>>, Reply> {
    match store.get(key) {
        None => Ok(None),
        Some(Value::Hash(h)) => Ok(Some(h)),
        Some(_) => Err(Reply::error(WRONGTYPE)),
    }
}

/// The hash at `key` to change, created empty if absent (a new one is removed again by the
/// caller if it stays empty).
fn hash_mut<'a>(
    store: &'a mut Store,
    key: &Bytes,
) -> Result<&'a mut BTreeMap<Bytes, Bytes>, Reply> {
    hash(store, key)?;
    if store.get(key).is_none() {
        store.insert(key.clone(), Value::Hash(BTreeMap::new()), Ttl::Clear);
    }
    match store.get_mut(key) {
        Some(Value::Hash(h)) => Ok(h),
        _ => Err(Reply::error(WRONGTYPE)),
    }
}

fn set_fields(store: &mut Store, args: &[Bytes]) -> Result<i64, Reply> {
    if !args.len().is_multiple_of(2) || args.len() < 4 {
        return Err(wrong_arity(&String::from_utf8_lossy(&args[0])));
    }
    let h = hash_mut(store, &args[1])?;
    let mut added = 0;
    for pair in args[2..].chunks(2) {
        // Copies, not slices of the request (see `Store::insert`).
        if h.insert(owned(&pair[0]), owned(&pair[1])).is_none() {
            added += 1;
        }
    }
    Ok(added)
}

pub fn hset(store: &mut Store, args: &[Bytes]) -> Reply {
    Reply::Integer(try_reply!(set_fields(store, args)))
}

pub fn hmset(store: &mut Store, args: &[Bytes]) -> Reply {
    try_reply!(set_fields(store, args));
    Reply::ok()
}

pub fn hget(store: &Store, args: &[Bytes]) -> Reply {
    let h = try_reply!(hash(store, &args[1]));
    Reply::bulk_or_nil(h.and_then(|h| h.get(&args[2]).cloned()))
}

pub fn hmget(store: &Store, args: &[Bytes]) -> Reply {
    let h = try_reply!(hash(store, &args[1]));
    Reply::Array(
        (args[2..].iter())
            .map(|f| Reply::bulk_or_nil(h.and_then(|h| h.get(f).cloned())))
            .collect(),
    )
}

pub fn hexists(store: &Store, args: &[Bytes]) -> Reply {
    let h = try_reply!(hash(store, &args[1]));
    Reply::Integer(i64::from(h.is_some_and(|h| h.contains_key(&args[2]))))
}

pub fn hlen(store: &Store, args: &[Bytes]) -> Reply {
    let h = try_reply!(hash(store, &args[1]));
    Reply::Integer(h.map_or(0, |h| h.len()) as i64)
}

pub fn hgetall(store: &Store, args: &[Bytes]) -> Reply {
    fields(store, args, |f, v| vec![f, v])
}

pub fn hkeys(store: &Store, args: &[Bytes]) -> Reply {
    fields(store, args, |f, _| vec![f])
}

pub fn hvals(store: &Store, args: &[Bytes]) -> Reply {
    fields(store, args, |_, v| vec![v])
}

/// The hash at `args[1]`, each field and value given to `pick`, flattened into one array.
fn fields(store: &Store, args: &[Bytes], pick: fn(Reply, Reply) -> Vec<Reply>) -> Reply {
    let h = try_reply!(hash(store, &args[1]));
    let all = h.into_iter().flatten();
    Reply::Array(
        all.flat_map(|(f, v)| pick(Reply::Bulk(f.clone()), Reply::Bulk(v.clone())))
            .collect(),
    )
}

pub fn hdel(store: &mut Store, args: &[Bytes]) -> Reply {
    let key = &args[1];
    if try_reply!(hash(store, key)).is_none() {
        return Reply::Integer(0);
    }
    let Some(Value::Hash(h)) = store.get_mut(key) else {
        return Reply::Integer(0);
    };
    let removed = args[2..].iter().filter(|f| h.remove(*f).is_some()).count();
    if h.is_empty() {
        store.remove(key);
    }
    Reply::Integer(removed as i64)
}

pub fn hincrby(store: &mut Store, args: &[Bytes]) -> Reply {
    let delta = try_reply!(int_arg(&args[3]));
    let current = match try_reply!(hash(store, &args[1])).and_then(|h| h.get(&args[2])) {
        None => 0,
        Some(v) => match int(v) {
            Some(v) => v,
            None => return Reply::error("ERR hash value is not an integer"),
        },
    };
    let Some(value) = current.checked_add(delta) else {
        return Reply::error(OVERFLOW);
    };
    let h = try_reply!(hash_mut(store, &args[1]));
    h.insert(owned(&args[2]), int_bytes(value));
    Reply::Integer(value)
}
