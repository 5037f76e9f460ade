//! State transfer (SPEC §4, reference §2.3): how a replica that fell further behind than its
//! peers keep decisions in memory gets the service state back, while the others keep serving.
//!
//! # Protocol
//! 1. The lagging replica broadcasts `StateQuery`; every replica answers with a `StateOffer`:
//!    its newest durable checkpoint (instance, length, BLAKE3 digest) and its next instance.
//! 2. From the offers it makes a plan. The **target** is the highest instance that at least
//!    one correct replica has decided (the f+1-th highest `next`, minus one; the highest in
//!    CFT). The **source** is a replica whose checkpoint is at most the target; the
//!    **vouchers** are the other replicas whose checkpoints lie between the source's and the
//!    target. Checkpoints are staggered, so the vouchers' lie at different instances.
//! 3. **Collaborative fetch**: the checkpoint comes in chunks from the source (a bounded
//!    window of chunk requests in flight, each chunk handed to the runtime to store as it
//!    arrives: memory stays bounded by the window, not the state); the decisions from the
//!    checkpoint up to the target come in runs from the *other* replicas, rotating. Every
//!    decision carries its proof and is checked here, so a faulty replica cannot slip in a
//!    wrong one.
//! 4. **Validation**: the runtime checks the stored checkpoint against the source's digest,
//!    installs it, replays the proven decisions and, at each voucher's instance, compares
//!    the digest of its own (deterministic) executor checkpoint with the voucher's. The state
//!    is accepted only if at least f+1 of {source} ∪ vouchers match (one in CFT): one of them
//!    is correct, and a correct replica's state at any instance determines the state at every
//!    later one. Otherwise everything is rolled back and another source is tried.
//!
//! Safety does not depend on timing; progress needs f+1 correct replicas with checkpoints in
//! the window and a correct source among the candidates, which rotation finds.
//!
//! This module is sans-IO: it never touches files or sockets. The replica core owns a
//! [`Fetch`] and turns what it returns into [`crate::Action`]s.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_wire::{CheckpointInfo, ClientId, ConsensusId, DecidedInstance, ReplicaId, RequestSeq};

use crate::proof::ProofChecker;

/// Chunk requests in flight to the source.
pub const CHUNK_WINDOW: u64 = 8;
/// Decisions asked for in one `LogRequest`.
pub const LOG_RUN: u32 = 64;
/// Runs of decisions in flight.
const LOG_WINDOW: u64 = 4;
/// An attempt that makes no progress for this many request timeouts is abandoned and the next
/// source tried.
const STALL_TIMEOUTS: u32 = 4;

/// A state-transfer message from an authenticated peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferInput {
    Query {
        next: ConsensusId,
    },
    Offer {
        checkpoint: Option<CheckpointInfo>,
        next: ConsensusId,
    },
    ChunkRequest {
        cid: ConsensusId,
        offset: u64,
        len: u32,
    },
    Chunk {
        cid: ConsensusId,
        offset: u64,
        data: Bytes,
    },
    LogRequest {
        from: ConsensusId,
        count: u32,
    },
    LogEntry(DecidedInstance),
}

/// Everything fetched, for the runtime to validate and install ([`crate::Action::InstallState`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateToInstall {
    pub source: ReplicaId,
    /// The checkpoint the runtime stored chunk by chunk (its BLAKE3 must be `digest`);
    /// `None` for a joining replica's fetch from the initial state (no replica had a
    /// checkpoint yet): the log then starts at instance 0.
    pub checkpoint: Option<CheckpointInfo>,
    /// The proven decisions after the checkpoint (from 0 without one) up to the target, in
    /// order.
    pub log: Vec<DecidedInstance>,
    /// Other replicas' checkpoints at instances in `(checkpoint.cid, target]`.
    pub vouchers: Vec<(ReplicaId, CheckpointInfo)>,
    /// How many of {source} ∪ vouchers must match the replayed state: f+1 (BFT) or 1 (CFT).
    pub matches_needed: usize,
    /// It replaces a state the state vote contradicted (its disk lied): the runtime also
    /// drops that disk's log, whose records before the checkpoint are suspect.
    pub repair: bool,
}

