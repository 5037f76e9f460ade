//! Vote records: the consensus thread writes this replica's votes on every instance not yet in
//! the log ([`VoteWriter`]), flushed when the core asks (an ACCEPT waits for them).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tagma_storage::VoteStore;
use tagma_wire::{ConsensusId, Decode, Encode, ReplicaId};

use crate::shared::Shared;

/// This replica's votes on disk (`VoteStore`), written by the consensus thread itself: the
/// ACCEPT that waits for them leaves right after their flush, with no thread hop on the way
/// (on a busy machine a hop costs a scheduling delay per replica and instance).
///
/// Every record holds the votes of each instance whose decision the storage thread has not
/// flushed yet, the newest per instance: an instance's votes leave the records only once its
/// decision is durable, so the two writers need no order between them. They are few: the
/// core decides at most [`tagma_core::LOG_LAG_MAX`] instances beyond what the log holds (a
/// log that stalls holds this replica back; it never waits here). Every record also carries the highest regency installed (an empty collect
/// when no other carries it). A record is flushed only when an ACCEPT (or an installed
/// regency) waits for it; otherwise it is written unflushed, a best effort that survives a
/// process crash.
///
/// An unflushed record holds only the instances whose votes changed since the last flushed
/// record (a WRITE's votes on the next instance, not again the batches of the instances
/// still waiting for the log). That loses nothing: the store never overwrites the newest
/// flushed record with an unflushed one, and recovery merges both files' records
/// (`recover`, newest votes per instance first). A flushed record holds every pending
/// instance, because the next write may overwrite the other file.
pub(crate) struct VoteWriter {
    store: VoteStore,
    /// By instance: the newest collect's regency and its encoding (encoded once, written
    /// with every record until the instance is logged).
    pending: std::collections::BTreeMap<u64, (tagma_wire::Regency, Bytes)>,
    /// The highest regency this replica installed: every record carries it, even when the
    /// instances whose collects carried it are all logged (a restart goes on from it).
    regency: Option<(tagma_wire::Regency, ReplicaId)>,
    /// The instances whose votes changed since the last flushed record: what an unflushed
    /// record holds.
    changed: std::collections::BTreeSet<u64>,
    /// The newest `PersistVote` added; whether a vote was added since the last record;
    /// whether the last record was written unflushed.
    added: u64,
    dirty: bool,
    unflushed: bool,
    buf: Vec<u8>,
}

impl VoteWriter {
    /// `restored` are the votes read back at start, newest record first: they stay in the
    /// records until their instances are logged too (the core reports restored votes only
    /// for the instance in progress, and a later one may be restored as well). Before
    /// anything else it writes them all back as one flushed record: the newest record on disk
    /// may be an unflushed one holding only some of them (the store, which takes it for the
    /// newest, lets the next write overwrite the other file), and a power cut must not leave
    /// only that one.
    /// `logged_below`: the instances below it are in the recovered log.
    pub(crate) fn new(
        store: VoteStore,
        restored: &[tagma_wire::Collect],
        logged_below: u64,
    ) -> Result<Self, String> {
        let regency = restored.iter().map(|c| (c.regency, c.replica)).max();
        let mut pending = std::collections::BTreeMap::new();
        // An empty collect carries only a regency (the marker of a record none of whose
        // other collects did, with the instance at which it was written): it must not stand
        // for that instance's votes, which an older record may hold. `regency` keeps it.
        let votes = restored
            .iter()
            .filter(|c| c.write_quorum.is_some() || !c.write_set.is_empty());
        for collect in votes {
            pending
                .entry(collect.cid.0)
                .or_insert_with(|| (collect.regency, collect.to_bytes()));
        }
        let mut writer = VoteWriter {
            store,
            regency,
            changed: std::collections::BTreeSet::new(),
            pending,
            added: 0,
            dirty: false,
            unflushed: false,
            buf: Vec::new(),
        };
        if !restored.is_empty() {
            writer.write_record(true, logged_below)?;
        }
        Ok(writer)
    }

    /// Takes the core's `PersistVote { seq, votes }`, superseding its earlier votes on that
    /// instance; [`VoteWriter::flush`] writes it.
    pub(crate) fn add(&mut self, seq: u64, votes: &tagma_wire::Collect) {
        self.added = self.added.max(seq);
        self.regency = self.regency.max(Some((votes.regency, votes.replica)));
        self.pending
            .insert(votes.cid.0, (votes.regency, votes.to_bytes()));
        self.changed.insert(votes.cid.0);
        self.dirty = true;
    }

