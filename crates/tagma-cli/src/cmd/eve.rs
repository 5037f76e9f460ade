//! `tagma eve`: execute-verify replication's servers.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tagma_crypto::IdentityKey;
use tagma_eve::ObjectTree;
use tagma_kv::eve::{EveKv, EveKvMixer};
use tagma_node::cluster_dir;
use tagma_wire::ReplicaId;

#[derive(clap::Args)]
pub struct EveArgs {
    #[command(subcommand)]
    pub what: EveCmd,
}

#[derive(clap::Subcommand)]
pub enum EveCmd {
    /// Run one server of a primary-backup pair serving the key-value store in
    /// execute-verify mode (until killed): both servers execute every batch in parallel on
    /// `[eve] threads` threads and compare tokens; the backup takes over a silent primary.
    /// The cluster directory needs exactly two replicas, ids 0 and 1, and
    /// `readonly_requests = false` (`tagma init --dir DIR --eve` writes one); settings in
    /// its `[eve]` section.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The cluster directory (tagma.toml and keys/).
    #[arg(long)]
    pub dir: PathBuf,
    /// Which server of the pair: 0 (the first primary) or 1.
    #[arg(long)]
    pub id: u32,
    /// Start by fetching the state from the other server, which serves: for a server that
    /// restarts while the other runs.
    #[arg(long)]
    pub join: bool,
}

pub fn run(args: EveArgs) -> Result<()> {
    match args.what {
        EveCmd::Serve(args) => serve(args),
    }
}

fn serve(args: ServeArgs) -> Result<()> {
    let cfg = cluster_dir::load_config(&args.dir)?;
    let id = ReplicaId(args.id);
    let key_path = cluster_dir::replica_key_path(&args.dir, id);
    let key = IdentityKey::read_file(&key_path)
        .with_context(|| format!("cannot read {}", key_path.display()))?;
    let handle = tagma_eve_node::start(
        cfg,
        id,
        key,
        EveKv,
        EveKvMixer,
        ObjectTree::new(),
        args.join,
    )?;
    handle.join();
    Ok(())
}
