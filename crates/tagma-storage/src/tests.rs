use std::fs;
use std::path::Path;

use super::*;

fn opts(dir: &Path, segment_bytes: u64) -> LogOptions {
    LogOptions {
        dir: dir.join("log"),
        segment_bytes,
    }
}

fn payload(cid: u64) -> Vec<u8> {
    // Varying sizes, so records straddle segment boundaries differently.
    vec![(cid % 251) as u8; 10 + (cid as usize * 7) % 90]
}

fn replay_all(log: &Log, from: u64) -> Vec<u64> {
    let mut seen = Vec::new();
    log.replay_from(from, |cid, p| -> Result<(), StorageError> {
        assert_eq!(p, payload(cid).as_slice(), "payload of {cid}");
        seen.push(cid);
        Ok(())
    })
    .unwrap();
    seen
}

fn append_range(log: &mut Log, range: std::ops::Range<u64>) {
    for cid in range {
        log.append(cid, &payload(cid)).unwrap();
    }
    log.flush().unwrap();
}

/// The path and byte offset of record `cid` (searching the segment images).
fn locate(dir: &Path, cid: u64) -> (std::path::PathBuf, usize) {
    for entry in fs::read_dir(dir.join("log")).unwrap() {
        let path = entry.unwrap().path();
        let image = fs::read(&path).unwrap();
        let mut offset = 0;
        while offset + log::HEADER_BYTES <= image.len() && image[offset..offset + 4] == *b"TGLR" {
            let len = u32::from_le_bytes(image[offset + 4..offset + 8].try_into().unwrap());
            let at = u64::from_le_bytes(image[offset + 8..offset + 16].try_into().unwrap());
            if at == cid {
                return (path, offset);
            }
            offset += log::HEADER_BYTES + len as usize;
        }
    }
    panic!("record {cid} not found");
}

fn poke(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut image = fs::read(path).unwrap();
    f(&mut image);
    fs::write(path, image).unwrap();
}

#[test]
fn appends_survive_reopen_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(opts(dir.path(), 1024)).unwrap();
    append_range(&mut log, 0..100);
    assert!(log.segment_count() > 3, "1 KiB segments must rotate");
    assert_eq!(replay_all(&log, 0), (0..100).collect::<Vec<_>>());
    drop(log);
    let mut log = Log::open(opts(dir.path(), 1024)).unwrap();
    assert_eq!(log.first_cid(), Some(0));
    assert_eq!(log.last_cid(), Some(99));
    assert_eq!(replay_all(&log, 37), (37..100).collect::<Vec<_>>());
    // Appends continue where the log ended; out-of-order appends are refused.
    assert!(matches!(
        log.append(101, b"x"),
        Err(StorageError::OutOfOrder {
            expected: 100,
            got: 101
        })
    ));
    append_range(&mut log, 100..120);
    drop(log);
    let log = Log::open(opts(dir.path(), 1024)).unwrap();
    assert_eq!(replay_all(&log, 0), (0..120).collect::<Vec<_>>());
}

#[test]
fn unsynced_appends_are_visible_to_replay_and_segments_are_preallocated() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(opts(dir.path(), 64 << 10)).unwrap();
    log.append(0, &payload(0)).unwrap();
    log.append(1, &payload(1)).unwrap();
    assert_eq!(replay_all(&log, 0), vec![0, 1]);
    log.flush().unwrap();
    let (path, _) = locate(dir.path(), 0);
    assert_eq!(fs::metadata(&path).unwrap().len(), 64 << 10);
}

#[test]
fn a_torn_tail_is_cut_off_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(opts(dir.path(), 64 << 10)).unwrap();
    append_range(&mut log, 0..10);
    drop(log);
    // The last record was only partly written: its payload's second half is zeros.
    let (path, at) = locate(dir.path(), 9);
    poke(&path, |image| {
        let len = payload(9).len();
        for b in &mut image[at + log::HEADER_BYTES + len / 2..at + log::HEADER_BYTES + len] {
            *b = 0;
        }
    });
    let mut log = Log::open(opts(dir.path(), 64 << 10)).unwrap();
    assert_eq!(log.last_cid(), Some(8));
    assert_eq!(replay_all(&log, 0), (0..9).collect::<Vec<_>>());
    append_range(&mut log, 9..12);
    drop(log);
    let log = Log::open(opts(dir.path(), 64 << 10)).unwrap();
    assert_eq!(replay_all(&log, 0), (0..12).collect::<Vec<_>>());
}

