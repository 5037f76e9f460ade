//! Whole runs: no protocol violates causal order or delivers twice under crashes, losses
//! and late joins; VCube-Sync converges through them (the baselines, without repair, only
//! without faults); a run gives the same report whatever the number of threads.

use tagma_crdt_sim::{ProtocolKind, Report, Workload, run_on};

/// The faults and mixes the protocols face: (topics, publishers, crash %, loss, join %).
const CASES: [(u32, u32, f64, f64, f64); 3] = [
    (1, 1, 0.0, 0.0, 0.0),
    (4, 20, 10.0, 0.05, 0.0),
    (4, 20, 10.0, 0.05, 10.0),
];

fn workload(case: (u32, u32, f64, f64, f64), duration_s: f64) -> Workload {
    let (topics, publishers, crash_pct, loss, join_pct) = case;
    let mut w = Workload {
        nodes: 200,
        topics,
        publishers,
        crash_pct,
        join_pct,
        duration_s,
        ..Workload::default()
    };
    w.link.loss = loss;
    w
}

fn protocols(join_pct: f64) -> Vec<ProtocolKind> {
    if join_pct > 0.0 {
        // Late joins need state transfer, which only VCube-Sync has.
        vec![ProtocolKind::Vcube]
    } else {
        vec![
            ProtocolKind::Vcube,
            ProtocolKind::Plumtree,
            ProtocolKind::Flood,
        ]
    }
}

/// The report without its wall time, to compare runs.
fn outcome(r: &Report) -> String {
    let mut r = r.clone();
    r.sim_wall_s = 0.0;
    format!("{r:?}")
}

#[test]
fn causal_order_holds_and_vcube_converges_under_faults() {
    for case in CASES {
        for p in protocols(case.4) {
            let r = run_on(p, &workload(case, 20.0), Default::default(), 2).unwrap();
            let what = format!("{p:?} {case:?}");
            let faults = case.2 > 0.0 || case.3 > 0.0 || case.4 > 0.0;
            if p == ProtocolKind::Vcube || !faults {
                assert!(r.convergent, "{what}: {:?}", r.divergence);
            }
            assert_eq!(r.causal_violations, 0, "{what}");
            assert_eq!(r.double_deliveries, 0, "{what}");
            assert!(r.operations > 0 && r.deliveries > 0, "{what}: {r:?}");
        }
    }
}

#[test]
fn a_run_gives_the_same_report_on_any_number_of_threads() {
    for case in CASES {
        for p in protocols(case.4) {
            let w = workload(case, 8.0);
            let one = run_on(p, &w, Default::default(), 1).unwrap();
            let three = run_on(p, &w, Default::default(), 3).unwrap();
            assert_eq!(outcome(&one), outcome(&three), "{p:?} {case:?}");
        }
    }
}
