//! A replica's newest consensus votes, kept on disk so that a replica that crashes never
//! forgets a value it may have helped decide (the core sends an ACCEPT only once the votes
//! that include it are here).
//!
//! Two files, `vote-0` and `vote-1`. Each holds one record: a magic, a checksum, the
//! write's sequence number, the instance and the payload's length, then the payload; the
//! newest valid record wins. A write goes to the file that does **not** hold the newest
//! flushed record, so a crash in the middle of a write (or before an unflushed write reached
//! the disk) leaves that record intact. A write may be flushed (`fdatasync`; the slots then
//! swap) or not: an unflushed record is a best effort, which survives a process crash (it is
//! in the page cache) but maybe not a power cut, and the next write overwrites it. The
//! files are never shortened (a shorter record leaves stale bytes after it, which the length
//! excludes), so rewriting them changes no file-system metadata once they have grown.
//!
//! Nothing here knows about consensus: a record is an instance and opaque bytes (the node
//! stores the core's votes on that instance).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::StorageError;

const MAGIC: [u8; 4] = *b"TGVT";
/// magic, checksum, sequence number, instance, payload length.
const HEADER_BYTES: usize = 4 + 4 + 8 + 8 + 4;

/// A vote as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredVote {
    /// Increases with every write: the newest valid file wins.
    pub seq: u64,
    pub cid: u64,
    pub payload: Vec<u8>,
}

/// The two vote files of one replica.
#[derive(Debug)]
pub struct VoteStore {
    dir: PathBuf,
    files: [File; 2],
    /// The sequence number of the newest vote written (0: none).
    last_seq: u64,
    /// The file holding the newest flushed record: writes go to the other one.
    flushed: usize,
    buf: Vec<u8>,
}

fn encode(out: &mut Vec<u8>, seq: u64, cid: u64, payload: &[u8]) {
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&cid.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out[8..]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// The vote in `image`, if it holds a complete and valid one.
fn decode(image: &[u8]) -> Option<StoredVote> {
    let header = image.get(..HEADER_BYTES)?;
    if header[..4] != MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let seq = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let cid = u64::from_le_bytes(header[16..24].try_into().ok()?);
    let len = u32::from_le_bytes(header[24..28].try_into().ok()?) as usize;
    let end = HEADER_BYTES.checked_add(len)?;
    let body = image.get(8..end)?;
    (crc32fast::hash(body) == crc).then(|| StoredVote {
        seq,
        cid,
        payload: image[HEADER_BYTES..end].to_vec(),
    })
}

impl VoteStore {
    /// Opens (creating if needed) the vote files in `dir` and reads the votes they hold,
    /// newest first, after flushing both files (what a process crash left in the page cache
    /// is on disk before anyone relies on it). A torn or damaged file reads as holding
    /// nothing: it can only be the one a crash interrupted, whose vote was never reported
    /// durable.
    pub fn open(dir: impl Into<PathBuf>) -> Result<(VoteStore, Vec<StoredVote>), StorageError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(StorageError::io(&dir))?;
        let open = |i: usize| -> Result<(File, Option<StoredVote>), StorageError> {
            let path = dir.join(format!("vote-{i}"));
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(StorageError::io(&path))?;
            let mut image = Vec::new();
            file.read_to_end(&mut image)
                .and_then(|_| file.sync_data())
                .map_err(StorageError::io(&path))?;
            Ok((file, decode(&image)))
        };
        let (f0, v0) = open(0)?;
        let (f1, v1) = open(1)?;
        flush_dir(&dir)?;
        // Both files are flushed now: the newest valid record is the one to keep.
        let flushed = match (&v0, &v1) {
            (Some(a), Some(b)) if b.seq > a.seq => 1,
            (None, Some(_)) => 1,
            _ => 0,
        };
        let mut votes: Vec<StoredVote> = v0.into_iter().chain(v1).collect();
        votes.sort_by_key(|v| std::cmp::Reverse(v.seq));
        let last_seq = votes.first().map_or(0, |v| v.seq);
        Ok((
            VoteStore {
                dir,
                files: [f0, f1],
                last_seq,
                flushed,
                buf: Vec::new(),
            },
            votes,
        ))
    }

    /// Writes `payload` as this replica's newest votes (on instance `cid`), and flushes them
    /// if `flush`; the newest flushed record stays in the other file until this one is flushed.
    pub fn write(&mut self, cid: u64, payload: &[u8], flush: bool) -> Result<(), StorageError> {
        let seq = self.last_seq + 1;
        let mut buf = std::mem::take(&mut self.buf);
        encode(&mut buf, seq, cid, payload);
        let i = 1 - self.flushed;
        let path = self.dir.join(format!("vote-{i}"));
        let result = self.files[i]
            .write_all_at(&buf, 0)
            .and_then(|()| {
                if flush {
                    self.files[i].sync_data()
                } else {
                    Ok(())
                }
            })
            .map_err(StorageError::io(&path));
        self.buf = buf;
        result?;
        self.last_seq = seq;
        if flush {
            self.flushed = i;
        }
        Ok(())
    }
}