#[test]
fn a_partial_header_at_the_end_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(opts(dir.path(), 64 << 10)).unwrap();
    append_range(&mut log, 0..5);
    drop(log);
    let (path, at) = locate(dir.path(), 4);
    let end = at + log::HEADER_BYTES + payload(4).len();
    poke(&path, |image| {
        image[end..end + 6].copy_from_slice(b"TGLR\x07\x00")
    });
    let log = Log::open(opts(dir.path(), 64 << 10)).unwrap();
    assert_eq!(log.last_cid(), Some(4));
}

#[test]
fn corruption_followed_by_valid_records_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(opts(dir.path(), 64 << 10)).unwrap();
    append_range(&mut log, 0..10);
    drop(log);
    let (path, at) = locate(dir.path(), 4);
    poke(&path, |image| image[at + log::HEADER_BYTES + 3] ^= 0x40);
    match Log::open(opts(dir.path(), 64 << 10)) {
        Err(StorageError::CorruptLog { offset, .. }) => assert_eq!(offset, at as u64),
        other => panic!("expected CorruptLog, got {other:?}"),
    }
}

#[test]
fn corruption_in_a_sealed_segment_is_reported_even_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(opts(dir.path(), 512)).unwrap();
    append_range(&mut log, 0..40);
    drop(log);
    // The last record of the first segment (a sealed one).
    let first_segment = dir.path().join("log").join(format!("{:020}.log", 0));
    let image = fs::read(&first_segment).unwrap();
    let mut last = 0;
    let mut offset = 0;
    while image[offset..].starts_with(b"TGLR") {
        last = offset;
        let len = u32::from_le_bytes(image[offset + 4..offset + 8].try_into().unwrap());
        offset += log::HEADER_BYTES + len as usize;
    }
    poke(&first_segment, |image| image[last + 9] ^= 1);
    assert!(matches!(
        Log::open(opts(dir.path(), 512)),
        Err(StorageError::CorruptLog { .. })
    ));
}