impl StateToInstall {
    /// The last instance the installed state covers.
    pub fn target(&self) -> ConsensusId {
        match (self.log.last(), self.checkpoint) {
            (Some(d), _) => d.cid,
            (None, Some(c)) => c.cid,
            (None, None) => {
                unreachable!("a plan from the initial state fetches instance 0 at least")
            }
        }
    }

    /// The vouchers' checkpoints.
    pub fn voucher_checkpoints(&self) -> Vec<CheckpointInfo> {
        self.vouchers.iter().map(|(_, v)| *v).collect()
    }
}

/// The runtime's verdict on a [`StateToInstall`] ([`crate::Replica::state_installed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstallOutcome {
    /// The state is installed: every instance up to `last` is executed, the last batch's
    /// timestamp was `timestamp_ms`, the client sessions are `sessions`, and the view the
    /// state ends in is `view` (when the executor keeps members).
    Installed {
        last: ConsensusId,
        timestamp_ms: u64,
        sessions: Vec<(ClientId, RequestSeq)>,
        view: Option<tagma_wire::View>,
    },
    /// Not enough digests matched (or the checkpoint did not check or install): the runtime
    /// rolled back; another source is tried.
    Rejected { reason: String },
}

/// Whether a decided batch orders a view change (an undecodable one does not).
fn changes_view(decided: &DecidedInstance) -> bool {
    <tagma_wire::Batch as tagma_wire::Decode>::decode(&decided.batch).is_ok_and(|b| {
        b.requests
            .iter()
            .any(|e| e.request.kind == tagma_wire::RequestKind::Reconfigure)
    })
}

/// What a [`Fetch`] step asks of the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchOut {
    Broadcast(tagma_wire::PeerMessage),
    Send {
        to: ReplicaId,
        msg: tagma_wire::PeerMessage,
    },
    /// Store `data` at `offset` of the incoming checkpoint (chunks come in order, from 0).
    StoreChunk {
        cid: ConsensusId,
        offset: u64,
        data: Bytes,
    },
    Install(StateToInstall),
}

/// The fixed parts of a fetch.
#[derive(Clone, Debug)]
pub struct FetchParams {
    pub me: ReplicaId,
    pub peers: usize,
    /// f+1 (BFT) or 1 (CFT).
    pub one_correct: usize,
    pub chunk_bytes: u32,
    pub state_bytes_max: u64,
    pub timeout_ms: u64,
    /// A joining replica knows only the view that added it: decisions of earlier views
    /// carry proofs its checker cannot judge. They are held unverified, and the executor,
    /// which replays from the checkpoint's view, verifies every one before the state is
    /// installed.
    pub joining: bool,
    /// The state vote after a restart contradicted this replica's state: the state at its
    /// own position is fetched to replace it (see [`StateToInstall::repair`]).
    pub repair: bool,
}

#[derive(Debug)]
struct Plan {
    source: ReplicaId,
    /// `None`: from the initial state (a joining replica's fetch when no replica has a
    /// checkpoint yet; every replica still holds its whole log).
    checkpoint: Option<CheckpointInfo>,
    /// The first decision fetched: the one after the checkpoint, or 0.
    first: ConsensusId,
    vouchers: Vec<(ReplicaId, CheckpointInfo)>,
    target: ConsensusId,
    /// Who is asked for runs of decisions, in rotation.
    log_peers: Vec<ReplicaId>,
    /// Checkpoint bytes stored (chunks are accepted only in order).
    written: u64,
    /// Checkpoint bytes asked for.
    requested: u64,
    /// Where a gap in the chunks was last asked for again (once per gap, see `on_chunk`).
    gap_asked: Option<u64>,
    /// Decisions after the checkpoint: verified with this replica's proof checker, or held
    /// after one that changes the view (verified at install, see `on_log_entry`).
    log: BTreeMap<ConsensusId, DecidedInstance>,
    /// Decisions asked for: every cid below this.
    log_requested: ConsensusId,
    rotation: usize,
}

impl Plan {
    fn checkpoint_len(&self) -> u64 {
        self.checkpoint.map_or(0, |c| c.len)
    }
    fn first_missing(&self) -> ConsensusId {
        let mut c = self.first;
        while self.log.contains_key(&c) {
            c = c.next();
        }
        c
    }
    fn complete(&self) -> bool {
        self.written == self.checkpoint_len() && self.first_missing() > self.target
    }
}

