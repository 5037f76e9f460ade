//! [`SpaceService`]: the coordination service as a [`Service`] — the set of spaces, the
//! operations that act on it (create, destroy, list), the agreed time's advance, the
//! splitting of each run of ordered requests into segments that run by space, and the
//! unordered reads (`share` among them, answered with this replica's key).

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_crypto::IdentityKey;
use tagma_exec::{Context, LateReply, Service, ServiceError};
use tagma_space::{DecodeError, SpaceError, SpaceReply, SpaceRequest, typed};
use tagma_wire::{Digest, PublicKey};

use crate::limits::{LimitsError, SpaceLimits};
use crate::parallel::{PARALLEL_MIN_REQUESTS, Run, execute_segment, map_in_order};
use crate::sharing::{self, ShareKey};
use crate::snapshot;
use crate::space::Space;
use crate::waits::{WaitBudget, WaitCounts};

/// The coordination service's replicated state machine (see the crate docs).
///
/// The executor always calls [`Service::execute_ordered_run`], which can defer a reply.
/// [`Service::execute_ordered`] runs a run of one request and has no way to give a late
/// reply: a request it defers gets an empty reply, and late replies it makes are dropped.
pub struct SpaceService {
    limits: SpaceLimits,
    /// Threads that run different spaces of a segment side by side (1: one after another).
    threads: usize,
    /// The workers beside the executing thread (`threads - 1` of them; none for 1).
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    /// The fewest requests a segment has for the pool to share its work.
    parallel_min: usize,
    spaces: BTreeMap<String, Space>,
    /// The agreed time the service has reached.
    now_ms: u64,
    /// The lowest revision a space created now may give: above every revision a destroyed
    /// space gave, so a space created again under an old name never gives a revision again.
    revision_floor: u64,
    /// Operations waiting per principal, over all spaces (derived from the spaces).
    counts: WaitCounts,
    /// This replica's key for answering `share` (not replicated state: each replica has
    /// its own, and it is in no snapshot).
    share_key: Option<ShareKey>,
}

impl Default for SpaceService {
    fn default() -> Self {
        SpaceService::new(SpaceLimits::default()).expect("the default limits work")
    }
}

impl SpaceService {
    /// An empty service with these limits, running one space at a time.
    pub fn new(limits: SpaceLimits) -> Result<Self, LimitsError> {
        limits.check()?;
        Ok(SpaceService {
            limits,
            threads: 1,
            pool: None,
            parallel_min: PARALLEL_MIN_REQUESTS,
            spaces: BTreeMap::new(),
            now_ms: 0,
            revision_floor: 1,
            counts: WaitCounts::default(),
            share_key: None,
        })
    }

    /// Answers `share` with `key`, this replica's identity key: its share of a sealed tuple
    /// is the one at its key's position in `replicas` (the cluster's replicas in member
    /// order, as clients seal for them). Without it, or if the key is not among
    /// `replicas`, `share` is answered that this replica holds no share key.
    pub fn with_replica_key(mut self, key: IdentityKey, replicas: Vec<PublicKey>) -> Self {
        self.share_key = Some(ShareKey::new(key, &replicas));
        self
    }

    /// This replica's position among the sealing replicas, if it answers `share`.
    pub fn share_index(&self) -> Option<usize> {
        self.share_key.as_ref().and_then(ShareKey::index)
    }

