//! Percentiles, per-process resource figures read from `/proc`, and the benchmark report
//! (one JSON object per configuration, or a human table).

use serde::{Deserialize, Serialize};

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on every Linux
/// architecture that exposes it to user space).
const USER_HZ: f64 = 100.0;

/// The percentile `per_mille`/10 (0 < per_mille ≤ 1000; 999 is p99.9) of `sorted` by the
/// nearest-rank method; 0 when empty. Integer arithmetic, so p99.9 of 1000 values is the
/// 999th exactly.
pub fn percentile(sorted: &[u64], per_mille: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    debug_assert!(sorted.windows(2).all(|w| w[0] <= w[1]), "not sorted");
    let rank = (per_mille * sorted.len()).div_ceil(1000);
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
}

impl Latency {
    /// Percentiles of latencies given in microseconds, sorted.
    pub fn from_sorted_us(sorted_us: &[u64]) -> Self {
        let ms = |per_mille| percentile(sorted_us, per_mille) as f64 / 1000.0;
        Latency {
            p50: ms(500),
            p90: ms(900),
            p99: ms(990),
            p999: ms(999),
        }
    }
}

/// CPU seconds (user + system) a process used so far, from `/proc/<pid>/stat`.
pub fn process_cpu_s(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_s(&text)
}

