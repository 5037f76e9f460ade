//! The fetching side of state transfer, as the replica drives it ([`crate::transfer`] holds
//! the plan): starting a fetch, routing its messages, installing the fetched state.

use bytes::Bytes;
use tagma_wire::{ConsensusId, DecidedInstance, PeerMessage, ReplicaId};

use super::{
    Replica,
    action::Action,
    answer_budget::{AnswerKind, cost_of},
    instance::Instance,
    state_vote::{OwnStateVote, OwnVoteStage, StateVoteStage},
};
use crate::{
    error::Rejection,
    transfer::{Fetch, FetchOut, FetchParams, InstallOutcome, LOG_RUN, TransferInput},
};

impl Replica {
    /// `repair`: the state vote contradicted this replica's state (see [`StateVoteRound`]): the state
    /// at its own position is fetched and replaces it.
    pub(super) fn start_fetch(&mut self, joining: bool, repair: bool) {
        let mut out = Vec::new();
        let params = FetchParams {
            me: self.params.me,
            peers: self.params.members.len() - 1,
            one_correct: self.params.quorums.one_correct(),
            chunk_bytes: self.params.chunk_bytes,
            state_bytes_max: self.params.state_bytes_max,
            timeout_ms: self.params.request_timeout_ms.max(1),
            joining,
            repair,
        };
        let next = self.instance.cid;
        self.fetch = Some(Fetch::start(params, next, self.now_ms, &mut out));
        self.fetch_actions(out);
    }

    /// Fetches the state at this replica's position to replace its own, which f+1 peers
    /// contradicted. A fetch the runtime is installing keeps going until its verdict (a new
    /// one would store its chunks over the ones being read); the caller starts the repair
    /// again once no fetch is left.
    pub(super) fn start_repair(&mut self) {
        self.catch_up.state_transfer_signalled = true;
        if !self.fetch.as_ref().is_some_and(Fetch::is_installing) {
            self.fetch = None;
            self.start_fetch(false, true);
        }
    }

    /// Starts a replica that a view change added (its parameters carry that view) and that
    /// has no state: it fetches a checkpoint and the decisions after it by state transfer
    /// before taking part, because the history before it joined was decided in views it
    /// does not know (the executor, started in the configuration's initial view, replays
    /// and verifies it).
    pub(super) fn start_joining(&mut self) {
        self.catch_up.state_transfer_signalled = true;
        tracing::info!(
            view = self.params.view.0,
            "joining: fetching the state by state transfer"
        );
        self.start_fetch(true, false);
    }