fn flush_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StorageError::io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_vote_survives_and_a_torn_write_leaves_the_previous_one() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, votes) = VoteStore::open(dir.path()).unwrap();
        assert!(votes.is_empty());
        store.write(7, b"first value", true).unwrap();
        store.write(8, b"second", true).unwrap();
        drop(store);
        let (mut store, votes) = VoteStore::open(dir.path()).unwrap();
        assert_eq!(
            votes.iter().map(|v| (v.seq, v.cid)).collect::<Vec<_>>(),
            vec![(2, 8), (1, 7)]
        );
        assert_eq!(votes[0].payload, b"second");
        assert_eq!(votes[1].payload, b"first value");
        // The next write goes to the file of the older vote and continues the sequence; a
        // shorter value than the file's earlier content reads back exactly.
        store.write(9, b"x", true).unwrap();
        drop(store);
        let (_, votes) = VoteStore::open(dir.path()).unwrap();
        assert_eq!(votes[0].seq, 3);
        assert_eq!(votes[0].payload, b"x");
        assert_eq!(votes[1].cid, 8);
        // A crash tears the write of vote 4 (into the file of vote 2): vote 3 remains.
        let path = dir.path().join("vote-0");
        let mut image = std::fs::read(&path).unwrap();
        image[HEADER_BYTES] ^= 0xff;
        std::fs::write(&path, &image).unwrap();
        let (store, votes) = VoteStore::open(dir.path()).unwrap();
        assert_eq!(votes.len(), 1);
        assert_eq!((votes[0].seq, votes[0].cid), (3, 9));
        assert_eq!(store.last_seq, 3);
    }

    #[test]
    fn unsynced_writes_never_overwrite_the_newest_synced_record() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = VoteStore::open(dir.path()).unwrap();
        store.write(1, b"flushed", true).unwrap();
        store.write(2, b"best effort", false).unwrap();
        store.write(2, b"best effort again", false).unwrap();
        drop(store);
        // A process crash: the page cache still holds the unflushed record, the newest.
        let (_, votes) = VoteStore::open(dir.path()).unwrap();
        assert_eq!(votes[0].payload, b"best effort again");
        assert_eq!(votes[1].payload, b"flushed");
        // A power cut that lost (or tore) the unflushed writes: the flushed record is intact,
        // as both unflushed writes went to the other file.
        let flushed_file = (0..2)
            .map(|i| dir.path().join(format!("vote-{i}")))
            .find(|p| decode(&std::fs::read(p).unwrap()).unwrap().payload == b"flushed")
            .unwrap();
        for i in 0..2 {
            let path = dir.path().join(format!("vote-{i}"));
            if path != flushed_file {
                std::fs::write(&path, b"TGVT torn").unwrap();
            }
        }
        let (mut store, votes) = VoteStore::open(dir.path()).unwrap();
        assert_eq!(votes.len(), 1);
        assert_eq!((votes[0].cid, &votes[0].payload[..]), (1, &b"flushed"[..]));
        // The next writes go on from it, again into the other file.
        store.write(3, b"next", false).unwrap();
        assert_eq!(
            decode(&std::fs::read(&flushed_file).unwrap())
                .unwrap()
                .payload,
            b"flushed"
        );
        store.write(3, b"next, flushed", true).unwrap();
        drop(store);
        let (_, votes) = VoteStore::open(dir.path()).unwrap();
        assert_eq!(votes[0].payload, b"next, flushed");
        assert_eq!(votes[1].payload, b"flushed");
    }

    #[test]
    fn garbage_and_truncated_files_hold_no_vote() {
        let mut buf = Vec::new();
        let vote = StoredVote {
            seq: 5,
            cid: 1,
            payload: vec![1, 2, 3],
        };
        encode(&mut buf, vote.seq, vote.cid, &vote.payload);
        assert_eq!(decode(&buf), Some(vote));
        for cut in 0..buf.len() {
            assert_eq!(decode(&buf[..cut]), None, "cut at {cut}");
        }
        assert_eq!(decode(&[0u8; 64]), None);
    }
}
