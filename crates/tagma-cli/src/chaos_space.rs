//! `tagma chaos --service space`: the durability scenarios under a coordination-service
//! load, with operations waiting and leases running while the fault strikes.
//!
//! The load: half the clients put items `("item", client, k)` one after another; the others
//! take items with a blocking `in`. A put or take the client saw succeed is acknowledged;
//! one that failed while the replicas were down is in doubt (it may have happened). Before
//! the fault, some clients block in an `rd` of a wake-up tuple nobody has inserted yet, and
//! leased tuples are inserted. After recovery the wake-up tuples are inserted: every
//! blocked `rd` must be answered, once, with its tuple; the leased tuples must be gone once
//! their leases end in agreed time. At the end every item is accounted for: an acknowledged
//! put whose item was neither taken nor is still in the space is lost (beyond the takes in
//! doubt, which may have taken it unseen); an item taken twice, or taken and still there, is
//! duplicated.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tagma_cluster::digests_equal;
use tagma_space::{Field, FieldType, Pattern, SpaceClient, TypedTemplate, TypedTuple};

use crate::chaos::{ChaosOptions, Counts, Scenario, fault, launch_serving, total};

const SPACE: &str = "chaos";
/// Clients blocked in an `rd` across the fault.
const WAITERS: usize = 4;
/// Leased tuples inserted before the fault.
const LEASES: usize = 4;
const LEASE: Duration = Duration::from_secs(3);

/// What `tagma chaos --service space` found.
#[derive(Clone, Debug, Serialize)]
pub struct SpaceChaosReport {
    pub scenario: String,
    pub service: &'static str,
    pub mode: String,
    pub n: usize,
    pub f: usize,
    pub damaged_replicas: Vec<usize>,
    /// Puts and takes the clients saw succeed.
    pub acknowledged_ops: u64,
    /// Puts and takes that failed while the replicas were down (they may have happened).
    pub in_doubt_ops: u64,
    pub items_put: u64,
    pub items_taken: u64,
    pub lost_acknowledged_ops: u64,
    pub duplicated_ops: u64,
    /// Blocked `rd`s across the fault, and how many were answered with their tuple.
    pub waiters: usize,
    pub waiters_answered: usize,
    /// Leased tuples inserted before the fault, and how many were gone after their lease.
    pub leases: usize,
    pub leases_expired: usize,
    pub recovery_ms: f64,
    pub state_digests_equal: bool,
    /// corrupt-*: whether every damaged replica noticed the damage and set its state aside
    /// (`None` for the other scenarios). It then gets everything back from the others: by
    /// state transfer, or by the logged decisions alone while theirs still reach back to
    /// the first instance.
    pub damaged_state_discarded: Option<bool>,
    /// States the damaged (or lagging) replicas fetched from the others.
    pub state_transfers: u64,
}

impl SpaceChaosReport {
    pub fn passed(&self) -> bool {
        self.lost_acknowledged_ops == 0
            && self.duplicated_ops == 0
            && self.waiters_answered == self.waiters
            && self.leases_expired == self.leases
            && self.state_digests_equal
            && self.damaged_state_discarded != Some(false)
    }

    pub fn table(&self) -> String {
        format!(
            "scenario {} (coordination service, {} n={} f={}, damaged {:?})\n\
             acknowledged ops {}  in doubt {}  items put {}  taken {}\n\
             lost {}  duplicated {}\n\
             waiters answered {}/{}  leases expired {}/{}\n\
             recovery {:.0} ms  state digests equal {}  damaged state discarded {}  state transfers {}\n",
            self.scenario,
            self.mode,
            self.n,
            self.f,
            self.damaged_replicas,
            self.acknowledged_ops,
            self.in_doubt_ops,
            self.items_put,
            self.items_taken,
            self.lost_acknowledged_ops,
            self.duplicated_ops,
            self.waiters_answered,
            self.waiters,
            self.leases_expired,
            self.leases,
            self.recovery_ms,
            self.state_digests_equal,
            self.damaged_state_discarded
                .map_or_else(|| "—".to_string(), |d| d.to_string()),
            self.state_transfers,
        )
    }
}

fn item(client: usize, k: u64) -> TypedTuple {
    TypedTuple(vec![
        Field::Str("item".into()),
        Field::Int(client as i64),
        Field::Int(k as i64),
    ])
}

fn any_item() -> TypedTemplate {
    TypedTemplate(vec![
        Pattern::Is(Field::Str("item".into())),
        Pattern::AnyOf(FieldType::Int),
        Pattern::AnyOf(FieldType::Int),
    ])
}

fn tagged(tag: &str, i: usize) -> TypedTuple {
    TypedTuple(vec![Field::Str(tag.into()), Field::Int(i as i64)])
}

