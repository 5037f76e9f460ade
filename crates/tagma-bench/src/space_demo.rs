//! `tagma demo --service space`: a temporary local cluster serving the coordination service,
//! and its recipes run under concurrency while one replica is killed: many clients contending
//! for one lock, elections whose leaders die, a barrier, a work queue drained by many
//! workers, and members whose leases run out. Every result is checked: no item taken twice
//! or lost, never two lock holders or two leaders at once, every barrier round complete,
//! every dead member's tuple gone, and equal state digests on the live replicas at the end.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use tagma_cluster::{LaunchOptions, LocalCluster, digests_equal};
use tagma_core::Mode;
use tagma_space::recipes::{barrier::Barrier, election::Election, lock::Lock, queue::WorkQueue};
use tagma_space::{Field, Pattern, SpaceClient, TypedTemplate, TypedTuple};
use tagma_wire::ReplicaId;

/// What `tagma demo --service space` runs.
#[derive(Clone, Debug)]
pub struct SpaceDemoOptions {
    /// Number of replicas [default: 4 in bft mode, 3 in cft mode].
    pub replicas: Option<usize>,
    pub mode: Mode,
    /// Clients contending for the lock.
    pub lock_clients: usize,
    /// Acquisitions per lock client.
    pub lock_rounds: usize,
    /// Items put in the work queue.
    pub items: usize,
    /// Workers draining it.
    pub workers: usize,
    /// Elections, each ended by its leader's death.
    pub elections: usize,
    /// Parties of the barrier, and its rounds.
    pub barrier_parties: usize,
    pub barrier_rounds: usize,
    /// Kill one replica (the leader) while the work queue drains.
    pub kill_replica: bool,
    pub json: bool,
    pub keep: bool,
}

impl Default for SpaceDemoOptions {
    fn default() -> Self {
        SpaceDemoOptions {
            replicas: None,
            mode: Mode::Bft,
            lock_clients: 50,
            lock_rounds: 2,
            items: 10_000,
            workers: 20,
            elections: 3,
            barrier_parties: 8,
            barrier_rounds: 5,
            kill_replica: true,
            json: false,
            keep: false,
        }
    }
}

/// The run's counts (see the module docs for what each must be).
#[derive(Default)]
struct Counts {
    items_put: AtomicU64,
    items_taken: AtomicU64,
    items_taken_twice: AtomicU64,
    lock_acquisitions: AtomicU64,
    lock_violations: AtomicU64,
    elections: AtomicU64,
    election_violations: AtomicU64,
    barrier_rounds_ok: AtomicU64,
    lease_expiries: AtomicU64,
}

const SPACE: &str = "demo";
const READY: Duration = Duration::from_secs(30);
const LEASE: Duration = Duration::from_millis(1500);

