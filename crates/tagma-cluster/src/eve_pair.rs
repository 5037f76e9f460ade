//! A local primary-backup pair of execute-verify servers: two `tagma eve serve` processes of
//! one cluster directory (two `[[replica]]` entries, crash faults, f = 0 for the clients,
//! which take the first reply).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use tagma_client::{ClientOptions, Proxy};
use tagma_core::{Mode, ValidConfig};
use tagma_crypto::IdentityKey;
use tagma_node::cluster_dir::{self, DEFAULT_CLIENT_PRINCIPAL};

use crate::cluster::spawn_logged;
use crate::init::{InitOptions, init_cluster};

/// Writes the cluster directory of a pair into `dir`: two replicas, crash faults, f = 0 for
/// the clients (which take the first reply: `readonly_requests = false`), its `[eve]`
/// section edited by `edit`.
pub fn init_pair(
    dir: &Path,
    base_port: Option<u16>,
    host: &str,
    force: bool,
    edit: impl Fn(&mut tagma_core::Config),
) -> Result<ValidConfig> {
    let opts = InitOptions {
        replicas: 2,
        mode: Mode::Cft,
        f: Some(0),
        base_port,
        host: host.into(),
        force,
    };
    let cfg = init_cluster(dir, &opts)?;
    let mut raw = cfg.raw.clone();
    raw.cluster.readonly_requests = false;
    edit(&mut raw);
    let cfg = raw.clone().validate()?;
    std::fs::write(cluster_dir::config_path(dir), raw.documented_toml())?;
    Ok(cfg)
}

/// The two server processes. Dropping it kills them.
pub struct EvePair {
    pub dir: PathBuf,
    /// The temporary directory holding `dir`, when none was given (removed on drop).
    tmp: Option<tempfile::TempDir>,
    pub cfg: ValidConfig,
    exe: PathBuf,
    children: [Option<Child>; 2],
}

impl EvePair {
    /// Writes a cluster directory for a pair into `dir` (a temporary one if `None`; its
    /// `[eve]` section edited by `edit`) and starts both servers.
    pub fn launch(
        exe: &Path,
        dir: Option<&Path>,
        edit: impl Fn(&mut tagma_core::Config),
    ) -> Result<Self> {
        let (tmp, dir) = match dir {
            Some(d) => (None, d.to_path_buf()),
            None => {
                let t = tempfile::Builder::new().prefix("tagma-eve-").tempdir()?;
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        let dir = dir.as_path();
        let cfg = init_pair(dir, None, "127.0.0.1", true, edit)?;
        std::fs::create_dir_all(dir.join("logs"))?;
        let mut pair = EvePair {
            dir: dir.to_path_buf(),
            tmp,
            cfg,
            exe: exe.to_path_buf(),
            children: [None, None],
        };
        pair.start(0, false)?;
        pair.start(1, false)?;
        for i in 0..2 {
            pair.wait_listening(i, Duration::from_secs(20))?;
        }
        Ok(pair)
    }

    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join("logs").join(format!("eve-{i}.log"))
    }

    /// Starts server `i` (`join`: it fetches the state from the other first).
    pub fn start(&mut self, i: usize, join: bool) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(["eve", "serve", "--dir"])
            .arg(&self.dir)
            .arg("--id")
            .arg(i.to_string());
        if join {
            cmd.arg("--join");
        }
        self.children[i] = Some(spawn_logged(cmd, log)?);
        Ok(())
    }

    /// Waits until server `i` accepts TCP connections.
    pub fn wait_listening(&mut self, i: usize, timeout: Duration) -> Result<()> {
        let addr = self.cfg.replicas[i].addr;
        let log = self.log_path(i);
        let child = &mut self.children[i];
        wait_listening(addr, &format!("eve server {i}"), timeout, || {
            let exited = child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            exited.map(|status| format!("exited ({status}); its log: {}", log.display()))
        })
    }

    /// SIGKILLs server `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A proxy for the cluster's client principal (a request goes to both servers; the
    /// first reply counts).
    pub fn proxy(&self, timeout: Duration) -> Result<Proxy> {
        let key = IdentityKey::read_file(&cluster_dir::client_key_path(&self.dir))?;
        // The pair's servers take requests from clients directly; no leader reports them.
        let options = ClientOptions {
            leader_first: false,
            ..ClientOptions::new(DEFAULT_CLIENT_PRINCIPAL)
        };
        connect_proxy(&self.cfg, &key, &options, timeout)
    }

    /// Keeps the cluster directory after the pair is dropped; returns it.
    pub fn keep(&mut self) -> PathBuf {
        if let Some(t) = self.tmp.take() {
            let _ = t.keep();
        }
        self.dir.clone()
    }

    /// The lines of server `i`'s log.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.log_path(i)).unwrap_or_default()
    }
}

impl Drop for EvePair {
    fn drop(&mut self) {
        self.kill(0);
        self.kill(1);
    }
}

/// Waits until something listens on `addr`; `exited` says why it never will (the process
/// ended).
pub(crate) fn wait_listening(
    addr: std::net::SocketAddr,
    what: &str,
    timeout: Duration,
    mut exited: impl FnMut() -> Option<String>,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(why) = exited() {
            bail!("{what} {why}");
        }
        if Instant::now() >= deadline {
            bail!("{what} does not listen on {addr} after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A proxy to `cfg`'s servers, retried until `timeout` while they start.
pub(crate) fn connect_proxy(
    cfg: &ValidConfig,
    key: &IdentityKey,
    options: &ClientOptions,
    timeout: Duration,
) -> Result<Proxy> {
    let deadline = Instant::now() + timeout;
    loop {
        match Proxy::connect(cfg, key.clone(), options.clone()) {
            Ok(p) => return Ok(p),
            Err(e) if Instant::now() >= deadline => bail!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}