#[test]
fn replay_range_reads_exactly_its_instances() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(opts(dir.path(), 1024)).unwrap();
    append_range(&mut log, 0..100);
    let mut seen = Vec::new();
    log.replay_range(37..64, |cid, p| -> Result<(), StorageError> {
        assert_eq!(p, payload(cid).as_slice());
        seen.push(cid);
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, (37..64).collect::<Vec<_>>());
    let mut none = 0;
    log.replay_range(150..200, |_, _| -> Result<(), StorageError> {
        none += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(none, 0);
}

#[test]
fn ranges_are_read_by_the_index_from_disk_and_from_the_unwritten_buffer() {
    let dir = tempfile::tempdir().unwrap();
    // One large segment, so that a range is a small part of it.
    let mut log = Log::open(opts(dir.path(), 1 << 20)).unwrap();
    append_range(&mut log, 0..300);
    log.flush().unwrap();
    for cid in 300..320 {
        log.append(cid, &payload(cid)).unwrap(); // buffered, not written out
    }
    let read = |log: &Log, range: std::ops::Range<u64>| {
        let mut seen = Vec::new();
        log.replay_range(range, |cid, p| -> Result<(), StorageError> {
            assert_eq!(p, payload(cid).as_slice(), "cid {cid}");
            seen.push(cid);
            Ok(())
        })
        .unwrap();
        seen
    };
    assert_eq!(read(&log, 120..130), (120..130).collect::<Vec<_>>());
    // Straddling what is on disk and what is still buffered.
    assert_eq!(read(&log, 295..305), (295..305).collect::<Vec<_>>());
    assert_eq!(read(&log, 310..400), (310..320).collect::<Vec<_>>());
    log.flush().unwrap();
    drop(log);
    // After a reopen the index is rebuilt from the scan.
    let log = Log::open(opts(dir.path(), 1 << 20)).unwrap();
    assert_eq!(read(&log, 0..3), vec![0, 1, 2]);
    assert_eq!(read(&log, 317..1000), vec![317, 318, 319]);
}

#[test]
fn releasing_drops_covered_segments_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(opts(dir.path(), 1024)).unwrap();
    append_range(&mut log, 0..100);
    let before = log.segment_count();
    let released = log.release_through(50).unwrap();
    assert!(released > 0);
    assert_eq!(log.segment_count(), before - released);
    let first = log.first_cid().unwrap();
    assert!(
        first <= 51,
        "instances after 50 must stay: log starts at {first}"
    );
    assert_eq!(replay_all(&log, 51), (51..100).collect::<Vec<_>>());
}

/// Staggered checkpoints: each replica once per period, at its own point; never two at once.
#[test]
fn checkpoint_points_are_staggered() {
    let due = |i| {
        (0..400)
            .filter(|c| checkpoint_due(*c, i, 4, 400))
            .collect::<Vec<_>>()
    };
    assert_eq!(due(0), vec![99]);
    assert_eq!(due(1), vec![199]);
    assert_eq!(due(2), vec![299]);
    assert_eq!(due(3), vec![399]);
    for n in 1..=10usize {
        for period in [n as u64, 7 * n as u64, 1000] {
            for cid in 0..3 * period {
                let busy = (0..n)
                    .filter(|i| checkpoint_due(cid, *i, n, period))
                    .count();
                assert!(busy <= 1, "n {n} period {period} cid {cid}");
            }
            for i in 0..n {
                let times = (0..period)
                    .filter(|c| checkpoint_due(*c, i, n, period))
                    .count();
                assert_eq!(times, 1, "n {n} period {period} replica {i}");
            }
        }
    }
}

/// A replica's state for the recovery tests: the instances applied, in order.
#[derive(Default)]
struct Applied(Vec<u64>);

impl Applied {
    fn encode(&self) -> Vec<u8> {
        self.0.iter().flat_map(|c| c.to_le_bytes()).collect()
    }
    fn decode(bytes: &[u8]) -> Applied {
        Applied(
            bytes
                .chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        )
    }
}

fn recover_applied(dir: &Path) -> Result<(Applied, Option<u64>), RecoverError> {
    let store = CheckpointStore::open(dir.join("ckp")).unwrap();
    let mut state = Applied::default();
    let mut installed = None;
    let (_, last) = recover(
        &store,
        opts(dir, 1024),
        |ckp| {
            installed = Some(Applied::decode(&ckp.state));
            Ok(())
        },
        |cid, p| {
            if p != payload(cid).as_slice() {
                return Err(format!("payload of {cid} differs"));
            }
            state.0.push(cid);
            Ok(())
        },
    )?;
    let mut all = installed.unwrap_or_default();
    all.0.extend(state.0);
    Ok((all, last))
}

/// Runs 0..60 with a checkpoint at 29, crashing after `steps` of its steps (0: none done ..
/// 4: all done, log released), then recovers: every instance exactly once, in order.
fn checkpoint_crash(steps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(dir.path().join("ckp")).unwrap();
    let mut log = Log::open(opts(dir.path(), 1024)).unwrap();
    append_range(&mut log, 0..30);
    // An older checkpoint, complete, so the crash happens between two checkpoints.
    store
        .write(9, &Applied((0..10).collect()).encode())
        .unwrap();
    let state = Applied((0..30).collect()).encode();
    let tmp = dir.path().join("ckp").join(format!("{:020}.tmp", 29));
    match steps {
        0 => fs::write(&tmp, &state[..state.len() / 2]).unwrap(), // torn temporary file
        1 => {
            store.write(29, &state).unwrap();
            // Undo the rename: the crash came before it.
            let ckp = dir.path().join("ckp").join(format!("{:020}.ckp", 29));
            fs::rename(&ckp, &tmp).unwrap();
        }
        2 | 3 => {
            store.write(29, &state).unwrap();
        }
        _ => {
            store.write(29, &state).unwrap();
            log.release_through(29).unwrap();
        }
    }
    append_range(&mut log, 30..60);
    drop(log);
    let (applied, last) = recover_applied(dir.path()).unwrap();
    assert_eq!(
        applied.0,
        (0..60).collect::<Vec<_>>(),
        "after {steps} steps"
    );
    assert_eq!(last, Some(59));
}

#[test]
fn recovery_is_exact_whichever_checkpoint_step_a_crash_interrupted() {
    for steps in 0..=4 {
        checkpoint_crash(steps);
    }
}

#[test]
fn a_checkpoint_beyond_the_log_continues_the_log_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(dir.path().join("ckp")).unwrap();
    {
        let mut log = Log::open(opts(dir.path(), 1024)).unwrap();
        append_range(&mut log, 0..5);
    }
    // State obtained from elsewhere (state transfer) up to 19: the log must go on at 20.
    store
        .write(19, &Applied((0..20).collect()).encode())
        .unwrap();
    let (mut log, last) =
        recover(&store, opts(dir.path(), 1024), |_| Ok(()), |_, _| Ok(())).unwrap();
    assert_eq!(last, Some(19));
    append_range(&mut log, 20..25);
    drop(log);
    let (applied, last) = recover_applied(dir.path()).unwrap();
    assert_eq!(applied.0, (0..25).collect::<Vec<_>>());
    assert_eq!(last, Some(24));
}

