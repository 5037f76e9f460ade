//! A bounded cache of the most recent replies to ordered requests, per client.
//!
//! Bounds: at most `per_client` replies per client (the ones with the highest sequence numbers)
//! and at most `clients_max` clients. When a new client would exceed `clients_max`, the client
//! that was least recently *inserted into* is evicted (lookups do not refresh a client), in
//! `O(log n)` through an ordered index keyed by a monotonically increasing touch counter.

use std::collections::{BTreeMap, HashMap, VecDeque};

use tagma_wire::{ClientId, Reply, RequestSeq};

#[derive(Debug)]
struct ClientReplies {
    /// The key of this client in [`ReplyCache::order`].
    touched: u64,
    /// Ordered by strictly increasing `seq`.
    replies: VecDeque<Reply>,
}

/// Bounded per-client reply cache (see the module docs).
#[derive(Debug)]
pub struct ReplyCache {
    per_client: usize,
    clients_max: usize,
    clients: HashMap<ClientId, ClientReplies>,
    /// Touch counter → client; the first entry is the least recently inserted-into client.
    order: BTreeMap<u64, ClientId>,
    next_touch: u64,
}

impl ReplyCache {
    /// A cache keeping the last `per_client` replies of at most `clients_max` clients. A zero
    /// bound makes the cache keep nothing.
    pub fn new(per_client: usize, clients_max: usize) -> Self {
        ReplyCache {
            per_client,
            clients_max,
            clients: HashMap::new(),
            order: BTreeMap::new(),
            next_touch: 0,
        }
    }

    /// Caches `reply` under `(reply.client, reply.seq)`, replacing a reply with the same key.
    /// Only the `per_client` replies with the highest sequence numbers of a client are kept.
    pub fn insert(&mut self, reply: Reply) {
        if self.per_client == 0 || self.clients_max == 0 {
            return;
        }
        let touch = self.next_touch;
        self.next_touch += 1;
        let client = reply.client;
        match self.clients.get_mut(&client) {
            Some(entry) => {
                self.order.remove(&entry.touched);
                entry.touched = touch;
            }
            None => {
                while self.clients.len() >= self.clients_max {
                    let Some((_, evicted)) = self.order.pop_first() else {
                        break;
                    };
                    self.clients.remove(&evicted);
                }
                self.clients.insert(
                    client,
                    ClientReplies {
                        touched: touch,
                        replies: VecDeque::new(),
                    },
                );
            }
        }
        self.order.insert(touch, client);
        let entry = self.clients.get_mut(&client).expect("entry just ensured");
        let replies = &mut entry.replies;
        // Replies normally arrive in increasing seq order: append fast path.
        if replies.back().is_none_or(|last| last.seq < reply.seq) {
            replies.push_back(reply);
        } else {
            match replies.binary_search_by_key(&reply.seq, |r| r.seq) {
                Ok(i) => replies[i] = reply,
                Err(i) => replies.insert(i, reply),
            }
        }
        while replies.len() > self.per_client {
            replies.pop_front();
        }
    }

    /// The cached reply of `client` for `seq`, if any.
    pub fn get(&self, client: ClientId, seq: RequestSeq) -> Option<&Reply> {
        let replies = &self.clients.get(&client)?.replies;
        let i = replies.binary_search_by_key(&seq, |r| r.seq).ok()?;
        replies.get(i)
    }

    /// Every cached reply, oldest-inserted client first, each client's in `seq` order (the
    /// order [`ReplyCache::insert`] must see them again to rebuild the same cache).
    pub fn replies(&self) -> impl Iterator<Item = &Reply> {
        self.order
            .values()
            .filter_map(|c| self.clients.get(c))
            .flat_map(|c| c.replies.iter())
    }

    /// Replies kept per client.
    pub fn per_client(&self) -> usize {
        self.per_client
    }

    /// Clients kept.
    pub fn clients_max(&self) -> usize {
        self.clients_max
    }

