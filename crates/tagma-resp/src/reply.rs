//! Reply values, their encoding in RESP2 or RESP3, and a parser of encoded replies.
//!
//! RESP2 has five types: simple strings (`+OK`), errors (`-ERR ...`), integers (`:1`), bulk
//! strings (`$3\r\nabc`, or `$-1` for nil) and arrays (`*2 ...`, or `*-1` for a nil array).
//! RESP3 (what a client asks for with `HELLO 3`) writes both nils as `_` and has maps
//! (`%2 ...`), which RESP2 writes as flat arrays of keys and values.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

/// A reply value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+text` (no `\r` or `\n` in it).
    Simple(String),
    /// `-CODE text`: the first word is the error's code (`ERR`, `WRONGTYPE`, ...).
    Error(String),
    Integer(i64),
    Bulk(Bytes),
    /// `$-1`: no value.
    Nil,
    Array(Vec<Reply>),
    /// `*-1`: no array (an `EXEC` whose watched keys changed).
    NilArray,
    /// Keys and values: a map in RESP3, a flat array in RESP2.
    Map(Vec<(Reply, Reply)>),
}

/// The protocol a connection speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Simple("OK".to_owned())
    }

    /// An error reply: `text` starts with its code (`"ERR syntax error"`).
    pub fn error(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn bulk(bytes: impl Into<Bytes>) -> Reply {
        Reply::Bulk(bytes.into())
    }

    /// A bulk string, or nil.
    pub fn bulk_or_nil(value: Option<Bytes>) -> Reply {
        value.map_or(Reply::Nil, Reply::Bulk)
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends the RESP2 encoding to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        self.encode_as(out, Protocol::Resp2);
    }

    /// Appends the encoding in `protocol` to `out`.
    pub fn encode_as(&self, out: &mut BytesMut, protocol: Protocol) {
        let resp3 = protocol == Protocol::Resp3;
        match self {
            Reply::Nil | Reply::NilArray if resp3 => out.put_slice(b"_\r\n"),
            Reply::Map(pairs) if resp3 => {
                line(out, b'%', pairs.len().to_string().as_bytes());
                for (k, v) in pairs {
                    k.encode_as(out, protocol);
                    v.encode_as(out, protocol);
                }
            }
            Reply::Map(pairs) => {
                line(out, b'*', (2 * pairs.len()).to_string().as_bytes());
                for (k, v) in pairs {
                    k.encode_as(out, protocol);
                    v.encode_as(out, protocol);
                }
            }
            Reply::Simple(text) => line(out, b'+', clean(text).as_bytes()),
            Reply::Error(text) => line(out, b'-', clean(text).as_bytes()),
            Reply::Integer(v) => line(out, b':', v.to_string().as_bytes()),
            Reply::Bulk(bytes) => {
                line(out, b'$', bytes.len().to_string().as_bytes());
                out.put_slice(bytes);
                out.put_slice(b"\r\n");
            }
            Reply::Nil => out.put_slice(b"$-1\r\n"),
            Reply::Array(items) => {
                line(out, b'*', items.len().to_string().as_bytes());
                for item in items {
                    item.encode_as(out, protocol);
                }
            }
            Reply::NilArray => out.put_slice(b"*-1\r\n"),
        }
    }

    /// The RESP2 encoding.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(&mut out);
        out.freeze()
    }
}

fn line(out: &mut BytesMut, kind: u8, text: &[u8]) {
    out.put_u8(kind);
    out.put_slice(text);
    out.put_slice(b"\r\n");
}

