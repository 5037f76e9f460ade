//! The text form of tuples and templates, as users type them on the command line and as
//! `tagma space` prints them:
//!
//! ```text
//! tuple    := "(" field ("," field)* ")"  |  field ("," field)*
//! field    := integer                      42, -7, 0x2a
//!           | string                       "build"  (escapes: \" \\ \n \t \r \0 \u{1F600})
//!           | bytes                        b"\x00ab"  (escapes as strings, plus \xHH)
//! template := the same, where a field may also be a wildcard:
//!             *  (any field)   *int   *str   *bytes  (any field of that type)
//! ```
//!
//! Whitespace between tokens is ignored. [`format_tuple`] and [`format_template`] write the
//! form [`parse_tuple`] and [`parse_template`] read back: printable ASCII stays as it is in
//! bytes, everything else is escaped.

use bytes::Bytes;

use crate::typed::{Field, FieldType, Pattern, TypedTemplate, TypedTuple};

/// Why text does not parse as a tuple or template: what was expected, and at which
/// character (counted from 0).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "at character {at}: {what} (fields look like 42, \"text\", b\"\\x00bytes\"; a template may use *, *int, *str, *bytes)"
)]
pub struct TextError {
    pub at: usize,
    pub what: String,
}

/// Parses a tuple (no wildcards).
pub fn parse_tuple(text: &str) -> Result<TypedTuple, TextError> {
    let patterns = Parser::new(text).parse_all(false)?;
    Ok(TypedTuple(
        patterns
            .into_iter()
            .map(|p| match p {
                Pattern::Is(f) => f,
                _ => unreachable!("wildcards are refused when parsing a tuple"),
            })
            .collect(),
    ))
}

/// Parses a template (values and wildcards).
pub fn parse_template(text: &str) -> Result<TypedTemplate, TextError> {
    Ok(TypedTemplate(Parser::new(text).parse_all(true)?))
}

/// The text form of a tuple: `("build", 42, b"\x00")`.
pub fn format_tuple(tuple: &TypedTuple) -> String {
    let fields: Vec<String> = tuple.0.iter().map(format_field).collect();
    format!("({})", fields.join(", "))
}

/// The text form of a template: `("build", *, *int)`.
pub fn format_template(template: &TypedTemplate) -> String {
    let fields: Vec<String> = template
        .0
        .iter()
        .map(|p| match p {
            Pattern::Any => "*".to_owned(),
            Pattern::AnyOf(FieldType::Int) => "*int".to_owned(),
            Pattern::AnyOf(FieldType::Str) => "*str".to_owned(),
            Pattern::AnyOf(FieldType::Bytes) => "*bytes".to_owned(),
            Pattern::Is(f) => format_field(f),
        })
        .collect();
    format!("({})", fields.join(", "))
}