    /// Runs the operations of different spaces in one segment on up to `threads` threads
    /// (at least 1): the executing thread and `threads - 1` workers started now, which live
    /// as long as the service. Replies and state are the same for every count. Fails only if
    /// the system refuses to start the workers.
    pub fn with_threads(mut self, threads: usize) -> Result<Self, rayon::ThreadPoolBuildError> {
        self.threads = threads.max(1);
        self.pool = match self.threads {
            1 => None,
            n => Some(std::sync::Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n - 1)
                    .thread_name(|i| format!("space-exec-{i}"))
                    .build()?,
            )),
        };
        Ok(self)
    }

    /// Shares a segment's work with the workers only from `requests` requests on (at least
    /// 1; [`PARALLEL_MIN_REQUESTS`] by default): below it, handing work over costs more
    /// than it saves. Replies and state are the same for every value.
    pub fn with_parallel_min(mut self, requests: usize) -> Self {
        self.parallel_min = requests.max(1);
        self
    }

    /// Starts with the space `name` already created by principal `creator` under
    /// `policy`: part of the initial state, so every replica must start with the same
    /// spaces (a replica's command line names them).
    pub fn with_space(
        mut self,
        name: &str,
        policy: tagma_space::Policy,
        creator: u32,
    ) -> Result<Self, SpaceError> {
        let ctx = Context {
            client: tagma_wire::ClientId::new(creator, 0),
            seq: tagma_wire::RequestSeq(0),
            cid: None,
            timestamp_ms: 0,
            seed: 0,
        };
        let request = SpaceRequest::Create {
            space: name.to_owned(),
            policy,
            protection: None,
        };
        tagma_space::check_space_name(name).map_err(SpaceError::Malformed)?;
        match self.execute_global(&request, &ctx, &mut Vec::new()) {
            SpaceReply::Created => Ok(self),
            SpaceReply::Error(e) => Err(e),
            other => Err(SpaceError::Malformed(format!("{other:?}"))),
        }
    }

    pub fn limits(&self) -> &SpaceLimits {
        &self.limits
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The agreed time the service has reached (the latest [`Service::advance_time`]).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Create, destroy or list: operations on the set of spaces, run alone.
    fn execute_global(
        &mut self,
        request: &SpaceRequest,
        ctx: &Context,
        late: &mut Vec<LateReply>,
    ) -> SpaceReply {
        let invoker = ctx.client.principal();
        match request {
            SpaceRequest::Create {
                space,
                policy,
                protection,
            } => {
                if self.spaces.contains_key(space) {
                    return SpaceReply::Error(SpaceError::SpaceExists(space.clone()));
                }
                if self.spaces.len() >= self.limits.spaces_max {
                    return SpaceReply::Error(SpaceError::TooManySpaces {
                        max: self.limits.spaces_max.min(u32::MAX as usize) as u32,
                    });
                }
                if let Err(e) = policy.check(&self.limits.typed) {
                    return SpaceReply::Error(SpaceError::BadPolicy(e.to_string()));
                }
                if let Some(protection) = protection
                    && let Err(e) = protection
                        .check(&self.limits.typed)
                        .and_then(|()| protection.check_policy(policy))
                {
                    return SpaceReply::Error(SpaceError::Protection(e));
                }
                let created = Space::new(
                    space.clone(),
                    policy.clone(),
                    protection.clone(),
                    invoker,
                    self.revision_floor,
                );
                self.spaces.insert(space.clone(), created);
                SpaceReply::Created
            }
            SpaceRequest::Destroy { space } => {
                let Some(existing) = self.spaces.get(space) else {
                    return SpaceReply::Error(SpaceError::UnknownSpace(space.clone()));
                };
                if let Some(denied) = existing.deny(tagma_space::OpClass::Admin, invoker) {
                    return denied;
                }
                let Some(destroyed) = self.spaces.remove(space) else {
                    return SpaceReply::Error(SpaceError::UnknownSpace(space.clone()));
                };
                self.revision_floor = self.revision_floor.max(destroyed.next_revision);
                let mut budget = WaitBudget::new(&self.counts);
                destroyed.destroy(&mut budget, late);
                let delta = budget.delta;
                self.counts.apply(&delta);
                SpaceReply::Destroyed
            }
            SpaceRequest::ListSpaces => {
                SpaceReply::Spaces(self.spaces.values().map(Space::info).collect())
            }
            other => SpaceReply::Error(SpaceError::Malformed(format!(
                "`{}` acts inside a space",
                other.op_name()
            ))),
        }
    }
}

impl Service for SpaceService {
    fn execute_ordered(&mut self, request: &Bytes, ctx: &Context) -> Bytes {
        let mut late = Vec::new();
        self.execute_ordered_run(&[(request.clone(), *ctx)], &mut late)
            .pop()
            .flatten()
            .unwrap_or_default()
    }