    /// Writes a record of every vote added, flushed if `flush` (if no vote was added since
    /// the last record, only to flush an unflushed one). Returns the newest `PersistVote`
    /// sequence number now durable, if this record is flushed. The instances the storage
    /// thread has logged leave the records.
    pub(crate) fn flush(&mut self, sh: &Shared, flush: bool) -> Result<Option<u64>, String> {
        if !(self.dirty || flush && self.unflushed) {
            return Ok(None);
        }
        let logged_below = sh.durable_below.load(Ordering::SeqCst);
        if flush {
            sh.stall.wait(tagma_core::config::StallFlush::Votes);
        }
        let writing = std::time::Instant::now();
        self.write_record(flush, logged_below)?;
        if !flush {
            return Ok(None);
        }
        let us = writing.elapsed().as_micros() as u64;
        sh.metrics.vote_flushes.fetch_add(1, Ordering::Relaxed);
        sh.metrics.vote_flush_us.fetch_add(us, Ordering::Relaxed);
        Ok(Some(self.added))
    }

    /// Writes the next record (see [`VoteWriter::encode_record`]); the instances below
    /// `logged_below` are in the log and leave the records.
    pub(crate) fn write_record(&mut self, flush: bool, logged_below: u64) -> Result<(), String> {
        let newest = self.encode_record(flush, logged_below);
        self.store
            .write(newest, &self.buf, flush)
            .map_err(|e| format!("cannot write this replica's votes: {e}"))?;
        self.dirty = false;
        self.unflushed = !flush;
        if flush {
            self.changed.clear();
        }
        Ok(())
    }

    /// Encodes into `buf` the next record (every pending instance if `flush`, else those
    /// changed since the last flushed record), with the regency marker when none of its
    /// collects carries the highest regency. Returns the newest instance it holds.
    pub(crate) fn encode_record(&mut self, flush: bool, logged_below: u64) -> u64 {
        self.pending.retain(|cid, _| *cid >= logged_below);
        self.changed.retain(|cid| *cid >= logged_below);
        let held: Vec<(&u64, &(tagma_wire::Regency, Bytes))> = if flush {
            self.pending.iter().collect()
        } else {
            self.pending
                .iter()
                .filter(|(cid, _)| self.changed.contains(cid))
                .collect()
        };
        let marker = self
            .regency
            .filter(|(r, _)| held.iter().all(|(_, (c, _))| c < r))
            .map(|(regency, replica)| {
                tagma_wire::Collect {
                    replica,
                    regency,
                    cid: ConsensusId(logged_below),
                    write_quorum: None,
                    write_set: Vec::new(),
                }
                .to_bytes()
            });
        let record: Vec<&[u8]> = held
            .iter()
            .map(|(_, (_, bytes))| &bytes[..])
            .chain(marker.as_deref())
            .collect();
        encode_votes(&mut self.buf, &record);
        held.last().map_or(logged_below, |(cid, _)| **cid)
    }
}

