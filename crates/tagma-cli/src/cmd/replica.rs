//! `tagma replica` and `tagma unreplicated`: run one server process of a cluster directory
//! until it is killed (or, for a replica, until a view change removes it).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tagma_bench::micro::EmptyService;
use tagma_crypto::IdentityKey;
use tagma_kv::KvService;
use tagma_node::cluster_dir;
use tagma_wire::ReplicaId;

use super::service::{ExecArgs, ServiceKind};

/// `tagma replica`.
#[derive(clap::Args)]
pub struct ReplicaArgs {
    /// The cluster directory (written by `tagma init`).
    #[arg(long)]
    pub dir: PathBuf,
    /// This replica's id in tagma.toml (or, with --join, the id it was added with).
    #[arg(long)]
    pub id: u32,
    /// The replicated service.
    #[arg(long, value_enum, default_value_t = ServiceKind::Kv)]
    pub service: ServiceKind,
    /// Join a running cluster: HOST:PORT of any replica listed in tagma.toml. The replica
    /// waits until a view that includes it is installed (`tagma view add`), learns it
    /// from the members, fetches the state by state transfer, then takes part. Use it
    /// for restarts of a joined replica too.
    #[arg(long, value_name = "HOST:PORT")]
    pub join: Option<SocketAddr>,
    /// This replica's secret key file [default: DIR/keys/replica-ID.key]. It must match
    /// the public key tagma.toml (or, with --join, the view) gives this replica.
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// With --join: how long to wait for the view that adds this replica, in seconds.
    #[arg(long, default_value_t = 600, requires = "join")]
    pub join_wait_s: u64,
    /// With --join: serve Prometheus metrics on HOST:PORT (replicas listed in tagma.toml
    /// take `metrics_addr` from there).
    #[arg(long, value_name = "HOST:PORT", requires = "join")]
    pub metrics_addr: Option<SocketAddr>,
    #[command(flatten)]
    pub exec: ExecArgs,
    #[command(flatten)]
    pub memory: MemoryArgs,
}

/// How long the allocator keeps freed pages, by default ([`MemoryArgs`]).
pub const FREED_PAGES_MS_DEFAULT: u64 = 100;

/// The server process's memory.
///
/// A replica frees and reuses batch-sized buffers with every consensus instance (decoded
/// batches, vote records, log records, frames). Returned to the kernel at once, each costs
/// an `madvise` with its TLB shootdown, and its reuse page faults and clears fresh pages:
/// with 1 KiB requests up to 15 % of a replica's CPU per request (within the noise of this
/// machine in other runs); with 1 MiB batches of 1 KB tuples the coordination service
/// ordered 17 to 19k durable inserts/s at 10,000 clients against 20 to 23k with freed pages
/// kept 100 ms (kept 1 s or 10 s, no faster). Kept, they make the resident memory say less
/// about the heap: 14 to 18 MiB of freed pages beyond it, moving by ±4 to 7 MiB, against 12
/// to 13 MiB (±1 to 2) when they go back at once.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct MemoryArgs {
    /// How long freed memory pages stay with the allocator for reuse before they go back
    /// to the kernel, in milliseconds (jemalloc's dirty_decay_ms). 0 returns them at once,
    /// so that the resident memory follows the heap (leak hunting, `tagma bench soak`), at
    /// the price of page faults on reuse: up to 15 % of the CPU per request with 1 KiB
    /// requests, more with large batches. jemalloc's own settings in _RJEM_MALLOC_CONF, if
    /// set, take precedence.
    #[arg(long, value_name = "MS", default_value_t = FREED_PAGES_MS_DEFAULT)]
    pub freed_pages_ms: u64,
}

