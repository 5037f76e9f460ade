use tagma_crdt_sim::{ProtocolKind, Workload, run};

#[test]
fn explore() {
    let w = Workload {
        nodes: 1024,
        publishers: 1024,
        duration_s: 1.3,
        drain_s: 3.0,
        ..Workload::default()
    };
    let r = run(ProtocolKind::Vcube, &w, Default::default()).unwrap();
    eprintln!("{r:#?}");
}
