//! [`ConfidentialSpace`]: the operations of one protected space over a [`SpaceClient`],
//! blocking: insertions hashed and sealed, templates transformed, and every tuple a read,
//! take, `cas` or `replace` returns opened with the replicas' shares.
//!
//! Opening a tuple asks every replica for its share (one unordered request, answers
//! collected without voting) and stops as soon as the shares so far open it. A replica that
//! has not executed the insertion yet answers that it has no such tuple; the others may be
//! enough, and if they are not, the request is sent again (with the same one-time reader
//! key, so earlier answers still count) until `share_timeout` passes.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tagma_crypto::sealing::ShareReader;
use tagma_wire::ReplicaId;

use super::error::ConfidentialError;
use super::keys::{SealingGroup, SpaceKey};
use super::transform::{Confidential, Revealed, may_come_later};
use crate::client::SpaceClient;
use crate::{CasOutcome, Receipt, Stored, TypedTemplate, TypedTuple};

/// How long opening one tuple may take by default.
pub const SHARE_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before asking again the replicas that did not have the tuple yet.
const ASK_AGAIN_AFTER: Duration = Duration::from_millis(50);

/// The outcome of a confidential `cas`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfidentialCas {
    /// Nothing matched: the tuple was inserted.
    Inserted(Receipt),
    /// The oldest tuple that matched, opened; nothing was inserted.
    Exists(Revealed),
}

/// What a confidential `replace` did when a tuple matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevealedReplacement {
    pub taken: Revealed,
    pub inserted: Receipt,
}

/// One protected space's operations (see the module docs).
pub struct ConfidentialSpace<'c> {
    client: &'c SpaceClient,
    confidential: Confidential,
    share_timeout: Duration,
}

impl<'c> ConfidentialSpace<'c> {
    /// The operations of the space `confidential` transforms, over `client`.
    pub fn new(client: &'c SpaceClient, confidential: Confidential) -> Self {
        let confidential = confidential.with_limits(*client.limits());
        ConfidentialSpace {
            client,
            confidential,
            share_timeout: SHARE_TIMEOUT,
        }
    }

    /// The operations of `space`, whose protection the replicas report (one ordered list of
    /// the spaces), for clients holding `key`, sealing for `group`.
    pub fn open(
        client: &'c SpaceClient,
        space: &str,
        key: &SpaceKey,
        group: SealingGroup,
    ) -> Result<Self, ConfidentialError> {
        let info = client
            .list()
            .wait()?
            .into_iter()
            .find(|info| info.name == space)
            .ok_or_else(|| ConfidentialError::UnknownSpace(space.to_owned()))?;
        let protection = info
            .protection
            .ok_or_else(|| ConfidentialError::NotProtected(space.to_owned()))?;
        Ok(ConfidentialSpace::new(
            client,
            Confidential::new(space, protection, key, group),
        ))
    }

    /// How long opening one tuple may take (default [`SHARE_TIMEOUT`]).
    pub fn with_share_timeout(mut self, timeout: Duration) -> Self {
        self.share_timeout = timeout;
        self
    }

    pub fn confidential(&self) -> &Confidential {
        &self.confidential
    }

    fn space(&self) -> &str {
        self.confidential.space()
    }

