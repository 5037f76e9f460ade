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
    /// Run one server serving the key-value store in execute-verify mode (until killed).
    /// With `[eve] deployment = "primary-backup"`: one server of a pair (two replicas, ids 0
    /// and 1; `tagma init --dir DIR --eve` writes one); both execute every batch in parallel
    /// on `[eve] threads` threads and compare tokens, and the backup takes over a silent
    /// primary. With `deployment = "bft"`: one of the u + max(u, r) + 1 executors (`tagma
    /// init --dir DIR --eve --bft` writes them and the verifier cluster in DIR/verifiers,
    /// whose replicas run `tagma replica --dir DIR/verifiers --id N --service
    /// eve-verifier`); each executes every batch and sends its token to the verifiers.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The cluster directory (tagma.toml and keys/).
    #[arg(long)]
    pub dir: PathBuf,
    /// Which server: 0 (the first primary) or 1 of a pair, 0..n_E for an executor.
    #[arg(long)]
    pub id: u32,
    /// Primary-backup: start by fetching the state from the other server, which serves: for
    /// a server that restarts while the other runs. (An executor of the BFT deployment that
    /// restarts fetches the state when the verifiers' decisions show it is behind.)
    #[arg(long)]
    pub join: bool,
    /// For testing the BFT deployment: this executor lies — `tokens` (a wrong token in
    /// every VERIFY), `replies` (a wrong reply to every client), `state` (forged values in
    /// the state it serves to an executor that fetches), comma-separated. It still
    /// executes correctly; the deployment tolerates r such executors.
    #[arg(long, value_delimiter = ',', value_enum)]
    pub lie: Vec<LieKind>,
}

/// What a lying executor lies about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LieKind {
    Tokens,
    Replies,
    State,
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
    if cfg.raw.eve.deployment == tagma_core::eve::Deployment::Bft {
        return serve_executor(&args, cfg, id, key);
    }
    if !args.lie.is_empty() {
        anyhow::bail!(
            "--lie makes an executor of the BFT deployment lie; a primary-backup pair tolerates \
             crashes only — fix: leave out --lie, or use a directory from `tagma init --eve --bft`"
        );
    }
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

/// An executor of the BFT deployment.
fn serve_executor(
    args: &ServeArgs,
    cfg: tagma_core::ValidConfig,
    id: ReplicaId,
    key: IdentityKey,
) -> Result<()> {
    use tagma_cluster::eve_bft::{executor_key_path, verifiers_dir};
    let vdir = verifiers_dir(&args.dir);
    let verifiers = cluster_dir::load_config(&vdir).with_context(|| {
        format!(
            "the verifier cluster of {} — fix: `tagma init --dir {} --eve --bft` writes it",
            args.dir.display(),
            args.dir.display()
        )
    })?;
    let principal = *verifiers
        .raw
        .eve
        .executor_principals
        .get(id.0 as usize)
        .with_context(|| {
            format!(
                "{} names no client principal for executor {} in [eve] executor_principals",
                cluster_dir::config_path(&vdir).display(),
                id.0
            )
        })?;
    let key_path = executor_key_path(&args.dir, id);
    let verifier_key = IdentityKey::read_file(&key_path)
        .with_context(|| format!("cannot read {}", key_path.display()))?;
    let link = tagma_eve_node::VerifierLink {
        cfg: verifiers,
        principal,
        key: verifier_key,
    };
    let lies = tagma_eve_node::Lies {
        tokens: args.lie.contains(&LieKind::Tokens),
        replies: args.lie.contains(&LieKind::Replies),
        state: args.lie.contains(&LieKind::State),
    };
    let handle = tagma_eve_node::start_executor(
        cfg,
        id,
        key,
        link,
        tagma_eve_node::Application {
            service: EveKv,
            mixer: EveKvMixer,
            initial: ObjectTree::new(),
        },
        lies,
    )?;
    handle.join();
    Ok(())
}
