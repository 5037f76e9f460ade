//! The `[eve]` section: the settings of execute-verify replication (`tagma eve serve`). In
//! the primary-backup deployment the `[[replica]]` entries are two servers that both execute
//! every batch in parallel and compare tokens; in the BFT deployment they are the
//! `u + max(u, r) + 1` executors, and a verifier cluster (`tagma replica --service
//! eve-verifier`, whose own `[eve]` section names the executors' client principals) decides
//! on their tokens.

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
    /// `"primary-backup"` or `"bft"`.
    pub deployment: Deployment,
    /// BFT: faulty replicas tolerated for liveness.
    pub u: usize,
    /// BFT: lying replicas tolerated for safety (0: masking concurrency bugs).
    pub r: usize,
    /// BFT executors: work waiting with nothing committed for this long makes an executor
    /// complain to the verifiers.
    pub progress_ms: u64,
    /// BFT executors: a state fetch whose donor is silent this long asks another executor.
    pub fetch_ms: u64,
    /// Verifiers: a batch undecided this long (in agreed time) after its first VERIFY
    /// rolls back.
    pub verify_timeout_ms: u64,
    /// Verifiers: the executors' client principals, in executor order.
    pub executor_principals: Vec<u32>,
    /// Verifiers, extra protection mode: after this many batches in a row in agreement, a
    /// batch waits for every executor's token (0: off).
    pub protection_after_batches: u64,
    /// Verifiers, extra protection mode: how long a batch waits for every token.
    pub protection_wait_ms: u64,
}

/// Which execute-verify deployment a cluster directory holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Deployment {
    /// Two servers tolerating a crash.
    #[default]
    PrimaryBackup,
    /// `u + max(u, r) + 1` executors and a verifier cluster.
    Bft,
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
            deployment: Deployment::PrimaryBackup,
            u: 1,
            r: 1,
            progress_ms: 500,
            fetch_ms: 200,
            verify_timeout_ms: 1_000,
            executor_principals: Vec::new(),
            protection_after_batches: 0,
            protection_wait_ms: 20,
        }
    }
}

impl EveSection {
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        let positive: [(&str, u64); 12] = [
            ("eve.u", self.u as u64),
            ("eve.progress_ms", self.progress_ms),
            ("eve.fetch_ms", self.fetch_ms),
            ("eve.verify_timeout_ms", self.verify_timeout_ms),
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
             # Tree nodes asked in one query while fetching the state. Default {}.\ntree_query_max = {}\n\
             # \"primary-backup\" (the two [[replica]] entries) or \"bft\" (the [[replica]] entries are u + max(u, r) + 1\n\
             # executors; a verifier cluster decides on their tokens). Default \"primary-backup\".\ndeployment = \"{}\"\n\
             # BFT: faulty replicas tolerated for liveness. Default {}.\nu = {}\n\
             # BFT: lying replicas tolerated for safety (0: mask concurrency bugs). Default {}.\nr = {}\n\
             # BFT executors: work waiting with nothing committed this long makes an executor complain, in ms. Default {}.\nprogress_ms = {}\n\
             # BFT executors: a state fetch whose donor is silent this long asks another executor, in ms. Default {}.\nfetch_ms = {}\n\
             # Verifiers: a batch undecided this long in agreed time after its first VERIFY rolls back, in ms. Default {}.\nverify_timeout_ms = {}\n\
             # Verifiers: the executors' client principals, in executor order. Default [].\nexecutor_principals = {:?}\n\
             # Verifiers, extra protection mode: after this many batches in a row in agreement, a batch waits for\n\
             # every executor's token, and rolls back (to run in order) if one differs; 0 turns it off. Default {}.\nprotection_after_batches = {}\n\
             # Verifiers, extra protection mode: how long a batch waits for every token, in ms. Default {}.\nprotection_wait_ms = {}\n",
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
            match self.deployment {
                Deployment::PrimaryBackup => "primary-backup",
                Deployment::Bft => "bft",
            },
            d.u,
            self.u,
            d.r,
            self.r,
            d.progress_ms,
            self.progress_ms,
            d.fetch_ms,
            self.fetch_ms,
            d.verify_timeout_ms,
            self.verify_timeout_ms,
            self.executor_principals,
            d.protection_after_batches,
            self.protection_after_batches,
            d.protection_wait_ms,
            self.protection_wait_ms,
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
