//! The log of decided instances: append-only, segmented, preallocated, checksummed.
//!
//! A segment is a file `<first cid, 20 digits>.log` in the log directory, preallocated to
//! [`LogOptions::segment_bytes`] (so appends do not grow the file) and filled with records:
//!
//! ```text
//! magic u32 LE "TGLR" | payload length u32 LE | cid u64 LE | CRC-32 u32 LE | payload
//! ```
//!
//! The CRC covers the length, the cid and the payload. The records of a segment have
//! consecutive cids; the unused, preallocated rest of a segment is zeros, so a zero header
//! ends it. Segments may leave gaps between them (instances covered by a checkpoint are never
//! logged after it); [`Log::replay_from`] reports a gap inside the range it must replay.
//!
//! What a crash can leave, and what [`Log::open`] makes of it:
//! - a **torn tail**: the last segment ends in a record that is incomplete or fails its
//!   checksum, with no valid record after it. It was never flushed as a whole (flushes follow
//!   appends), so it is cut off and zeroed; appends continue there.
//! - **corruption** anywhere else — a bad record followed by a valid one, or a bad record in a
//!   segment that is not the last — cannot come from a crash. It is reported
//!   ([`StorageError::CorruptLog`]) and nothing is guessed.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::{StorageError, flush_dir};

/// A record's header: magic, payload length, cid, CRC.
pub const HEADER_BYTES: usize = 4 + 4 + 8 + 4;
/// The largest payload a record holds.
pub const RECORD_BYTES_MAX: usize = 1 << 30;
const MAGIC: [u8; 4] = *b"TGLR";
/// Appends buffered beyond this are written out before the next flush (bounded memory).
const BUFFER_BYTES_MAX: usize = 4 << 20;
/// A new segment is zeroed in writes of this size.
const ZERO_CHUNK: usize = 1 << 20;
/// The alignment of direct IO: offsets, lengths and buffers are multiples of it.
const BLOCK: usize = 4096;
/// A staging buffer grown beyond this for one large record is given back after its write.
const STAGE_KEPT_MAX: usize = 2 * BUFFER_BYTES_MAX;

/// Where and how the log lives.
#[derive(Clone, Debug)]
pub struct LogOptions {
    pub dir: PathBuf,
    /// Size each segment is preallocated to (a record larger than this gets a segment of its
    /// own, sized to fit).
    pub segment_bytes: u64,
}

#[derive(Debug)]
struct Sealed {
    path: PathBuf,
    /// From the file name (the cid its first record carries, if any).
    first_cid: u64,
    last_cid: Option<u64>,
    /// Where each record starts (record k holds instance `first_cid + k`), and where the
    /// last one ends: reads fetch only the bytes of the records they need.
    index: Index,
}

/// The offsets of a segment's records (8 bytes per record, bounded by the segment's size).
#[derive(Debug, Default)]
struct Index {
    starts: Vec<u64>,
    end: u64,
}

impl Index {
    /// The byte range holding records `k..k_end` (indices), if the segment has them.
    fn range(&self, k: usize, k_end: usize) -> Option<(u64, u64)> {
        let start = *self.starts.get(k)?;
        let end = self.starts.get(k_end).copied().unwrap_or(self.end);
        Some((start, end))
    }
}

#[derive(Debug)]
struct Current {
    file: File,
    path: PathBuf,
    first_cid: u64,
    last_cid: Option<u64>,
    /// Bytes of records written to the file (appends go here).
    written: u64,
    capacity: u64,
    /// Every record appended, buffered ones included (offsets as if written).
    index: Index,
    /// The file was opened with `O_DIRECT`: appends bypass the page cache (no copy into it,
    /// no write-back at the flush), written in whole blocks from an aligned buffer. Where the
    /// file system refuses direct IO the segment is written through the page cache.
    direct: bool,
    /// With `direct`: the bytes of the block holding `written`, from its start to `written`,
    /// rewritten with the next write (their copy on disk is identical, so a torn rewrite
    /// cannot damage a flushed record).
    tail: Vec<u8>,
}

/// A block-aligned staging buffer for direct writes (safe code: an aligned window into a
/// plain vector that is never reallocated while used).
#[derive(Debug, Default)]
struct Stage {
    raw: Vec<u8>,
    offset: usize,
}

