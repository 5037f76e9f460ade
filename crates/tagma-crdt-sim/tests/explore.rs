use tagma_crdt_sim::{ProtocolKind, Workload, run};

#[test]
fn explore() {
    for (topics, pubs, crash, loss, join) in [
        (1u32, 1u32, 0.0, 0.0, 0.0),
        (4, 20, 10.0, 0.05, 0.0),
        (4, 20, 10.0, 0.05, 10.0),
    ] {
        for p in [
            ProtocolKind::Vcube,
            ProtocolKind::Plumtree,
            ProtocolKind::Flood,
        ] {
            if join > 0.0 && p != ProtocolKind::Vcube {
                continue;
            }
            let mut w = Workload {
                nodes: 200,
                topics,
                publishers: pubs,
                crash_pct: crash,
                join_pct: join,
                duration_s: 60.0,
                ..Workload::default()
            };
            w.link.loss = loss;
            let r = run(p, &w, Default::default()).unwrap();
            eprintln!(
                "{p:?} t{topics} p{pubs} c{crash} l{loss} j{join}: conv {} {:?} viol {} dd {} dup {} lat {:.0}/{:.0} hops {} bytes {} vs min {:.3} snaps {} wall {:.2}",
                r.convergent,
                r.divergence,
                r.causal_violations,
                r.double_deliveries,
                r.duplicates,
                r.latency_ms_mean,
                r.latency_ms_p99,
                r.max_hops,
                r.bytes_total,
                r.bytes_vs_minimum,
                r.snapshots_installed,
                r.sim_wall_s
            );
        }
    }
}
