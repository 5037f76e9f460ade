//! The checks of the coordination-service workload: each correct client's voted reply judged
//! against what it asked and the agreed time at which its request executed (the
//! [`SpaceLedger`]'s jobs and lock grants; blocking `rd` and `in` answered by a tuple or by
//! `TimedOut` no earlier than their deadline), and at the end of the run the jobs a correct
//! replica still holds, the lock's grants, and the takes and releases still pending.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use tagma_space::{CasOutcome, Field, Limits, SpaceReply, SpaceRequest, Stored};
use tagma_wire::{Batch, ClientId, RequestSeq};

use crate::{
    client::{Attempt, Call},
    space_client::{self, Purpose, SpaceCall},
    space_ledger::SpaceLedger,
    world::World,
};

/// What the checks of a coordination-service run keep.
#[derive(Debug, Default)]
pub(crate) struct SpaceRecord {
    pub(crate) ledger: SpaceLedger,
    /// The agreed time at which each request executed (its batch's timestamp).
    agreed_ms: BTreeMap<(ClientId, RequestSeq), u64>,
    /// The agreed time at which each request was answered (the timestamp of the batch whose
    /// execution gave its reply; later than `agreed_ms` for a reply the service deferred).
    answered_ms: BTreeMap<(ClientId, RequestSeq), u64>,
}

