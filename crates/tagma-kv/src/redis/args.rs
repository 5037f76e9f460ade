//! Reading command arguments as Redis does, and the error replies Redis gives for them.

use bytes::Bytes;
use tagma_resp::Reply;

pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
pub const SYNTAX: &str = "ERR syntax error";
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// The longest string a command may make (`APPEND`, `SET`).
pub const STRING_MAX: usize = 64 << 20;
pub const TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// A signed 64-bit integer written as Redis writes one: an optional `-`, digits, no leading
/// zeros (but `0`), no spaces, no `+`.
pub fn int(arg: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(arg).ok()?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
        || text == "-0"
    {
        return None;
    }
    text.parse().ok()
}

/// An integer argument, or Redis's error reply.
pub fn int_arg(arg: &[u8]) -> Result<i64, Reply> {
    int(arg).ok_or_else(|| Reply::error(NOT_INTEGER))
}

/// Whether `arg` is `word`, ignoring ASCII case.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// An integer's decimal bytes, as Redis stores a counter.
pub fn int_bytes(v: i64) -> Bytes {
    Bytes::from(v.to_string())
}

/// The error reply of a command called with the wrong number of arguments.
pub fn wrong_arity(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

/// The error reply of an unknown command, naming it and its first arguments as Redis does.
pub fn unknown_command(args: &[Bytes]) -> Reply {
    let name = args
        .first()
        .map(|a| String::from_utf8_lossy(a))
        .unwrap_or_default();
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        clip(&name)
    );
    for a in args.iter().skip(1) {
        if text.len() > 256 {
            break;
        }
        text.push_str(&format!("'{}' ", clip(&String::from_utf8_lossy(a))));
    }
    Reply::error(text)
}

fn clip(s: &str) -> String {
    s.chars().take(128).collect()
}

/// The error of an expire time that is not positive or overflows, for `command`.
pub fn invalid_expire(command: &str) -> Reply {
    Reply::error(format!("ERR invalid expire time in '{command}' command"))
}

/// A deadline in agreed time: `amount` in the unit `unit_ms` (1000: seconds), counted from
/// `now_ms` unless `absolute`. `None` if it overflows.
pub fn deadline(now_ms: u64, amount: i64, unit_ms: i64, absolute: bool) -> Option<i64> {
    let ms = amount.checked_mul(unit_ms)?;
    if absolute {
        Some(ms)
    } else {
        ms.checked_add(i64::try_from(now_ms).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_strictly() {
        assert_eq!(int(b"42"), Some(42));
        assert_eq!(int(b"-7"), Some(-7));
        assert_eq!(int(b"0"), Some(0));
        assert_eq!(int(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"+1",
            b" 1",
            b"01",
            b"-0",
            b"1.5",
            b"9223372036854775808",
            b"-",
        ] {
            assert_eq!(int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn unknown_commands_are_named_with_their_first_arguments() {
        let args = [Bytes::from("FOO"), Bytes::from("a"), Bytes::from("b")];
        assert_eq!(
            unknown_command(&args),
            Reply::error("ERR unknown command 'FOO', with args beginning with: 'a' 'b' ")
        );
        assert_eq!(
            wrong_arity("GET"),
            Reply::error("ERR wrong number of arguments for 'get' command")
        );
    }
}
