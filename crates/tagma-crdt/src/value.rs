//! The value a CRDT shows its users, detached from the replication metadata behind it.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;

/// A CRDT's current value.
///
/// `Display` writes byte strings as quoted text when they are printable UTF-8 and as `0x`-hex
/// otherwise, sets and maps in their (sorted) iteration order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A register's value; `None` before the first assignment or after a map key removal.
    Register(Option<Bytes>),
    /// A counter's value.
    Counter(i64),
    /// A set's elements in ascending byte order.
    Set(Vec<Bytes>),
    /// A map's present keys with their values.
    Map(BTreeMap<Bytes, Value>),
}

/// Writes `bytes` as `"text"` when printable UTF-8, as `0x…` hex otherwise.
fn write_bytes(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(char::is_control) => write!(f, "{text:?}"),
        _ => {
            f.write_str("0x")?;
            bytes.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Register(None) => f.write_str("none"),
            Value::Register(Some(bytes)) => write_bytes(f, bytes),
            Value::Counter(value) => write!(f, "{value}"),
            Value::Set(elements) => {
                f.write_str("{")?;
                for (index, element) in elements.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write_bytes(f, element)?;
                }
                f.write_str("}")
            }
            Value::Map(entries) => {
                f.write_str("{")?;
                for (index, (key, value)) in entries.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write_bytes(f, key)?;
                    write!(f, ": {value}")?;
                }
                f.write_str("}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Value;
    use bytes::Bytes;
    use std::collections::BTreeMap;

    #[test]
    fn display_quotes_text_and_hexes_binary() {
        let mut map = BTreeMap::new();
        map.insert(Bytes::from_static(b"n"), Value::Counter(-3));
        map.insert(
            Bytes::from_static(b"s"),
            Value::Set(vec![
                Bytes::from_static(b"a"),
                Bytes::from_static(&[0, 255]),
            ]),
        );
        map.insert(Bytes::from_static(b"r"), Value::Register(None));
        assert_eq!(
            Value::Map(map).to_string(),
            r#"{"n": -3, "r": none, "s": {"a", 0x00ff}}"#
        );
        assert_eq!(
            Value::Register(Some(Bytes::from_static(b"hi"))).to_string(),
            r#""hi""#
        );
    }
}
