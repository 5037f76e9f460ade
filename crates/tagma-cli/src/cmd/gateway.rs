//! `tagma gateway`: a Redis-protocol server in front of a cluster whose replicas run the
//! key-value service, so that redis-cli, redis-benchmark and Redis client libraries reach the
//! replicated store unmodified.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use tagma_bench::gateway::GatewaySetup;
use tagma_gateway::Gateway;
use tagma_node::cluster_dir::{self, DEFAULT_CLIENT_PRINCIPAL};

/// `tagma gateway`.
#[derive(clap::Args)]
#[command(
    after_help = "Every command is linearizable (ordered through the cluster) unless \
--unordered-reads lets read-only commands skip ordering. Connect with `redis-cli -p PORT`. \
Commands: strings (GET, SET with NX/XX/GET/EX/PX/EXAT/PXAT/KEEPTTL, MGET, MSET, INCR, APPEND…), \
keys (DEL, EXISTS, TYPE, SCAN, KEYS, EXPIRE, TTL, PERSIST…), hashes (HSET, HGET, HGETALL, \
HINCRBY…), MULTI/EXEC/DISCARD/WATCH, and PING, ECHO, HELLO 2, AUTH, SELECT 0, CLIENT, COMMAND, \
INFO, DBSIZE; `COMMAND` lists them. Expiry runs in the cluster's agreed time."
)]
pub struct GatewayArgs {
    /// The cluster directory (written by `tagma init`; replicas run `--service kv`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Where Redis clients connect.
    #[arg(long, default_value = "127.0.0.1:6379")]
    pub listen: SocketAddr,
    /// A password clients must give with AUTH before anything else (none by default).
    #[arg(long)]
    pub password: Option<String>,
    /// Send read-only commands unordered: faster, possibly stale (a connection still reads
    /// its own pipelined writes); INFO says so.
    #[arg(long)]
    pub unordered_reads: bool,
    /// tagma clients (proxies) the gateway uses; a connection's commands all go through one,
    /// and each gathers the commands of its connections into bundles.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Most connections at once.
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,
    /// Client secret key [default: DIR/keys/client.key].
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Client principal id of that key.
    #[arg(long, default_value_t = DEFAULT_CLIENT_PRINCIPAL)]
    pub principal: u32,
}

/// Starts a gateway for the cluster in `dir` on `listen` and returns it serving.
pub fn start(args: &GatewayArgs) -> Result<Gateway> {
    let cfg = cluster_dir::load_config(&args.dir)?;
    let key_path = (args.key.clone()).unwrap_or_else(|| cluster_dir::client_key_path(&args.dir));
    let setup = GatewaySetup {
        listen: args.listen,
        password: args.password.clone(),
        unordered_reads: args.unordered_reads,
        clients: args.clients,
        max_connections: args.max_connections,
        principal: args.principal,
    };
    tagma_bench::gateway::start(&cfg, &key_path, &setup)
        .with_context(|| format!("cannot serve the cluster of {}", args.dir.display()))
}

/// `tagma gateway`: serves until killed.
pub fn run(args: GatewayArgs) -> Result<()> {
    let gateway = start(&args)?;
    eprintln!(
        "tagma gateway on {} for the cluster in {} — connect with: redis-cli -h {} -p {}",
        gateway.local_addr(),
        args.dir.display(),
        gateway.local_addr().ip(),
        gateway.local_addr().port()
    );
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