    /// The runtime's verdict on [`Action::InstallState`].
    pub(super) fn on_state_installed(&mut self, outcome: InstallOutcome) {
        let now_ms = self.now_ms;
        match outcome {
            InstallOutcome::Installed {
                last,
                timestamp_ms,
                sessions,
                view,
            } => {
                let recent = std::mem::take(&mut self.installing_recent);
                let fetch = self.fetch.take();
                let started = fetch.as_ref().map(Fetch::started_ms);
                let repaired = fetch.is_some_and(|f| f.is_repair());
                if last < self.instance.cid && !(repaired && last.next() == self.instance.cid) {
                    tracing::warn!(%last, next = %self.instance.cid, "state installed behind this replica's position: ignored");
                    // Another fetch may start if forwarding cannot take it further.
                    self.catch_up.state_transfer_signalled = false;
                    self.maybe_start_state_transfer();
                    return;
                }
                self.end_state_check_on_install();
                tracing::info!(
                    %last,
                    from = %self.instance.cid,
                    ms = started.map(|s| now_ms.saturating_sub(s)),
                    "state transfer done"
                );
                self.stats.state_transfers += 1;
                if let Some(started) = started {
                    self.stats.last_state_transfer_ms = now_ms.saturating_sub(started);
                }
                if repaired {
                    // The checkpoints this replica held before are its disk's wrong state.
                    self.served.retain(|c| c.cid >= last);
                    // Its log restarts after the fetched checkpoint: the instances up to
                    // `last` are durable again only with the flush the runtime reports.
                    self.durable_through = None;
                }
                self.instance = Instance::new(last.next());
                self.last_decided = Some(last);
                if repaired {
                    // Everything the lying disk said goes, its sessions and timestamp too.
                    self.last_decided_timestamp_ms = timestamp_ms;
                    self.clients.replace_sessions(&sessions);
                    if let Some(r) = self.startup.as_mut() {
                        r.repaired = true;
                    }
                } else {
                    self.last_decided_timestamp_ms =
                        self.last_decided_timestamp_ms.max(timestamp_ms);
                    self.clients.install_sessions(&sessions);
                    // A state fetched while synchronising did not come from this replica's
                    // disk, and f+1 digests vouched for it: there is nothing for the hash
                    // vote to check (it would only hold ordering while the others move on).
                    if let Some(r) = self.startup.as_mut()
                        && matches!(
                            r.state_vote,
                            StateVoteStage::NotStarted | StateVoteStage::Running(_)
                        )
                    {
                        tracing::info!(%last, "state fetched while synchronising: no state vote");
                        r.state_vote = StateVoteStage::Done;
                        self.own_state_vote = None;
                    }
                }
                if let Some(view) = view {
                    // The state may end in a later view than this replica ordered in.
                    self.adopt_view(last, view);
                    if self.left {
                        return;
                    }
                }
                self.future.discard_below(last.next());
                self.catch_up.future.retain(|c, _| *c > last);
                for decided in recent {
                    if self.decisions.last_cid().is_none_or(|n| n < decided.cid) {
                        self.record_proven(decided);
                    }
                }
                self.catch_up.behind_since_ms = None;
                self.catch_up.duplicates = 0;
                self.catch_up.state_transfer_signalled = false;
                self.catch_up.requested_until = last.next();
                // The others went on deciding while the state was fetched: ask for what
                // follows at once (decision forwarding) rather than wait to notice the lag.
                self.request_decisions(false);
                self.progress_startup();
                self.settle();
            }
            InstallOutcome::Rejected { reason } => {
                self.installing_recent.clear();
                if !self.catch_up.state_transfer_signalled {
                    tracing::info!(%reason, "fetched state not installed, and no longer needed");
                    self.fetch = None;
                    return;
                }
                tracing::warn!(%reason, "fetched state rejected: trying another source");
                if let Some(fetch) = self.fetch.as_mut() {
                    let mut out = Vec::new();
                    fetch.rejected(now_ms, &mut out);
                    self.fetch_actions(out);
                }
            }
        }
    }

