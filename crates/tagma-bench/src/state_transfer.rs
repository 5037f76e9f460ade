//! `tagma bench state-transfer`: how fast a wiped replica gets a large state back.
//!
//! A local BFT cluster (n = 4, durability on) is filled with `--state-mb` MB of key-value
//! pairs (60 KiB values, written by concurrent clients through consensus), then small writes
//! carry every replica past a checkpoint of the full state. One follower is killed, its data
//! directory deleted, and it is restarted while clients keep writing: it finds itself far
//! behind, fetches a checkpoint from one replica and the log after it from the others,
//! validates the state against the others' checkpoint digests, and installs it. Reported:
//! the time from the restart until it has caught up with the others (same position and
//! state digest), and the state's size divided by that time.
//!
//! Then the whole system (the initial-state synchronisation of Bessani et al.: On the
//! Efficiency of Durable State Machine Replication): every replica is
//! killed and restarted, each recovering from its own disk and synchronising with the others
//! before ordering; and again with one replica's newest checkpoint corrupted, which it must
//! detect, set aside, and replace by state transfer from the others.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use serde::Serialize;
use tagma_client::Proxy;
use tagma_core::Mode;
use tagma_core::config::Durability;
use tagma_kv::KvOp;
use tagma_wire::ReplicaId;

use tagma_cluster::{LocalCluster, digests_equal};

/// Value size of the fill: under `limits.request_bytes_max` (64 KiB by default).
const VALUE_BYTES: usize = 60 << 10;
/// Concurrent clients filling the state.
const FILL_CLIENTS: usize = 8;
#[derive(Clone, Debug)]
pub struct TransferOptions {
    pub state_mb: u64,
    /// Instances between two checkpoints of a replica.
    pub checkpoint_period: u64,
    pub json: bool,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct TransferReport {
    pub state_mb: u64,
    pub n: usize,
    pub mode: String,
    /// Size of the state installed by the restarted replica (its checkpoint, MB).
    pub installed_state_mb: f64,
    /// Checkpoint bytes the replica fetched in chunks (MB).
    pub fetched_mb: f64,
    /// The state transfer as the replica measured it: from finding itself too far behind
    /// until the fetched state was validated, installed and durably checkpointed.
    pub transfer_ms: f64,
    /// `installed_state_mb` per second of `transfer_ms`.
    pub mb_per_s: f64,
    /// From the restart of the wiped replica (process start included) until it had caught
    /// up with the others.
    pub recovery_ms: f64,
    /// `installed_state_mb` per second of `recovery_ms`.
    pub end_to_end_mb_per_s: f64,
    /// Of which: validating and installing the fetched state (digest, replay, vouchers, and
    /// the durable checkpoint of the result), as the replica measured it.
    pub install_ms: f64,
    /// Operations the other replicas completed for clients meanwhile.
    pub ops_during_transfer: u64,
    pub fill_s: f64,
    /// Every replica killed and restarted: until all are back at their position and the
    /// service completed a request.
    pub whole_system_recovery_ms: f64,
    /// `installed_state_mb` per second of `whole_system_recovery_ms` (each replica loads its
    /// own copy; the copies load in parallel).
    pub whole_system_mb_per_s: f64,
    /// The same with one replica's newest checkpoint corrupted: until it, too, is back (by
    /// state transfer).
    pub one_corrupt_recovery_ms: f64,
    pub one_corrupt_mb_per_s: f64,
    pub state_digests_equal: bool,
}

impl TransferReport {
    pub fn table(&self) -> String {
        format!(
            "state transfer ({} n={}), {} MB of key-value state\n\
             installed_state_mb   {:.1}\n\
             fetched_mb           {:.1}\n\
             transfer_ms          {:.0}\n\
             mb_per_s             {:.1}\n\
             recovery_ms          {:.0}\n\
             end_to_end_mb_per_s  {:.1}\n\
             install_ms           {:.0}\n\
             ops_during_transfer  {}\n\
             fill_s               {:.1}\n\
             whole_system_recovery_ms  {:.0} ({:.1} MB/s)\n\
             one_corrupt_recovery_ms   {:.0} ({:.1} MB/s)\n\
             state_digests_equal  {}",
            self.mode,
            self.n,
            self.state_mb,
            self.installed_state_mb,
            self.fetched_mb,
            self.transfer_ms,
            self.mb_per_s,
            self.recovery_ms,
            self.end_to_end_mb_per_s,
            self.install_ms,
            self.ops_during_transfer,
            self.fill_s,
            self.whole_system_recovery_ms,
            self.whole_system_mb_per_s,
            self.one_corrupt_recovery_ms,
            self.one_corrupt_mb_per_s,
            self.state_digests_equal
        )
    }
}

fn fill_value(i: u64) -> Bytes {
    // Distinct per key, cheap to make; not compressible by accident of repetition only.
    let mut v = vec![0u8; VALUE_BYTES];
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in v.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    Bytes::from(v)
}

fn put(proxy: &Proxy, key: String, value: Bytes) -> Result<()> {
    proxy
        .invoke_ordered(
            KvOp::Put {
                key: Bytes::from(key),
                value,
            }
            .encode(),
        )
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("{e}"))
}

