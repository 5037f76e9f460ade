//! Checkpoints: snapshots of the service numbered by the last instance they include.
//!
//! A checkpoint is the file `<cid, 20 digits>.ckp` in the checkpoint directory:
//!
//! ```text
//! magic "TGCK" | version u32 LE (2) | cid u64 LE | state length u64 LE | state | checksum (32 B)
//! ```
//!
//! where the checksum is BLAKE3 of the header followed by the state's own BLAKE3 digest: one
//! pass over the state yields both the checksum and the digest that names the checkpoint in
//! state transfer ([`Checkpoint::digest`]). [`CheckpointStore::write`] takes the
//! steps in the order that leaves every crash recoverable, exactly:
//! 1. write `<cid>.tmp` and `fdatasync` it;
//! 2. rename it to `<cid>.ckp` (atomic) and flush the directory;
//! 3. remove older checkpoints but the previous one (and stale temporary files): the
//!    previous one is still served to a state transfer that started before this one;
//! 4. only then may the caller release the log prefix up to the *previous* checkpoint
//!    ([`crate::Log::release_through`]), so the log still covers both.
//!
//! State transfer reads a checkpoint's state in chunks ([`CheckpointStore::read_chunk`])
//! and stores an incoming one chunk by chunk in `incoming.part`
//! ([`CheckpointStore::store_chunk`]), never holding more than a chunk in memory.
//!
//! Recovery ([`CheckpointStore::load_newest`]) takes the newest valid `.ckp`, or a valid
//! `.tmp` newer than it (the crash came between steps 1 and 2), and replays only log records
//! after its cid, so no instance is applied twice or lost whichever step a crash
//! interrupted. A `.tmp` that does not validate was never complete: it is ignored. A newest
//! `.ckp` that does not validate is corruption and is reported.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{StorageError, flush_dir};
use bytes::Bytes;

const MAGIC: [u8; 4] = *b"TGCK";
const VERSION: u32 = 2;
const HEADER_BYTES: usize = 4 + 4 + 8 + 8;
const DIGEST_BYTES: usize = 32;

/// A loaded checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The last instance the state includes.
    pub cid: u64,
    /// The service's state (a view of the file's bytes as read).
    pub state: Bytes,
    /// BLAKE3 of `state`.
    pub digest: [u8; DIGEST_BYTES],
}

/// A checkpoint is written and flushed this many bytes at a time ([`write_paced`]).
pub const CHECKPOINT_SYNC_BYTES: usize = 4 << 20;

/// Writes `parts` one after the other to `file` and flushes them, [`CHECKPOINT_SYNC_BYTES`]
/// at a time. A checkpoint holds the whole state (hundreds of megabytes), and the vote and
/// log flushes of every replica sharing the disk queue behind whatever is being written
/// back: one flush at the end would put the whole state in front of them at once and stall
/// consensus for the time the disk takes to write it. Flushing as it goes keeps at most a
/// few megabytes ahead of them.
fn write_paced(mut file: &File, parts: &[&[u8]]) -> std::io::Result<()> {
    let mut unsynced = 0;
    for part in parts {
        let mut rest = *part;
        while !rest.is_empty() {
            let take = rest.len().min(CHECKPOINT_SYNC_BYTES - unsynced);
            file.write_all(&rest[..take])?;
            rest = &rest[take..];
            unsynced += take;
            if unsynced == CHECKPOINT_SYNC_BYTES {
                file.sync_data()?;
                unsynced = 0;
            }
        }
    }
    file.sync_data()
}

/// The checksum that ends a checkpoint file.
fn checksum(header: &[u8; HEADER_BYTES], state_digest: &[u8; DIGEST_BYTES]) -> [u8; DIGEST_BYTES] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(header);
    hasher.update(state_digest);
    *hasher.finalize().as_bytes()
}

/// The checkpoint directory.
#[derive(Clone, Debug)]
pub struct CheckpointStore {
    dir: PathBuf,
}

fn name(cid: u64, ext: &str) -> String {
    format!("{cid:020}.{ext}")
}

fn header(cid: u64, len: usize) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[..4].copy_from_slice(&MAGIC);
    header[4..8].copy_from_slice(&VERSION.to_le_bytes());
    header[8..16].copy_from_slice(&cid.to_le_bytes());
    header[16..24].copy_from_slice(&(len as u64).to_le_bytes());
    header
}

