//! The behaviour every storage backend must show (files and memory alike): a suite the
//! tests run against each implementation of [`RecordLog`] and [`Checkpoints`]. It panics,
//! naming the step, where a backend departs from it.

use bytes::Bytes;

use crate::{Checkpoints, RecordLog, StorageError};

fn payload(cid: u64) -> Vec<u8> {
    format!("record {cid}").into_bytes()
}

/// Appends in order, reads back ranges, refuses out-of-order appends, keeps what a release
/// must keep, and continues after a reset. `log` must be empty.
pub fn record_log(log: &mut dyn RecordLog) {
    assert_eq!(
        (log.first_cid(), log.last_cid()),
        (None, None),
        "a new log is empty"
    );
    for cid in 0..10 {
        log.append(cid, Bytes::from(payload(cid)))
            .expect("in-order append");
    }
    log.flush().expect("flush");
    assert_eq!((log.first_cid(), log.last_cid()), (Some(0), Some(9)));
    let read = log.read_range(3..6).expect("read inside the log");
    assert_eq!(
        read,
        (3..6).map(|c| (c, payload(c))).collect::<Vec<_>>(),
        "a range reads back in order"
    );
    let tail = log.read_range(8..100).expect("a range past the end");
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 6..3;
    assert!(log.read_range(reversed).expect("an empty range").is_empty());
    assert_eq!(tail.iter().map(|(c, _)| *c).collect::<Vec<_>>(), vec![8, 9]);
    assert!(
        matches!(
            log.append(11, Bytes::from_static(b"skip")),
            Err(StorageError::OutOfOrder {
                expected: 10,
                got: 11
            })
        ),
        "an append out of order is refused"
    );
    log.release_through(4).expect("release");
    let kept = log.read_range(5..10).expect("what a release keeps");
    assert_eq!(kept.len(), 5, "records after the released instance stay");
    assert!(log.first_cid().is_some_and(|f| f <= 5));
    log.reset_after(20).expect("reset");
    assert_eq!(log.last_cid(), Some(20));
    assert!(
        log.append(15, Bytes::from_static(b"old")).is_err(),
        "nothing before the reset point"
    );
    log.append(21, Bytes::from(payload(21)))
        .expect("the append after a reset");
    log.flush().expect("flush");
    assert_eq!(log.first_cid(), Some(21));
    assert_eq!(
        log.read_range(21..22).expect("read"),
        vec![(21, payload(21))]
    );
}

/// Keeps the two newest checkpoints, serves their chunks, and turns a fetched one into the
/// newest. `store` must be empty.
pub fn checkpoints(store: &dyn Checkpoints) {
    let state = |c: u8| vec![c; 100];
    let digest = store.write(5, &state(5)).expect("write");
    assert_eq!(
        &digest,
        blake3::hash(&state(5)).as_bytes(),
        "the digest of the state"
    );
    assert_eq!(store.read_chunk(5, 10, 20).expect("chunk"), vec![5; 20]);
    store.write(10, &state(10)).expect("write");
    store.write(15, &state(15)).expect("write");
    assert!(
        store.read_chunk(5, 0, 1).is_err(),
        "older than the previous: gone"
    );
    assert_eq!(
        store.read_chunk(10, 99, 1).expect("the previous stays"),
        vec![10]
    );
    assert!(
        store.read_chunk(15, 90, 20).is_err(),
        "a chunk past the end"
    );
    let fetched: Vec<u8> = (0..=255).collect();
    store.store_chunk(0, &fetched[..100]).expect("first chunk");
    store.store_chunk(100, &fetched[100..]).expect("next chunk");
    assert_eq!(store.read_incoming().expect("incoming"), fetched);
    let digest = *blake3::hash(&fetched).as_bytes();
    store
        .promote_incoming(20, fetched.len(), &digest)
        .expect("promote");
    assert_eq!(
        store.read_chunk(20, 0, 256).expect("the promoted one"),
        fetched
    );
    assert!(
        store.read_chunk(10, 0, 1).is_err(),
        "the promoted one is the newest"
    );
    store.store_chunk(0, b"rejected").expect("a new fetch");
    store.remove_incoming();
    assert_eq!(store.read_chunk(15, 0, 1).expect("kept"), vec![15]);
    // A chunk past what is stored (an earlier one was lost) is refused, not a hole.
    store.store_chunk(0, &[1; 10]).expect("a new fetch");
    assert!(matches!(
        store.store_chunk(20, &[2; 10]),
        Err(StorageError::Incoming { .. })
    ));
    store.remove_incoming();
    // One written below the newest (a fetched state promoted after this replica's own newer
    // checkpoint) keeps the newer one and the one before it.
    store.write(18, &state(18)).expect("write below the newest");
    for cid in [15, 18, 20] {
        store.read_chunk(cid, 0, 1).expect("kept");
    }
    store.write(25, &state(25)).expect("write");
    assert!(
        store.read_chunk(18, 0, 1).is_err(),
        "older than the previous: gone"
    );
    assert_eq!(store.read_chunk(20, 0, 1).expect("the previous"), vec![0]);
}
