//! PNG line charts of benchmark sweeps (the paper's Figures 4–6), drawn with `plotters`.
//!
//! Text is rendered with DejaVu Sans, embedded in the binary (see
//! `assets/LICENSE-DejaVu.txt`), so drawing needs no system font.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::report::BenchReport;

/// Width and height of the PNGs, in pixels.
pub const SIZE: (u32, u32) = (1000, 700);

/// DejaVu Sans, registered as the `sans-serif` family.
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Line colours, one per series (cycled).
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// One line of a chart: its legend label and its points, drawn in the given order.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart: every series drawn as a line with a marker at each point.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// The x values are small integers (f, thread counts): the axis shows only integer
    /// ticks and leaves half a unit of margin on each side. Otherwise the axis starts at 0.
    pub integer_x: bool,
    pub series: Vec<Series>,
    /// Events marked on the x axis: a dashed vertical line and a label each (a timeline's
    /// joins, crashes, restarts).
    pub events: Vec<(f64, String)>,
}

impl Chart {
    /// Throughput over a run (`points`: seconds, operations per second) with its events
    /// marked: the timelines of the failure scenarios.
    pub fn throughput_timeline(
        title: String,
        points: Vec<(f64, f64)>,
        events: Vec<(f64, String)>,
    ) -> Chart {
        Chart {
            title,
            x_label: "time (s)".into(),
            y_label: "acknowledged operations per second".into(),
            integer_x: false,
            series: vec![Series {
                label: "throughput".into(),
                points,
            }],
            events,
        }
    }
}

/// Drawing or writing the PNG failed.
#[derive(Debug)]
pub struct PlotError(String);

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot draw the plot: {}", self.0)
    }
}

impl std::error::Error for PlotError {}

fn err(e: impl fmt::Display) -> PlotError {
    PlotError(e.to_string())
}

fn register_fonts() -> Result<(), PlotError> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| PlotError("the embedded DejaVu Sans font is invalid".into()));
    });
    result
}

/// Axis ranges covering every point: y from 0 to 10 % above the largest value; x from 0
/// (or, for `integer_x`, half a unit below the smallest value) to a little past the largest.
fn ranges(chart: &Chart) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let points = || chart.series.iter().flat_map(|s| s.points.iter());
    let finite = |v: f64| if v.is_finite() { v } else { 0.0 };
    let x_max = points().map(|p| finite(p.0)).fold(f64::MIN, f64::max);
    let x_min = points().map(|p| finite(p.0)).fold(f64::MAX, f64::min);
    let y_max = points().map(|p| finite(p.1)).fold(0.0, f64::max);
    let y = 0.0..if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let x = if x_max < x_min {
        0.0..1.0
    } else if chart.integer_x {
        (x_min - 0.5)..(x_max + 0.5)
    } else {
        0.0..if x_max > 0.0 { x_max * 1.1 } else { 1.0 }
    };
    (x, y)
}

/// Draws `chart` into a [`SIZE`] PNG at `path`.
pub fn draw(chart: &Chart, path: &Path) -> Result<(), PlotError> {
    register_fonts()?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (x_range, y_range) = ranges(chart);
    let x_range_end = x_range.end;
    let y_decimals = if y_range.end < 10.0 { 1 } else { 0 };
    let x_ticks = if chart.integer_x {
        ((x_range.end - x_range.start).round() as usize).max(1)
    } else {
        10
    };
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 26))
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, y_range)
        .map_err(err)?;
    let integer_x = chart.integer_x;
    // One decimal on a short throughput axis, where whole numbers would repeat.
    let x_decimals = if x_range_end < 10.0 { 1 } else { 0 };
    ctx.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .axis_desc_style(("sans-serif", 20))
        .label_style(("sans-serif", 16))
        .x_labels(x_ticks)
        .x_label_formatter(&|v: &f64| {
            if integer_x {
                if (v - v.round()).abs() < 1e-6 {
                    format!("{}", v.round() as i64)
                } else {
                    String::new()
                }
            } else {
                format!("{v:.x_decimals$}")
            }
        })
        .y_label_formatter(&|v: &f64| format!("{v:.y_decimals$}"))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(err)?;
    for (i, series) in chart.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let line = color.stroke_width(3);
        ctx.draw_series(LineSeries::new(series.points.iter().copied(), line))
            .map_err(err)?
            .label(series.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
            });
        ctx.draw_series(PointSeries::of_element(
            series.points.iter().copied(),
            6,
            color.filled(),
            &|c, s, st| Circle::new(c, s, st),
        ))
        .map_err(err)?;
    }
    let y_top = ctx.y_range().end;
    for (i, (x, label)) in chart.events.iter().enumerate() {
        let grey = RGBColor(90, 90, 90);
        // Dashes: short segments from the axis to the top.
        let dashes = 40;
        ctx.draw_series((0..dashes).step_by(2).map(|k| {
            let (a, b) = (
                y_top * k as f64 / dashes as f64,
                y_top * (k + 1) as f64 / dashes as f64,
            );
            PathElement::new(vec![(*x, a), (*x, b)], grey.stroke_width(2))
        }))
        .map_err(err)?;
        // Labels step down so that close events stay readable.
        let y = y_top * (0.97 - 0.06 * (i % 4) as f64);
        ctx.draw_series(std::iter::once(Text::new(
            format!(" {label}"),
            (*x, y),
            ("sans-serif", 16).into_font().color(&grey),
        )))
        .map_err(err)?;
    }
    if chart.series.is_empty() {
        root.present().map_err(err)?;
        return Ok(());
    }
    ctx.configure_series_labels()
        .position(if chart.events.is_empty() {
            SeriesLabelPosition::UpperLeft
        } else {
            SeriesLabelPosition::LowerRight
        })
        .label_font(("sans-serif", 18))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// `bft n=4, f=1` style description of the first report's cluster.
