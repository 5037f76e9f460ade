//! A fetch in progress ([`Fetch`]): offers, the chunk and log windows, stalls and source
//! rotation, and the hand-over of the complete state for validation.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_wire::{CheckpointInfo, ConsensusId, DecidedInstance, ReplicaId};

use super::{
    CHUNK_WINDOW, FetchOut, FetchParams, LOG_RUN, LOG_WINDOW, STALL_TIMEOUTS, StateToInstall,
    changes_view,
    plan::{self, Plan},
};
use crate::proof::ProofChecker;

#[derive(Debug)]
pub(super) enum Phase {
    Offers,
    Fetching(Box<Plan>),
    Installing,
}

/// The fetching side of state transfer for one replica (see the module documentation).
#[derive(Debug)]
pub struct Fetch {
    pub(super) params: FetchParams,
    /// The replica's next instance when the fetch started.
    pub(super) next: ConsensusId,
    pub(super) offers: BTreeMap<ReplicaId, (Option<CheckpointInfo>, ConsensusId)>,
    pub(super) phase: Phase,
    /// Attempts made (rotates the source).
    pub(super) attempt: usize,
    /// When the current step made progress last, and how many timeouts passed without.
    pub(super) progress_ms: u64,
    pub(super) stalls: u32,
    pub(super) started_ms: u64,
    /// The newest checkpoint each source refused (an empty chunk: it released it): its
    /// offers of that one or an older one are not taken as the source again in this fetch.
    pub(super) refused: BTreeMap<ReplicaId, ConsensusId>,
    /// Before this, a refusal does not start the next attempt at once but at the next tick:
    /// a faulty source's refusals cost the others one round of offers and requests per
    /// request timeout at most.
    pub(super) quick_retry_ms: u64,
}

impl Fetch {
    /// Starts a fetch: asks every peer for its offer.
    pub fn start(
        params: FetchParams,
        next: ConsensusId,
        now_ms: u64,
        out: &mut Vec<FetchOut>,
    ) -> Fetch {
        out.push(FetchOut::Broadcast(tagma_wire::PeerMessage::StateQuery {
            next,
        }));
        Fetch {
            params,
            next,
            offers: BTreeMap::new(),
            phase: Phase::Offers,
            attempt: 0,
            progress_ms: now_ms,
            stalls: 0,
            started_ms: now_ms,
            refused: BTreeMap::new(),
            quick_retry_ms: now_ms,
        }
    }

    /// Whether `cid` is a decision this fetch still needs (others go to catch-up).
    pub fn wants(&self, cid: ConsensusId) -> bool {
        match &self.phase {
            Phase::Fetching(plan) => {
                cid >= plan.first && cid <= plan.target && !plan.log.contains_key(&cid)
            }
            _ => false,
        }
    }

    /// Whether this fetch repairs a state the state vote contradicted ([`FetchParams::repair`]).
    pub fn is_repair(&self) -> bool {
        self.params.repair
    }

    /// Whether the fetched state is with the runtime (its verdict must be awaited).
    pub fn is_installing(&self) -> bool {
        matches!(self.phase, Phase::Installing)
    }

    pub fn started_ms(&self) -> u64 {
        self.started_ms
    }

    /// When [`Fetch::tick`] has something to do.
    pub fn deadline_ms(&self) -> Option<u64> {
        match self.phase {
            Phase::Installing => None,
            _ => Some(self.progress_ms + self.params.timeout_ms),
        }
    }

    pub fn on_offer(
        &mut self,
        from: ReplicaId,
        checkpoint: Option<CheckpointInfo>,
        next: ConsensusId,
        now_ms: u64,
        out: &mut Vec<FetchOut>,
    ) {
        self.offers.insert(from, (checkpoint, next));
        if matches!(self.phase, Phase::Offers) && self.offers.len() >= self.params.peers {
            self.try_plan(now_ms, out);
        }
    }

