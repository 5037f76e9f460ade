//! Simulated runs with their promises checked: VCube-Sync's single-publisher figures at 200
//! nodes, and seeds with crashes, loss, late joins and (every other seed) subscriptions
//! changed at run time that must converge without a causal violation or an operation applied
//! twice.

use tagma_crdt_sim::{ProtocolKind, Workload, run};

#[test]
fn one_publisher_at_200_nodes_sends_each_operation_once_within_d_hops() {
    let w = Workload {
        nodes: 200,
        duration_s: 30.0,
        drain_s: 10.0,
        ..Workload::default()
    };
    let vcube = run(ProtocolKind::Vcube, &w, Default::default()).unwrap();
    let plumtree = run(ProtocolKind::Plumtree, &w, Default::default()).unwrap();
    let flood = run(ProtocolKind::Flood, &w, Default::default()).unwrap();
    for r in [&vcube, &plumtree, &flood] {
        assert!(r.convergent, "{r:#?}");
        assert_eq!((r.causal_violations, r.double_deliveries), (0, 0));
        assert_eq!(r.deliveries, r.operations * 199);
    }
    assert_eq!(vcube.duplicates, 0);
    assert!(vcube.max_hops <= 8, "{}", vcube.max_hops);
    assert!(vcube.bytes_vs_minimum <= 1.05, "{}", vcube.bytes_vs_minimum);
    assert!(vcube.bytes_total < plumtree.bytes_total);
    assert!(plumtree.bytes_total < flood.bytes_total);
    assert!(flood.duplicates > 0);
}

#[test]
fn seeds_with_crashes_loss_late_joins_and_subscription_changes_converge_in_causal_order() {
    for seed in 0..30 {
        let mut w = Workload {
            nodes: 48 + (seed as u32 % 3) * 17,
            topics: 4,
            subscribers_pct: if seed % 2 == 0 { 100.0 } else { 50.0 },
            publishers: 6,
            ops_per_s: 2.0,
            duration_s: 12.0,
            drain_s: 20.0,
            crash_pct: 10.0,
            join_pct: 10.0,
            churn_pct: if seed % 2 == 1 { 20.0 } else { 0.0 },
            seed,
            ..Workload::default()
        };
        w.link.loss = 0.05;
        let r = run(ProtocolKind::Vcube, &w, Default::default()).unwrap();
        assert!(r.convergent, "seed {seed}: {:?}", r.divergence);
        assert_eq!(r.causal_violations, 0, "seed {seed}");
        assert_eq!(r.double_deliveries, 0, "seed {seed}");
        assert!(
            r.operations > 0 && r.snapshots_installed > 0,
            "seed {seed}: {r:#?}"
        );
        if w.churn_pct > 0.0 {
            assert!(r.subscription_changes > 0, "seed {seed}: {r:#?}");
            assert_eq!(r.subscription_changes_refused, 0, "seed {seed}");
        }
    }
}

#[test]
fn the_baselines_refuse_late_joins_and_subscription_changes_they_cannot_serve() {
    let w = Workload {
        nodes: 16,
        join_pct: 10.0,
        ..Workload::default()
    };
    assert!(run(ProtocolKind::Plumtree, &w, Default::default()).is_err());
    let w = Workload {
        nodes: 16,
        churn_pct: 10.0,
        ..Workload::default()
    };
    assert!(run(ProtocolKind::Flood, &w, Default::default()).is_err());
    let bad = Workload {
        nodes: 1,
        ..Workload::default()
    };
    assert!(run(ProtocolKind::Vcube, &bad, Default::default()).is_err());
}
