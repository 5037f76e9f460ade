//! A local BFT deployment of execute-verify replication: `u + max(u, r) + 1` executors
//! (`tagma eve serve` processes of one cluster directory, whose `[eve]` section says
//! `deployment = "bft"`) and a verifier cluster in its `verifiers/` subdirectory
//! (`tagma replica --service eve-verifier` processes: tagma's ordering core, whose agreement
//! is the verifiers'). The executors are client principals of the verifier cluster, each
//! with its key in `verifiers/keys/executor-N.key`.
//!
//! The verifier cluster tolerates `f` faults of one kind: `r = u` (Byzantine verifiers,
//! `3u + 1 = 2u + r + 1` of them) or `r = 0` (crash faults, `2u + 1`, masking concurrency
//! bugs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tagma_client::{ClientOptions, Proxy};
use tagma_core::{Mode, ValidConfig};
use tagma_crypto::IdentityKey;
use tagma_node::cluster_dir::{self, DEFAULT_CLIENT_PRINCIPAL};
use tagma_wire::ReplicaId;

use crate::cluster::spawn_logged;
use crate::eve_pair::{connect_proxy, wait_listening};
use crate::init::{InitOptions, init_cluster};

/// The first client principal of the executors at the verifier cluster.
pub const EXECUTOR_PRINCIPAL_BASE: u32 = 100;

/// The verifier cluster's directory inside a deployment's.
pub fn verifiers_dir(dir: &Path) -> PathBuf {
    dir.join("verifiers")
}

/// Executor `id`'s key as a client of the verifier cluster.
pub fn executor_key_path(dir: &Path, id: ReplicaId) -> PathBuf {
    verifiers_dir(dir)
        .join("keys")
        .join(format!("executor-{}.key", id.0))
}

/// The configurations of a deployment: the executors' and the verifiers'.
pub struct BftDirs {
    pub executors: ValidConfig,
    pub verifiers: ValidConfig,
}

