//! Fault injection for tests (`[testing] stall_file`): while the stall file exists in this
//! replica's data directory, the flushes it names wait, as on a disk that stalls.

use std::{path::PathBuf, time::Duration};

use tagma_core::config::StallFlush;
use tracing::warn;

/// How often a stalled flush looks whether the stall file is gone.
const STALL_POLL: Duration = Duration::from_millis(10);

/// Where this replica's stall file would be, and which flushes it holds.
pub(crate) struct FlushStall {
    file: Option<PathBuf>,
    flushes: Vec<StallFlush>,
}

impl FlushStall {
    /// No stall: durability off, or `stall_file` empty.
    pub(crate) fn none() -> Self {
        FlushStall {
            file: None,
            flushes: Vec::new(),
        }
    }

    /// The stall of the replica whose data directory is `data_dir`, as `[testing]` says.
    pub(crate) fn new(
        testing: &tagma_core::config::TestingSection,
        data_dir: &std::path::Path,
    ) -> Self {
        if testing.stall_file.is_empty() {
            return Self::none();
        }
        FlushStall {
            file: Some(data_dir.join(&testing.stall_file)),
            flushes: testing.stall_flushes.clone(),
        }
    }

    /// Before a `flush`: waits while the stall file exists (if it holds this kind of flush).
    pub(crate) fn wait(&self, flush: StallFlush) {
        let Some(file) = &self.file else {
            return;
        };
        if !self.flushes.contains(&flush) || !file.exists() {
            return;
        }
        warn!(%flush, file = %file.display(), "testing: the flush stalls while the stall file exists");
        let stalled = std::time::Instant::now();
        while file.exists() {
            std::thread::sleep(STALL_POLL);
        }
        warn!(%flush, ms = stalled.elapsed().as_millis() as u64, "testing: the stalled flush goes on");
    }
}