    pub(super) fn on_transfer(
        &mut self,
        from: ReplicaId,
        input: TransferInput,
    ) -> Result<(), Rejection> {
        let bad = |reason: &'static str| Err(Rejection::InvalidTransfer { from, reason });
        match input {
            TransferInput::Query { .. } => {
                if let Some(r) = self.startup.as_mut() {
                    r.asked.insert(from);
                }
                self.answer_state_query(from);
            }
            TransferInput::Offer { checkpoint, next } => {
                let Some(fetch) = self.fetch.as_mut() else {
                    // A state vote's or a state check's answer (or a late one: nothing to do).
                    self.note_state_offer(from, checkpoint, next);
                    self.state_check_offer(from, checkpoint);
                    return Ok(());
                };
                let mut out = Vec::new();
                fetch.on_offer(from, checkpoint, next, self.now_ms, &mut out);
                self.fetch_actions(out);
            }
            TransferInput::ChunkRequest { cid, offset, len } => {
                let Some(ckp) = self.served.iter().find(|c| c.cid == cid) else {
                    // Released since it was offered (two newer ones were written): an empty
                    // chunk tells the fetcher at once, which then asks for fresh offers.
                    let refusal = PeerMessage::Chunk {
                        cid,
                        offset,
                        data: Bytes::new(),
                    };
                    self.answer(from, AnswerKind::State, vec![refusal]);
                    return Ok(());
                };
                if len == 0
                    || len > self.params.chunk_bytes
                    || offset
                        .checked_add(u64::from(len))
                        .is_none_or(|end| end > ckp.len)
                {
                    return bad("chunk outside the checkpoint");
                }
                let header = PeerMessage::Chunk {
                    cid,
                    offset,
                    data: Bytes::new(),
                };
                let mut cost = cost_of([&header]);
                cost.bytes += u64::from(len);
                if !self.charge_answer(from, AnswerKind::State, cost) {
                    return Ok(());
                }
                self.actions.push_back(Action::ReadChunk {
                    to: from,
                    cid,
                    offset,
                    len,
                });
            }
            TransferInput::Chunk { cid, offset, data } => {
                let Some(fetch) = self.fetch.as_mut() else {
                    return bad("chunk while not fetching");
                };
                let mut out = Vec::new();
                let r = fetch.on_chunk(from, cid, offset, data, self.now_ms, &mut out);
                self.fetch_actions(out);
                if let Err(reason) = r {
                    return bad(reason);
                }
            }
            TransferInput::LogRequest { from: first, count } => {
                if count == 0 || count > LOG_RUN {
                    return bad("log request of a bad length");
                }
                // From the core when every decision asked for is kept here; else from the
                // runtime's log (on disk, or in memory without durability).
                let run: Vec<DecidedInstance> = (first.0..first.0.saturating_add(u64::from(count)))
                    .map_while(|c| self.decisions.proven(ConsensusId(c), &self.checker))
                    .collect();
                if run.len() == count as usize {
                    self.answer_run(from, run.into_iter().map(PeerMessage::LogEntry));
                } else {
                    self.read_log(from, first, count);
                }
            }
            TransferInput::LogEntry(decided) => {
                let Some(fetch) = self.fetch.as_mut().filter(|f| f.wants(decided.cid)) else {
                    // Read from a peer's disk for catch-up (or no longer needed by a fetch).
                    return self.on_decision(from, decided);
                };
                let mut out = Vec::new();
                let r = fetch.on_log_entry(decided, &self.checker, self.now_ms, &mut out);
                self.fetch_actions(out);
                if let Err(reason) = r {
                    return bad(reason);
                }
            }
        }
        Ok(())
    }

    pub(super) fn fetch_actions(&mut self, out: Vec<FetchOut>) {
        for o in out {
            let action = match o {
                FetchOut::Broadcast(msg) => {
                    if let (
                        Some(OwnStateVote {
                            cid,
                            digest,
                            stage: OwnVoteStage::Contradicted,
                        }),
                        PeerMessage::StateQuery { .. },
                    ) = (self.own_state_vote, &msg)
                        && self.fetch.as_ref().is_some_and(Fetch::is_repair)
                    {
                        self.actions
                            .push_back(Action::Broadcast(PeerMessage::StateVote { cid, digest }));
                    }
                    Action::Broadcast(msg)
                }
                FetchOut::Send { to, msg } => Action::Send { to, msg },
                FetchOut::StoreChunk { cid, offset, data } => {
                    Action::StoreChunk { cid, offset, data }
                }
                FetchOut::Install(state) => {
                    // A repair replaces the state at this replica's own position.
                    let floor = if state.repair {
                        ConsensusId(self.instance.cid.0.saturating_sub(1))
                    } else {
                        self.instance.cid
                    };
                    if state.target() < floor && state.repair {
                        tracing::info!(target = %state.target(), next = %self.instance.cid, "repair overtaken: fetching again");
                        self.fetch = None;
                        self.start_fetch(false, true);
                        continue;
                    }
                    if state.target() < floor {
                        // Decided here meanwhile (forwarding overtook the fetch): installing
                        // it would only be refused by the runtime.
                        tracing::info!(target = %state.target(), next = %self.instance.cid, "fetched state overtaken: not installed");
                        self.fetch = None;
                        self.catch_up.state_transfer_signalled = false;
                        continue;
                    }
                    let kept = self.params.decisions_kept;
                    let skip = state.log.len().saturating_sub(kept);
                    self.installing_recent = state.log[skip..].to_vec();
                    Action::InstallState(state)
                }
            };
            self.actions.push_back(action);
        }
    }
}
