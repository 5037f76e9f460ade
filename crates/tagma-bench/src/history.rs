//! `tagma chaos --history FILE` and `tagma demo --history FILE`: beside the run's own load, a
//! few clients contend on shared keys and every operation they run is recorded
//! (`tagma_cluster::history_load`); at the end the history is written as JSON lines and
//! judged by the linearizability checker (`tagma_history`).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use tagma_client::Proxy;
use tagma_cluster::LocalCluster;
use tagma_cluster::history_load::Recorder;

/// Clients of the recorded load.
pub const HISTORY_CLIENTS: usize = 3;
/// Pause between one client's operations: keeps histories long enough to be demanding and
/// short enough to check.
const THINK: Duration = Duration::from_millis(2);

/// The recorded load of one run.
pub struct HistoryRun {
    path: PathBuf,
    recorder: Recorder,
    proxies: Vec<Proxy>,
}

/// What the recorded history showed.
#[derive(Clone, Debug, Serialize)]
pub struct HistoryOutcome {
    pub file: String,
    pub operations: usize,
    /// Operations whose outcome the client never learnt.
    pub unknown_outcome: usize,
    pub keys: usize,
    pub linearizable: bool,
    /// Keys no linearization explains, or whose search gave up.
    pub keys_refused: Vec<String>,
}

impl HistoryRun {
    /// Clients for a history to be written to `path`.
    pub fn connect(cluster: &LocalCluster, path: &Path) -> Result<HistoryRun> {
        let ready = Duration::from_secs(30);
        let proxies = (0..HISTORY_CLIENTS)
            .map(|_| cluster.proxy(ready))
            .collect::<Result<_>>()?;
        Ok(HistoryRun {
            path: path.to_owned(),
            recorder: Recorder::new(THINK),
            proxies,
        })
    }

    /// Runs the clients on `scope`'s threads until `stop`.
    pub fn spawn<'s>(&'s self, scope: &'s std::thread::Scope<'s, '_>, stop: &'s AtomicBool) {
        for (i, proxy) in self.proxies.iter().enumerate() {
            scope.spawn(move || self.recorder.run_client(proxy, i as u64 + 1, stop));
        }
    }

    /// Writes the history and judges it.
    pub fn finish(self) -> Result<HistoryOutcome> {
        let records = self.recorder.records();
        tagma_history::write_jsonl(&self.path, &records)
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        let verdict = tagma_history::check_history(&records);
        let mut keys_refused = verdict.not_linearizable.clone();
        keys_refused.extend(verdict.inconclusive.iter().cloned());
        Ok(HistoryOutcome {
            file: self.path.display().to_string(),
            operations: records.len(),
            unknown_outcome: records.iter().filter(|r| r.ret.is_none()).count(),
            keys: verdict.keys,
            linearizable: verdict.linearizable(),
            keys_refused,
        })
    }
}

impl HistoryOutcome {
    /// One line for a report's table.
    pub fn line(&self) -> String {
        format!("history                {}\n", self.summary())
    }

    /// What the history showed, in a few words.
    pub fn summary(&self) -> String {
        format!(
            "{} operations ({} of unknown outcome) on {} keys, {} — {}",
            self.operations,
            self.unknown_outcome,
            self.keys,
            if self.linearizable {
                "linearizable".to_owned()
            } else {
                format!("NOT linearizable on {:?}", self.keys_refused)
            },
            self.file
        )
    }
}
