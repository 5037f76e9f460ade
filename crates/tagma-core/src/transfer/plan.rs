//! The plan of a fetch: from the peers' offers, the target (decided at a correct replica),
//! the source's checkpoint, the vouchers whose digests must match the replayed state, and the
//! peers that serve the decisions in between.

use std::collections::BTreeMap;

use tagma_wire::{CheckpointInfo, ConsensusId, DecidedInstance, ReplicaId};

use super::FetchParams;

#[derive(Debug)]
pub(super) struct Plan {
    pub(super) source: ReplicaId,
    /// `None`: from the state this replica's executor holds (a joining replica's fetch when
    /// no checkpoint is vouched for: the initial state, or the one it restarted with).
    pub(super) checkpoint: Option<CheckpointInfo>,
    /// The first decision fetched: the one after the checkpoint, or this replica's next.
    pub(super) first: ConsensusId,
    pub(super) vouchers: Vec<(ReplicaId, CheckpointInfo)>,
    pub(super) target: ConsensusId,
    /// Who is asked for runs of decisions, in rotation.
    pub(super) log_peers: Vec<ReplicaId>,
    /// Checkpoint bytes stored (chunks are accepted only in order).
    pub(super) written: u64,
    /// Checkpoint bytes asked for.
    pub(super) requested: u64,
    /// Where a gap in the chunks was last asked for again (once per gap, see `on_chunk`).
    pub(super) gap_asked: Option<u64>,
    /// Decisions after the checkpoint: verified with this replica's proof checker, or held
    /// after one that changes the view (verified at install, see `on_log_entry`).
    pub(super) log: BTreeMap<ConsensusId, DecidedInstance>,
    /// Decisions asked for: every cid below this.
    pub(super) log_requested: ConsensusId,
    pub(super) rotation: usize,
}

impl Plan {
    pub(super) fn checkpoint_len(&self) -> u64 {
        self.checkpoint.map_or(0, |c| c.len)
    }
    pub(super) fn first_missing(&self) -> ConsensusId {
        let mut c = self.first;
        while self.log.contains_key(&c) {
            c = c.next();
        }
        c
    }
    pub(super) fn complete(&self) -> bool {
        self.written == self.checkpoint_len() && self.first_missing() > self.target
    }
}

/// Chooses the source, vouchers, target and log peers from the `offers` (`None` if they do
/// not allow a plan yet), for a replica at `next` on its `attempt`-th try, leaving out the
/// checkpoints each source `refused`.
pub(super) fn plan(
    params: &FetchParams,
    next: ConsensusId,
    offers: &BTreeMap<ReplicaId, (Option<CheckpointInfo>, ConsensusId)>,
    refused: &BTreeMap<ReplicaId, ConsensusId>,
    attempt: usize,
) -> Option<Plan> {
    // The target: decided at a correct replica.
    let mut nexts: Vec<ConsensusId> = offers.values().map(|(_, n)| *n).collect();
    nexts.sort_unstable_by(|a, b| b.cmp(a));
    let bound = *nexts.get(params.one_correct - 1)?;
    let target = ConsensusId(bound.0.checked_sub(1)?);
    let mut candidates: Vec<(ReplicaId, CheckpointInfo)> = offers
        .iter()
        .filter_map(|(r, (c, _))| c.map(|c| (*r, c)))
        .filter(|(_, c)| {
            c.cid.0.saturating_add(1) >= next.0
                && c.cid <= target
                && c.len <= params.state_bytes_max
        })
        .collect();
    candidates.sort_by_key(|(r, c)| (c.cid, *r));
    let refused =
        |(r, c): &(ReplicaId, CheckpointInfo)| refused.get(r).is_some_and(|max| c.cid <= *max);
    let eligible: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates.len() - i >= params.one_correct && !refused(&candidates[i]))
        .collect();
    // Without enough checkpoints to vouch for one, a joining replica replays the history
    // from the state its executor holds: the initial one, or the one its disk held when it
    // restarted before it caught up with the view that added it. The decisions come from
    // the replicas whose log holds them: those that offer no checkpoint (they have released
    // none of their log) or one below the first decision needed. Every decision's proof is
    // checked under its view, from the executor's own, so no voucher is needed.
    let from_start = eligible.is_empty();
    if from_start && (!params.joining || next > target) {
        return None;
    }
    let (source, checkpoint, vouchers) = match eligible.get(attempt % eligible.len().max(1)) {
        Some(&i) => {
            let (source, checkpoint) = candidates[i];
            (source, Some(checkpoint), candidates[i + 1..].to_vec())
        }
        None => (params.me, None, Vec::new()),
    };
    let mut log_peers: Vec<ReplicaId> = offers
        .iter()
        .filter(|(r, (c, n))| {
            **r != source && *n > target && !(from_start && c.is_some_and(|c| c.cid >= next))
        })
        .map(|(r, _)| *r)
        .collect();
    let first = checkpoint.map_or(next, |c| c.cid.next());
    if log_peers.is_empty() && checkpoint.is_some() {
        log_peers.push(source);
    }
    if log_peers.is_empty() {
        return None;
    }
    // The plan's invariants: the source's checkpoint is at or below the target, which a
    // correct replica decided; every voucher stands between them; nobody vouches twice.
    debug_assert!(checkpoint.is_none_or(|c| c.cid <= target && first == c.cid.next()));
    debug_assert!(vouchers.iter().all(|(r, v)| *r != source
        && checkpoint.is_some_and(|c| c.cid <= v.cid)
        && v.cid <= target));
    debug_assert!(
        vouchers
            .iter()
            .map(|(r, _)| *r)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            == vouchers.len(),
        "a voucher counted twice"
    );
    debug_assert!(first.0 <= target.0.saturating_add(1));
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
        rotation: attempt,
    })
}
