//! The coordination-service workload of the simulated clients, on one space that every
//! replica holds from genesis ([`SPACE_NAME`]):
//! - a work queue: `out` of jobs `("job", id, producer)` with ids unique to their producer,
//!   taken by `in` (with a timeout) and `inp`, read by `rdp` and `rdAll` (unordered when
//!   drawn);
//! - a lock: `cas(("lock", *int), ("lock", me))` with a lease of a few request timeouts,
//!   `renew`ed, and released by `inp(("lock", me))`;
//! - signals: blocking `rd` and `in` of `("signal", *int)` with short timeouts, so that some
//!   time out, and `out`s of signals with a lease that answer them.
//!
//! Faulty clients stay off the jobs: they put, take and wait for noise, grab the lock and let
//! its lease run out, try to destroy the space, create spaces of their own, and send bytes
//! that decode as no request.

use bytes::{BufMut, Bytes, BytesMut};
use tagma_space::{
    Field, FieldType, Pattern, Policy, SpaceReply, SpaceRequest, Stored, TypedTemplate, TypedTuple,
};

use crate::rng::Rng;
use crate::scenario::SpaceParams;

/// The space the workload runs in, created at genesis.
pub const SPACE_NAME: &str = "work";
/// The principal that creates [`SPACE_NAME`] (the administrator's): no simulated client
/// administers it, so none can destroy it.
pub const GENESIS_PRINCIPAL: u32 = 99;
/// A lock holder releases the lock after at most this many operations.
const OPS_HOLDING_MAX: u32 = 3;

/// What an operation of the workload is for (what its reply is checked against).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// `out` of the job with this id.
    PutJob(i64),
    /// `in` (`blocking`) or `inp` of any job.
    TakeJob { blocking: bool },
    /// `rdp` or `rdAll` of the jobs.
    ReadJobs,
    /// `cas` of the lock.
    Acquire,
    /// `renew` of the lock's lease.
    Renew,
    /// `inp` of the lock tuple.
    Release,
    /// Blocking `rd` or `in` of a signal.
    AwaitSignal,
    /// `out` of a signal.
    Signal,
    /// A faulty client's operation (not checked).
    Noise,
}

/// One operation of the workload.
#[derive(Clone, Debug)]
pub struct SpaceCall {
    pub purpose: Purpose,
    /// The request (`None`: bytes that decode as no request).
    pub request: Option<SpaceRequest>,
    pub payload: Bytes,
}

impl SpaceCall {
    fn new(purpose: Purpose, request: SpaceRequest) -> Self {
        SpaceCall {
            purpose,
            payload: request.encode(),
            request: Some(request),
        }
    }

    /// The lease it asks for, if any.
    pub fn lease_ms(&self) -> Option<u64> {
        match &self.request {
            Some(SpaceRequest::Cas { lease_ms, .. }) | Some(SpaceRequest::Out { lease_ms, .. }) => {
                *lease_ms
            }
            Some(SpaceRequest::Renew { lease_ms, .. }) => Some(*lease_ms),
            _ => None,
        }
    }

    /// The timeout of a blocking `rd` or `in`.
    pub fn timeout_ms(&self) -> Option<u64> {
        match &self.request {
            Some(SpaceRequest::Rd { timeout_ms, .. })
            | Some(SpaceRequest::In { timeout_ms, .. }) => Some(*timeout_ms),
            _ => None,
        }
    }
}

fn s(v: &str) -> Field {
    Field::Str(v.into())
}

fn is(field: Field) -> Pattern {
    Pattern::Is(field)
}

fn any_int() -> Pattern {
    Pattern::AnyOf(FieldType::Int)
}

/// `("job", *int, *int)`.
pub fn job_template() -> TypedTemplate {
    TypedTemplate(vec![is(s("job")), any_int(), any_int()])
}

/// `("lock", *int)`.
pub fn lock_template() -> TypedTemplate {
    TypedTemplate(vec![is(s("lock")), any_int()])
}

/// The lock tuple of `principal`: `("lock", principal)`.
pub fn lock_tuple(principal: u32) -> TypedTuple {
    TypedTuple(vec![s("lock"), Field::Int(i64::from(principal))])
}

fn signal_template() -> TypedTemplate {
    TypedTemplate(vec![is(s("signal")), any_int()])
}

fn noise_template() -> TypedTemplate {
    TypedTemplate(vec![is(s("noise")), any_int()])
}

/// The id of a job tuple `("job", id, producer)`, if `tuple` is one.
pub fn job_id(tuple: &TypedTuple) -> Option<i64> {
    match tuple.0.as_slice() {
        [Field::Str(tag), Field::Int(id), Field::Int(_)] if tag == "job" => Some(*id),
        _ => None,
    }
}

/// Whether `tuple` is a signal `("signal", n)`.
pub fn is_signal(tuple: &TypedTuple) -> bool {
    matches!(tuple.0.as_slice(), [Field::Str(tag), Field::Int(_)] if tag == "signal")
}

