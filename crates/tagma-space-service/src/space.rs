//! One space executing one operation: its policy checked first (a denial changes nothing),
//! then the operation on its tuples and waiting operations.
//!
//! Matching takes the oldest live tuple (lowest revision) that matches the template and that
//! the policy's field rules let the invoker see. A tuple inserted (`out`, the insert of `cas`
//! and `replace`) is first offered to the waiting operations in arrival order: every
//! matching `rd` gets it, the first matching `in` takes it — it is then not stored, and the
//! walk stops. Time comes only from the request's agreed timestamp.
//!
//! In a protected space ([`tagma_space::protection`]) every tuple inserted and every template
//! is checked against the space's protection after the policy, and a taken tuple's sealed
//! part goes to the space's taken buffer ([`crate::taken`]) for its taker to open.

use bytes::Bytes;
use tagma_exec::{Context, LateReply};
use tagma_space::protection::check_sealed;
use tagma_space::{
    CasOutcome, Field, OpClass, Policy, ProtectionError, Protections, Receipt, Replacement, Rule,
    SpaceError, SpaceInfo, SpaceReply, SpaceRequest, Stored, TypedTemplate, TypedTuple, WaitScope,
};

use crate::limits::SpaceLimits;
use crate::store::{Entry, Store, entry_bytes};
use crate::taken::TakenBuffer;
use crate::waits::{WaitBudget, Waiter, Waits, wait_bytes};

/// One space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Space {
    pub(crate) name: String,
    pub(crate) policy: Policy,
    /// The field protection it was created with (a confidential space).
    pub(crate) protection: Option<Protections>,
    /// The principal that created it (the policy's `creator`).
    pub(crate) creator: u32,
    pub(crate) store: Store,
    pub(crate) waits: Waits,
    /// Sealed parts of tuples taken a short while ago, for their takers.
    pub(crate) taken: TakenBuffer,
    /// The revision the next inserted tuple gets.
    pub(crate) next_revision: u64,
    /// The arrival number the next waiting operation gets.
    pub(crate) next_wait_id: u64,
}

/// A late reply to a waiting operation.
fn answer(waiter: &Waiter, reply: &SpaceReply) -> LateReply {
    LateReply {
        client: waiter.client,
        seq: waiter.seq,
        payload: reply.encode(),
    }
}

/// The end of a lease of `lease_ms` from `now_ms`, checked against the limit.
fn lease_end(
    lease_ms: Option<u64>,
    now_ms: u64,
    limits: &SpaceLimits,
) -> Result<Option<u64>, SpaceError> {
    match lease_ms {
        None => Ok(None),
        Some(lease_ms) if lease_ms == 0 || lease_ms > limits.lease_ms_max => {
            Err(SpaceError::BadLease {
                lease_ms,
                max_ms: limits.lease_ms_max,
            })
        }
        Some(lease_ms) => Ok(Some(now_ms.saturating_add(lease_ms))),
    }
}

fn check_arity(template: &TypedTemplate, tuple: &TypedTuple) -> Result<(), SpaceError> {
    if template.0.len() == tuple.0.len() {
        Ok(())
    } else {
        Err(SpaceError::ArityMismatch {
            template: template.0.len() as u32,
            tuple: tuple.0.len() as u32,
        })
    }
}

fn check_count(max: u32, limits: &SpaceLimits) -> Result<(), SpaceError> {
    if max == 0 || max > limits.all_max {
        Err(SpaceError::BadCount {
            max,
            limit: limits.all_max,
        })
    } else {
        Ok(())
    }
}

impl Space {
    pub(crate) fn new(
        name: String,
        policy: Policy,
        protection: Option<Protections>,
        creator: u32,
        first_revision: u64,
    ) -> Self {
        Space {
            name,
            policy,
            protection,
            creator,
            store: Store::default(),
            waits: Waits::default(),
            taken: TakenBuffer::default(),
            next_revision: first_revision,
            next_wait_id: 1,
        }
    }

    pub(crate) fn info(&self) -> SpaceInfo {
        SpaceInfo {
            name: self.name.clone(),
            tuples: self.store.len() as u32,
            waiting: self.waits.len() as u32,
            protection: self.protection.clone(),
        }
    }

