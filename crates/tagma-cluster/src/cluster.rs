//! A local cluster of replica *processes* (`tagma replica`), used by `tagma demo`,
//! `tagma chaos`, `tagma bench` and the multi-process tests.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tagma_client::{ClientOptions, Proxy};
use tagma_core::ValidConfig;
use tagma_crypto::IdentityKey;
use tagma_node::cluster_dir::{self, DEFAULT_CLIENT_PRINCIPAL};
use tagma_wire::{Digest, ReplicaId, StateInfo};

use crate::init::{InitOptions, init_cluster};

/// How to start a local cluster's processes (see [`LocalCluster::launch_with`]).
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    pub replicas: usize,
    pub mode: tagma_core::Mode,
    /// Faults tolerated [default: the largest `replicas` allows, at least 1]; `Some(0)` with
    /// one replica is the unreplicated baseline's configuration.
    pub f: Option<u32>,
    /// `--service` of every replica process (`None`: the replica's default, kv).
    pub service: Option<String>,
    /// More arguments for every replica process (e.g. the execution threads and policy).
    pub replica_args: Vec<String>,
    /// Run `tagma unreplicated` (no consensus) instead of `tagma replica`.
    pub unreplicated: bool,
}

/// Replica processes started from one cluster directory. Dropping it kills them.
pub struct LocalCluster {
    pub dir: PathBuf,
    pub cfg: ValidConfig,
    /// `--service` passed to replica processes started from now on (`None`: their default).
    pub service: Option<String>,
    /// More arguments passed to replica processes started from now on.
    pub replica_args: Vec<String>,
    /// Start `tagma unreplicated` servers instead of replicas (set before starting).
    pub unreplicated: bool,
    /// The network namespace each replica runs in (`ip netns exec`), by index; empty: this
    /// host's.
    pub netns: Vec<String>,
    exe: PathBuf,
    /// Replicas listed in tagma.toml (the first ones of `cfg.replicas`; joiners follow).
    listed: usize,
    children: Vec<Option<Child>>,
    _tmp: Option<tempfile::TempDir>,
}

impl LocalCluster {
    /// Initialises a cluster in `dir` (a fresh temporary directory if `None`) with free ports
    /// on 127.0.0.1. `exe` is the `tagma` binary that runs the replicas.
    pub fn create(
        exe: &Path,
        replicas: usize,
        mode: tagma_core::Mode,
        dir: Option<PathBuf>,
    ) -> Result<Self> {
        Self::create_with_f(exe, replicas, mode, None, dir)
    }

    /// [`LocalCluster::create`] tolerating `f` faults (`None`: the most `replicas` allow,
    /// at least 1).
    pub fn create_with_f(
        exe: &Path,
        replicas: usize,
        mode: tagma_core::Mode,
        f: Option<u32>,
        dir: Option<PathBuf>,
    ) -> Result<Self> {
        let (tmp, dir) = match dir {
            Some(d) => (None, d),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("tagma-cluster-")
                    .tempdir()?;
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        let opts = InitOptions {
            replicas,
            mode,
            f,
            base_port: None,
            host: "127.0.0.1".into(),
            force: true,
        };
        let cfg = init_cluster(&dir, &opts)?;
        std::fs::create_dir_all(dir.join("logs"))?;
        let children = (0..replicas).map(|_| None).collect();
        Ok(LocalCluster {
            dir,
            cfg,
            service: None,
            replica_args: Vec::new(),
            unreplicated: false,
            netns: Vec::new(),
            exe: exe.to_path_buf(),
            listed: replicas,
            children,
            _tmp: tmp,
        })
    }

    /// Rewrites `tagma.toml` after `edit` changed the configuration (before starting).
    pub fn reconfigure(&mut self, edit: impl FnOnce(&mut tagma_core::Config)) -> Result<()> {
        let mut raw = self.cfg.raw.clone();
        edit(&mut raw);
        self.cfg = raw.clone().validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        std::fs::write(cluster_dir::config_path(&self.dir), raw.documented_toml())?;
        Ok(())
    }

    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join("logs").join(format!("replica-{i}.log"))
    }

    /// Starts replica `i` as a child process (logs go to `logs/replica-<i>.log`).
    pub fn start(&mut self, i: usize) -> Result<()> {
        self.spawn(i, &[])
    }