/// The text form of one field.
pub fn format_field(field: &Field) -> String {
    match field {
        Field::Int(v) => v.to_string(),
        Field::Str(s) => {
            let mut out = String::with_capacity(s.len() + 2);
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    '\r' => out.push_str("\\r"),
                    '\0' => out.push_str("\\0"),
                    c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
        Field::Bytes(b) => {
            let mut out = String::with_capacity(b.len() + 3);
            out.push_str("b\"");
            for &byte in b.iter() {
                match byte {
                    b'"' => out.push_str("\\\""),
                    b'\\' => out.push_str("\\\\"),
                    0x20..=0x7e => out.push(byte as char),
                    _ => out.push_str(&format!("\\x{byte:02x}")),
                }
            }
            out.push('"');
            out
        }
    }
}

struct Parser<'a> {
    chars: Vec<(usize, char)>,
    pos: usize,
    text: &'a str,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Parser {
            chars: text.chars().enumerate().collect(),
            pos: 0,
            text,
        }
    }

    fn error<T>(&self, what: impl Into<String>) -> Result<T, TextError> {
        Err(TextError {
            at: self.chars.get(self.pos).map_or(self.chars.len(), |c| c.0),
            what: what.into(),
        })
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).map(|c| c.1)
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn parse_all(mut self, wildcards: bool) -> Result<Vec<Pattern>, TextError> {
        if self.text.trim().is_empty() {
            return self.error("a tuple needs at least one field");
        }
        let parenthesised = self.eat('(');
        let mut fields = vec![self.pattern(wildcards)?];
        while self.eat(',') {
            fields.push(self.pattern(wildcards)?);
        }
        if parenthesised && !self.eat(')') {
            return self.error("expected ',' or ')'");
        }
        self.skip_space();
        if self.peek().is_some() {
            return self.error(if parenthesised {
                "unexpected text after ')'"
            } else {
                "expected ',' between fields"
            });
        }
        Ok(fields)
    }

    fn pattern(&mut self, wildcards: bool) -> Result<Pattern, TextError> {
        self.skip_space();
        match self.peek() {
            Some('*') => {
                if !wildcards {
                    return self.error("a tuple holds values, not wildcards");
                }
                self.pos += 1;
                let word = self.word();
                match word.as_str() {
                    "" => Ok(Pattern::Any),
                    "int" => Ok(Pattern::AnyOf(FieldType::Int)),
                    "str" => Ok(Pattern::AnyOf(FieldType::Str)),
                    "bytes" => Ok(Pattern::AnyOf(FieldType::Bytes)),
                    other => self.error(format!(
                        "unknown wildcard *{other} (use *, *int, *str or *bytes)"
                    )),
                }
            }
            Some('"') => Ok(Pattern::Is(Field::Str(self.string()?))),
            Some('b') if self.chars.get(self.pos + 1).map(|c| c.1) == Some('"') => {
                self.pos += 1;
                Ok(Pattern::Is(Field::Bytes(Bytes::from(self.bytes()?))))
            }
            Some(c) if c == '-' || c == '+' || c.is_ascii_digit() => {
                Ok(Pattern::Is(Field::Int(self.integer()?)))
            }
            Some(_) => self.error("expected a field"),
            None => self.error("expected a field, found the end"),
        }
    }

    fn word(&mut self) -> String {
        let mut out = String::new();
        while let Some(c) = self.peek().filter(char::is_ascii_alphanumeric) {
            out.push(c);
            self.pos += 1;
        }
        out
    }

    fn integer(&mut self) -> Result<i64, TextError> {
        let start = self.pos;
        let negative = match self.peek() {
            Some('-') => {
                self.pos += 1;
                true
            }
            Some('+') => {
                self.pos += 1;
                false
            }
            _ => false,
        };
        let digits = self.word();
        let magnitude = match digits.strip_prefix("0x").or(digits.strip_prefix("0X")) {
            Some(hex) => i128::from_str_radix(hex, 16),
            None => digits.parse::<i128>(),
        };
        let value = magnitude.ok().map(|m| if negative { -m } else { m });
        match value.and_then(|v| i64::try_from(v).ok()) {
            Some(v) => Ok(v),
            None => {
                self.pos = start;
                self.error("not a 64-bit signed integer")
            }
        }
    }

    /// A quoted string's characters (the opening quote at the cursor).
    fn string(&mut self) -> Result<String, TextError> {
        let mut out = String::new();
        self.quoted(|c, out: &mut String| out.push(c), &mut out, false)?;
        Ok(out)
    }

    /// A quoted bytes literal's bytes (the opening quote at the cursor).
    fn bytes(&mut self) -> Result<Vec<u8>, TextError> {
        let mut out = Vec::new();
        self.quoted(
            |c, out: &mut Vec<u8>| {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            },
            &mut out,
            true,
        )?;
        Ok(out)
    }

    /// Reads a quoted literal, giving each character to `push` (`\xHH` in bytes literals
    /// pushes the raw byte instead, through `out` being bytes).
    fn quoted<O: RawByte>(
        &mut self,
        push: impl Fn(char, &mut O),
        out: &mut O,
        bytes: bool,
    ) -> Result<(), TextError> {
        debug_assert_eq!(self.peek(), Some('"'));
        self.pos += 1;
        loop {
            let Some(c) = self.peek() else {
                return self.error("the quoted text has no closing '\"'");
            };
            self.pos += 1;
            match c {
                '"' => return Ok(()),
                '\\' => {
                    let Some(e) = self.peek() else {
                        return self.error("the quoted text ends inside an escape");
                    };
                    self.pos += 1;
                    match e {
                        '"' => push('"', out),
                        '\\' => push('\\', out),
                        'n' => push('\n', out),
                        't' => push('\t', out),
                        'r' => push('\r', out),
                        '0' => push('\0', out),
                        'x' if bytes => {
                            let hex: String = (0..2).filter_map(|_| self.next_char()).collect();
                            match u8::from_str_radix(&hex, 16) {
                                Ok(b) if hex.len() == 2 => out.push_raw(b),
                                _ => return self.error("\\x needs two hex digits"),
                            }
                        }
                        'u' => {
                            if !self.eat_raw('{') {
                                return self.error("\\u needs the form \\u{hex}");
                            }
                            let mut hex = String::new();
                            while let Some(h) = self.next_char() {
                                if h == '}' {
                                    break;
                                }
                                hex.push(h);
                            }
                            match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                                Some(c) => push(c, out),
                                None => return self.error("\\u{..} names no character"),
                            }
                        }
                        other => return self.error(format!("unknown escape \\{other}")),
                    }
                }
                c => push(c, out),
            }
        }
    }

    fn next_char(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    fn eat_raw(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
}

/// Where a `\xHH` escape's raw byte goes.
trait RawByte {
    fn push_raw(&mut self, byte: u8);
}

impl RawByte for Vec<u8> {
    fn push_raw(&mut self, byte: u8) {
        self.push(byte);
    }
}

impl RawByte for String {
    fn push_raw(&mut self, _byte: u8) {
        unreachable!("strings have no \\x escape")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Field {
        Field::Str(v.to_owned())
    }

    #[test]
    fn tuples_parse_with_or_without_parentheses() {
        let t = parse_tuple(r#"("build", 42, -7, 0x2a, b"\x00ab\"")"#).unwrap();
        assert_eq!(
            t,
            TypedTuple(vec![
                s("build"),
                Field::Int(42),
                Field::Int(-7),
                Field::Int(42),
                Field::Bytes(Bytes::from_static(b"\x00ab\"")),
            ])
        );
        assert_eq!(
            parse_tuple(r#" "job" , 1 "#).unwrap().0,
            vec![s("job"), Field::Int(1)]
        );
        assert_eq!(
            parse_tuple(&i64::MIN.to_string()).unwrap().0,
            vec![Field::Int(i64::MIN)]
        );
    }

    #[test]
    fn templates_parse_wildcards_and_tuples_refuse_them() {
        let t = parse_template(r#"("lock", *, *int, *str, *bytes)"#).unwrap();
        assert_eq!(
            t.0,
            vec![
                Pattern::Is(s("lock")),
                Pattern::Any,
                Pattern::AnyOf(FieldType::Int),
                Pattern::AnyOf(FieldType::Str),
                Pattern::AnyOf(FieldType::Bytes),
            ]
        );
        let e = parse_tuple(r#"("lock", *)"#).unwrap_err();
        assert_eq!(e.at, 9);
        assert!(e.what.contains("not wildcards"), "{e}");
        assert!(
            parse_template("(*float)")
                .unwrap_err()
                .what
                .contains("*float")
        );
    }

    #[test]
    fn malformed_text_is_refused_with_where_and_what() {
        for (text, at, what) in [
            ("", 0, "at least one field"),
            ("(1, 2", 5, "',' or ')'"),
            ("(1) 2", 4, "after ')'"),
            ("1 2", 2, "',' between"),
            ("\"open", 5, "closing"),
            ("99999999999999999999", 0, "64-bit"),
            ("b\"\\x4\"", 6, "two hex digits"),
            ("\"\\q\"", 3, "unknown escape"),
            ("(1,)", 3, "expected a field"),
            ("abc", 0, "expected a field"),
        ] {
            let e = parse_template(text).unwrap_err();
            assert_eq!(e.at, at, "{text}: {e}");
            assert!(e.what.contains(what), "{text}: {e}");
        }
        let e = parse_tuple("x").unwrap_err().to_string();
        assert!(e.contains("*int"), "the error shows the syntax: {e}");
    }

    #[test]
    fn formatting_round_trips() {
        let tuple = TypedTuple(vec![
            s("quote \" back\\slash\nline\ttab\u{1}é"),
            Field::Int(i64::MIN),
            Field::Bytes(Bytes::from_static(b"\x00\xff plain \"q\" \\")),
        ]);
        let text = format_tuple(&tuple);
        assert_eq!(parse_tuple(&text).unwrap(), tuple, "{text}");
        let template = TypedTemplate(vec![
            Pattern::Any,
            Pattern::AnyOf(FieldType::Bytes),
            Pattern::Is(Field::Int(3)),
        ]);
        let text = format_template(&template);
        assert_eq!(text, "(*, *bytes, 3)");
        assert_eq!(parse_template(&text).unwrap(), template);
    }
}
