//! The textual form of typed tuples and templates, as people write them in policies and on
//! the command line, and as the service's messages show them.
//!
//! ```text
//! tuple    := "(" field ("," field)* ")"
//! template := "(" pattern ("," pattern)* ")"
//! field    := integer                   -12, 0, 42 (a signed 64-bit integer)
//!           | string                    "lock" (escapes: \" \\ \n \r \t \u{7f})
//!           | bytes                     0x (empty), 0x00ff (an even count of hex digits)
//! pattern  := field                     that value
//!           | "*"                       any field
//!           | "*int" | "*str" | "*bytes"  any field of that type
//! ```
//!
//! Blanks between tokens are ignored. [`std::fmt::Display`] writes this form (strings with
//! their special characters escaped, bytes in lower-case hex), and parsing what it writes
//! gives the value back.

use std::fmt;

use bytes::Bytes;

use crate::typed::{Field, FieldType, Pattern, TypedTemplate, TypedTuple};

/// Why text does not parse as a tuple or template.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("expected {expected} at `{found}`")]
    Expected {
        expected: &'static str,
        found: String,
    },
    #[error("`{0}` is not a 64-bit integer (from -9223372036854775808 to 9223372036854775807)")]
    BadInteger(String),
    #[error("the string is not closed: add a `\"` at its end")]
    UnclosedString,
    #[error("unknown escape `\\{0}` in a string (use \\\" \\\\ \\n \\r \\t or \\u{{hex}})")]
    BadEscape(char),
    #[error("`{0}` is not a byte string: write 0x and an even count of hex digits")]
    BadBytes(String),
    #[error("a wildcard in a tuple: a tuple's fields are values (wildcards go in templates)")]
    WildcardInTuple,
    #[error("`{0}` follows the closing parenthesis")]
    Trailing(String),
}

/// The first few characters of `rest`, for an error message.
fn near(rest: &str) -> String {
    if rest.is_empty() {
        return "the end".into();
    }
    rest.chars().take(16).collect()
}

/// A cursor over text being parsed.
pub(crate) struct Cursor<'a> {
    pub(crate) rest: &'a str,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Cursor { rest: text }
    }

    pub(crate) fn skip_blanks(&mut self) {
        self.rest = self.rest.trim_start();
    }

    /// Consumes `token` (after blanks) if it comes next.
    pub(crate) fn eat(&mut self, token: &str) -> bool {
        self.skip_blanks();
        match self.rest.strip_prefix(token) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, token: &'static str, expected: &'static str) -> Result<(), TextError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(TextError::Expected {
                expected,
                found: near(self.rest),
            })
        }
    }

    /// A word of letters, digits, `_`, `-` and `x` characters (a number or a byte string).
    fn word(&mut self) -> &'a str {
        let end = self
            .rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(self.rest.len());
        let (word, rest) = self.rest.split_at(end);
        self.rest = rest;
        word
    }

    fn string(&mut self) -> Result<String, TextError> {
        // The opening quote is consumed by the caller.
        let mut out = String::new();
        let mut chars = self.rest.char_indices();
        while let Some((at, c)) = chars.next() {
            match c {
                '"' => {
                    self.rest = &self.rest[at + 1..];
                    return Ok(out);
                }
                '\\' => {
                    let Some((_, e)) = chars.next() else {
                        return Err(TextError::UnclosedString);
                    };
                    out.push(match e {
                        '"' => '"',
                        '\\' => '\\',
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        'u' => {
                            let mut hex = String::new();
                            if !matches!(chars.next(), Some((_, '{'))) {
                                return Err(TextError::BadEscape('u'));
                            }
                            loop {
                                match chars.next() {
                                    Some((_, '}')) => break,
                                    Some((_, h)) if h.is_ascii_hexdigit() && hex.len() < 6 => {
                                        hex.push(h)
                                    }
                                    _ => return Err(TextError::BadEscape('u')),
                                }
                            }
                            u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or(TextError::BadEscape('u'))?
                        }
                        other => return Err(TextError::BadEscape(other)),
                    });
                }
                c => out.push(c),
            }
        }
        Err(TextError::UnclosedString)
    }

    /// One pattern (a field, or a wildcard).
    fn pattern(&mut self) -> Result<Pattern, TextError> {
        self.skip_blanks();
        if self.eat("*") {
            let typed = self.word();
            return match typed {
                "" => Ok(Pattern::Any),
                "int" => Ok(Pattern::AnyOf(FieldType::Int)),
                "str" => Ok(Pattern::AnyOf(FieldType::Str)),
                "bytes" => Ok(Pattern::AnyOf(FieldType::Bytes)),
                other => Err(TextError::Expected {
                    expected: "*, *int, *str or *bytes",
                    found: format!("*{other}"),
                }),
            };
        }
        if self.eat("\"") {
            return Ok(Pattern::Is(Field::Str(self.string()?)));
        }
        let word = self.word();
        if let Some(hex) = word.strip_prefix("0x") {
            return parse_hex(hex)
                .map(|b| Pattern::Is(Field::Bytes(b)))
                .ok_or_else(|| TextError::BadBytes(word.into()));
        }
        if word.is_empty() {
            return Err(TextError::Expected {
                expected: "a field (an integer, a \"string\", 0x bytes) or a wildcard",
                found: near(self.rest),
            });
        }
        word.parse::<i64>()
            .map(|v| Pattern::Is(Field::Int(v)))
            .map_err(|_| TextError::BadInteger(word.into()))
    }

    /// `( pattern, ... )`.
    pub(crate) fn patterns(&mut self) -> Result<Vec<Pattern>, TextError> {
        self.expect("(", "`(` opening a tuple or template")?;
        let mut out = vec![self.pattern()?];
        while self.eat(",") {
            out.push(self.pattern()?);
        }
        self.expect(")", "`,` or `)`")?;
        Ok(out)
    }

    /// Fails unless only blanks are left.
    pub(crate) fn finish(&mut self) -> Result<(), TextError> {
        self.skip_blanks();
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(TextError::Trailing(near(self.rest)))
        }
    }
}

