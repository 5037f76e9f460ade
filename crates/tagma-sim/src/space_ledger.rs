//! The invariants of the coordination-service workload, over what correct clients saw
//! acknowledged (voted replies) and the agreed time at which each request executed:
//!
//! - **Exactly-once take**: no job id is returned by two takes (`in`, `inp`); no job appears
//!   (taken, read or left in the space) that no client put; at the end, every job whose `out`
//!   was acknowledged is taken exactly once or still in the space (a take still waiting for
//!   its reply may account for one).
//! - **Lock safety**: a grant (an acknowledged `cas` that inserted the lock tuple) holds the
//!   lock in agreed time from the `cas`'s execution to its lease end, moved by each
//!   acknowledged `renew` and cut by the release. Grants never overlap, and the revisions the
//!   service gave them (their fencing tokens) grow with their agreed times. Each reply is
//!   checked against the lease: a `renew` or release finds the lock exactly while its lease
//!   runs.

use std::collections::{BTreeMap, BTreeSet};

/// One grant of the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The simulated client that holds it.
    pub client: usize,
    /// The lock tuple's revision: the fencing token.
    pub revision: u64,
    /// Agreed time of the `cas` that granted it.
    pub from_ms: u64,
    /// Agreed time at which it ends: its lease end, or its release.
    pub until_ms: u64,
}

/// What correct clients saw of the jobs and the lock.
#[derive(Debug, Default)]
pub struct SpaceLedger {
    /// Job ids some client sent an `out` for.
    issued_jobs: BTreeSet<i64>,
    /// Job ids whose `out` was acknowledged.
    put_jobs: BTreeSet<i64>,
    /// Job id → the client that took it.
    taken: BTreeMap<i64, usize>,
    grants: Vec<Grant>,
    /// Client → its current grant (an index into `grants`).
    holding: BTreeMap<usize, usize>,
}

impl SpaceLedger {
    pub fn job_issued(&mut self, id: i64) {
        self.issued_jobs.insert(id);
    }

    pub fn job_put(&mut self, id: i64) {
        self.put_jobs.insert(id);
    }

    /// A take by `client` returned job `id`.
    pub fn job_taken(&mut self, id: i64, client: usize) -> Result<(), String> {
        self.job_seen(id)?;
        if let Some(first) = self.taken.insert(id, client) {
            return Err(format!(
                "job {id:#x} was taken twice: by client {first} and by client {client}"
            ));
        }
        Ok(())
    }

    /// A read or take returned job `id`: some client must have put it.
    pub fn job_seen(&self, id: i64) -> Result<(), String> {
        if self.issued_jobs.contains(&id) {
            Ok(())
        } else {
            Err(format!("job {id:#x} appeared, and no client ever put it"))
        }
    }

    pub fn jobs_taken(&self) -> usize {
        self.taken.len()
    }

    /// At the end: `in_space` are the jobs a correct replica holds, `pending_takes` the takes
    /// of correct clients still waiting for their reply (each may have taken one job).
    pub fn check_jobs(&self, in_space: &BTreeSet<i64>, pending_takes: usize) -> Result<(), String> {
        if let Some(id) = in_space.iter().find(|id| self.taken.contains_key(id)) {
            return Err(format!(
                "job {id:#x} was taken by client {}, and is still in the space",
                self.taken[id]
            ));
        }
        if let Some(id) = in_space.iter().find(|id| !self.issued_jobs.contains(id)) {
            return Err(format!(
                "job {id:#x} is in the space, and no client ever put it"
            ));
        }
        let missing: Vec<i64> = self
            .put_jobs
            .iter()
            .filter(|id| !self.taken.contains_key(id) && !in_space.contains(id))
            .copied()
            .collect();
        if missing.len() > pending_takes {
            let shown: Vec<String> = missing
                .iter()
                .take(8)
                .map(|id| format!("{id:#x}"))
                .collect();
            return Err(format!(
                "{} acknowledged jobs were never taken and are not in the space ({} takes pending): {}",
                missing.len(),
                pending_takes,
                shown.join(", ")
            ));
        }
        Ok(())
    }

    /// Whether `client` holds the lock, as the ledger has it.
    pub fn holds(&self, client: usize) -> bool {
        self.holding.contains_key(&client)
    }

    /// `client`'s `cas` at agreed time `at_ms` inserted its lock tuple with this revision and
    /// lease end.
    pub fn granted(
        &mut self,
        client: usize,
        revision: u64,
        at_ms: u64,
        lease_end_ms: Option<u64>,
        lease_ms: u64,
    ) -> Result<(), String> {
        if self.holds(client) {
            return Err(format!(
                "client {client} was granted the lock (revision {revision}) while it held it"
            ));
        }
        if lease_end_ms != Some(at_ms + lease_ms) {
            return Err(format!(
                "client {client}'s lock (revision {revision}) granted at {at_ms} ms with a lease of {lease_ms} ms ends at {lease_end_ms:?}"
            ));
        }
        self.holding.insert(client, self.grants.len());
        self.grants.push(Grant {
            client,
            revision,
            from_ms: at_ms,
            until_ms: at_ms + lease_ms,
        });
        Ok(())
    }