/// Runs the demo with the `tagma` binary `exe` for the replicas; fails if a check fails.
pub fn run(exe: &std::path::Path, opts: &SpaceDemoOptions) -> Result<()> {
    if opts.lock_clients == 0 || opts.workers == 0 || opts.barrier_parties == 0 {
        bail!("--clients, --workers and the barrier's parties must each be at least 1");
    }
    let default_replicas = if opts.mode == Mode::Cft { 3 } else { 4 };
    let launch = LaunchOptions {
        replicas: opts.replicas.unwrap_or(default_replicas),
        mode: opts.mode,
        f: None,
        service: Some("space".into()),
        replica_args: vec![
            "--spaces".into(),
            SPACE.into(),
            "--exec-threads".into(),
            "2".into(),
        ],
        unreplicated: false,
    };
    let mut cluster = LocalCluster::launch_with(exe, &launch, |_| {})?;
    let say = |s: &str| {
        if !opts.json {
            eprintln!("{s}");
        }
    };
    say(&format!(
        "started {} replicas ({} mode, f = {}) serving the coordination service in {}",
        cluster.cfg.n(),
        cluster.cfg.mode,
        cluster.cfg.f,
        cluster.dir.display()
    ));
    let counts = Counts::default();
    let started = Instant::now();
    let client =
        |c: &LocalCluster| -> Result<SpaceClient> { Ok(SpaceClient::new(c.proxy(READY)?)) };
    let admin = client(&cluster)?;
    admin
        .rdp(SPACE, template([Pattern::Any]))
        .wait()
        .context("the cluster did not order a first request")?;

    say(&format!("lock: {} clients contend", opts.lock_clients));
    lock_phase(&cluster, opts, &counts, &client)?;
    say(&format!("elections: {}, each leader dies", opts.elections));
    election_phase(&cluster, opts, &counts, &client)?;
    say(&format!(
        "barrier: {} parties, {} rounds",
        opts.barrier_parties, opts.barrier_rounds
    ));
    barrier_phase(&cluster, opts, &counts, &client)?;
    say(&format!(
        "work queue: {} items, {} workers{}",
        opts.items,
        opts.workers,
        if opts.kill_replica {
            ", the leader replica killed meanwhile"
        } else {
            ""
        }
    ));
    let killed = queue_phase(&mut cluster, opts, &counts, &client)?;
    say("members: leased tuples of clients that die");
    members_phase(&cluster, &counts, &client)?;

    let live: Vec<ReplicaId> = (0..cluster.cfg.n())
        .filter(|i| Some(*i) != killed)
        .map(|i| ReplicaId(i as u32))
        .collect();
    let states = cluster.converged_states(admin.proxy(), &live, Duration::from_secs(30))?;
    let equal = states.len() == live.len() && digests_equal(&states);
    let elapsed = started.elapsed().as_secs_f64();
    // Operations answered: the replies the service gave (a deferred one when it came).
    let ops = live
        .iter()
        .map(|r| cluster.metric(r.0 as usize, "tagma_executed_requests_total") as u64)
        .max()
        .unwrap_or(0);
    cluster.stop_all();
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (put, taken) = (get(&counts.items_put), get(&counts.items_taken));
    let lost = put.saturating_sub(taken);
    let report = serde_json::json!({
        "service": "space",
        "replicas": cluster.cfg.n(),
        "mode": cluster.cfg.mode.to_string(),
        "f": cluster.cfg.f,
        "duration_s": elapsed,
        "ops": ops,
        "items_put": put,
        "items_taken": taken,
        "items_taken_twice": get(&counts.items_taken_twice),
        "items_lost": lost,
        "lock_clients": opts.lock_clients,
        "lock_acquisitions": get(&counts.lock_acquisitions),
        "lock_violations": get(&counts.lock_violations),
        "elections": get(&counts.elections),
        "election_violations": get(&counts.election_violations),
        "barrier_rounds_ok": get(&counts.barrier_rounds_ok),
        "lease_expiries": get(&counts.lease_expiries),
        "replica_killed": killed,
        "state_digests_equal": equal,
    });
    if opts.json {
        println!("{report}");
    } else {
        println!(
            "{} operations in {elapsed:.1} s; items put {put}, taken {taken}, taken twice {}, lost {lost}; \
             lock: {} acquisitions by {} clients, {} violations; elections {} ({} violations); \
             barrier rounds ok {}; lease expiries {}; replica killed: {}; state digests equal: {equal}",
            ops,
            get(&counts.items_taken_twice),
            get(&counts.lock_acquisitions),
            opts.lock_clients,
            get(&counts.lock_violations),
            get(&counts.elections),
            get(&counts.election_violations),
            get(&counts.barrier_rounds_ok),
            get(&counts.lease_expiries),
            killed.map_or("none".into(), |k| k.to_string()),
        );
    }
    if opts.keep {
        let kept = cluster.dir.clone();
        std::mem::forget(cluster);
        eprintln!("cluster directory kept at {}", kept.display());
    }
    let bad = get(&counts.items_taken_twice)
        + lost
        + get(&counts.lock_violations)
        + get(&counts.election_violations);
    if bad > 0 || !equal || get(&counts.barrier_rounds_ok) != opts.barrier_rounds as u64 {
        bail!("the run did not check out (see the report)");
    }
    Ok(())
}

fn template(patterns: impl IntoIterator<Item = Pattern>) -> TypedTemplate {
    TypedTemplate(patterns.into_iter().collect())
}

fn text(s: &str) -> Field {
    Field::Str(s.to_owned())
}

type MakeClient<'a> = dyn Fn(&LocalCluster) -> Result<SpaceClient> + Sync + 'a;

