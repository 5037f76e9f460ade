//! Running one decided batch on `k` workers.
//!
//! Three policies, each giving the replies (in batch order) and final state of sequential
//! execution in decision order, as long as the classification is right:
//! - [`Policy::Sequential`]: one thread, in order — the baseline.
//! - [`Policy::Barrier`]: the barrier scheduler of parallel state machine replication with
//!   client-chosen conflict groups (Alchieri et al., parallel execution in BFT-SMaRt). One FIFO
//!   queue per worker;
//!   the delivery stage puts a request of no group in the next queue round-robin, one of a
//!   single worker's group in that worker's queue, and one of a multi-worker group (or of all)
//!   in the queue of *every* worker of the group. A worker meeting such a request waits at the
//!   group's barrier; the lowest-id worker of the group executes it while the others wait at a
//!   second barrier. Every conflicting request parks every worker of its group.
//! - [`Policy::Graph`]: a dependency graph built from the requests' conflict classes
//!   ([`crate::Access`]): each request waits only for the earlier requests it conflicts with.
//!   Ready requests go to a shared pool that every worker takes from (so load balances
//!   itself); requests ready together are handed out in chunks, and a worker that makes the
//!   next request of a chain ready runs it itself, so neither independent short requests nor a
//!   chain of conflicting ones pay a hand-off each. A conflicting request occupies one worker,
//!   not all.
//!
//! Workers are scoped threads of one batch: a batch ends when all its requests have run (the
//! point where checkpoints and reconfigurations may happen, with no request running).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Barrier, OnceLock};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, unbounded};

use crate::access::{Access, Class, Group};

/// A service whose requests may run concurrently: `execute` takes `&self`, and the scheduler
/// never runs two conflicting requests at once (it keeps their decision order), so internal
/// locks are only for memory safety, never contended by conflicting requests.
pub trait ParallelService: Sync {
    /// Executes one operation and returns its reply. Deterministic given the order of
    /// conflicting operations.
    fn execute(&self, op: &Bytes) -> Bytes;
    /// The conflict classes of `op` (the graph scheduler's input; also Eve's mixer later).
    fn classify(&self, op: &Bytes) -> Access;
    /// A digest of the whole state (equal across replicas that executed the same requests).
    fn digest(&self) -> [u8; 32];
}

/// Which scheduler runs a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    Sequential,
    Barrier,
    Graph,
    /// One thread, in a seeded random order that respects the dependency graph: any order a
    /// parallel run could produce, reproducibly (the simulator's parallel replicas).
    Shuffled {
        seed: u64,
    },
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Sequential => "sequential",
            Policy::Barrier => "barrier",
            Policy::Graph => "graph",
            Policy::Shuffled { .. } => "shuffled",
        }
    }
}

/// One request of a batch: its operation and how it was classified. The barrier policy runs
/// on groups (the client names the group); the graph policy on the access
/// (the service's classification, or the group's footprint).
#[derive(Clone, Debug)]
pub struct Task {
    pub op: Bytes,
    pub group: Group,
    pub access: Access,
}

/// Runs batches with one policy on `threads` workers.
#[derive(Debug)]
pub struct Scheduler {
    policy: Policy,
    threads: usize,
    groups: crate::access::Groups,
}