    /// Opens `stored` with the replicas' shares.
    pub fn reveal(&self, stored: &Stored) -> Result<Revealed, ConfidentialError> {
        if stored.sealed.is_none() {
            return self.confidential.reveal(stored, &ShareReader::new(), &[]);
        }
        let reader = ShareReader::new();
        let request = self
            .confidential
            .share_request(stored.revision, &reader)
            .encode();
        let limits = *self.client.limits();
        let deadline = Instant::now() + self.share_timeout;
        // The best answer of each replica so far: a share beats anything else.
        let mut answers: Vec<(ReplicaId, Bytes)> = Vec::new();
        loop {
            let mut opened = None;
            let known = answers.clone();
            let remaining = deadline.saturating_duration_since(Instant::now());
            let replies = self
                .client
                .proxy()
                .invoke_unordered_each_until(request.clone(), remaining, |got| {
                    let mut all = known.clone();
                    merge(&mut all, got, &limits);
                    match self.confidential.reveal(stored, &reader, &all) {
                        Ok(revealed) => {
                            opened = Some(revealed);
                            true
                        }
                        Err(_) => false,
                    }
                })
                .map_err(|e| ConfidentialError::Space(e.into()))?;
            if let Some(revealed) = opened {
                return Ok(revealed);
            }
            let got: Vec<(ReplicaId, Bytes)> = replies
                .into_iter()
                .filter_map(|(id, reply)| reply.ok().map(|bytes| (id, bytes)))
                .collect();
            merge(&mut answers, &got, &limits);
            let result = self.confidential.reveal(stored, &reader, &answers);
            let retry = matches!(result, Err(ConfidentialError::Shares { .. }))
                && Instant::now() + ASK_AGAIN_AFTER < deadline
                && answers.iter().any(|(_, a)| may_come_later(a, &limits));
            if !retry {
                return result;
            }
            std::thread::sleep(ASK_AGAIN_AFTER);
        }
    }

    fn reveal_all(&self, stored: Vec<Stored>) -> Result<Vec<Revealed>, ConfidentialError> {
        stored.iter().map(|s| self.reveal(s)).collect()
    }

    fn reveal_one(&self, stored: Option<Stored>) -> Result<Option<Revealed>, ConfidentialError> {
        stored.map(|s| self.reveal(&s)).transpose()
    }

    /// `out`: inserts `tuple`, protected, for `lease` if given.
    pub fn out(
        &self,
        tuple: &TypedTuple,
        lease: Option<Duration>,
    ) -> Result<Receipt, ConfidentialError> {
        let (stored, sealed) = self.confidential.protect(tuple)?;
        Ok(self
            .client
            .out_sealed(self.space(), stored, lease, sealed)
            .wait()?)
    }

    /// `rdp`: the oldest tuple matching `template`, opened.
    pub fn rdp(&self, template: &TypedTemplate) -> Result<Option<Revealed>, ConfidentialError> {
        let template = self.confidential.template(template)?;
        self.reveal_one(self.client.rdp(self.space(), template).wait()?)
    }

    /// `rdp` without ordering (see [`SpaceClient::rdp_unordered`]), opened.
    pub fn rdp_unordered(
        &self,
        template: &TypedTemplate,
    ) -> Result<Option<Revealed>, ConfidentialError> {
        let template = self.confidential.template(template)?;
        self.reveal_one(self.client.rdp_unordered(self.space(), template).wait()?)
    }

    /// `inp`: takes the oldest tuple matching `template`, opened (its shares stay for this
    /// client's principal for the service's taken keep time).
    pub fn inp(&self, template: &TypedTemplate) -> Result<Option<Revealed>, ConfidentialError> {
        let template = self.confidential.template(template)?;
        self.reveal_one(self.client.inp(self.space(), template).wait()?)
    }

    /// `rd`: waits up to `timeout` for a tuple matching `template`; opened.
    pub fn rd(
        &self,
        template: &TypedTemplate,
        timeout: Duration,
    ) -> Result<Option<Revealed>, ConfidentialError> {
        let template = self.confidential.template(template)?;
        self.reveal_one(self.client.rd(self.space(), template, timeout).wait()?)
    }

    /// `rdAfter`: the oldest tuple matching `template` inserted after revision `after`,
    /// waiting up to `timeout`; opened.
    pub fn rd_after(
        &self,
        template: &TypedTemplate,
        after: u64,
        timeout: Duration,
    ) -> Result<Option<Revealed>, ConfidentialError> {
        let template = self.confidential.template(template)?;
        let found = self
            .client
            .rd_after(self.space(), template, after, timeout)
            .wait()?;
        self.reveal_one(found)
    }

