//! `tagma view`: shows the installed replica set (the view), or orders a change of it
//! signed with the administrator's key and prints the outcome.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tagma_client::{ClientOptions, Proxy};
use tagma_crypto::IdentityKey;
use tagma_node::cluster_dir::{self, DEFAULT_CLIENT_PRINCIPAL};
use tagma_wire::{ReconfigureOutcome, ReplicaId, ViewOp};

/// `tagma view`.
#[derive(clap::Args)]
pub struct ViewArgs {
    /// The cluster directory (written by `tagma init`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Administrator secret key [default: DIR/keys/admin.key].
    #[arg(long)]
    pub admin_key: Option<PathBuf>,
    #[command(subcommand)]
    pub op: ViewCmd,
}

#[derive(clap::Subcommand)]
pub enum ViewCmd {
    /// Print the installed view (as f+1 replicas report it).
    Show,
    /// Remove a replica from the view; it stops ordering once the view is installed.
    Remove {
        /// The replica to remove.
        #[arg(long)]
        id: u32,
    },
    /// Change the number of faults tolerated (the view must have enough replicas for it).
    SetF {
        /// The new number of faults tolerated.
        f: u32,
    },
    /// Add a replica (then start it with `tagma replica --join`).
    Add {
        /// The new replica's id (not used by any member).
        #[arg(long)]
        id: u32,
        /// The IP:PORT it listens on.
        #[arg(long)]
        addr: String,
        /// Its secret key file (written by `tagma keygen`); the view gets the public key.
        #[arg(long)]
        key: PathBuf,
    },
}

/// `tagma view`.
pub fn run(args: ViewArgs) -> Result<()> {
    let dir = &args.dir;
    let cfg = cluster_dir::load_config(dir)?;
    let client_key = IdentityKey::read_file(&cluster_dir::client_key_path(dir))?;
    let proxy = Proxy::connect(
        &cfg,
        client_key,
        ClientOptions::new(DEFAULT_CLIENT_PRINCIPAL),
    )?;
    let installed = proxy
        .current_view(Duration::from_secs(5))
        .context("cannot learn the installed view from the replicas")?;
    let ops = match args.op {
        ViewCmd::Show => {
            print_view(&installed);
            return Ok(());
        }
        ViewCmd::Remove { id } => vec![ViewOp::Remove(ReplicaId(id))],
        ViewCmd::SetF { f } => vec![ViewOp::SetF(f)],
        ViewCmd::Add { id, addr, key } => {
            addr.parse::<std::net::SocketAddr>()
                .with_context(|| format!("--addr {addr:?} is not IP:PORT"))?;
            let key = IdentityKey::read_file(&key)?.public();
            vec![ViewOp::Add(tagma_wire::ViewMember {
                id: ReplicaId(id),
                addr,
                key,
            })]
        }
    };
    let admin_path = args
        .admin_key
        .unwrap_or_else(|| cluster_dir::admin_key_path(dir));
    let admin = IdentityKey::read_file(&admin_path)
        .with_context(|| format!("cannot read the administrator key {}", admin_path.display()))?;
    let change = tagma_core::view::sign_change(&admin, installed.id, ops);
    match proxy.reconfigure(&change)? {
        ReconfigureOutcome::Installed(view) => {
            print_view(&view);
            Ok(())
        }
        ReconfigureOutcome::Refused(reason) => bail!("the replicas refused the change: {reason}"),
    }
}

fn print_view(view: &tagma_wire::View) {
    println!(
        "view {} (f = {}, {} members)",
        view.id,
        view.f,
        view.members.len()
    );
    for m in &view.members {
        println!("  replica {} at {} key {}", m.id, m.addr, m.key.to_hex());
    }
}