    /// `client`'s `cas` at agreed time `at_ms` found the lock tuple of `holder` (a
    /// principal), whose lease ends at `lease_end_ms`.
    pub fn lock_exists(
        &self,
        client: usize,
        client_principal: u32,
        holder: Option<i64>,
        at_ms: u64,
        lease_end_ms: Option<u64>,
    ) -> Result<(), String> {
        if holder == Some(i64::from(client_principal)) && !self.holds(client) {
            return Err(format!(
                "client {client}'s cas at {at_ms} ms found its own lock tuple, and it holds no lock"
            ));
        }
        if lease_end_ms.is_none_or(|end| end <= at_ms) {
            return Err(format!(
                "client {client}'s cas at {at_ms} ms found a lock whose lease ends at {lease_end_ms:?}"
            ));
        }
        Ok(())
    }

    fn current(&mut self, client: usize, what: &str) -> Result<&mut Grant, String> {
        match self.holding.get(&client) {
            Some(&g) => Ok(&mut self.grants[g]),
            None => Err(format!("client {client} sent a {what} holding no lock")),
        }
    }

    /// `client`'s `renew` at agreed time `at_ms` renewed `count` leases. Returns whether it
    /// still holds the lock.
    pub fn renewed(
        &mut self,
        client: usize,
        at_ms: u64,
        count: u32,
        lease_ms: u64,
    ) -> Result<bool, String> {
        let grant = self.current(client, "renew")?;
        let (revision, until_ms) = (grant.revision, grant.until_ms);
        match count {
            1 if at_ms < until_ms => {
                grant.until_ms = at_ms + lease_ms;
                Ok(true)
            }
            0 if at_ms >= until_ms => {
                self.holding.remove(&client);
                Ok(false)
            }
            _ => Err(format!(
                "client {client}'s renew at {at_ms} ms renewed {count} leases; its lock (revision {revision}) has its lease until {until_ms} ms"
            )),
        }
    }

    /// `client`'s release (`inp` of its lock tuple) at agreed time `at_ms` took the tuple of
    /// revision `taken` (`None`: found none).
    pub fn released(
        &mut self,
        client: usize,
        at_ms: u64,
        taken: Option<u64>,
    ) -> Result<(), String> {
        let grant = self.current(client, "release")?;
        let (revision, until_ms) = (grant.revision, grant.until_ms);
        match taken {
            Some(r) if r == revision && at_ms < until_ms => grant.until_ms = at_ms,
            None if at_ms >= until_ms => {}
            _ => {
                return Err(format!(
                    "client {client}'s release at {at_ms} ms took {taken:?}; its lock (revision {revision}) has its lease until {until_ms} ms"
                ));
            }
        }
        self.holding.remove(&client);
        Ok(())
    }

