//! Hash maps with a fixed-seed hasher (foldhash): fast lookups by id that hash the same way
//! in every run. Their iteration order is arbitrary, so code that walks one sorts what it
//! found before acting on it, and behaviour never depends on the map's order.

use std::collections::HashMap;

/// A hash map keyed by ids, hashed with a fixed seed.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;
