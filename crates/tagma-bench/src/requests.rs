//! The requests `tagma bench` sends for each workload: the micro-benchmark's empty requests,
//! key-value puts or gets, the list's operations and the tuple space's, with a chosen share
//! of conflicting ones.

use bytes::Bytes;
use tagma_kv::KvOp;

use crate::load;

/// The service a benchmarked cluster runs, and so the requests sent to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// The micro-benchmark's empty service (replies of the size each request asks for).
    Micro,
    /// Puts (or, unordered, gets) on the key-value service.
    Kv,
    /// The linked list of integers, executed in parallel.
    List,
    /// The tuple space, out/inp conflicting with everything.
    TuplespaceTs1,
    /// The tuple space, one conflict class per arity.
    TuplespaceTs2,
    /// The coordination service: inserts of tuples of four strings into the space
    /// [`BENCH_SPACE`], which the replicas start with.
    Space,
}

/// The space the coordination service's benchmark inserts into.
pub const BENCH_SPACE: &str = "bench";

impl Workload {
    /// The name `tagma replica --service` takes.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Kv => "kv",
            Workload::Micro => "micro",
            Workload::List => "list",
            Workload::TuplespaceTs1 => "tuplespace-ts1",
            Workload::TuplespaceTs2 => "tuplespace-ts2",
            Workload::Space => "space",
        }
    }

    /// What `tagma replica` needs besides `--service` to serve this workload.
    pub fn replica_args(self) -> Vec<String> {
        match self {
            Workload::Space => vec!["--spaces".into(), BENCH_SPACE.into()],
            _ => Vec::new(),
        }
    }
}

/// Room for a benchmark's inserts into [`BENCH_SPACE`]: the most bytes and tuples a space
/// holds in the coordination service's benchmarks (`--space-bytes-max`, `--space-tuples-max`).
pub const BENCH_SPACE_BYTES_MAX: usize = 8 << 30;
pub const BENCH_SPACE_TUPLES_MAX: usize = 100_000_000;

/// The coordination service's benchmark cluster: 4 BFT replicas (f = 1) serving
/// [`BENCH_SPACE`], with room for a benchmark's inserts.
pub fn bench_space_cluster() -> tagma_cluster::LaunchOptions {
    tagma_cluster::LaunchOptions {
        replicas: 4,
        mode: tagma_core::Mode::Bft,
        f: Some(1),
        service: Some("space".into()),
        replica_args: vec![
            "--spaces".into(),
            BENCH_SPACE.into(),
            "--space-bytes-max".into(),
            BENCH_SPACE_BYTES_MAX.to_string(),
            "--space-tuples-max".into(),
            BENCH_SPACE_TUPLES_MAX.to_string(),
        ],
        unreplicated: false,
    }
}

/// What the requests of a run look like.
#[derive(Clone, Copy, Debug)]
pub struct RequestShape {
    pub workload: Workload,
    /// Request (and, for the micro-benchmark, reply) size in bytes.
    pub payload: usize,
    /// List and tuple space: share of conflicting requests, percent.
    pub conflict_pct: u32,
    /// List entries or tuples of the replicas' initial state.
    pub state_size: usize,
    /// Key-value: send gets (read-only) instead of puts.
    pub reads: bool,
}

/// The generator of `shape`'s requests: driver `d`'s `n`-th request is `gen(d, n)`.
pub fn generator(shape: &RequestShape) -> Box<load::RequestGen> {
    let payload = shape.payload;
    match shape.workload {
        Workload::Micro => {
            let request = crate::micro::encode_request(payload, payload);
            Box::new(move |_, _| request.clone())
        }
        Workload::TuplespaceTs1 | Workload::TuplespaceTs2 => {
            let pct = shape.conflict_pct;
            let initial = crate::exec::initial_tuples(shape.state_size, crate::exec::TUPLES_SEED);
            Box::new(move |driver, n| crate::exec::space_op(&initial, pct, driver, n))
        }
        Workload::Space => {
            // Four string fields sharing the payload (the DDS benchmark's 1 KB tuples of four
            // strings), each driver's tuples distinct.
            // Built in one allocation per field from a ready padding: the generator runs on
            // the same cores as the replicas, so its CPU is throughput they lose.
            let field = payload.div_ceil(4).max(8);
            let padding = "x".repeat(field);
            Box::new(move |driver, n| {
                use std::fmt::Write as _;
                let mut fields = Vec::with_capacity(4);
                for i in 0..4 {
                    let mut s = String::with_capacity(field.max(32));
                    let _ = write!(s, "{driver}/{n}/{i}/");
                    s.push_str(&padding[..field.saturating_sub(s.len())]);
                    fields.push(tagma_space::Field::Str(s));
                }
                tagma_space::SpaceRequest::Out {
                    space: BENCH_SPACE.into(),
                    tuple: tagma_space::TypedTuple(fields),
                    lease_ms: None,
                    sealed: None,
                }
                .encode()
            })
        }
        Workload::List => {
            let (pct, size) = (u64::from(shape.conflict_pct), shape.state_size as u64);
            Box::new(move |driver, n| list_op(pct, size, driver, n).encode())
        }
        Workload::Kv => {
            let value = Bytes::from(vec![0u8; payload]);
            let read = shape.reads;
            Box::new(move |driver, n| {
                let key = Bytes::from(format!("bench/{driver}/{}", n % 256).into_bytes());
                let op = if read {
                    KvOp::Get { key }
                } else {
                    KvOp::Put {
                        key,
                        value: value.clone(),
                    }
                };
                op.encode()
            })
        }
    }
}

/// Driver `driver`'s `n`-th list operation: `pct` percent add/remove of values outside the
/// initial list of `size` entries, the rest get/contains.
fn list_op(pct: u64, size: u64, driver: usize, n: u64) -> tagma_parallel::list::ListOp {
    use tagma_parallel::list::ListOp;
    // A hash of (driver, n): which requests conflict, and what they touch.
    let h = tagma_crypto::digest(&[driver.to_le_bytes(), n.to_le_bytes()].concat());
    let h = u64::from_le_bytes(h.0[..8].try_into().expect("8 bytes"));
    // Values outside the initial list, one per (driver, pair of requests).
    let mine = (size + ((driver as u64) << 32) + n / 2) as i64;
    if h % 100 < pct {
        if n.is_multiple_of(2) {
            ListOp::Add(mine)
        } else {
            ListOp::Remove(mine)
        }
    } else if (h >> 8) % 2 == 0 {
        ListOp::Get(((h >> 16) % size.max(1)) as i64)
    } else {
        ListOp::Contains(((h >> 16) % size.max(1)) as i64)
    }
}
