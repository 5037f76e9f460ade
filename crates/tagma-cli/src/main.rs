//! The `tagma` command: parses the command line and hands each subcommand to its module in
//! [`tagma_cli::cmd`]. Run `tagma --help`.

mod allocator;

use std::io::IsTerminal;

use clap::{Parser, Subcommand};
use tagma_cli::cmd::{
    bench::BenchArgs,
    chaos::ChaosArgs,
    crdt::{CrdtArgs, CrdtCmd},
    demo::DemoArgs,
    init::{InitArgs, KeygenArgs},
    kv::KvArgs,
    replica::{ReplicaArgs, UnreplicatedArgs},
    sim::SimArgs,
    space::SpaceArgs,
    status::StatusArgs,
    view::ViewArgs,
};

#[derive(Parser)]
#[command(
    name = "tagma",
    version,
    about = "Byzantine fault-tolerant state machine replication (Mod-SMaRt) — run a replicated key-value service",
    long_about = "tagma replicates a deterministic service over n replicas that keep working while up to f of \
them crash (cft mode, n >= 2f+1) or behave arbitrarily (bft mode, n >= 3f+1).\n\n\
Quick start:\n  tagma demo                          # a local 4-replica cluster under load, checked end to end\n  \
tagma init --replicas 4 --dir c1     # write a cluster directory (config + keys)\n  \
tagma replica --dir c1 --id 0        # run one replica (one per terminal, ids 0..3)\n  \
tagma kv --dir c1 put hello world    # talk to the cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a temporary local cluster, drive a mixed key-value workload, and check that every
    /// replica ends with the same state.
    Demo(DemoArgs),
    /// Run a failure scenario on a temporary local cluster with durability on, under a
    /// counting key-value load, and report whether any acknowledged operation was lost or
    /// applied twice (exit status 1 if so).
    Chaos(ChaosArgs),
    /// Write a ready-to-run local cluster directory: tagma.toml and Ed25519 keys for the
    /// replicas, a client and an administrator.
    Init(InitArgs),
    /// Generate one Ed25519 key pair: writes the secret key file and prints the public key.
    Keygen(KeygenArgs),
    /// Run one replica of a cluster (until killed, or until a view change removes it).
    Replica(ReplicaArgs),
    /// Execute-verify replication: run a server of a primary-backup pair whose servers
    /// execute every batch in parallel and then compare what they reached.
    Eve(tagma_cli::cmd::eve::EveArgs),
    /// Run one server WITHOUT replication (until killed): clients connect and authenticate
    /// as to a replica, but requests execute at once, without consensus. The baseline that
    /// `tagma bench` compares against; use a one-replica cft directory with f = 0
    /// (`tagma init --replicas 1 --cft --f 0`).
    Unreplicated(UnreplicatedArgs),
    /// Measure a local cluster under load from many concurrent clients (throughput,
    /// latency percentiles, CPU and memory per replica) against an unreplicated server run
    /// with the same load in the same invocation.
    Bench(BenchArgs),
    /// Invoke the replicated key-value service.
    Kv(KvArgs),
    /// Serve the Redis protocol in front of a cluster's key-value store: redis-cli,
    /// redis-benchmark and Redis client libraries work against the replicated store.
    Gateway(tagma_cli::cmd::gateway::GatewayArgs),
    /// Judge a history of client operations (as `tagma chaos --history` writes it) with the
    /// linearizability checker.
    History(tagma_cli::cmd::history::HistoryArgs),
    /// Invoke the coordination service (tuple spaces: create, out, rd, in, cas, replace,
    /// watch…) of a cluster whose replicas run `--service space`.
    Space(SpaceArgs),
    /// Show or change the replica set (the view): changes are signed with the administrator's
    /// key, ordered like requests, and installed at the same point by every replica; each
    /// command waits for the outcome and prints the view.
    View(ViewArgs),
    /// Show every replica: whether it answers, its leader, regency and view, how far it
    /// has executed (and whether it is behind the others), and its state digest.
    Status(StatusArgs),
    /// Run the deterministic simulator: seeded clusters under network faults, crashes and
    /// Byzantine replicas, checked for agreement, order, validity, linearizability (the
    /// key-value store) or exactly-once takes, lock safety and waits answered once (the
    /// coordination service, `--service space`), and liveness. `--seeds A..B` runs a range;
    /// `--seed S --trace` replays one seed.
    Sim(SimArgs),
    /// Causal CRDT replication for many nodes over the VCube hypercube (VCube-Sync):
    /// `tagma crdt sim` simulates it against Plumtree and flooding on one workload.
    Crdt(CrdtArgs),
}

