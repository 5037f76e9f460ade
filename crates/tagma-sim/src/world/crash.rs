//! Crashes: when they happen (at the scenario's time, or at the replica's first crash point
//! after it), and what a durable replica's crash checks before its disk is cut: everything its
//! messages and its runtime's durability reports claimed is on its disk.
//!
//! A **crash point** is the end of an event after which a durable replica has written
//! something whose flush is still pending: a vote record (its WRITE or ACCEPT waits for it), a
//! decided instance's log record (its replies have left), the log records of a state it just
//! installed (its checkpoint is already durable). Crashing there is crashing between a send
//! and its flush, or between the steps of an installation, which random crash times hit
//! rarely.

use tagma_wire::{ConsensusId, Digest, Epoch, PeerMessage};

use crate::world::{Phase, World};

/// Chance that a scenario's crash of a durable replica waits for the replica's next crash
/// point.
pub(super) const CRASH_POINT_P: f64 = 0.5;

/// How long an armed crash waits for a crash point before it happens anyway.
pub(super) const CRASH_POINT_WAIT_MS: u64 = 200;

/// A vote a correct durable replica sent in its current life: the disk must hold it when the
/// replica crashes (or hold the instance's decision).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct SentVote {
    pub(super) cid: ConsensusId,
    pub(super) epoch: Epoch,
    pub(super) accept: bool,
    pub(super) hash: Digest,
}

impl World {
    /// A scenario's crash event for replica `r`.
    pub(super) fn on_crash(&mut self, r: usize, at_point: bool) {
        if self.phase != Phase::Faults || self.nodes[r].crashed {
            return;
        }
        if at_point && self.nodes[r].disk.is_some() {
            self.nodes[r].crash_point_armed = true;
            let at = self.now_ms + CRASH_POINT_WAIT_MS;
            self.schedule(at, super::Event::CrashPointMissed(r as u32));
            return;
        }
        self.crash(r);
    }

    /// After every event: a replica whose crash is armed crashes if the event left it with a
    /// write whose flush is pending.
    pub(super) fn crash_at_points(&mut self) {
        if self.phase != Phase::Faults {
            return;
        }
        for r in 0..self.nodes.len() {
            let node = &self.nodes[r];
            if !node.crash_point_armed || node.crashed {
                continue;
            }
            let Some(disk) = node.disk.as_ref() else {
                continue;
            };
            let point = if disk.installed_unflushed == Some(true) {
                "crash_points_after_repair"
            } else if disk.installed_unflushed == Some(false) {
                "crash_points_after_install"
            } else if !disk.unflushed_votes.is_empty() {
                "crash_points_unflushed_votes"
            } else if !disk.unflushed.is_empty() {
                "crash_points_unflushed_log"
            } else {
                continue;
            };
            self.count(point);
            self.crash(r);
            if !self.violations.is_empty() {
                return;
            }
        }
    }

    /// Replica `r` crashes now.
    pub(super) fn crash(&mut self, r: usize) {
        if self.nodes[r].crashed {
            return;
        }
        self.note(b'C', r as u64, 1, &[], || format!("replica {r} crashes"));
        self.nodes[r].crash_point_armed = false;
        self.check_durable_claims(r);
        if !self.violations.is_empty() {
            return;
        }
        self.nodes[r].crashed = true;
        self.nodes[r].incarnation += 1;
        self.count("crashes");
        self.crash_disk(r);
    }

    /// A correct durable replica's sent vote, remembered until it crashes.
    pub(super) fn note_sent_vote(&mut self, r: usize, msg: &PeerMessage) {
        let Some(disk) = self.nodes[r].disk.as_mut() else {
            return;
        };
        let (vote, accept) = match msg {
            PeerMessage::Write(v) => (*v, false),
            PeerMessage::Accept(a) => (a.vote, true),
            _ => return,
        };
        disk.sent_votes.insert(SentVote {
            cid: vote.cid,
            epoch: vote.epoch,
            accept,
            hash: vote.hash,
        });
    }

    /// What replica `r`'s flushed disk must hold when it crashes, whatever the crash then
    /// loses of the rest: every WRITE and ACCEPT it sent in this life (a vote record that
    /// claims the value, or the instance in its log or checkpoint), and every instance its
    /// runtime reported durable (`LogDurable`).
    fn check_durable_claims(&mut self, r: usize) {
        let Some(disk) = self.nodes[r].disk.as_mut() else {
            return;
        };
        let sent = std::mem::take(&mut disk.sent_votes);
        let reported = disk.reported_durable.take();
        let held = disk
            .log
            .last()
            .map(|d| d.cid.0)
            .max(disk.checkpoint.as_ref().map(|(c, _)| *c));
        if let Some(reported) = reported
            && held.is_none_or(|h| h < reported)
        {
            let msg = format!(
                "replica {r} was told instance {reported} is in its log; its flushed disk holds up to {held:?}"
            );
            return self.violation("durability", msg);
        }
        for vote in sent {
            if held.is_some_and(|h| h >= vote.cid.0) {
                continue;
            }
            let on_disk = disk.votes.get(&vote.cid.0).is_some_and(|c| {
                if vote.accept {
                    c.write_quorum
                        .is_some_and(|(e, h)| e > vote.epoch || (e == vote.epoch && h == vote.hash))
                } else {
                    // Or superseded: a record keeps the newest `WRITE_SET_MAX` values written,
                    // and the restored regency keeps the replica out of older epochs.
                    c.write_set.iter().any(|(e, value)| {
                        *e >= vote.epoch && tagma_crypto::digest(value) == vote.hash
                    }) || (c.write_set.len() >= tagma_core::WRITE_SET_MAX
                        && c.write_set.iter().all(|(e, _)| *e > vote.epoch))
                }
            });
            if !on_disk {
                let kind = if vote.accept { "ACCEPT" } else { "WRITE" };
                let msg = format!(
                    "replica {r} sent a {kind} for cid {} epoch {} whose vote is not on its disk when it crashes",
                    vote.cid, vote.epoch
                );
                return self.violation("durability", msg);
            }
        }
    }
}