/// A simple string or error cannot hold a line break: it would end the line early.
fn clean(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains(['\r', '\n']) {
        std::borrow::Cow::Owned(text.replace(['\r', '\n'], " "))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// Bytes that are not an encoded reply.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ReplyError {
    #[error("malformed reply: {0}")]
    Malformed(&'static str),
}

/// Nesting of arrays a parsed reply may have.
const DEPTH_MAX: usize = 32;

/// Parses one whole encoded reply at the start of `bytes`: the reply and the bytes it took,
/// `Ok(None)` if more bytes are needed.
pub fn parse_reply(bytes: &[u8]) -> Result<Option<(Reply, usize)>, ReplyError> {
    parse_at(bytes, 0, 0)
}

fn parse_at(bytes: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, ReplyError> {
    if depth > DEPTH_MAX {
        return Err(ReplyError::Malformed("arrays nested too deep"));
    }
    let Some(&kind) = bytes.get(at) else {
        return Ok(None);
    };
    if !b"+-:$*%_".contains(&kind) {
        return Err(ReplyError::Malformed("unknown reply type"));
    }
    // The line after the type byte, up to its CRLF.
    let Some(nl) = bytes[at + 1..].windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let text = &bytes[at + 1..at + 1 + nl];
    let next = at + 1 + nl + 2;
    let as_string = || {
        std::str::from_utf8(text)
            .map(str::to_owned)
            .map_err(|_| ReplyError::Malformed("not UTF-8"))
    };
    let as_int = || {
        std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .ok_or(ReplyError::Malformed("not an integer"))
    };
    match kind {
        b'_' if text.is_empty() => Ok(Some((Reply::Nil, next))),
        b'%' => {
            let count =
                usize::try_from(as_int()?).map_err(|_| ReplyError::Malformed("map length"))?;
            let mut pairs = Vec::with_capacity(count.min(bytes.len() / 6));
            let mut at = next;
            for _ in 0..count {
                let Some((k, after)) = parse_at(bytes, at, depth + 1)? else {
                    return Ok(None);
                };
                let Some((v, after)) = parse_at(bytes, after, depth + 1)? else {
                    return Ok(None);
                };
                pairs.push((k, v));
                at = after;
            }
            Ok(Some((Reply::Map(pairs), at)))
        }
        b'+' => Ok(Some((Reply::Simple(as_string()?), next))),
        b'-' => Ok(Some((Reply::Error(as_string()?), next))),
        b':' => Ok(Some((Reply::Integer(as_int()?), next))),
        b'$' => {
            let len = as_int()?;
            if len == -1 {
                return Ok(Some((Reply::Nil, next)));
            }
            let len = usize::try_from(len).map_err(|_| ReplyError::Malformed("bulk length"))?;
            let end = next
                .checked_add(len)
                .ok_or(ReplyError::Malformed("bulk length"))?;
            if bytes.len() < end + 2 {
                return Ok(None);
            }
            if &bytes[end..end + 2] != b"\r\n" {
                return Err(ReplyError::Malformed("bulk string not ended by CRLF"));
            }
            let value = Bytes::copy_from_slice(&bytes[next..end]);
            Ok(Some((Reply::Bulk(value), end + 2)))
        }
        b'*' => {
            let count = as_int()?;
            if count == -1 {
                return Ok(Some((Reply::NilArray, next)));
            }
            let count =
                usize::try_from(count).map_err(|_| ReplyError::Malformed("array length"))?;
            // Every element takes at least three bytes.
            let mut items = Vec::with_capacity(count.min(bytes.len() / 3));
            let mut at = next;
            for _ in 0..count {
                match parse_at(bytes, at, depth + 1)? {
                    Some((item, next)) => {
                        items.push(item);
                        at = next;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), at)))
        }
        _ => Err(ReplyError::Malformed("unknown reply type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_encode_as_redis_sends_them_and_parse_back() {
        let reply = Reply::Array(vec![
            Reply::ok(),
            Reply::error("ERR no"),
            Reply::Integer(-3),
            Reply::bulk(&b"a\r\nb"[..]),
            Reply::Nil,
            Reply::Array(vec![]),
            Reply::NilArray,
        ]);
        let bytes = reply.to_bytes();
        assert_eq!(
            &bytes[..],
            &b"*7\r\n+OK\r\n-ERR no\r\n:-3\r\n$4\r\na\r\nb\r\n$-1\r\n*0\r\n*-1\r\n"[..]
        );
        assert_eq!(parse_reply(&bytes), Ok(Some((reply, bytes.len()))));
        for cut in 0..bytes.len() {
            assert_eq!(parse_reply(&bytes[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn resp3_writes_nils_and_maps_its_own_way() {
        let reply = Reply::Array(vec![
            Reply::Nil,
            Reply::NilArray,
            Reply::Map(vec![(Reply::bulk("a"), Reply::Integer(1))]),
        ]);
        let mut out = BytesMut::new();
        reply.encode_as(&mut out, Protocol::Resp3);
        assert_eq!(&out[..], &b"*3\r\n_\r\n_\r\n%1\r\n$1\r\na\r\n:1\r\n"[..]);
        assert_eq!(
            parse_reply(&out).unwrap().unwrap().0,
            Reply::Array(vec![
                Reply::Nil,
                Reply::Nil,
                Reply::Map(vec![(Reply::bulk("a"), Reply::Integer(1))])
            ])
        );
        assert_eq!(
            &reply.to_bytes()[..],
            &b"*3\r\n$-1\r\n*-1\r\n*2\r\n$1\r\na\r\n:1\r\n"[..]
        );
    }

    #[test]
    fn line_breaks_cannot_escape_a_simple_string() {
        assert_eq!(&Reply::error("ERR a\r\nb").to_bytes()[..], b"-ERR a  b\r\n");
    }

    #[test]
    fn malformed_replies_are_refused() {
        // Found by fuzzing: a line break where the type byte should be.
        assert!(parse_reply(b"\r\n\n'[\n").is_err());
        assert_eq!(
            parse_reply(b"+\r\n"),
            Ok(Some((Reply::Simple(String::new()), 3)))
        );
        assert!(parse_reply(b"?\r\n").is_err());
        assert!(parse_reply(b"$-2\r\n").is_err());
        assert!(parse_reply(b"$1\r\nabc\r\n").is_err());
        assert!(parse_reply(b":x\r\n").is_err());
        let deep = "*1\r\n".repeat(40);
        assert!(parse_reply(deep.as_bytes()).is_err());
    }
}
