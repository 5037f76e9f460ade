//! `tagma-history`: what clients did, and whether a linearizable service could have done it.
//!
//! - [`search`]: the Wing–Gong search for a linearization with the memoisation of Lowe
//!   ("Testing for linearizability", 2017), generic over the object's [`search::Model`];
//! - [`format`]: the exported history — one JSON object per line, one per client operation
//!   (`client`, `op`, `key`, `value`, `from`, `ok`, `call`, `return`, `fail`), the format
//!   external linearizability checkers read — written and read back with typed errors;
//! - [`register`]: the model of one key of the key-value store as the exported histories
//!   see it (a string or nothing: `get`, `put`, `append`, `delete`, `cas`), and the check of
//!   a whole history, key by key (linearizability is local: a history is linearizable when
//!   the history of each key is).

pub mod format;
pub mod register;
pub mod search;

pub use format::{FormatError, OpKind, Record, read_jsonl, write_jsonl};
pub use register::{HistoryVerdict, check_history};
pub use search::{Entry, LinError, Model, SEARCH_STATES_MAX};
