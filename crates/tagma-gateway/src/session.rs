//! One connection's state and what each command does with it, without IO: a command goes in
//! ([`Session::command`]), a [`Step`] comes out — a reply now, an entry for the cluster, a
//! `WATCH` to look up, or a reply and the end of the connection.
//!
//! Connection commands are answered here: `PING`, `ECHO`, `HELLO`, `AUTH`, `SELECT`,
//! `QUIT`, `CLIENT`, `COMMAND`, `MULTI`/`EXEC`/`DISCARD`, `WATCH`/`UNWATCH` (`INFO` is
//! [`Step::Info`]: the server fills it in). Inside `MULTI`, data commands are queued (checked
//! for existence and arity first, as Redis does) and `EXEC` sends them as one entry.

use bytes::Bytes;
use tagma_kv::redis::args::{unknown_command, wrong_arity};
use tagma_kv::redis::table::{self, COMMANDS, Handler};
use tagma_kv::redis::{Entry, KeyDigest};
use tagma_resp::{Protocol, Reply};

/// What to do with a command.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Reply with this (in order after the replies before it).
    Reply(Reply),
    /// Send the entry to the cluster (ordered, or unordered when read-only and allowed); its
    /// reply goes to the client as it comes.
    Submit { entry: Entry, ordered: bool },
    /// Look up the digests of these keys (an ordered `WATCH` entry), then give them to
    /// [`Session::watched`] and reply `+OK`.
    Watch(Vec<Bytes>),
    /// Reply with the `INFO` text of these sections (empty: the default ones).
    Info(Vec<String>),
    /// Reply with this, then close the connection.
    Close(Reply),
}

/// One connection's state.
#[derive(Debug)]
pub struct Session {
    id: u64,
    name: Option<Bytes>,
    authenticated: bool,
    /// Commands queued since `MULTI` (`None`: not in a transaction).
    multi: Option<Vec<Vec<Bytes>>>,
    /// A queued command was refused: `EXEC` discards the transaction.
    multi_failed: bool,
    /// Keys watched, with their digests when watched.
    watched: Vec<(Bytes, KeyDigest)>,
    /// What replies are written in (`HELLO 3` switches to RESP3).
    protocol: Protocol,
}

/// How a reply of the store is shaped for a RESP3 client: the store writes RESP2, where a
/// map is a flat array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    Plain,
    /// A flat array of keys and values that RESP3 writes as a map (`HGETALL`).
    Map,
    /// A transaction's replies, each shaped as its command's.
    Exec(Vec<Shape>),
}

impl Shape {
    /// The shape of the reply to `entry`.
    pub fn of(entry: &Entry) -> Shape {
        let command = |args: &[Bytes]| match args.first() {
            Some(name) if name.eq_ignore_ascii_case(b"hgetall") => Shape::Map,
            _ => Shape::Plain,
        };
        match entry {
            Entry::Command(args) => command(args),
            Entry::Exec { commands, .. } => {
                Shape::Exec(commands.iter().map(|c| command(c)).collect())
            }
            Entry::Watch(_) => Shape::Plain,
        }
    }

    /// `reply` as a RESP3 client expects it.
    pub fn apply(&self, reply: Reply) -> Reply {
        match (self, reply) {
            (Shape::Map, Reply::Array(items)) if items.len() % 2 == 0 => {
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                Reply::Map(pairs)
            }
            (Shape::Exec(shapes), Reply::Array(items)) if shapes.len() == items.len() => {
                Reply::Array(shapes.iter().zip(items).map(|(s, r)| s.apply(r)).collect())
            }
            (_, reply) => reply,
        }
    }
}

/// What a session reads of the gateway's settings.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The password `AUTH` must give (`None`: none needed).
    pub password: Option<String>,
    /// Whether read-only commands outside transactions may be sent unordered.
    pub unordered_reads: bool,
}

const NOAUTH: &str = "NOAUTH Authentication required.";

fn ok() -> Step {
    Step::Reply(Reply::ok())
}

fn error(text: impl Into<String>) -> Step {
    Step::Reply(Reply::error(text))
}

/// Whether `arg` is `word`, ignoring ASCII case.
fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

impl Session {
    /// Connection `id`; it must authenticate first if `settings` has a password.
    pub fn new(id: u64, settings: &Settings) -> Session {
        Session {
            id,
            name: None,
            authenticated: settings.password.is_none(),
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            protocol: Protocol::Resp2,
        }
    }

