//! A whole cluster in memory ([`Cluster`]): replicas without durable state joined by a
//! network that delivers in order or shuffled, loses what crashed or silent replicas send, and
//! fires the replicas' timers in virtual time.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tagma_core::{Action, Decision, Mode, PeerInput, Rejection, Replica};
use tagma_wire::{ConsensusId, PeerMessage, ReplicaId, RequestEnvelope, View};

use super::{Feed, params, r, replica, req};

/// A tiny deterministic generator for the cluster loop's choices.
pub struct Rng(u64);

impl Rng {
    pub fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

pub struct Cluster {
    pub replicas: Vec<Replica>,
    /// (from, to, message) in flight.
    pub network: VecDeque<(ReplicaId, ReplicaId, PeerMessage)>,
    pub delivered: Vec<Vec<Decision>>,
    /// Views installed, per replica: (instance, view, still a member).
    pub views: Vec<Vec<(ConsensusId, View, bool)>>,
    /// Replicas whose outgoing messages are dropped.
    pub silent: BTreeSet<ReplicaId>,
    /// Replicas that receive nothing either (crashed).
    pub crashed: BTreeSet<ReplicaId>,
    /// Deliver network messages in a random order instead of FIFO.
    pub reorder: bool,
    pub rng: Rng,
    pub now_ms: u64,
    /// Leader change makes some rejections normal (votes of a replaced leader, …).
    pub lenient: bool,
    /// Crash this replica once this many messages were delivered.
    pub crash_at: Option<(usize, ReplicaId)>,
    pub steps: usize,
}

impl Cluster {
    pub fn new(mode: Mode, n: u32, seed: u64) -> Self {
        let replicas: Vec<_> = (0..n).map(|me| replica(params(mode, n, me))).collect();
        Cluster {
            delivered: vec![Vec::new(); replicas.len()],
            views: vec![Vec::new(); replicas.len()],
            replicas,
            network: VecDeque::new(),
            silent: BTreeSet::new(),
            crashed: BTreeSet::new(),
            reorder: false,
            rng: Rng(seed),
            now_ms: 0,
            lenient: false,
            crash_at: None,
            steps: 0,
        }
    }

    /// Carries out the actions replica `i` queued.
    pub fn collect(&mut self, i: usize) {
        let from = self.replicas[i].me();
        while let Some(action) = self.replicas[i].poll_action() {
            match action {
                Action::Broadcast(msg) => {
                    for to in (0..self.replicas.len() as u32).map(r) {
                        if to != from {
                            self.send(from, to, msg.clone());
                        }
                    }
                }
                Action::Send { to, msg } => self.send(from, to, msg),
                Action::Deliver(decision) => {
                    let expected = self.delivered[i].len() as u64;
                    assert_eq!(
                        decision.cid,
                        ConsensusId(expected),
                        "replica {i} out of order"
                    );
                    self.delivered[i].push(super::unlogged(decision));
                }
                Action::ViewInstalled { cid, view, member } => {
                    self.views[i].push((cid, view, member));
                }
                Action::RegencyInstalled { .. } | Action::StateTransferNeeded { .. } => {}
                Action::ResendReply { .. } | Action::SendCurrentView { .. } => {}
                // Without durable state (`durable: false`) none of these occur.
                a @ (Action::ReadChunk { .. }
                | Action::PersistVote { .. }
                | Action::WriteVotes { .. }
                | Action::AwaitLogDurable { .. }
                | Action::ReadLog { .. }
                | Action::StoreChunk { .. }
                | Action::CheckpointNow { .. }
                | Action::DigestState { .. }
                | Action::InstallState(_)) => {
                    panic!("durable-state action without durability: {a:?}")
                }
            }
        }
    }

    fn send(&mut self, from: ReplicaId, to: ReplicaId, msg: PeerMessage) {
        if !self.silent.contains(&from) && !self.crashed.contains(&from) {
            self.network.push_back((from, to, msg));
        }
    }

    /// Every live replica receives `request` from its client.
    pub fn client_request(&mut self, request: RequestEnvelope) {
        self.now_ms += 1;
        for i in 0..self.replicas.len() {
            if self.crashed.contains(&r(i as u32)) {
                continue;
            }
            // A follower may already have ordered it (ResendReply): that is fine.
            self.replicas[i]
                .receive_request(self.now_ms, request.clone())
                .unwrap();
            self.collect(i);
        }
    }

