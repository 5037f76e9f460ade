//! The layout of a cluster directory, shared by the CLI, the node and the tests:
//!
//! ```text
//! DIR/tagma.toml               the configuration (see tagma_core::config)
//! DIR/keys/replica-<id>.key    replica secret keys
//! DIR/keys/client.key          the client principal's secret key (principal id 1)
//! DIR/keys/admin.key           the administrator's secret key
//! DIR/<data_dir>/replica-<id>  per-replica data directory
//! ```

use std::path::{Path, PathBuf};

use tagma_core::{Config, ValidConfig};
use tagma_wire::ReplicaId;

pub const CONFIG_FILE: &str = "tagma.toml";
/// Principal id that `tagma init` gives the client key it writes.
pub const DEFAULT_CLIENT_PRINCIPAL: u32 = 1;

/// Errors loading a cluster directory; each names the path and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ClusterDirError {
    #[error(
        "cannot read {path}: {source} — fix: create the cluster with `tagma init --dir {dir}` or pass the right --dir"
    )]
    Read {
        path: PathBuf,
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Config {
        path: PathBuf,
        source: tagma_core::ConfigError,
    },
    #[error(transparent)]
    Key(#[from] tagma_crypto::CryptoError),
    #[error("replica {id} is not in {path} — fix: use one of the ids listed there ({ids})")]
    NoSuchReplica { id: u32, path: PathBuf, ids: String },
}

pub fn config_path(dir: &Path) -> PathBuf {
    dir.join(CONFIG_FILE)
}

pub fn replica_key_path(dir: &Path, id: ReplicaId) -> PathBuf {
    dir.join("keys").join(format!("replica-{}.key", id.0))
}

pub fn client_key_path(dir: &Path) -> PathBuf {
    dir.join("keys").join("client.key")
}

pub fn admin_key_path(dir: &Path) -> PathBuf {
    dir.join("keys").join("admin.key")
}

pub fn data_dir(dir: &Path, cfg: &ValidConfig, id: ReplicaId) -> PathBuf {
    dir.join(&cfg.raw.storage.data_dir)
        .join(format!("replica-{}", id.0))
}

/// Reads and validates `DIR/tagma.toml`.
pub fn load_config(dir: &Path) -> Result<ValidConfig, ClusterDirError> {
    let path = config_path(dir);
    let text = std::fs::read_to_string(&path).map_err(|source| ClusterDirError::Read {
        path: path.clone(),
        dir: dir.to_path_buf(),
        source,
    })?;
    Config::from_toml(&text).map_err(|source| ClusterDirError::Config { path, source })
}

/// Checks that `id` is configured.
pub fn check_member(dir: &Path, cfg: &ValidConfig, id: ReplicaId) -> Result<(), ClusterDirError> {
    if cfg.replica(id).is_some() {
        return Ok(());
    }
    let ids = cfg
        .replicas
        .iter()
        .map(|r| r.id.0.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    Err(ClusterDirError::NoSuchReplica {
        id: id.0,
        path: config_path(dir),
        ids,
    })
}
