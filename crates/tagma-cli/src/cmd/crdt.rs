//! `tagma crdt`: causal CRDT replication over the VCube hypercube (VCube-Sync). `tagma crdt
//! sim` runs the deterministic simulator (`tagma-crdt-sim`) with one or more protocols on
//! one workload and prints them side by side.

use std::path::PathBuf;

use anyhow::{Result, bail};
use serde::Serialize;
use tagma_crdt_sim::{LinkModel, ProtocolKind, Report, Workload};

#[derive(clap::Args)]
pub struct CrdtArgs {
    #[command(subcommand)]
    pub what: CrdtCmd,
}

#[derive(clap::Subcommand)]
pub enum CrdtCmd {
    /// Simulate causal CRDT replication: every publisher publishes operations on its
    /// topics at a fixed rate, each topic replicated at its subscribers (one CRDT per
    /// topic: register, counter, set, map in turn), over a seeded wide-area link model;
    /// prints whether the subscribers converged, causal-order violations, duplicates,
    /// delivery latency, hops and bytes by class for each protocol, on the same workload.
    Sim(SimArgs),
    /// The VCube-Sync paper's comparisons in simulation: latency and bytes against the
    /// number of nodes for one publisher (every node or a quarter subscribed) and for a
    /// quarter or all of the nodes publishing, VCube-Sync against Plumtree and flooding;
    /// a table, and plots with --plot-dir.
    Figures(super::crdt_figures::FiguresArgs),
    /// Run VCube-Sync for real: nodes on 127.0.0.1 over authenticated TCP, several
    /// processes of many nodes each, a mixed workload on four topics (register, counter,
    /// set, map), one node stopped mid-run, one joining late and one subscribing to a
    /// topic mid-run; reports convergence, causal violations, latency and bytes (exit
    /// status 1 if it does not converge).
    Demo(DemoArgs),
    /// One host process of `tagma crdt demo` (started by it).
    #[command(hide = true)]
    Host(HostArgs),
}

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Nodes in all (at least 4).
    #[arg(long, default_value_t = 64)]
    pub nodes: u32,
    /// Processes the nodes are spread over.
    #[arg(long, default_value_t = 4)]
    pub processes: usize,
    /// Seconds of publishing.
    #[arg(long, default_value_t = 8.0)]
    pub duration_s: f64,
    /// Operations each publisher publishes per second.
    #[arg(long = "ops-per-sec", default_value_t = 5.0)]
    pub ops_per_sec: f64,
    /// Publishers per topic.
    #[arg(long, default_value_t = 4)]
    pub publishers: u32,
    /// Draws the subscribers, publishers and operations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct HostArgs {
    /// The run's directory (plan.json and the process keys).
    #[arg(long)]
    pub dir: PathBuf,
    /// Which process of the plan this is.
    #[arg(long)]
    pub index: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    /// VCube-Sync: per-topic trees over the hypercube, causal barriers, hop-by-hop
    /// acknowledgements, repair.
    Vcube,
    /// Plumtree over a random overlay of mean degree 6: eager tree, lazy IHAVE, GRAFT and
    /// PRUNE.
    Plumtree,
    /// Flooding over the same overlay.
    Flood,
}

impl ProtocolArg {
    fn kind(self) -> ProtocolKind {
        match self {
            ProtocolArg::Vcube => ProtocolKind::Vcube,
            ProtocolArg::Plumtree => ProtocolKind::Plumtree,
            ProtocolArg::Flood => ProtocolKind::Flood,
        }
    }
}