    fn spawn(&mut self, i: usize, extra: &[String]) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))?;
        let mut cmd = match self.netns.get(i) {
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(&self.exe);
                cmd
            }
            None => Command::new(&self.exe),
        };
        cmd.arg(if self.unreplicated {
            "unreplicated"
        } else {
            "replica"
        })
        .arg("--dir")
        .arg(&self.dir)
        .arg("--id")
        .arg(self.cfg.replicas[i].id.to_string());
        if let Some(service) = &self.service {
            cmd.arg("--service").arg(service);
        }
        cmd.args(&self.replica_args);
        cmd.args(extra);
        self.children[i] = Some(spawn_logged(cmd, log)?);
        Ok(())
    }

    /// Prepares a replica the configuration does not list, for `tagma view add`: writes its
    /// key to `keys/replica-<id>.key`, picks free ports for it on 127.0.0.1, and records it
    /// (in memory) as replica index `self.cfg.replicas.len()`, so that the methods taking an
    /// index (`start_joining`, `wait_ready`, `kill`, metrics) reach it, and proxies made
    /// from now on include it. Returns its index and its key file.
    pub fn prepare_joiner(&mut self, id: ReplicaId) -> Result<(usize, PathBuf)> {
        let key = IdentityKey::generate();
        let path = cluster_dir::replica_key_path(&self.dir, id);
        key.write_file(&path)?;
        let port = |_: ()| -> Result<SocketAddr> {
            Ok(SocketAddr::from((
                [127, 0, 0, 1],
                crate::init::free_port("127.0.0.1")?,
            )))
        };
        let info = tagma_core::config::ReplicaInfo {
            id,
            addr: port(())?,
            public_key: key.public(),
            metrics_addr: Some(port(())?),
        };
        self.cfg.replicas.push(info);
        self.children.push(None);
        Ok((self.cfg.replicas.len() - 1, path))
    }

    /// Starts the replica prepared at index `i` with `tagma replica --join`, contacting
    /// replica 0.
    pub fn start_joining(&mut self, i: usize) -> Result<()> {
        let info = self.cfg.replicas[i].clone();
        let contact = self.cfg.replicas[0].addr;
        let metrics = info
            .metrics_addr
            .context("a joiner has a metrics address")?;
        self.spawn(
            i,
            &[
                "--join".into(),
                contact.to_string(),
                "--metrics-addr".into(),
                metrics.to_string(),
            ],
        )
    }

    /// Starts every replica and waits until all of them accept connections.
    pub fn start_all(&mut self) -> Result<()> {
        for i in 0..self.listed {
            self.start(i)?;
        }
        for i in 0..self.listed {
            self.wait_ready(i, Duration::from_secs(20))?;
        }
        Ok(())
    }

    /// Waits until replica `i` answers on its metrics endpoint (opened after its listener);
    /// fails with the end of its log if the process exits first.
    pub fn wait_ready(&mut self, i: usize, timeout: Duration) -> Result<()> {
        let addr = self.cfg.replicas[i]
            .metrics_addr
            .context("replica has no metrics_addr")?;
        let deadline = Instant::now() + timeout;
        loop {
            if tagma_node::metrics::scrape(addr).is_ok() {
                return Ok(());
            }
            if !self.is_running(i) || Instant::now() >= deadline {
                let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(5)..].join("\n");
                bail!("replica {i} did not come up:\n{tail}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Creates and starts a cluster in a fresh temporary directory, retrying with new ports
    /// when a replica cannot start (another process may take a port between `init` choosing
    /// it and the replica binding it).
    pub fn launch(
        exe: &Path,
        replicas: usize,
        mode: tagma_core::Mode,
        edit: impl Fn(&mut tagma_core::Config),
    ) -> Result<Self> {
        let opts = LaunchOptions {
            replicas,
            mode,
            f: None,
            service: None,
            replica_args: Vec::new(),
            unreplicated: false,
        };
        Self::launch_with(exe, &opts, edit)
    }

    /// [`LocalCluster::launch`] with every [`LaunchOptions`].
    pub fn launch_with(
        exe: &Path,
        opts: &LaunchOptions,
        edit: impl Fn(&mut tagma_core::Config),
    ) -> Result<Self> {
        with_new_ports(|| {
            let mut c = LocalCluster::create_with_f(exe, opts.replicas, opts.mode, opts.f, None)?;
            c.service = opts.service.clone();
            c.replica_args = opts.replica_args.clone();
            c.unreplicated = opts.unreplicated;
            c.reconfigure(&edit)?;
            c.start_all()?;
            Ok(c)
        })
    }

    /// The process id of replica `i`, if it was started and not killed.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.children.get(i)?.as_ref().map(|c| c.id())
    }

    /// SIGKILLs replica `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&mut self, i: usize) -> bool {
        match self.children[i].as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn stop_all(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }

    pub fn client_key(&self) -> Result<IdentityKey> {
        Ok(IdentityKey::read_file(&cluster_dir::client_key_path(
            &self.dir,
        ))?)
    }

    /// A proxy for the cluster's client principal, retrying until the replicas accept
    /// connections or `timeout` passes.
    pub fn proxy(&self, timeout: Duration) -> Result<Proxy> {
        self.proxy_with(ClientOptions::new(DEFAULT_CLIENT_PRINCIPAL), timeout)
    }

    /// [`LocalCluster::proxy`] with `options` (principal, outstanding requests).
    pub fn proxy_with(&self, options: ClientOptions, timeout: Duration) -> Result<Proxy> {
        let deadline = Instant::now() + timeout;
        loop {
            match Proxy::connect(&self.cfg, self.client_key()?, options.clone()) {
                Ok(p) => return Ok(p),
                Err(e) if Instant::now() >= deadline => bail!("{e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Waits until every replica in `live` reports the same execution position, then returns
    /// their state reports.
    pub fn converged_states(
        &self,
        proxy: &Proxy,
        live: &[ReplicaId],
        timeout: Duration,
    ) -> Result<Vec<StateInfo>> {
        converged_states(proxy, live, timeout)
    }

    /// A Prometheus value of replica `i` (0 when it does not answer).
    pub fn metric(&self, i: usize, name: &str) -> f64 {
        self.cfg.replicas[i]
            .metrics_addr
            .and_then(|addr| tagma_node::metrics::scrape(addr).ok())
            .and_then(|text| tagma_node::metrics::value(&text, name))
            .unwrap_or(0.0)
    }

    /// The current leader, as the replicas' metrics report it (the first replica that
    /// answers; 0 when none does).
    pub fn current_leader(&self) -> usize {
        for r in &self.cfg.replicas {
            let Some(addr) = r.metrics_addr else { continue };
            let leader = tagma_node::metrics::scrape(addr)
                .ok()
                .and_then(|text| tagma_node::metrics::value(&text, "tagma_leader"));
            if let Some(l) = leader {
                return l as usize;
            }
        }
        0
    }

    /// Prints every replica log's warnings and errors and its last lines (for failing
    /// tests).
    pub fn dump_logs(&self) {
        for i in 0..self.children.len() {
            let text = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!("--- replica {i} log: warnings and errors ---");
            for l in lines
                .iter()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .take(40)
            {
                eprintln!("{l}");
            }
            eprintln!("--- replica {i} log: last lines ---");
            for l in &lines[lines.len().saturating_sub(15)..] {
                eprintln!("{l}");
            }
        }
    }
}

/// Runs `attempt` (write a deployment with freshly picked ports and start it) up to three
/// times: another process may take a port between the moment it is picked and the moment
/// a server binds it. Returns the first success, or the last failure.
pub(crate) fn with_new_ports<T>(mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
    let mut last = None;
    for _ in 0..3 {
        match attempt() {
            Ok(started) => return Ok(started),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("three attempts"))
}

/// Starts a server process with its output appended to `log` (`RUST_LOG` from
/// `TAGMA_REPLICA_LOG`, by default `info`).
pub(crate) fn spawn_logged(mut cmd: Command, log: std::fs::File) -> Result<Child> {
    cmd.env(
        "RUST_LOG",
        std::env::var("TAGMA_REPLICA_LOG").unwrap_or_else(|_| "info".into()),
    )
    .stdin(Stdio::null())
    .stdout(log.try_clone()?)
    .stderr(log)
    .spawn()
    .with_context(|| format!("cannot start {:?}", cmd.get_program()))
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Polls replicas until all of `live` report the same number of executed instances twice in a
/// row, then returns their reports.
pub fn converged_states(
    proxy: &Proxy,
    live: &[ReplicaId],
    timeout: Duration,
) -> Result<Vec<StateInfo>> {
    let deadline = Instant::now() + timeout;
    let mut last: Option<u64> = None;
    loop {
        let states: Vec<StateInfo> = proxy
            .query_states(Duration::from_secs(2))
            .into_iter()
            .filter(|(id, _)| live.contains(id))
            .filter_map(|(_, s)| s)
            .collect();
        if states.len() == live.len() {
            let first = states[0].executed_instances;
            if states.iter().all(|s| s.executed_instances == first) {
                if last == Some(first) {
                    return Ok(states);
                }
                last = Some(first);
            } else {
                last = None;
            }
        }
        if Instant::now() >= deadline {
            bail!("replicas did not converge within {timeout:?}: {states:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether all reports carry the same state digest.
pub fn digests_equal(states: &[StateInfo]) -> bool {
    let first: Option<Digest> = states.first().map(|s| s.state_digest);
    !states.is_empty() && states.iter().all(|s| Some(s.state_digest) == first)
}