/// Output piped into a reader that stops early (`tagma ... --json | head`) ends the program
/// quietly, as the shell's own tools do, instead of with a panic message: printing to a
/// closed pipe fails, and `println!` panics on failure.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = (info.payload().downcast_ref::<String>().map(String::as_str))
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            // 128 + SIGPIPE, what a shell reports for a writer the pipe closed on.
            std::process::exit(141);
        }
        default(info);
    }));
}

fn main() {
    quiet_on_closed_stdout();
    tagma_node::metrics::set_process_gauges(allocator::heap_gauges);
    let cli = Cli::parse();
    let default_level = if matches!(
        cli.command,
        Cmd::Replica(_) | Cmd::Unreplicated(_) | Cmd::Eve(_) | Cmd::Gateway(_)
    ) {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: logs redirected to a file stay plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    // Simulations free and reuse memory at a high rate, in a short process whose resident
    // memory nobody watches: they keep jemalloc's own decay of freed pages (10 s) and run on
    // huge pages. Servers keep freed pages for `--freed-pages-ms`, the other commands for
    // its default.
    let simulates = matches!(
        &cli.command,
        Cmd::Sim(_)
            | Cmd::Crdt(CrdtArgs {
                what: CrdtCmd::Sim(_) | CrdtCmd::Figures(_)
            })
    );
    if simulates {
        allocator::restart_on_huge_pages();
    } else {
        let freed_pages_ms = match &cli.command {
            Cmd::Replica(args) => args.memory.freed_pages_ms,
            Cmd::Unreplicated(args) => args.memory.freed_pages_ms,
            _ => tagma_cli::cmd::replica::FREED_PAGES_MS_DEFAULT,
        };
        allocator::tune(freed_pages_ms);
    }
    let result = match cli.command {
        Cmd::Demo(args) => tagma_cli::cmd::demo::run(args),
        Cmd::Chaos(args) => tagma_cli::cmd::chaos::run(args),
        Cmd::Init(args) => tagma_cli::cmd::init::run_init(args),
        Cmd::Keygen(args) => tagma_cli::cmd::init::run_keygen(args),
        Cmd::Replica(args) => tagma_cli::cmd::replica::run_replica(args),
        Cmd::Eve(args) => tagma_cli::cmd::eve::run(args),
        Cmd::Unreplicated(args) => tagma_cli::cmd::replica::run_unreplicated(args),
        Cmd::Bench(args) => tagma_cli::cmd::bench::run(args),
        Cmd::Kv(args) => tagma_cli::cmd::kv::run(args),
        Cmd::Gateway(args) => tagma_cli::cmd::gateway::run(args),
        Cmd::History(args) => tagma_cli::cmd::history::run(args),
        Cmd::Space(args) => tagma_cli::cmd::space::run(args),
        Cmd::View(args) => tagma_cli::cmd::view::run(args),
        Cmd::Status(args) => tagma_cli::cmd::status::run(args),
        Cmd::Sim(args) => tagma_cli::cmd::sim::run(args),
        Cmd::Crdt(args) => tagma_cli::cmd::crdt::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {}", tagma_cli::cmd::errors::render(&e));
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Words that mean nothing to a user reading `--help`.
    const JARGON: [&str; 6] = ["seed's", "seed 0", "Figure", "[`", "the paper", "SPEC"];

    fn check(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            if help.trim().is_empty() {
                missing.push(format!("{path} {id}: no help"));
            }
            for word in JARGON {
                if help.contains(word) {
                    missing.push(format!("{path} {id}: help says {word:?}"));
                }
            }
            for value in arg.get_possible_values() {
                let help = value.get_help().map(|h| h.to_string()).unwrap_or_default();
                for word in JARGON {
                    if help.contains(word) {
                        missing.push(format!(
                            "{path} {id}={}: help says {word:?}",
                            value.get_name()
                        ));
                    }
                }
            }
        }
        for sub in cmd.get_subcommands() {
            let about = sub
                .get_long_about()
                .or(sub.get_about())
                .map(|h| h.to_string())
                .unwrap_or_default();
            let sub_path = format!("{path} {}", sub.get_name());
            if about.trim().is_empty() && sub.get_name() != "help" {
                missing.push(format!("{sub_path}: no help"));
            }
            for word in JARGON {
                if about.contains(word) {
                    missing.push(format!("{sub_path}: help says {word:?}"));
                }
            }
            check(sub, &sub_path, missing);
        }
    }

    #[test]
    fn every_argument_has_plain_help() {
        Cli::command().debug_assert();
        let mut missing = Vec::new();
        check(&Cli::command(), "tagma", &mut missing);
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}