impl Scheduler {
    /// `threads` is at least 1; `groups` are the registered multi-worker groups (barrier
    /// policy).
    pub fn new(policy: Policy, threads: usize, groups: crate::access::Groups) -> Self {
        Scheduler {
            policy,
            threads: threads.max(1),
            groups,
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The registered multi-worker groups.
    pub fn groups(&self) -> &crate::access::Groups {
        &self.groups
    }

    /// Executes `tasks` on `service`; the replies, in batch order.
    pub fn run<S: ParallelService>(&self, service: &S, tasks: &[Task]) -> Vec<Bytes> {
        if tasks.is_empty() {
            return Vec::new();
        }
        match self.policy {
            Policy::Sequential => tasks.iter().map(|t| service.execute(&t.op)).collect(),
            Policy::Shuffled { seed } => run_shuffled(service, tasks, seed),
            _ if self.threads == 1 => tasks.iter().map(|t| service.execute(&t.op)).collect(),
            Policy::Barrier => self.run_barrier(service, tasks),
            Policy::Graph => run_graph(service, tasks, self.threads),
        }
    }

    /// The workers of the group a task must run on: `None` for a single
    /// worker chosen round-robin, else the (ascending) worker set.
    fn route(&self, group: Group) -> Option<Vec<u32>> {
        let k = self.threads as u32;
        match group {
            Group::None => None,
            Group::Worker(t) => Some(vec![t % k]),
            Group::Custom(id) => match self.groups.workers(id) {
                Some(ws) => Some(ws.to_vec()),
                None => Some((0..k).collect()),
            },
            Group::All => Some((0..k).collect()),
        }
    }

    fn run_barrier<S: ParallelService>(&self, service: &S, tasks: &[Task]) -> Vec<Bytes> {
        let k = self.threads;
        let mut queues: Vec<Vec<usize>> = vec![Vec::new(); k];
        let mut sets: Vec<Option<Vec<u32>>> = Vec::with_capacity(tasks.len());
        let mut barriers: HashMap<Vec<u32>, Barrier> = HashMap::new();
        let mut next = 0usize;
        for (i, task) in tasks.iter().enumerate() {
            match self.route(task.group) {
                None => {
                    queues[next % k].push(i);
                    next += 1;
                    sets.push(None);
                }
                Some(ws) if ws.len() == 1 => {
                    queues[ws[0] as usize].push(i);
                    sets.push(None);
                }
                Some(ws) => {
                    for w in &ws {
                        queues[*w as usize].push(i);
                    }
                    barriers
                        .entry(ws.clone())
                        .or_insert_with(|| Barrier::new(ws.len()));
                    sets.push(Some(ws));
                }
            }
        }
        let replies: Vec<OnceLock<Bytes>> = (0..tasks.len()).map(|_| OnceLock::new()).collect();
        let panicked = Panicked::default();
        let work = |worker: usize| {
            let queue = &queues[worker];
            let (replies, sets, barriers, panicked) = (&replies, &sets, &barriers, &panicked);
            move || {
                for &i in queue {
                    match &sets[i] {
                        None => {
                            let _ = replies[i].set(guarded(service, &tasks[i].op, panicked));
                        }
                        Some(ws) => {
                            let barrier = &barriers[ws];
                            barrier.wait();
                            if ws[0] as usize == worker {
                                let _ = replies[i].set(guarded(service, &tasks[i].op, panicked));
                            }
                            barrier.wait();
                        }
                    }
                }
            }
        };
        // The calling thread is worker 0.
        std::thread::scope(|s| {
            for worker in 1..k {
                s.spawn(work(worker));
            }
            work(0)();
        });
        rethrow(panicked);
        collect(replies)
    }
}

/// A panic of the service inside a parallel run, kept until every worker is done.
type Panicked = std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>;

/// Executes `op`, catching a panic of the service: the worker goes on (so the others are not
/// left waiting at a barrier or for a task that never completes) and the run re-raises the
/// first panic once every worker stopped ([`rethrow`]) — as sequential execution would have
/// panicked in the caller.
fn guarded<S: ParallelService>(service: &S, op: &Bytes, panicked: &Panicked) -> Bytes {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| service.execute(op))) {
        Ok(reply) => reply,
        Err(payload) => {
            let mut first = panicked.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert(payload);
            Bytes::new()
        }
    }
}

fn rethrow(panicked: Panicked) {
    if let Some(payload) = panicked.into_inner().unwrap_or_else(|e| e.into_inner()) {
        std::panic::resume_unwind(payload);
    }
}

fn collect(replies: Vec<OnceLock<Bytes>>) -> Vec<Bytes> {
    replies
        .into_iter()
        .map(|r| r.into_inner().expect("every task ran"))
        .collect()
}

/// The dependency graph of a batch: for each task, how many earlier conflicting tasks it
/// still waits for, and which later tasks wait for it.
struct Graph {
    waiting: Vec<AtomicU32>,
    dependents: Vec<Vec<u32>>,
}

/// A class no service uses: every task reads it and a task that conflicts with all writes it.
const EVERYTHING: Class = u64::MAX;