/// `tagma unreplicated`.
#[derive(clap::Args)]
pub struct UnreplicatedArgs {
    /// The cluster directory (written by `tagma init --replicas 1 --cft --f 0`).
    #[arg(long)]
    pub dir: PathBuf,
    /// This server's id in tagma.toml.
    #[arg(long, default_value_t = 0)]
    pub id: u32,
    /// The service to run.
    #[arg(long, value_enum, default_value_t = ServiceKind::Kv)]
    pub service: ServiceKind,
    #[command(flatten)]
    pub exec: ExecArgs,
    #[command(flatten)]
    pub memory: MemoryArgs,
}

/// How a server process starts.
enum StartAs {
    Replica(PathBuf),
    Unreplicated,
    Joining(PathBuf, tagma_node::Joining),
}

fn start_as<S: tagma_exec::Service>(
    cfg: tagma_core::ValidConfig,
    id: ReplicaId,
    key: IdentityKey,
    service: S,
    how: StartAs,
) -> Result<tagma_node::NodeHandle, tagma_node::NodeError> {
    match how {
        StartAs::Replica(dir) => tagma_node::start(cfg, id, key, service, dir),
        StartAs::Unreplicated => tagma_node::start_unreplicated(cfg, id, key, service),
        StartAs::Joining(dir, joining) => {
            tagma_node::start_joining(cfg, id, key, service, dir, joining)
        }
    }
}

/// Starts `kind` as `how`.
fn start_service(
    kind: ServiceKind,
    exec: &ExecArgs,
    cfg: tagma_core::ValidConfig,
    id: ReplicaId,
    key: IdentityKey,
    how: StartAs,
) -> Result<tagma_node::NodeHandle> {
    Ok(match kind {
        ServiceKind::Kv => start_as(cfg, id, key, KvService::new(), how)?,
        ServiceKind::Micro => start_as(cfg, id, key, EmptyService::new(), how)?,
        ServiceKind::List => {
            let list = tagma_parallel::list::ListService::with_entries(exec.state_size as i64);
            start_as(cfg, id, key, exec.parallel(list), how)?
        }
        ServiceKind::TuplespaceTs1 | ServiceKind::TuplespaceTs2 => {
            let class = if kind == ServiceKind::TuplespaceTs1 {
                tagma_tuplespace::Classification::Ts1
            } else {
                tagma_tuplespace::Classification::Ts2
            };
            let initial =
                tagma_bench::exec::initial_tuples(exec.state_size, tagma_bench::exec::TUPLES_SEED);
            let space = tagma_bench::exec::tuple_space(class, &initial);
            start_as(cfg, id, key, exec.parallel(space), how)?
        }
        ServiceKind::EveVerifier => {
            let service = eve_verifier(&cfg)?;
            start_as(cfg, id, key, service, how)?
        }
        ServiceKind::Space => {
            // Clients seal private fields for the configured replicas, in member order.
            let replicas = cfg.initial_view().members.iter().map(|m| m.key).collect();
            let service = exec.space_service(&key, replicas)?;
            start_as(cfg, id, key, service, how)?
        }
    })
}

/// The verifiers' service from the `[eve]` section: the executors serve the key-value store,
/// whose initial state is empty.
fn eve_verifier(cfg: &tagma_core::ValidConfig) -> Result<tagma_eve_node::VerifierService> {
    let eve = &cfg.raw.eve;
    let resilience = tagma_eve::Resilience::new(eve.u, eve.r)
        .map_err(|e| anyhow::anyhow!("{e} — fix: set [eve] u to at least 1"))?;
    if eve.executor_principals.len() != resilience.executors() {
        bail!(
            "[eve] executor_principals lists {} executors, but u = {} and r = {} make {} — fix: \
             list one client principal per executor (`tagma init --eve --bft` writes them)",
            eve.executor_principals.len(),
            eve.u,
            eve.r,
            resilience.executors()
        );
    }
    let genesis = tagma_eve::Token::genesis(&tagma_eve::ObjectTree::new().hash().root);
    let mut verification =
        tagma_eve::verify::Verification::new(resilience, genesis, eve.verify_timeout_ms, 4_096);
    if eve.protection_after_batches > 0 {
        verification = verification.with_protection(tagma_eve::verify::Protection {
            after_batches: eve.protection_after_batches,
            wait_ms: eve.protection_wait_ms,
        });
    }
    Ok(tagma_eve_node::VerifierService::new(
        verification,
        &eve.executor_principals,
    ))
}