#[derive(clap::Args)]
pub struct SimArgs {
    /// Simulated nodes (2 to 65,536).
    #[arg(long, default_value_t = 200)]
    pub nodes: u32,
    /// The protocols to run on the same workload, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [ProtocolArg::Vcube, ProtocolArg::Plumtree, ProtocolArg::Flood])]
    pub protocol: Vec<ProtocolArg>,
    /// Publishers per topic (drawn among its subscribers).
    #[arg(long, conflicts_with = "publishers_pct")]
    pub publishers: Option<u32>,
    /// Publishers per topic as a share of its subscribers.
    #[arg(long)]
    pub publishers_pct: Option<f64>,
    /// Share of the nodes subscribed to each topic.
    #[arg(long, default_value_t = 100.0)]
    pub subscribers_pct: f64,
    /// Topics (each its own CRDT: register, counter, set, map in turn).
    #[arg(long, default_value_t = 1)]
    pub topics: u32,
    /// Operations each publisher publishes per second.
    #[arg(long = "ops-per-sec", default_value_t = 1.0)]
    pub ops_per_sec: f64,
    /// Simulated seconds of publishing (after one second of warm-up).
    #[arg(long, default_value_t = 60.0)]
    pub duration_s: f64,
    /// Simulated seconds after the last publish for repairs to finish.
    #[arg(long, default_value_t = 30.0)]
    pub drain_s: f64,
    /// Bytes of a register operation's value.
    #[arg(long, default_value_t = 1_024)]
    pub payload_bytes: usize,
    /// Share of the nodes that crash at half the run.
    #[arg(long, default_value_t = 0.0)]
    pub crash_pct: f64,
    /// Share of the messages lost.
    #[arg(long, default_value_t = 0.0)]
    pub loss_pct: f64,
    /// Share of the nodes that start at a third of the run without state (vcube only:
    /// they install a snapshot and follow the causal stream).
    #[arg(long, default_value_t = 0.0)]
    pub join_pct: f64,
    /// Share of the nodes that change a subscription at two fifths of the run (vcube only):
    /// a subscriber that does not publish on the topic unsubscribes, any other node
    /// subscribes (and installs a snapshot before following the stream).
    #[arg(long, default_value_t = 0.0)]
    pub churn_pct: f64,
    /// The smallest one-way delay between two nodes, in ms (each pair's is drawn once).
    #[arg(long, default_value_t = 5.0)]
    pub latency_min_ms: f64,
    /// The largest one-way delay between two nodes, in ms.
    #[arg(long, default_value_t = 105.0)]
    pub latency_max_ms: f64,
    /// Each node's uplink, in Mbit/s.
    #[arg(long, default_value_t = 100.0)]
    pub bandwidth_mbit: f64,
    /// Processing per message sent, in µs (a node sends one message at a time).
    #[arg(long, default_value_t = 20)]
    pub send_cost_us: u64,
    /// Processing per message received, in µs (a node handles one message at a time).
    #[arg(long, default_value_t = 20)]
    pub receive_cost_us: u64,
    /// Draws the subscribers, publishers, faults, link delays and operations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Threads that run the simulation (0: one per processor); the report is the same on
    /// any number.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Print the reports as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Draw each protocol's latency distribution into this PNG.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
}

/// What `tagma crdt sim --json` prints.
#[derive(Serialize)]
struct SimOutput<'a> {
    workload: &'a Workload,
    runs: Vec<Run>,
}

#[derive(Serialize)]
struct Run {
    protocol: &'static str,
    report: Report,
}

pub fn run(args: CrdtArgs) -> Result<()> {
    match args.what {
        CrdtCmd::Sim(args) => sim(args),
        CrdtCmd::Demo(args) => demo(args),
        CrdtCmd::Figures(args) => super::crdt_figures::run(args),
        CrdtCmd::Host(args) => {
            tagma_vcube_node::host::run(&args.dir, args.index)?;
            Ok(())
        }
    }
}

fn demo(args: DemoArgs) -> Result<()> {
    if !(args.duration_s > 0.0 && args.duration_s <= 600.0) {
        bail!("--duration-s must be above 0 and at most 600");
    }
    let options = tagma_vcube_node::DemoOptions {
        nodes: args.nodes,
        processes: args.processes,
        publishers_per_topic: args.publishers,
        ops_per_s: args.ops_per_sec,
        duration_ms: (args.duration_s * 1_000.0) as u64,
        seed: args.seed,
        ..tagma_vcube_node::DemoOptions::default()
    };
    if !args.json {
        eprintln!(
            "running {} nodes in {} processes on 127.0.0.1 for {} s of publishing…",
            args.nodes, args.processes, args.duration_s
        );
    }
    let report = tagma_vcube_node::demo::run(&super::tagma_exe()?, &options)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.table());
    }
    if !report.passed() {
        std::process::exit(1);
    }
    Ok(())
}

fn workload(args: &SimArgs) -> Result<Workload> {
    if !(args.bandwidth_mbit > 0.0 && args.bandwidth_mbit.is_finite()) {
        bail!("--bandwidth-mbit must be above 0");
    }
    if !(0.0 <= args.latency_min_ms && args.latency_min_ms <= args.latency_max_ms) {
        bail!("--latency-min-ms must be at least 0 and at most --latency-max-ms");
    }
    let mut w = Workload {
        nodes: args.nodes,
        topics: args.topics,
        subscribers_pct: args.subscribers_pct,
        publishers: 1,
        ops_per_s: args.ops_per_sec,
        duration_s: args.duration_s,
        payload_bytes: args.payload_bytes,
        crash_pct: args.crash_pct,
        join_pct: args.join_pct,
        churn_pct: args.churn_pct,
        drain_s: args.drain_s,
        link: LinkModel {
            latency_min_ms: args.latency_min_ms,
            latency_max_ms: args.latency_max_ms,
            bandwidth_bytes_per_s: (args.bandwidth_mbit * 125_000.0) as u64,
            send_cost_us: args.send_cost_us,
            receive_cost_us: args.receive_cost_us,
            loss: args.loss_pct / 100.0,
        },
        seed: args.seed,
    };
    w.publishers = match (args.publishers, args.publishers_pct) {
        (Some(n), _) => n,
        (None, Some(pct)) => {
            if !(pct > 0.0 && pct <= 100.0) {
                bail!("--publishers-pct must be above 0 and at most 100");
            }
            ((f64::from(w.subscribers()) * pct / 100.0).round() as u32).max(1)
        }
        (None, None) => 1,
    };
    if w.publishers > w.subscribers() {
        bail!(
            "--publishers {} is more than the {} subscribers of a topic: lower it or raise \
             --subscribers-pct",
            w.publishers,
            w.subscribers()
        );
    }
    w.check()?;
    Ok(w)
}

