//! Where things are in a `tagma.toml`: the line and column of a byte offset, the key at an
//! offset, and the offset of a key. Keys are written as [`crate::ConfigError`] names them:
//! dotted, with arrays of tables indexed (`cluster.f`, `replica[2].addr`).
//!
//! The document is read with `toml`'s spanned parser, which recovers from syntax errors, so
//! a key is found even in a file that does not parse as a whole.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

/// A line and column in a text, both counted from 1 (columns in characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    /// The position of byte `offset` of `text` (the end of the text beyond it).
    pub fn of_offset(text: &str, offset: usize) -> Position {
        let mut end = offset.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let before = &text[..end];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Position {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

/// One key of the document: its path, the span of its name and the span of its value (for
/// a table, its header).
struct Entry {
    path: String,
    name: Range<usize>,
    value: Range<usize>,
}

fn entries(text: &str) -> Vec<Entry> {
    let (document, _) = DeTable::parse_recoverable(text);
    let mut out = Vec::new();
    walk(document.get_ref(), "", &mut out);
    out
}

fn walk(table: &DeTable<'_>, prefix: &str, out: &mut Vec<Entry>) {
    for (name, value) in table.iter() {
        let path = if prefix.is_empty() {
            name.get_ref().to_string()
        } else {
            format!("{prefix}.{}", name.get_ref())
        };
        out.push(Entry {
            path: path.clone(),
            name: name.span(),
            value: value.span(),
        });
        match value.get_ref() {
            DeValue::Table(inner) => walk(inner, &path, out),
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let path = format!("{path}[{i}]");
                    out.push(Entry {
                        path: path.clone(),
                        name: item.span(),
                        value: item.span(),
                    });
                    if let DeValue::Table(inner) = item.get_ref() {
                        walk(inner, &path, out);
                    }
                }
            }
            _ => {}
        }
    }
}

fn spans(range: &Range<usize>, offset: usize) -> bool {
    range.contains(&offset) || (range.is_empty() && range.start == offset)
}

/// The key at byte `offset`: the one whose name or value spans it (the narrowest), else the
/// last key before it; `None` before the first key.
pub fn key_at(text: &str, offset: usize) -> Option<String> {
    let entries = entries(text);
    let spanning = entries
        .iter()
        .flat_map(|e| [(e, &e.name), (e, &e.value)])
        .filter(|(_, range)| spans(range, offset))
        .min_by_key(|(_, range)| range.len());
    if let Some((entry, _)) = spanning {
        return Some(entry.path.clone());
    }
    entries
        .iter()
        .filter(|e| e.name.start < offset)
        .max_by_key(|e| e.name.start)
        .map(|e| e.path.clone())
}

/// The byte offset of `key` in the document (of its name), else of the nearest enclosing
/// key that is there (`limits` for a `limits.frame_bytes_max` left to its default).
pub fn offset_of(text: &str, key: &str) -> Option<usize> {
    let entries = entries(text);
    let mut key = key;
    loop {
        if let Some(entry) = entries.iter().find(|e| e.path == key) {
            return Some(entry.name.start);
        }
        key = &key[..key.rfind(['.', '['])?];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "[cluster]\nmode = \"bft\"\nf = \"one\"\n\n[[replica]]\nid = 0\naddr = \"a\"\n\n[[replica]]\nid = 1\naddr = \"ü\"\n";

    #[test]
    fn offsets_become_lines_and_columns_counted_from_one() {
        assert_eq!(Position::of_offset(DOC, 0), Position { line: 1, column: 1 });
        let f = DOC.find("\"one\"").unwrap();
        assert_eq!(Position::of_offset(DOC, f), Position { line: 3, column: 5 });
        // Columns count characters, not bytes: `addr = "ü` is 9.
        let after = DOC.find('ü').unwrap() + 'ü'.len_utf8();
        assert_eq!(
            Position::of_offset(DOC, after),
            Position {
                line: 11,
                column: 10
            }
        );
        assert_eq!(Position::of_offset(DOC, usize::MAX).line, 12);
    }

    #[test]
    fn keys_are_found_by_offset_and_offsets_by_key() {
        let f = DOC.find("\"one\"").unwrap();
        assert_eq!(key_at(DOC, f).as_deref(), Some("cluster.f"));
        let second_addr = DOC.rfind("addr").unwrap();
        assert_eq!(key_at(DOC, second_addr).as_deref(), Some("replica[1].addr"));
        assert_eq!(offset_of(DOC, "replica[1].addr"), Some(second_addr));
        assert_eq!(offset_of(DOC, "cluster.f"), DOC.find("f ="));
        // A key left to its default: its table; no table either: nothing.
        assert_eq!(offset_of(DOC, "cluster.signed_requests"), Some(1));
        assert_eq!(offset_of(DOC, "limits.frame_bytes_max"), None);
        // A table's header is its key; before any key there is none.
        assert_eq!(key_at(DOC, 0).as_deref(), Some("cluster"));
        assert_eq!(key_at("\n\n[cluster]\n", 0), None);
    }

    #[test]
    fn a_key_is_found_in_a_document_that_does_not_parse() {
        let broken = "[cluster]\nmode = \"bft\"\nf = \n[batch]\nbatch_size_max = 3\n";
        let error = toml::from_str::<toml::Table>(broken).unwrap_err();
        let at = error.span().unwrap().start;
        assert_eq!(key_at(broken, at).as_deref(), Some("cluster.f"));
        assert_eq!(
            Position::of_offset(broken, at),
            Position { line: 3, column: 5 }
        );
    }
}