    /// Splits the run into segments at every create, destroy and list (each runs alone) and
    /// where the agreed time moves on (the service advances to it first); each segment runs
    /// by space ([`crate::parallel`]).
    fn execute_ordered_run(
        &mut self,
        requests: &[(Bytes, Context)],
        late: &mut Vec<LateReply>,
    ) -> Vec<Option<Bytes>> {
        let limits = &self.limits;
        let decoded: Vec<Result<SpaceRequest, SpaceError>> = map_in_order(
            self.pool.as_deref(),
            self.parallel_min,
            requests,
            |(bytes, _)| decode(bytes, limits),
        );
        let mut replies: Vec<Option<Bytes>> = vec![None; requests.len()];
        let global = |i: usize| matches!(&decoded[i], Ok(r) if r.is_global());
        let mut i = 0;
        while i < requests.len() {
            let timestamp_ms = requests[i].1.timestamp_ms;
            if timestamp_ms > self.now_ms {
                self.advance_time(timestamp_ms, late);
            }
            if global(i) {
                if let Ok(request) = &decoded[i] {
                    let reply = self.execute_global(request, &requests[i].1, late);
                    replies[i] = Some(reply.encode());
                }
                i += 1;
                continue;
            }
            let end = (i + 1..requests.len())
                .find(|&j| global(j) || requests[j].1.timestamp_ms > self.now_ms)
                .unwrap_or(requests.len());
            let run = Run {
                requests,
                decoded: &decoded,
            };
            execute_segment(
                &mut self.spaces,
                &mut self.counts,
                &self.limits,
                self.pool.as_deref(),
                self.parallel_min,
                &run,
                i..end,
                &mut replies,
                late,
            );
            i = end;
        }
        replies
    }

    /// Removes the tuples whose lease ended by `timestamp_ms` (waking no one) and the taken
    /// sealed parts whose keep time ended, and answers `TimedOut` to the waiting operations
    /// whose deadline passed, space by space in name order, each space's in deadline order.
    fn advance_time(&mut self, timestamp_ms: u64, late: &mut Vec<LateReply>) {
        self.now_ms = self.now_ms.max(timestamp_ms);
        let now_ms = self.now_ms;
        for space in self.spaces.values_mut() {
            space.taken.expire(now_ms);
            if space.next_due_ms().is_some_and(|due| due <= now_ms) {
                let mut budget = WaitBudget::new(&self.counts);
                space.advance(now_ms, &mut budget, late);
                let delta = budget.delta;
                self.counts.apply(&delta);
            }
        }
    }

    fn next_due_ms(&self) -> Option<u64> {
        self.spaces.values().filter_map(Space::next_due_ms).min()
    }

    /// `rdp`, `rdAll` and `share` only, at the request's time as this replica sees it: a
    /// tuple whose lease ended by then is left out, and nothing is removed. `share` is
    /// answered with this replica's own share ([`crate::sharing`]).
    fn execute_unordered(&self, request: &Bytes, ctx: &Context) -> Bytes {
        let reply = match decode(request, &self.limits) {
            Err(e) => SpaceReply::Error(e),
            Ok(request) if !request.runs_unordered() => {
                SpaceReply::Error(SpaceError::NotOrdered(request.op_name().into()))
            }
            Ok(request) => {
                let name = request.space().unwrap_or_default();
                let invoker = ctx.client.principal();
                match (self.spaces.get(name), &request) {
                    (None, _) => SpaceReply::Error(SpaceError::UnknownSpace(name.into())),
                    (
                        Some(space),
                        SpaceRequest::Share {
                            revision, reader, ..
                        },
                    ) => sharing::answer(
                        self.share_key.as_ref(),
                        space,
                        *revision,
                        reader,
                        invoker,
                        ctx.timestamp_ms,
                        &self.limits,
                    ),
                    (Some(space), _) => {
                        space.read(&request, invoker, ctx.timestamp_ms, &self.limits)
                    }
                }
            }
        };
        reply.encode()
    }

    fn snapshot(&self) -> Bytes {
        let mut out = Vec::new();
        self.write_snapshot(&mut out)
            .expect("writing to memory never fails");
        Bytes::from(out)
    }

    fn write_snapshot(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        snapshot::write(&self.spaces, self.now_ms, self.revision_floor, out)
    }

    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError> {
        let restored =
            snapshot::read(snapshot, &self.limits).map_err(ServiceError::InvalidSnapshot)?;
        self.spaces = restored.spaces;
        self.now_ms = restored.now_ms;
        self.revision_floor = restored.revision_floor;
        self.counts = restored.counts;
        Ok(())
    }

    /// BLAKE3 of the snapshot, streamed into the hash.
    fn state_digest(&self) -> Digest {
        let mut hasher = blake3::Hasher::new();
        self.write_snapshot(&mut hasher)
            .expect("hashing never fails to write");
        Digest(*hasher.finalize().as_bytes())
    }
}

/// A request as the service reads it; the error is the reply a malformed one gets.
fn decode(bytes: &Bytes, limits: &SpaceLimits) -> Result<SpaceRequest, SpaceError> {
    SpaceRequest::decode(bytes, &limits.typed).map_err(|e| match e {
        DecodeError::Field(typed::DecodeError::Shape(shape)) => SpaceError::Shape(shape),
        other => SpaceError::Malformed(other.to_string()),
    })
}