/// `(cid, is_tmp, path)` of every checkpoint file.
fn list(dir: &Path) -> Result<Vec<(u64, bool, PathBuf)>, StorageError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(StorageError::io(dir))? {
        let path = entry.map_err(StorageError::io(dir))?.path();
        let Some(file) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let parsed = file
            .strip_suffix(".ckp")
            .map(|c| (c, false))
            .or_else(|| file.strip_suffix(".tmp").map(|c| (c, true)));
        if let Some((cid, tmp)) = parsed
            && let Ok(cid) = cid.parse::<u64>()
        {
            out.push((cid, tmp, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads and validates a checkpoint file.
fn load(path: &Path, named_cid: u64) -> Result<Checkpoint, String> {
    // Read in one allocation of the file's size (a growing buffer would copy the state
    // several times and touch twice the memory).
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() < HEADER_BYTES + DIGEST_BYTES {
        return Err(format!("{} bytes, shorter than a header", bytes.len()));
    }
    if bytes[..4] != MAGIC {
        return Err("not a checkpoint (bad magic)".into());
    }
    let version = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!("format version {version}, expected {VERSION}"));
    }
    let cid = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let body_end = HEADER_BYTES as u64 + len;
    if body_end + DIGEST_BYTES as u64 != bytes.len() as u64 {
        return Err(format!(
            "state of {len} bytes announced, {} bytes in the file",
            bytes.len()
        ));
    }
    let body_end = body_end as usize;
    let digest = *blake3::hash(&bytes[HEADER_BYTES..body_end]).as_bytes();
    let header: [u8; HEADER_BYTES] = bytes[..HEADER_BYTES].try_into().expect("header bytes");
    if checksum(&header, &digest)[..] != bytes[body_end..] {
        return Err("checksum mismatch".into());
    }
    if cid != named_cid {
        return Err(format!("holds instance {cid}, named {named_cid}"));
    }
    // The state is a view of the buffer read: no copy.
    Ok(Checkpoint {
        cid,
        state: Bytes::from(bytes).slice(HEADER_BYTES..body_end),
        digest,
    })
}

impl CheckpointStore {
    /// Opens (creating if needed) the checkpoint directory.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, StorageError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(StorageError::io(&dir))?;
        Ok(CheckpointStore { dir })
    }

    /// Durably stores `state` as the checkpoint of instance `cid` (steps 1–3 of the module
    /// documentation), then removes older checkpoints but the previous one. Returns the
    /// file and BLAKE3 of `state`.
    pub fn write(
        &self,
        cid: u64,
        state: &[u8],
    ) -> Result<(PathBuf, [u8; DIGEST_BYTES]), StorageError> {
        let tmp = self.dir.join(name(cid, "tmp"));
        let digest = *blake3::hash(state).as_bytes();
        let file = File::create(&tmp).map_err(StorageError::io(&tmp))?;
        let header = header(cid, state.len());
        write_paced(&file, &[&header, state, &checksum(&header, &digest)])
            .map_err(StorageError::io(&tmp))?;
        Ok((self.publish(cid, &tmp)?, digest))
    }

    /// Steps 2–3: renames the flushed `tmp` to the checkpoint of `cid`, flushes the directory,
    /// removes older checkpoints but the previous one.
    fn publish(&self, cid: u64, tmp: &Path) -> Result<PathBuf, StorageError> {
        let ckp = self.dir.join(name(cid, "ckp"));
        std::fs::rename(tmp, &ckp).map_err(StorageError::io(&ckp))?;
        flush_dir(&self.dir)?;
        let files = list(&self.dir)?;
        let previous = files
            .iter()
            .filter(|(c, tmp, _)| !tmp && *c < cid)
            .map(|(c, _, _)| *c)
            .max();
        for (old, tmp, path) in files {
            if old < cid && (tmp || Some(old) != previous) {
                std::fs::remove_file(&path).map_err(StorageError::io(&path))?;
            }
        }
        // Step 3's invariant: this checkpoint and at most the one before it remain (a newer
        // one may exist only if checkpoints were published out of order, a caller's bug).
        debug_assert!(
            list(&self.dir).is_ok_and(|left| left
                .iter()
                .filter(|(c, tmp, _)| !tmp && *c <= cid)
                .count()
                <= 2),
            "more than two checkpoints kept at or below {cid}"
        );
        Ok(ckp)
    }

    /// `len` bytes at `offset` of the state of the durable checkpoint of `cid`.
    pub fn read_chunk(&self, cid: u64, offset: u64, len: usize) -> Result<Vec<u8>, StorageError> {
        use std::os::unix::fs::FileExt;
        let path = self.dir.join(name(cid, "ckp"));
        let file = File::open(&path).map_err(StorageError::io(&path))?;
        let file_len = file.metadata().map_err(StorageError::io(&path))?.len();
        let state_len = file_len.saturating_sub((HEADER_BYTES + DIGEST_BYTES) as u64);
        if offset.saturating_add(len as u64) > state_len {
            // Past the state: the checksum behind it is not state.
            return Err(StorageError::io(&path)(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("bytes {offset}..+{len} past the state's {state_len}"),
            )));
        }
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, HEADER_BYTES as u64 + offset)
            .map_err(StorageError::io(&path))?;
        Ok(buf)
    }

    fn incoming_path(&self) -> PathBuf {
        self.dir.join("incoming.part")
    }

    /// Stores a chunk of the state of a checkpoint being fetched (offset 0 starts a new one).
    /// The file leaves room for the header, so that once validated it becomes a checkpoint
    /// without being written again ([`CheckpointStore::promote_incoming`]).
    pub fn store_chunk(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        use std::os::unix::fs::FileExt;
        let path = self.incoming_path();
        // Chunks arrive in order from offset 0 (the fetcher only stores the next one): a
        // chunk past the end (one before it was not stored) would leave a hole of zeroes.
        let stored = std::fs::metadata(&path).map_or(0, |m| m.len());
        if offset > 0 && stored < HEADER_BYTES as u64 + offset {
            return Err(StorageError::Incoming {
                reason: format!("a chunk at {offset} past the {stored} bytes stored"),
            });
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(offset == 0)
            .open(&path)
            .map_err(StorageError::io(&path))?;
        file.write_all_at(data, HEADER_BYTES as u64 + offset)
            .map_err(StorageError::io(&path))
    }

    /// The fetched checkpoint's state, stored by [`CheckpointStore::store_chunk`].
    pub fn read_incoming(&self) -> Result<Vec<u8>, StorageError> {
        use std::os::unix::fs::FileExt;
        let path = self.incoming_path();
        let file = File::open(&path).map_err(StorageError::io(&path))?;
        let len = file.metadata().map_err(StorageError::io(&path))?.len();
        let mut state = vec![0u8; len.saturating_sub(HEADER_BYTES as u64) as usize];
        file.read_exact_at(&mut state, HEADER_BYTES as u64)
            .map_err(StorageError::io(&path))?;
        Ok(state)
    }

    /// Makes the fetched checkpoint (validated: `len` bytes whose BLAKE3 is `digest`) the
    /// durable checkpoint of `cid`: its header and checksum are written around the state
    /// already on disk (nothing is hashed or copied again), then it takes the steps of
    /// [`CheckpointStore::write`] from the flush on.
    pub fn promote_incoming(
        &self,
        cid: u64,
        len: usize,
        digest: &[u8; DIGEST_BYTES],
    ) -> Result<PathBuf, StorageError> {
        use std::os::unix::fs::FileExt;
        let path = self.incoming_path();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(StorageError::io(&path))?;
        let stored = file.metadata().map_err(StorageError::io(&path))?.len();
        if stored < (HEADER_BYTES + len) as u64 {
            return Err(StorageError::Incoming {
                reason: format!("{stored} bytes stored, {len} validated"),
            });
        }
        let header = header(cid, len);
        file.write_all_at(&header, 0)
            .and_then(|()| {
                file.write_all_at(&checksum(&header, digest), (HEADER_BYTES + len) as u64)
            })
            .and_then(|()| file.set_len((HEADER_BYTES + len + DIGEST_BYTES) as u64))
            .and_then(|()| file.sync_data())
            .map_err(StorageError::io(&path))?;
        self.publish(cid, &path)
    }

    /// Removes the fetched checkpoint once installed (or rejected).
    pub fn remove_incoming(&self) {
        let _ = std::fs::remove_file(self.incoming_path());
    }

    /// The newest valid checkpoint (see the module documentation), `None` if there is none.
    pub fn load_newest(&self) -> Result<Option<Checkpoint>, StorageError> {
        let files = list(&self.dir)?;
        let newest_ckp = files.iter().rev().find(|(_, tmp, _)| !tmp);
        let checkpoint = match newest_ckp {
            Some((cid, _, path)) => {
                Some(
                    load(path, *cid).map_err(|reason| StorageError::CorruptCheckpoint {
                        path: path.clone(),
                        reason,
                    })?,
                )
            }
            None => None,
        };
        let floor = checkpoint.as_ref().map(|c| c.cid);
        // A complete temporary file newer than the newest checkpoint: the rename was not
        // reached, the state is good.
        for (cid, tmp, path) in files.iter().rev() {
            if !tmp || floor.is_some_and(|f| *cid <= f) {
                continue;
            }
            match load(path, *cid) {
                Ok(newer) => return Ok(Some(newer)),
                Err(reason) => tracing::info!(
                    file = %path.display(),
                    "ignoring an incomplete checkpoint (a crash while writing it): {reason}"
                ),
            }
        }
        Ok(checkpoint)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
