//! Cluster directories: what `tagma init` writes (keys and a documented `tagma.toml`, with
//! the ports checked) and `tagma keygen`'s key pairs.

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
    /// Defaults to the largest f the replica count allows, which must be at least 1.
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

/// The f a cluster of `n` replicas in `mode` gets when none is asked for: the largest it
/// tolerates, which must be at least 1 (a cluster that tolerates no fault is asked for
/// explicitly, with f = 0).
pub fn default_f(mode: Mode, n: usize) -> Result<u32> {
    let f = max_f(mode, n);
    if f >= 1 {
        return Ok(f);
    }
    let (needed, other) = match mode {
        Mode::Bft => (4, "--cft (crash faults only: 3 replicas tolerate f = 1)"),
        Mode::Cft => (3, "--replicas 4 without --cft for Byzantine faults"),
    };
    bail!(
        "{n} replicas in {mode} mode tolerate no fault: f = 1 needs at least {needed} — fix: use --replicas {needed}, or {other}; `tagma init --f 0` writes a cluster that tolerates no fault"
    )
}

/// The replica and metrics ports of `replicas` replicas from `base`: replica i listens on
/// `base + i` and serves metrics on `base + 100 + i`; every port must be in 1..=65535 and
/// the two ranges must not overlap.
pub fn ports_from_base(base: u16, replicas: usize) -> Result<Vec<(u16, u16)>> {
    let last_metrics = u32::from(base) + 100 + replicas.saturating_sub(1) as u32;
    if base == 0 {
        bail!("--base-port 0 is not a port — fix: choose --base-port between 1 and 65435");
    }
    if replicas > 100 {
        bail!(
            "{replicas} replicas need more than 100 replica ports, which would overlap the metrics ports at BASE+100 — fix: write tagma.toml's [[replica]] addresses yourself"
        );
    }
    if last_metrics > u32::from(u16::MAX) {
        let highest_base = u32::from(u16::MAX) - 100 - (replicas.saturating_sub(1) as u32);
        bail!(
            "--base-port {base} with {replicas} replicas needs ports up to {last_metrics} (metrics on BASE+100+i), past 65535 — fix: choose --base-port {highest_base} or lower"
        );
    }
    Ok((0..replicas as u16)
        .map(|i| (base + i, base + 100 + i))
        .collect())
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
    let f = match opts.f {
        Some(f) => f,
        None => default_f(opts.mode, opts.replicas)?,
    };
    let based = match opts.base_port {
        Some(base) => Some(ports_from_base(base, opts.replicas)?),
        None => None,
    };
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
        let (port, metrics_port) = match &based {
            Some(ports) => ports[i],
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
        testing: Default::default(),
        eve: Default::default(),
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

    fn options(replicas: usize, mode: Mode) -> InitOptions {
        InitOptions {
            replicas,
            mode,
            f: None,
            base_port: Some(7100),
            host: "127.0.0.1".into(),
            force: true,
        }
    }

    #[test]
    fn base_ports_past_65535_are_refused_with_the_highest_that_fits() {
        assert_eq!(
            ports_from_base(65431, 4).unwrap(),
            [
                (65431, 65531),
                (65432, 65532),
                (65433, 65533),
                (65434, 65534)
            ]
        );
        assert_eq!(ports_from_base(65432, 4).unwrap()[3], (65435, 65535));
        let err = ports_from_base(65433, 4).unwrap_err().to_string();
        assert!(err.contains("--base-port 65432 or lower"), "{err}");
        let err = ports_from_base(65500, 4).unwrap_err().to_string();
        assert!(err.contains("65603") && err.contains("fix:"), "{err}");
        assert!(ports_from_base(u16::MAX, 1).is_err());
        assert!(ports_from_base(0, 4).is_err());
        assert!(ports_from_base(7100, 101).is_err());
        // Nothing is written when the ports do not fit.
        let dir = tempfile::tempdir().unwrap();
        let mut opts = options(4, Mode::Bft);
        opts.base_port = Some(65500);
        assert!(init_cluster(dir.path(), &opts).is_err());
        assert!(!cluster_dir::config_path(dir.path()).exists());
    }

    #[test]
    fn the_default_f_is_at_least_one_in_both_modes() {
        let dir = tempfile::tempdir().unwrap();
        let err = init_cluster(dir.path(), &options(3, Mode::Bft))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("f = 1 needs at least 4") && err.contains("--cft"),
            "{err}"
        );
        assert_eq!(
            init_cluster(dir.path(), &options(3, Mode::Cft)).unwrap().f,
            1
        );
        let err = init_cluster(dir.path(), &options(2, Mode::Cft))
            .unwrap_err()
            .to_string();
        assert!(err.contains("f = 1 needs at least 3"), "{err}");
        let mut no_faults = options(3, Mode::Bft);
        no_faults.f = Some(0);
        assert_eq!(init_cluster(dir.path(), &no_faults).unwrap().f, 0);
        assert_eq!(
            init_cluster(dir.path(), &options(7, Mode::Bft)).unwrap().f,
            2
        );
    }

    /// Every "Default X." the generated tagma.toml states is the value a key left out
    /// takes.
    #[test]
    fn the_generated_file_states_the_real_defaults() {
        let dir = tempfile::tempdir().unwrap();
        init_cluster(dir.path(), &options(4, Mode::Bft)).unwrap();
        let text = std::fs::read_to_string(cluster_dir::config_path(dir.path())).unwrap();
        use tagma_core::config::{
            BatchSection, LimitSection, StorageSection, TestingSection, TimeoutSection,
        };
        let value = |v: Result<toml::Value, _>| v.unwrap();
        let defaults = toml::Value::Table(toml::map::Map::from_iter([
            (
                "cluster".to_string(),
                value(toml::Value::try_from(ClusterSection::default())),
            ),
            (
                "batch".to_string(),
                value(toml::Value::try_from(BatchSection::default())),
            ),
            (
                "timeouts".to_string(),
                value(toml::Value::try_from(TimeoutSection::default())),
            ),
            (
                "limits".to_string(),
                value(toml::Value::try_from(LimitSection::default())),
            ),
            (
                "storage".to_string(),
                value(toml::Value::try_from(StorageSection::default())),
            ),
            (
                "testing".to_string(),
                value(toml::Value::try_from(TestingSection::default())),
            ),
            (
                "eve".to_string(),
                value(toml::Value::try_from(
                    tagma_core::config::EveSection::default(),
                )),
            ),
        ]));
        let mut section = String::new();
        let mut stated: Option<String> = None;
        let mut checked = 0;
        for line in text.lines() {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
                section = name.trim_matches('[').to_string();
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                if let Some((_, rest)) = comment.split_once("Default ") {
                    let value = rest.trim_end_matches('.');
                    let value = value.split(" (").next().unwrap().trim_end_matches('.');
                    stated = Some(value.to_string());
                }
                continue;
            }
            let Some((key, _)) = line.split_once(" = ") else {
                continue;
            };
            let Some(value) = stated.take() else {
                continue;
            };
            let real = &defaults[section.as_str()][key];
            let parsed: toml::Value = toml::from_str(&format!("v = {value}")).unwrap();
            assert_eq!(
                &parsed["v"], real,
                "[{section}] {key}: the file says default {value}, the real default is {real}"
            );
            checked += 1;
        }
        assert!(checked >= 25, "only {checked} stated defaults found");
    }

    #[test]
    fn max_f_follows_the_mode() {
        assert_eq!(max_f(Mode::Bft, 4), 1);
        assert_eq!(max_f(Mode::Bft, 10), 3);
        assert_eq!(max_f(Mode::Cft, 3), 1);
        assert_eq!(max_f(Mode::Cft, 5), 2);
    }
}
