//! `tagma chaos --scenario reconfig-tour`: a reconfiguration timeline (as in Alchieri et
//! al.: Efficient and Modular Consensus-Free Reconfiguration) on a local multi-process
//! cluster, under the chaos load (every client increments
//! its own counter; every acknowledged increment is accounted for at the end).
//!
//! The tour: a cluster of 4 (BFT; 3 in CFT) serves; a replica joins (`tagma replica
//! --join`, added by a signed view change, fetching its state by state transfer); the
//! leader is SIGKILLed (a leader change follows); it is restarted (it recovers from its disk
//! and catches up); the replica that joined is removed (it leaves and exits). Throughput is
//! sampled once a second; each event records when it started and when it had taken effect,
//! with the mean throughput of the seconds before and after.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tagma_client::Proxy;
use tagma_crypto::IdentityKey;
use tagma_wire::{ReconfigureOutcome, ReplicaId, View, ViewMember, ViewOp};

use tagma_cluster::{LocalCluster, digests_equal};

use crate::chaos::{ChaosOptions, Counts, account, in_doubt, increment_loop, total, wait_until};

/// One event of the tour.
#[derive(Clone, Debug, Serialize)]
pub struct TourEvent {
    pub what: String,
    /// Seconds since the load started, when the event was triggered and when it had taken
    /// effect (the view installed and the joiner's state fetched; the service answering
    /// again after the leader change; the restarted replica caught up).
    pub at_s: f64,
    pub done_s: f64,
    /// Mean throughput (ops/s) of up to 3 whole seconds before `at_s`, and after `done_s`.
    pub ops_s_before: f64,
    pub ops_s_after: f64,
}

/// What the tour found.
#[derive(Clone, Debug, Serialize)]
pub struct TourReport {
    pub scenario: String,
    pub mode: String,
    pub n_start: usize,
    pub acknowledged_ops: u64,
    pub in_doubt_ops: u64,
    pub lost_acknowledged_ops: u64,
    pub duplicated_ops: u64,
    pub state_digests_equal: bool,
    /// From the leader's SIGKILL until an operation completed after the new leader took
    /// over.
    pub leader_crash_to_resumed_ms: f64,
    /// `(second, ops/s)`: operations acknowledged in each second of the run.
    pub throughput: Vec<(f64, f64)>,
    pub events: Vec<TourEvent>,
    /// The view at the end: id, members, f.
    pub final_view: (u32, Vec<u32>, u32),
    /// With `--history`: the recorded history and the checker's verdict.
    pub history: Option<tagma_bench::history::HistoryOutcome>,
}

impl TourReport {
    pub fn passed(&self) -> bool {
        self.lost_acknowledged_ops == 0
            && self.duplicated_ops == 0
            && self.state_digests_equal
            && self.history.as_ref().is_none_or(|h| h.linearizable)
    }

    pub fn table(&self) -> String {
        let mut s = format!(
            "scenario {} ({} n={})\n",
            self.scenario, self.mode, self.n_start
        );
        for e in &self.events {
            s.push_str(&format!(
                "  {:>6.1} s  {:<28} took {:>6.0} ms   {:>7.0} ops/s before, {:>7.0} after\n",
                e.at_s,
                e.what,
                (e.done_s - e.at_s) * 1000.0,
                e.ops_s_before,
                e.ops_s_after
            ));
        }
        s.push_str(&format!(
            "leader_crash_to_resumed_ms {:.0}\n\
             acknowledged_ops       {}\n\
             in_doubt_ops           {}\n\
             lost_acknowledged_ops  {}\n\
             duplicated_ops         {}\n\
             state_digests_equal    {}\n\
             final view {} (members {:?}, f = {})\n\
             {}{}",
            self.leader_crash_to_resumed_ms,
            self.acknowledged_ops,
            self.in_doubt_ops,
            self.lost_acknowledged_ops,
            self.duplicated_ops,
            self.state_digests_equal,
            self.final_view.0,
            self.final_view.1,
            self.final_view.2,
            self.history.as_ref().map_or_else(String::new, |h| h.line()),
            if self.passed() { "PASSED" } else { "FAILED" }
        ));
        s
    }

    /// The throughput timeline with the events marked.
    pub fn chart(&self) -> tagma_bench::plot::Chart {
        tagma_bench::plot::Chart::throughput_timeline(
            format!(
                "Reconfiguration tour ({} n={}): throughput over time",
                self.mode, self.n_start
            ),
            self.throughput.clone(),
            self.events
                .iter()
                .map(|e| (e.at_s, e.what.clone()))
                .collect(),
        )
    }
}

