//! Typed tuples and templates of the coordination service: fields that are signed 64-bit
//! integers, UTF-8 strings or bytes; templates whose fields are values or (typed) wildcards;
//! the limits a tuple and a template must keep; matching; and their byte encoding, whose
//! decoder rejects every malformed input with a typed error.
//!
//! Encoding (all integers little-endian):
//!
//! ```text
//! tuple    := count u8 | field*                       (count = arity, 1..=255)
//! field    := 1 | i64                                  an integer
//!           | 2 | len u32 | UTF-8 bytes                a string
//!           | 3 | len u32 | bytes                      bytes
//! template := count u8 | pattern*
//! pattern  := 0                                        any field
//!           | 4 | 5 | 6                                any integer, any string, any bytes
//!           | field                                    that value
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// One field of a tuple.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    Int(i64),
    Str(String),
    Bytes(Bytes),
}

/// The type of a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FieldType {
    Int,
    Str,
    Bytes,
}

/// One field of a template.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// Matches any field.
    Any,
    /// Matches any field of this type.
    AnyOf(FieldType),
    /// Matches a field equal to this one (same type, same value).
    Is(Field),
}

/// A tuple: 1..=`Limits::arity_max` fields.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TypedTuple(pub Vec<Field>);

/// A template: as many patterns as the tuples it matches have fields.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TypedTemplate(pub Vec<Pattern>);

/// What a tuple or template may hold (the service's configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most fields a tuple or template has (at most 255, the encoding's bound).
    pub arity_max: usize,
    /// The most bytes of one string or bytes field.
    pub field_bytes_max: usize,
    /// The most bytes of a whole encoded tuple (in a protected space, with its sealed part).
    pub tuple_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            arity_max: 16,
            field_bytes_max: 64 << 10,
            tuple_bytes_max: 256 << 10,
        }
    }
}

/// Why a tuple or template is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("a tuple or template needs at least one field")]
    Empty,
    #[error("{arity} fields is more than the {max} allowed (space limits: arity_max)")]
    TooManyFields { arity: usize, max: usize },
    #[error("field {index} holds {len} bytes, more than the {max} allowed (field_bytes_max)")]
    FieldTooLarge {
        index: usize,
        len: usize,
        max: usize,
    },
    #[error("the tuple encodes to {len} bytes, more than the {max} allowed (tuple_bytes_max)")]
    TupleTooLarge { len: usize, max: usize },
}

/// Why bytes do not decode as a tuple or template.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the input ends inside a field")]
    Truncated,
    #[error("unknown field tag {0}")]
    UnknownTag(u8),
    #[error("a wildcard where a tuple needs a value (field {0})")]
    WildcardInTuple(usize),
    #[error("field {0} is a string that is not UTF-8")]
    NotUtf8(usize),
    #[error("{0} bytes are left after the last field")]
    TrailingBytes(usize),
    #[error(transparent)]
    Shape(#[from] ShapeError),
}

impl Field {
    pub fn field_type(&self) -> FieldType {
        match self {
            Field::Int(_) => FieldType::Int,
            Field::Str(_) => FieldType::Str,
            Field::Bytes(_) => FieldType::Bytes,
        }
    }

    /// The bytes of a string or bytes field (0 for an integer).
    fn payload_len(&self) -> usize {
        match self {
            Field::Int(_) => 0,
            Field::Str(s) => s.len(),
            Field::Bytes(b) => b.len(),
        }
    }

    pub(crate) fn encode(&self, out: &mut BytesMut) {
        match self {
            Field::Int(v) => {
                out.put_u8(1);
                out.put_i64_le(*v);
            }
            Field::Str(s) => {
                out.put_u8(2);
                out.put_u32_le(s.len() as u32);
                out.put_slice(s.as_bytes());
            }
            Field::Bytes(b) => {
                out.put_u8(3);
                out.put_u32_le(b.len() as u32);
                out.put_slice(b);
            }
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            Field::Int(_) => 1 + 8,
            Field::Str(s) => 1 + 4 + s.len(),
            Field::Bytes(b) => 1 + 4 + b.len(),
        }
    }
}

impl Pattern {
    /// Whether `field` matches this pattern.
    pub fn matches(&self, field: &Field) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::AnyOf(t) => field.field_type() == *t,
            Pattern::Is(v) => v == field,
        }
    }
}

impl TypedTemplate {
    /// Whether `tuple` matches: the same arity, and every field matches its pattern.
    pub fn matches(&self, tuple: &TypedTuple) -> bool {
        self.0.len() == tuple.0.len() && self.0.iter().zip(&tuple.0).all(|(p, f)| p.matches(f))
    }