/// Creates replica `id`'s data directory; the error names it.
fn create_data_dir(dir: &Path, cfg: &tagma_core::ValidConfig, id: ReplicaId) -> Result<PathBuf> {
    let data_dir = cluster_dir::data_dir(dir, cfg, id);
    std::fs::create_dir_all(&data_dir).with_context(|| {
        format!(
            "cannot create the data directory {} — fix: make it writable, or change \
             [storage] data_dir in tagma.toml",
            data_dir.display()
        )
    })?;
    Ok(data_dir)
}

/// A removed replica serves lagging peers for as long as start-up synchronisation waits
/// for positions (5 request timeouts), then exits.
fn leave_grace(cfg: &tagma_core::ValidConfig) -> Duration {
    Duration::from_millis(cfg.raw.timeouts.request_timeout_ms.saturating_mul(5))
}

/// `tagma replica`: serves until killed or removed.
pub fn run_replica(args: ReplicaArgs) -> Result<()> {
    if args.join.is_some() {
        return join(args);
    }
    let dir = &args.dir;
    let id = ReplicaId(args.id);
    let cfg = cluster_dir::load_config(dir)?;
    cluster_dir::check_member(dir, &cfg, id)?;
    let grace = leave_grace(&cfg);
    let key_path = args
        .key
        .unwrap_or_else(|| cluster_dir::replica_key_path(dir, id));
    let key = IdentityKey::read_file(&key_path)?;
    let data_dir = create_data_dir(dir, &cfg, id)?;
    let node = start_service(
        args.service,
        &args.exec,
        cfg,
        id,
        key,
        StartAs::Replica(data_dir),
    )?;
    node.run_until_left(grace);
    eprintln!("replica {id} is not a member of the installed view: exited");
    Ok(())
}

/// `tagma unreplicated`: serves until killed.
pub fn run_unreplicated(args: UnreplicatedArgs) -> Result<()> {
    let dir = &args.dir;
    let id = ReplicaId(args.id);
    let cfg = cluster_dir::load_config(dir)?;
    cluster_dir::check_member(dir, &cfg, id)?;
    let key = IdentityKey::read_file(&cluster_dir::replica_key_path(dir, id))?;
    let node = start_service(
        args.service,
        &args.exec,
        cfg,
        id,
        key,
        StartAs::Unreplicated,
    )?;
    node.join();
    Ok(())
}

/// `tagma replica --join`: waits for the view that adds the replica, then runs it until
/// it leaves.
fn join(args: ReplicaArgs) -> Result<()> {
    let dir = &args.dir;
    let id = ReplicaId(args.id);
    let contact = args.join.context("--join names the contact replica")?;
    let cfg = cluster_dir::load_config(dir)?;
    let key_path = args
        .key
        .unwrap_or_else(|| cluster_dir::replica_key_path(dir, id));
    let key = IdentityKey::read_file(&key_path)?;
    let grace = leave_grace(&cfg);
    let data_dir = create_data_dir(dir, &cfg, id)?;
    let wait = Duration::from_secs(args.join_wait_s);
    let view = tagma_node::discover_view(&cfg, id, &key, contact, wait)?;
    let joining = tagma_node::Joining {
        view,
        metrics_addr: args.metrics_addr,
    };
    let node = start_service(
        args.service,
        &args.exec,
        cfg,
        id,
        key,
        StartAs::Joining(data_dir, joining),
    )?;
    node.run_until_left(grace);
    eprintln!("replica {id} is not a member of the installed view: exited");
    Ok(())
}