/// The request every replica executes at genesis: creating [`SPACE_NAME`] with the default
/// policy (everyone reads, inserts and takes; only its creator destroys it).
pub fn genesis_request() -> Bytes {
    SpaceRequest::Create {
        space: SPACE_NAME.into(),
        policy: Policy::default(),
        protection: None,
    }
    .encode()
}

/// A reply a Byzantine replica makes up: a job nobody put.
pub fn made_up_reply(rng: &mut Rng) -> Bytes {
    let id = rng.next_u64() as i64;
    SpaceReply::Tuple(Some(Stored {
        tuple: TypedTuple(vec![s("job"), Field::Int(id), Field::Int(0)]),
        revision: rng.next_u64(),
        lease_expires_ms: None,
        sealed: None,
    }))
    .encode()
}

/// A write nobody ordered (what a lying disk or state source adds to a true state).
pub fn lie_request() -> Bytes {
    SpaceRequest::Out {
        space: SPACE_NAME.into(),
        tuple: TypedTuple(vec![s("lie"), s("never ordered")]),
        lease_ms: None,
        sealed: None,
    }
    .encode()
}

/// What one client of the coordination service remembers.
#[derive(Debug)]
pub struct SpaceWorkload {
    /// The client's index (its job ids are unique to it).
    index: usize,
    /// The client's principal (the lock tuple's field).
    pub principal: u32,
    jobs_made: u64,
    signals_made: u64,
    /// Whether the client holds the lock, as its replies tell it.
    pub holding: bool,
    /// Operations since it took the lock.
    ops_holding: u32,
}

impl SpaceWorkload {
    pub fn new(index: usize, principal: u32) -> Self {
        SpaceWorkload {
            index,
            principal,
            jobs_made: 0,
            signals_made: 0,
            holding: false,
            ops_holding: 0,
        }
    }

    /// The client took the lock (`true`) or no longer holds it.
    pub fn set_holding(&mut self, holding: bool) {
        self.holding = holding;
        self.ops_holding = 0;
    }

    fn next_job_id(&mut self) -> i64 {
        self.jobs_made += 1;
        (((self.index as i64) + 1) << 32) | self.jobs_made as i64
    }

    fn space() -> String {
        SPACE_NAME.into()
    }

    fn wait_ms(rng: &mut Rng, params: &SpaceParams) -> u64 {
        rng.range(20, params.wait_ms_max)
    }

    fn signal(&mut self, params: &SpaceParams) -> SpaceRequest {
        self.signals_made += 1;
        SpaceRequest::Out {
            space: Self::space(),
            tuple: TypedTuple(vec![s("signal"), Field::Int(self.signals_made as i64)]),
            lease_ms: Some(params.signal_lease_ms),
            sealed: None,
        }
    }

    /// A correct client's next operation, and whether to try it unordered.
    pub fn next_call(
        &mut self,
        rng: &mut Rng,
        params: &SpaceParams,
        unordered_p: f64,
    ) -> (SpaceCall, bool) {
        let space = Self::space();
        let me = lock_tuple(self.principal);
        if self.holding {
            self.ops_holding += 1;
            let mine = TypedTemplate(me.0.iter().cloned().map(Pattern::Is).collect());
            if self.ops_holding > OPS_HOLDING_MAX || rng.chance(0.4) {
                let request = SpaceRequest::Inp {
                    space,
                    template: mine,
                };
                return (SpaceCall::new(Purpose::Release, request), false);
            }
            if rng.chance(0.5) {
                let request = SpaceRequest::Renew {
                    space,
                    template: mine,
                    lease_ms: params.lock_lease_ms,
                };
                return (SpaceCall::new(Purpose::Renew, request), false);
            }
        }
        let call = match rng.below(100) {
            0..=24 => {
                let id = self.next_job_id();
                let tuple = TypedTuple(vec![
                    s("job"),
                    Field::Int(id),
                    Field::Int(i64::from(self.principal)),
                ]);
                let request = SpaceRequest::Out {
                    space,
                    tuple,
                    lease_ms: None,
                    sealed: None,
                };
                SpaceCall::new(Purpose::PutJob(id), request)
            }
            25..=37 => {
                let request = SpaceRequest::In {
                    space,
                    template: job_template(),
                    timeout_ms: Self::wait_ms(rng, params),
                };
                SpaceCall::new(Purpose::TakeJob { blocking: true }, request)
            }
            38..=47 => {
                let request = SpaceRequest::Inp {
                    space,
                    template: job_template(),
                };
                SpaceCall::new(Purpose::TakeJob { blocking: false }, request)
            }
            48..=62 if !self.holding => {
                let request = SpaceRequest::Cas {
                    space,
                    template: lock_template(),
                    tuple: me,
                    lease_ms: Some(params.lock_lease_ms),
                    sealed: None,
                };
                SpaceCall::new(Purpose::Acquire, request)
            }
            63..=77 => {
                let template = signal_template();
                let timeout_ms = Self::wait_ms(rng, params);
                let request = if rng.chance(0.6) {
                    SpaceRequest::Rd {
                        space,
                        template,
                        timeout_ms,
                    }
                } else {
                    SpaceRequest::In {
                        space,
                        template,
                        timeout_ms,
                    }
                };
                SpaceCall::new(Purpose::AwaitSignal, request)
            }
            78..=87 => SpaceCall::new(Purpose::Signal, self.signal(params)),
            _ => {
                let template = job_template();
                let request = if rng.chance(0.5) {
                    SpaceRequest::Rdp { space, template }
                } else {
                    SpaceRequest::RdAll {
                        space,
                        template,
                        max: 64,
                    }
                };
                SpaceCall::new(Purpose::ReadJobs, request)
            }
        };
        let unordered = call
            .request
            .as_ref()
            .is_some_and(SpaceRequest::runs_unordered)
            && rng.chance(unordered_p);
        (call, unordered)
    }