    /// Why a tuple (with its sealed part) may not be stored in this space, if it may not: it
    /// breaks the space's protection, or carries a sealed part that does not decode or fit.
    fn protection_refusal(
        &self,
        tuple: &TypedTuple,
        sealed: Option<&Bytes>,
        limits: &SpaceLimits,
    ) -> Result<(), SpaceError> {
        match &self.protection {
            None if sealed.is_some() => Err(ProtectionError::SealedUnexpected),
            None => Ok(()),
            Some(protection) => protection.check_stored(tuple, sealed),
        }
        .map_err(SpaceError::Protection)?;
        match sealed {
            Some(sealed) => {
                check_sealed(tuple, sealed, &limits.typed).map_err(SpaceError::Protection)
            }
            None => Ok(()),
        }
    }

    /// Why `template` cannot match in this space's protection, if it cannot.
    fn template_refusal(&self, template: &TypedTemplate) -> Result<(), SpaceError> {
        match &self.protection {
            Some(protection) => protection
                .check_template(template)
                .map_err(SpaceError::Protection),
            None => Ok(()),
        }
    }

    /// The earliest agreed time at which a lease ends or a wait times out here.
    pub(crate) fn next_due_ms(&self) -> Option<u64> {
        match (self.store.next_expiry(), self.waits.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A denial if the policy does not let `invoker` run operations of `class`.
    pub(crate) fn deny(&self, class: OpClass, invoker: u32) -> Option<SpaceReply> {
        if self.policy.allows(class, invoker, self.creator) {
            return None;
        }
        Some(SpaceReply::Denied(format!(
            "space `{}` admits `{}` (creator: principal {}) to {class} operations, not \
             principal {invoker}",
            self.name,
            self.policy.principals(class),
            self.creator
        )))
    }

    /// The first of `classes` the policy refuses `invoker`, as its `denied` reply (an
    /// operation of several classes: `cas` reads and inserts, `replace` takes and inserts).
    fn deny_any(&self, classes: &[OpClass], invoker: u32) -> Option<SpaceReply> {
        classes.iter().find_map(|class| self.deny(*class, invoker))
    }

    /// Whether `class`'s field rules let `invoker` see `entry`.
    fn sees(&self, class: OpClass, invoker: u32) -> impl Fn(&Entry) -> bool + '_ {
        move |entry| self.policy.field_rules_hold(class, invoker, &entry.tuple)
    }

    /// The oldest live tuple matching `template` that `invoker` may see for `class`.
    fn first_match(
        &self,
        template: &TypedTemplate,
        class: OpClass,
        invoker: u32,
        now_ms: u64,
    ) -> Option<u64> {
        self.store
            .matching(template, now_ms, self.sees(class, invoker))
            .next()
    }

    fn stored(&self, revision: u64) -> Option<Stored> {
        self.store.get(revision).map(|e| e.stored(revision))
    }

    /// Why `tuple` may not be inserted by `invoker` (with `replacing` taken out first), if
    /// it may not: a field rule, a `unique` template, or the space's capacity.
    fn insert_refusal(
        &self,
        tuple: &TypedTuple,
        sealed: Option<&Bytes>,
        invoker: u32,
        replacing: Option<u64>,
        now_ms: u64,
        limits: &SpaceLimits,
    ) -> Option<SpaceReply> {
        for rule in &self.policy.rules {
            if let Rule::FieldIsInvoker {
                class: OpClass::Insert,
                field,
            } = rule
                && tuple.0.get(*field as usize) != Some(&Field::Int(i64::from(invoker)))
            {
                return Some(SpaceReply::Denied(format!(
                    "space `{}` takes only tuples whose field {field} is the inserting \
                     principal's number ({invoker})",
                    self.name
                )));
            }
        }
        for template in self.policy.unique_templates(tuple) {
            let existing = self
                .store
                .matching(template, now_ms, |_| true)
                .find(|r| Some(*r) != replacing);
            if let Some(revision) = existing {
                return Some(SpaceReply::Denied(format!(
                    "space `{}` holds a tuple matching `unique {template}` already (revision \
                     {revision}): take it first",
                    self.name
                )));
            }
        }
        let freed = replacing.and_then(|r| self.store.get(r));
        let count = self.store.len() - usize::from(freed.is_some());
        if count >= limits.tuples_per_space_max {
            return Some(SpaceReply::Error(SpaceError::SpaceFull {
                space: self.name.clone(),
                max: limits.tuples_per_space_max.min(u32::MAX as usize) as u32,
            }));
        }
        let bytes = self.store.bytes() + self.waits.bytes() - freed.map_or(0, Entry::bytes)
            + entry_bytes(tuple, sealed);
        if bytes > limits.space_bytes_max {
            return Some(SpaceReply::Error(SpaceError::SpaceTooLarge {
                space: self.name.clone(),
                bytes_max: limits.space_bytes_max as u64,
            }));
        }
        None
    }

    /// Inserts a tuple the checks allowed: assigns its revision, offers it to the waiting
    /// operations, and stores it unless an `in` took it.
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &mut self,
        tuple: TypedTuple,
        sealed: Option<Bytes>,
        owner: u32,
        lease_expires_ms: Option<u64>,
        now_ms: u64,
        limits: &SpaceLimits,
        budget: &mut WaitBudget<'_>,
        late: &mut Vec<LateReply>,
    ) -> Receipt {
        let revision = self.next_revision;
        self.next_revision += 1;
        let receipt = Receipt {
            revision,
            lease_expires_ms,
        };
        let stored = Stored {
            tuple,
            revision,
            lease_expires_ms,
            sealed,
        };
        if !self.offer(&stored, now_ms, limits, budget, late) {
            let Stored { tuple, sealed, .. } = stored;
            self.store.insert(
                revision,
                Entry {
                    tuple,
                    owner,
                    lease_expires_ms,
                    sealed,
                },
            );
        }
        receipt
    }