    /// Delivers one network message; false if none is in flight.
    pub fn step(&mut self) -> bool {
        let index = if self.reorder && !self.network.is_empty() {
            self.rng.below(self.network.len())
        } else {
            0
        };
        let Some((from, to, msg)) = self.network.remove(index) else {
            return false;
        };
        self.steps += 1;
        if let Some((at, who)) = self.crash_at
            && self.steps >= at
        {
            self.crashed.insert(who);
            self.crash_at = None;
        }
        if self.crashed.contains(&to) || self.crashed.contains(&from) {
            return true;
        }
        self.now_ms += 1;
        let input = PeerInput::from_message(msg, |_| true).expect("a consensus message");
        let i = to.0 as usize;
        match self.replicas[i].receive(self.now_ms, from, input) {
            // Late votes of decided instances are normal.
            Ok(()) | Err(Rejection::Stale { .. }) => {}
            Err(_) if self.lenient => {}
            Err(other) => panic!("replica {i} rejected a message from {from}: {other:?}"),
        }
        self.collect(i);
        true
    }

    pub fn run_until_quiet(&mut self) {
        while self.step() {}
    }

    pub fn live(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|i| !self.crashed.contains(&r(*i as u32)))
            .collect()
    }

    /// Delivers messages and fires the replicas' timers in virtual time until nothing is in
    /// flight and no timer is due before `until_ms`.
    pub fn run_with_timers(&mut self, until_ms: u64) {
        loop {
            self.run_until_quiet();
            let due = self
                .live()
                .into_iter()
                .filter_map(|i| self.replicas[i].next_timeout_ms())
                .min();
            match due {
                Some(t) if t <= until_ms => {
                    self.now_ms = self.now_ms.max(t);
                    for i in self.live() {
                        if self.replicas[i]
                            .next_timeout_ms()
                            .is_some_and(|t| t <= self.now_ms)
                        {
                            self.replicas[i].tick(self.now_ms);
                            self.collect(i);
                        }
                    }
                }
                _ => return,
            }
        }
    }

    /// `clients` clients each send `per_client` requests to all replicas, interleaved with
    /// network steps; then the network drains.
    pub fn run_workload(&mut self, clients: u64, per_client: u64) {
        let mut next_seq: BTreeMap<u64, u64> = (1..=clients).map(|c| (c, 1)).collect();
        while !next_seq.is_empty() {
            if self.rng.below(3) == 0 {
                let keys: Vec<u64> = next_seq.keys().copied().collect();
                let client = keys[self.rng.below(keys.len())];
                let seq = next_seq[&client];
                self.client_request(req(client, seq));
                if seq == per_client {
                    next_seq.remove(&client);
                } else {
                    next_seq.insert(client, seq + 1);
                }
            } else {
                self.step();
            }
        }
        self.run_until_quiet();
    }

    /// All live replicas decided the same sequence, containing every request exactly once,
    /// per-client sequence numbers in order.
    pub fn check(&self, clients: u64, per_client: u64) {
        let live = self.live();
        let reference = &self.delivered[live[0]];
        for &i in &live {
            assert_eq!(&self.delivered[i], reference, "replica {i} diverged");
            assert_eq!(self.replicas[i].stats().pending_requests, 0);
        }
        let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
        for decision in reference {
            assert!(!decision.batch.requests.is_empty());
            assert!(decision.batch.requests.len() <= 16);
            for e in &decision.batch.requests {
                let last = seen.entry(e.request.client.0).or_insert(0);
                assert_eq!(e.request.seq.0, *last + 1, "client order broken");
                *last += 1;
            }
        }
        let want: BTreeMap<u64, u64> = (1..=clients).map(|c| (c, per_client)).collect();
        assert_eq!(seen, want, "every request exactly once");
        let timestamps: Vec<u64> = reference.iter().map(|d| d.batch.timestamp_ms).collect();
        assert!(timestamps.windows(2).all(|w| w[0] <= w[1]));
    }

    /// Every live replica installed a regency past 0 whose leader is not `not`.
    pub fn assert_new_leader(&self, not: ReplicaId) {
        for i in self.live() {
            let replica = &self.replicas[i];
            assert!(
                replica.regency().0 >= 1,
                "replica {i} never changed regency"
            );
            assert_ne!(
                replica.leader(),
                not,
                "replica {i} still follows the crashed leader"
            );
        }
    }
}
