//! A space's access policy: a small declarative form, fixed when the space is created and
//! checked deterministically by every replica as it executes an operation.
//!
//! Operations fall in four classes:
//! - **read**: `rdp`, `rd`, `rdAll`, and the existence test of `cas`;
//! - **insert**: `out`, the insert of `cas` and `replace`, and `renew` (of the invoker's own
//!   tuples);
//! - **take**: `inp`, `in`, `inAll`, and the take of `replace`;
//! - **admin**: `destroy`.
//!
//! Each class admits a set of principals (the authenticated client key indices). Rules narrow
//! it further:
//! - `<class> requires field <n> = invoker` (read, insert or take): the operation applies only
//!   to tuples whose field `n` is the integer of the invoker's principal. A read or take
//!   treats any other tuple as absent; an insert of another tuple is denied.
//! - `unique <template>`: at most one tuple matching the template exists; an insert that would
//!   make a second is denied.
//!
//! Textual form (one statement a line; blank lines and lines starting with `#` are ignored;
//! templates as in [`crate::text`]):
//!
//! ```text
//! policy     := line*
//! line       := class ":" principals
//!             | class "requires field" integer "=" "invoker"
//!             | "unique" template
//! class      := "read" | "insert" | "take" | "admin"
//! principals := "any" | "none" | member ("," member)*
//! member     := "creator" | integer             (a principal number, 0 to 4294967295)
//! ```
//!
//! A class with no line keeps its default: `any` for read, insert and take, `creator` (the
//! principal that created the space) for admin. [`Policy::default`] is that policy with no
//! rules. [`std::fmt::Display`] writes every class line, then the rules in their order, and
//! parsing what it writes gives the policy back.
//!
//! Encoding (inside a create request): four principal sets (read, insert, take, admin), each
//! `0` (any) or `1 | creator flag u8 | count u16 | principal u32*` (ascending, distinct), then
//! `count u8 | rule*`, a rule being `1 | class u8 (0 read, 1 insert, 2 take) | field u8` or
//! `2 | template`.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{DecodeError, Reader};
use crate::text::{Cursor, TextError};
use crate::typed::{Field, Limits, ShapeError, TypedTemplate, TypedTuple};

/// The most principals one class lists.
pub const POLICY_PRINCIPALS_MAX: usize = 256;
/// The most rules a policy has.
pub const POLICY_RULES_MAX: usize = 16;

/// A class of operations, as a policy grants them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpClass {
    Read,
    Insert,
    Take,
    Admin,
}

impl OpClass {
    pub const ALL: [OpClass; 4] = [
        OpClass::Read,
        OpClass::Insert,
        OpClass::Take,
        OpClass::Admin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpClass::Read => "read",
            OpClass::Insert => "insert",
            OpClass::Take => "take",
            OpClass::Admin => "admin",
        }
    }

    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(code: u8) -> Option<Self> {
        OpClass::ALL.get(code as usize).copied()
    }

    fn from_name(name: &str) -> Option<Self> {
        OpClass::ALL.into_iter().find(|c| c.name() == name)
    }
}

impl fmt::Display for OpClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The principals a class admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principals {
    /// Every client.
    Any,
    /// The space's creator if `creator`, and the principals `ids` (ascending, distinct).
    /// Neither: nobody.
    Listed { creator: bool, ids: Vec<u32> },
}

impl Principals {
    /// Nobody.
    pub fn none() -> Self {
        Principals::Listed {
            creator: false,
            ids: Vec::new(),
        }
    }

    /// The space's creator only.
    pub fn creator() -> Self {
        Principals::Listed {
            creator: true,
            ids: Vec::new(),
        }
    }

    /// These principals (in any order; duplicates count once).
    pub fn only(ids: impl IntoIterator<Item = u32>) -> Self {
        let mut ids: Vec<u32> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        Principals::Listed {
            creator: false,
            ids,
        }
    }

    /// Whether `invoker` is admitted in a space created by `creator`.
    pub fn admits(&self, invoker: u32, creator: u32) -> bool {
        match self {
            Principals::Any => true,
            Principals::Listed { creator: c, ids } => {
                (*c && invoker == creator) || ids.binary_search(&invoker).is_ok()
            }
        }
    }

