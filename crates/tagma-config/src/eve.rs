//! The `[eve]` section: the settings of execute-verify replication's primary-backup
//! deployment (`tagma eve serve`): two servers, listed as the `[[replica]]` entries, that
//! both execute every batch in parallel and compare tokens.

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EveSection {
    /// Execution threads of each server.
    pub threads: usize,
    /// Requests per batch, at most.
    pub batch_size_max: usize,
    /// Batches executed and not yet committed, at most.
    pub pipeline_max: usize,
    /// Client requests waiting for a batch, at most (more are dropped; clients retransmit).
    pub queue_max: usize,
    /// Batches a primary keeps for a server that joins while it fetches the state.
    pub catch_up_max: usize,
    /// The longest a server stays silent towards the other.
    pub heartbeat_ms: u64,
    /// Silence from the other server after which the backup takes over, or the primary
    /// serves alone.
    pub takeover_ms: u64,
    /// Tree nodes asked in one query while fetching the state.
    pub tree_query_max: usize,
}

impl Default for EveSection {
    fn default() -> Self {
        EveSection {
            threads: 2,
            batch_size_max: 100,
            pipeline_max: 4,
            queue_max: 10_000,
            catch_up_max: 1_000,
            heartbeat_ms: 50,
            takeover_ms: 500,
            tree_query_max: 256,
        }
    }
}

impl EveSection {
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        let positive: [(&str, u64); 8] = [
            ("eve.threads", self.threads as u64),
            ("eve.batch_size_max", self.batch_size_max as u64),
            ("eve.pipeline_max", self.pipeline_max as u64),
            ("eve.queue_max", self.queue_max as u64),
            ("eve.catch_up_max", self.catch_up_max as u64),
            ("eve.heartbeat_ms", self.heartbeat_ms),
            ("eve.takeover_ms", self.takeover_ms),
            ("eve.tree_query_max", self.tree_query_max as u64),
        ];
        crate::config::check_positive(&positive)?;
        if self.heartbeat_ms >= self.takeover_ms {
            return Err(crate::config::err(
                "eve.heartbeat_ms",
                format!(
                    "{} ms is not below eve.takeover_ms ({} ms): a live primary would be taken over",
                    self.heartbeat_ms, self.takeover_ms
                ),
                "set heartbeat_ms to a fraction of takeover_ms (defaults 50 and 500)",
            ));
        }
        Ok(())
    }

    /// The section for `tagma init`, every key commented.
    pub(crate) fn documented(&self) -> String {
        let d = EveSection::default();
        format!(
            "\n[eve]\n\
             # Execute-verify replication (`tagma eve serve`): the two [[replica]] entries are a primary\n\
             # and a backup that both execute every batch in parallel and compare tokens.\n\
             # Execution threads of each server. Default {}.\nthreads = {}\n\
             # Requests per batch, at most. Default {}.\nbatch_size_max = {}\n\
             # Batches executed and not yet committed, at most. Default {}.\npipeline_max = {}\n\
             # Client requests waiting for a batch, at most (more are dropped; clients retransmit). Default {}.\nqueue_max = {}\n\
             # Batches a primary keeps for a server that joins while it fetches the state. Default {}.\ncatch_up_max = {}\n\
             # The longest a server stays silent towards the other, in ms. Default {}.\nheartbeat_ms = {}\n\
             # Silence from the other server after which the backup takes over, or the primary serves alone, in ms. Default {}.\ntakeover_ms = {}\n\
             # Tree nodes asked in one query while fetching the state. Default {}.\ntree_query_max = {}\n",
            d.threads,
            self.threads,
            d.batch_size_max,
            self.batch_size_max,
            d.pipeline_max,
            self.pipeline_max,
            d.queue_max,
            self.queue_max,
            d.catch_up_max,
            self.catch_up_max,
            d.heartbeat_ms,
            self.heartbeat_ms,
            d.takeover_ms,
            self.takeover_ms,
            d.tree_query_max,
            self.tree_query_max,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_a_heartbeat_not_below_the_takeover_are_refused() {
        assert_eq!(EveSection::default().check(), Ok(()));
        let zero = EveSection {
            threads: 0,
            ..EveSection::default()
        };
        assert_eq!(zero.check().unwrap_err().key, "eve.threads");
        let slow = EveSection {
            heartbeat_ms: 500,
            ..EveSection::default()
        };
        assert_eq!(slow.check().unwrap_err().key, "eve.heartbeat_ms");
    }
}