#[test]
fn a_corrupt_newest_checkpoint_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(dir.path().join("ckp")).unwrap();
    let (path, _) = store.write(7, &[5u8; 1000]).unwrap();
    assert_eq!(
        store.load_newest().unwrap().unwrap().state,
        &[5u8; 1000][..]
    );
    let mut bytes = fs::read(&path).unwrap();
    bytes[500] ^= 1;
    fs::write(&path, bytes).unwrap();
    assert!(matches!(
        store.load_newest(),
        Err(StorageError::CorruptCheckpoint { .. })
    ));
    assert!(matches!(
        recover_applied(dir.path()),
        Err(RecoverError::Storage(
            StorageError::CorruptCheckpoint { .. }
        ))
    ));
}

#[test]
fn a_log_that_does_not_reach_back_to_the_checkpoint_is_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(dir.path().join("ckp")).unwrap();
    let mut log = Log::open(opts(dir.path(), 1024)).unwrap();
    append_range(&mut log, 0..60);
    store
        .write(40, &Applied((0..41).collect()).encode())
        .unwrap();
    log.release_through(40).unwrap();
    drop(log);
    // The checkpoint is lost: the log alone does not start at instance 0.
    fs::remove_dir_all(dir.path().join("ckp")).unwrap();
    assert!(matches!(
        recover_applied(dir.path()),
        Err(RecoverError::Storage(StorageError::Gap { expected: 0, .. }))
    ));
}

#[test]
fn the_previous_checkpoint_is_kept_and_served_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(dir.path()).unwrap();
    let a: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    store.write(10, &a).unwrap();
    store.write(20, &[7u8; 100]).unwrap();
    assert_eq!(
        store.read_chunk(10, 1000, 10).unwrap(),
        a[1000..1010].to_vec()
    );
    assert_eq!(store.read_chunk(20, 0, 100).unwrap(), vec![7u8; 100]);
    assert!(store.read_chunk(20, 50, 100).is_err(), "past the end");
    store.write(30, &[8u8; 10]).unwrap();
    assert!(
        store.read_chunk(10, 0, 1).is_err(),
        "only the two newest are kept"
    );
    assert_eq!(store.load_newest().unwrap().unwrap().cid, 30);
    // Incoming chunks land in a part file the checkpoint listing ignores.
    store.store_chunk(0, b"abc").unwrap();
    store.store_chunk(3, b"def").unwrap();
    assert_eq!(store.read_incoming().unwrap(), b"abcdef");
    store.store_chunk(0, b"x").unwrap();
    assert_eq!(store.read_incoming().unwrap(), b"x", "offset 0 starts over");
    assert_eq!(store.load_newest().unwrap().unwrap().cid, 30);
    store.remove_incoming();
    assert!(store.read_incoming().is_err());
    // A fetched state becomes a checkpoint without being written again.
    store.store_chunk(0, &a[..3000]).unwrap();
    store.store_chunk(3000, &a[3000..]).unwrap();
    assert_eq!(store.read_incoming().unwrap(), a);
    store
        .promote_incoming(40, a.len(), blake3::hash(&a).as_bytes())
        .unwrap();
    let newest = store.load_newest().unwrap().unwrap();
    assert_eq!(newest.digest, *blake3::hash(&a).as_bytes());
    assert_eq!((newest.cid, &newest.state[..]), (40, &a[..]));
    assert!(
        store.read_incoming().is_err(),
        "the part file became the checkpoint"
    );
    assert!(
        store.read_chunk(30, 0, 10).is_ok(),
        "the previous one is kept"
    );
}