    /// Checks the template against `limits` (its values count like a tuple's fields).
    pub fn check(&self, limits: &Limits) -> Result<(), ShapeError> {
        check_arity(self.0.len(), limits)?;
        for (index, p) in self.0.iter().enumerate() {
            if let Pattern::Is(f) = p {
                check_field(index, f, limits)?;
            }
        }
        Ok(())
    }

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out.freeze()
    }

    /// Appends the encoding to `out` (a template inside a larger message).
    pub fn encode_into(&self, out: &mut BytesMut) {
        out.put_u8(self.0.len() as u8);
        for p in &self.0 {
            match p {
                Pattern::Any => out.put_u8(0),
                Pattern::AnyOf(FieldType::Int) => out.put_u8(4),
                Pattern::AnyOf(FieldType::Str) => out.put_u8(5),
                Pattern::AnyOf(FieldType::Bytes) => out.put_u8(6),
                Pattern::Is(f) => f.encode(out),
            }
        }
    }

    /// The bytes [`TypedTemplate::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        1 + self
            .0
            .iter()
            .map(|p| match p {
                Pattern::Is(f) => f.encoded_len(),
                _ => 1,
            })
            .sum::<usize>()
    }

    /// Decodes a whole template and checks it against `limits`.
    pub fn decode(bytes: &Bytes, limits: &Limits) -> Result<Self, DecodeError> {
        let mut buf = bytes.clone();
        let template = Self::decode_from(&mut buf, limits)?;
        if buf.has_remaining() {
            return Err(DecodeError::TrailingBytes(buf.remaining()));
        }
        Ok(template)
    }

    /// Decodes one template from the front of `buf` (a template inside a larger message),
    /// leaves the rest in `buf`, and checks the template against `limits`.
    pub fn decode_from(buf: &mut Bytes, limits: &Limits) -> Result<Self, DecodeError> {
        let template = TypedTemplate(decode_patterns(buf, true)?);
        template.check(limits)?;
        Ok(template)
    }
}

impl TypedTuple {
    /// Checks the tuple against `limits`.
    pub fn check(&self, limits: &Limits) -> Result<(), ShapeError> {
        check_arity(self.0.len(), limits)?;
        for (index, f) in self.0.iter().enumerate() {
            check_field(index, f, limits)?;
        }
        let len = self.encoded_len();
        if len > limits.tuple_bytes_max {
            return Err(ShapeError::TupleTooLarge {
                len,
                max: limits.tuple_bytes_max,
            });
        }
        Ok(())
    }

