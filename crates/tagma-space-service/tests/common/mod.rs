//! A harness for driving a `SpaceService` as the executor does (runs of ordered requests at
//! an agreed time, the time's advance) and builders for requests written with tuples and
//! templates in their text form.

#![allow(dead_code)]

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_exec::{Context, LateReply, Service};
use tagma_space::{Limits, Policy, SpaceReply, SpaceRequest, Stored, TypedTemplate, TypedTuple};
use tagma_space_service::{SpaceLimits, SpaceService};
use tagma_wire::{ClientId, ConsensusId, RequestSeq};

pub fn tuple(text: &str) -> TypedTuple {
    text.parse().unwrap()
}

pub fn template(text: &str) -> TypedTemplate {
    text.parse().unwrap()
}

pub fn create(space: &str) -> SpaceRequest {
    SpaceRequest::Create {
        space: space.into(),
        policy: Policy::default(),
        protection: None,
    }
}

pub fn create_with(space: &str, policy: &str) -> SpaceRequest {
    SpaceRequest::Create {
        space: space.into(),
        policy: policy.parse().unwrap(),
        protection: None,
    }
}

pub fn list() -> SpaceRequest {
    SpaceRequest::ListSpaces
}

pub fn destroy(space: &str) -> SpaceRequest {
    SpaceRequest::Destroy {
        space: space.into(),
    }
}

pub fn out(space: &str, t: &str) -> SpaceRequest {
    SpaceRequest::Out {
        space: space.into(),
        tuple: tuple(t),
        lease_ms: None,
        sealed: None,
    }
}

pub fn out_leased(space: &str, t: &str, lease_ms: u64) -> SpaceRequest {
    SpaceRequest::Out {
        space: space.into(),
        tuple: tuple(t),
        lease_ms: Some(lease_ms),
        sealed: None,
    }
}

pub fn rdp(space: &str, p: &str) -> SpaceRequest {
    SpaceRequest::Rdp {
        space: space.into(),
        template: template(p),
    }
}

pub fn inp(space: &str, p: &str) -> SpaceRequest {
    SpaceRequest::Inp {
        space: space.into(),
        template: template(p),
    }
}

pub fn rd(space: &str, p: &str, timeout_ms: u64) -> SpaceRequest {
    SpaceRequest::Rd {
        space: space.into(),
        template: template(p),
        timeout_ms,
    }
}

pub fn rd_after(space: &str, p: &str, after: u64, timeout_ms: u64) -> SpaceRequest {
    SpaceRequest::RdAfter {
        space: space.into(),
        template: template(p),
        after,
        timeout_ms,
    }
}

pub fn in_(space: &str, p: &str, timeout_ms: u64) -> SpaceRequest {
    SpaceRequest::In {
        space: space.into(),
        template: template(p),
        timeout_ms,
    }
}

pub fn cas(space: &str, p: &str, t: &str, lease_ms: Option<u64>) -> SpaceRequest {
    SpaceRequest::Cas {
        space: space.into(),
        template: template(p),
        tuple: tuple(t),
        lease_ms,
        sealed: None,
    }
}

pub fn replace(space: &str, p: &str, t: &str) -> SpaceRequest {
    SpaceRequest::Replace {
        space: space.into(),
        template: template(p),
        tuple: tuple(t),
        lease_ms: None,
        sealed: None,
    }
}

pub fn rd_all(space: &str, p: &str, max: u32) -> SpaceRequest {
    SpaceRequest::RdAll {
        space: space.into(),
        template: template(p),
        max,
    }
}

pub fn in_all(space: &str, p: &str, max: u32) -> SpaceRequest {
    SpaceRequest::InAll {
        space: space.into(),
        template: template(p),
        max,
    }
}

pub fn renew(space: &str, p: &str, lease_ms: u64) -> SpaceRequest {
    SpaceRequest::Renew {
        space: space.into(),
        template: template(p),
        lease_ms,
    }
}

/// The client of principal `principal` (instance 0).
pub fn client(principal: u32) -> ClientId {
    ClientId::new(principal, 0)
}

pub fn decode(bytes: &Bytes) -> SpaceReply {
    SpaceReply::decode(bytes, &Limits::default()).unwrap()
}

/// The tuple of a `Tuple(Some(..))` reply.
pub fn found(reply: &SpaceReply) -> &Stored {
    match reply {
        SpaceReply::Tuple(Some(stored)) => stored,
        other => panic!("expected a tuple, got {other:?}"),
    }
}