/// Every lock client acquires the lock `lock_rounds` times; a shared count of holders must
/// never exceed one, and fencing revisions must grow with every acquisition.
fn lock_phase(
    c: &LocalCluster,
    opts: &SpaceDemoOptions,
    counts: &Counts,
    client: &MakeClient,
) -> Result<()> {
    let clients = (0..opts.lock_clients)
        .map(|_| client(c))
        .collect::<Result<Vec<_>>>()?;
    let holders = AtomicI64::new(0);
    let last_revision = Mutex::new(0u64);
    std::thread::scope(|s| {
        let workers: Vec<_> = clients
            .iter()
            .map(|client| {
                let (holders, last_revision) = (&holders, &last_revision);
                s.spawn(move || -> Result<()> {
                    let lock = Lock::new(client, SPACE, "mutex", Duration::from_secs(30));
                    for _ in 0..opts.lock_rounds {
                        let held = lock
                            .acquire(Duration::from_secs(300))?
                            .context("the lock was not acquired in 300 s")?;
                        counts.lock_acquisitions.fetch_add(1, Ordering::Relaxed);
                        if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                            counts.lock_violations.fetch_add(1, Ordering::Relaxed);
                        }
                        {
                            let mut last = last_revision.lock().expect("not poisoned");
                            if held.revision <= *last {
                                counts.lock_violations.fetch_add(1, Ordering::Relaxed);
                            }
                            *last = held.revision;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                        holders.fetch_sub(1, Ordering::SeqCst);
                        lock.release(held)?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("lock client panicked"))
    })
}

/// Candidates campaign; each winner leads for a while and dies without resigning, and the
/// next winner takes over once its lease ends. Terms must grow, and no two lead at once.
fn election_phase(
    c: &LocalCluster,
    opts: &SpaceDemoOptions,
    counts: &Counts,
    client: &MakeClient,
) -> Result<()> {
    let candidates = (0..opts.elections + 2)
        .map(|_| client(c))
        .collect::<Result<Vec<_>>>()?;
    let leading = AtomicI64::new(0);
    let last_term = Mutex::new(0u64);
    let won = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let runs: Vec<_> = candidates
            .iter()
            .map(|client| {
                let (leading, last_term, won, done) = (&leading, &last_term, &won, &done);
                s.spawn(move || -> Result<()> {
                    let election = Election::new(client, SPACE, "primary", LEASE);
                    while !done.load(Ordering::SeqCst) {
                        let Some(term) = election.campaign(Duration::from_secs(5))? else {
                            continue;
                        };
                        if leading.fetch_add(1, Ordering::SeqCst) != 0 {
                            counts.election_violations.fetch_add(1, Ordering::Relaxed);
                        }
                        {
                            let mut last = last_term.lock().expect("not poisoned");
                            if term.revision <= *last {
                                counts.election_violations.fetch_add(1, Ordering::Relaxed);
                            }
                            *last = term.revision;
                        }
                        // Lead for a while, renewing the lease.
                        for _ in 0..3 {
                            std::thread::sleep(LEASE / 4);
                            if !election.heartbeat()? {
                                counts.election_violations.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // Die: stop renewing, never resign. The lease ends in agreed time.
                        leading.fetch_sub(1, Ordering::SeqCst);
                        counts.elections.fetch_add(1, Ordering::Relaxed);
                        counts.lease_expiries.fetch_add(1, Ordering::Relaxed);
                        if won.fetch_add(1, Ordering::SeqCst) + 1 >= opts.elections as u64 {
                            done.store(true, Ordering::SeqCst);
                        }
                        return Ok(());
                    }
                    Ok(())
                })
            })
            .collect();
        runs.into_iter()
            .try_for_each(|r| r.join().expect("candidate panicked"))
    })
}

/// The barrier's parties meet `barrier_rounds` times.
fn barrier_phase(
    c: &LocalCluster,
    opts: &SpaceDemoOptions,
    counts: &Counts,
    client: &MakeClient,
) -> Result<()> {
    let parties = (0..opts.barrier_parties)
        .map(|_| client(c))
        .collect::<Result<Vec<_>>>()?;
    let rounds_ok = std::thread::scope(|s| {
        let runs: Vec<_> = parties
            .iter()
            .map(|client| {
                s.spawn(move || -> Result<Vec<bool>> {
                    let barrier = Barrier::new(
                        client,
                        SPACE,
                        "meet",
                        opts.barrier_parties as u32,
                        Duration::from_secs(120),
                    );
                    let mut ok = Vec::new();
                    for round in 0..opts.barrier_rounds {
                        ok.push(barrier.wait(round as i64, Duration::from_secs(60))?);
                    }
                    Ok(ok)
                })
            })
            .collect();
        let mut all = Vec::new();
        for r in runs {
            all.push(r.join().expect("party panicked")?);
        }
        Ok::<_, anyhow::Error>(all)
    })?;
    let ok = (0..opts.barrier_rounds)
        .filter(|round| rounds_ok.iter().all(|party| party[*round]))
        .count();
    counts.barrier_rounds_ok.store(ok as u64, Ordering::Relaxed);
    Ok(())
}

/// Producers put `items` items while `workers` drain the queue; the leader replica is killed
/// midway. Returns the killed replica.
fn queue_phase(
    c: &mut LocalCluster,
    opts: &SpaceDemoOptions,
    counts: &Counts,
    client: &MakeClient,
) -> Result<Option<usize>> {
    const PRODUCERS: usize = 4;
    let producers = (0..PRODUCERS)
        .map(|_| client(c))
        .collect::<Result<Vec<_>>>()?;
    let workers = (0..opts.workers)
        .map(|_| client(c))
        .collect::<Result<Vec<_>>>()?;
    let seen = Mutex::new(BTreeSet::new());
    let producing = AtomicBool::new(true);
    let put = AtomicU64::new(0);
    let mut killed = None;
    let leader = c.current_leader();
    std::thread::scope(|s| -> Result<()> {
        let makers: Vec<_> = producers
            .iter()
            .enumerate()
            .map(|(p, client)| {
                let put = &put;
                s.spawn(move || -> Result<()> {
                    let queue = WorkQueue::new(client, SPACE, "work");
                    for i in (p..opts.items).step_by(PRODUCERS) {
                        queue.put(Bytes::from((i as u64).to_le_bytes().to_vec()))?;
                        put.fetch_add(1, Ordering::SeqCst);
                        counts.items_put.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        let takers: Vec<_> = workers
            .iter()
            .map(|client| {
                let (seen, producing) = (&seen, &producing);
                s.spawn(move || -> Result<()> {
                    let queue = WorkQueue::new(client, SPACE, "work");
                    loop {
                        let item = queue.take(Duration::from_secs(2))?;
                        let Some(item) = item else {
                            if producing.load(Ordering::SeqCst) {
                                continue;
                            }
                            return Ok(());
                        };
                        let id = u64::from_le_bytes(
                            item.payload[..8].try_into().context("an item of 8 bytes")?,
                        );
                        counts.items_taken.fetch_add(1, Ordering::Relaxed);
                        if !seen.lock().expect("not poisoned").insert(id) {
                            counts.items_taken_twice.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        // Kill the leader replica once a third of the items are in.
        while opts.kill_replica && killed.is_none() {
            if put.load(Ordering::SeqCst) as usize >= opts.items / 3 {
                c.kill(leader);
                killed = Some(leader);
            }
            std::thread::sleep(Duration::from_millis(5));
            if makers.iter().all(|m| m.is_finished()) {
                break;
            }
        }
        for m in makers {
            m.join().expect("producer panicked")?;
        }
        producing.store(false, Ordering::SeqCst);
        for t in takers {
            t.join().expect("worker panicked")?;
        }
        Ok(())
    })?;
    Ok(killed)
}

/// Members join with leased tuples and die; their tuples must be gone once the leases end.
fn members_phase(c: &LocalCluster, counts: &Counts, client: &MakeClient) -> Result<()> {
    const MEMBERS: i64 = 5;
    for m in 0..MEMBERS {
        let member = client(c)?;
        member
            .out(
                SPACE,
                TypedTuple(vec![text("member"), Field::Int(m)]),
                Some(LEASE),
            )
            .wait()?;
    }
    let observer = client(c)?;
    let members = template([Pattern::Is(text("member")), Pattern::Any]);
    let before = observer.rd_all(SPACE, members.clone(), 100).wait()?.len();
    std::thread::sleep(LEASE + Duration::from_millis(700));
    let after = observer.rd_all(SPACE, members, 100).wait()?.len();
    if before as i64 != MEMBERS || after != 0 {
        bail!(
            "{before} members joined, {after} left after their leases ended (expected {MEMBERS} and 0)"
        );
    }
    counts
        .lease_expiries
        .fetch_add(MEMBERS as u64, Ordering::Relaxed);
    Ok(())
}