fn exact(t: &TypedTuple) -> TypedTemplate {
    TypedTemplate(t.0.iter().cloned().map(Pattern::Is).collect())
}

fn item_id(t: &TypedTuple) -> Option<(usize, u64)> {
    match t.0.as_slice() {
        [_, Field::Int(c), Field::Int(k)] => Some((*c as usize, *k as u64)),
        _ => None,
    }
}

/// A producer's items: those acknowledged and those in doubt.
type Puts = (BTreeSet<u64>, BTreeSet<u64>);

/// What the load's clients saw.
#[derive(Default)]
struct Seen {
    /// Per producer: the items acknowledged and those in doubt.
    put: Mutex<BTreeMap<usize, Puts>>,
    /// Every item taken, with how many times.
    taken: Mutex<BTreeMap<(usize, u64), u32>>,
    takes_in_doubt: std::sync::atomic::AtomicU64,
}

/// Runs `scenario` on a fresh cluster serving the coordination service.
pub fn run(exe: &Path, scenario: Scenario, opts: &ChaosOptions) -> Result<SpaceChaosReport> {
    if !matches!(
        scenario,
        Scenario::KillAll
            | Scenario::LaggingReplica
            | Scenario::CorruptLog
            | Scenario::CorruptCheckpoint
            | Scenario::CorruptBoth
            | Scenario::WipeDisk
    ) {
        bail!(
            "--service space runs kill-all, lagging-replica, corrupt-log, corrupt-checkpoint, \
             corrupt-both and wipe-disk; {} is for the key-value service",
            scenario.name()
        );
    }
    opts.check(scenario)?;
    if opts.clients < 2 {
        bail!("--clients must be at least 2 (putters and takers)");
    }
    let (mut cluster, n) = launch_serving(
        exe,
        opts,
        Some("space"),
        vec!["--spaces".into(), SPACE.into()],
        |_| {},
    )?;
    let ready = Duration::from_secs(30);
    let connect = || -> Result<SpaceClient> { Ok(SpaceClient::new(cluster.proxy(ready)?)) };
    let clients = (0..opts.clients)
        .map(|_| connect())
        .collect::<Result<Vec<_>>>()?;
    let waiter_clients = (0..WAITERS)
        .map(|_| connect())
        .collect::<Result<Vec<_>>>()?;
    let admin = connect()?;
    admin
        .rdp(SPACE, any_item())
        .wait()
        .context("the cluster did not order a first request")?;
    // Leased tuples, and operations that wait across the fault.
    for l in 0..LEASES {
        admin.out(SPACE, tagged("lease", l), Some(LEASE)).wait()?;
    }
    let counts: Vec<Counts> = clients.iter().map(|_| Counts::default()).collect();
    let seen = Seen::default();
    let stop = AtomicBool::new(false);
    let producers = opts.clients / 2;
    let (recovery_ms, waiters_answered) = std::thread::scope(|s| -> Result<(f64, usize)> {
        let waiting: Vec<_> = waiter_clients
            .iter()
            .enumerate()
            .map(|(w, client)| {
                s.spawn(move || {
                    client
                        .rd(SPACE, exact(&tagged("wake", w)), Duration::from_secs(600))
                        .wait()
                })
            })
            .collect();
        for (i, client) in clients.iter().enumerate() {
            let (counts, seen, stop) = (&counts[i], &seen, &stop);
            if i < producers {
                s.spawn(move || put_loop(client, i, counts, seen, stop));
            } else {
                s.spawn(move || take_loop(client, counts, seen, stop));
            }
        }
        let recovery_ms = fault(&mut cluster, scenario, opts, &counts);
        stop.store(true, Ordering::Relaxed);
        let recovery_ms = recovery_ms?;
        for w in 0..WAITERS {
            admin.out(SPACE, tagged("wake", w), None).wait()?;
        }
        let mut answered = 0;
        for (w, waiter) in waiting.into_iter().enumerate() {
            if let Ok(Ok(Some(stored))) = waiter.join()
                && stored.tuple == tagged("wake", w)
            {
                answered += 1;
            }
        }
        Ok((recovery_ms, answered))
    })?;
    // The leases ran out long ago in real time; the agreed time follows once a batch (or a
    // time-only batch) is ordered.
    std::thread::sleep(LEASE);
    let lease_template = TypedTemplate(vec![
        Pattern::Is(Field::Str("lease".into())),
        Pattern::AnyOf(FieldType::Int),
    ]);
    let left = admin.rd_all(SPACE, lease_template, 100).wait()?.len();
    let leases_expired = LEASES - left.min(LEASES);
    // Drain what is left and account for every item.
    let mut present: BTreeMap<(usize, u64), u32> = BTreeMap::new();
    loop {
        let batch = admin.rd_all(SPACE, any_item(), 1000).wait()?;
        let got = batch.len();
        for s in &batch {
            if let Some(id) = item_id(&s.tuple) {
                *present.entry(id).or_default() += 1;
            }
        }
        if got < 1000 {
            break;
        }
        // More than 1000 left: take these out of the way to read on.
        admin.in_all(SPACE, any_item(), 1000).wait()?;
    }
    let put = seen.put.lock().expect("not poisoned");
    let taken = seen.taken.lock().expect("not poisoned");
    let mut lost_candidates = 0u64;
    let mut duplicated = 0u64;
    let mut items_put = 0u64;
    for (client, (acked, doubt)) in put.iter() {
        items_put += acked.len() as u64;
        for k in acked {
            let id = (*client, *k);
            let (t, p) = (
                taken.get(&id).copied().unwrap_or(0),
                present.get(&id).copied().unwrap_or(0),
            );
            if t + p == 0 {
                lost_candidates += 1;
            }
            duplicated += u64::from((t + p).saturating_sub(1));
        }
        for k in doubt {
            let id = (*client, *k);
            let (t, p) = (
                taken.get(&id).copied().unwrap_or(0),
                present.get(&id).copied().unwrap_or(0),
            );
            duplicated += u64::from((t + p).saturating_sub(1));
        }
    }
    // An item nobody put was invented.
    for id in taken.keys().chain(present.keys()) {
        let known = put
            .get(&id.0)
            .is_some_and(|(a, d)| a.contains(&id.1) || d.contains(&id.1));
        duplicated += u64::from(!known);
    }
    let takes_in_doubt = seen.takes_in_doubt.load(Ordering::Relaxed);
    let lost = lost_candidates.saturating_sub(takes_in_doubt);
    let reader = cluster.proxy(ready)?;
    let states = cluster.converged_states(&reader, &cluster.cfg.members(), ready)?;
    let damaged: Vec<usize> = opts.damaged_replicas(scenario).collect();
    let watched = if damaged.is_empty() {
        vec![n - 1]
    } else {
        damaged.clone()
    };
    let state_transfers = watched
        .iter()
        .map(|&i| cluster.metric(i, "tagma_state_transfers_total") as u64)
        .sum();
    let damaged_state_discarded = matches!(
        scenario,
        Scenario::CorruptLog | Scenario::CorruptCheckpoint | Scenario::CorruptBoth
    )
    .then(|| {
        damaged
            .iter()
            .all(|&i| cluster.metric(i, "tagma_state_discarded") > 0.0)
    });
    Ok(SpaceChaosReport {
        scenario: scenario.name().into(),
        service: "space",
        mode: opts.mode.to_string(),
        n,
        f: opts.f,
        damaged_replicas: damaged,
        acknowledged_ops: total(&counts),
        in_doubt_ops: crate::chaos::in_doubt(&counts),
        items_put,
        items_taken: taken.values().map(|t| u64::from(*t)).sum(),
        lost_acknowledged_ops: lost,
        duplicated_ops: duplicated,
        waiters: WAITERS,
        waiters_answered,
        leases: LEASES,
        leases_expired,
        recovery_ms,
        state_digests_equal: digests_equal(&states),
        damaged_state_discarded,
        state_transfers,
    })
}