    /// Offers a new tuple to the waiting operations in arrival order; returns whether an
    /// `in` took it (its sealed part then goes to the taken buffer, for that `in`'s
    /// principal).
    fn offer(
        &mut self,
        stored: &Stored,
        now_ms: u64,
        limits: &SpaceLimits,
        budget: &mut WaitBudget<'_>,
        late: &mut Vec<LateReply>,
    ) -> bool {
        if self.waits.is_empty() {
            return false;
        }
        let candidates: Vec<u64> = self
            .waits
            .iter()
            .filter(|(_, w)| {
                let class = if w.take { OpClass::Take } else { OpClass::Read };
                w.template.matches(&stored.tuple)
                    && self
                        .policy
                        .field_rules_hold(class, w.client.principal(), &stored.tuple)
            })
            .map(|(id, _)| id)
            .collect();
        let reply = SpaceReply::Tuple(Some(stored.clone()));
        for id in candidates {
            let Some(waiter) = self.waits.remove(id) else {
                continue;
            };
            late.push(answer(&waiter, &reply));
            budget.ended(waiter.client.principal());
            if waiter.take {
                if let Some(sealed) = &stored.sealed {
                    self.taken.record(
                        stored.revision,
                        waiter.client.principal(),
                        sealed.clone(),
                        now_ms,
                        limits,
                    );
                }
                return true;
            }
        }
        false
    }

