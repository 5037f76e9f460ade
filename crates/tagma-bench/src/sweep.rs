//! The configurations of `tagma bench --sweep`: each sweep runs the points of one of the
//! BFT-SMaRt paper's figures and draws it with [`crate::plot`].

use crate::plot::{self, Chart};
use crate::report::BenchReport;

/// Request/reply sizes of the latency sweep (Figure 4), one line each.
pub const LATENCY_PAYLOADS: [usize; 4] = [0, 100, 1024, 4096];
/// Client counts of the latency sweep: the points of each line.
pub const LATENCY_CLIENTS: [usize; 3] = [8, 32, 128];
/// `limits.signature_threads` values of the signature-threads sweep (Figure 6).
pub const SIGNATURE_THREADS: [usize; 3] = [1, 2, 4];
/// Warm-up and window of a sweep's configurations unless the command line sets them.
pub const SWEEP_WARMUP_S: f64 = 1.0;
pub const SWEEP_DURATION_S: f64 = 3.0;

/// One of the figures of Bessani, Sousa and Alchieri, "State Machine Replication for the
/// Masses with BFT-SMaRt" (their numbers are this enum's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sweep {
    /// Figure 4: latency vs throughput, one line per payload, points by client count.
    Latency,
    /// Figure 5: throughput vs f (1, 2, and 3 on request), bft and cft.
    F,
    /// Figure 6: throughput of signed requests vs signature-verification threads.
    SignatureThreads,
}

/// What one benchmark run varies; the rest (workload, ordering, windows) comes from the
/// command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunConfig {
    pub cft: bool,
    pub f: u32,
    /// Request and reply size in bytes.
    pub payload: usize,
    pub clients: usize,
    pub signed: bool,
    /// `limits.signature_threads`, or the configuration's default.
    pub signature_threads: Option<usize>,
}

impl RunConfig {
    /// Number of replicas: 3f+1, or 2f+1 in cft mode.
    pub fn replicas(&self) -> usize {
        let per_fault = if self.cft { 2 } else { 3 };
        per_fault * self.f as usize + 1
    }

    /// A one-line description for progress messages.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} n={} f={}, {}/{} bytes, {} clients",
            if self.cft { "cft" } else { "bft" },
            self.replicas(),
            self.f,
            self.payload,
            self.payload,
            self.clients
        );
        if self.signed {
            s.push_str(", signed");
        }
        if let Some(t) = self.signature_threads {
            s.push_str(&format!(", {t} signature threads"));
        }
        s
    }
}

impl Sweep {
    /// The configurations of this sweep, derived from `base` (the command line's): the
    /// latency sweep varies payload and clients; the f sweep varies f (1, 2, and 3 when
    /// `with_f3`) and the mode; the signature-threads sweep signs requests and varies
    /// `limits.signature_threads`.
    pub fn configs(self, base: RunConfig, with_f3: bool) -> Vec<RunConfig> {
        match self {
            Sweep::Latency => LATENCY_PAYLOADS
                .iter()
                .flat_map(|&payload| {
                    LATENCY_CLIENTS.iter().map(move |&clients| RunConfig {
                        payload,
                        clients,
                        ..base
                    })
                })
                .collect(),
            Sweep::F => {
                let f_max = if with_f3 { 3 } else { 2 };
                (1..=f_max)
                    .flat_map(|f| [false, true].map(|cft| RunConfig { cft, f, ..base }))
                    .collect()
            }
            Sweep::SignatureThreads => SIGNATURE_THREADS
                .iter()
                .map(|&t| RunConfig {
                    signed: true,
                    signature_threads: Some(t),
                    ..base
                })
                .collect(),
        }
    }

    /// The figure of this sweep's reports.
    pub fn chart(self, reports: &[BenchReport]) -> Chart {
        let (number, mut chart) = match self {
            Sweep::Latency => (4, plot::latency_chart(reports)),
            Sweep::F => (5, plot::f_chart(reports)),
            Sweep::SignatureThreads => (6, plot::signature_threads_chart(reports)),
        };
        chart.title = format!("Figure {number}: {}", chart.title);
        chart
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::tests::report;

    const BASE: RunConfig = RunConfig {
        cft: false,
        f: 1,
        payload: 0,
        clients: 64,
        signed: false,
        signature_threads: None,
    };

    #[test]
    fn latency_sweep_varies_payload_and_clients() {
        let c = Sweep::Latency.configs(BASE, false);
        assert_eq!(c.len(), 12);
        assert!(c.iter().all(|c| !c.cft && c.f == 1 && !c.signed));
        assert_eq!((c[0].payload, c[0].clients), (0, 8));
        assert_eq!((c[11].payload, c[11].clients), (4096, 128));
    }

    #[test]
    fn f_sweep_runs_both_modes() {
        let c = Sweep::F.configs(BASE, false);
        let got: Vec<_> = c.iter().map(|c| (c.f, c.cft, c.replicas())).collect();
        assert_eq!(
            got,
            vec![(1, false, 4), (1, true, 3), (2, false, 7), (2, true, 5)]
        );
        let c = Sweep::F.configs(BASE, true);
        assert_eq!(c.len(), 6);
        assert_eq!(c[4].replicas(), 10);
    }

    #[test]
    fn signature_threads_sweep_signs() {
        let c = Sweep::SignatureThreads.configs(BASE, false);
        let threads: Vec<_> = c.iter().map(|c| c.signature_threads).collect();
        assert_eq!(threads, vec![Some(1), Some(2), Some(4)]);
        assert!(c.iter().all(|c| c.signed));
        assert!(c[0].describe().contains("signed, 1 signature threads"));
    }

    #[test]
    fn charts_are_numbered() {
        let r = [report("bft", 1, 0, 8, 2, 1000.0, 1.0)];
        assert!(Sweep::Latency.chart(&r).title.starts_with("Figure 4: "));
        assert!(Sweep::F.chart(&r).title.starts_with("Figure 5: "));
        assert!(
            Sweep::SignatureThreads
                .chart(&r)
                .title
                .starts_with("Figure 6: ")
        );
    }
}