fn cluster_of(r: &BenchReport) -> String {
    format!("{} n={} f={}", r.mode, r.n, r.f)
}

fn kops(r: &BenchReport) -> f64 {
    r.throughput_ops_s / 1000.0
}

/// Figure 4: median latency against throughput, one line per payload size; the points of a
/// line are the client counts, in increasing order.
pub fn latency_chart(reports: &[BenchReport]) -> Chart {
    let mut by_payload: BTreeMap<usize, Vec<&BenchReport>> = BTreeMap::new();
    for r in reports {
        by_payload.entry(r.request_bytes).or_default().push(r);
    }
    let series = by_payload
        .into_iter()
        .map(|(payload, mut rs)| {
            rs.sort_by_key(|r| r.clients);
            Series {
                label: format!("{payload}/{payload} bytes"),
                points: rs.iter().map(|r| (kops(r), r.latency_ms.p50)).collect(),
            }
        })
        .collect();
    let mut clients: Vec<usize> = reports.iter().map(|r| r.clients).collect();
    clients.sort_unstable();
    clients.dedup();
    let clients: Vec<String> = clients.iter().map(|c| c.to_string()).collect();
    Chart {
        title: format!(
            "Latency vs throughput ({}; {} clients)",
            reports.first().map(cluster_of).unwrap_or_default(),
            clients.join(", ")
        ),
        x_label: "Throughput (kops/s)".into(),
        y_label: "Median latency (ms)".into(),
        integer_x: false,
        events: Vec::new(),
        series,
    }
}

/// Figure 5: throughput against f, one line per mode (bft: n = 3f+1, cft: n = 2f+1).
pub fn f_chart(reports: &[BenchReport]) -> Chart {
    let mut by_mode: BTreeMap<&str, Vec<&BenchReport>> = BTreeMap::new();
    for r in reports {
        by_mode.entry(r.mode.as_str()).or_default().push(r);
    }
    let series = by_mode
        .into_iter()
        .map(|(mode, mut rs)| {
            rs.sort_by_key(|r| r.f);
            let n = if mode == "cft" { "2f+1" } else { "3f+1" };
            Series {
                label: format!("{} (n = {n})", mode.to_uppercase()),
                points: rs.iter().map(|r| (f64::from(r.f), kops(r))).collect(),
            }
        })
        .collect();
    let first = reports.first();
    Chart {
        title: format!(
            "Throughput vs f ({}/{} bytes, {} clients)",
            first.map_or(0, |r| r.request_bytes),
            first.map_or(0, |r| r.reply_bytes),
            first.map_or(0, |r| r.clients)
        ),
        x_label: "Faults tolerated f".into(),
        y_label: "Throughput (kops/s)".into(),
        integer_x: true,
        events: Vec::new(),
        series,
    }
}