    /// `in`: takes a tuple matching `template`, waiting up to `timeout`; opened.
    pub fn in_(
        &self,
        template: &TypedTemplate,
        timeout: Duration,
    ) -> Result<Option<Revealed>, ConfidentialError> {
        let template = self.confidential.template(template)?;
        self.reveal_one(self.client.in_(self.space(), template, timeout).wait()?)
    }

    /// `rdAll`: up to `max` matching tuples, oldest first, opened.
    pub fn rd_all(
        &self,
        template: &TypedTemplate,
        max: u32,
    ) -> Result<Vec<Revealed>, ConfidentialError> {
        let template = self.confidential.template(template)?;
        self.reveal_all(self.client.rd_all(self.space(), template, max).wait()?)
    }

    /// `rdAll` without ordering (see [`SpaceClient::rd_all_unordered`]), opened.
    pub fn rd_all_unordered(
        &self,
        template: &TypedTemplate,
        max: u32,
    ) -> Result<Vec<Revealed>, ConfidentialError> {
        let template = self.confidential.template(template)?;
        let found = self
            .client
            .rd_all_unordered(self.space(), template, max)
            .wait()?;
        self.reveal_all(found)
    }

    /// `inAll`: takes up to `max` matching tuples, oldest first, opened.
    pub fn in_all(
        &self,
        template: &TypedTemplate,
        max: u32,
    ) -> Result<Vec<Revealed>, ConfidentialError> {
        let template = self.confidential.template(template)?;
        self.reveal_all(self.client.in_all(self.space(), template, max).wait()?)
    }

    /// `cas`: inserts `tuple`, protected, if nothing matches `template`; otherwise the
    /// oldest match, opened.
    pub fn cas(
        &self,
        template: &TypedTemplate,
        tuple: &TypedTuple,
        lease: Option<Duration>,
    ) -> Result<ConfidentialCas, ConfidentialError> {
        let template = self.confidential.template(template)?;
        let (stored, sealed) = self.confidential.protect(tuple)?;
        let outcome = self
            .client
            .cas_sealed(self.space(), template, stored, lease, sealed)
            .wait()?;
        Ok(match outcome {
            CasOutcome::Inserted(receipt) => ConfidentialCas::Inserted(receipt),
            CasOutcome::Exists(existing) => ConfidentialCas::Exists(self.reveal(&existing)?),
        })
    }

    /// `replace`: takes the oldest match of `template` (opened) and inserts `tuple`,
    /// protected, in its place.
    pub fn replace(
        &self,
        template: &TypedTemplate,
        tuple: &TypedTuple,
        lease: Option<Duration>,
    ) -> Result<Option<RevealedReplacement>, ConfidentialError> {
        let template = self.confidential.template(template)?;
        let (stored, sealed) = self.confidential.protect(tuple)?;
        let replaced = self
            .client
            .replace_sealed(self.space(), template, stored, lease, sealed)
            .wait()?;
        replaced
            .map(|r| {
                Ok(RevealedReplacement {
                    taken: self.reveal(&r.taken)?,
                    inserted: r.inserted,
                })
            })
            .transpose()
    }

    /// `renew`: the leases of this client's tuples matching `template`.
    pub fn renew(
        &self,
        template: &TypedTemplate,
        lease: Duration,
    ) -> Result<u32, ConfidentialError> {
        let template = self.confidential.template(template)?;
        Ok(self.client.renew(self.space(), template, lease).wait()?)
    }
}

/// Adds `got` to `answers`, keeping for each replica a share over anything else.
fn merge(
    answers: &mut Vec<(ReplicaId, Bytes)>,
    got: &[(ReplicaId, Bytes)],
    limits: &crate::Limits,
) {
    for (id, answer) in got {
        let is_share = |a: &Bytes| {
            matches!(
                crate::SpaceReply::decode(a, limits),
                Ok(crate::SpaceReply::Share(_))
            )
        };
        match answers.iter_mut().find(|(known, _)| known == id) {
            Some((_, known)) if !is_share(known) => *known = answer.clone(),
            Some(_) => {}
            None => answers.push((*id, answer.clone())),
        }
    }
}