/// Writes a deployment tolerating `u` faulty and `r` lying replicas into `dir` (the
/// executors) and `dir/verifiers`; `edit` adjusts both `[eve]` sections.
pub fn init_bft(
    dir: &Path,
    u: usize,
    r: usize,
    host: &str,
    force: bool,
    edit: impl Fn(&mut tagma_config::eve::EveSection),
) -> Result<BftDirs> {
    let resilience = tagma_eve::Resilience::new(u, r)
        .map_err(|e| anyhow::anyhow!("{e} — fix: pass --u 1 or more"))?;
    let verifier_mode = if r == 0 {
        Mode::Cft
    } else if r == u {
        Mode::Bft
    } else {
        bail!(
            "u = {u}, r = {r}: the verifiers run tagma's ordering, which tolerates f faults of one \
             kind — fix: pass --r {u} (Byzantine verifiers) or --r 0 (crash faults, masking \
             concurrency bugs)"
        );
    };
    let n_e = resilience.executors();
    let executors = init_cluster(
        dir,
        &InitOptions {
            replicas: n_e,
            mode: Mode::Cft,
            f: Some(u as u32),
            base_port: None,
            host: host.into(),
            force,
        },
    )?;
    let mut raw = executors.raw.clone();
    raw.cluster.readonly_requests = false;
    raw.eve.deployment = tagma_config::eve::Deployment::Bft;
    raw.eve.u = u;
    raw.eve.r = r;
    edit(&mut raw.eve);
    let executors = raw.clone().validate()?;
    std::fs::write(cluster_dir::config_path(dir), raw.documented_toml())?;

    let vdir = verifiers_dir(dir);
    let verifiers = init_cluster(
        &vdir,
        &InitOptions {
            replicas: resilience.verifiers(),
            mode: verifier_mode,
            f: Some(u as u32),
            base_port: None,
            host: host.into(),
            force,
        },
    )?;
    let mut raw = verifiers.raw.clone();
    raw.eve.deployment = tagma_config::eve::Deployment::Bft;
    raw.eve.u = u;
    raw.eve.r = r;
    raw.eve.executor_principals = Vec::new();
    for i in 0..n_e as u32 {
        let key = IdentityKey::generate();
        let path = executor_key_path(dir, ReplicaId(i));
        key.write_file(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let principal = EXECUTOR_PRINCIPAL_BASE + i;
        raw.clients.push(tagma_core::config::ClientEntry {
            id: principal,
            public_key: key.public().to_hex(),
        });
        raw.eve.executor_principals.push(principal);
    }
    edit(&mut raw.eve);
    let verifiers = raw.clone().validate()?;
    std::fs::write(cluster_dir::config_path(&vdir), raw.documented_toml())?;
    Ok(BftDirs {
        executors,
        verifiers,
    })
}

/// The processes of a deployment. Dropping it kills them.
pub struct EveBft {
    pub dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    pub dirs: BftDirs,
    exe: PathBuf,
    executors: Vec<Option<Child>>,
    verifiers: Vec<Option<Child>>,
    /// The `--lie` argument of each executor that lies (tests), by id.
    lies: Vec<Option<String>>,
}

impl EveBft {
    /// Writes a deployment into `dir` (a temporary one if `None`) and starts every verifier
    /// and executor.
    pub fn launch(
        exe: &Path,
        dir: Option<&Path>,
        u: usize,
        r: usize,
        edit: impl Fn(&mut tagma_config::eve::EveSection),
    ) -> Result<Self> {
        Self::launch_lying(exe, dir, u, r, &[], edit)
    }

    /// [`EveBft::launch`] with executors that lie: `(id, what)` starts executor `id` with
    /// `--lie what` (for example `tokens,replies`).
    ///
    /// Another process may take a port between `init` choosing it and a process binding it;
    /// a deployment that cannot start is written again with new ports, up to three times.
    pub fn launch_lying(
        exe: &Path,
        dir: Option<&Path>,
        u: usize,
        r: usize,
        lies: &[(usize, &str)],
        edit: impl Fn(&mut tagma_config::eve::EveSection),
    ) -> Result<Self> {
        crate::cluster::with_new_ports(|| Self::launch_once(exe, dir, u, r, lies, &edit))
    }

    fn launch_once(
        exe: &Path,
        dir: Option<&Path>,
        u: usize,
        r: usize,
        lies: &[(usize, &str)],
        edit: impl Fn(&mut tagma_config::eve::EveSection),
    ) -> Result<Self> {
        let (tmp, dir) = match dir {
            Some(d) => (None, d.to_path_buf()),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("tagma-eve-bft-")
                    .tempdir()?;
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        let dirs = init_bft(&dir, u, r, "127.0.0.1", true, edit)?;
        std::fs::create_dir_all(dir.join("logs"))?;
        let mut d = EveBft {
            executors: (0..dirs.executors.n()).map(|_| None).collect(),
            verifiers: (0..dirs.verifiers.n()).map(|_| None).collect(),
            lies: (0..dirs.executors.n())
                .map(|i| (lies.iter().find(|(l, _)| *l == i)).map(|(_, what)| what.to_string()))
                .collect(),
            dir,
            tmp,
            dirs,
            exe: exe.to_path_buf(),
        };
        for i in 0..d.verifiers.len() {
            d.start_verifier(i)?;
        }
        for i in 0..d.verifiers.len() {
            let addr = d.dirs.verifiers.replicas[i].addr;
            d.wait_listening(addr, &format!("verifier {i}"), Duration::from_secs(20))?;
        }
        for i in 0..d.executors.len() {
            d.start_executor(i)?;
        }
        for i in 0..d.executors.len() {
            let addr = d.dirs.executors.replicas[i].addr;
            d.wait_listening(addr, &format!("executor {i}"), Duration::from_secs(20))?;
        }
        Ok(d)
    }

    pub fn log_path(&self, what: &str, i: usize) -> PathBuf {
        self.dir.join("logs").join(format!("{what}-{i}.log"))
    }

    fn open_log(&self, what: &str, i: usize) -> Result<std::fs::File> {
        Ok(std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(what, i))?)
    }

    /// Starts verifier `i`.
    pub fn start_verifier(&mut self, i: usize) -> Result<()> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(["replica", "--dir"])
            .arg(verifiers_dir(&self.dir))
            .args(["--id", &i.to_string(), "--service", "eve-verifier"]);
        let log = self.open_log("verifier", i)?;
        self.verifiers[i] = Some(spawn_logged(cmd, log)?);
        Ok(())
    }

    /// Starts executor `i`.
    pub fn start_executor(&mut self, i: usize) -> Result<()> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(["eve", "serve", "--dir"])
            .arg(&self.dir)
            .args(["--id", &i.to_string()]);
        if let Some(what) = &self.lies[i] {
            cmd.args(["--lie", what]);
        }
        let log = self.open_log("executor", i)?;
        self.executors[i] = Some(spawn_logged(cmd, log)?);
        Ok(())
    }

    fn wait_listening(
        &mut self,
        addr: std::net::SocketAddr,
        what: &str,
        timeout: Duration,
    ) -> Result<()> {
        let logs = self.dir.join("logs");
        let children = &mut self.executors.iter_mut().chain(self.verifiers.iter_mut());
        let mut children: Vec<&mut Option<Child>> = children.collect();
        wait_listening(addr, what, timeout, || {
            let mut exited = children.iter_mut().flat_map(|c| c.as_mut());
            exited
                .find_map(|c| c.try_wait().ok().flatten())
                .map(|status| {
                    format!(
                        "cannot start: a process of the deployment exited ({status}); logs in {}{}",
                        logs.display(),
                        last_log_lines(&logs)
                    )
                })
        })
    }

    /// SIGKILLs executor `i`.
    pub fn kill_executor(&mut self, i: usize) {
        if let Some(mut c) = self.executors[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A proxy for the cluster's client principal: a request goes to every executor, and
    /// `r + 1` matching replies answer it.
    pub fn proxy(&self, timeout: Duration) -> Result<Proxy> {
        let key = IdentityKey::read_file(&cluster_dir::client_key_path(&self.dir))?;
        let options = ClientOptions {
            reply_quorum: Some(self.dirs.executors.raw.eve.r + 1),
            leader_first: false,
            ..ClientOptions::new(DEFAULT_CLIENT_PRINCIPAL)
        };
        connect_proxy(&self.dirs.executors, &key, &options, timeout)
    }

    /// Keeps the directory after the deployment is dropped; returns it.
    pub fn keep(&mut self) -> PathBuf {
        if let Some(t) = self.tmp.take() {
            let _ = t.keep();
        }
        self.dir.clone()
    }

    /// The lines of a process's log (`what`: "executor" or "verifier").
    pub fn log(&self, what: &str, i: usize) -> String {
        std::fs::read_to_string(self.log_path(what, i)).unwrap_or_default()
    }
}

impl Drop for EveBft {
    fn drop(&mut self) {
        let children = self.executors.iter_mut().chain(self.verifiers.iter_mut());
        for c in children {
            if let Some(mut c) = c.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// The last lines of every log in `logs` that ends in an error, for a failure message.
fn last_log_lines(logs: &Path) -> String {
    log_tails(logs, 3, |tail| tail.iter().any(|l| l.contains("rror")))
}

/// The last `lines` lines of every log in `logs` (in name order) whose tail `keep` accepts,
/// each under its file's name: what a failure message shows of the processes' side.
pub fn log_tails(logs: &Path, lines: usize, keep: impl Fn(&[&str]) -> bool) -> String {
    let mut out = String::new();
    let Ok(entries) = std::fs::read_dir(logs) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let tail = &all[all.len().saturating_sub(lines)..];
        if keep(tail) {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            out.push_str(&format!("\n{name}:\n  {}", tail.join("\n  ")));
        }
    }
    out
}