impl Stage {
    /// An aligned slice of `len` bytes (contents unspecified).
    fn get(&mut self, len: usize) -> &mut [u8] {
        if self.raw.len() < len + BLOCK {
            self.raw = vec![0; len + BLOCK];
            self.offset = self.raw.as_ptr().align_offset(BLOCK);
        }
        &mut self.raw[self.offset..self.offset + len]
    }

    /// Gives back a buffer grown for one large record.
    fn trim(&mut self) {
        if self.raw.len() > STAGE_KEPT_MAX + BLOCK {
            *self = Stage::default();
        }
    }
}

/// Opens a segment for appending, with `O_DIRECT` where the file system allows it.
fn open_for_append(path: &Path, create: bool) -> Result<(File, bool), StorageError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    options.read(true).write(true);
    if create {
        options.create(true).truncate(true);
    }
    let direct = rustix::fs::OFlags::DIRECT.bits() as i32;
    match options.clone().custom_flags(direct).open(path) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
            tracing::info!(
                segment = %path.display(),
                "the file system refuses direct IO: the log is written through the page cache"
            );
            let file = options.open(path).map_err(StorageError::io(path))?;
            Ok((file, false))
        }
        Err(e) => Err(StorageError::io(path)(e)),
    }
}

/// The log; see the module documentation.
#[derive(Debug)]
pub struct Log {
    opts: LogOptions,
    /// Segments before the current one, oldest first.
    sealed: Vec<Sealed>,
    current: Option<Current>,
    /// Records appended and not yet written to the current segment.
    buf: Vec<u8>,
    /// Where direct writes are assembled.
    stage: Stage,
    /// The cid the next append must carry (`None`: any, the log is new).
    next_cid: Option<u64>,
}

/// One decoded record of a segment image.
struct Scanned<'a> {
    cid: u64,
    payload: &'a [u8],
    end: usize,
}

/// The record at `offset` of `image`, if it is complete and valid (and, when `expected` is
/// given, carries that cid).
fn record_at(image: &[u8], offset: usize, expected: Option<u64>) -> Option<Scanned<'_>> {
    let header = image.get(offset..offset.checked_add(HEADER_BYTES)?)?;
    if header[..4] != MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(header[4..8].try_into().ok()?) as usize;
    let cid = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let crc = u32::from_le_bytes(header[16..20].try_into().ok()?);
    if len > RECORD_BYTES_MAX || expected.is_some_and(|e| e != cid) {
        return None;
    }
    let start = offset + HEADER_BYTES;
    let payload = image.get(start..start.checked_add(len)?)?;
    (checksum(&header[4..16], payload) == crc).then_some(Scanned {
        cid,
        payload,
        end: start + len,
    })
}

fn checksum(len_and_cid: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(len_and_cid);
    h.update(payload);
    h.finalize()
}

