//! Locking that survives a panicked holder: the proxy's state stays usable (every critical
//! section leaves it consistent), so a poisoned lock is taken as it is.

use std::sync::{Mutex, MutexGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