    /// The protocol replies are written in.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The digests a [`Step::Watch`] looked up, in the order of its keys.
    pub fn watched(&mut self, keys: Vec<Bytes>, digests: Vec<KeyDigest>) {
        for (key, digest) in keys.into_iter().zip(digests) {
            // The first WATCH of a key counts, as in Redis.
            if !self.watched.iter().any(|(k, _)| *k == key) {
                self.watched.push((key, digest));
            }
        }
    }

    /// What to do with `args` (a command: its name first).
    pub fn command(&mut self, args: Vec<Bytes>, settings: &Settings) -> Step {
        let Some(name) = args.first() else {
            return error("ERR empty command");
        };
        let Some(command) = table::lookup(name) else {
            if self.multi.is_some() {
                self.multi_failed = true;
            }
            return Step::Reply(unknown_command(&args));
        };
        if !command.arity_ok(args.len()) {
            if self.multi.is_some() {
                self.multi_failed = true;
            }
            return Step::Reply(wrong_arity(command.name));
        }
        if !self.authenticated && !matches!(command.name, "auth" | "hello" | "quit") {
            return error(NOAUTH);
        }
        let queues = !matches!(
            command.name,
            "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
        );
        if let Some(queued) = self.multi.as_mut()
            && queues
        {
            if let Handler::Gateway = command.handler
                && !matches!(command.name, "ping" | "echo")
            {
                // Connection commands inside a transaction are not supported by the
                // replicated store: refuse them, which discards the transaction.
                self.multi_failed = true;
                return error(format!(
                    "ERR '{}' inside MULTI is not supported by the tagma gateway",
                    command.name
                ));
            }
            queued.push(args);
            return Step::Reply(Reply::Simple("QUEUED".to_owned()));
        }
        match command.handler {
            Handler::Read(_) => Step::Submit {
                entry: Entry::Command(args),
                ordered: !settings.unordered_reads,
            },
            Handler::Write(_) => Step::Submit {
                entry: Entry::Command(args),
                ordered: true,
            },
            Handler::Gateway => self.connection_command(command.name, args, settings),
        }
    }

    fn connection_command(&mut self, name: &str, args: Vec<Bytes>, settings: &Settings) -> Step {
        match name {
            "ping" => match args.get(1) {
                None => Step::Reply(Reply::Simple("PONG".to_owned())),
                Some(text) if args.len() == 2 => Step::Reply(Reply::Bulk(text.clone())),
                Some(_) => Step::Reply(wrong_arity("ping")),
            },
            "echo" => Step::Reply(Reply::Bulk(args[1].clone())),
            "quit" => Step::Close(Reply::ok()),
            "select" => match &args[1][..] {
                b"0" => ok(),
                _ => error("ERR DB index is out of range"),
            },
            "auth" => self.auth(&args, settings),
            "hello" => self.hello(&args, settings),
            "client" => self.client(&args),
            "command" => command_reply(&args),
            "info" => Step::Info(
                (args[1..].iter())
                    .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
                    .collect(),
            ),
            "multi" => {
                if self.multi.is_some() {
                    return error("ERR MULTI calls can not be nested");
                }
                self.multi = Some(Vec::new());
                self.multi_failed = false;
                ok()
            }
            "discard" => {
                if self.multi.take().is_none() {
                    return error("ERR DISCARD without MULTI");
                }
                self.watched.clear();
                ok()
            }
            "exec" => {
                let Some(commands) = self.multi.take() else {
                    return error("ERR EXEC without MULTI");
                };
                let watched = std::mem::take(&mut self.watched);
                if std::mem::take(&mut self.multi_failed) {
                    return error("EXECABORT Transaction discarded because of previous errors.");
                }
                Step::Submit {
                    entry: Entry::Exec { watched, commands },
                    ordered: true,
                }
            }
            "watch" => {
                if self.multi.is_some() {
                    return error("ERR WATCH inside MULTI is not allowed");
                }
                Step::Watch(args[1..].to_vec())
            }
            "unwatch" => {
                self.watched.clear();
                ok()
            }
            other => error(format!("ERR '{other}' is not answered by this gateway")),
        }
    }