fn parse_hex(hex: &str) -> Option<Bytes> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .map(Bytes::from)
}

impl std::str::FromStr for TypedTemplate {
    type Err = TextError;

    fn from_str(text: &str) -> Result<Self, TextError> {
        let mut cursor = Cursor::new(text);
        let patterns = cursor.patterns()?;
        cursor.finish()?;
        Ok(TypedTemplate(patterns))
    }
}

impl std::str::FromStr for TypedTuple {
    type Err = TextError;

    fn from_str(text: &str) -> Result<Self, TextError> {
        let template: TypedTemplate = text.parse()?;
        template
            .0
            .into_iter()
            .map(|p| match p {
                Pattern::Is(f) => Ok(f),
                _ => Err(TextError::WildcardInTuple),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(TypedTuple)
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Int(v) => write!(f, "{v}"),
            Field::Str(s) => {
                f.write_str("\"")?;
                for c in s.chars() {
                    match c {
                        '"' => f.write_str("\\\"")?,
                        '\\' => f.write_str("\\\\")?,
                        '\n' => f.write_str("\\n")?,
                        '\r' => f.write_str("\\r")?,
                        '\t' => f.write_str("\\t")?,
                        c if c.is_control() => write!(f, "\\u{{{:x}}}", c as u32)?,
                        c => write!(f, "{c}")?,
                    }
                }
                f.write_str("\"")
            }
            Field::Bytes(b) => {
                f.write_str("0x")?;
                b.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
            }
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Any => f.write_str("*"),
            Pattern::AnyOf(FieldType::Int) => f.write_str("*int"),
            Pattern::AnyOf(FieldType::Str) => f.write_str("*str"),
            Pattern::AnyOf(FieldType::Bytes) => f.write_str("*bytes"),
            Pattern::Is(field) => field.fmt(f),
        }
    }
}

fn write_list<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T]) -> fmt::Result {
    f.write_str("(")?;
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        item.fmt(f)?;
    }
    f.write_str(")")
}

impl fmt::Display for TypedTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_list(f, &self.0)
    }
}

impl fmt::Display for TypedTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_list(f, &self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuples_and_templates_print_and_parse_back() {
        let tuple = TypedTuple(vec![
            Field::Str("lock \"a\"\\\n\t\r\u{7f}é".into()),
            Field::Int(i64::MIN),
            Field::Int(42),
            Field::Bytes(Bytes::from_static(b"\x00\xff")),
            Field::Bytes(Bytes::new()),
        ]);
        let text = tuple.to_string();
        assert_eq!(
            text,
            r#"("lock \"a\"\\\n\t\r\u{7f}é", -9223372036854775808, 42, 0x00ff, 0x)"#
        );
        assert_eq!(text.parse::<TypedTuple>().unwrap(), tuple);
        let template = TypedTemplate(vec![
            Pattern::Is(Field::Str("lock".into())),
            Pattern::AnyOf(FieldType::Str),
            Pattern::Any,
            Pattern::AnyOf(FieldType::Int),
            Pattern::AnyOf(FieldType::Bytes),
        ]);
        let text = template.to_string();
        assert_eq!(text, r#"("lock", *str, *, *int, *bytes)"#);
        assert_eq!(text.parse::<TypedTemplate>().unwrap(), template);
        assert_eq!(
            " ( 1 ,\"x\",*  ) ".parse::<TypedTemplate>().unwrap(),
            TypedTemplate(vec![
                Pattern::Is(Field::Int(1)),
                Pattern::Is(Field::Str("x".into())),
                Pattern::Any
            ])
        );
    }

    #[test]
    fn bad_text_is_a_typed_error_naming_the_problem() {
        let cases: [(&str, TextError); 9] = [
            (
                "1, 2",
                TextError::Expected {
                    expected: "`(` opening a tuple or template",
                    found: "1, 2".into(),
                },
            ),
            (
                "(99999999999999999999)",
                TextError::BadInteger("99999999999999999999".into()),
            ),
            ("(\"open)", TextError::UnclosedString),
            ("(\"a\\q\")", TextError::BadEscape('q')),
            ("(0xabc)", TextError::BadBytes("0xabc".into())),
            ("(0xzz)", TextError::BadBytes("0xzz".into())),
            (
                "(*float)",
                TextError::Expected {
                    expected: "*, *int, *str or *bytes",
                    found: "*float".into(),
                },
            ),
            ("(1) x", TextError::Trailing("x".into())),
            (
                "()",
                TextError::Expected {
                    expected: "a field (an integer, a \"string\", 0x bytes) or a wildcard",
                    found: ")".into(),
                },
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(text.parse::<TypedTemplate>(), Err(expected), "{text}");
        }
        assert_eq!(
            "(1, *)".parse::<TypedTuple>(),
            Err(TextError::WildcardInTuple)
        );
        assert!(
            "(1".parse::<TypedTuple>()
                .unwrap_err()
                .to_string()
                .contains("`)`")
        );
    }
}
