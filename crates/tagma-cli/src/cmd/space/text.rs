//! `tagma space`'s text: tuples, templates and policies parsed from the command line, and
//! results shown as lines or one JSON object.

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tagma_space::{Policy, Protections, SpaceInfo, Stored, TypedTemplate, TypedTuple};

use super::args::SYNTAX;

pub(crate) fn stored_json(s: &Stored) -> Value {
    json!({
        "tuple": s.tuple.to_string(),
        "revision": s.revision,
        "lease_expires_ms": s.lease_expires_ms,
    })
}

pub(crate) fn stored_line(s: &Stored) -> String {
    match s.lease_expires_ms {
        Some(end) => format!("{}  revision {}  lease ends {end}", s.tuple, s.revision),
        None => format!("{}  revision {}", s.tuple, s.revision),
    }
}

pub(crate) fn parse_tuple(text: &str) -> Result<TypedTuple> {
    text.parse()
        .with_context(|| format!("`{text}` is not a tuple — {SYNTAX}"))
}

pub(crate) fn parse_template(text: &str) -> Result<TypedTemplate> {
    text.parse()
        .with_context(|| format!("`{text}` is not a template — {SYNTAX}"))
}

pub(crate) fn parse_policy(text: &str) -> Result<Policy> {
    text.replace(';', "\n")
        .parse()
        .map_err(|e| anyhow::anyhow!("the policy does not parse: {e}"))
}

pub(crate) fn parse_protection(text: &str) -> Result<Protections> {
    text.parse()
        .map_err(|e| anyhow::anyhow!("--protection {text}: {e}"))
}

/// What an operation printed, and whether it found what it looked for (exit status).
pub(crate) struct Shown {
    pub(crate) text: Vec<String>,
    pub(crate) json: Value,
    pub(crate) found: bool,
    /// Lines for standard error: faulty replicas that a read caught.
    pub(crate) warnings: Vec<String>,
}

pub(crate) fn one(found: Option<Stored>, none: &str) -> Shown {
    match found {
        Some(s) => Shown {
            text: vec![stored_line(&s)],
            json: json!({ "found": true, "tuple": stored_json(&s) }),
            found: true,
            warnings: Vec::new(),
        },
        None => Shown {
            text: vec![none.to_owned()],
            json: json!({ "found": false }),
            found: false,
            warnings: Vec::new(),
        },
    }
}

pub(crate) fn many(tuples: Vec<Stored>) -> Shown {
    Shown {
        text: tuples.iter().map(stored_line).collect(),
        json: json!({ "tuples": tuples.iter().map(stored_json).collect::<Vec<_>>() }),
        found: true,
        warnings: Vec::new(),
    }
}

pub(crate) fn spaces(list: Vec<SpaceInfo>) -> Shown {
    Shown {
        text: list
            .iter()
            .map(|s| match &s.protection {
                None => format!("{}  {} tuples  {} waiting", s.name, s.tuples, s.waiting),
                Some(p) => format!(
                    "{}  {} tuples  {} waiting  protection {p}",
                    s.name, s.tuples, s.waiting
                ),
            })
            .collect(),
        json: json!({ "spaces": list.iter().map(|s| json!({
            "name": s.name, "tuples": s.tuples, "waiting": s.waiting,
            "protection": s.protection.as_ref().map(ToString::to_string),
        })).collect::<Vec<_>>() }),
        found: true,
        warnings: Vec::new(),
    }
}

pub(crate) fn done(text: String, json: Value) -> Shown {
    Shown {
        text: vec![text],
        json,
        found: true,
        warnings: Vec::new(),
    }
}

/// A `cas` that found a match and inserted nothing (exit status 1).
pub(crate) fn not_inserted(existing: &Stored) -> Shown {
    Shown {
        text: vec![format!("not inserted: {}", stored_line(existing))],
        json: json!({ "inserted": false, "existing": stored_json(existing) }),
        found: false,
        warnings: Vec::new(),
    }
}

/// A `replace` that found no match (exit status 1).
pub(crate) fn nothing_replaced() -> Shown {
    Shown {
        text: vec!["no match: nothing replaced".into()],
        json: json!({ "replaced": false }),
        found: false,
        warnings: Vec::new(),
    }
}

/// How long one step of `watch` waits for the next tuple before asking again.
pub(crate) const WATCH_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `watch`'s loop: `next(after)` gives the oldest tuple with a revision above `after` (or
/// `None` when its wait ended without one); each is printed as a line or a JSON object,
/// until `count` were printed (never, without a count).
pub(crate) fn watch_each(
    count: Option<u64>,
    json: bool,
    mut next: impl FnMut(u64) -> Result<Option<Stored>>,
) -> Result<()> {
    let mut after = 0;
    let mut printed = 0;
    while count.is_none_or(|c| printed < c) {
        let Some(stored) = next(after)? else {
            continue;
        };
        after = stored.revision;
        printed += 1;
        if json {
            println!("{}", stored_json(&stored));
        } else {
            println!("{}", stored_line(&stored));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_tuples_templates_and_policies_name_the_syntax() {
        let e = parse_tuple("(\"a\", *)").unwrap_err();
        assert!(format!("{e:#}").contains("not a tuple"), "{e:#}");
        assert!(format!("{e:#}").contains("*int"), "{e:#}");
        let e = parse_template("(1,").unwrap_err();
        assert!(format!("{e:#}").contains("not a template"), "{e:#}");
        let p = parse_policy("read: any; insert: 1, 2; take: creator").unwrap();
        assert!(p.allows(tagma_space::OpClass::Insert, 2, 9));
        assert!(!p.allows(tagma_space::OpClass::Insert, 3, 9));
        assert!(p.allows(tagma_space::OpClass::Take, 9, 9));
        assert!(parse_policy("read anyone").is_err());
    }
}