/// Figure 6: throughput of signed requests against `limits.signature_threads`, one line
/// per cluster configuration.
pub fn signature_threads_chart(reports: &[BenchReport]) -> Chart {
    let mut by_cluster: BTreeMap<String, Vec<&BenchReport>> = BTreeMap::new();
    for r in reports {
        by_cluster.entry(cluster_of(r)).or_default().push(r);
    }
    let series = by_cluster
        .into_iter()
        .map(|(cluster, mut rs)| {
            rs.sort_by_key(|r| r.signature_threads);
            Series {
                label: format!("{cluster}, signed requests"),
                points: rs
                    .iter()
                    .map(|r| (r.signature_threads as f64, kops(r)))
                    .collect(),
            }
        })
        .collect();
    let first = reports.first();
    Chart {
        title: format!(
            "Throughput vs signature-verification threads ({}/{} bytes, {} clients)",
            first.map_or(0, |r| r.request_bytes),
            first.map_or(0, |r| r.reply_bytes),
            first.map_or(0, |r| r.clients)
        ),
        x_label: "Signature-verification threads (limits.signature_threads)".into(),
        y_label: "Throughput (kops/s)".into(),
        integer_x: true,
        events: Vec::new(),
        series,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::Latency;

    /// A report with the given figures (everything else zero).
    pub(crate) fn report(
        mode: &str,
        f: u32,
        payload: usize,
        clients: usize,
        threads: usize,
        ops: f64,
        p50: f64,
    ) -> BenchReport {
        BenchReport {
            mode: mode.into(),
            n: (if mode == "cft" { 2 } else { 3 }) * f as usize + 1,
            f,
            workload: "micro".into(),
            ordered: true,
            signed: threads > 0,
            signature_threads: threads,
            batch_fill_wait_ms: 2,
            request_bytes: payload,
            reply_bytes: payload,
            clients,
            duration_s: 3.0,
            throughput_ops_s: ops,
            client_throughput_ops_s: ops,
            unreplicated_run: false,
            unreplicated_ops_s: 0.0,
            unreplicated_client_ops_s: 0.0,
            ratio_vs_unreplicated: 0.0,
            latency_ms: Latency {
                p50,
                p90: p50,
                p99: p50,
                p999: p50,
            },
            unreplicated_latency_ms: Latency::default(),
            replica_rss_mb_max: 0.0,
            cpu_s_per_kop: 0.0,
            batch_mean: 0.0,
            durability: "none".into(),
            no_durability_ops_s: None,
            ratio_vs_no_durability: None,
            instance_ms: None,
            no_durability_instance_ms: None,
            vote_flush_ms_mean: 0.0,
            log_flush_ms_mean: 0.0,
            unreplicated_rss_mb: 0.0,
            unreplicated_cpu_s_per_kop: 0.0,
            errors: 0,
        }
    }

    fn check_png(chart: &Chart) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("figure.png");
        draw(chart, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
        assert!(bytes.len() > 8 * 1024, "only {} bytes", bytes.len());
    }

    #[test]
    fn draws_the_latency_figure() {
        let mut reports = Vec::new();
        for (i, payload) in [0, 100, 1024, 4096].into_iter().enumerate() {
            for (j, clients) in [8, 32, 128].into_iter().enumerate() {
                let ops = 20_000.0 / (i + 1) as f64 * (1.0 + j as f64 * 0.3);
                reports.push(report("bft", 1, payload, clients, 0, ops, 1.0 + j as f64));
            }
        }
        reports.reverse();
        let chart = latency_chart(&reports);
        assert_eq!(chart.series.len(), 4);
        assert_eq!(chart.series[0].label, "0/0 bytes");
        // Points in client order: 8, 32, 128.
        assert_eq!(chart.series[0].points[0], (20.0, 1.0));
        assert_eq!(chart.series[3].points[2].1, 3.0);
        assert!(
            chart.title.contains("8, 32, 128 clients"),
            "{}",
            chart.title
        );
        check_png(&chart);
    }

    #[test]
    fn draws_the_f_figure() {
        let reports = [
            report("bft", 2, 0, 64, 0, 12_000.0, 4.0),
            report("cft", 1, 0, 64, 0, 26_000.0, 2.0),
            report("bft", 1, 0, 64, 0, 19_000.0, 3.0),
            report("cft", 2, 0, 64, 0, 18_000.0, 3.0),
        ];
        let chart = f_chart(&reports);
        assert_eq!(chart.series.len(), 2);
        assert_eq!(chart.series[0].label, "BFT (n = 3f+1)");
        assert_eq!(chart.series[0].points, vec![(1.0, 19.0), (2.0, 12.0)]);
        assert_eq!(chart.series[1].points, vec![(1.0, 26.0), (2.0, 18.0)]);
        check_png(&chart);
    }

    #[test]
    fn draws_the_signature_threads_figure() {
        let reports = [
            report("bft", 1, 0, 64, 4, 9_000.0, 6.0),
            report("bft", 1, 0, 64, 1, 5_000.0, 9.0),
            report("bft", 1, 0, 64, 2, 8_000.0, 7.0),
        ];
        let chart = signature_threads_chart(&reports);
        assert_eq!(chart.series.len(), 1);
        assert_eq!(
            chart.series[0].points,
            vec![(1.0, 5.0), (2.0, 8.0), (4.0, 9.0)]
        );
        check_png(&chart);
    }

    #[test]
    fn draws_a_timeline_with_events() {
        let chart = Chart {
            title: "timeline".into(),
            x_label: "time (s)".into(),
            y_label: "ops/s".into(),
            integer_x: false,
            series: vec![Series {
                label: "throughput".into(),
                points: (0..30)
                    .map(|t| (t as f64, 1000.0 + (t % 7) as f64 * 50.0))
                    .collect(),
            }],
            events: vec![
                (5.0, "replica 4 joins".into()),
                (12.5, "leader crashes".into()),
            ],
        };
        check_png(&chart);
    }

    #[test]
    fn empty_and_degenerate_charts_still_draw() {
        check_png(&latency_chart(&[]));
        check_png(&f_chart(&[report("bft", 1, 0, 8, 0, 0.0, 0.0)]));
    }
}