#[derive(Debug)]
enum Phase {
    Offers,
    Fetching(Box<Plan>),
    Installing,
}

/// The fetching side of state transfer for one replica (see the module documentation).
#[derive(Debug)]
pub struct Fetch {
    params: FetchParams,
    /// The replica's next instance when the fetch started.
    next: ConsensusId,
    offers: BTreeMap<ReplicaId, (Option<CheckpointInfo>, ConsensusId)>,
    phase: Phase,
    /// Attempts made (rotates the source).
    attempt: usize,
    /// When the current step made progress last, and how many timeouts passed without.
    progress_ms: u64,
    stalls: u32,
    started_ms: u64,
    /// The newest checkpoint each source refused (an empty chunk: it released it): its
    /// offers of that one or an older one are not taken as the source again in this fetch.
    refused: BTreeMap<ReplicaId, ConsensusId>,
    /// Before this, a refusal does not start the next attempt at once but at the next tick:
    /// a faulty source's refusals cost the others one round of offers and requests per
    /// request timeout at most.
    quick_retry_ms: u64,
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

    fn retry(&mut self, out: &mut Vec<FetchOut>) {
        self.attempt += 1;
        self.stalls = 0;
        self.offers.clear();
        self.phase = Phase::Offers;
        out.push(FetchOut::Broadcast(tagma_wire::PeerMessage::StateQuery {
            next: self.next,
        }));
    }

    fn progress(&mut self, now_ms: u64) {
        self.progress_ms = now_ms;
        self.stalls = 0;
    }