    /// `client`'s release executed at agreed time `at_ms`, and its reply has not come: the
    /// grant ends by then at the latest.
    pub fn release_pending(&mut self, client: usize, at_ms: u64) {
        if let Some(&g) = self.holding.get(&client) {
            let grant = &mut self.grants[g];
            grant.until_ms = grant.until_ms.min(at_ms);
        }
    }

    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// Grants never overlap in agreed time, and their revisions grow with it.
    pub fn check_grants(&self) -> Result<(), String> {
        let mut by_revision: Vec<&Grant> = self.grants.iter().collect();
        by_revision.sort_by_key(|g| g.revision);
        let mut latest: Option<&Grant> = None;
        for pair in by_revision.windows(2) {
            if pair[0].revision == pair[1].revision {
                return Err(format!(
                    "two grants of the lock share revision {}: {:?} and {:?}",
                    pair[0].revision, pair[0], pair[1]
                ));
            }
        }
        for grant in by_revision {
            if let Some(before) = latest
                && grant.from_ms < before.until_ms
            {
                return Err(format!(
                    "the lock was granted to client {} at {} ms (revision {}) while client {} held it from {} ms until {} ms (revision {})",
                    grant.client,
                    grant.from_ms,
                    grant.revision,
                    before.client,
                    before.from_ms,
                    before.until_ms,
                    before.revision
                ));
            }
            if latest.is_none_or(|l| grant.until_ms >= l.until_ms) {
                latest = Some(grant);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_taken_twice_or_never_put_is_caught() {
        let mut ledger = SpaceLedger::default();
        ledger.job_issued(1);
        ledger.job_put(1);
        assert_eq!(ledger.job_taken(1, 0), Ok(()));
        let twice = ledger.job_taken(1, 2).unwrap_err();
        assert!(twice.contains("taken twice"), "{twice}");
        let unknown = ledger.job_taken(7, 0).unwrap_err();
        assert!(unknown.contains("no client ever put"), "{unknown}");
        assert!(ledger.job_seen(7).is_err());
    }

    #[test]
    fn every_acknowledged_job_is_taken_or_still_there() {
        let mut ledger = SpaceLedger::default();
        for id in 1..=4 {
            ledger.job_issued(id);
            ledger.job_put(id);
        }
        ledger.job_issued(5); // put, never acknowledged
        ledger.job_taken(1, 0).unwrap();
        ledger.job_taken(5, 1).unwrap();
        let left: BTreeSet<i64> = [2, 3].into();
        // Job 4 is gone: one pending take may explain it, none cannot.
        assert_eq!(ledger.check_jobs(&left, 1), Ok(()));
        let lost = ledger.check_jobs(&left, 0).unwrap_err();
        assert!(lost.contains("0x4"), "{lost}");
        let all: BTreeSet<i64> = [2, 3, 4].into();
        assert_eq!(ledger.check_jobs(&all, 0), Ok(()));
        let back: BTreeSet<i64> = [1, 2, 3, 4].into();
        assert!(
            ledger
                .check_jobs(&back, 0)
                .unwrap_err()
                .contains("still in the space")
        );
        let forged: BTreeSet<i64> = [2, 3, 4, 9].into();
        assert!(
            ledger
                .check_jobs(&forged, 0)
                .unwrap_err()
                .contains("no client ever put")
        );
    }

    #[test]
    fn grants_that_follow_each_other_pass() {
        let mut ledger = SpaceLedger::default();
        ledger.granted(0, 3, 100, Some(700), 600).unwrap();
        assert_eq!(ledger.renewed(0, 500, 1, 600), Ok(true));
        ledger.released(0, 800, Some(3)).unwrap();
        // The next grant at the release's time.
        ledger.granted(1, 9, 800, Some(1400), 600).unwrap();
        // Its lease runs out: the renew and the release find nothing.
        assert_eq!(ledger.renewed(1, 1400, 0, 600), Ok(false));
        ledger.granted(0, 12, 1400, Some(2000), 600).unwrap();
        ledger.released(0, 2500, None).unwrap();
        assert_eq!(ledger.check_grants(), Ok(()));
        assert_eq!(ledger.grants().len(), 3);
    }

    #[test]
    fn overlapping_grants_and_fencing_tokens_out_of_order_are_caught() {
        let mut ledger = SpaceLedger::default();
        ledger.granted(0, 3, 100, Some(700), 600).unwrap();
        ledger.granted(1, 5, 650, Some(1250), 600).unwrap();
        let overlap = ledger.check_grants().unwrap_err();
        assert!(overlap.contains("while client 0 held it"), "{overlap}");

        let mut ledger = SpaceLedger::default();
        ledger.granted(0, 8, 100, Some(700), 600).unwrap();
        ledger.granted(1, 5, 900, Some(1500), 600).unwrap();
        assert!(
            ledger.check_grants().is_err(),
            "a later grant with a lower revision"
        );

        // A renewal moves the end: a grant inside the renewed lease overlaps.
        let mut ledger = SpaceLedger::default();
        ledger.granted(0, 3, 100, Some(700), 600).unwrap();
        ledger.renewed(0, 600, 1, 600).unwrap();
        ledger.granted(1, 5, 1000, Some(1600), 600).unwrap();
        assert!(ledger.check_grants().is_err());
    }

    #[test]
    fn replies_that_contradict_the_lease_are_caught() {
        let mut ledger = SpaceLedger::default();
        ledger.granted(0, 3, 100, Some(700), 600).unwrap();
        assert!(
            ledger.renewed(0, 800, 1, 600).is_err(),
            "renewed after the lease ended"
        );
        assert!(
            ledger.renewed(0, 500, 0, 600).is_err(),
            "lost before the lease ended"
        );
        assert!(
            ledger.released(0, 500, None).is_err(),
            "gone before the lease ended"
        );
        assert!(
            ledger.released(0, 500, Some(4)).is_err(),
            "another revision taken"
        );
        assert!(
            ledger.released(0, 700, Some(3)).is_err(),
            "taken after the lease ended"
        );
        assert!(
            ledger.granted(0, 4, 100, Some(800), 600).is_err(),
            "a wrong lease end"
        );
        assert!(
            ledger
                .lock_exists(1, 101, Some(100), 300, Some(700))
                .is_ok()
        );
        assert!(
            ledger
                .lock_exists(1, 101, Some(100), 700, Some(700))
                .is_err()
        );
        assert!(
            ledger
                .lock_exists(1, 101, Some(101), 300, Some(700))
                .is_err()
        );
        assert!(
            ledger.renewed(1, 300, 1, 600).is_err(),
            "a renew holding nothing"
        );
    }

    #[test]
    fn a_pending_release_ends_the_grant_when_it_executed() {
        let mut ledger = SpaceLedger::default();
        ledger.granted(0, 3, 100, Some(700), 600).unwrap();
        ledger.release_pending(0, 300);
        ledger.granted(1, 5, 300, Some(900), 600).unwrap();
        assert_eq!(ledger.check_grants(), Ok(()));
    }
}
