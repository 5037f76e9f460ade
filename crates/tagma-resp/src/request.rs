//! Commands as a client sends them: a RESP array of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`),
//! or an inline command (`GET k\r\n`, what a person types over telnet).
//!
//! [`parse_command`] looks at the bytes received so far: a whole command is split off the
//! buffer (its arguments are slices of it, not copies); an incomplete one leaves the buffer
//! as it is. Lengths are checked before they are trusted, so a client cannot make the
//! server allocate more than [`Limits`] allows; the errors carry Redis's texts, after which
//! the server replies with the error and closes the connection, as Redis does.

use bytes::{Bytes, BytesMut};
use thiserror::Error;

/// What one command may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most arguments of one command (Redis: 1,048,576).
    pub args_max: usize,
    /// The longest argument (Redis's `proto-max-bulk-len`).
    pub bulk_max: usize,
    /// The longest inline command.
    pub inline_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            args_max: 1 << 20,
            bulk_max: 1 << 20,
            inline_max: 64 << 10,
        }
    }
}

/// A byte stream that is not RESP: the connection cannot continue.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProtocolError {
    #[error("Protocol error: too big inline request")]
    InlineTooBig,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("Protocol error: too big mbulk count string")]
    CountTooLong,
    #[error("Protocol error: invalid multibulk length")]
    InvalidCount,
    #[error("Protocol error: too big bulk count string")]
    BulkLengthTooLong,
    #[error("Protocol error: expected '$', got '{0}'")]
    ExpectedBulk(char),
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
}

/// The longest count or length line Redis reads before refusing it.
const LINE_MAX: usize = 64 << 10;

/// Splits the next whole command off `buf`: `Ok(Some(args))` (empty for an empty line or an
/// empty array, which a server skips), `Ok(None)` when more bytes are needed.
pub fn parse_command(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] == b'*' {
        parse_array(buf, limits)
    } else {
        parse_inline(buf, limits)
    }
}

/// The position of the `\r\n` ending the line that starts at `from`, if it came.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    // A line ends with "\r\n"; a bare "\n" ends it too (Redis accepts it in inline commands).
    Some(from + nl)
}

/// A count or length: ASCII digits with an optional minus sign, nothing else.
fn number(digits: &[u8]) -> Option<i64> {
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits
        .iter()
        .fold(0i64, |v, &d| v * 10 + i64::from(d - b'0'));
    Some(if negative { -value } else { value })
}

/// The text of a line that starts at `from` and ends (`\r\n`) at `nl`.
fn line(buf: &[u8], from: usize, nl: usize) -> &[u8] {
    let end = if nl > from && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    &buf[from..end]
}

fn parse_array(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(nl) = line_end(buf, 1) else {
        if buf.len() > LINE_MAX {
            return Err(ProtocolError::CountTooLong);
        }
        return Ok(None);
    };
    let count = number(line(buf, 1, nl)).ok_or(ProtocolError::InvalidCount)?;
    if count > limits.args_max as i64 {
        return Err(ProtocolError::InvalidCount);
    }
    if count <= 0 {
        let _ = buf.split_to(nl + 1);
        return Ok(Some(Vec::new()));
    }
    let count = count as usize;
    // Argument positions first; nothing is taken until the whole command is here.
    let mut ranges: Vec<(usize, usize)> = Vec::with_capacity(count.min(1024));
    let mut at = nl + 1;
    for _ in 0..count {
        let Some(&kind) = buf.get(at) else {
            return Ok(None);
        };
        if kind != b'$' {
            return Err(ProtocolError::ExpectedBulk(char::from(kind)));
        }
        let Some(nl) = line_end(buf, at + 1) else {
            if buf.len() - at > LINE_MAX {
                return Err(ProtocolError::BulkLengthTooLong);
            }
            return Ok(None);
        };
        let len = number(line(buf, at + 1, nl)).ok_or(ProtocolError::InvalidBulkLength)?;
        if len < 0 || len > limits.bulk_max as i64 {
            return Err(ProtocolError::InvalidBulkLength);
        }
        let start = nl + 1;
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        ranges.push((start, end));
        at = end + 2;
    }
    let frame = buf.split_to(at).freeze();
    Ok(Some(
        ranges.into_iter().map(|(s, e)| frame.slice(s..e)).collect(),
    ))
}

fn parse_inline(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(nl) = line_end(buf, 0) else {
        if buf.len() > limits.inline_max {
            return Err(ProtocolError::InlineTooBig);
        }
        return Ok(None);
    };
    if nl > limits.inline_max {
        return Err(ProtocolError::InlineTooBig);
    }
    let args = split_inline(line(buf, 0, nl))?;
    if args.len() > limits.args_max {
        return Err(ProtocolError::InvalidCount);
    }
    let _ = buf.split_to(nl + 1);
    Ok(Some(args.into_iter().map(Bytes::from).collect()))
}

/// Splits an inline command into arguments: separated by spaces or tabs; `"..."` with the
/// escapes `\n \r \t \b \a \\ \" \xHH`, and `'...'` with `\'`, as Redis splits them.
fn split_inline(line: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && (line[i] == b' ' || line[i] == b'\t') {
            i += 1;
        }
        if i == line.len() {
            return Ok(args);
        }
        let mut arg = Vec::new();
        match line[i] {
            quote @ (b'"' | b'\'') => {
                i += 1;
                quoted(line, &mut i, quote, &mut arg)?;
            }
            _ => {
                while i < line.len() && line[i] != b' ' && line[i] != b'\t' {
                    arg.push(line[i]);
                    i += 1;
                }
            }
        }
        args.push(arg);
    }
}