    /// Chooses the source, vouchers, target and log peers from the offers; false if the
    /// offers do not allow a plan yet.
    fn try_plan(&mut self, now_ms: u64, out: &mut Vec<FetchOut>) -> bool {
        let Some(plan) = self.plan() else {
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

    fn plan(&self) -> Option<Plan> {
        // The target: decided at a correct replica.
        let mut nexts: Vec<ConsensusId> = self.offers.values().map(|(_, n)| *n).collect();
        nexts.sort_unstable_by(|a, b| b.cmp(a));
        let bound = *nexts.get(self.params.one_correct - 1)?;
        let target = ConsensusId(bound.0.checked_sub(1)?);
        let mut candidates: Vec<(ReplicaId, CheckpointInfo)> = self
            .offers
            .iter()
            .filter_map(|(r, (c, _))| c.map(|c| (*r, c)))
            .filter(|(_, c)| {
                c.cid.0.saturating_add(1) >= self.next.0
                    && c.cid <= target
                    && c.len <= self.params.state_bytes_max
            })
            .collect();
        candidates.sort_by_key(|(r, c)| (c.cid, *r));
        let refused = |(r, c): &(ReplicaId, CheckpointInfo)| {
            self.refused.get(r).is_some_and(|max| c.cid <= *max)
        };
        let eligible: Vec<usize> = (0..candidates.len())
            .filter(|&i| {
                candidates.len() - i >= self.params.one_correct && !refused(&candidates[i])
            })
            .collect();
        // Without enough checkpoints to vouch for one, a joining replica (its executor still
        // in the initial state) replays the whole history instead, from the replicas that
        // offer no checkpoint: those have released none of their log. Every decision's proof
        // is checked under its view, from the initial one that every replica knows, so no
        // voucher is needed.
        let from_start = eligible.is_empty();
        if from_start && !(self.params.joining && self.next.0 == 0) {
            return None;
        }
        let (source, checkpoint, vouchers) =
            match eligible.get(self.attempt % eligible.len().max(1)) {
                Some(&i) => {
                    let (source, checkpoint) = candidates[i];
                    (source, Some(checkpoint), candidates[i + 1..].to_vec())
                }
                None => (self.params.me, None, Vec::new()),
            };
        let mut log_peers: Vec<ReplicaId> = self
            .offers
            .iter()
            .filter(|(r, (c, n))| **r != source && *n > target && !(from_start && c.is_some()))
            .map(|(r, _)| *r)
            .collect();
        let first = checkpoint.map_or(ConsensusId(0), |c| c.cid.next());
        if log_peers.is_empty() && checkpoint.is_some() {
            log_peers.push(source);
        }
        if log_peers.is_empty() {
            return None;
        }
        Some(Plan {
            source,
            checkpoint,
            first,
            vouchers,
            target,
            log_peers,
            written: 0,
            requested: 0,
            gap_asked: None,
            log: BTreeMap::new(),
            log_requested: first,
            rotation: self.attempt,
        })
    }

    /// Keeps the windows of chunk and log requests full; hands the state over when complete.
    fn pump(&mut self, out: &mut Vec<FetchOut>) {
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
        if plan.complete() {
            let Phase::Fetching(plan) = std::mem::replace(&mut self.phase, Phase::Installing)
            else {
                unreachable!("matched above");
            };
            out.push(FetchOut::Install(StateToInstall {
                source: plan.source,
                checkpoint: plan.checkpoint,
                log: plan.log.into_values().collect(),
                // From the initial state, that state is the one correct source.
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

#[cfg(test)]
mod tests {
    use super::*;
    use tagma_crypto::IdentityKey;
    use tagma_wire::{DecisionProof, Digest, Epoch, PeerMessage, Vote, accept_signing_bytes};

    const CHUNK: u32 = 10;

    fn keys() -> Vec<IdentityKey> {
        (0..4u8)
            .map(|i| IdentityKey::from_seed([i + 1; 32]))
            .collect()
    }

    fn checker() -> ProofChecker {
        let members: Vec<ReplicaId> = (0..4).map(ReplicaId).collect();
        let public: Vec<_> = keys().iter().map(IdentityKey::public).collect();
        ProofChecker::new(&members, &public, 3)
    }

    /// A decision of `cid` signed by replicas 0..3 (a BFT n = 4 accept quorum).
    fn proven(cid: u64) -> DecidedInstance {
        signed_by(cid, Bytes::from(format!("batch {cid}")), &keys()[..3])
    }

    /// A decision of `cid` deciding `batch`, with ACCEPTs signed by `signers` as replicas
    /// 0, 1, ….
    fn signed_by(cid: u64, batch: Bytes, signers: &[IdentityKey]) -> DecidedInstance {
        let vote = Vote {
            cid: ConsensusId(cid),
            epoch: Epoch(0),
            hash: tagma_crypto::digest(&batch),
        };
        let accepts = signers
            .iter()
            .enumerate()
            .map(|(i, k)| (ReplicaId(i as u32), k.sign(&accept_signing_bytes(&vote))))
            .collect();
        DecidedInstance {
            cid: ConsensusId(cid),
            batch,
            proof: DecisionProof {
                epoch: Epoch(0),
                accepts,
            },
        }
    }

    fn ckp(cid: u64, len: u64) -> CheckpointInfo {
        CheckpointInfo {
            cid: ConsensusId(cid),
            len,
            digest: Digest([cid as u8; 32]),
        }
    }

    fn fetch(out: &mut Vec<FetchOut>) -> Fetch {
        let params = FetchParams {
            me: ReplicaId(3),
            peers: 3,
            one_correct: 2,
            chunk_bytes: CHUNK,
            state_bytes_max: 1 << 20,
            timeout_ms: 100,
            joining: false,
            repair: false,
        };
        Fetch::start(params, ConsensusId(0), 0, out)
    }

    /// `out` is exactly a new round of offers asked for.
    fn asks_for_offers(out: &[FetchOut]) -> bool {
        matches!(out, [FetchOut::Broadcast(PeerMessage::StateQuery { .. })])
    }

    fn sends(out: &[FetchOut]) -> Vec<(ReplicaId, PeerMessage)> {
        out.iter()
            .filter_map(|o| match o {
                FetchOut::Send { to, msg } => Some((*to, msg.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_plan_takes_the_lowest_checkpoint_and_ignores_one_inflated_position() {
        let mut out = Vec::new();
        let mut f = fetch(&mut out);
        assert!(asks_for_offers(&out));
        out.clear();
        f.on_offer(
            ReplicaId(0),
            Some(ckp(100, 25)),
            ConsensusId(150),
            1,
            &mut out,
        );
        f.on_offer(
            ReplicaId(1),
            Some(ckp(120, 25)),
            ConsensusId(151),
            1,
            &mut out,
        );
        assert!(out.is_empty(), "waits for every peer (or the timeout)");
        // A Byzantine replica claims to be far ahead, with a low checkpoint.
        f.on_offer(
            ReplicaId(2),
            Some(ckp(80, 25)),
            ConsensusId(1_000_000),
            1,
            &mut out,
        );
        let sent = sends(&out);
        // Chunks from the source (the lowest checkpoint, 3 chunks of 10 bytes for 25).
        let chunks: Vec<_> = sent
            .iter()
            .filter(|(_, m)| matches!(m, PeerMessage::ChunkRequest { .. }))
            .collect();
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|(to, _)| *to == ReplicaId(2)));
        // The target is the f+1-th highest position (150), not the inflated one: the log
        // 81..=150 comes from the others, in runs.
        let logs: Vec<_> = sent
            .iter()
            .filter_map(|(to, m)| match m {
                PeerMessage::LogRequest { from, count } => Some((*to, from.0, *count)),
                _ => None,
            })
            .collect();
        assert_eq!(logs, vec![(ReplicaId(1), 81, 64), (ReplicaId(1), 145, 6)]);
        assert!(
            f.wants(ConsensusId(150)) && !f.wants(ConsensusId(151)) && !f.wants(ConsensusId(80))
        );
    }

    #[test]
    fn chunks_are_taken_in_order_from_the_source_only_and_complete_the_fetch() {
        let mut out = Vec::new();
        let mut f = fetching_from_0(&mut out);
        let data = |n: usize| Bytes::from(vec![7u8; n]);
        assert_eq!(
            f.on_chunk(ReplicaId(1), ConsensusId(50), 0, data(10), 2, &mut out),
            Err("chunk of another checkpoint"),
            "only the source sends chunks"
        );
        assert_eq!(
            f.on_chunk(ReplicaId(0), ConsensusId(50), 10, data(10), 2, &mut out),
            Err("chunk out of order")
        );
        assert_eq!(
            f.on_chunk(ReplicaId(0), ConsensusId(50), 0, data(9), 2, &mut out),
            Err("chunk of the wrong length")
        );
        for (offset, len) in [(0, 10), (10, 10)] {
            f.on_chunk(
                ReplicaId(0),
                ConsensusId(50),
                offset,
                data(len),
                2,
                &mut out,
            )
            .unwrap();
        }
        assert!(!f.is_installing());
        f.on_chunk(ReplicaId(0), ConsensusId(50), 20, data(5), 2, &mut out)
            .unwrap();
        let install = out.iter().find_map(|o| match o {
            FetchOut::Install(s) => Some(s.clone()),
            _ => None,
        });
        let install = install.expect("complete: no log is needed at the checkpoint itself");
        assert_eq!(install.source, ReplicaId(0));
        assert_eq!(install.target(), ConsensusId(50));
        assert_eq!(install.vouchers.len(), 2);
        assert_eq!(install.matches_needed, 2);
        assert!(f.is_installing() && f.deadline_ms().is_none());
        let stored: u64 = out
            .iter()
            .filter_map(|o| match o {
                FetchOut::StoreChunk { data, .. } => Some(data.len() as u64),
                _ => None,
            })
            .sum();
        assert_eq!(stored, 25);
    }

    #[test]
    fn log_entries_need_valid_proofs_and_the_range() {
        let mut out = Vec::new();
        let mut f = fetch(&mut out);
        for r in 0..3 {
            f.on_offer(ReplicaId(r), Some(ckp(10, 5)), ConsensusId(13), 1, &mut out);
        }
        let checker = checker();
        let mut forged = proven(11);
        forged.batch = Bytes::from_static(b"another batch");
        assert_eq!(
            f.on_log_entry(forged, &checker, 2, &mut out),
            Err("log entry with an invalid proof")
        );
        assert_eq!(
            f.on_log_entry(proven(13), &checker, 2, &mut out),
            Err("log entry outside the range fetched")
        );
        f.on_chunk(
            ReplicaId(0),
            ConsensusId(10),
            0,
            Bytes::from(vec![1u8; 5]),
            2,
            &mut out,
        )
        .unwrap();
        // The checkpoint is complete: an empty chunk is no progress (a faulty source cannot
        // keep a fetch whose log stalls from moving on).
        assert_eq!(
            f.on_chunk(ReplicaId(0), ConsensusId(10), 5, Bytes::new(), 2, &mut out),
            Err("checkpoint already complete")
        );
        f.on_log_entry(proven(12), &checker, 2, &mut out).unwrap();
        assert!(!f.is_installing(), "11 is still missing");
        f.on_log_entry(proven(11), &checker, 2, &mut out).unwrap();
        let Some(FetchOut::Install(state)) = out.last() else {
            panic!("complete: {out:?}");
        };
        let cids: Vec<u64> = state.log.iter().map(|d| d.cid.0).collect();
        assert_eq!(cids, vec![11, 12]);
    }

    #[test]
    fn entries_after_a_view_change_are_held_for_the_executor_to_verify() {
        use tagma_wire::{Encode, Request, RequestAuth, RequestEnvelope, RequestKind, ViewId};
        let mut out = Vec::new();
        let mut f = fetch(&mut out);
        for r in 0..3 {
            f.on_offer(ReplicaId(r), Some(ckp(10, 5)), ConsensusId(13), 1, &mut out);
        }
        let checker = checker();
        // Instance 11 orders a view change (proven in this replica's view); 12 was decided in
        // the next view, by keys this replica's checker does not know.
        let reconfigure = tagma_wire::Batch {
            timestamp_ms: 1,
            seed: 0,
            requests: vec![RequestEnvelope {
                request: Request {
                    client: ClientId(9),
                    seq: RequestSeq(1),
                    kind: RequestKind::Reconfigure,
                    view: ViewId(0),
                    payload: Bytes::from_static(b"change"),
                },
                auth: RequestAuth::Macs(vec![]),
            }],
        };
        let strangers: Vec<IdentityKey> = (0..3u8)
            .map(|i| IdentityKey::from_seed([100 + i; 32]))
            .collect();
        let later = || signed_by(12, Bytes::from_static(b"batch 12"), &strangers);
        // Without the change held, such a proof is refused.
        assert_eq!(
            f.on_log_entry(later(), &checker, 2, &mut out),
            Err("log entry with an invalid proof")
        );
        f.on_log_entry(
            signed_by(11, reconfigure.to_bytes(), &keys()[..3]),
            &checker,
            2,
            &mut out,
        )
        .unwrap();
        f.on_log_entry(later(), &checker, 2, &mut out).unwrap();
        f.on_chunk(
            ReplicaId(0),
            ConsensusId(10),
            0,
            Bytes::from(vec![1u8; 5]),
            2,
            &mut out,
        )
        .unwrap();
        let Some(FetchOut::Install(state)) = out.last() else {
            panic!("complete: {out:?}");
        };
        let cids: Vec<u64> = state.log.iter().map(|d| d.cid.0).collect();
        assert_eq!(cids, vec![11, 12]);
    }

    #[test]
    fn stalls_re_request_then_another_source_is_tried() {
        let mut out = Vec::new();
        let mut f = fetch(&mut out);
        for r in 0..3 {
            f.on_offer(
                ReplicaId(r),
                Some(ckp(40 + u64::from(r), 25)),
                ConsensusId(60),
                1,
                &mut out,
            );
        }
        let source = |out: &[FetchOut]| chunk_requests(out).first().map(|(to, _)| *to);
        assert_eq!(source(&out), Some(ReplicaId(0)));
        // The source stays silent: chunks are asked for again on each timeout...
        for t in 1..=STALL_TIMEOUTS as u64 {
            out.clear();
            f.tick(1 + t * 100, &mut out);
            assert_eq!(
                source(&out),
                Some(ReplicaId(0)),
                "re-requested at stall {t}"
            );
        }
        // ...then the attempt is abandoned for fresh offers and the next source.
        out.clear();
        f.tick(1 + (STALL_TIMEOUTS as u64 + 1) * 100, &mut out);
        assert!(asks_for_offers(&out));
        out.clear();
        for r in 0..3 {
            f.on_offer(
                ReplicaId(r),
                Some(ckp(40 + u64::from(r), 25)),
                ConsensusId(60),
                700,
                &mut out,
            );
        }
        assert_eq!(source(&out), Some(ReplicaId(1)));
        // A state the runtime rejects also moves on.
        let data = Bytes::from(vec![0u8; 10]);
        for offset in [0, 10] {
            f.on_chunk(
                ReplicaId(1),
                ConsensusId(41),
                offset,
                data.clone(),
                701,
                &mut out,
            )
            .unwrap();
        }
        f.on_chunk(
            ReplicaId(1),
            ConsensusId(41),
            20,
            data.slice(..5),
            701,
            &mut out,
        )
        .unwrap();
        let checker = checker();
        for cid in 42..=59 {
            f.on_log_entry(proven(cid), &checker, 702, &mut out)
                .unwrap();
        }
        assert!(f.is_installing());
        out.clear();
        f.rejected(703, &mut out);
        assert_eq!(f.deadline_ms(), Some(703 + 100));
        assert!(asks_for_offers(&out));
        assert!(!f.is_installing());
    }

    /// A plan fetching `ckp(50, 25)` from replica 0 (chunks of 10 bytes at 0, 10, 20).
    fn fetching_from_0(out: &mut Vec<FetchOut>) -> Fetch {
        let mut f = fetch(out);
        for r in 0..3 {
            f.on_offer(ReplicaId(r), Some(ckp(50, 25)), ConsensusId(51), 1, out);
        }
        out.clear();
        f
    }

    fn chunk_requests(out: &[FetchOut]) -> Vec<(ReplicaId, u64)> {
        sends(out)
            .into_iter()
            .filter_map(|(to, m)| match m {
                PeerMessage::ChunkRequest { offset, .. } => Some((to, offset)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_lost_chunk_is_asked_for_again_at_once_and_once_per_gap() {
        let mut out = Vec::new();
        let mut f = fetching_from_0(&mut out);
        let data = |n: usize| Bytes::from(vec![7u8; n]);
        // The chunk at 0 was lost: the next one shows the gap.
        assert_eq!(
            f.on_chunk(ReplicaId(0), ConsensusId(50), 10, data(10), 2, &mut out),
            Err("chunk out of order")
        );
        let zero = ReplicaId(0);
        assert_eq!(
            chunk_requests(&out),
            vec![(zero, 0), (zero, 10), (zero, 20)]
        );
        out.clear();
        // The chunks in flight behind the lost one do not ask again.
        assert_eq!(
            f.on_chunk(ReplicaId(0), ConsensusId(50), 20, data(5), 2, &mut out),
            Err("chunk out of order")
        );
        assert!(out.is_empty());
        // The answers to the new requests complete the fetch, without waiting for a stall.
        for (offset, len) in [(0, 10), (10, 10), (20, 5)] {
            f.on_chunk(zero, ConsensusId(50), offset, data(len), 3, &mut out)
                .unwrap();
        }
        assert!(f.is_installing());
        // A duplicate asks for nothing.
        out.clear();
        let mut g = fetching_from_0(&mut out);
        g.on_chunk(zero, ConsensusId(50), 0, data(10), 2, &mut out)
            .unwrap();
        out.clear();
        assert_eq!(
            g.on_chunk(zero, ConsensusId(50), 0, data(10), 2, &mut out),
            Err("chunk out of order")
        );
        assert!(chunk_requests(&out).is_empty());
    }

    #[test]
    fn an_empty_chunk_from_the_source_asks_for_fresh_offers_at_once() {
        let mut out = Vec::new();
        let mut f = fetching_from_0(&mut out);
        // From another replica it is nothing (a late refusal of an earlier attempt's request).
        f.on_chunk(ReplicaId(1), ConsensusId(50), 0, Bytes::new(), 2, &mut out)
            .unwrap();
        assert!(out.is_empty());
        // From the source: it released the checkpoint. Fresh offers now, not after
        // STALL_TIMEOUTS request timeouts.
        f.on_chunk(ReplicaId(0), ConsensusId(50), 0, Bytes::new(), 2, &mut out)
            .unwrap();
        assert!(asks_for_offers(&out));
        out.clear();
        for r in 0..3 {
            f.on_offer(
                ReplicaId(r),
                Some(ckp(50, 25)),
                ConsensusId(51),
                3,
                &mut out,
            );
        }
        assert_eq!(
            chunk_requests(&out).first(),
            Some(&(ReplicaId(1), 0)),
            "the next attempt takes the next source"
        );
        // A second refusal within a request timeout waits for the tick (a faulty source's
        // refusals must not make every replica answer a round of offers per round trip).
        out.clear();
        f.on_chunk(ReplicaId(1), ConsensusId(50), 0, Bytes::new(), 4, &mut out)
            .unwrap();
        assert!(out.is_empty());
        // The refusals of the rest of the window add nothing either.
        f.on_chunk(ReplicaId(1), ConsensusId(50), 10, Bytes::new(), 4, &mut out)
            .unwrap();
        assert!(out.is_empty());
        f.tick(3 + 100, &mut out);
        assert!(asks_for_offers(&out));
        out.clear();
        // Offers of the refused checkpoints again: neither is taken as the source; replica
        // 0's newer one is.
        f.on_offer(
            ReplicaId(0),
            Some(ckp(56, 25)),
            ConsensusId(60),
            104,
            &mut out,
        );
        f.on_offer(
            ReplicaId(1),
            Some(ckp(50, 25)),
            ConsensusId(60),
            104,
            &mut out,
        );
        f.on_offer(
            ReplicaId(2),
            Some(ckp(58, 25)),
            ConsensusId(60),
            104,
            &mut out,
        );
        assert_eq!(chunk_requests(&out).first(), Some(&(ReplicaId(0), 0)));
    }

    #[test]
    fn extreme_offers_and_entries_do_not_overflow() {
        let mut out = Vec::new();
        let mut f = fetch(&mut out);
        f.on_offer(
            ReplicaId(0),
            Some(ckp(u64::MAX, 5)),
            ConsensusId(u64::MAX),
            1,
            &mut out,
        );
        f.on_offer(
            ReplicaId(1),
            Some(ckp(10, 5)),
            ConsensusId(2_000),
            1,
            &mut out,
        );
        f.on_offer(
            ReplicaId(2),
            Some(ckp(12, 5)),
            ConsensusId(2_000),
            1,
            &mut out,
        );
        assert!(
            sends(&out).iter().any(|(to, m)| *to == ReplicaId(1)
                && matches!(m, PeerMessage::ChunkRequest { .. })),
            "the checkpoint at u64::MAX is no candidate: replica 1's is the source"
        );
        // A proven entry far beyond the window, then the window's own: no underflow.
        let checker = checker();
        f.on_log_entry(proven(1_500), &checker, 2, &mut out)
            .unwrap();
        out.clear();
        for cid in 11..300 {
            f.on_log_entry(proven(cid), &checker, 2, &mut out).unwrap();
        }
        // Requests go on past the entries that arrived ahead of the window.
        let furthest = sends(&out)
            .iter()
            .filter_map(|(_, m)| match m {
                PeerMessage::LogRequest { from, .. } => Some(from.0),
                _ => None,
            })
            .max();
        assert!(furthest.is_some_and(|c| c >= 300), "{furthest:?}");
        assert!(f.wants(ConsensusId(300)) && !f.wants(ConsensusId(1_500)));
        f.tick(1_000, &mut out);
    }

    #[test]
    fn no_plan_without_enough_checkpoints_to_vouch() {
        let mut out = Vec::new();
        let mut f = fetch(&mut out);
        out.clear();
        // Only one replica has a checkpoint: nobody could vouch for it (f + 1 = 2 needed).
        f.on_offer(ReplicaId(0), Some(ckp(30, 5)), ConsensusId(40), 1, &mut out);
        f.on_offer(ReplicaId(1), None, ConsensusId(40), 1, &mut out);
        f.on_offer(ReplicaId(2), None, ConsensusId(40), 1, &mut out);
        assert!(sends(&out).is_empty());
        f.tick(200, &mut out);
        assert!(asks_for_offers(&out));
    }
}