pub fn run(exe: &Path, opts: &TransferOptions) -> Result<TransferReport> {
    if opts.state_mb == 0 {
        bail!("--state-mb must be at least 1");
    }
    let n = 4;
    let mut cluster = LocalCluster::launch(exe, n, Mode::Bft, |cfg| {
        cfg.storage.durability = Durability::Fsync;
        cfg.storage.checkpoint_period = opts.checkpoint_period;
        // Segments small against the state, so the log the checkpoints cover is really
        // released: the wiped replica cannot simply replay the others' logs from the start.
        cfg.storage.log_segment_bytes = (opts.state_mb << 17).clamp(1 << 20, 8 << 20);
        cfg.timeouts.request_timeout_ms = 2_000;
        // Few decisions in memory, so the wiped replica cannot be brought back by decision
        // forwarding alone when the state holds fewer instances than the default keeps.
        cfg.limits.decisions_kept = 16;
    })?;
    let ready = Duration::from_secs(60);
    let proxies: Vec<Proxy> = (0..FILL_CLIENTS)
        .map(|_| cluster.proxy(ready))
        .collect::<Result<_>>()?;
    let entries = (opts.state_mb << 20).div_ceil(VALUE_BYTES as u64);
    let bar = crate::report::fill_bar(entries, opts.json);
    let filled = Instant::now();
    let next = AtomicU64::new(0);
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = proxies
            .iter()
            .map(|proxy| {
                let (next, bar) = (&next, &bar);
                s.spawn(move || -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= entries {
                            return Ok(());
                        }
                        put(proxy, format!("fill/{i:08}"), fill_value(i))
                            .with_context(|| format!("filling entry {i}"))?;
                        bar.inc(1);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("fill thread")?;
        }
        Ok(())
    })?;
    let fill_s = filled.elapsed().as_secs_f64();
    bar.finish_and_clear();
    // Small writes until every replica has checkpointed twice after the fill (the log
    // before the previous checkpoint is released).
    let checkpoints = |c: &LocalCluster| -> Vec<f64> {
        (0..n)
            .map(|i| c.metric(i, "tagma_checkpoints_total"))
            .collect()
    };
    let before = checkpoints(&cluster);
    let small = &proxies[0];
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut k = 0u64;
    while checkpoints(&cluster)
        .iter()
        .zip(&before)
        .any(|(now, then)| *now < then + 2.0)
    {
        if Instant::now() > deadline {
            bail!("the replicas did not checkpoint after the fill");
        }
        for _ in 0..50 {
            put(small, format!("tick/{}", k % 64), Bytes::from_static(b"t"))?;
            k += 1;
        }
    }
    if !opts.json {
        eprintln!(
            "filled {} MB in {fill_s:.1} s; every replica checkpointed it; wiping replica {} and restarting it",
            opts.state_mb,
            n - 1
        );
    }
    // Wipe a follower and bring it back while clients keep writing.
    let wiped = n - 1;
    cluster.kill(wiped);
    let dir =
        tagma_node::cluster_dir::data_dir(&cluster.dir, &cluster.cfg, ReplicaId(wiped as u32));
    std::fs::remove_dir_all(&dir).with_context(|| format!("wiping {}", dir.display()))?;
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let probe = cluster.proxy(ready)?;
    let recovery_ms = std::thread::scope(|s| -> Result<f64> {
        for (c, proxy) in proxies.iter().enumerate().skip(1).take(4) {
            let (stop, ops) = (&stop, &ops);
            s.spawn(move || {
                let mut j = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if put(
                        proxy,
                        format!("live/{c}/{}", j % 32),
                        Bytes::from_static(b"v"),
                    )
                    .is_ok()
                    {
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                    j += 1;
                }
            });
        }
        let restarted = Instant::now();
        let result = (|| -> Result<f64> {
            cluster.start(wiped)?;
            let deadline = restarted + Duration::from_secs(600);
            // Positions from the metrics endpoints: a state query would make every replica
            // digest its whole state, again and again.
            loop {
                let positions = positions(&cluster);
                let others_min = positions
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != wiped)
                    .map(|(_, p)| *p)
                    .min()
                    .unwrap_or(0);
                if positions[wiped] > 0 && positions[wiped] + 2 >= others_min {
                    return Ok(restarted.elapsed().as_secs_f64() * 1000.0);
                }
                if Instant::now() > deadline {
                    bail!(
                        "the wiped replica did not catch up within 600 s: positions {positions:?}"
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })();
        stop.store(true, Ordering::Relaxed);
        result
    })?;
    let states = cluster.converged_states(&probe, &cluster.cfg.members(), ready)?;
    let installed = states
        .iter()
        .find(|s| s.replica.0 as usize == wiped)
        .map(|s| s.executed_instances)
        .unwrap_or(0);
    let transfers = cluster.metric(wiped, "tagma_state_transfers_total");
    if transfers < 1.0 {
        bail!(
            "the wiped replica caught up without state transfer (at instance {installed}): raise --state-mb"
        );
    }
    let fetched_mb = cluster.metric(wiped, "tagma_state_bytes_fetched_total") / 1e6;
    let install_ms = cluster.metric(wiped, "tagma_state_install_ms");
    let transfer_ms = cluster.metric(wiped, "tagma_state_transfer_ms");
    let ckp_dir = dir.join("checkpoints");
    let installed_state_mb = std::fs::read_dir(&ckp_dir)
        .with_context(|| format!("reading {}", ckp_dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "ckp"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .max()
        .unwrap_or(0) as f64
        / 1e6;
    let whole_system_recovery_ms = restart_all(&mut cluster, &probe, None)?;
    let corrupt = tagma_node::cluster_dir::data_dir(&cluster.dir, &cluster.cfg, ReplicaId(1));
    let one_corrupt_recovery_ms = restart_all(&mut cluster, &probe, Some(&corrupt))?;
    let one_corrupt_transfers = cluster.metric(1, "tagma_state_transfers_total");
    if one_corrupt_transfers < 1.0 {
        bail!("the replica with a corrupt checkpoint came back without state transfer");
    }
    let states = cluster.converged_states(&probe, &cluster.cfg.members(), ready)?;
    Ok(TransferReport {
        state_mb: opts.state_mb,
        n,
        mode: Mode::Bft.to_string(),
        installed_state_mb,
        fetched_mb,
        transfer_ms,
        mb_per_s: installed_state_mb / (transfer_ms.max(1.0) / 1000.0),
        recovery_ms,
        end_to_end_mb_per_s: installed_state_mb / (recovery_ms / 1000.0),
        install_ms,
        ops_during_transfer: ops.load(Ordering::Relaxed),
        fill_s,
        whole_system_recovery_ms,
        whole_system_mb_per_s: installed_state_mb / (whole_system_recovery_ms / 1000.0),
        one_corrupt_recovery_ms,
        one_corrupt_mb_per_s: installed_state_mb / (one_corrupt_recovery_ms / 1000.0),
        state_digests_equal: digests_equal(&states),
    })
}

/// Kills every replica (after corrupting the newest checkpoint under `corrupt`, if given),
/// restarts them all, and returns the time until every replica is back at least at the
/// position they had and the service completed a request.
fn restart_all(cluster: &mut LocalCluster, probe: &Proxy, corrupt: Option<&Path>) -> Result<f64> {
    let ready = Duration::from_secs(120);
    let before = cluster.converged_states(probe, &cluster.cfg.members(), ready)?;
    let position = before
        .iter()
        .map(|s| s.executed_instances)
        .max()
        .unwrap_or(0);
    cluster.stop_all();
    if let Some(dir) = corrupt {
        tagma_cluster::disk::corrupt_checkpoint(&dir.join("checkpoints"))?;
    }
    let restarted = Instant::now();
    cluster.start_all()?;
    loop {
        if positions(cluster).iter().all(|p| *p >= position) {
            break;
        }
        if restarted.elapsed() > Duration::from_secs(600) {
            bail!("the replicas did not all recover within 600 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    put(probe, "after-restart".into(), Bytes::from_static(b"ok"))?;
    Ok(restarted.elapsed().as_secs_f64() * 1000.0)
}

/// Every replica's executed position, from its metrics (0 while it does not answer).
pub(crate) fn positions(cluster: &LocalCluster) -> Vec<u64> {
    (0..cluster.cfg.n())
        .map(|i| cluster.metric(i, "tagma_executed_instances") as u64)
        .collect()
}