    fn encode_into(&self, out: &mut BytesMut) {
        match self {
            Principals::Any => out.put_u8(0),
            Principals::Listed { creator, ids } => {
                out.put_u8(1);
                out.put_u8(u8::from(*creator));
                out.put_u16_le(ids.len() as u16);
                for id in ids {
                    out.put_u32_le(*id);
                }
            }
        }
    }

    fn decode_from(r: &mut Reader) -> Result<Self, DecodeError> {
        match r.u8("a principal set")? {
            0 => Ok(Principals::Any),
            1 => {
                let creator = r.flag("a principal set's creator flag")?;
                let count = r.u16("a principal set")? as usize;
                if count > POLICY_PRINCIPALS_MAX {
                    return Err(DecodeError::TooLong {
                        what: "a principal set",
                        len: count,
                        max: POLICY_PRINCIPALS_MAX,
                    });
                }
                let mut ids = Vec::with_capacity(count.min(r.remaining() / 4));
                for _ in 0..count {
                    let id = r.u32("a principal")?;
                    if ids.last().is_some_and(|last| *last >= id) {
                        return Err(DecodeError::NotCanonical(
                            "principals must be ascending and distinct",
                        ));
                    }
                    ids.push(id);
                }
                Ok(Principals::Listed { creator, ids })
            }
            tag => Err(DecodeError::UnknownTag {
                what: "principal set",
                tag,
            }),
        }
    }
}

impl fmt::Display for Principals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principals::Any => f.write_str("any"),
            Principals::Listed { creator, ids } => {
                if !creator && ids.is_empty() {
                    return f.write_str("none");
                }
                let mut items: Vec<String> = Vec::with_capacity(ids.len() + 1);
                if *creator {
                    items.push("creator".into());
                }
                items.extend(ids.iter().map(u32::to_string));
                f.write_str(&items.join(", "))
            }
        }
    }
}

/// A rule that narrows what a class admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Operations of `class` (read, insert or take) apply only to tuples whose field `field`
    /// is `Int(invoker's principal)`.
    FieldIsInvoker { class: OpClass, field: u8 },
    /// At most one tuple matching this template exists.
    Unique(TypedTemplate),
}

/// Why a policy does not parse, or does not fit the service's limits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "`{0}` is no policy line: write `<class>: <principals>`, \
         `<class> requires field <n> = invoker` or `unique <template>`"
    )]
    BadLine(String),
    #[error("`{0}` is no operation class: use read, insert, take or admin")]
    UnknownClass(String),
    #[error(
        "`{0}` is no principal: use `any`, `none`, or `creator` and principal numbers \
         separated by commas"
    )]
    BadPrincipal(String),
    #[error("`{0}:` is given twice: give each class one line")]
    DuplicateClass(OpClass),
    #[error("admin operations touch no tuple: field rules apply to read, insert and take")]
    AdminFieldRule,
    #[error("the template of `unique {line}`: {error}")]
    Template { line: String, error: TextError },
    #[error("`{class}:` lists {count} principals, more than the {max} allowed")]
    TooManyPrincipals {
        class: OpClass,
        count: usize,
        max: usize,
    },
    #[error("{count} rules is more than the {max} a policy may have")]
    TooManyRules { count: usize, max: usize },
    #[error(
        "the rule on field {field} names a field beyond the {arity_max} a tuple may have: \
         number fields from 0"
    )]
    FieldBeyondArity { field: u8, arity_max: usize },
    #[error("a `unique` template: {0}")]
    Shape(ShapeError),
}

/// A space's access policy (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub read: Principals,
    pub insert: Principals,
    pub take: Principals,
    pub admin: Principals,
    pub rules: Vec<Rule>,
}

impl Default for Policy {
    /// Everyone reads, inserts and takes; the creator administers; no rules.
    fn default() -> Self {
        Policy {
            read: Principals::Any,
            insert: Principals::Any,
            take: Principals::Any,
            admin: Principals::creator(),
            rules: Vec::new(),
        }
    }
}

impl Policy {
    /// The principals `class` admits.
    pub fn principals(&self, class: OpClass) -> &Principals {
        match class {
            OpClass::Read => &self.read,
            OpClass::Insert => &self.insert,
            OpClass::Take => &self.take,
            OpClass::Admin => &self.admin,
        }
    }