fn build_graph(tasks: &[Task]) -> Graph {
    let n = tasks.len();
    let mut deps: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut last_writer: HashMap<Class, u32> = HashMap::new();
    let mut readers: HashMap<Class, Vec<u32>> = HashMap::new();
    for (i, task) in tasks.iter().enumerate() {
        let i = i as u32;
        let a = &task.access;
        let add = |d: u32, deps: &mut Vec<Vec<u32>>| {
            let mine = &mut deps[i as usize];
            if d != i && !mine.contains(&d) {
                mine.push(d);
            }
        };
        let (reads, writes): (Vec<Class>, Vec<Class>) = if a.all {
            (Vec::new(), vec![EVERYTHING])
        } else {
            let mut reads = a.reads.clone();
            reads.push(EVERYTHING);
            (reads, a.writes.clone())
        };
        for c in &reads {
            if let Some(&w) = last_writer.get(c) {
                add(w, &mut deps);
            }
        }
        for c in &writes {
            if let Some(&w) = last_writer.get(c) {
                add(w, &mut deps);
            }
            if let Some(rs) = readers.get(c) {
                for &r in rs {
                    add(r, &mut deps);
                }
            }
        }
        for c in &writes {
            last_writer.insert(*c, i);
            readers.remove(c);
        }
        for c in reads {
            readers.entry(c).or_default().push(i);
        }
    }
    let mut dependents: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            dependents[d as usize].push(i as u32);
        }
    }
    Graph {
        waiting: deps
            .iter()
            .map(|d| AtomicU32::new(d.len() as u32))
            .collect(),
        dependents,
    }
}

/// Executes `tasks` on this thread, each time picking a ready task at random (the `k`-th pick
/// drawn with the executor's splitmix64 step, [`tagma_exec::request_seed`], from `seed` and the
/// batch's size): a linear extension of the dependency graph.
fn run_shuffled<S: ParallelService>(service: &S, tasks: &[Task], seed: u64) -> Vec<Bytes> {
    let graph = build_graph(tasks);
    let seed = seed ^ tasks.len() as u64;
    let mut picks = 0usize;
    let mut next = || {
        picks += 1;
        tagma_exec::request_seed(seed, picks)
    };
    let mut ready: Vec<u32> = (0..tasks.len() as u32)
        .filter(|i| graph.waiting[*i as usize].load(Ordering::Relaxed) == 0)
        .collect();
    let mut replies: Vec<Option<Bytes>> = vec![None; tasks.len()];
    while !ready.is_empty() {
        let pick = (next() % ready.len() as u64) as usize;
        let i = ready.swap_remove(pick) as usize;
        replies[i] = Some(service.execute(&tasks[i].op));
        for &d in &graph.dependents[i] {
            if graph.waiting[d as usize].fetch_sub(1, Ordering::Relaxed) == 1 {
                ready.push(d);
            }
        }
    }
    replies
        .into_iter()
        .map(|r| r.expect("a dependency graph has no cycle: every task ran"))
        .collect()
}

/// Tasks freed at once below which a worker keeps them all instead of handing some out.
const HANDOFF_MIN: usize = 4;
/// Polls of the pool before a worker with nothing to do sleeps (a few tens of µs).
const SPINS: u32 = 20_000;

enum Work {
    Tasks(Vec<u32>),
    Stop,
}