/// Peak resident set size (`VmHWM`) of a process in MiB, from `/proc/<pid>/status`.
pub fn process_peak_rss_mb(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status_hwm_mb(&text)
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line, in seconds. The command
/// name (field 2) may contain spaces and parentheses, so fields are counted after its last
/// `)`.
fn parse_stat_cpu_s(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field k is at index k - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

fn parse_status_hwm_mb(status: &str) -> Option<f64> {
    Some(crate::process_sample::status_field(status, "VmHWM")? as f64 / 1024.0)
}

/// One configuration's figures: the replicated run and its unreplicated baseline.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchReport {
    /// `bft` or `cft`.
    pub mode: String,
    pub n: usize,
    pub f: u32,
    /// `micro` or `kv`.
    pub workload: String,
    pub ordered: bool,
    pub signed: bool,
    /// `limits.signature_threads` of the replicas (they use it only when `signed`).
    pub signature_threads: usize,
    /// `batch.fill_wait_ms` of the replicas: how long a leader may hold a batch to fill it.
    #[serde(default)]
    pub batch_fill_wait_ms: u64,
    pub request_bytes: usize,
    pub reply_bytes: usize,
    pub clients: usize,
    pub duration_s: f64,
    /// Server side: requests the leader executed per second over the measurement window.
    pub throughput_ops_s: f64,
    /// Client side: requests completed per second over the measurement window.
    pub client_throughput_ops_s: f64,
    /// Whether the unreplicated baseline ran (`--no-baseline` skips it; its figures are
    /// then 0). Reports written before the flag existed lack the field: they had a baseline.
    #[serde(default = "always")]
    pub unreplicated_run: bool,
    /// Server-side throughput of the unreplicated server under the same load.
    pub unreplicated_ops_s: f64,
    pub unreplicated_client_ops_s: f64,
    pub ratio_vs_unreplicated: f64,
    pub latency_ms: Latency,
    pub unreplicated_latency_ms: Latency,
    /// Largest peak RSS (`VmHWM`) over the replicas.
    pub replica_rss_mb_max: f64,
    /// CPU seconds of all replicas together per 1000 requests executed in the window.
    pub cpu_s_per_kop: f64,
    /// Requests ordered per consensus instance at the leader in the window (the batch size
    /// the load produced; per-instance costs are spread over this many requests).
    #[serde(default)]
    pub batch_mean: f64,
    pub unreplicated_rss_mb: f64,
    pub unreplicated_cpu_s_per_kop: f64,
    /// `none` or `fsync` (`[storage] durability` of the replicated run).
    #[serde(default = "no_durability")]
    pub durability: String,
    /// With durability: the same replicated configuration without it, measured in the same
    /// invocation, and the ratio of the two (null when not measured).
    #[serde(default)]
    pub no_durability_ops_s: Option<f64>,
    #[serde(default)]
    pub ratio_vs_no_durability: Option<f64>,
    /// With durability, where the ratio goes: the mean time per consensus instance at the
    /// leader (window / instances decided) with and without durability (null when not
    /// measured), and the leader's mean vote write-and-flush (before its ACCEPT) and log
    /// write-and-flush (before its next proposal: storage back-pressure), all in ms. Both are
    /// on every instance's path.
    #[serde(default)]
    pub instance_ms: Option<f64>,
    #[serde(default)]
    pub no_durability_instance_ms: Option<f64>,
    #[serde(default)]
    pub vote_flush_ms_mean: f64,
    #[serde(default)]
    pub log_flush_ms_mean: f64,
    /// Failed invocations (all runs).
    pub errors: u64,
}

fn no_durability() -> String {
    "none".into()
}

fn always() -> bool {
    true
}

impl BenchReport {
    /// The human-readable table.
    pub fn table(&self) -> String {
        let table = self.full_table();
        if self.unreplicated_run {
            return table;
        }
        // Drop the baseline's row and ratio (it did not run); keep the durability line.
        let lines: Vec<&str> = table.lines().collect();
        let durability = lines
            .iter()
            .skip(5)
            .map(|l| format!("\n{l}"))
            .collect::<String>();
        format!(
            "{}\nunreplicated baseline skipped (--no-baseline)   errors {}{durability}",
            lines[..3.min(lines.len())].join("\n"),
            self.errors
        )
    }

    fn full_table(&self) -> String {
        let l = &self.latency_ms;
        let u = &self.unreplicated_latency_ms;
        format!(
            "{workload} {order}{signed} {req}/{rep} bytes, {clients} clients, {dur:.0} s window\n\
             {h:<14} {:>12} {:>12} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10}\n\
             {:<14} {:>12.0} {:>12.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.1} {:>10.3}\n\
             {:<14} {:>12.0} {:>12.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.1} {:>10.3}\n\
             ratio_vs_unreplicated {:.3}   batch {:.1} requests/instance   errors {}{durable}",
            "ops/s(server)",
            "ops/s(client)",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "p99.9 ms",
            "rss MiB",
            "cpu s/kop",
            format!("{} n={} f={}", self.mode, self.n, self.f),
            self.throughput_ops_s,
            self.client_throughput_ops_s,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            self.replica_rss_mb_max,
            self.cpu_s_per_kop,
            "unreplicated",
            self.unreplicated_ops_s,
            self.unreplicated_client_ops_s,
            u.p50,
            u.p90,
            u.p99,
            u.p999,
            self.unreplicated_rss_mb,
            self.unreplicated_cpu_s_per_kop,
            self.ratio_vs_unreplicated,
            self.batch_mean,
            self.errors,
            workload = self.workload,
            order = if self.ordered { "ordered" } else { "unordered" },
            signed = if self.signed {
                format!(" signed ({} signature threads)", self.signature_threads)
            } else {
                String::new()
            },
            req = self.request_bytes,
            rep = self.reply_bytes,
            durable = if self.durability == "none" {
                String::new()
            } else {
                format!(
                    "\ndurability {}: {:.0} ops/s without it, ratio_vs_no_durability {:.3}\n\
                     per instance at the leader: {:.2} ms ({:.2} ms without durability); \
                     vote flush {:.2} ms, log flush {:.2} ms (means)",
                    self.durability,
                    self.no_durability_ops_s.unwrap_or(0.0),
                    self.ratio_vs_no_durability.unwrap_or(0.0),
                    self.instance_ms.unwrap_or(0.0),
                    self.no_durability_instance_ms.unwrap_or(0.0),
                    self.vote_flush_ms_mean,
                    self.log_flush_ms_mean
                )
            },
            clients = self.clients,
            dur = self.duration_s,
            h = "",
        )
    }
}

/// The progress bar of filling a cluster's state with `len` items (hidden with `hidden`:
/// JSON output).
pub fn fill_bar(len: u64, hidden: bool) -> indicatif::ProgressBar {
    let bar = if hidden {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(len)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix("filling");
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&v, 500), 500);
        assert_eq!(percentile(&v, 900), 900);
        assert_eq!(percentile(&v, 990), 990);
        assert_eq!(percentile(&v, 999), 999);
        assert_eq!(percentile(&v, 1000), 1000);
        assert_eq!(percentile(&[7], 999), 7);
        assert_eq!(percentile(&[], 500), 0);
        let l = Latency::from_sorted_us(&[1000, 2000, 3000, 4000]);
        assert_eq!((l.p50, l.p90, l.p99, l.p999), (2.0, 4.0, 4.0, 4.0));
    }

    #[test]
    fn parses_proc_files() {
        let stat =
            "1234 (tagma (x) y) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_stat_cpu_s(stat), Some(3.0));
        assert_eq!(parse_stat_cpu_s("garbage"), None);
        let status = "Name:\ttagma\nVmPeak:\t  9000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(parse_status_hwm_mb(status), Some(2.0));
        assert_eq!(parse_status_hwm_mb("Name: x\n"), None);
    }

    #[test]
    fn table_without_baseline_says_so() {
        let mut r = crate::plot::tests::report("bft", 1, 100, 8, 0, 1000.0, 2.0);
        r.unreplicated_run = true;
        let full = r.table();
        assert_eq!(full.lines().count(), 5, "{full}");
        assert!(full.contains("unreplicated") && full.contains("ratio_vs_unreplicated"));
        r.unreplicated_run = false;
        let short = r.table();
        assert_eq!(short.lines().count(), 4, "{short}");
        assert!(short.contains("bft n=4 f=1"));
        assert!(short.contains("baseline skipped"));
        assert!(!short.contains("ratio_vs_unreplicated"));
        // With durability, its line survives either way.
        r.durability = "fsync".into();
        r.no_durability_ops_s = Some(1250.0);
        r.ratio_vs_no_durability = Some(0.8);
        r.instance_ms = Some(3.5);
        r.no_durability_instance_ms = Some(2.25);
        r.vote_flush_ms_mean = 0.4;
        r.log_flush_ms_mean = 0.125;
        let durable = r.table();
        assert_eq!(durable.lines().count(), 6, "{durable}");
        assert!(
            durable.contains("ratio_vs_no_durability 0.800"),
            "{durable}"
        );
        assert!(
            durable.contains(
                "3.50 ms (2.25 ms without durability); vote flush 0.40 ms, log flush 0.12 ms"
            ),
            "{durable}"
        );
        r.unreplicated_run = true;
        assert_eq!(r.table().lines().count(), 7);
    }

    #[test]
    fn own_process_figures_are_readable() {
        let pid = std::process::id();
        assert!(process_cpu_s(pid).is_some_and(|s| s >= 0.0));
        assert!(process_peak_rss_mb(pid).is_some_and(|mb| mb > 0.0));
    }
}
