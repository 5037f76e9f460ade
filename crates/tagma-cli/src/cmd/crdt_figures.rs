//! `tagma crdt figures`: the VCube-Sync paper's comparisons in simulation — delivery latency
//! and bytes against the number of nodes, for one publisher (all nodes or a quarter of them
//! subscribed) and for a quarter or all of the nodes publishing — VCube-Sync against
//! Plumtree and flooding on the same workloads, as a table and plots.

use std::path::PathBuf;

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tagma_bench::plot::{Chart, Series, draw};
use tagma_crdt_sim::{ProtocolKind, Report, Workload};

#[derive(clap::Args)]
pub struct FiguresArgs {
    /// Node counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [50u32, 100, 200, 400, 1024])]
    pub nodes: Vec<u32>,
    /// Simulated seconds of publishing per run.
    #[arg(long, default_value_t = 20.0)]
    pub duration_s: f64,
    /// Runs with every node publishing stop at this many nodes (they grow as the square of
    /// the nodes).
    #[arg(long, default_value_t = 1_024)]
    pub all_publishers_max_nodes: u32,
    /// Draws each run's subscribers, publishers, link delays and operations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write latency and bytes plots (PNG, one pair per scenario) into this directory.
    #[arg(long)]
    pub plot_dir: Option<PathBuf>,
    /// Print the results as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// A scenario of the comparison.
struct Scenario {
    name: &'static str,
    title: &'static str,
    subscribers_pct: f64,
    publishers_pct: Option<f64>,
}

const SCENARIOS: [Scenario; 4] = [
    Scenario {
        name: "one-publisher",
        title: "one publisher, every node subscribed",
        subscribers_pct: 100.0,
        publishers_pct: None,
    },
    Scenario {
        name: "one-publisher-25pct-subscribers",
        title: "one publisher, 25 % of the nodes subscribed",
        subscribers_pct: 25.0,
        publishers_pct: None,
    },
    Scenario {
        name: "25pct-publishers",
        title: "25 % of the nodes publishing",
        subscribers_pct: 100.0,
        publishers_pct: Some(25.0),
    },
    Scenario {
        name: "all-publishers",
        title: "every node publishing",
        subscribers_pct: 100.0,
        publishers_pct: Some(100.0),
    },
];

const PROTOCOLS: [ProtocolKind; 3] = [
    ProtocolKind::Vcube,
    ProtocolKind::Plumtree,
    ProtocolKind::Flood,
];

#[derive(Serialize)]
struct Point {
    scenario: &'static str,
    nodes: u32,
    publishers: u32,
    protocol: &'static str,
    report: Report,
}

pub fn run(args: FiguresArgs) -> Result<()> {
    if args.nodes.is_empty() || args.nodes.iter().any(|&n| n < 8) {
        bail!("--nodes needs node counts of at least 8");
    }
    let mut plan = Vec::new();
    for s in &SCENARIOS {
        for &n in &args.nodes {
            if s.publishers_pct == Some(100.0) && n > args.all_publishers_max_nodes {
                continue;
            }
            let mut w = Workload {
                nodes: n,
                subscribers_pct: s.subscribers_pct,
                duration_s: args.duration_s,
                drain_s: 10.0,
                seed: args.seed,
                ..Workload::default()
            };
            w.publishers = s.publishers_pct.map_or(1, |p| {
                ((f64::from(w.subscribers()) * p / 100.0).round() as u32).max(1)
            });
            w.check()?;
            plan.push((s, w));
        }
    }
    let bar = ProgressBar::new((plan.len() * PROTOCOLS.len()) as u64);
    if args.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}").expect("a valid template"),
    );
    let mut points = Vec::new();
    for (s, w) in &plan {
        for p in PROTOCOLS {
            bar.set_message(format!("{} {} nodes {}", s.name, w.nodes, p.name()));
            let report = tagma_crdt_sim::run(p, w, Default::default())?;
            points.push(Point {
                scenario: s.name,
                nodes: w.nodes,
                publishers: w.publishers,
                protocol: p.name(),
                report,
            });
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if let Some(dir) = &args.plot_dir {
        std::fs::create_dir_all(dir)?;
        for s in &SCENARIOS {
            let metric = |name: &str, f: fn(&Report) -> f64| Chart {
                title: format!("{name}, {}", s.title),
                x_label: "nodes".into(),
                y_label: name.into(),
                integer_x: false,
                series: (PROTOCOLS.iter())
                    .map(|p| Series {
                        label: p.name().into(),
                        points: (points.iter())
                            .filter(|pt| pt.scenario == s.name && pt.protocol == p.name())
                            .map(|pt| (f64::from(pt.nodes), f(&pt.report)))
                            .collect(),
                    })
                    .collect(),
                events: Vec::new(),
            };
            let latency = metric("mean delivery latency (ms)", |r| r.latency_ms_mean);
            let bytes = metric("bytes sent (MB)", |r| r.bytes_total as f64 / 1e6);
            draw(&latency, &dir.join(format!("crdt-{}-latency.png", s.name)))?;
            draw(&bytes, &dir.join(format!("crdt-{}-bytes.png", s.name)))?;
            if s.publishers_pct.is_some() {
                let metadata = metadata_chart(s, &points);
                draw(
                    &metadata,
                    &dir.join(format!("crdt-{}-metadata.png", s.name)),
                )?;
            }
        }
        if !args.json {
            eprintln!("wrote the plots into {}", dir.display());
        }
    }
    if args.json {
        println!("{}", serde_json::to_string(&points)?);
        return Ok(());
    }
    println!(
        "{:<34} {:>6} {:>5} {:>9} {:>11} {:>11} {:>12} {:>10} {:>8} {:>12} {:>12}",
        "scenario",
        "nodes",
        "pubs",
        "protocol",
        "latency ms",
        "p99 ms",
        "bytes",
        "vs min",
        "dups",
        "metadata",
        "as clocks"
    );
    for pt in &points {
        let r = &pt.report;
        println!(
            "{:<34} {:>6} {:>5} {:>9} {:>11.1} {:>11.0} {:>12} {:>9.3}× {:>8} {:>12} {:>12}",
            pt.scenario,
            pt.nodes,
            pt.publishers,
            pt.protocol,
            r.latency_ms_mean,
            r.latency_ms_p99,
            r.bytes_total,
            r.bytes_vs_minimum,
            r.duplicates,
            r.bytes_metadata,
            r.bytes_metadata_as_vector_clocks
        );
    }
    Ok(())
}

/// VCube-Sync's causal metadata against the number of nodes: its barriers, and vector
/// clocks on the same messages instead.
fn metadata_chart(s: &Scenario, points: &[Point]) -> Chart {
    let vcube = || {
        (points.iter())
            .filter(|pt| pt.scenario == s.name && pt.protocol == ProtocolKind::Vcube.name())
    };
    let series = |label: &str, f: fn(&Report) -> u64| Series {
        label: label.into(),
        points: vcube()
            .map(|pt| (f64::from(pt.nodes), f(&pt.report) as f64 / 1e6))
            .collect(),
    };
    Chart {
        title: format!("VCube-Sync's causal metadata, {}", s.title),
        x_label: "nodes".into(),
        y_label: "causal metadata (MB)".into(),
        integer_x: false,
        series: vec![
            series("causal barriers", |r| r.bytes_metadata),
            series("vector clocks instead", |r| {
                r.bytes_metadata_as_vector_clocks
            }),
        ],
        events: Vec::new(),
    }
}