#[test]
fn reset_after_drops_every_record_and_continues_after_the_installed_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(opts(dir.path(), 4096)).unwrap();
    append_range(&mut log, 0..50);
    log.flush().unwrap();
    log.reset_after(500).unwrap();
    assert!(
        log.append(51, &payload(51)).is_err(),
        "continues after 500 only"
    );
    append_range(&mut log, 501..510);
    log.flush().unwrap();
    drop(log);
    let log = Log::open(opts(dir.path(), 4096)).unwrap();
    assert_eq!(log.first_cid(), Some(501));
    assert_eq!(replay_all(&log, 501), (501..510).collect::<Vec<_>>());
}

/// `read_segment` on in-memory images (what a simulated disk hands recovery): every way a
/// segment can end, judged as `Log::open` judges files.
#[test]
fn read_segment_judges_images_as_recovery_does() {
    let mut image = Vec::new();
    let mut starts = Vec::new();
    for cid in 5..10 {
        starts.push(image.len());
        encode_record(&mut image, cid, &payload(cid));
    }
    let whole = image.len();
    let cids = |records: &[(u64, &[u8])]| records.iter().map(|r| r.0).collect::<Vec<_>>();

    // Clean, with preallocated zeros after the records.
    image.resize(whole + 64, 0);
    let (records, end) = read_segment(&image, 5, true);
    assert_eq!(cids(&records), vec![5, 6, 7, 8, 9]);
    assert!(records.iter().all(|(c, p)| *p == payload(*c).as_slice()));
    assert_eq!(end, SegmentEnd::Clean);

    // A torn tail: the prefix of a sixth record.
    let mut torn = image[..whole].to_vec();
    let mut sixth = Vec::new();
    encode_record(&mut sixth, 10, &payload(10));
    torn.extend_from_slice(&sixth[..sixth.len() / 2]);
    torn.resize(torn.len() + 64, 0);
    let (records, end) = read_segment(&torn, 5, true);
    assert_eq!(cids(&records), vec![5, 6, 7, 8, 9]);
    assert_eq!(
        end,
        SegmentEnd::Torn {
            offset: whole as u64
        }
    );
    // The same bytes in a segment that is not the last are corruption.
    let (_, end) = read_segment(&torn, 5, false);
    assert!(matches!(end, SegmentEnd::Corrupt { offset, .. } if offset == whole as u64));

    // A flipped byte in the middle record: the records after it make it corruption.
    let mut flipped = image.clone();
    flipped[starts[2] + log::HEADER_BYTES + 3] ^= 0x40;
    let (records, end) = read_segment(&flipped, 5, true);
    assert_eq!(cids(&records), vec![5, 6]);
    assert!(matches!(end, SegmentEnd::Corrupt { offset, .. } if offset == starts[2] as u64));

    // A flipped byte in the last record looks like a torn tail: it is cut off.
    let mut last = image.clone();
    last[starts[4] + 1] ^= 0x01;
    let (records, end) = read_segment(&last, 5, true);
    assert_eq!(cids(&records), vec![5, 6, 7, 8]);
    assert_eq!(
        end,
        SegmentEnd::Torn {
            offset: starts[4] as u64
        }
    );

    // A segment whose records do not start at its named instance is corruption.
    let (records, end) = read_segment(&image, 6, true);
    assert!(records.is_empty());
    assert!(matches!(end, SegmentEnd::Corrupt { offset: 0, .. }));
}

#[test]
fn every_backend_passes_the_storage_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(LogOptions {
        dir: dir.path().join("log"),
        segment_bytes: 1 << 20,
    })
    .unwrap();
    crate::conformance::record_log(&mut log);
    crate::conformance::record_log(&mut crate::MemoryLog::new());
    let files = CheckpointStore::open(dir.path().join("ckp")).unwrap();
    crate::conformance::checkpoints(&files);
    crate::conformance::checkpoints(&crate::MemoryCheckpoints::new());
}

#[test]
fn a_checkpoint_larger_than_its_flush_step_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(dir.path()).unwrap();
    // The header and the state's end straddle flush steps at odd offsets.
    let len = 2 * crate::checkpoint::CHECKPOINT_SYNC_BYTES + 12_345;
    let state: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    let (path, digest) = store.write(7, &state).unwrap();
    assert_eq!(digest, *blake3::hash(&state).as_bytes());
    assert_eq!(
        fs::metadata(&path).unwrap().len() as usize,
        24 + len + 32,
        "header, state and checksum, nothing more"
    );
    let back = store.load_newest().unwrap().unwrap();
    assert_eq!((back.cid, back.digest), (7, digest));
    assert!(
        back.state[..] == state[..],
        "the state reads back unchanged"
    );
}