/// Appends the record of instance `cid` to `out`, as [`Log::append`] writes it (public so a
/// simulated disk can hold the exact bytes recovery reads).
pub fn encode_record(out: &mut Vec<u8>, cid: u64, payload: &[u8]) {
    let mut len_and_cid = [0u8; 12];
    len_and_cid[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    len_and_cid[4..].copy_from_slice(&cid.to_le_bytes());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&len_and_cid);
    out.extend_from_slice(&checksum(&len_and_cid, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// What a scan of one segment found.
struct SegmentScan {
    /// Where each valid record starts.
    starts: Vec<u64>,
    first_cid: Option<u64>,
    last_cid: Option<u64>,
    /// End of the valid records.
    end: u64,
    /// A bad record at `end` (`Some(reason)`), as opposed to a clean end (zeros).
    bad: Option<String>,
    /// Whether a valid record lies after a bad one.
    valid_after_bad: bool,
    /// One past the last non-zero byte.
    dirty_end: u64,
}

fn read_image(path: &Path) -> Result<Vec<u8>, StorageError> {
    let mut image = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut image))
        .map_err(StorageError::io(path))?;
    Ok(image)
}

fn scan_segment(image: &[u8], named_first: u64) -> SegmentScan {
    let mut offset = 0usize;
    let mut expected = named_first;
    let (mut first_cid, mut last_cid) = (None, None);
    let mut starts = Vec::new();
    while let Some(r) = record_at(image, offset, Some(expected)) {
        starts.push(offset as u64);
        first_cid.get_or_insert(r.cid);
        last_cid = Some(r.cid);
        offset = r.end;
        expected += 1;
    }
    let rest = &image[offset..];
    let dirty_end = offset + rest.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
    let bad = (dirty_end > offset).then(|| {
        if rest.len() < HEADER_BYTES {
            "an incomplete record header".to_string()
        } else if rest[..4] != MAGIC {
            "no record magic".to_string()
        } else {
            format!("a record that is incomplete, out of sequence (instance {expected} expected) or fails its checksum")
        }
    });
    // Could the bad bytes be followed by a valid record? (Then they are not a torn tail.)
    let valid_after_bad = bad.is_some()
        && (offset + 1..dirty_end)
            .any(|o| image[o..].starts_with(&MAGIC) && record_at(image, o, None).is_some());
    SegmentScan {
        starts,
        first_cid,
        last_cid,
        end: offset as u64,
        bad,
        valid_after_bad,
        dirty_end: dirty_end as u64,
    }
}

/// How a segment ends, as recovery judges it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SegmentEnd {
    /// The valid records end in zeros (or the image ends).
    Clean,
    /// The last segment ends in an incomplete or invalid record with no valid record after
    /// it: normally a write a crash interrupted, never flushed as a whole; recovery cuts it
    /// off. A damaged *last flushed* record looks the same and is cut off too: that instance
    /// is then lost at this replica (the others, or state transfer, supply it again).
    Torn { offset: u64 },
    /// A bad record followed by a valid one, or a bad record in a segment that is not the
    /// last: no crash does this; recovery reports it and guesses nothing.
    Corrupt { offset: u64, reason: String },
}

/// What recovery reads from one segment's bytes: its valid records (instance and payload, in
/// order, from `first_cid` on) and how it ends. [`Log::open`] judges every segment this way.
pub fn read_segment(
    image: &[u8],
    first_cid: u64,
    is_last: bool,
) -> (Vec<(u64, &[u8])>, SegmentEnd) {
    let scan = scan_segment(image, first_cid);
    let mut records = Vec::new();
    let mut offset = 0usize;
    while offset < scan.end as usize {
        let r = record_at(image, offset, None).expect("the scan found a valid record here");
        records.push((r.cid, r.payload));
        offset = r.end;
    }
    (records, judge(&scan, is_last))
}

fn judge(scan: &SegmentScan, is_last: bool) -> SegmentEnd {
    match &scan.bad {
        None => SegmentEnd::Clean,
        Some(reason) if !is_last || scan.valid_after_bad => SegmentEnd::Corrupt {
            offset: scan.end,
            reason: reason.clone(),
        },
        Some(_) => SegmentEnd::Torn { offset: scan.end },
    }
}

fn segment_name(first_cid: u64) -> String {
    format!("{first_cid:020}.log")
}

/// The log's segment files, oldest first, with the first cid their name gives.
fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StorageError> {
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(StorageError::io(dir))? {
        let path = entry.map_err(StorageError::io(dir))?.path();
        let first = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(first) = first {
            segments.push((first, path));
        }
    }
    segments.sort();
    Ok(segments)
}