    /// The bytes [`TypedTuple::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        1 + self.0.iter().map(Field::encoded_len).sum::<usize>()
    }

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out.freeze()
    }

    /// Appends the encoding to `out` (a tuple inside a larger message).
    pub fn encode_into(&self, out: &mut BytesMut) {
        out.put_u8(self.0.len() as u8);
        for f in &self.0 {
            f.encode(out);
        }
    }

    /// Decodes a whole tuple and checks it against `limits`. Bytes fields share the input's
    /// buffer (no copy).
    pub fn decode(bytes: &Bytes, limits: &Limits) -> Result<Self, DecodeError> {
        let mut buf = bytes.clone();
        let tuple = Self::decode_from(&mut buf, limits)?;
        if buf.has_remaining() {
            return Err(DecodeError::TrailingBytes(buf.remaining()));
        }
        Ok(tuple)
    }

    /// Decodes one tuple from the front of `buf` (a tuple inside a larger message), leaves
    /// the rest in `buf`, and checks the tuple against `limits`.
    pub fn decode_from(buf: &mut Bytes, limits: &Limits) -> Result<Self, DecodeError> {
        let patterns = decode_patterns(buf, false)?;
        let fields = patterns
            .into_iter()
            .enumerate()
            .map(|(i, p)| match p {
                Pattern::Is(f) => Ok(f),
                _ => Err(DecodeError::WildcardInTuple(i)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let tuple = TypedTuple(fields);
        tuple.check(limits)?;
        Ok(tuple)
    }
}

fn check_arity(arity: usize, limits: &Limits) -> Result<(), ShapeError> {
    if arity == 0 {
        return Err(ShapeError::Empty);
    }
    let max = limits.arity_max.min(u8::MAX as usize);
    if arity > max {
        return Err(ShapeError::TooManyFields { arity, max });
    }
    Ok(())
}

fn check_field(index: usize, f: &Field, limits: &Limits) -> Result<(), ShapeError> {
    let len = f.payload_len();
    if len > limits.field_bytes_max {
        return Err(ShapeError::FieldTooLarge {
            index,
            len,
            max: limits.field_bytes_max,
        });
    }
    Ok(())
}

/// Reads a count and that many patterns; a wildcard in a tuple is reported by the caller.
fn decode_patterns(buf: &mut Bytes, wildcards: bool) -> Result<Vec<Pattern>, DecodeError> {
    if !buf.has_remaining() {
        return Err(DecodeError::Truncated);
    }
    let count = buf.get_u8() as usize;
    let mut out = Vec::with_capacity(count);
    for index in 0..count {
        if !buf.has_remaining() {
            return Err(DecodeError::Truncated);
        }
        let tag = buf.get_u8();
        let pattern = match tag {
            0 => Pattern::Any,
            4 => Pattern::AnyOf(FieldType::Int),
            5 => Pattern::AnyOf(FieldType::Str),
            6 => Pattern::AnyOf(FieldType::Bytes),
            1 => {
                if buf.remaining() < 8 {
                    return Err(DecodeError::Truncated);
                }
                Pattern::Is(Field::Int(buf.get_i64_le()))
            }
            2 | 3 => {
                if buf.remaining() < 4 {
                    return Err(DecodeError::Truncated);
                }
                let len = buf.get_u32_le() as usize;
                if buf.remaining() < len {
                    return Err(DecodeError::Truncated);
                }
                let data = buf.split_to(len);
                if tag == 2 {
                    let s = std::str::from_utf8(&data).map_err(|_| DecodeError::NotUtf8(index))?;
                    Pattern::Is(Field::Str(s.to_owned()))
                } else {
                    Pattern::Is(Field::Bytes(data))
                }
            }
            other => return Err(DecodeError::UnknownTag(other)),
        };
        if !wildcards && !matches!(pattern, Pattern::Is(_)) {
            return Err(DecodeError::WildcardInTuple(index));
        }
        out.push(pattern);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(fields: Vec<Field>) -> TypedTuple {
        TypedTuple(fields)
    }

    fn job(name: &str, n: i64) -> TypedTuple {
        t(vec![
            Field::Str(name.into()),
            Field::Int(n),
            Field::Bytes(Bytes::from_static(b"\x00\xff")),
        ])
    }

    #[test]
    fn templates_match_by_value_type_and_arity() {
        let tuple = job("build", 42);
        let exact = TypedTemplate(vec![
            Pattern::Is(Field::Str("build".into())),
            Pattern::Is(Field::Int(42)),
            Pattern::Any,
        ]);
        assert!(exact.matches(&tuple));
        let typed = TypedTemplate(vec![
            Pattern::AnyOf(FieldType::Str),
            Pattern::AnyOf(FieldType::Int),
            Pattern::AnyOf(FieldType::Bytes),
        ]);
        assert!(typed.matches(&tuple));
        // A value of another type never matches, even with the same bytes.
        let wrong_type = TypedTemplate(vec![
            Pattern::Is(Field::Bytes(Bytes::from_static(b"build"))),
            Pattern::Any,
            Pattern::Any,
        ]);
        assert!(!wrong_type.matches(&tuple));
        let wrong_wildcard_type = TypedTemplate(vec![
            Pattern::AnyOf(FieldType::Int),
            Pattern::Any,
            Pattern::Any,
        ]);
        assert!(!wrong_wildcard_type.matches(&tuple));
        let other_value =
            TypedTemplate(vec![Pattern::Any, Pattern::Is(Field::Int(7)), Pattern::Any]);
        assert!(!other_value.matches(&tuple));
        let shorter = TypedTemplate(vec![Pattern::Any, Pattern::Any]);
        assert!(!shorter.matches(&tuple), "arity differs");
    }

    #[test]
    fn tuples_and_templates_round_trip() {
        let limits = Limits::default();
        for tuple in [
            job("build", -1),
            t(vec![Field::Int(i64::MIN), Field::Int(i64::MAX)]),
            t(vec![Field::Str(String::new())]),
            t(vec![
                Field::Str("héllo ✓".into()),
                Field::Bytes(Bytes::new()),
            ]),
        ] {
            let bytes = tuple.encode();
            assert_eq!(bytes.len(), tuple.encoded_len());
            assert_eq!(TypedTuple::decode(&bytes, &limits).unwrap(), tuple);
        }
        let template = TypedTemplate(vec![
            Pattern::Any,
            Pattern::AnyOf(FieldType::Int),
            Pattern::AnyOf(FieldType::Str),
            Pattern::AnyOf(FieldType::Bytes),
            Pattern::Is(Field::Str("x".into())),
            Pattern::Is(Field::Int(3)),
        ]);
        assert_eq!(
            TypedTemplate::decode(&template.encode(), &limits).unwrap(),
            template
        );
    }

    #[test]
    fn limits_are_enforced_with_the_key_to_raise() {
        let limits = Limits {
            arity_max: 2,
            field_bytes_max: 4,
            tuple_bytes_max: 20,
        };
        assert_eq!(t(vec![]).check(&limits), Err(ShapeError::Empty));
        let e = t(vec![Field::Int(1); 3]).check(&limits).unwrap_err();
        assert_eq!(e, ShapeError::TooManyFields { arity: 3, max: 2 });
        assert!(e.to_string().contains("arity_max"), "{e}");
        let e = t(vec![Field::Str("12345".into())])
            .check(&limits)
            .unwrap_err();
        assert_eq!(
            e,
            ShapeError::FieldTooLarge {
                index: 0,
                len: 5,
                max: 4
            }
        );
        // 1 + (1 + 4 + 4) + (1 + 8) = 19 fits; one more byte of string does not.
        assert!(
            t(vec![Field::Str("1234".into()), Field::Int(0)])
                .check(&limits)
                .is_ok()
        );
        let limits = Limits {
            tuple_bytes_max: 18,
            ..limits
        };
        let e = t(vec![Field::Str("1234".into()), Field::Int(0)])
            .check(&limits)
            .unwrap_err();
        assert_eq!(e, ShapeError::TupleTooLarge { len: 19, max: 18 });
        // A template's values obey the field limit too; its wildcards count only for arity.
        let template = TypedTemplate(vec![Pattern::Is(Field::Bytes(Bytes::from_static(
            b"toolong",
        )))]);
        assert!(matches!(
            template.check(&limits),
            Err(ShapeError::FieldTooLarge { .. })
        ));
        // Decoding checks the limits.
        let big = t(vec![Field::Int(1); 3]).encode();
        assert_eq!(
            TypedTuple::decode(&big, &limits),
            Err(DecodeError::Shape(ShapeError::TooManyFields {
                arity: 3,
                max: 2
            }))
        );
    }

    #[test]
    fn malformed_bytes_are_typed_errors() {
        let limits = Limits::default();
        let cases: [(&[u8], DecodeError); 7] = [
            (b"", DecodeError::Truncated),
            (b"\x01", DecodeError::Truncated),
            (b"\x01\x01\x00", DecodeError::Truncated),
            (b"\x01\x09", DecodeError::UnknownTag(9)),
            (b"\x01\x00", DecodeError::WildcardInTuple(0)),
            (b"\x01\x02\x01\x00\x00\x00\xff", DecodeError::NotUtf8(0)),
            (
                b"\x01\x03\x00\x00\x00\x00\x07",
                DecodeError::TrailingBytes(1),
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(
                TypedTuple::decode(&Bytes::from_static(bytes), &limits),
                Err(expected),
                "{bytes:?}"
            );
        }
        // A length beyond the input is truncation, not an allocation.
        assert_eq!(
            TypedTuple::decode(&Bytes::from_static(b"\x01\x03\xff\xff\xff\xff"), &limits),
            Err(DecodeError::Truncated)
        );
    }

    #[test]
    fn decode_from_reads_one_value_and_leaves_the_rest() {
        let limits = Limits::default();
        let tuple = job("build", 1);
        let template = TypedTemplate(vec![Pattern::Any, Pattern::Is(Field::Int(2))]);
        assert_eq!(template.encode().len(), template.encoded_len());
        let mut out = BytesMut::new();
        tuple.encode_into(&mut out);
        template.encode_into(&mut out);
        out.put_u8(0xaa);
        let mut buf = out.freeze();
        assert_eq!(TypedTuple::decode_from(&mut buf, &limits).unwrap(), tuple);
        assert_eq!(
            TypedTemplate::decode_from(&mut buf, &limits).unwrap(),
            template
        );
        assert_eq!(&buf[..], &[0xaa]);
    }

    /// Every prefix and every one-byte change of valid encodings decodes or fails with a
    /// typed error; none panics.
    #[test]
    fn damaged_encodings_never_panic() {
        let limits = Limits::default();
        let tuple = job("build", 42).encode();
        let template = TypedTemplate(vec![
            Pattern::Any,
            Pattern::Is(Field::Int(5)),
            Pattern::AnyOf(FieldType::Bytes),
        ])
        .encode();
        for bytes in [tuple, template] {
            let mut decoded = 0;
            let mut check = |input: Bytes| {
                // What decodes is canonical: it encodes back to the same bytes.
                if let Ok(t) = TypedTuple::decode(&input, &limits) {
                    assert_eq!(t.encode(), input);
                    decoded += 1;
                }
                if let Ok(p) = TypedTemplate::decode(&input, &limits) {
                    assert_eq!(p.encode(), input);
                    decoded += 1;
                }
            };
            for cut in 0..bytes.len() {
                assert!(TypedTuple::decode(&bytes.slice(..cut), &limits).is_err());
                check(bytes.slice(..cut));
            }
            for at in 0..bytes.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut damaged = bytes.to_vec();
                    damaged[at] ^= flip;
                    check(Bytes::from(damaged));
                }
            }
            check(bytes);
            assert!(decoded >= 1, "the undamaged encoding decodes");
        }
    }
}