/// A failed check: the invariant and what happened.
type Broken = (&'static str, String);

fn decode(payload: &Bytes) -> Result<SpaceReply, Broken> {
    SpaceReply::decode(payload, &Limits::default())
        .map_err(|e| ("client_reply", format!("undecodable reply: {e}")))
}

fn job_of(stored: &Stored) -> Result<i64, Broken> {
    space_client::job_id(&stored.tuple).ok_or_else(|| {
        let tuple = &stored.tuple;
        ("client_reply", format!("{tuple:?} answers a job template"))
    })
}

impl World {
    /// A decided batch, first delivered by a correct replica: when its requests executed.
    pub(super) fn record_agreed(&mut self, batch: &Batch) {
        if batch.requests.is_empty() {
            self.count("time_only_batches_decided");
        }
        if self.sc.service != crate::options::SimService::Space {
            return;
        }
        for envelope in &batch.requests {
            let key = (envelope.request.client, envelope.request.seq);
            self.space
                .agreed_ms
                .entry(key)
                .or_insert(batch.timestamp_ms);
        }
    }

    /// The replies a correct replica's execution of `batch` gave: when each was answered.
    pub(super) fn record_answers(&mut self, batch: &Batch, replies: &[tagma_wire::Reply]) {
        if self.sc.service != crate::options::SimService::Space {
            return;
        }
        for reply in replies {
            let key = (reply.client, reply.seq);
            self.space
                .answered_ms
                .entry(key)
                .or_insert(batch.timestamp_ms);
        }
    }

    /// A client is about to issue `call` for the first time.
    pub(super) fn issue_space_call(&mut self, call: &SpaceCall) {
        if let Purpose::PutJob(id) = call.purpose {
            self.space.ledger.job_issued(id);
        }
    }

    /// Client `c` completed `call` with the voted `payload`.
    pub(super) fn complete_space(
        &mut self,
        c: usize,
        call: &SpaceCall,
        attempt: &Attempt,
        payload: &Bytes,
    ) {
        if !self.clients[c].is_correct() {
            return;
        }
        let key = match attempt {
            Attempt::Ordered(seq) => Some((self.clients[c].id, *seq)),
            Attempt::Unordered(_) => None,
        };
        if let Err((invariant, detail)) = self.judge_space_reply(c, call, key, payload) {
            let op = call.request.as_ref().map(SpaceRequest::op_name);
            let msg = format!("client {c} {:?} ({op:?}): {detail}", call.purpose);
            self.violation(invariant, msg);
        }
    }

    fn judge_space_reply(
        &mut self,
        c: usize,
        call: &SpaceCall,
        key: Option<(ClientId, RequestSeq)>,
        payload: &Bytes,
    ) -> Result<(), Broken> {
        let reply = decode(payload)?;
        let at_ms = || -> Result<u64, Broken> {
            key.and_then(|k| self.space.agreed_ms.get(&k).copied())
                .ok_or_else(|| {
                    (
                        "validity",
                        "a reply to a request no correct replica executed".into(),
                    )
                })
        };
        let lease_ms = call.lease_ms().unwrap_or(0);
        let principal = self.clients[c].id.principal();
        let ledger_err = |invariant: &'static str| move |e: String| (invariant, e);
        match (call.purpose, &reply) {
            (Purpose::PutJob(id), SpaceReply::Inserted(_)) => self.space.ledger.job_put(id),
            (Purpose::Signal, SpaceReply::Inserted(_)) => {}
            (Purpose::TakeJob { .. }, SpaceReply::Tuple(Some(stored))) => {
                let id = job_of(stored)?;
                self.space
                    .ledger
                    .job_taken(id, c)
                    .map_err(ledger_err("exactly_once_take"))?;
                self.count("space_jobs_taken");
            }
            (Purpose::TakeJob { blocking: false }, SpaceReply::Tuple(None)) => {
                self.count("space_queue_empty");
            }
            (Purpose::TakeJob { blocking: true }, SpaceReply::TimedOut)
            | (Purpose::AwaitSignal, SpaceReply::TimedOut) => {
                self.check_timed_out(call, key, at_ms()?)?;
                self.count("space_waits_timed_out");
            }
            (Purpose::AwaitSignal, SpaceReply::Tuple(Some(stored)))
                if space_client::is_signal(&stored.tuple) =>
            {
                let at = at_ms()?;
                if key.and_then(|k| self.space.answered_ms.get(&k).copied()) > Some(at) {
                    self.count("space_waits_woken");
                }
            }
            (Purpose::ReadJobs, SpaceReply::Tuple(_) | SpaceReply::Tuples(_)) => {
                let found: &[Stored] = match &reply {
                    SpaceReply::Tuple(found) => found.as_slice(),
                    SpaceReply::Tuples(found) => found,
                    _ => &[],
                };
                for stored in found {
                    let id = job_of(stored)?;
                    self.space
                        .ledger
                        .job_seen(id)
                        .map_err(ledger_err("exactly_once_take"))?;
                }
            }
            (Purpose::Acquire, SpaceReply::Cas(CasOutcome::Inserted(receipt))) => {
                let at = at_ms()?;
                self.space
                    .ledger
                    .granted(c, receipt.revision, at, receipt.lease_expires_ms, lease_ms)
                    .map_err(ledger_err("lock"))?;
                self.set_holding(c, true);
                self.count("space_lock_grants");
            }
            (Purpose::Acquire, SpaceReply::Cas(CasOutcome::Exists(stored))) => {
                let at = at_ms()?;
                let holder = match stored.tuple.0.as_slice() {
                    [Field::Str(tag), Field::Int(p)] if tag == "lock" => Some(*p),
                    _ => None,
                };
                self.space
                    .ledger
                    .lock_exists(c, principal, holder, at, stored.lease_expires_ms)
                    .map_err(ledger_err("lock"))?;
                self.count("space_lock_busy");
            }
            (Purpose::Renew, SpaceReply::Renewed(count)) => {
                let at = at_ms()?;
                let still = self
                    .space
                    .ledger
                    .renewed(c, at, *count, lease_ms)
                    .map_err(ledger_err("lock"))?;
                self.set_holding(c, still);
                self.count(if still {
                    "space_lock_renewals"
                } else {
                    "space_lock_leases_lost"
                });
            }
            (Purpose::Release, SpaceReply::Tuple(taken)) => {
                let at = at_ms()?;
                if let Some(stored) = taken
                    && stored.tuple != space_client::lock_tuple(principal)
                {
                    let tuple = &stored.tuple;
                    return Err(("lock", format!("the release took {tuple:?}")));
                }
                let revision = taken.as_ref().map(|s| s.revision);
                self.space
                    .ledger
                    .released(c, at, revision)
                    .map_err(ledger_err("lock"))?;
                self.set_holding(c, false);
                self.count("space_lock_releases");
            }
            (purpose, reply) => {
                return Err((
                    "client_reply",
                    format!("reply {reply:?} does not answer {purpose:?}"),
                ));
            }
        }
        Ok(())
    }

    /// A `TimedOut` came no earlier than the wait's deadline, from a later batch.
    fn check_timed_out(
        &self,
        call: &SpaceCall,
        key: Option<(ClientId, RequestSeq)>,
        at_ms: u64,
    ) -> Result<(), Broken> {
        let deadline = at_ms + call.timeout_ms().unwrap_or(0);
        match key.and_then(|k| self.space.answered_ms.get(&k).copied()) {
            Some(answered) if answered >= deadline => Ok(()),
            answered => Err((
                "wait",
                format!(
                    "a wait from {at_ms} ms with deadline {deadline} ms timed out at {answered:?} ms"
                ),
            )),
        }
    }

    fn set_holding(&mut self, c: usize, holding: bool) {
        if let crate::client::Workload::Space(w) = &mut self.clients[c].workload {
            w.set_holding(holding);
        }
    }

    /// At the end of a coordination-service run: the lock's grants never overlapped, and every
    /// acknowledged job is taken exactly once or still in the space.
    pub(super) fn final_space_checks(&mut self) {
        let mut pending_takes = 0;
        let mut releases = Vec::new();
        for client in self.clients.iter().filter(|c| c.is_correct()) {
            let Some(out) = &client.out else {
                continue;
            };
            let Call::Space(call) = &out.call else {
                continue;
            };
            match (call.purpose, &out.attempt) {
                (Purpose::TakeJob { .. }, _) => pending_takes += 1,
                (Purpose::Release, Attempt::Ordered(seq)) => {
                    if let Some(at) = self.space.agreed_ms.get(&(client.id, *seq)) {
                        releases.push((client.index, *at));
                    }
                }
                _ => {}
            }
        }
        for (c, at) in releases {
            self.space.ledger.release_pending(c, at);
        }
        if let Err(e) = self.space.ledger.check_grants() {
            return self.violation("lock", e);
        }
        let Some(jobs) = self.jobs_in_space() else {
            return;
        };
        if let Err(e) = self.space.ledger.check_jobs(&jobs, pending_takes) {
            self.violation("exactly_once_take", e);
        }
    }

    /// The jobs the correct replica that executed the most holds (`None` when none can tell,
    /// or there are more than one read returns).
    fn jobs_in_space(&mut self) -> Option<BTreeSet<i64>> {
        let r = (0..self.nodes.len())
            .filter(|&r| self.nodes[r].byz.is_none() && !self.nodes[r].lying_disk)
            .max_by_key(|&r| {
                (
                    self.nodes[r].exec.executed_instances(),
                    std::cmp::Reverse(r),
                )
            })?;
        let max = tagma_space_service::SpaceLimits::default().all_max;
        let request = SpaceRequest::RdAll {
            space: space_client::SPACE_NAME.into(),
            template: space_client::job_template(),
            max,
        };
        let exec = &self.nodes[r].exec;
        let now_ms = exec.last_timestamp_ms();
        let reply = exec.execute_unordered(ClientId(0), RequestSeq(0), &request.encode(), now_ms);
        let stored = match decode(&reply.payload) {
            Ok(SpaceReply::Tuples(stored)) => stored,
            other => {
                self.violation("state", format!("replica {r} reads its jobs as {other:?}"));
                return None;
            }
        };
        if stored.len() as u32 >= max {
            self.count("space_final_read_truncated");
            return None;
        }
        let mut jobs = BTreeSet::new();
        for s in &stored {
            match job_of(s) {
                Ok(id) => {
                    jobs.insert(id);
                }
                Err((invariant, e)) => {
                    self.violation(invariant, format!("replica {r}'s final state: {e}"));
                    return None;
                }
            }
        }
        self.count_by("space_jobs_left", jobs.len() as u64);
        Some(jobs)
    }
}