    /// Number of clients with cached replies.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Total number of cached replies.
    pub fn len(&self) -> usize {
        self.clients.values().map(|c| c.replies.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tagma_wire::{RequestKind, ViewId};

    fn reply(client: u64, seq: u64) -> Reply {
        Reply {
            client: ClientId(client),
            seq: RequestSeq(seq),
            kind: RequestKind::Ordered,
            view: ViewId(0),
            payload: Bytes::from(format!("{client}/{seq}")),
        }
    }

    #[test]
    fn keeps_last_per_client() {
        let mut cache = ReplyCache::new(3, 10);
        for seq in 1..=5 {
            cache.insert(reply(7, seq));
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.get(ClientId(7), RequestSeq(1)).is_none());
        assert!(cache.get(ClientId(7), RequestSeq(2)).is_none());
        for seq in 3..=5 {
            assert_eq!(
                cache.get(ClientId(7), RequestSeq(seq)),
                Some(&reply(7, seq))
            );
        }
        assert!(cache.get(ClientId(8), RequestSeq(5)).is_none());
    }

    #[test]
    fn out_of_order_and_replacement() {
        let mut cache = ReplyCache::new(3, 10);
        cache.insert(reply(1, 5));
        cache.insert(reply(1, 2));
        cache.insert(reply(1, 9));
        cache.insert(reply(1, 7));
        // Kept: the three highest seqs.
        assert!(cache.get(ClientId(1), RequestSeq(2)).is_none());
        for seq in [5, 7, 9] {
            assert!(cache.get(ClientId(1), RequestSeq(seq)).is_some());
        }
        let mut replaced = reply(1, 7);
        replaced.payload = Bytes::from_static(b"new");
        cache.insert(replaced.clone());
        assert_eq!(cache.get(ClientId(1), RequestSeq(7)), Some(&replaced));
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn evicts_least_recently_inserted_client() {
        let mut cache = ReplyCache::new(2, 3);
        cache.insert(reply(1, 1));
        cache.insert(reply(2, 1));
        cache.insert(reply(3, 1));
        // Touch client 1 again: client 2 is now the least recently inserted-into.
        cache.insert(reply(1, 2));
        // A lookup does not refresh.
        assert!(cache.get(ClientId(2), RequestSeq(1)).is_some());
        cache.insert(reply(4, 1));
        assert_eq!(cache.clients(), 3);
        assert!(cache.get(ClientId(2), RequestSeq(1)).is_none());
        assert!(cache.get(ClientId(1), RequestSeq(1)).is_some());
        assert!(cache.get(ClientId(1), RequestSeq(2)).is_some());
        assert!(cache.get(ClientId(3), RequestSeq(1)).is_some());
        assert!(cache.get(ClientId(4), RequestSeq(1)).is_some());
        cache.insert(reply(5, 1));
        assert!(cache.get(ClientId(3), RequestSeq(1)).is_none());
        assert_eq!(cache.clients(), 3);
        assert_eq!(cache.len(), 4);
    }

    #[test]
    fn many_clients_stay_bounded() {
        let mut cache = ReplyCache::new(4, 100);
        for i in 0..10_000u64 {
            cache.insert(reply(i % 250, i));
        }
        assert_eq!(cache.clients(), 100);
        // 250 clients cycle through a 100-client cache: each is evicted before its next reply.
        assert_eq!(cache.len(), 100);
        assert_eq!(cache.order.len(), 100);
        // The most recent 100 clients are 150..250 (last inserts i = 9900..10000).
        assert!(cache.get(ClientId(9999 % 250), RequestSeq(9999)).is_some());
        assert!(cache.get(ClientId(9899 % 250), RequestSeq(9899)).is_none());

        let mut cache = ReplyCache::new(4, 100);
        for i in 0..10_000u64 {
            cache.insert(reply(i % 50, i));
        }
        assert_eq!(cache.clients(), 50);
        assert_eq!(cache.len(), 200);
        assert_eq!(cache.order.len(), 50);
    }

    #[test]
    fn zero_bounds_keep_nothing() {
        let mut cache = ReplyCache::new(0, 10);
        cache.insert(reply(1, 1));
        assert!(cache.is_empty());
        let mut cache = ReplyCache::new(10, 0);
        cache.insert(reply(1, 1));
        assert!(cache.is_empty());
        assert!(cache.get(ClientId(1), RequestSeq(1)).is_none());
    }
}
