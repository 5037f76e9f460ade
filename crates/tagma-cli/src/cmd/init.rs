//! `tagma init` (a cluster directory) and `tagma keygen` (one key pair).

use std::path::PathBuf;

use anyhow::Result;
use tagma_cluster::init::{InitOptions, init_cluster, keygen};
use tagma_core::Mode;
use tagma_node::cluster_dir;

/// `tagma init`.
#[derive(clap::Args)]
pub struct InitArgs {
    /// Number of replicas.
    #[arg(long, default_value_t = 4)]
    pub replicas: usize,
    /// Crash-fault-tolerant mode (n >= 2f+1) instead of Byzantine (n >= 3f+1).
    #[arg(long)]
    pub cft: bool,
    /// Faults tolerated [default: the largest the replica count allows, which must be at
    /// least 1: 4 replicas in Byzantine mode, 3 with --cft]. `--f 0` makes a cluster that
    /// tolerates no fault.
    #[arg(long)]
    pub f: Option<u32>,
    /// The cluster directory to create (tagma.toml and keys/ go there).
    #[arg(long)]
    pub dir: PathBuf,
    /// Replica i listens on port BASE+i and serves metrics on BASE+100+i (all within
    /// 1..=65535).
    #[arg(long, default_value_t = 7100)]
    pub base_port: u16,
    /// Address the replicas listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Overwrite an existing tagma.toml.
    #[arg(long)]
    pub force: bool,
    /// An execute-verify primary-backup pair (`tagma eve serve`): two replicas, crash
    /// faults, clients taking the first reply.
    #[arg(long, conflicts_with_all = ["replicas", "cft", "f"])]
    pub eve: bool,
    /// With --eve: the BFT deployment instead of a pair: u + max(u, r) + 1 executors in
    /// --dir and the verifier cluster in DIR/verifiers (ports picked free).
    #[arg(long, requires = "eve")]
    pub bft: bool,
    /// With --bft: faulty replicas tolerated for liveness.
    #[arg(long, default_value_t = 1, requires = "bft")]
    pub u: usize,
    /// With --bft: lying replicas tolerated for safety, u (Byzantine verifiers) or 0
    /// (crash-faulty verifiers, masking concurrency bugs).
    #[arg(long, default_value_t = 1, requires = "bft")]
    pub r: usize,
}

/// `tagma keygen`.
#[derive(clap::Args)]
pub struct KeygenArgs {
    /// Where to write the secret key.
    #[arg(long)]
    pub out: PathBuf,
}

/// `tagma init`: writes the directory and says how to start it.
pub fn run_init(args: InitArgs) -> Result<()> {
    if args.bft {
        let dirs = tagma_cluster::eve_bft::init_bft(
            &args.dir,
            args.u,
            args.r,
            &args.host,
            args.force,
            |_| {},
        )?;
        let vdir = tagma_cluster::eve_bft::verifiers_dir(&args.dir);
        println!(
            "wrote {} ({} executors, u = {}, r = {}) and the verifier cluster {} ({} verifiers)",
            cluster_dir::config_path(&args.dir).display(),
            dirs.executors.n(),
            args.u,
            args.r,
            cluster_dir::config_path(&vdir).display(),
            dirs.verifiers.n()
        );
        println!(
            "start each verifier with: tagma replica --dir {} --id <0..{}> --service eve-verifier",
            vdir.display(),
            dirs.verifiers.n() - 1
        );
        println!(
            "then each executor with: tagma eve serve --dir {} --id <0..{}>",
            args.dir.display(),
            dirs.executors.n() - 1
        );
        return Ok(());
    }
    if args.eve {
        let cfg = tagma_cluster::eve_pair::init_pair(
            &args.dir,
            Some(args.base_port),
            &args.host,
            args.force,
            |_| {},
        )?;
        println!(
            "wrote {} (an execute-verify pair: servers 0 and 1) and keys in {}",
            cluster_dir::config_path(&args.dir).display(),
            args.dir.join("keys").display()
        );
        println!(
            "start each server with: tagma eve serve --dir {} --id <0..{}>",
            args.dir.display(),
            cfg.n() - 1
        );
        return Ok(());
    }
    let mode = if args.cft { Mode::Cft } else { Mode::Bft };
    let dir = args.dir;
    let cfg = init_cluster(
        &dir,
        &InitOptions {
            replicas: args.replicas,
            mode,
            f: args.f,
            base_port: Some(args.base_port),
            host: args.host,
            force: args.force,
        },
    )?;
    println!(
        "wrote {} ({} replicas, f = {}, {} mode) and keys in {}",
        cluster_dir::config_path(&dir).display(),
        cfg.n(),
        cfg.f,
        cfg.mode,
        dir.join("keys").display()
    );
    println!(
        "start each replica with: tagma replica --dir {} --id <0..{}>",
        dir.display(),
        cfg.n() - 1
    );
    Ok(())
}

/// `tagma keygen`: writes the secret key and prints the public one.
pub fn run_keygen(args: KeygenArgs) -> Result<()> {
    let out = args.out;
    let public = keygen(&out)?;
    println!("{public}");
    eprintln!(
        "secret key written to {0}; the public key above goes into tagma.toml before the cluster first starts, or, for a replica joining a running cluster, pass the file to `tagma view add --key {0}` and `tagma replica --join HOST:PORT --key {0}`",
        out.display()
    );
    Ok(())
}