/// A late reply, decoded: to whom and what.
pub type Late = (ClientId, RequestSeq, SpaceReply);

/// A service, the agreed time, and the sequence numbers of each client.
pub struct Harness {
    pub service: SpaceService,
    pub now_ms: u64,
    seqs: BTreeMap<ClientId, u64>,
    cid: u64,
    late: Vec<LateReply>,
}

impl Harness {
    pub fn new() -> Self {
        Harness::with(SpaceLimits::default(), 1)
    }

    pub fn with(limits: SpaceLimits, threads: usize) -> Self {
        Harness {
            service: SpaceService::new(limits)
                .unwrap()
                .with_threads(threads)
                .unwrap()
                .with_parallel_min(1),
            now_ms: 1_000,
            seqs: BTreeMap::new(),
            cid: 0,
            late: Vec::new(),
        }
    }

    /// A second harness whose service is a fresh one that installed this one's snapshot,
    /// with the same time and sequence numbers: it must continue exactly like this one.
    pub fn fork(&self, threads: usize) -> Harness {
        let mut service = SpaceService::new(*self.service.limits())
            .unwrap()
            .with_threads(threads)
            .unwrap()
            .with_parallel_min(1);
        service.install_snapshot(&self.service.snapshot()).unwrap();
        Harness {
            service,
            now_ms: self.now_ms,
            seqs: self.seqs.clone(),
            cid: self.cid,
            late: Vec::new(),
        }
    }

    /// The next context of `client`, at the harness's time.
    pub fn context(&mut self, client: ClientId) -> Context {
        let seq = self.seqs.entry(client).or_insert(0);
        *seq += 1;
        Context {
            client,
            seq: RequestSeq(*seq),
            cid: Some(ConsensusId(self.cid)),
            timestamp_ms: self.now_ms,
            seed: 0,
        }
    }

    /// A decided batch at `timestamp_ms` (not before the current time) with these requests:
    /// the time advances, then the requests run as one run. Returns the replies (`None`:
    /// deferred); late replies collect for [`Harness::late`].
    pub fn batch_at(
        &mut self,
        timestamp_ms: u64,
        requests: Vec<(ClientId, SpaceRequest)>,
    ) -> Vec<Option<SpaceReply>> {
        assert!(
            timestamp_ms >= self.now_ms,
            "the agreed time never goes back"
        );
        self.now_ms = timestamp_ms;
        self.cid += 1;
        self.service.advance_time(timestamp_ms, &mut self.late);
        let run: Vec<(Bytes, Context)> = requests
            .into_iter()
            .map(|(client, request)| (request.encode(), self.context(client)))
            .collect();
        let replies = self.service.execute_ordered_run(&run, &mut self.late);
        replies.iter().map(|r| r.as_ref().map(decode)).collect()
    }

    /// A batch at the current time.
    pub fn batch(&mut self, requests: Vec<(ClientId, SpaceRequest)>) -> Vec<Option<SpaceReply>> {
        self.batch_at(self.now_ms, requests)
    }

    /// One request of principal `principal`, alone in a batch at the current time.
    pub fn call(&mut self, principal: u32, request: SpaceRequest) -> Option<SpaceReply> {
        self.batch(vec![(client(principal), request)])
            .pop()
            .unwrap()
    }

    /// One request whose reply must come now.
    pub fn now(&mut self, principal: u32, request: SpaceRequest) -> SpaceReply {
        let what = format!("{request:?}");
        self.call(principal, request)
            .unwrap_or_else(|| panic!("{what} was deferred"))
    }

    /// A batch that carries only the time.
    pub fn time_passes_to(&mut self, timestamp_ms: u64) {
        self.batch_at(timestamp_ms, Vec::new());
    }

    /// The late replies given since the last call, in the order given.
    pub fn late(&mut self) -> Vec<Late> {
        self.late
            .drain(..)
            .map(|l| (l.client, l.seq, decode(&l.payload)))
            .collect()
    }

    /// An unordered request at `now_ms` as this replica sees it.
    pub fn unordered(&self, principal: u32, request: &SpaceRequest, now_ms: u64) -> SpaceReply {
        let ctx = Context {
            client: client(principal),
            seq: RequestSeq(1),
            cid: None,
            timestamp_ms: now_ms,
            seed: 0,
        };
        decode(&self.service.execute_unordered(&request.encode(), &ctx))
    }
}
