//! The exported history: one JSON object per line, one per client operation.
//!
//! | key | meaning |
//! |---|---|
//! | `client` | the client that ran it (integer) |
//! | `op` | `get`, `put`, `append`, `delete` or `cas` |
//! | `key` | the key (string) |
//! | `value` | `get`: the value read, `null` when the key was absent (or the read's outcome is unknown); `put`, `append`: the value written or appended; `cas`: the new value; `delete`: `null` |
//! | `from` | `cas` only: the value expected, `null` for "absent" |
//! | `ok` | `cas` only: whether it swapped (`null` when the outcome is unknown) |
//! | `call`, `return` | nanoseconds on one monotonic clock; `return` is `null` when the outcome is unknown (a timeout, a crash) |
//! | `fail` | `true` only for an operation known not to have taken effect (absent otherwise) |
//!
//! Keys appear in this order. Reading checks every field and names the line of a bad one.

use std::io::{BufRead, Write};
use std::path::Path;

use serde_json::{Value, json};
use thiserror::Error;

/// An operation's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    Get,
    Put,
    Append,
    Delete,
    Cas,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Get => "get",
            OpKind::Put => "put",
            OpKind::Append => "append",
            OpKind::Delete => "delete",
            OpKind::Cas => "cas",
        }
    }

    fn parse(name: &str) -> Option<OpKind> {
        Some(match name {
            "get" => OpKind::Get,
            "put" => OpKind::Put,
            "append" => OpKind::Append,
            "delete" => OpKind::Delete,
            "cas" => OpKind::Cas,
            _ => return None,
        })
    }
}

/// One client operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub client: u64,
    pub op: OpKind,
    pub key: String,
    pub value: Option<String>,
    /// `cas`: the value expected (`None`: absent).
    pub from: Option<String>,
    /// `cas`: whether it swapped, when known.
    pub ok: Option<bool>,
    pub call: u64,
    /// `None`: the outcome is unknown.
    pub ret: Option<u64>,
    /// Known not to have taken effect.
    pub fail: bool,
}

impl Record {
    /// The record as one line of JSON, its keys in the documented order.
    pub fn to_json_line(&self) -> String {
        let mut fields: Vec<(&str, Value)> = vec![
            ("client", json!(self.client)),
            ("op", json!(self.op.name())),
            ("key", json!(self.key)),
            ("value", json!(self.value)),
        ];
        if self.op == OpKind::Cas {
            fields.push(("from", json!(self.from)));
            fields.push(("ok", json!(self.ok)));
        }
        fields.push(("call", json!(self.call)));
        fields.push(("return", json!(self.ret)));
        if self.fail {
            fields.push(("fail", json!(true)));
        }
        let body: Vec<String> = (fields.iter())
            .map(|(k, v)| format!("{}:{v}", json!(k)))
            .collect();
        format!("{{{}}}", body.join(","))
    }

    fn from_json(v: &Value) -> Result<Record, String> {
        let obj = v.as_object().ok_or("not a JSON object")?;
        let field = |k: &str| obj.get(k).ok_or_else(|| format!("no `{k}`"));
        let int = |k: &str| {
            field(k)?
                .as_u64()
                .ok_or_else(|| format!("`{k}` is not a non-negative integer"))
        };
        let string_or_null = |k: &str| -> Result<Option<String>, String> {
            match obj.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("`{k}` is neither a string nor null")),
            }
        };
        let op = field("op")?
            .as_str()
            .and_then(OpKind::parse)
            .ok_or("`op` is not one of get, put, append, delete, cas")?;
        let ret = match field("return")? {
            Value::Null => None,
            v => Some(
                v.as_u64()
                    .ok_or("`return` is neither an integer nor null")?,
            ),
        };
        let ok = match obj.get("ok") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err("`ok` is neither a boolean nor null".into()),
        };
        let fail = match obj.get("fail") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("`fail` is not a boolean".into()),
        };
        let record = Record {
            client: int("client")?,
            op,
            key: field("key")?
                .as_str()
                .ok_or("`key` is not a string")?
                .to_owned(),
            value: string_or_null("value")?,
            from: string_or_null("from")?,
            ok,
            call: int("call")?,
            ret,
            fail,
        };
        if record.ret.is_some_and(|r| r < record.call) {
            return Err("`return` is before `call`".into());
        }
        if matches!(op, OpKind::Put | OpKind::Append | OpKind::Cas) && record.value.is_none() {
            return Err(format!("a {} needs a `value`", op.name()));
        }
        if op == OpKind::Cas && record.ret.is_some() && record.ok.is_none() && !record.fail {
            return Err("a cas that returned needs `ok`".into());
        }
        Ok(record)
    }
}

/// A history file that could not be read.
#[derive(Debug, Error)]
pub enum FormatError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}, line {line}: {why}")]
    Line {
        path: String,
        line: usize,
        why: String,
    },
}

/// Writes `records`, one JSON object per line.
pub fn write_jsonl(path: &Path, records: &[Record]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in records {
        out.write_all(r.to_json_line().as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads a history written by [`write_jsonl`] (or by anyone else in the same format); blank
/// lines are skipped.
pub fn read_jsonl(path: &Path) -> Result<Vec<Record>, FormatError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| FormatError::Io {
        path: shown.clone(),
        source,
    })?;
    let mut records = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| FormatError::Io {
            path: shown.clone(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: String| FormatError::Line {
            path: shown.clone(),
            line: i + 1,
            why,
        };
        let value: Value = serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
        records.push(Record::from_json(&value).map_err(bad)?);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_write_in_the_documented_form_and_read_back() {
        let records = vec![
            Record {
                client: 3,
                op: OpKind::Cas,
                key: "k".into(),
                value: Some("new".into()),
                from: None,
                ok: Some(true),
                call: 10,
                ret: Some(20),
                fail: false,
            },
            Record {
                client: 4,
                op: OpKind::Get,
                key: "k".into(),
                value: None,
                from: None,
                ok: None,
                call: 15,
                ret: None,
                fail: false,
            },
        ];
        assert_eq!(
            records[0].to_json_line(),
            r#"{"client":3,"op":"cas","key":"k","value":"new","from":null,"ok":true,"call":10,"return":20}"#
        );
        let dir = std::env::temp_dir().join(format!("tagma-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.jsonl");
        write_jsonl(&path, &records).unwrap();
        assert_eq!(read_jsonl(&path).unwrap(), records);
        std::fs::write(
            &path,
            "{\"client\":1,\"op\":\"put\",\"key\":\"k\",\"value\":null,\"call\":1,\"return\":2}\n",
        )
        .unwrap();
        let err = read_jsonl(&path).unwrap_err().to_string();
        assert!(
            err.contains("line 1") && err.contains("needs a `value`"),
            "{err}"
        );
        std::fs::write(
            &path,
            "{\"client\":1,\"op\":\"incr\",\"key\":\"k\",\"call\":1,\"return\":2}\n",
        )
        .unwrap();
        assert!(read_jsonl(&path).unwrap_err().to_string().contains("`op`"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