impl Log {
    /// Opens (creating if needed) the log in `opts.dir`: scans every segment, cuts off a torn
    /// tail, and reports corruption.
    pub fn open(opts: LogOptions) -> Result<Log, StorageError> {
        std::fs::create_dir_all(&opts.dir).map_err(StorageError::io(&opts.dir))?;
        let segments = list_segments(&opts.dir)?;
        let count = segments.len();
        let mut sealed = Vec::new();
        let mut current = None;
        for (i, (named_first, path)) in segments.into_iter().enumerate() {
            let image = read_image(&path)?;
            let scan = scan_segment(&image, named_first);
            let is_last = i + 1 == count;
            let end = judge(&scan, is_last);
            if let SegmentEnd::Corrupt { offset, reason } = end {
                return Err(StorageError::CorruptLog {
                    path,
                    offset,
                    reason,
                });
            }
            let index = Index {
                starts: scan.starts,
                end: scan.end,
            };
            if !is_last {
                sealed.push(Sealed {
                    path,
                    first_cid: named_first,
                    last_cid: scan.last_cid,
                    index,
                });
                continue;
            }
            if let SegmentEnd::Torn { .. } = end {
                // A torn tail: zero it, so the next appends start on clean space.
                tracing::warn!(
                    segment = %path.display(),
                    offset = scan.end,
                    "log ends in a torn record (a crash during a write): cut off"
                );
                let zeros = vec![0u8; (scan.dirty_end - scan.end) as usize];
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|file| {
                        file.write_all_at(&zeros, scan.end)?;
                        file.sync_data()
                    })
                    .map_err(StorageError::io(&path))?;
            }
            let (file, direct) = open_for_append(&path, false)?;
            let block_start = (scan.end as usize) / BLOCK * BLOCK;
            current = Some(Current {
                file,
                path,
                first_cid: scan.first_cid.unwrap_or(named_first),
                last_cid: scan.last_cid,
                written: scan.end,
                capacity: image.len() as u64,
                index,
                direct,
                tail: image[block_start..scan.end as usize].to_vec(),
            });
        }
        let next_cid = current
            .as_ref()
            .and_then(|c| c.last_cid)
            .or_else(|| sealed.iter().rev().find_map(|s| s.last_cid))
            .map(|c| c + 1);
        Ok(Log {
            opts,
            sealed,
            current,
            buf: Vec::new(),
            stage: Stage::default(),
            next_cid,
        })
    }

    /// The oldest instance the log holds.
    pub fn first_cid(&self) -> Option<u64> {
        self.sealed
            .iter()
            .find(|s| s.last_cid.is_some())
            .map(|s| s.first_cid)
            .or_else(|| {
                self.current
                    .as_ref()
                    .filter(|c| c.last_cid.is_some())
                    .map(|c| c.first_cid)
            })
    }

    /// The newest instance appended (flushed or not).
    pub fn last_cid(&self) -> Option<u64> {
        self.next_cid.map(|c| c - 1)
    }

    /// Continues the log after instance `cid` (recovered from a checkpoint beyond the
    /// log's end): the next append must be `cid + 1`.
    pub fn continue_after(&mut self, cid: u64) -> Result<(), StorageError> {
        if self.next_cid.is_some_and(|n| n > cid + 1) {
            return Err(StorageError::OutOfOrder {
                expected: self.next_cid.unwrap_or(0),
                got: cid + 1,
            });
        }
        self.next_cid = Some(cid + 1);
        Ok(())
    }

    /// Appends instance `cid` (the next one). Nothing is durable before [`Log::flush`].
    pub fn append(&mut self, cid: u64, payload: &[u8]) -> Result<(), StorageError> {
        if let Some(expected) = self.next_cid
            && cid != expected
        {
            return Err(StorageError::OutOfOrder { expected, got: cid });
        }
        if payload.len() > RECORD_BYTES_MAX {
            return Err(StorageError::RecordTooLarge {
                len: payload.len(),
                max: RECORD_BYTES_MAX,
            });
        }
        let size = (HEADER_BYTES + payload.len()) as u64;
        // A segment's records are consecutive from the cid in its name.
        let fits = self.current.as_ref().is_some_and(|c| {
            c.written + self.buf.len() as u64 + size <= c.capacity
                && c.last_cid.map_or(cid == c.first_cid, |l| l + 1 == cid)
        });
        if !fits {
            self.rotate(cid, size)?;
        }
        let c = self
            .current
            .as_mut()
            .expect("rotate leaves a current segment");
        c.index.starts.push(c.written + self.buf.len() as u64);
        encode_record(&mut self.buf, cid, payload);
        c.index.end = c.written + self.buf.len() as u64;
        c.last_cid = Some(cid);
        self.next_cid = Some(cid + 1);
        if self.buf.len() > BUFFER_BYTES_MAX {
            self.write_out()?;
        }
        Ok(())
    }

    /// Writes and forces every append so far to disk (one `fdatasync`: a group commit).
    pub fn flush(&mut self) -> Result<(), StorageError> {
        self.write_out()?;
        if let Some(c) = &self.current {
            c.file.sync_data().map_err(StorageError::io(&c.path))?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> Result<(), StorageError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let c = self
            .current
            .as_mut()
            .expect("appends always have a current segment");
        if c.direct {
            // Whole blocks from the start of the one holding `written`: its head again
            // (identical bytes), the new records, zeros up to the block's end (the segment
            // was zeroed, so the zeros change nothing).
            let start = c.written - c.tail.len() as u64;
            debug_assert_eq!(start % BLOCK as u64, 0);
            let used = c.tail.len() + self.buf.len();
            let stage = self.stage.get(used.next_multiple_of(BLOCK));
            stage[..c.tail.len()].copy_from_slice(&c.tail);
            stage[c.tail.len()..used].copy_from_slice(&self.buf);
            stage[used..].fill(0);
            match c.file.write_all_at(stage, start) {
                Ok(()) => {}
                // Direct IO refused after all (an alignment larger than a block): the same
                // bytes through the page cache, and so on for this segment.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                    tracing::info!(
                        segment = %c.path.display(),
                        "the file system refuses direct writes: the log is written through the page cache"
                    );
                    c.file = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&c.path)
                        .map_err(StorageError::io(&c.path))?;
                    c.direct = false;
                    c.file
                        .write_all_at(stage, start)
                        .map_err(StorageError::io(&c.path))?;
                }
                Err(e) => return Err(StorageError::io(&c.path)(e)),
            }
            c.tail.clear();
            c.tail.extend_from_slice(&stage[used / BLOCK * BLOCK..used]);
            self.stage.trim();
        } else {
            c.file
                .write_all_at(&self.buf, c.written)
                .map_err(StorageError::io(&c.path))?;
        }
        c.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Seals the current segment (flushed) and starts one for `first_cid`, big enough for a
    /// record of `size` bytes.
    fn rotate(&mut self, first_cid: u64, size: u64) -> Result<(), StorageError> {
        self.flush()?;
        if let Some(c) = self.current.take() {
            if c.last_cid.is_some() {
                self.sealed.push(Sealed {
                    path: c.path,
                    first_cid: c.first_cid,
                    last_cid: c.last_cid,
                    index: c.index,
                });
            } else {
                // Never used: remove it rather than keep an empty segment around.
                std::fs::remove_file(&c.path).map_err(StorageError::io(&c.path))?;
            }
        }
        let path = self.opts.dir.join(segment_name(first_cid));
        let capacity = self.opts.segment_bytes.max(size);
        // Direct writes are whole blocks: the file covers the block holding the last byte.
        let file_len = capacity.next_multiple_of(BLOCK as u64);
        let (mut file, mut direct) = open_for_append(&path, true)?;
        // Preallocate and zero the whole segment once, so that appends change no metadata
        // (neither the size nor extents to convert from "unwritten"): each fdatasync then
        // forces data only (measured here: 0.12 ms instead of 0.21 ms per flush after a plain
        // fallocate). fallocate first reserves the space, so a full disk fails now, not in
        // the middle of an append.
        let _ = rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, file_len);
        let chunk = ZERO_CHUNK.min(file_len as usize);
        let zeros = self.stage.get(chunk);
        zeros.fill(0);
        let mut at = 0u64;
        while at < file_len {
            let len = chunk.min((file_len - at) as usize);
            match file.write_all_at(&zeros[..len], at) {
                Ok(()) => at += len as u64,
                // The file system took O_DIRECT at open but refuses the write: write through
                // the page cache (an alignment larger than a block shows at the first append,
                // which falls back the same way).
                Err(e)
                    if direct
                        && e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) =>
                {
                    tracing::info!(
                        segment = %path.display(),
                        "the file system refuses direct writes: the log is written through the page cache"
                    );
                    file = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&path)
                        .map_err(StorageError::io(&path))?;
                    direct = false;
                }
                Err(e) => return Err(StorageError::io(&path)(e)),
            }
        }
        file.sync_all().map_err(StorageError::io(&path))?;
        flush_dir(&self.opts.dir)?;
        self.current = Some(Current {
            file,
            path,
            first_cid,
            last_cid: None,
            written: 0,
            capacity,
            index: Index::default(),
            direct,
            tail: Vec::new(),
        });
        Ok(())
    }

    /// Hands every record from instance `from` on to `f`, in order. Errs on a gap in that
    /// range (some instance is missing) or if a segment changed under it.
    pub fn replay_from<E: From<StorageError>>(
        &self,
        from: u64,
        f: impl FnMut(u64, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.replay_range(from..u64::MAX, f)
    }

    /// [`Log::replay_from`] for the instances of `range` only; segments wholly outside it are
    /// not read.
    pub fn replay_range<E: From<StorageError>>(
        &self,
        range: std::ops::Range<u64>,
        mut f: impl FnMut(u64, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let from = range.start;
        let current = self
            .current
            .as_ref()
            .map(|c| (c.first_cid, &c.path, &c.index));
        let segments = self
            .sealed
            .iter()
            .map(|s| (s.first_cid, &s.path, &s.index))
            .chain(current);
        let mut expected = from;
        for (first, path, index) in segments {
            // Only the records of the range, found by the index.
            let k = range.start.saturating_sub(first);
            let k_end = range
                .end
                .saturating_sub(first)
                .min(index.starts.len() as u64);
            if k >= k_end {
                continue;
            }
            let Some((start, end)) = index.range(k as usize, k_end as usize) else {
                continue;
            };
            let image = self.read_bytes(path, start, end)?;
            let mut offset = 0usize;
            for cid in first + k..first + k_end {
                let Some(r) = record_at(&image, offset, Some(cid)) else {
                    // The file no longer holds what the index says.
                    return Err(StorageError::Gap {
                        expected: cid,
                        log_first: first,
                    }
                    .into());
                };
                if cid != expected {
                    return Err(StorageError::Gap {
                        expected,
                        log_first: cid,
                    }
                    .into());
                }
                f(cid, r.payload)?;
                expected += 1;
                offset = r.end;
            }
        }
        Ok(())
    }

    /// Bytes `start..end` of a segment, appends not yet written out included.
    fn read_bytes(&self, path: &Path, start: u64, end: u64) -> Result<Vec<u8>, StorageError> {
        let written = match &self.current {
            Some(c) if c.path == path => c.written,
            _ => u64::MAX,
        };
        let on_disk = end.min(written).saturating_sub(start) as usize;
        let mut bytes = vec![0u8; on_disk];
        if on_disk > 0 {
            File::open(path)
                .and_then(|file| file.read_exact_at(&mut bytes, start))
                .map_err(StorageError::io(path))?;
        }
        if end > written {
            let from = start.max(written) - written;
            bytes.extend_from_slice(&self.buf[from as usize..(end - written) as usize]);
        }
        Ok(bytes)
    }

    /// Drops the segments whose every instance is at most `cid` (covered by a durable
    /// checkpoint). The current segment is kept.
    pub fn release_through(&mut self, cid: u64) -> Result<usize, StorageError> {
        let mut released = 0;
        let mut kept = Vec::new();
        for s in self.sealed.drain(..) {
            if s.last_cid.is_none_or(|l| l <= cid) {
                std::fs::remove_file(&s.path).map_err(StorageError::io(&s.path))?;
                released += 1;
            } else {
                kept.push(s);
            }
        }
        self.sealed = kept;
        if released > 0 {
            flush_dir(&self.opts.dir)?;
        }
        Ok(released)
    }

    /// Drops every record and continues after `cid`: the replica installed, by state
    /// transfer, a state (durably checkpointed at `cid`) beyond everything logged here. The
    /// next append must be `cid + 1`.
    pub fn reset_after(&mut self, cid: u64) -> Result<(), StorageError> {
        self.buf.clear();
        self.stage = Stage::default();
        if let Some(c) = self.current.take() {
            std::fs::remove_file(&c.path).map_err(StorageError::io(&c.path))?;
        }
        for s in self.sealed.drain(..) {
            std::fs::remove_file(&s.path).map_err(StorageError::io(&s.path))?;
        }
        flush_dir(&self.opts.dir)?;
        self.next_cid = Some(cid + 1);
        Ok(())
    }

    /// Segment files in use (sealed and current).
    pub fn segment_count(&self) -> usize {
        self.sealed.len() + usize::from(self.current.is_some())
    }
}