/// A vote record's payload: the count, then each encoded collect, length-prefixed.
pub(crate) fn encode_votes(out: &mut Vec<u8>, collects: &[&[u8]]) {
    out.clear();
    out.extend_from_slice(&(collects.len() as u32).to_le_bytes());
    for bytes in collects {
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
}

/// The collects of a vote record's payload (`None`: it does not decode).
pub(crate) fn decode_votes(payload: &[u8]) -> Option<Vec<tagma_wire::Collect>> {
    let mut rest = payload;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = rest.split_at_checked(n)?;
        rest = tail;
        Some(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?);
    let mut votes = Vec::new();
    for _ in 0..count {
        let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let bytes = Bytes::copy_from_slice(take(len)?);
        votes.push(tagma_wire::Collect::decode(&bytes).ok()?);
    }
    take(0)?;
    rest.is_empty().then_some(votes)
}

#[cfg(test)]
mod tests {
    use tagma_wire::{Collect, Digest, Epoch, Regency};

    use super::*;

    fn collect(cid: u64, value: &'static [u8]) -> Collect {
        Collect {
            replica: ReplicaId(1),
            regency: Regency(0),
            cid: ConsensusId(cid),
            write_quorum: Some((Epoch(0), Digest([7; 32]))),
            write_set: vec![(Epoch(0), Bytes::from_static(value))],
        }
    }

    #[test]
    fn a_vote_record_holds_the_votes_of_several_instances_and_rejects_damage() {
        let votes = [collect(4, b"four"), collect(5, b"five")];
        let encoded: Vec<Bytes> = votes.iter().map(|c| c.to_bytes()).collect();
        let record: Vec<&[u8]> = encoded.iter().map(|b| &b[..]).collect();
        let mut buf = Vec::new();
        encode_votes(&mut buf, &record);
        assert_eq!(decode_votes(&buf), Some(votes.to_vec()));
        encode_votes(&mut buf, &[]);
        assert_eq!(decode_votes(&buf), Some(vec![]));
        encode_votes(&mut buf, &record);
        for cut in 0..buf.len() {
            assert_eq!(decode_votes(&buf[..cut]), None, "cut at {cut}");
        }
        buf.push(0);
        assert_eq!(decode_votes(&buf), None, "trailing bytes");
    }

    #[test]
    fn a_regency_marker_never_stands_for_an_instance_votes() {
        let in_regency = |cid: u64, value: &'static [u8], regency: u32| Collect {
            regency: Regency(regency),
            ..collect(cid, value)
        };
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = VoteStore::open(dir.path()).unwrap();
        let mut writer = VoteWriter::new(store, &[], 0).unwrap();
        writer.add(1, &in_regency(10, b"ten", 0));
        writer.add(2, &in_regency(11, b"eleven", 1));
        writer.write_record(true, 0).unwrap();
        // Votes on an instance that is logged before the next (unflushed) record: that record
        // holds only the regency marker, at the first instance not logged (10).
        writer.add(3, &in_regency(9, b"nine", 1));
        writer.write_record(false, 10).unwrap();
        let marker = decode_votes(&writer.buf).unwrap();
        assert_eq!(marker.len(), 1);
        assert_eq!(
            (marker[0].cid, marker[0].regency),
            (ConsensusId(10), Regency(1))
        );
        // After a restart the marker does not replace instance 10's votes.
        let restored = read_back(dir.path());
        let (store, _) = VoteStore::open(dir.path()).unwrap();
        let restarted = VoteWriter::new(store, &restored, 0).unwrap();
        assert_eq!(
            decode_votes(&restarted.buf),
            Some(vec![
                in_regency(10, b"ten", 0),
                in_regency(11, b"eleven", 1)
            ])
        );
    }

    /// What `recover` reads back: every valid record's collects, newest record first.
    fn read_back(dir: &std::path::Path) -> Vec<Collect> {
        let (_, stored) = VoteStore::open(dir).unwrap();
        stored
            .iter()
            .flat_map(|v| decode_votes(&v.payload).unwrap())
            .collect()
    }

    #[test]
    fn an_unsynced_record_holds_only_the_votes_changed_since_the_last_synced_one() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = VoteStore::open(dir.path()).unwrap();
        let mut writer = VoteWriter::new(store, &[], 0).unwrap();
        writer.add(1, &collect(4, b"four"));
        writer.write_record(true, 0).unwrap();
        assert_eq!(decode_votes(&writer.buf), Some(vec![collect(4, b"four")]));
        // A WRITE on the next instance while instance 4 waits for the log: only 5 is
        // written, and both are read back.
        writer.add(2, &collect(5, b"five"));
        writer.write_record(false, 0).unwrap();
        assert_eq!(decode_votes(&writer.buf), Some(vec![collect(5, b"five")]));
        assert_eq!(
            read_back(dir.path()),
            vec![collect(5, b"five"), collect(4, b"four")]
        );
        // A second unflushed record overwrites the first: it holds everything changed since
        // the flushed one.
        writer.add(3, &collect(6, b"six"));
        writer.write_record(false, 0).unwrap();
        assert_eq!(
            decode_votes(&writer.buf),
            Some(vec![collect(5, b"five"), collect(6, b"six")])
        );
        assert_eq!(
            read_back(dir.path()),
            vec![collect(5, b"five"), collect(6, b"six"), collect(4, b"four")]
        );
        // After a restart from these records (the newest an unflushed one), the writer first
        // writes every restored instance back as one flushed record: the next write goes to
        // the file that holds the flushed record with instance 4.
        {
            let restored = read_back(dir.path());
            let (store, _) = VoteStore::open(dir.path()).unwrap();
            let restarted = VoteWriter::new(store, &restored, 0).unwrap();
            let all = vec![collect(4, b"four"), collect(5, b"five"), collect(6, b"six")];
            assert_eq!(decode_votes(&restarted.buf), Some(all.clone()));
            let (_, stored) = VoteStore::open(dir.path()).unwrap();
            assert_eq!(decode_votes(&stored[0].payload), Some(all));
        }
        // A flushed record holds every instance not yet logged (4 is, now).
        writer.write_record(true, 5).unwrap();
        assert_eq!(
            decode_votes(&writer.buf),
            Some(vec![collect(5, b"five"), collect(6, b"six")])
        );
    }
}
