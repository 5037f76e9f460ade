//! Client sessions of a primary-backup server: the replies to each client's latest
//! requests, so that a retransmitted request gets its reply again and an old one is never
//! executed twice. Both servers record the same commits in the same order, so their
//! sessions agree, and a joining server receives them with the state.
//!
//! A client may have several requests in flight, committed in any order: a session keeps
//! the replies of its `replies_max` highest committed requests, and every request number
//! at or below its floor (the highest it let go of) counts as done. Sessions are bounded
//! too: beyond `sessions_max`, the client that committed least recently (then the lowest
//! id) loses its session, the same one on both servers.

use std::collections::{BTreeMap, HashSet, VecDeque};

use bytes::Bytes;
use tagma_wire::{ClientId, EveRequest, EveSession, RequestSeq};

/// What a request is, for its client's session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Committed: here is its reply.
    Reply(Bytes),
    /// Committed long ago (its reply is gone): it must not run again.
    Old,
    /// Not committed.
    New,
}

/// What became of a client request a server received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Committed already: reply with this.
    Reply(Bytes),
    /// Committed long ago, or already queued or in a batch: nothing to do.
    Known,
    /// The queue is full: dropped (the client retransmits).
    Dropped,
    /// Queued for a batch.
    Queued,
}

/// The requests waiting for a batch at a server, and the keys of those queued or in a batch
/// not yet committed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Intake {
    pub(crate) queue: VecDeque<EveRequest>,
    pub(crate) pending: HashSet<(ClientId, RequestSeq)>,
}

impl Intake {
    /// Takes `request` in, against the clients' `sessions` and a queue of at most
    /// `queue_max`.
    pub(crate) fn admit(
        &mut self,
        sessions: &Sessions,
        queue_max: usize,
        request: EveRequest,
    ) -> Admission {
        match sessions.check(request.client, request.seq) {
            Seen::Reply(reply) => return Admission::Reply(reply),
            Seen::Old => return Admission::Known,
            Seen::New => {}
        }
        let key = (request.client, request.seq);
        if self.pending.contains(&key) {
            return Admission::Known;
        }
        if self.queue.len() >= queue_max {
            return Admission::Dropped;
        }
        self.pending.insert(key);
        self.queue.push_back(request);
        Admission::Queued
    }
}

#[derive(Clone, Debug, Default)]
struct Session {
    floor: RequestSeq,
    replies: BTreeMap<RequestSeq, Bytes>,
    /// The batch of its last commit.
    last_batch: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct Sessions {
    replies_max: usize,
    sessions_max: usize,
    clients: BTreeMap<ClientId, Session>,
}

impl Sessions {
    pub(crate) fn new(replies_max: usize, sessions_max: usize) -> Sessions {
        Sessions {
            replies_max: replies_max.max(1),
            sessions_max: sessions_max.max(1),
            clients: BTreeMap::new(),
        }
    }

    pub(crate) fn check(&self, client: ClientId, seq: RequestSeq) -> Seen {
        let Some(session) = self.clients.get(&client) else {
            return Seen::New;
        };
        match session.replies.get(&seq) {
            Some(reply) => Seen::Reply(reply.clone()),
            None if seq <= session.floor => Seen::Old,
            None => Seen::New,
        }
    }

    /// Request `seq` of `client` committed in batch `batch` with `reply`.
    pub(crate) fn record(&mut self, client: ClientId, seq: RequestSeq, reply: Bytes, batch: u64) {
        let session = self.clients.entry(client).or_default();
        if seq <= session.floor {
            return;
        }
        session.replies.insert(seq, reply);
        session.last_batch = batch;
        while session.replies.len() > self.replies_max {
            let (oldest, _) = session
                .replies
                .pop_first()
                .expect("over the bound: not empty");
            session.floor = session.floor.max(oldest);
        }
        if self.clients.len() > self.sessions_max {
            let evicted = (self.clients.iter())
                .min_by_key(|(id, s)| (s.last_batch, **id))
                .map(|(id, _)| *id)
                .expect("over the bound: not empty");
            self.clients.remove(&evicted);
        }
    }

    /// Every session, as a joining server receives them: one entry per kept reply, each
    /// with its session's floor (a session with no reply kept gives one, with an empty
    /// reply at its floor).
    pub(crate) fn export(&self) -> Vec<EveSession> {
        let mut out = Vec::new();
        for (client, s) in &self.clients {
            if s.replies.is_empty() {
                out.push(EveSession {
                    client: *client,
                    floor: s.floor,
                    seq: s.floor,
                    reply: Bytes::new(),
                    last_batch: s.last_batch,
                });
            }
            for (seq, reply) in &s.replies {
                out.push(EveSession {
                    client: *client,
                    floor: s.floor,
                    seq: *seq,
                    reply: reply.clone(),
                    last_batch: s.last_batch,
                });
            }
        }
        out
    }

    /// The sessions a primary handed over.
    pub(crate) fn import(&mut self, entries: Vec<EveSession>) {
        self.clients.clear();
        for e in entries {
            let session = self.clients.entry(e.client).or_default();
            session.floor = session.floor.max(e.floor);
            session.last_batch = session.last_batch.max(e.last_batch);
            if e.seq > e.floor {
                session.replies.insert(e.seq, e.reply);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(n: u32) -> ClientId {
        ClientId::new(1, n)
    }

    #[test]
    fn replies_are_kept_for_the_latest_requests_and_older_ones_count_as_done() {
        let mut s = Sessions::new(2, 10);
        s.record(c(1), RequestSeq(2), Bytes::from_static(b"two"), 1);
        // Committed out of order: request 1 after request 2.
        assert_eq!(s.check(c(1), RequestSeq(1)), Seen::New);
        s.record(c(1), RequestSeq(1), Bytes::from_static(b"one"), 2);
        assert_eq!(
            s.check(c(1), RequestSeq(1)),
            Seen::Reply(Bytes::from_static(b"one"))
        );
        s.record(c(1), RequestSeq(3), Bytes::from_static(b"three"), 3);
        // Two replies kept: the first is let go and counts as done.
        assert_eq!(s.check(c(1), RequestSeq(1)), Seen::Old);
        assert_eq!(
            s.check(c(1), RequestSeq(3)),
            Seen::Reply(Bytes::from_static(b"three"))
        );
        assert_eq!(s.check(c(1), RequestSeq(4)), Seen::New);
        assert_eq!(s.check(c(2), RequestSeq(1)), Seen::New);
        // Handed over, the sessions answer alike.
        let mut joined = Sessions::new(2, 10);
        joined.import(s.export());
        for seq in 0..5 {
            assert_eq!(
                joined.check(c(1), RequestSeq(seq)),
                s.check(c(1), RequestSeq(seq))
            );
        }
    }

    #[test]
    fn beyond_the_bound_the_least_recent_client_loses_its_session() {
        let mut s = Sessions::new(4, 2);
        s.record(c(1), RequestSeq(1), Bytes::new(), 5);
        s.record(c(2), RequestSeq(1), Bytes::new(), 3);
        s.record(c(3), RequestSeq(1), Bytes::new(), 7);
        assert_eq!(s.check(c(2), RequestSeq(1)), Seen::New);
        assert_eq!(s.check(c(1), RequestSeq(1)), Seen::Reply(Bytes::new()));
        assert_eq!(s.check(c(3), RequestSeq(1)), Seen::Reply(Bytes::new()));
    }
}