/// The events as they happen: what, triggered, taken effect.
#[derive(Default)]
struct Timeline {
    events: Mutex<Vec<(String, f64, f64)>>,
}

/// Mean of the whole-second samples ending at or before `t` (up to 3), or starting at or
/// after `t` (`after`).
fn mean_around(samples: &[(f64, f64)], t: f64, after: bool) -> f64 {
    let picked: Vec<f64> = if after {
        samples
            .iter()
            .filter(|(end, _)| end - 1.0 >= t - 1e-9)
            .take(3)
            .map(|s| s.1)
            .collect()
    } else {
        let before: Vec<f64> = samples
            .iter()
            .filter(|(end, _)| *end <= t + 1e-9)
            .map(|s| s.1)
            .collect();
        before[before.len().saturating_sub(3)..].to_vec()
    };
    if picked.is_empty() {
        0.0
    } else {
        picked.iter().sum::<f64>() / picked.len() as f64
    }
}

/// Runs the tour (`opts.before` of load first, then `opts.after` between events and at the
/// end).
pub fn run(exe: &std::path::Path, opts: &ChaosOptions) -> Result<TourReport> {
    opts.check(crate::chaos::Scenario::ReconfigTour)?;
    let (mut cluster, n) = crate::chaos::launch(exe, opts)?;
    let ready = Duration::from_secs(30);
    let admin = IdentityKey::read_file(&tagma_node::cluster_dir::admin_key_path(&cluster.dir))?;
    let admin_proxy = cluster.proxy(ready)?;
    let proxies: Vec<Proxy> = (0..opts.clients)
        .map(|_| cluster.proxy(ready))
        .collect::<Result<_>>()?;
    let counts: Vec<Counts> = (0..opts.clients).map(|_| Counts::default()).collect();
    let history = (opts.history.as_deref())
        .map(|path| tagma_bench::history::HistoryRun::connect(&cluster, path))
        .transpose()?;
    let stop = AtomicBool::new(false);
    let timeline = Timeline::default();
    let samples = Mutex::new(Vec::<(f64, f64)>::new());
    let start = Instant::now();
    let tour = std::thread::scope(|s| -> Result<(f64, View)> {
        for (i, proxy) in proxies.iter().enumerate() {
            let (counts, stop) = (&counts[i], &stop);
            s.spawn(move || increment_loop(proxy, i, counts, stop));
        }
        if let Some(history) = &history {
            history.spawn(s, &stop);
        }
        let (counts_ref, stop_ref, samples_ref) = (&counts, &stop, &samples);
        s.spawn(move || {
            let mut last = 0;
            let mut second = 1u32;
            while !stop_ref.load(Ordering::Relaxed) {
                let due = start + Duration::from_secs(u64::from(second));
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                let now = total(counts_ref);
                samples_ref
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((f64::from(second), (now - last) as f64));
                last = now;
                second += 1;
            }
        });
        let result = events(
            &mut cluster,
            &admin,
            &admin_proxy,
            &counts,
            opts,
            &timeline,
            start,
        );
        std::thread::sleep(opts.after);
        stop.store(true, Ordering::Relaxed);
        result
    })?;
    let (leader_crash_to_resumed_ms, final_view) = tour;
    let history = history.map(|h| h.finish()).transpose()?;
    let reader = cluster.proxy(ready)?;
    let (lost, duplicated) = account(&reader, &counts)?;
    let members: Vec<ReplicaId> = final_view.members.iter().map(|m| m.id).collect();
    let states = cluster.converged_states(&reader, &members, ready)?;
    let samples = samples.into_inner().unwrap_or_else(|e| e.into_inner());
    let events = timeline
        .events
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|(what, at_s, done_s)| TourEvent {
            ops_s_before: mean_around(&samples, at_s, false),
            ops_s_after: mean_around(&samples, done_s, true),
            what,
            at_s,
            done_s,
        })
        .collect();
    Ok(TourReport {
        scenario: "reconfig-tour".into(),
        mode: opts.mode.to_string(),
        n_start: n,
        acknowledged_ops: total(&counts),
        in_doubt_ops: in_doubt(&counts),
        lost_acknowledged_ops: lost,
        duplicated_ops: duplicated,
        state_digests_equal: digests_equal(&states),
        leader_crash_to_resumed_ms,
        throughput: samples,
        events,
        final_view: (
            final_view.id.0,
            final_view.members.iter().map(|m| m.id.0).collect(),
            final_view.f,
        ),
        history,
    })
}

