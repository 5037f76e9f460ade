//! The Redis commands tagma knows: name, arity, flags, key positions, group, summary, and
//! who runs each — the replicated service (a read or a write) or the gateway itself
//! (connection state: `PING`, `AUTH`, `MULTI`, ...). The gateway and the service read the
//! same table, so both agree on what exists, what is read-only and how many arguments it
//! takes; `COMMAND` answers from it.

use bytes::Bytes;
use tagma_resp::Reply;

use super::{hashes, keys, strings};
use crate::store::Store;

/// Who runs a command.
#[derive(Clone, Copy)]
pub enum Handler {
    /// The service, without changing the state (may run unordered).
    Read(fn(&Store, &[Bytes]) -> Reply),
    /// The service, ordered.
    Write(fn(&mut Store, &[Bytes]) -> Reply),
    /// The gateway: the command is about the connection, not the data.
    Gateway,
}

/// One command.
#[derive(Clone, Copy)]
pub struct Command {
    /// Lower case.
    pub name: &'static str,
    /// Redis's convention: `n` exactly `n` arguments (the name counts), `-n` at least `n`.
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub group: &'static str,
    pub summary: &'static str,
    pub handler: Handler,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Command {
    pub fn is_read_only(&self) -> bool {
        matches!(self.handler, Handler::Read(_))
    }

    /// Whether `argc` arguments (the name included) fit the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// The command's entry in a `COMMAND` or `COMMAND INFO` reply.
    pub fn info(&self) -> Reply {
        let text = |s: &str| Reply::Simple(s.to_owned());
        Reply::Array(vec![
            Reply::bulk(self.name),
            Reply::Integer(i64::from(self.arity)),
            Reply::Array(self.flags.iter().map(|f| text(f)).collect()),
            Reply::Integer(i64::from(self.first_key)),
            Reply::Integer(i64::from(self.last_key)),
            Reply::Integer(i64::from(self.step)),
            Reply::Array(vec![text(&format!("@{}", self.group))]),
            Reply::Array(vec![]),
            Reply::Array(vec![]),
            Reply::Array(vec![]),
        ])
    }

    /// The command's entry in a `COMMAND DOCS` reply (name, then its documentation).
    pub fn docs(&self) -> [Reply; 2] {
        [
            Reply::bulk(self.name),
            Reply::Array(vec![
                Reply::bulk("summary"),
                Reply::bulk(self.summary),
                Reply::bulk("since"),
                Reply::bulk("1.0.0"),
                Reply::bulk("group"),
                Reply::bulk(self.group),
            ]),
        ]
    }
}

macro_rules! command {
    ($name:literal, $arity:expr, [$($flag:literal),*], $first:expr, $last:expr, $step:expr, $group:literal, $summary:literal, $handler:expr) => {
        Command {
            name: $name,
            arity: $arity,
            flags: &[$($flag),*],
            first_key: $first,
            last_key: $last,
            step: $step,
            group: $group,
            summary: $summary,
            handler: $handler,
        }
    };
}

use Handler::{Gateway, Read, Write};

/// Every command, in alphabetical order.
pub static COMMANDS: &[Command] = &[
    command!(
        "append",
        3,
        ["write", "denyoom"],
        1,
        1,
        1,
        "string",
        "Appends a string to the value of a key.",
        Write(strings::append)
    ),
    command!(
        "auth",
        -2,
        ["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        0,
        "connection",
        "Authenticates the connection (the gateway's password).",
        Gateway
    ),
    command!(
        "client",
        -2,
        ["loading", "stale"],
        0,
        0,
        0,
        "connection",
        "CLIENT ID, GETNAME, SETNAME: the connection's id and name.",
        Gateway
    ),
    command!(
        "command",
        -1,
        ["loading", "stale"],
        0,
        0,
        0,
        "server",
        "Details about the commands the gateway knows.",
        Gateway
    ),
    command!(
        "dbsize",
        1,
        ["readonly", "fast"],
        0,
        0,
        0,
        "server",
        "The number of keys.",
        Read(keys::dbsize)
    ),
    command!(
        "decr",
        2,
        ["write", "denyoom", "fast"],
        1,
        1,
        1,
        "string",
        "Decrements the integer value of a key by one.",
        Write(strings::decr)
    ),
    command!(
        "decrby",
        3,
        ["write", "denyoom", "fast"],
        1,
        1,
        1,
        "string",
        "Decrements the integer value of a key by a number.",
        Write(strings::decrby)
    ),
    command!(
        "del",
        -2,
        ["write"],
        1,
        -1,
        1,
        "generic",
        "Deletes keys.",
        Write(keys::del)
    ),
    command!(
        "discard",
        1,
        ["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
        "transactions",
        "Discards a transaction.",
        Gateway
    ),
    command!(
        "echo",
        2,
        ["fast"],
        0,
        0,
        0,
        "connection",
        "Returns the given string.",
        Gateway
    ),
    command!(
        "exec",
        1,
        ["noscript", "loading", "stale"],
        0,
        0,
        0,
        "transactions",
        "Executes the queued commands as one ordered request.",
        Gateway
    ),
    command!(
        "exists",
        -2,
        ["readonly", "fast"],
        1,
        -1,
        1,
        "generic",
        "Counts the keys that exist.",
        Read(keys::exists)
    ),
    command!(
        "expire",
        -3,
        ["write", "fast"],
        1,
        1,
        1,
        "generic",
        "Sets a key's time to live in seconds (agreed time).",
        Write(keys::expire)
    ),
    command!(
        "expireat",
        -3,
        ["write", "fast"],
        1,
        1,
        1,
        "generic",
        "Sets a key's expiry as a Unix time in seconds.",
        Write(keys::expireat)
    ),
    command!(
        "get",
        2,
        ["readonly", "fast"],
        1,
        1,
        1,
        "string",
        "Returns the string value of a key.",
        Read(strings::get)
    ),
    command!(
        "getdel",
        2,
        ["write", "fast"],
        1,
        1,
        1,
        "string",
        "Returns the string value of a key and deletes the key.",
        Write(strings::getdel)
    ),
    command!(
        "getset",
        3,
        ["write", "denyoom", "fast"],
        1,
        1,
        1,
        "string",
        "Sets a key and returns its previous string value.",
        Write(strings::getset)
    ),
    command!(
        "hdel",
        -3,
        ["write", "fast"],
        1,
        1,
        1,
        "hash",
        "Deletes fields of a hash.",
        Write(hashes::hdel)
    ),
    command!(
        "hello",
        -1,
        ["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        0,
        "connection",
        "Handshakes with the gateway (protocol 2).",
        Gateway
    ),
    command!(
        "hexists",
        3,
        ["readonly", "fast"],
        1,
        1,
        1,
        "hash",
        "Whether a field exists in a hash.",
        Read(hashes::hexists)
    ),
    command!(
        "hget",
        3,
        ["readonly", "fast"],
        1,
        1,
        1,
        "hash",
        "Returns the value of a field in a hash.",
        Read(hashes::hget)
    ),
    command!(
        "hgetall",
        2,
        ["readonly"],
        1,
        1,
        1,
        "hash",
        "Returns every field and value of a hash.",
        Read(hashes::hgetall)
    ),
    command!(
        "hincrby",
        4,
        ["write", "denyoom", "fast"],
        1,
        1,
        1,
        "hash",
        "Increments the integer value of a field in a hash.",
        Write(hashes::hincrby)
    ),
    command!(
        "hkeys",
        2,
        ["readonly"],
        1,
        1,
        1,
        "hash",
        "Returns the fields of a hash.",
        Read(hashes::hkeys)
    ),
    command!(
        "hlen",
        2,
        ["readonly", "fast"],
        1,
        1,
        1,
        "hash",
        "The number of fields in a hash.",
        Read(hashes::hlen)
    ),
    command!(
        "hmget",
        -3,
        ["readonly", "fast"],
        1,
        1,
        1,
        "hash",
        "Returns the values of fields in a hash.",
        Read(hashes::hmget)
    ),
    command!(
        "hmset",
        -4,
        ["write", "denyoom", "fast"],
        1,
        1,
        1,
        "hash",
        "Sets fields of a hash.",
        Write(hashes::hmset)
    ),
    command!(
        "hset",
        -4,
        ["write", "denyoom", "fast"],
        1,
        1,
        1,
        "hash",
        "Sets fields of a hash; returns how many are new.",
        Write(hashes::hset)
    ),
    command!(
        "hvals",
        2,
        ["readonly"],
        1,
        1,
        1,
        "hash",
        "Returns the values of a hash.",
        Read(hashes::hvals)
    ),
    command!(
        "incr",
        2,
        ["write", "denyoom", "fast"],
        1,
        1,
        1,
        "string",
        "Increments the integer value of a key by one.",
        Write(strings::incr)
    ),
    command!(
        "incrby",
        3,
        ["write", "denyoom", "fast"],
        1,
        1,
        1,
        "string",
        "Increments the integer value of a key by a number.",
        Write(strings::incrby)
    ),
    command!(
        "info",
        -1,
        ["loading", "stale"],
        0,
        0,
        0,
        "server",
        "The gateway and the cluster: server, clients, replication.",
        Gateway
    ),
    command!(
        "keys",
        2,
        ["readonly"],
        0,
        0,
        0,
        "generic",
        "Returns the keys that match a pattern (bounded: use SCAN).",
        Read(keys::keys)
    ),
    command!(
        "mget",
        -2,
        ["readonly", "fast"],
        1,
        -1,
        1,
        "string",
        "Returns the string values of keys.",
        Read(strings::mget)
    ),
    command!(
        "mset",
        -3,
        ["write", "denyoom"],
        1,
        -1,
        2,
        "string",
        "Sets keys atomically.",
        Write(strings::mset)
    ),
    command!(
        "msetnx",
        -3,
        ["write", "denyoom"],
        1,
        -1,
        2,
        "string",
        "Sets keys atomically only if none exists.",
        Write(strings::msetnx)
    ),
    command!(
        "multi",
        1,
        ["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
        "transactions",
        "Starts a transaction.",
        Gateway
    ),
    command!(
        "persist",
        2,
        ["write", "fast"],
        1,
        1,
        1,
        "generic",
        "Removes a key's expiry.",
        Write(keys::persist)
    ),
    command!(
        "pexpire",
        -3,
        ["write", "fast"],
        1,
        1,
        1,
        "generic",
        "Sets a key's time to live in milliseconds (agreed time).",
        Write(keys::pexpire)
    ),
    command!(
        "pexpireat",
        -3,
        ["write", "fast"],
        1,
        1,
        1,
        "generic",
        "Sets a key's expiry as a Unix time in milliseconds.",
        Write(keys::pexpireat)
    ),
    command!(
        "ping",
        -1,
        ["fast"],
        0,
        0,
        0,
        "connection",
        "Returns PONG, or the given string.",
        Gateway
    ),
    command!(
        "pttl",
        2,
        ["readonly", "fast"],
        1,
        1,
        1,
        "generic",
        "A key's time to live in milliseconds.",
        Read(keys::pttl)
    ),
    command!(
        "quit",
        -1,
        ["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        0,
        "connection",
        "Closes the connection.",
        Gateway
    ),
    command!(
        "scan",
        -2,
        ["readonly"],
        0,
        0,
        0,
        "generic",
        "Walks the keys with a cursor.",
        Read(keys::scan)
    ),
    command!(
        "select",
        2,
        ["loading", "stale", "fast"],
        0,
        0,
        0,
        "connection",
        "Selects database 0, the only one.",
        Gateway
    ),
    command!(
        "set",
        -3,
        ["write", "denyoom"],
        1,
        1,
        1,
        "string",
        "Sets a key's string value, with NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL.",
        Write(strings::set)
    ),
    command!(
        "setnx",
        3,
        ["write", "denyoom", "fast"],
        1,
        1,
        1,
        "string",
        "Sets a key only if it does not exist.",
        Write(strings::setnx)
    ),
    command!(
        "strlen",
        2,
        ["readonly", "fast"],
        1,
        1,
        1,
        "string",
        "The length of a key's string value.",
        Read(strings::strlen)
    ),
    command!(
        "ttl",
        2,
        ["readonly", "fast"],
        1,
        1,
        1,
        "generic",
        "A key's time to live in seconds.",
        Read(keys::ttl)
    ),
    command!(
        "type",
        2,
        ["readonly", "fast"],
        1,
        1,
        1,
        "generic",
        "The type of a key's value.",
        Read(keys::type_of)
    ),
    command!(
        "unlink",
        -2,
        ["write", "fast"],
        1,
        -1,
        1,
        "generic",
        "Deletes keys.",
        Write(keys::del)
    ),
    command!(
        "unwatch",
        1,
        ["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
        "transactions",
        "Forgets the watched keys.",
        Gateway
    ),
    command!(
        "watch",
        -2,
        ["noscript", "loading", "stale", "fast"],
        1,
        -1,
        1,
        "transactions",
        "Makes the next EXEC conditional on keys not changing.",
        Gateway
    ),
];

/// The command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    let lower = name.to_ascii_lowercase();
    COMMANDS
        .binary_search_by(|c| c.name.as_bytes().cmp(&lower[..]))
        .ok()
        .map(|i| &COMMANDS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_so_lookups_find_every_command() {
        assert!(COMMANDS.windows(2).all(|w| w[0].name < w[1].name));
        for c in COMMANDS {
            assert_eq!(
                lookup(c.name.to_ascii_uppercase().as_bytes()).map(|f| f.name),
                Some(c.name)
            );
            assert_eq!(
                c.is_read_only(),
                c.flags.contains(&"readonly"),
                "{}",
                c.name
            );
        }
        assert!(lookup(b"lpush").is_none());
        let get = lookup(b"GET").unwrap();
        assert!(get.arity_ok(2) && !get.arity_ok(3));
        let del = lookup(b"del").unwrap();
        assert!(del.arity_ok(2) && del.arity_ok(9) && !del.arity_ok(1));
    }
}