    /// Executes an operation inside this space (not create, destroy or list). `None`: the
    /// operation waits; its reply comes later as a late reply.
    pub(crate) fn execute(
        &mut self,
        request: &SpaceRequest,
        ctx: &Context,
        limits: &SpaceLimits,
        budget: &mut WaitBudget<'_>,
        late: &mut Vec<LateReply>,
    ) -> Option<SpaceReply> {
        let invoker = ctx.client.principal();
        let now_ms = ctx.timestamp_ms;
        Some(match request {
            SpaceRequest::Rdp { .. } | SpaceRequest::RdAll { .. } => {
                self.read(request, invoker, now_ms, limits)
            }
            SpaceRequest::Inp { template, .. } => {
                if let Some(denied) = self.deny(OpClass::Take, invoker) {
                    return Some(denied);
                }
                if let Err(e) = self.template_refusal(template) {
                    return Some(SpaceReply::Error(e));
                }
                let found = self.first_match(template, OpClass::Take, invoker, now_ms);
                SpaceReply::Tuple(found.and_then(|r| self.take(r, invoker, now_ms, limits)))
            }
            SpaceRequest::Rd {
                template,
                timeout_ms,
                ..
            } => return self.rd_or_in(false, template, 0, *timeout_ms, ctx, limits, budget),
            SpaceRequest::RdAfter {
                template,
                after,
                timeout_ms,
                ..
            } => {
                return self.rd_or_in(false, template, *after, *timeout_ms, ctx, limits, budget);
            }
            SpaceRequest::In {
                template,
                timeout_ms,
                ..
            } => return self.rd_or_in(true, template, 0, *timeout_ms, ctx, limits, budget),
            SpaceRequest::Out {
                tuple,
                lease_ms,
                sealed,
                ..
            } => {
                if let Some(denied) = self.deny(OpClass::Insert, invoker) {
                    return Some(denied);
                }
                let checked = lease_end(*lease_ms, now_ms, limits).and_then(|end| {
                    self.protection_refusal(tuple, sealed.as_ref(), limits)
                        .map(|()| end)
                });
                let end = match checked {
                    Ok(end) => end,
                    Err(e) => return Some(SpaceReply::Error(e)),
                };
                if let Some(refusal) =
                    self.insert_refusal(tuple, sealed.as_ref(), invoker, None, now_ms, limits)
                {
                    return Some(refusal);
                }
                let receipt = self.insert(
                    tuple.clone(),
                    sealed.clone(),
                    invoker,
                    end,
                    now_ms,
                    limits,
                    budget,
                    late,
                );
                SpaceReply::Inserted(receipt)
            }
            SpaceRequest::Cas {
                template,
                tuple,
                lease_ms,
                sealed,
                ..
            } => self.cas(
                template,
                (tuple, sealed.as_ref()),
                *lease_ms,
                invoker,
                now_ms,
                limits,
                budget,
                late,
            ),
            SpaceRequest::Replace {
                template,
                tuple,
                lease_ms,
                sealed,
                ..
            } => self.replace(
                template,
                (tuple, sealed.as_ref()),
                *lease_ms,
                invoker,
                now_ms,
                limits,
                budget,
                late,
            ),
            SpaceRequest::InAll { template, max, .. } => {
                if let Some(denied) = self.deny(OpClass::Take, invoker) {
                    return Some(denied);
                }
                if let Err(e) =
                    check_count(*max, limits).and_then(|()| self.template_refusal(template))
                {
                    return Some(SpaceReply::Error(e));
                }
                let revisions =
                    self.collect(template, *max, OpClass::Take, invoker, now_ms, limits);
                SpaceReply::Tuples(
                    revisions
                        .into_iter()
                        .filter_map(|r| self.take(r, invoker, now_ms, limits))
                        .collect(),
                )
            }
            SpaceRequest::Share { .. } => {
                SpaceReply::Error(SpaceError::Protection(ProtectionError::ShareOrdered))
            }
            SpaceRequest::Renew {
                template, lease_ms, ..
            } => self
                .renew(template, *lease_ms, invoker, now_ms, limits)
                .unwrap_or_else(SpaceReply::Error),
            SpaceRequest::Create { .. }
            | SpaceRequest::Destroy { .. }
            | SpaceRequest::ListSpaces => SpaceReply::Error(SpaceError::Malformed(format!(
                "`{}` acts on the set of spaces, not inside one",
                request.op_name()
            ))),
        })
    }

    /// `rdp` and `rdAll`, which only read: ordered, or unordered at a replica's own view of
    /// the agreed time (a tuple whose lease ended at `now_ms` is left out, nothing removed).
    pub(crate) fn read(
        &self,
        request: &SpaceRequest,
        invoker: u32,
        now_ms: u64,
        limits: &SpaceLimits,
    ) -> SpaceReply {
        if let Some(denied) = self.deny(OpClass::Read, invoker) {
            return denied;
        }
        if let SpaceRequest::Rdp { template, .. } | SpaceRequest::RdAll { template, .. } = request
            && let Err(e) = self.template_refusal(template)
        {
            return SpaceReply::Error(e);
        }
        match request {
            SpaceRequest::Rdp { template, .. } => SpaceReply::Tuple(
                self.first_match(template, OpClass::Read, invoker, now_ms)
                    .and_then(|r| self.stored(r)),
            ),
            SpaceRequest::RdAll { template, max, .. } => match check_count(*max, limits) {
                Err(e) => SpaceReply::Error(e),
                Ok(()) => SpaceReply::Tuples(
                    self.collect(template, *max, OpClass::Read, invoker, now_ms, limits)
                        .into_iter()
                        .filter_map(|r| self.stored(r))
                        .collect(),
                ),
            },
            other => SpaceReply::Error(SpaceError::NotOrdered(other.op_name().into())),
        }
    }

    /// Up to `max` matches, oldest first, stopping before their reply passes
    /// `reply_bytes_max`.
    fn collect(
        &self,
        template: &TypedTemplate,
        max: u32,
        class: OpClass,
        invoker: u32,
        now_ms: u64,
        limits: &SpaceLimits,
    ) -> Vec<u64> {
        let mut bytes = 5;
        let mut out = Vec::new();
        for revision in self
            .store
            .matching(template, now_ms, self.sees(class, invoker))
        {
            let Some(stored) = self.stored(revision) else {
                continue;
            };
            bytes += stored.encoded_len();
            if out.len() as u32 >= max || bytes > limits.reply_bytes_max {
                break;
            }
            out.push(revision);
        }
        out
    }