fn run_graph<S: ParallelService>(service: &S, tasks: &[Task], threads: usize) -> Vec<Bytes> {
    let graph = build_graph(tasks);
    let replies: Vec<OnceLock<Bytes>> = (0..tasks.len()).map(|_| OnceLock::new()).collect();
    let panicked = Panicked::default();
    let remaining = AtomicUsize::new(tasks.len());
    let (tx, rx): (Sender<Work>, Receiver<Work>) = unbounded();
    // Tasks ready from the start are taken in shrinking chunks (guided self-scheduling: a
    // share of what is left each time), so that short independent tasks do not pay a
    // hand-off each and no worker is left with a long last chunk while the others idle.
    let ready: Vec<u32> = (0..tasks.len() as u32)
        .filter(|i| graph.waiting[*i as usize].load(Ordering::Relaxed) == 0)
        .collect();
    let cursor = AtomicUsize::new(0);
    let take_ready = || -> Option<Vec<u32>> {
        loop {
            let at = cursor.load(Ordering::Acquire);
            if at >= ready.len() {
                return None;
            }
            let n = ((ready.len() - at) / (2 * threads)).max(1);
            if cursor
                .compare_exchange(at, at + n, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some(ready[at..at + n].to_vec());
            }
        }
    };
    let worker = || {
        let (rx, tx) = (rx.clone(), tx.clone());
        let (graph, replies, remaining, take_ready, panicked) =
            (&graph, &replies, &remaining, &take_ready, &panicked);
        move || {
            // Waiting for work spins a little before sleeping: in a chain of short tasks the
            // next one is usually a few microseconds away, and a sleeping worker takes far
            // longer to wake.
            let next = || {
                if let Some(tasks) = take_ready() {
                    return Some(tasks);
                }
                for _ in 0..SPINS {
                    match rx.try_recv() {
                        Ok(Work::Tasks(tasks)) => return Some(tasks),
                        Ok(Work::Stop) => return None,
                        Err(_) => std::hint::spin_loop(),
                    }
                }
                match rx.recv() {
                    Ok(Work::Tasks(tasks)) => Some(tasks),
                    _ => None,
                }
            };
            while let Some(mut batch) = next() {
                // Runs `batch`, then keeps running the first task each step made ready (a
                // chain stays on this worker), handing the others to the pool.
                while !batch.is_empty() {
                    let mut freed: Vec<u32> = Vec::new();
                    for &i in &batch {
                        let op = &tasks[i as usize].op;
                        let _ = replies[i as usize].set(guarded(service, op, panicked));
                        for &d in &graph.dependents[i as usize] {
                            if graph.waiting[d as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                                freed.push(d);
                            }
                        }
                    }
                    let done = remaining.fetch_sub(batch.len(), Ordering::AcqRel) - batch.len();
                    if done == 0 {
                        for _ in 0..threads {
                            let _ = tx.send(Work::Stop);
                        }
                    }
                    batch = match freed.len() {
                        0 => Vec::new(),
                        // A few tasks freed at once stay here: waking another worker for them
                        // would cost more than it saves (mixes of short reads and writes).
                        n if n <= HANDOFF_MIN => freed,
                        _ => {
                            let keep = freed.split_off(freed.len() - 1);
                            let c = freed.len().div_ceil(threads).max(1);
                            for part in freed.chunks(c) {
                                let _ = tx.send(Work::Tasks(part.to_vec()));
                            }
                            keep
                        }
                    };
                }
            }
        }
    };
    // The calling thread is one of the workers (one thread fewer to start per batch).
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(worker());
        }
        worker()();
    });
    debug_assert_eq!(remaining.load(Ordering::Relaxed), 0, "every task ran");
    rethrow(panicked);
    collect(replies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(access: Access) -> Task {
        Task {
            op: Bytes::new(),
            group: Group::None,
            access,
        }
    }

    /// Panics on the operation `b"boom"`.
    struct Fragile;

    impl ParallelService for Fragile {
        fn execute(&self, op: &Bytes) -> Bytes {
            assert_ne!(&op[..], b"boom", "the service fails");
            op.clone()
        }
        fn classify(&self, _: &Bytes) -> Access {
            Access::all()
        }
        fn digest(&self) -> [u8; 32] {
            [0; 32]
        }
    }

    #[test]
    fn a_panicking_service_fails_the_run_instead_of_hanging_it() {
        let mut tasks: Vec<Task> = (0..40)
            .map(|i| Task {
                op: Bytes::from(vec![i as u8]),
                group: if i % 3 == 0 { Group::All } else { Group::None },
                access: if i % 3 == 0 {
                    Access::all()
                } else {
                    Access::none()
                },
            })
            .collect();
        tasks[17].op = Bytes::from_static(b"boom");
        for policy in [Policy::Barrier, Policy::Graph] {
            let scheduler = Scheduler::new(policy, 3, crate::access::Groups::default());
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                scheduler.run(&Fragile, &tasks)
            }));
            assert!(result.is_err(), "{policy:?}: the panic reaches the caller");
        }
    }

    #[test]
    fn the_graph_links_each_task_to_the_earlier_ones_it_conflicts_with() {
        let tasks = [
            task(Access::writes([1])), // 0
            task(Access::reads([1])),  // 1: after 0
            task(Access::reads([1])),  // 2: after 0
            task(Access::writes([2])), // 3: free
            task(Access::writes([1])), // 4: after 0, 1, 2
            task(Access::all()),       // 5: after every earlier one
            task(Access::none()),      // 6: after 5
        ];
        let g = build_graph(&tasks);
        let waiting: Vec<u32> = g
            .waiting
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect();
        assert_eq!(waiting, [0, 1, 1, 0, 3, 5, 1]);
        assert_eq!(g.dependents[0], [1, 2, 4, 5]);
        assert_eq!(g.dependents[5], [6]);
        assert!(g.dependents[6].is_empty());
    }
}
