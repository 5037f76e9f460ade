//! What a checkpoint of a large tuple space costs the execution thread: serialising it
//! (`snapshot`) against taking a frozen copy (`freeze`), which the checkpoint thread then
//! serialises. `cargo run --release -p tagma-tuplespace --example freeze_cost`
use bytes::Bytes;
use tagma_parallel::{ParallelService, ParallelState};
use tagma_tuplespace::{Classification, SpaceOp, TupleSpace};

fn main() {
    for (tuples, value_bytes) in [(200_000usize, 1024usize), (1_000_000, 64)] {
        let ts = TupleSpace::new(Classification::Ts2);
        for i in 0..tuples {
            let t = vec![
                Bytes::from(format!("key{i}")),
                Bytes::from(vec![7u8; value_bytes]),
            ];
            ts.execute(&SpaceOp::Out(t).encode());
        }
        let started = std::time::Instant::now();
        let snapshot = ts.snapshot();
        let snapshot_time = started.elapsed();
        let started = std::time::Instant::now();
        let frozen = ts.freeze().expect("the tuple space freezes");
        let freeze_time = started.elapsed();
        let started = std::time::Instant::now();
        let later = frozen();
        let serialise_time = started.elapsed();
        assert_eq!(later, snapshot);
        println!(
            "{tuples} tuples of {value_bytes} B values ({} MB): snapshot {snapshot_time:.1?}, \
             freeze {freeze_time:.1?}, serialising the frozen copy {serialise_time:.1?}",
            snapshot.len() >> 20
        );
    }
}