    fn principals_mut(&mut self, class: OpClass) -> &mut Principals {
        match class {
            OpClass::Read => &mut self.read,
            OpClass::Insert => &mut self.insert,
            OpClass::Take => &mut self.take,
            OpClass::Admin => &mut self.admin,
        }
    }

    /// Whether `invoker` may run operations of `class` in a space `creator` created.
    pub fn allows(&self, class: OpClass, invoker: u32, creator: u32) -> bool {
        self.principals(class).admits(invoker, creator)
    }

    /// Whether `tuple` passes every field rule of `class` for `invoker` (a read or take skips
    /// a tuple that does not; an insert of it is denied).
    pub fn field_rules_hold(&self, class: OpClass, invoker: u32, tuple: &TypedTuple) -> bool {
        self.rules.iter().all(|rule| match rule {
            Rule::FieldIsInvoker { class: c, field } if *c == class => {
                tuple.0.get(*field as usize) == Some(&Field::Int(i64::from(invoker)))
            }
            _ => true,
        })
    }

    /// The `unique` templates that `tuple` matches: inserting it is denied if the space
    /// holds another tuple matching one of them.
    pub fn unique_templates<'a>(
        &'a self,
        tuple: &'a TypedTuple,
    ) -> impl Iterator<Item = &'a TypedTemplate> + 'a {
        self.rules.iter().filter_map(move |rule| match rule {
            Rule::Unique(template) if template.matches(tuple) => Some(template),
            _ => None,
        })
    }

    /// Checks the policy against the service's limits and its own bounds.
    pub fn check(&self, limits: &Limits) -> Result<(), PolicyError> {
        self.check_bounds()?;
        for rule in &self.rules {
            match rule {
                Rule::FieldIsInvoker { field, .. } if *field as usize >= limits.arity_max => {
                    return Err(PolicyError::FieldBeyondArity {
                        field: *field,
                        arity_max: limits.arity_max,
                    });
                }
                Rule::FieldIsInvoker { .. } => {}
                Rule::Unique(template) => template.check(limits).map_err(PolicyError::Shape)?,
            }
        }
        Ok(())
    }

    /// Checks what holds whatever the limits: the counts the encoding bounds
    /// ([`POLICY_RULES_MAX`], [`POLICY_PRINCIPALS_MAX`]), and no field rule on admin.
    pub fn check_bounds(&self) -> Result<(), PolicyError> {
        if self.rules.len() > POLICY_RULES_MAX {
            return Err(PolicyError::TooManyRules {
                count: self.rules.len(),
                max: POLICY_RULES_MAX,
            });
        }
        for class in OpClass::ALL {
            if let Principals::Listed { ids, .. } = self.principals(class)
                && ids.len() > POLICY_PRINCIPALS_MAX
            {
                return Err(PolicyError::TooManyPrincipals {
                    class,
                    count: ids.len(),
                    max: POLICY_PRINCIPALS_MAX,
                });
            }
        }
        if self.rules.iter().any(|rule| {
            matches!(
                rule,
                Rule::FieldIsInvoker {
                    class: OpClass::Admin,
                    ..
                }
            )
        }) {
            return Err(PolicyError::AdminFieldRule);
        }
        Ok(())
    }

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        self.encode_into(&mut out);
        out.freeze()
    }

    /// Appends the encoding to `out`. Only a policy that [`Policy::check_bounds`] accepts
    /// encodes to something that decodes (its counts fit the encoding's).
    pub fn encode_into(&self, out: &mut BytesMut) {
        for class in OpClass::ALL {
            self.principals(class).encode_into(out);
        }
        out.put_u8(self.rules.len() as u8);
        for rule in &self.rules {
            match rule {
                Rule::FieldIsInvoker { class, field } => {
                    out.put_u8(1);
                    out.put_u8(class.code());
                    out.put_u8(*field);
                }
                Rule::Unique(template) => {
                    out.put_u8(2);
                    template.encode_into(out);
                }
            }
        }
    }

    /// Decodes a whole policy; its templates are checked against `limits`.
    pub fn decode(bytes: &Bytes, limits: &Limits) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let policy = Self::decode_from(&mut r, limits)?;
        r.finish()?;
        Ok(policy)
    }

    /// Decodes one policy from `r` (a policy inside a larger message).
    pub fn decode_from(r: &mut Reader, limits: &Limits) -> Result<Self, DecodeError> {
        let read = Principals::decode_from(r)?;
        let insert = Principals::decode_from(r)?;
        let take = Principals::decode_from(r)?;
        let admin = Principals::decode_from(r)?;
        let count = r.u8("a policy's rules")? as usize;
        if count > POLICY_RULES_MAX {
            return Err(DecodeError::TooLong {
                what: "a policy's rules",
                len: count,
                max: POLICY_RULES_MAX,
            });
        }
        let mut rules = Vec::with_capacity(count);
        for _ in 0..count {
            rules.push(match r.u8("a policy rule")? {
                1 => {
                    let code = r.u8("a field rule's class")?;
                    let class = OpClass::from_code(code)
                        .filter(|c| *c != OpClass::Admin)
                        .ok_or(DecodeError::UnknownTag {
                            what: "field rule class",
                            tag: code,
                        })?;
                    let field = r.u8("a field rule's field")?;
                    Rule::FieldIsInvoker { class, field }
                }
                2 => Rule::Unique(r.template(limits)?),
                tag => {
                    return Err(DecodeError::UnknownTag {
                        what: "policy rule",
                        tag,
                    });
                }
            });
        }
        Ok(Policy {
            read,
            insert,
            take,
            admin,
            rules,
        })
    }
}