/// Puts items `("item", client, 1..)` until `stop`.
fn put_loop(client: &SpaceClient, me: usize, counts: &Counts, seen: &Seen, stop: &AtomicBool) {
    let mut k = 0;
    while !stop.load(Ordering::Relaxed) {
        k += 1;
        let ok = client.out(SPACE, item(me, k), None).wait().is_ok();
        let mut put = seen.put.lock().expect("not poisoned");
        let (acked, doubt) = put.entry(me).or_default();
        if ok {
            acked.insert(k);
            counts.acknowledged.fetch_add(1, Ordering::Relaxed);
        } else {
            doubt.insert(k);
            counts.in_doubt.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Takes items with a blocking `in` until `stop`.
fn take_loop(client: &SpaceClient, counts: &Counts, seen: &Seen, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match client
            .in_(SPACE, any_item(), Duration::from_millis(500))
            .wait()
        {
            Ok(Some(stored)) => {
                counts.acknowledged.fetch_add(1, Ordering::Relaxed);
                if let Some(id) = item_id(&stored.tuple) {
                    *seen
                        .taken
                        .lock()
                        .expect("not poisoned")
                        .entry(id)
                        .or_default() += 1;
                }
            }
            Ok(None) => {}
            Err(_) => {
                counts.in_doubt.fetch_add(1, Ordering::Relaxed);
                seen.takes_in_doubt.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
