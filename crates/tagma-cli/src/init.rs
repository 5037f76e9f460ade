//! `tagma init` and `tagma keygen`.

use std::net::TcpListener;
use std::path::Path;

use anyhow::{Context, Result, bail};
use tagma_core::config::{AdminEntry, ClientEntry, ClusterSection, Config, ReplicaEntry};
use tagma_core::{Mode, ValidConfig};
use tagma_crypto::IdentityKey;
use tagma_node::cluster_dir::{self, DEFAULT_CLIENT_PRINCIPAL};
use tagma_wire::ReplicaId;

/// What `tagma init` should write.
#[derive(Clone, Debug)]
pub struct InitOptions {
    pub replicas: usize,
    pub mode: Mode,
    /// Defaults to the largest f the replica count allows.
    pub f: Option<u32>,
    /// First replica port; replica i listens on `base_port + i` and serves metrics on
    /// `base_port + 100 + i`. `None`: pick free ports.
    pub base_port: Option<u16>,
    pub host: String,
    /// Overwrite an existing configuration.
    pub force: bool,
}

/// The largest f that `n` replicas tolerate in `mode`.
pub fn max_f(mode: Mode, n: usize) -> u32 {
    match mode {
        Mode::Bft => (n.saturating_sub(1) / 3) as u32,
        Mode::Cft => (n.saturating_sub(1) / 2) as u32,
    }
}

/// Ports picked for a cluster lie below the kernel's ephemeral range (32768 and up on
/// Linux): a port the kernel hands out itself could be taken by some client's outgoing
/// connection while its replica is down, and the replica could not listen again on restart.
const PICKED_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A port free on `host` now, in [`PICKED_PORTS`], from a starting point that differs per
/// process and call (clusters created side by side rarely probe the same ports).
pub(crate) fn free_port(host: &str) -> Result<u16> {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let span = u32::from(PICKED_PORTS.end - PICKED_PORTS.start);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let start = (std::process::id() ^ nanos).wrapping_add(call.wrapping_mul(7919)) % span;
    for k in 0..span {
        let port = PICKED_PORTS.start + ((start + k) % span) as u16;
        if TcpListener::bind((host, port)).is_ok() {
            return Ok(port);
        }
    }
    bail!(
        "no free port on {host} in {}..{} — fix: pass --base-port",
        PICKED_PORTS.start,
        PICKED_PORTS.end
    )
}

/// Writes keys and `tagma.toml` into `dir`; returns the validated configuration.
pub fn init_cluster(dir: &Path, opts: &InitOptions) -> Result<ValidConfig> {
    let cfg_path = cluster_dir::config_path(dir);
    if cfg_path.exists() && !opts.force {
        bail!(
            "{} already exists — fix: pass --force to overwrite it, or choose another --dir",
            cfg_path.display()
        );
    }
    let f = opts
        .f
        .unwrap_or_else(|| max_f(opts.mode, opts.replicas).max(1));
    std::fs::create_dir_all(dir.join("keys"))
        .with_context(|| format!("cannot create {}", dir.join("keys").display()))?;
    let mut replicas = Vec::new();
    // A port probed free is released at once, so a later probe may find it again (seen in
    // CI: two replicas given one port): each is taken once.
    let mut taken = std::collections::BTreeSet::new();
    let mut pick = || -> Result<u16> {
        for _ in 0..1000 {
            let port = free_port(&opts.host)?;
            if taken.insert(port) {
                return Ok(port);
            }
        }
        bail!(
            "no unused free port found on {} — fix: pass --base-port",
            opts.host
        )
    };
    for i in 0..opts.replicas {
        let key = IdentityKey::generate();
        let path = cluster_dir::replica_key_path(dir, ReplicaId(i as u32));
        key.write_file(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let (port, metrics_port) = match opts.base_port {
            Some(b) => (b + i as u16, b + 100 + i as u16),
            None => (pick()?, pick()?),
        };
        replicas.push(ReplicaEntry {
            id: i as u32,
            addr: format!("{}:{port}", opts.host),
            public_key: key.public().to_hex(),
            metrics_addr: Some(format!("{}:{metrics_port}", opts.host)),
        });
    }
    let client = IdentityKey::generate();
    client.write_file(&cluster_dir::client_key_path(dir))?;
    let admin = IdentityKey::generate();
    admin.write_file(&cluster_dir::admin_key_path(dir))?;
    let config = Config {
        cluster: ClusterSection {
            mode: opts.mode,
            f,
            ..Default::default()
        },
        replicas,
        clients: vec![ClientEntry {
            id: DEFAULT_CLIENT_PRINCIPAL,
            public_key: client.public().to_hex(),
        }],
        admin: Some(AdminEntry {
            public_key: admin.public().to_hex(),
        }),
        batch: Default::default(),
        timeouts: Default::default(),
        limits: Default::default(),
        storage: Default::default(),
    };
    let valid = config
        .clone()
        .validate()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::write(&cfg_path, config.documented_toml())
        .with_context(|| format!("cannot write {}", cfg_path.display()))?;
    Ok(valid)
}

/// `tagma keygen`: writes a new secret key file and returns the public key in hex.
pub fn keygen(out: &Path) -> Result<String> {
    if out.exists() {
        bail!(
            "{} already exists — fix: choose another --out path (keys are never overwritten)",
            out.display()
        );
    }
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let key = IdentityKey::generate();
    key.write_file(out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    Ok(key.public().to_hex())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_writes_a_valid_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let opts = InitOptions {
            replicas: 4,
            mode: Mode::Bft,
            f: None,
            base_port: Some(7100),
            host: "127.0.0.1".into(),
            force: false,
        };
        let cfg = init_cluster(dir.path(), &opts).unwrap();
        assert_eq!((cfg.n(), cfg.f), (4, 1));
        let loaded = cluster_dir::load_config(dir.path()).unwrap();
        assert_eq!(loaded.replicas, cfg.replicas);
        for r in &cfg.replicas {
            let key =
                IdentityKey::read_file(&cluster_dir::replica_key_path(dir.path(), r.id)).unwrap();
            assert_eq!(key.public(), r.public_key);
        }
        assert!(
            init_cluster(dir.path(), &opts).is_err(),
            "refuses to overwrite without --force"
        );
        let cft = InitOptions {
            replicas: 3,
            mode: Mode::Cft,
            force: true,
            ..opts
        };
        assert_eq!(init_cluster(dir.path(), &cft).unwrap().f, 1);
    }

    #[test]
    fn max_f_follows_the_mode() {
        assert_eq!(max_f(Mode::Bft, 4), 1);
        assert_eq!(max_f(Mode::Bft, 10), 3);
        assert_eq!(max_f(Mode::Cft, 3), 1);
        assert_eq!(max_f(Mode::Cft, 5), 2);
    }
}