/// Orders a signed change of the installed view `view`; returns the view it installed.
fn change(admin: &IdentityKey, proxy: &Proxy, view: &View, op: ViewOp) -> Result<View> {
    let signed = tagma_core::view::sign_change(admin, view.id, vec![op]);
    match proxy.reconfigure(&signed)? {
        ReconfigureOutcome::Installed(v) => Ok(v),
        ReconfigureOutcome::Refused(reason) => bail!("the replicas refused the change: {reason}"),
    }
}

/// The tour's events, in order; returns the leader crash-to-resumed time and the final view.
fn events(
    cluster: &mut LocalCluster,
    admin: &IdentityKey,
    proxy: &Proxy,
    counts: &[Counts],
    opts: &ChaosOptions,
    timeline: &Timeline,
    start: Instant,
) -> Result<(f64, View)> {
    let ready = Duration::from_secs(30);
    let secs = || start.elapsed().as_secs_f64();
    let record = |what: String, at: f64| {
        timeline
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((what, at, secs()));
    };
    wait_until("the cluster serves requests", ready, || total(counts) > 0)?;
    std::thread::sleep(opts.before);
    let mut view = proxy.current_view(Duration::from_secs(5))?;

    // 1. A replica joins.
    let new_id = cluster
        .cfg
        .replicas
        .iter()
        .map(|r| r.id.0)
        .max()
        .unwrap_or(0)
        + 1;
    let (joiner, key_path) = cluster.prepare_joiner(ReplicaId(new_id))?;
    let key = IdentityKey::read_file(&key_path)?.public();
    cluster.start_joining(joiner)?;
    let at = secs();
    let addr = cluster.cfg.replicas[joiner].addr.to_string();
    view = change(
        admin,
        proxy,
        &view,
        ViewOp::Add(ViewMember {
            id: ReplicaId(new_id),
            addr,
            key,
        }),
    )?;
    cluster.wait_ready(joiner, ready)?;
    wait_until(
        "the joining replica fetched its state",
        Duration::from_secs(120),
        || cluster.metric(joiner, "tagma_state_transfer_ms") > 0.0,
    )?;
    record(format!("replica {new_id} joins"), at);
    std::thread::sleep(opts.after);

    // 2. The leader crashes.
    let leader = cluster.metric(1, "tagma_leader") as usize;
    let witness = (0..cluster.cfg.replicas.len())
        .find(|i| *i != leader)
        .context("a replica other than the leader")?;
    let regency = cluster.metric(witness, "tagma_regency");
    cluster.kill(leader);
    let crashed = Instant::now();
    let at = secs();
    wait_until("a new leader takes over", Duration::from_secs(60), || {
        cluster.metric(witness, "tagma_regency") > regency
    })?;
    let done = total(counts);
    wait_until("the service answers again", Duration::from_secs(60), || {
        total(counts) > done
    })?;
    let resumed_ms = crashed.elapsed().as_secs_f64() * 1000.0;
    record(format!("leader (replica {leader}) crashes"), at);
    std::thread::sleep(opts.after);

    // 3. The old leader restarts and catches up.
    let at = secs();
    cluster.start(leader)?;
    cluster.wait_ready(leader, ready)?;
    wait_until(
        "the restarted replica catches up",
        Duration::from_secs(120),
        || {
            let mine = cluster.metric(leader, "tagma_executed_instances");
            let theirs = cluster.metric(witness, "tagma_executed_instances");
            mine > 0.0 && mine + 2.0 >= theirs
        },
    )?;
    record(format!("replica {leader} restarts"), at);
    std::thread::sleep(opts.after);

    // 4. The replica that joined leaves.
    let at = secs();
    view = change(admin, proxy, &view, ViewOp::Remove(ReplicaId(new_id)))?;
    record(format!("replica {new_id} leaves"), at);
    Ok((resumed_ms, view))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_take_whole_seconds_on_each_side() {
        let samples: Vec<(f64, f64)> = (1..=10).map(|s| (s as f64, s as f64 * 10.0)).collect();
        // Seconds ending at 3, 4, 5 (before 5.5); starting at 7, 8, 9 (after 6.5).
        assert_eq!(mean_around(&samples, 5.5, false), 40.0);
        assert_eq!(mean_around(&samples, 6.5, true), 90.0);
        assert_eq!(mean_around(&samples, 0.5, false), 0.0);
        assert_eq!(mean_around(&samples, 20.0, true), 0.0);
    }
}