fn parse_principals(text: &str) -> Result<Principals, PolicyError> {
    match text.trim() {
        "any" => return Ok(Principals::Any),
        "none" => return Ok(Principals::none()),
        _ => {}
    }
    let mut creator = false;
    let mut ids = Vec::new();
    for item in text.split(',').map(str::trim) {
        match item {
            "creator" => creator = true,
            item => ids.push(
                item.parse::<u32>()
                    .map_err(|_| PolicyError::BadPrincipal(item.into()))?,
            ),
        }
    }
    let Principals::Listed { ids, .. } = Principals::only(ids) else {
        unreachable!("only() lists")
    };
    Ok(Principals::Listed { creator, ids })
}

/// `requires field <n> = invoker`, after the class.
fn parse_field_rule(class: OpClass, rest: &str, line: &str) -> Result<Rule, PolicyError> {
    let bad = || PolicyError::BadLine(line.into());
    let rest = rest.trim_start().strip_prefix("requires").ok_or_else(bad)?;
    let rest = rest.trim_start().strip_prefix("field").ok_or_else(bad)?;
    let (field, rest) = rest.split_once('=').ok_or_else(bad)?;
    if rest.trim() != "invoker" {
        return Err(bad());
    }
    if class == OpClass::Admin {
        return Err(PolicyError::AdminFieldRule);
    }
    let field = field.trim().parse::<u8>().map_err(|_| bad())?;
    Ok(Rule::FieldIsInvoker { class, field })
}

impl std::str::FromStr for Policy {
    type Err = PolicyError;

    fn from_str(text: &str) -> Result<Self, PolicyError> {
        let mut policy = Policy::default();
        let mut given = [false; 4];
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(template) = line.strip_prefix("unique") {
                let mut cursor = Cursor::new(template);
                let template = cursor
                    .patterns()
                    .and_then(|p| cursor.finish().map(|()| p))
                    .map_err(|error| PolicyError::Template {
                        line: template.trim().into(),
                        error,
                    })?;
                policy.rules.push(Rule::Unique(TypedTemplate(template)));
                continue;
            }
            let end = line
                .find(|c: char| !c.is_ascii_alphabetic())
                .unwrap_or(line.len());
            let (word, rest) = line.split_at(end);
            let class =
                OpClass::from_name(word).ok_or_else(|| PolicyError::UnknownClass(word.into()))?;
            if let Some(principals) = rest.trim_start().strip_prefix(':') {
                if std::mem::replace(&mut given[class as usize], true) {
                    return Err(PolicyError::DuplicateClass(class));
                }
                *policy.principals_mut(class) = parse_principals(principals)?;
            } else {
                policy.rules.push(parse_field_rule(class, rest, line)?);
            }
        }
        policy.check_bounds()?;
        Ok(policy)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for class in OpClass::ALL {
            writeln!(f, "{class}: {}", self.principals(class))?;
        }
        for rule in &self.rules {
            match rule {
                Rule::FieldIsInvoker { class, field } => {
                    writeln!(f, "{class} requires field {field} = invoker")?
                }
                Rule::Unique(template) => writeln!(f, "unique {template}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