/// Reads the rest of an argument quoted by `quote` from `line[*i]` into `arg`, past its
/// closing quote, which must end the argument.
fn quoted(line: &[u8], i: &mut usize, quote: u8, arg: &mut Vec<u8>) -> Result<(), ProtocolError> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    loop {
        let Some(&c) = line.get(*i) else {
            return Err(ProtocolError::UnbalancedQuotes);
        };
        let next = line.get(*i + 1).copied();
        if c == quote {
            *i += 1;
            if line.get(*i).is_some_and(|&c| c != b' ' && c != b'\t') {
                return Err(ProtocolError::UnbalancedQuotes);
            }
            return Ok(());
        }
        if c == b'\\' && quote == b'\'' && next == Some(b'\'') {
            arg.push(b'\'');
            *i += 2;
        } else if let (b'\\', b'"', Some(e)) = (c, quote, next) {
            let digits = (line.get(*i + 2).copied().and_then(hex))
                .zip(line.get(*i + 3).copied().and_then(hex));
            match (e, digits) {
                (b'x', Some((hi, lo))) => {
                    arg.push(hi * 16 + lo);
                    *i += 4;
                }
                _ => {
                    arg.push(match e {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                    *i += 2;
                }
            }
        } else {
            arg.push(c);
            *i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> (Result<Option<Vec<Bytes>>, ProtocolError>, usize) {
        let mut buf = BytesMut::from(bytes);
        let result = parse_command(&mut buf, &Limits::default());
        (result, buf.len())
    }

    fn args(list: &[&str]) -> Vec<Bytes> {
        list.iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    #[test]
    fn arrays_of_bulk_strings_split_off_whole() {
        let (r, left) = parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n");
        assert_eq!(r, Ok(Some(args(&["GET", "k"]))));
        assert_eq!(left, 14, "the next command stays");
        // Binary-safe: a bulk string may hold "\r\n".
        let (r, _) = parse(b"*1\r\n$4\r\na\r\nb\r\n");
        assert_eq!(r, Ok(Some(args(&["a\r\nb"]))));
    }

    #[test]
    fn an_incomplete_command_waits_for_more_at_every_cut() {
        let whole = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n";
        for cut in 0..whole.len() {
            let (r, left) = parse(&whole[..cut]);
            assert_eq!(r, Ok(None), "cut at {cut}");
            assert_eq!(left, cut);
        }
        assert_eq!(parse(whole).0, Ok(Some(args(&["SET", "k", "value"]))));
    }

    #[test]
    fn inline_commands_split_like_redis() {
        assert_eq!(parse(b"PING\r\n").0, Ok(Some(args(&["PING"]))));
        assert_eq!(
            parse(b"set  k \"a b\\x41\\n\" 'it\\'s'\n").0,
            Ok(Some(args(&["set", "k", "a bA\n", "it's"])))
        );
        assert_eq!(parse(b"\r\n").0, Ok(Some(vec![])));
        assert_eq!(
            parse(b"get \"k\r\n").0,
            Err(ProtocolError::UnbalancedQuotes)
        );
        assert_eq!(
            parse(b"get \"k\"x\r\n").0,
            Err(ProtocolError::UnbalancedQuotes)
        );
        assert_eq!(parse(b"PING").0, Ok(None));
    }

    #[test]
    fn bad_lengths_are_protocol_errors_with_redis_texts() {
        assert_eq!(parse(b"*x\r\n").0, Err(ProtocolError::InvalidCount));
        assert_eq!(parse(b"*2000000\r\n").0, Err(ProtocolError::InvalidCount));
        assert_eq!(
            parse(b"*1\r\n+OK\r\n").0,
            Err(ProtocolError::ExpectedBulk('+'))
        );
        assert_eq!(
            parse(b"*1\r\n$-5\r\n").0,
            Err(ProtocolError::InvalidBulkLength)
        );
        assert_eq!(
            parse(b"*1\r\n$99999999999\r\n").0,
            Err(ProtocolError::InvalidBulkLength)
        );
        assert_eq!(
            parse(b"*1\r\n$2000000\r\n").0,
            Err(ProtocolError::InvalidBulkLength)
        );
        assert_eq!(parse(b"*0\r\n").0, Ok(Some(vec![])));
        assert_eq!(parse(b"*-1\r\n").0, Ok(Some(vec![])));
        assert_eq!(
            ProtocolError::ExpectedBulk('+').to_string(),
            "Protocol error: expected '$', got '+'"
        );
        let long = vec![b'a'; 70 << 10];
        assert_eq!(parse(&long).0, Err(ProtocolError::InlineTooBig));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_or_fail_without_panicking(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let mut buf = BytesMut::from(&bytes[..]);
            let limits = Limits { args_max: 16, bulk_max: 64, inline_max: 128 };
            while let Ok(Some(_)) = parse_command(&mut buf, &limits) {
                if buf.is_empty() { break; }
            }
        }
    }
}
