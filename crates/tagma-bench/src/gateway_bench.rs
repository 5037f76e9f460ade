//! `tagma bench gateway`: redis-benchmark, unmodified, against the gateway in front of a
//! local BFT cluster (n = 4) and against a real `redis-server` started beside it in the same
//! invocation; SET and GET of `--value-bytes` values at each pipeline depth, and the ratio.
//! An unreplicated Redis is the ceiling, not the goal: the gateway's commands are ordered by
//! Byzantine consensus among four replica processes on the same machine.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tagma_cluster::LocalCluster;
use tagma_core::Mode;

use crate::gateway::{GatewaySetup, start};

/// What to measure.
#[derive(Clone, Debug)]
pub struct GatewayBenchOptions {
    pub connections: usize,
    pub pipelines: Vec<usize>,
    /// Requests of each test at pipeline depth 1 (deeper pipelines run 16 times as many).
    pub requests: usize,
    pub value_bytes: usize,
}

/// One redis-benchmark test.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    pub test: String,
    pub pipeline: usize,
    pub tagma_ops_per_s: f64,
    pub tagma_p50_ms: f64,
    pub redis_ops_per_s: f64,
    pub redis_p50_ms: f64,
    pub ratio_vs_redis: f64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct GatewayBenchReport {
    pub replicas: usize,
    pub f: u32,
    pub mode: String,
    pub connections: usize,
    pub value_bytes: usize,
    pub figures: Vec<Figure>,
}

/// A redis-server process, killed when dropped.
struct RedisServer(Child);

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

fn wait_listening(addr: SocketAddr, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            bail!("{what} never listened on {addr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn need(tool: &str) -> Result<()> {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        bail!("`{tool}` is not installed — fix: apt-get install redis-server redis-tools");
    }
    Ok(())
}

/// `(test, ops/s, p50 ms)` from redis-benchmark's `--csv` output.
fn parse_csv(text: &str) -> Vec<(String, f64, f64)> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').map(|c| c.trim_matches('"')).collect();
        if cells.len() >= 5
            && let (Ok(rps), Ok(p50)) = (cells[1].parse(), cells[4].parse())
        {
            out.push((cells[0].to_owned(), rps, p50));
        }
    }
    out
}

fn benchmark(
    addr: SocketAddr,
    opts: &GatewayBenchOptions,
    pipeline: usize,
) -> Result<Vec<(String, f64, f64)>> {
    let requests = opts.requests * pipeline.max(1);
    let out = Command::new("redis-benchmark")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["-t", "set,get", "--csv"])
        .args(["-c", &opts.connections.to_string()])
        .args(["-P", &pipeline.to_string()])
        .args(["-n", &requests.to_string()])
        .args(["-d", &opts.value_bytes.to_string()])
        .output()
        .context("cannot run redis-benchmark")?;
    let figures = parse_csv(&String::from_utf8_lossy(&out.stdout));
    if figures.len() < 2 {
        bail!(
            "redis-benchmark gave no figures: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(figures)
}

/// Runs the benchmark with the `tagma` binary `exe` for the replicas.
pub fn run(exe: &Path, opts: &GatewayBenchOptions) -> Result<GatewayBenchReport> {
    need("redis-server")?;
    need("redis-benchmark")?;
    let cluster = LocalCluster::launch(exe, 4, Mode::Bft, |_| {})?;
    let gateway_addr = free_addr()?;
    let key = tagma_node::cluster_dir::client_key_path(&cluster.dir);
    let gateway = start(&cluster.cfg, &key, &GatewaySetup::new(gateway_addr))?;
    wait_listening(gateway.local_addr(), "the gateway")?;
    let redis_addr = free_addr()?;
    let redis = Command::new("redis-server")
        .args([
            "--port",
            &redis_addr.port().to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .map(RedisServer)
        .context("cannot start redis-server")?;
    wait_listening(redis_addr, "redis-server")?;
    let mut figures = Vec::new();
    for &pipeline in &opts.pipelines {
        // Alternating, so that both see the same machine.
        let tagma = benchmark(gateway.local_addr(), opts, pipeline)?;
        let real = benchmark(redis_addr, opts, pipeline)?;
        for (test, t_rps, t_p50) in &tagma {
            if let Some((_, r_rps, r_p50)) = real.iter().find(|(t, _, _)| t == test) {
                figures.push(Figure {
                    test: test.clone(),
                    pipeline,
                    tagma_ops_per_s: *t_rps,
                    tagma_p50_ms: *t_p50,
                    redis_ops_per_s: *r_rps,
                    redis_p50_ms: *r_p50,
                    ratio_vs_redis: if *r_rps > 0.0 { t_rps / r_rps } else { 0.0 },
                });
            }
        }
    }
    drop(redis);
    gateway.stop();
    Ok(GatewayBenchReport {
        replicas: cluster.cfg.n(),
        f: cluster.cfg.f,
        mode: cluster.cfg.mode.to_string(),
        connections: opts.connections,
        value_bytes: opts.value_bytes,
        figures,
    })
}

/// The report as a table.
pub fn table(r: &GatewayBenchReport) -> String {
    let mut s = format!(
        "redis-benchmark, {} connections, {}-byte values: tagma gateway ({} n = {}, f = {}) vs redis-server\n\
         {:<5} {:>8} {:>14} {:>10} {:>14} {:>10} {:>15}\n",
        r.connections,
        r.value_bytes,
        r.mode,
        r.replicas,
        r.f,
        "test",
        "pipeline",
        "tagma ops/s",
        "p50 ms",
        "redis ops/s",
        "p50 ms",
        "ratio_vs_redis"
    );
    for f in &r.figures {
        s.push_str(&format!(
            "{:<5} {:>8} {:>14.0} {:>10.3} {:>14.0} {:>10.3} {:>15.3}\n",
            f.test,
            f.pipeline,
            f.tagma_ops_per_s,
            f.tagma_p50_ms,
            f.redis_ops_per_s,
            f.redis_p50_ms,
            f.ratio_vs_redis
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn csv_lines_give_test_throughput_and_median() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                    \"SET\",\"16792.61\",\"2.9\",\"0.5\",\"2.839\",\"4.1\",\"5.0\",\"9.0\"\n\
                    \"GET\",\"15735.64\",\"3.0\",\"0.6\",\"3.015\",\"4.2\",\"5.1\",\"8.0\"\n";
        let parsed = super::parse_csv(text);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].0, "SET");
        assert!((parsed[1].1 - 15735.64).abs() < 1e-9);
        assert!((parsed[1].2 - 3.015).abs() < 1e-9);
    }
}