    /// A faulty client's next operation (always ordered).
    pub fn next_faulty_call(&mut self, rng: &mut Rng, params: &SpaceParams) -> SpaceCall {
        let space = Self::space();
        let own = format!("noise{}", self.index);
        let noise = |n: u64| TypedTuple(vec![s("noise"), Field::Int(n as i64)]);
        let request = match rng.below(8) {
            0 => SpaceRequest::Out {
                space,
                tuple: noise(rng.below(1000)),
                lease_ms: Some(rng.range(1, 2_000)),
                sealed: None,
            },
            1 => SpaceRequest::Inp {
                space,
                template: noise_template(),
            },
            2 => SpaceRequest::Rd {
                space,
                template: noise_template(),
                timeout_ms: Self::wait_ms(rng, params),
            },
            3 => SpaceRequest::Cas {
                space,
                template: lock_template(),
                tuple: lock_tuple(self.principal),
                lease_ms: Some(params.lock_lease_ms),
                sealed: None,
            },
            4 => SpaceRequest::Destroy { space },
            5 => SpaceRequest::Create {
                space: own,
                policy: Policy::default(),
                protection: None,
            },
            6 => SpaceRequest::Out {
                space: own,
                tuple: noise(rng.below(1000)),
                lease_ms: Some(rng.range(1, 500)),
                sealed: None,
            },
            _ => {
                // An unknown operation tag, then random bytes: no request decodes from it.
                let mut garbage = BytesMut::new();
                garbage.put_u8(0xee);
                for _ in 0..rng.range(0, 40) {
                    garbage.put_u8(rng.below(256) as u8);
                }
                return SpaceCall {
                    purpose: Purpose::Noise,
                    request: None,
                    payload: garbage.freeze(),
                };
            }
        };
        SpaceCall::new(Purpose::Noise, request)
    }

    /// What an equivocating client sends some replicas instead of its request: an `out` of
    /// noise.
    pub fn equivocation(&self, rng: &mut Rng) -> SpaceCall {
        let request = SpaceRequest::Out {
            space: Self::space(),
            tuple: TypedTuple(vec![s("noise"), Field::Int(rng.next_u64() as i64)]),
            lease_ms: None,
            sealed: None,
        };
        SpaceCall::new(Purpose::Noise, request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagma_space::Limits;

    #[test]
    fn every_call_is_a_well_formed_request_and_garbage_decodes_as_none() {
        let params = SpaceParams {
            lock_lease_ms: 600,
            wait_ms_max: 300,
            signal_lease_ms: 200,
        };
        let mut rng = Rng::new(7);
        let mut correct = SpaceWorkload::new(0, 100);
        let mut faulty = SpaceWorkload::new(1, 101);
        let mut garbage = 0;
        for i in 0..2_000 {
            correct.set_holding(i % 3 == 0);
            let (call, _) = correct.next_call(&mut rng, &params, 0.3);
            let request = call.request.clone().expect("correct clients send requests");
            assert_eq!(
                SpaceRequest::decode(&call.payload, &Limits::default()),
                Ok(request)
            );
            let noise = faulty.next_faulty_call(&mut rng, &params);
            match noise.request {
                Some(r) => assert_eq!(
                    SpaceRequest::decode(&noise.payload, &Limits::default()),
                    Ok(r)
                ),
                None => {
                    garbage += 1;
                    assert!(SpaceRequest::decode(&noise.payload, &Limits::default()).is_err());
                }
            }
        }
        assert!(garbage > 0);
    }

    #[test]
    fn job_ids_are_unique_to_their_producer() {
        let params = SpaceParams {
            lock_lease_ms: 600,
            wait_ms_max: 300,
            signal_lease_ms: 200,
        };
        let mut rng = Rng::new(1);
        let mut ids = std::collections::BTreeSet::new();
        for index in 0..3 {
            let mut client = SpaceWorkload::new(index, 100 + index as u32);
            for _ in 0..300 {
                let (call, _) = client.next_call(&mut rng, &params, 0.0);
                if let Purpose::PutJob(id) = call.purpose {
                    assert!(ids.insert(id), "job id {id} drawn twice");
                    let Some(SpaceRequest::Out { tuple, .. }) = &call.request else {
                        panic!("a job is put by an out");
                    };
                    assert_eq!(job_id(tuple), Some(id));
                }
            }
        }
        assert!(ids.len() > 100);
    }
}
