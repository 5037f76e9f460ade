//! The micro-benchmark service: each request reads one object, works for a set time (on the
//! CPU, or blocked as if waiting on I/O), and writes the object back stamped with its id and
//! a count of the object's updates.
//!
//! Conflicts follow the set-up of Kapritsos et al. ("All about Eve"): with a pairwise
//! conflict probability `p`, the state holds `1 / p` objects and each request draws one at
//! random; without conflicts, a batch's requests draw distinct objects. The mixer names the
//! object a request writes, except for the requests the workload marks hidden: a conflicting
//! pair is missed (a false negative) when either is hidden, so each request is hidden with
//! probability `1 − √(1 − f)` for a pairwise false-negative rate `f`. Two conflicting
//! requests run at once both read the old count and write their own stamp: which write
//! survives depends on the threads, and executors may diverge.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::batch::{Batch, NonDeterminism};
use crate::context::RequestContext;
use crate::mixer::{Access, Mixer};
use crate::service::EveService;
use crate::tree::{ObjectId, ObjectTree};

/// The bytes of an object that hold its last writer and its update count.
pub const STAMP_BYTES: usize = 16;

/// The work each request does before it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Spins on the CPU for this many iterations of a multiply-xorshift step.
    Cpu { iterations: u64 },
    /// Blocks the thread, as a request waiting on a database or a disk would.
    Wait { micros: u64 },
}

impl Work {
    /// CPU work lasting about `micros` on this machine's core, given
    /// [`spin_iterations_per_us`].
    pub fn cpu_for(micros: u64, iterations_per_us: f64) -> Work {
        Work::Cpu {
            iterations: (micros as f64 * iterations_per_us).round() as u64,
        }
    }

    pub fn run(self) {
        match self {
            Work::Cpu { iterations } => {
                black_box(spin(iterations));
            }
            Work::Wait { micros } => std::thread::sleep(Duration::from_micros(micros)),
        }
    }
}

/// `iterations` steps of a dependent multiply-xorshift chain (nothing to parallelise or
/// skip).
pub fn spin(iterations: u64) -> u64 {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..iterations {
        x = x
            .wrapping_mul(0x5851_f42d_4c95_7f2d)
            .wrapping_add(0x1405_7b7e_f767_814f);
        x ^= x >> 29;
        x = black_box(x);
    }
    x
}

/// Spin iterations per microsecond on this machine: the fastest of several timed runs (the
/// one least disturbed by other work).
pub fn spin_iterations_per_us() -> f64 {
    const ITERATIONS: u64 = 2_000_000;
    (0..5)
        .map(|_| {
            let start = Instant::now();
            black_box(spin(ITERATIONS));
            ITERATIONS as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e6
        })
        .fold(0.0, f64::max)
}

/// One request: update `object`; `hidden` makes the mixer miss it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MicroRequest {
    pub id: u64,
    pub object: u64,
    pub hidden: bool,
}

impl MicroRequest {
    /// Bytes of [`MicroRequest::encode`].
    pub const ENCODED_LEN: usize = 17;

    /// id and object (little-endian `u64`s), hidden (`u8`).
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(Self::ENCODED_LEN);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.object.to_le_bytes());
        out.push(u8::from(self.hidden));
        Bytes::from(out)
    }
}

/// The service: objects of `object_bytes` (at least [`STAMP_BYTES`]) updated after `work`.
#[derive(Clone, Debug)]
pub struct MicroService {
    pub work: Work,
    pub object_bytes: usize,
}

impl MicroService {
    /// The value an object holds before any update.
    fn fresh(&self, object: u64) -> BytesMut {
        let len = self.object_bytes.max(STAMP_BYTES);
        let mut value = BytesMut::zeroed(len);
        for (i, byte) in value.iter_mut().enumerate().skip(STAMP_BYTES) {
            *byte = (object as usize).wrapping_add(i) as u8;
        }
        value
    }

    /// The state before the run: `objects` objects, fresh.
    pub fn initial_state(&self, objects: u64) -> ObjectTree {
        let mut tree = ObjectTree::new();
        for object in 0..objects {
            tree.insert(ObjectId(object), self.fresh(object).freeze());
        }
        tree
    }
}

impl EveService for MicroService {
    type Request = MicroRequest;

    fn execute(&self, request: &MicroRequest, ctx: &mut RequestContext<'_>) -> Bytes {
        let id = ObjectId(request.object);
        let mut value = match ctx.get(id) {
            Some(old) if old.len() >= STAMP_BYTES => BytesMut::from(&old[..]),
            _ => self.fresh(request.object),
        };
        self.work.run();
        let count = u64::from_le_bytes(value[8..16].try_into().expect("8 bytes")) + 1;
        value[..8].copy_from_slice(&request.id.to_le_bytes());
        value[8..16].copy_from_slice(&count.to_le_bytes());
        ctx.put(id, value.freeze());
        let mut output = Vec::with_capacity(16);
        output.extend_from_slice(&request.id.to_le_bytes());
        output.extend_from_slice(&count.to_le_bytes());
        Bytes::from(output)
    }
}

/// The micro-benchmark's mixer: a request writes its object, unless hidden.
#[derive(Clone, Copy, Debug, Default)]
pub struct MicroMixer;

impl Mixer<MicroRequest> for MicroMixer {
    type Key = u64;

    fn access(&self, request: &MicroRequest) -> Access<u64> {
        if request.hidden {
            return Access::default();
        }
        Access {
            reads: Vec::new(),
            writes: vec![request.object],
        }
    }
}

/// A run's requests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MicroWorkload {
    pub requests: usize,
    pub batch_size: usize,
    /// Pairwise conflict probability, in percent (0: no two requests of a batch conflict).
    pub conflict_pct: f64,
    /// Share of conflicting pairs the mixer misses, in percent.
    pub false_negative_pct: f64,
    pub seed: u64,
}

/// Objects in the state when requests do not conflict (a batch's requests take distinct
/// ones, in turn).
const OBJECTS_WITHOUT_CONFLICTS: u64 = 1_000;

impl MicroWorkload {
    /// Objects the state holds: `100 / conflict_pct`, or enough for distinct objects per
    /// batch.
    pub fn objects(&self) -> u64 {
        if self.conflict_pct > 0.0 {
            (100.0 / self.conflict_pct).round().max(1.0) as u64
        } else {
            OBJECTS_WITHOUT_CONFLICTS.max(self.batch_size as u64)
        }
    }

    /// The batches, numbered from 1, the same for the same workload.
    pub fn batches(&self) -> Vec<Batch<MicroRequest>> {
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let objects = self.objects();
        let fn_rate = (self.false_negative_pct / 100.0).clamp(0.0, 1.0);
        let hide = 1.0 - (1.0 - fn_rate).sqrt();
        let batch_size = self.batch_size.max(1);
        (0..self.requests)
            .collect::<Vec<_>>()
            .chunks(batch_size)
            .enumerate()
            .map(|(i, ids)| Batch {
                seq: i as u64 + 1,
                nd: NonDeterminism {
                    seed: rng.u64(..),
                    timestamp_ms: 1_700_000_000_000 + i as u64,
                },
                requests: ids
                    .iter()
                    .map(|&id| MicroRequest {
                        id: id as u64,
                        object: if self.conflict_pct > 0.0 {
                            rng.u64(..objects)
                        } else {
                            id as u64 % objects
                        },
                        hidden: hide > 0.0 && rng.f64() < hide,
                    })
                    .collect(),
            })
            .collect()
    }
}