    /// A chunk of the checkpoint being fetched.
    pub fn on_chunk(
        &mut self,
        from: ReplicaId,
        cid: ConsensusId,
        offset: u64,
        data: Bytes,
        now_ms: u64,
        out: &mut Vec<FetchOut>,
    ) -> Result<(), &'static str> {
        let current = match &self.phase {
            Phase::Fetching(plan) => plan.checkpoint.map(|c| (plan.source, c.cid)),
            _ => None,
        };
        if data.is_empty() && current != Some((from, cid)) {
            // A refusal of a request from an earlier attempt (the rest of its window).
            return Ok(());
        }
        let Phase::Fetching(plan) = &mut self.phase else {
            return Err("no checkpoint being fetched");
        };
        let Some(checkpoint) = plan.checkpoint else {
            return Err("no checkpoint being fetched");
        };
        if from != plan.source || cid != checkpoint.cid {
            return Err("chunk of another checkpoint");
        }
        if plan.written == checkpoint.len {
            // Nothing more is wanted: not progress (a faulty source must not keep a stalled
            // fetch alive with empty chunks).
            return Err("checkpoint already complete");
        }
        if data.is_empty() {
            // The source's refusal: it no longer holds the checkpoint (it wrote two newer
            // ones meanwhile, and offers the newest from now on). Waiting out the stall
            // timeouts would only lose time: fresh offers now, without that checkpoint as
            // the source. Not progress either.
            let refused = self.refused.entry(from).or_insert(cid);
            *refused = (*refused).max(cid);
            if now_ms >= self.quick_retry_ms {
                tracing::info!(source = %from, checkpoint = %cid, "the source no longer holds the checkpoint: asking for fresh offers");
                self.quick_retry_ms = now_ms + self.params.timeout_ms;
                self.progress_ms = now_ms;
                self.retry(out);
            } else {
                // Refused again within a timeout: the next tick moves on.
                self.stalls = self.stalls.max(STALL_TIMEOUTS);
            }
            return Ok(());
        }
        if offset > plan.written {
            // The source answers in order over one connection, so the chunk at `written`
            // was lost (a full queue dropped the request or the chunk): ask again from
            // there now rather than at the next stall, once per gap (the chunks already in
            // flight behind the lost one land here too).
            if plan.gap_asked != Some(plan.written) {
                plan.gap_asked = Some(plan.written);
                plan.requested = plan.written;
                self.pump(out);
            }
            return Err("chunk out of order");
        }
        if offset != plan.written {
            // A duplicate (a chunk asked for again after a stall or a gap).
            return Err("chunk out of order");
        }
        let expected = (checkpoint.len - offset).min(u64::from(self.params.chunk_bytes));
        if data.len() as u64 != expected {
            return Err("chunk of the wrong length");
        }
        plan.written += expected;
        debug_assert!(plan.written <= checkpoint.len, "stored past the checkpoint");
        out.push(FetchOut::StoreChunk { cid, offset, data });
        self.progress(now_ms);
        self.pump(out);
        Ok(())
    }

    /// A logged decision; checked against its proof here.
    pub fn on_log_entry(
        &mut self,
        decided: DecidedInstance,
        checker: &ProofChecker,
        now_ms: u64,
        out: &mut Vec<FetchOut>,
    ) -> Result<(), &'static str> {
        let Phase::Fetching(plan) = &mut self.phase else {
            return Err("no log being fetched");
        };
        if decided.cid < plan.first || decided.cid > plan.target {
            return Err("log entry outside the range fetched");
        }
        if plan.log.contains_key(&decided.cid) {
            return Err("log entry already held");
        }
        // After a held decision that changes the view, later ones may carry proofs of another
        // view than this replica's: they are held unverified, and the executor verifies every
        // fetched decision under the view then in effect before the state is installed
        // (`Executor::install_fetched`). Held batches are decoded only on this rare path.
        if !self.params.joining
            && checker.check(&decided).is_none()
            && !plan.log.range(..decided.cid).any(|(_, d)| changes_view(d))
        {
            return Err("log entry with an invalid proof");
        }
        debug_assert!(
            (plan.first..=plan.target).contains(&decided.cid),
            "a fetched decision outside the plan's range"
        );
        plan.log.insert(decided.cid, decided);
        self.progress(now_ms);
        self.pump(out);
        Ok(())
    }

    /// Timeouts: the plan once enough offers are in, re-requests after a stall, and a new
    /// attempt after too many.
    pub fn tick(&mut self, now_ms: u64, out: &mut Vec<FetchOut>) {
        if self.deadline_ms().is_none_or(|d| now_ms < d) {
            return;
        }
        self.stalls += 1;
        self.progress_ms = now_ms;
        match &mut self.phase {
            Phase::Offers => {
                if !self.try_plan(now_ms, out) {
                    // Not enough offers yet: ask again (peers may have been unreachable, or
                    // their checkpoints not yet written).
                    out.push(FetchOut::Broadcast(tagma_wire::PeerMessage::StateQuery {
                        next: self.next,
                    }));
                }
            }
            Phase::Fetching(plan) => {
                if self.stalls > STALL_TIMEOUTS {
                    tracing::warn!(source = %plan.source, first = %plan.first, "state transfer stalled: trying another source");
                    self.retry(out);
                    return;
                }
                // Ask again for what is missing (a message was lost), rotating the log peers.
                plan.requested = plan.written;
                plan.gap_asked = None;
                plan.log_requested = plan.first_missing();
                plan.rotation += 1;
                self.pump(out);
            }
            Phase::Installing => {}
        }
    }

    /// The runtime rejected the fetched state: try another source with fresh offers.
    pub fn rejected(&mut self, now_ms: u64, out: &mut Vec<FetchOut>) {
        if matches!(self.phase, Phase::Installing) {
            // The offers' deadline runs from now, not from the last chunk.
            self.progress_ms = now_ms;
            self.retry(out);
        }
    }

    pub(super) fn retry(&mut self, out: &mut Vec<FetchOut>) {
        self.attempt += 1;
        self.stalls = 0;
        self.offers.clear();
        self.phase = Phase::Offers;
        out.push(FetchOut::Broadcast(tagma_wire::PeerMessage::StateQuery {
            next: self.next,
        }));
    }

    pub(super) fn progress(&mut self, now_ms: u64) {
        self.progress_ms = now_ms;
        self.stalls = 0;
    }

    /// Chooses the source, vouchers, target and log peers from the offers; false if the
    /// offers do not allow a plan yet.
    pub(super) fn try_plan(&mut self, now_ms: u64, out: &mut Vec<FetchOut>) -> bool {
        let Some(plan) = plan::plan(
            &self.params,
            self.next,
            &self.offers,
            &self.refused,
            self.attempt,
        ) else {
            return false;
        };
        tracing::info!(
            source = %plan.source,
            first = %plan.first,
            bytes = plan.checkpoint_len(),
            target = %plan.target,
            vouchers = plan.vouchers.len(),
            attempt = self.attempt,
            "state transfer: fetching"
        );
        self.phase = Phase::Fetching(Box::new(plan));
        self.progress(now_ms);
        self.pump(out);
        true
    }

    /// Keeps the windows of chunk and log requests full; hands the state over when complete.
    pub(super) fn pump(&mut self, out: &mut Vec<FetchOut>) {
        let Phase::Fetching(plan) = &mut self.phase else {
            return;
        };
        let chunk = u64::from(self.params.chunk_bytes);
        while let Some(checkpoint) = plan.checkpoint
            && plan.requested < checkpoint.len
            && plan.requested - plan.written < CHUNK_WINDOW * chunk
        {
            let len = (checkpoint.len - plan.requested).min(chunk);
            out.push(FetchOut::Send {
                to: plan.source,
                msg: tagma_wire::PeerMessage::ChunkRequest {
                    cid: checkpoint.cid,
                    offset: plan.requested,
                    len: len as u32,
                },
            });
            plan.requested += len;
        }
        let first_missing = plan.first_missing();
        while plan.log_requested <= plan.target
            && plan.log_requested.0.saturating_sub(first_missing.0)
                < LOG_WINDOW * u64::from(LOG_RUN)
        {
            let count = (plan.target.0 - plan.log_requested.0 + 1).min(u64::from(LOG_RUN));
            let to = plan.log_peers[plan.rotation % plan.log_peers.len()];
            plan.rotation += 1;
            out.push(FetchOut::Send {
                to,
                msg: tagma_wire::PeerMessage::LogRequest {
                    from: plan.log_requested,
                    count: count as u32,
                },
            });
            plan.log_requested = ConsensusId(plan.log_requested.0 + count);
        }
        debug_assert!(
            plan.written <= plan.requested && plan.requested <= plan.checkpoint_len(),
            "chunk window beyond the checkpoint: written {}, requested {}, length {}",
            plan.written,
            plan.requested,
            plan.checkpoint_len()
        );
        debug_assert!(
            plan.log_requested.0 <= plan.target.0.saturating_add(1),
            "decisions asked for past the target"
        );
        if plan.complete() {
            let Phase::Fetching(plan) = std::mem::replace(&mut self.phase, Phase::Installing)
            else {
                unreachable!("matched above");
            };
            // What is handed over is exactly the checkpoint and every decision after it up
            // to the target, each once, in order.
            debug_assert_eq!(plan.written, plan.checkpoint_len());
            debug_assert!(
                plan.log
                    .keys()
                    .map(|c| c.0)
                    .eq(plan.first.0..=plan.target.0),
                "the fetched decisions do not run from {} to {}",
                plan.first,
                plan.target
            );
            out.push(FetchOut::Install(StateToInstall {
                source: plan.source,
                checkpoint: plan.checkpoint,
                log: plan.log.into_values().collect(),
                // From the state this replica holds (the initial one, or its own), that
                // state is the one correct source.
                matches_needed: if plan.checkpoint.is_some() {
                    self.params.one_correct
                } else {
                    1
                },
                vouchers: plan.vouchers,
                repair: self.params.repair,
            }));
        }
    }
}