    /// Removes a stored tuple that `taker` takes at `now_ms` and returns it; its sealed part
    /// goes to the taken buffer.
    fn take(
        &mut self,
        revision: u64,
        taker: u32,
        now_ms: u64,
        limits: &SpaceLimits,
    ) -> Option<Stored> {
        let entry = self.store.remove(revision)?;
        if let Some(sealed) = &entry.sealed {
            self.taken
                .record(revision, taker, sealed.clone(), now_ms, limits);
        }
        Some(entry.stored(revision))
    }

    /// `rd` or `in`: the answer now if a tuple matches, else a waiting operation.
    /// A blocking `rd` or `in` (with `after`, an `rdAfter`: only tuples of higher
    /// revisions count; a tuple inserted while it waits always has one).
    #[allow(clippy::too_many_arguments)]
    fn rd_or_in(
        &mut self,
        take: bool,
        template: &TypedTemplate,
        after: u64,
        timeout_ms: u64,
        ctx: &Context,
        limits: &SpaceLimits,
        budget: &mut WaitBudget<'_>,
    ) -> Option<SpaceReply> {
        let invoker = ctx.client.principal();
        let class = if take { OpClass::Take } else { OpClass::Read };
        if let Some(denied) = self.deny(class, invoker) {
            return Some(denied);
        }
        if timeout_ms == 0 || timeout_ms > limits.wait_ms_max {
            return Some(SpaceReply::Error(SpaceError::BadTimeout {
                timeout_ms,
                max_ms: limits.wait_ms_max,
            }));
        }
        if let Err(e) = self.template_refusal(template) {
            return Some(SpaceReply::Error(e));
        }
        let found = self
            .store
            .matching(template, ctx.timestamp_ms, self.sees(class, invoker))
            .find(|revision| *revision > after);
        if let Some(revision) = found {
            let found = if take {
                self.take(revision, invoker, ctx.timestamp_ms, limits)
            } else {
                self.stored(revision)
            };
            return Some(SpaceReply::Tuple(found));
        }
        let cap = |scope, max: usize| {
            Some(SpaceReply::Error(SpaceError::TooManyWaits {
                scope,
                max: max.min(u32::MAX as usize) as u32,
            }))
        };
        if self.waits.len() >= limits.waits_per_space_max {
            return cap(WaitScope::Space, limits.waits_per_space_max);
        }
        if budget.count(invoker) >= limits.waits_per_client_max as u64 {
            return cap(WaitScope::Client, limits.waits_per_client_max);
        }
        if self.store.bytes() + self.waits.bytes() + wait_bytes(template) > limits.space_bytes_max {
            return Some(SpaceReply::Error(SpaceError::SpaceTooLarge {
                space: self.name.clone(),
                bytes_max: limits.space_bytes_max as u64,
            }));
        }
        let id = self.next_wait_id;
        self.next_wait_id += 1;
        self.waits.push(
            id,
            Waiter {
                client: ctx.client,
                seq: ctx.seq,
                take,
                template: template.clone(),
                deadline_ms: ctx.timestamp_ms.saturating_add(timeout_ms),
            },
        );
        budget.started(invoker);
        None
    }

    #[allow(clippy::too_many_arguments)]
    fn cas(
        &mut self,
        template: &TypedTemplate,
        (tuple, sealed): (&TypedTuple, Option<&Bytes>),
        lease_ms: Option<u64>,
        invoker: u32,
        now_ms: u64,
        limits: &SpaceLimits,
        budget: &mut WaitBudget<'_>,
        late: &mut Vec<LateReply>,
    ) -> SpaceReply {
        if let Some(denied) = self.deny_any(&[OpClass::Read, OpClass::Insert], invoker) {
            return denied;
        }
        let end = match self.insert_checks(template, tuple, sealed, lease_ms, now_ms, limits) {
            Ok(end) => end,
            Err(e) => return SpaceReply::Error(e),
        };
        if let Some(existing) = self
            .first_match(template, OpClass::Read, invoker, now_ms)
            .and_then(|r| self.stored(r))
        {
            return SpaceReply::Cas(CasOutcome::Exists(existing));
        }
        let sealed = sealed.cloned();
        if let Some(refusal) =
            self.insert_refusal(tuple, sealed.as_ref(), invoker, None, now_ms, limits)
        {
            return refusal;
        }
        let receipt = self.insert(
            tuple.clone(),
            sealed,
            invoker,
            end,
            now_ms,
            limits,
            budget,
            late,
        );
        SpaceReply::Cas(CasOutcome::Inserted(receipt))
    }