    /// `AUTH password` or `AUTH default password`.
    fn auth(&mut self, args: &[Bytes], settings: &Settings) -> Step {
        let Some(password) = &settings.password else {
            return error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            );
        };
        let given = match args.len() {
            2 => &args[1],
            3 if &args[1][..] == b"default" => &args[2],
            3 => return error("WRONGPASS invalid username-password pair or user is disabled."),
            _ => return Step::Reply(wrong_arity("auth")),
        };
        if given[..] == *password.as_bytes() {
            self.authenticated = true;
            ok()
        } else {
            error("WRONGPASS invalid username-password pair or user is disabled.")
        }
    }

    /// `HELLO [protover [AUTH username password] [SETNAME name]]`: protocol 2 or 3.
    fn hello(&mut self, args: &[Bytes], settings: &Settings) -> Step {
        let mut i = 1;
        let mut protocol = self.protocol;
        if let Some(version) = args.get(1) {
            protocol = match &version[..] {
                b"2" => Protocol::Resp2,
                b"3" => Protocol::Resp3,
                _ => return error("NOPROTO unsupported protocol version"),
            };
            i = 2;
        }
        while i < args.len() {
            if is(&args[i], "AUTH") && i + 2 < args.len() {
                let auth = vec![
                    Bytes::from_static(b"AUTH"),
                    args[i + 1].clone(),
                    args[i + 2].clone(),
                ];
                if let Step::Reply(reply @ Reply::Error(_)) = self.auth(&auth, settings) {
                    return Step::Reply(reply);
                }
                i += 3;
            } else if is(&args[i], "SETNAME") && i + 1 < args.len() {
                self.name = Some(args[i + 1].clone());
                i += 2;
            } else {
                return error(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&args[i])
                ));
            }
        }
        if !self.authenticated {
            return error(NOAUTH);
        }
        self.protocol = protocol;
        let proto = match protocol {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        };
        let field = |k: &str, v: Reply| (Reply::bulk(k.to_owned()), v);
        Step::Reply(Reply::Map(vec![
            field("server", Reply::bulk("redis")),
            field("version", Reply::bulk(crate::server::REDIS_VERSION)),
            field("proto", Reply::Integer(proto)),
            field("id", Reply::Integer(self.id as i64)),
            field("mode", Reply::bulk("standalone")),
            field("role", Reply::bulk("master")),
            field("modules", Reply::Array(vec![])),
        ]))
    }

    /// `CLIENT ID | GETNAME | SETNAME name | SETINFO ...`.
    fn client(&mut self, args: &[Bytes]) -> Step {
        let sub = &args[1];
        if is(sub, "ID") && args.len() == 2 {
            Step::Reply(Reply::Integer(self.id as i64))
        } else if is(sub, "GETNAME") && args.len() == 2 {
            Step::Reply(Reply::bulk_or_nil(self.name.clone()))
        } else if is(sub, "SETNAME") && args.len() == 3 {
            if args[2].iter().any(|&b| b <= b' ' || b > b'~') {
                return error(
                    "ERR Client names cannot contain spaces, newlines or special characters.",
                );
            }
            self.name = (!args[2].is_empty()).then(|| args[2].clone());
            ok()
        } else if is(sub, "SETINFO") && args.len() == 4 {
            // Client libraries announce their name and version; nothing to keep.
            ok()
        } else {
            error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(sub)
            ))
        }
    }
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name...`, `COMMAND DOCS [name...]`.
fn command_reply(args: &[Bytes]) -> Step {
    let Some(sub) = args.get(1) else {
        return Step::Reply(Reply::Array(COMMANDS.iter().map(|c| c.info()).collect()));
    };
    let named = || args[2..].iter().filter_map(|n| table::lookup(n));
    if is(sub, "COUNT") {
        Step::Reply(Reply::Integer(COMMANDS.len() as i64))
    } else if is(sub, "INFO") {
        let infos = (args[2..].iter())
            .map(|n| table::lookup(n).map_or(Reply::NilArray, |c| c.info()))
            .collect();
        Step::Reply(Reply::Array(infos))
    } else if is(sub, "DOCS") {
        let docs: Vec<Reply> = if args.len() == 2 {
            COMMANDS.iter().flat_map(|c| c.docs()).collect()
        } else {
            named().flat_map(|c| c.docs()).collect()
        };
        Step::Reply(Reply::Array(docs))
    } else {
        error(format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(sub)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    fn reply(step: Step) -> Reply {
        match step {
            Step::Reply(r) => r,
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    #[test]
    fn a_password_must_come_first() {
        let settings = Settings {
            password: Some("s3cret".into()),
            unordered_reads: false,
        };
        let mut s = Session::new(7, &settings);
        assert_eq!(
            reply(s.command(args("GET k"), &settings)),
            Reply::error(NOAUTH)
        );
        assert!(reply(s.command(args("AUTH nope"), &settings)).is_error());
        assert_eq!(
            reply(s.command(args("AUTH s3cret"), &settings)),
            Reply::ok()
        );
        assert!(matches!(
            s.command(args("GET k"), &settings),
            Step::Submit { ordered: true, .. }
        ));
        let open = Settings::default();
        let mut t = Session::new(8, &open);
        assert!(reply(t.command(args("AUTH x"), &open)).is_error());
    }

    #[test]
    fn a_transaction_queues_and_exec_sends_it_whole_with_the_watched_keys() {
        let settings = Settings::default();
        let mut s = Session::new(1, &settings);
        assert_eq!(
            s.command(args("WATCH a b"), &settings),
            Step::Watch(args("a b"))
        );
        s.watched(args("a b"), vec![[1; 16], [2; 16]]);
        assert_eq!(reply(s.command(args("MULTI"), &settings)), Reply::ok());
        assert!(reply(s.command(args("MULTI"), &settings)).is_error());
        assert!(reply(s.command(args("WATCH c"), &settings)).is_error());
        assert_eq!(
            reply(s.command(args("INCR a"), &settings)),
            Reply::Simple("QUEUED".into())
        );
        assert_eq!(
            reply(s.command(args("PING"), &settings)),
            Reply::Simple("QUEUED".into())
        );
        match s.command(args("EXEC"), &settings) {
            Step::Submit {
                entry: Entry::Exec { watched, commands },
                ordered: true,
            } => {
                assert_eq!(watched.len(), 2);
                assert_eq!(commands, vec![args("INCR a"), args("PING")]);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            reply(s.command(args("EXEC"), &settings)).is_error(),
            "no MULTI now"
        );
        // An unknown or malformed command discards the transaction at EXEC.
        s.command(args("MULTI"), &settings);
        assert!(reply(s.command(args("NOPE"), &settings)).is_error());
        assert!(reply(s.command(args("GET"), &settings)).is_error());
        assert_eq!(
            reply(s.command(args("EXEC"), &settings)),
            Reply::error("EXECABORT Transaction discarded because of previous errors.")
        );
    }

    #[test]
    fn connection_commands_answer_at_once() {
        let settings = Settings {
            password: None,
            unordered_reads: true,
        };
        let mut s = Session::new(3, &settings);
        assert_eq!(
            reply(s.command(args("PING"), &settings)),
            Reply::Simple("PONG".into())
        );
        assert_eq!(
            reply(s.command(args("ECHO hi"), &settings)),
            Reply::bulk("hi")
        );
        assert_eq!(reply(s.command(args("SELECT 0"), &settings)), Reply::ok());
        assert!(reply(s.command(args("SELECT 1"), &settings)).is_error());
        assert_eq!(
            reply(s.command(args("CLIENT SETNAME app"), &settings)),
            Reply::ok()
        );
        assert_eq!(
            reply(s.command(args("CLIENT GETNAME"), &settings)),
            Reply::bulk("app")
        );
        assert_eq!(
            reply(s.command(args("CLIENT ID"), &settings)),
            Reply::Integer(3)
        );
        assert!(matches!(
            reply(s.command(args("HELLO 3"), &settings)),
            Reply::Map(_)
        ));
        assert_eq!(s.protocol(), Protocol::Resp3);
        assert!(reply(s.command(args("HELLO 4"), &settings)).is_error());
        assert!(matches!(
            reply(s.command(args("HELLO 2"), &settings)),
            Reply::Map(_)
        ));
        assert_eq!(s.protocol(), Protocol::Resp2);
        let hgetall = Entry::Command(args("HGETALL h"));
        assert_eq!(
            Shape::of(&hgetall).apply(Reply::Array(vec![Reply::bulk("f"), Reply::bulk("v")])),
            Reply::Map(vec![(Reply::bulk("f"), Reply::bulk("v"))])
        );
        assert_eq!(
            reply(s.command(args("COMMAND COUNT"), &settings)),
            Reply::Integer(COMMANDS.len() as i64)
        );
        assert!(matches!(
            s.command(args("GET k"), &settings),
            Step::Submit { ordered: false, .. }
        ));
        assert!(matches!(s.command(args("QUIT"), &settings), Step::Close(_)));
        assert!(matches!(
            s.command(args("INFO server"), &settings),
            Step::Info(_)
        ));
    }
}
