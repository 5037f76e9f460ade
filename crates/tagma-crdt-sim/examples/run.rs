//! Runs one protocol on one workload and prints the report: the way to time a large run.
//!
//! `cargo run --release -p tagma-crdt-sim --example run -- NODES PUBLISHERS DURATION_S
//! [THREADS] [PROTOCOL]`: one topic, every node subscribed, one 1 KiB register operation
//! per publisher per second, a 30 s drain; THREADS defaults to the machine's, PROTOCOL to
//! vcube (or plumtree, flood).

use std::process::ExitCode;

use tagma_crdt_sim::{ProtocolKind, Workload, run_on};

const USAGE: &str = "usage: run NODES PUBLISHERS DURATION_S [THREADS] [vcube|plumtree|flood] \
     (for example: run 1024 1024 60)";

/// Argument `k`, if given.
fn arg<T: std::str::FromStr>(args: &[String], k: usize, what: &str) -> Result<Option<T>, String> {
    match args.get(k) {
        None => Ok(None),
        Some(a) => a
            .parse()
            .map(Some)
            .map_err(|_| format!("{what} must be a number, not {a:?}; {USAGE}")),
    }
}

/// Argument `k`, which must be given.
fn needed<T: std::str::FromStr>(args: &[String], k: usize, what: &str) -> Result<T, String> {
    arg(args, k, what)?.ok_or(format!("{what} is missing; {USAGE}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = (|| -> Result<_, String> {
        let nodes: u32 = needed(&args, 0, "NODES")?;
        let publishers: u32 = needed(&args, 1, "PUBLISHERS")?;
        let duration_s: f64 = needed(&args, 2, "DURATION_S")?;
        let threads: usize = arg(&args, 3, "THREADS")?
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let protocol = match args.get(4).map(String::as_str) {
            None | Some("vcube") => ProtocolKind::Vcube,
            Some("plumtree") => ProtocolKind::Plumtree,
            Some("flood") => ProtocolKind::Flood,
            Some(other) => return Err(format!("unknown protocol {other:?}; {USAGE}")),
        };
        let workload = Workload {
            nodes,
            publishers,
            duration_s,
            ..Workload::default()
        };
        Ok((protocol, workload, threads))
    })();
    let (protocol, workload, threads) = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run_on(protocol, &workload, Default::default(), threads) {
        Ok(report) => {
            println!("{report:#?}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