    #[allow(clippy::too_many_arguments)]
    fn replace(
        &mut self,
        template: &TypedTemplate,
        (tuple, sealed): (&TypedTuple, Option<&Bytes>),
        lease_ms: Option<u64>,
        invoker: u32,
        now_ms: u64,
        limits: &SpaceLimits,
        budget: &mut WaitBudget<'_>,
        late: &mut Vec<LateReply>,
    ) -> SpaceReply {
        if let Some(denied) = self.deny_any(&[OpClass::Take, OpClass::Insert], invoker) {
            return denied;
        }
        let end = match self.insert_checks(template, tuple, sealed, lease_ms, now_ms, limits) {
            Ok(end) => end,
            Err(e) => return SpaceReply::Error(e),
        };
        let Some(revision) = self.first_match(template, OpClass::Take, invoker, now_ms) else {
            return SpaceReply::Replaced(None);
        };
        let sealed = sealed.cloned();
        if let Some(refusal) = self.insert_refusal(
            tuple,
            sealed.as_ref(),
            invoker,
            Some(revision),
            now_ms,
            limits,
        ) {
            return refusal;
        }
        let Some(taken) = self.take(revision, invoker, now_ms, limits) else {
            return SpaceReply::Replaced(None);
        };
        let inserted = self.insert(
            tuple.clone(),
            sealed,
            invoker,
            end,
            now_ms,
            limits,
            budget,
            late,
        );
        SpaceReply::Replaced(Some(Replacement { taken, inserted }))
    }

    /// What `cas` and `replace` check before looking at the space: the arities, the lease,
    /// the template and the tuple against the protection. Gives the lease's end.
    fn insert_checks(
        &self,
        template: &TypedTemplate,
        tuple: &TypedTuple,
        sealed: Option<&Bytes>,
        lease_ms: Option<u64>,
        now_ms: u64,
        limits: &SpaceLimits,
    ) -> Result<Option<u64>, SpaceError> {
        check_arity(template, tuple)?;
        let end = lease_end(lease_ms, now_ms, limits)?;
        self.template_refusal(template)?;
        self.protection_refusal(tuple, sealed, limits)?;
        Ok(end)
    }

    fn renew(
        &mut self,
        template: &TypedTemplate,
        lease_ms: u64,
        invoker: u32,
        now_ms: u64,
        limits: &SpaceLimits,
    ) -> Result<SpaceReply, SpaceError> {
        if let Some(denied) = self.deny(OpClass::Insert, invoker) {
            return Ok(denied);
        }
        self.template_refusal(template)?;
        let end = lease_end(Some(lease_ms), now_ms, limits)?.unwrap_or(now_ms);
        let revisions: Vec<u64> = self
            .store
            .matching(template, now_ms, |e| {
                e.owner == invoker && e.lease_expires_ms.is_some()
            })
            .collect();
        for revision in &revisions {
            self.store.set_lease(*revision, end);
        }
        Ok(SpaceReply::Renewed(
            revisions.len().min(u32::MAX as usize) as u32
        ))
    }

    /// The agreed time reached `now_ms`: tuples whose lease ended are removed (waking no
    /// one), then waiting operations whose deadline passed are answered `TimedOut`. (Taken
    /// sealed parts end in [`crate::taken::TakenBuffer::expire`], which the service runs at
    /// every advance.)
    pub(crate) fn advance(
        &mut self,
        now_ms: u64,
        budget: &mut WaitBudget<'_>,
        late: &mut Vec<LateReply>,
    ) {
        self.store.expire(now_ms);
        for waiter in self.waits.take_due(now_ms) {
            late.push(answer(&waiter, &SpaceReply::TimedOut));
            budget.ended(waiter.client.principal());
        }
    }

    /// The space is destroyed: every waiting operation is answered `UnknownSpace`, in
    /// arrival order.
    pub(crate) fn destroy(mut self, budget: &mut WaitBudget<'_>, late: &mut Vec<LateReply>) {
        let reply = SpaceReply::Error(SpaceError::UnknownSpace(self.name.clone()));
        for waiter in self.waits.drain() {
            late.push(answer(&waiter, &reply));
            budget.ended(waiter.client.principal());
        }
    }
}