fn sim(args: SimArgs) -> Result<()> {
    let w = workload(&args)?;
    if args.protocol.is_empty() {
        bail!("--protocol needs at least one of vcube, plumtree, flood");
    }
    let mut runs = Vec::new();
    for p in &args.protocol {
        let kind = p.kind();
        if !args.json {
            eprintln!("simulating {} on {} nodes…", kind.name(), w.nodes);
        }
        let report = if args.threads == 0 {
            tagma_crdt_sim::run(kind, &w, Default::default())?
        } else {
            tagma_crdt_sim::run_on(kind, &w, Default::default(), args.threads)?
        };
        runs.push(Run {
            protocol: kind.name(),
            report,
        });
    }
    if let Some(path) = &args.plot {
        let chart = tagma_bench::plot::Chart {
            title: format!(
                "Delivery latency, {} nodes, {} publishers per topic",
                w.nodes, w.publishers
            ),
            x_label: "latency (ms)".into(),
            y_label: "share of deliveries".into(),
            integer_x: false,
            series: (runs.iter())
                .map(|r| tagma_bench::plot::Series {
                    label: r.protocol.to_string(),
                    points: r.report.latency_cdf.clone(),
                })
                .collect(),
            events: Vec::new(),
        };
        tagma_bench::plot::draw(&chart, path)?;
        if !args.json {
            eprintln!("wrote {}", path.display());
        }
    }
    // VCube-Sync must converge; the baselines' failure to is a finding, not an error.
    let vcube_failed = (runs.iter()).any(|r| r.protocol == "vcube" && !r.report.convergent);
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&SimOutput { workload: &w, runs })?
        );
    } else {
        println!("{}", table(&w, &runs));
    }
    if vcube_failed {
        std::process::exit(1);
    }
    Ok(())
}

fn table(w: &Workload, runs: &[Run]) -> String {
    let mut out = format!(
        "{} nodes, {} topic(s), {:.0}% subscribers, {} publisher(s) per topic at {} op/s for {} s, {} B values, crash {}%, loss {}%, join {}%, churn {}%, seed {}\n",
        w.nodes,
        w.topics,
        w.subscribers_pct,
        w.publishers,
        w.ops_per_s,
        w.duration_s,
        w.payload_bytes,
        w.crash_pct,
        w.link.loss * 100.0,
        w.join_pct,
        w.churn_pct,
        w.seed
    );
    out.push_str(&format!("  {:<22}", ""));
    for r in runs {
        out.push_str(&format!("{:>16}", r.protocol));
    }
    out.push('\n');
    type Cell = fn(&Report) -> String;
    let rows: [(&str, Cell); 18] = [
        ("convergent", |r| r.convergent.to_string()),
        ("causal violations", |r| r.causal_violations.to_string()),
        ("duplicates", |r| r.duplicates.to_string()),
        ("operations", |r| r.operations.to_string()),
        ("latency mean (ms)", |r| format!("{:.1}", r.latency_ms_mean)),
        ("latency p99 (ms)", |r| format!("{:.0}", r.latency_ms_p99)),
        ("max hops", |r| r.max_hops.to_string()),
        ("messages", |r| r.messages_total.to_string()),
        ("bytes total", |r| r.bytes_total.to_string()),
        ("  payload", |r| r.bytes_payload.to_string()),
        ("  causal metadata", |r| r.bytes_metadata.to_string()),
        ("    as vector clocks", |r| {
            r.bytes_metadata_as_vector_clocks.to_string()
        }),
        ("  control", |r| r.bytes_control.to_string()),
        ("  failure detector", |r| r.bytes_detector.to_string()),
        ("bytes vs minimum", |r| {
            format!("{:.3}×", r.bytes_vs_minimum)
        }),
        ("snapshots installed", |r| r.snapshots_installed.to_string()),
        ("subscriptions changed", |r| {
            format!(
                "{} ({} refused)",
                r.subscription_changes, r.subscription_changes_refused
            )
        }),
        ("wall time (s)", |r| format!("{:.2}", r.sim_wall_s)),
    ];
    for (name, cell) in rows {
        out.push_str(&format!("  {name:<22}"));
        for r in runs {
            out.push_str(&format!("{:>16}", cell(&r.report)));
        }
        out.push('\n');
    }
    for r in runs {
        for d in &r.report.divergence {
            out.push_str(&format!("  {}: {d}\n", r.protocol));
        }
    }
    out.push_str(&format!(
        "  (bytes vs minimum: against sending each operation once to every other subscriber; causal order compared at {} node(s))",
        runs.first().map_or(0, |r| r.report.causal_witnesses)
    ));
    out
}
