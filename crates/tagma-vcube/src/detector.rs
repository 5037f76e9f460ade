//! The VCube failure detector, sans-IO: in each testing round node `i` tests every `j` of
//! its clusters for which `i` is the first node of `c(j, s)` it believes correct — with no
//! faults, its `d` hypercube neighbours; when a tester fails, the next correct node of the
//! cluster takes its tests over. Each node keeps an event counter per node (even: correct,
//! odd: suspected); a tester that gets no reply to `misses_max` tests in a row makes the
//! counter odd, one that gets a reply makes it even again, and a reply carries the tested
//! node's counters, of which the tester keeps every newer one. News of a crash so travels
//! from testers to their testers, one hypercube hop per round.
//!
//! Finding the nodes to test does not walk every cluster: `j = i ⊕ (2^(s−1) + k)` is tested
//! by `i` exactly when the nodes `i ⊕ (k ⊕ m)` for `m < k` are all suspected (they precede
//! `i` in `c(j, s)`), so only `k = 0` (the neighbour) counts until a node of `i`'s own lower
//! clusters is suspected.

use std::collections::{BTreeMap, BTreeSet};

use crate::cube::{Cube, NodeId};

/// The detector's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetectorConfig {
    /// Time between testing rounds.
    pub round_ms: u64,
    /// A test unanswered this long counts as a miss (and is sent again).
    pub test_timeout_ms: u64,
    /// Misses in a row that make a node suspected.
    pub misses_max: u32,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            round_ms: 2_000,
            test_timeout_ms: 400,
            misses_max: 3,
        }
    }
}

/// A change of a node's state in this detector's view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Suspected(NodeId),
    Trusted(NodeId),
}

struct Outstanding {
    sent_ms: u64,
    misses: u32,
}

/// One node's failure detector.
pub struct Detector {
    cube: Cube,
    me: NodeId,
    config: DetectorConfig,
    /// Event counters: even correct, odd suspected.
    counters: Vec<u32>,
    /// The nodes whose counter is not zero, for the test replies (in a long run without
    /// faults, none: a reply does not walk every counter).
    nonzero: BTreeSet<u32>,
    /// Nodes suspected now (the odd counters), for the testing rule.
    suspected: BTreeSet<u32>,
    next_round_ms: u64,
    outstanding: BTreeMap<NodeId, Outstanding>,
    /// When the earliest outstanding test times out (`u64::MAX`: none), kept as tests come
    /// and go because the node's next timeout is asked after every input.
    outstanding_due_ms: u64,
}

impl Detector {
    pub fn new(cube: Cube, me: NodeId, config: DetectorConfig, now_ms: u64) -> Detector {
        Detector {
            cube,
            me,
            config,
            counters: vec![0; cube.len() as usize],
            nonzero: BTreeSet::new(),
            suspected: BTreeSet::new(),
            next_round_ms: now_ms,
            outstanding: BTreeMap::new(),
            outstanding_due_ms: u64::MAX,
        }
    }

    /// Whether `id` is a node of the cube this detector believes correct.
    pub fn is_correct(&self, id: NodeId) -> bool {
        (self.counters.get(id.0 as usize)).is_some_and(|c| c % 2 == 0)
    }

    /// The nodes suspected now.
    pub fn suspected(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.suspected.iter().map(|&i| NodeId(i))
    }

    /// The counters a test reply carries: the non-zero ones.
    pub fn events(&self) -> Vec<(u32, u32)> {
        (self.nonzero.iter())
            .map(|&i| (i, self.counters[i as usize]))
            .collect()
    }

    fn gone(&self, id: u32) -> bool {
        id >= self.cube.len() || self.suspected.contains(&id)
    }

    /// The nodes `me` tests with its current view.
    pub fn tested(&self) -> Vec<NodeId> {
        let i = self.me.0;
        let mut out = Vec::new();
        for s in 1..=self.cube.dimension() {
            let base = 1u32 << (s - 1);
            // k = 0: the neighbour, which `me` always heads.
            if i ^ base < self.cube.len() {
                out.push(NodeId(i ^ base));
            }
            // k ≥ 1: only when `i ⊕ k` (the head of `c(j, s)`) is gone.
            for &x in self.suspected.range(..) {
                let k = x ^ i;
                if k == 0 || k >= base {
                    continue;
                }
                let j = i ^ (base + k);
                if j < self.cube.len() && (0..k).all(|m| self.gone(i ^ (k ^ m))) {
                    out.push(NodeId(j));
                }
            }
            // Absent ids are gone too, but never tested; their successors are found
            // through the present nodes above or are absent themselves.
        }
        out.sort();
        out.dedup();
        out
    }

    /// When [`Detector::tick`] next has work.
    pub fn next_timeout_ms(&self) -> u64 {
        self.outstanding_due_ms.min(self.next_round_ms)
    }

    /// Finds when the earliest outstanding test times out, after tests came or went.
    fn outstanding_changed(&mut self) {
        self.outstanding_due_ms = (self.outstanding.values())
            .map(|o| o.sent_ms + self.config.test_timeout_ms)
            .min()
            .unwrap_or(u64::MAX);
    }

    /// Advances to `now_ms`: returns the nodes to send a TEST to, and the changes of view
    /// (tests that went unanswered too often).
    pub fn tick(&mut self, now_ms: u64) -> (Vec<NodeId>, Vec<Change>) {
        let mut tests = Vec::new();
        let mut changes = Vec::new();
        let timeout = self.config.test_timeout_ms;
        let overdue: Vec<NodeId> = (self.outstanding.iter())
            .filter(|(_, o)| now_ms >= o.sent_ms + timeout)
            .map(|(j, _)| *j)
            .collect();
        for j in overdue {
            let o = self.outstanding.get_mut(&j).expect("listed");
            o.misses += 1;
            if o.misses >= self.config.misses_max {
                self.outstanding.remove(&j);
                if let Some(change) = self.set(j, true) {
                    changes.push(change);
                }
            } else {
                o.sent_ms = now_ms;
                tests.push(j);
            }
        }
        if now_ms >= self.next_round_ms {
            self.next_round_ms = now_ms + self.config.round_ms;
            for j in self.tested() {
                if let std::collections::btree_map::Entry::Vacant(e) = self.outstanding.entry(j) {
                    e.insert(Outstanding {
                        sent_ms: now_ms,
                        misses: 0,
                    });
                    tests.push(j);
                }
            }
        }
        self.outstanding_changed();
        (tests, changes)
    }

    /// `from` answered a test with its counters.
    pub fn on_reply(&mut self, from: NodeId, events: &[(u32, u32)]) -> Vec<Change> {
        let mut changes = Vec::new();
        if !self.cube.contains(from) {
            return changes;
        }
        if self.outstanding.remove(&from).is_some() {
            self.outstanding_changed();
        }
        if let Some(change) = self.set(from, false) {
            changes.push(change);
        }
        for &(id, counter) in events {
            if id == self.me.0 || id == from.0 || id >= self.cube.len() {
                continue;
            }
            let mine = self.counters[id as usize];
            if counter > mine {
                let was = mine % 2 == 1;
                self.counters[id as usize] = counter;
                self.nonzero.insert(id);
                let now = counter % 2 == 1;
                if now {
                    self.suspected.insert(id);
                } else {
                    self.suspected.remove(&id);
                }
                if was != now {
                    changes.push(if now {
                        Change::Suspected(NodeId(id))
                    } else {
                        Change::Trusted(NodeId(id))
                    });
                }
            }
        }
        changes
    }

    /// Suspects `j` on this node's own evidence (a reliable channel's unacknowledged
    /// retransmissions); its next answered test trusts it again.
    pub fn suspect(&mut self, j: NodeId) -> Option<Change> {
        if !self.cube.contains(j) || j == self.me {
            return None;
        }
        if self.outstanding.remove(&j).is_some() {
            self.outstanding_changed();
        }
        self.set(j, true)
    }

    /// Marks `j` suspected or correct by this node's own test.
    fn set(&mut self, j: NodeId, suspect: bool) -> Option<Change> {
        let c = &mut self.counters[j.0 as usize];
        if (*c % 2 == 1) == suspect {
            return None;
        }
        *c += 1;
        self.nonzero.insert(j.0);
        if suspect {
            self.suspected.insert(j.0);
            Some(Change::Suspected(j))
        } else {
            self.suspected.remove(&j.0);
            Some(Change::Trusted(j))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_faults_a_node_tests_its_neighbours() {
        let cube = Cube::new(8).unwrap();
        let d = Detector::new(cube, NodeId(5), DetectorConfig::default(), 0);
        assert_eq!(d.tested(), vec![NodeId(1), NodeId(4), NodeId(7)]);
    }

    #[test]
    fn the_tests_of_a_suspected_tester_move_to_the_next_in_its_cluster() {
        // Node 4 tests 5, 6 and 0 (it heads c(5, 1), c(6, 2) = [4, 5] and c(0, 3) =
        // [4, 5, 6, 7]); with 4 suspected, 5 heads the last two and takes 6 and 0 over.
        let cube = Cube::new(8).unwrap();
        let mut five = Detector::new(cube, NodeId(5), DetectorConfig::default(), 0);
        five.on_reply(NodeId(1), &[(4, 1)]);
        assert!(!five.is_correct(NodeId(4)));
        assert_eq!(
            five.tested(),
            vec![NodeId(0), NodeId(1), NodeId(4), NodeId(6), NodeId(7)]
        );
    }

    #[test]
    fn unanswered_tests_suspect_and_a_reply_trusts_again() {
        let cube = Cube::new(4).unwrap();
        let config = DetectorConfig {
            round_ms: 100,
            test_timeout_ms: 30,
            misses_max: 2,
        };
        let mut d = Detector::new(cube, NodeId(0), config, 0);
        let (tests, _) = d.tick(0);
        assert_eq!(tests, vec![NodeId(1), NodeId(2)]);
        assert_eq!(
            d.next_timeout_ms(),
            30,
            "the tests time out before the next round"
        );
        d.on_reply(NodeId(2), &[]);
        assert_eq!(d.next_timeout_ms(), 30, "node 1's test is still out");
        let (again, changes) = d.tick(30);
        assert_eq!((again, changes), (vec![NodeId(1)], vec![]));
        assert_eq!(d.next_timeout_ms(), 60, "sent again at 30");
        let (_, changes) = d.tick(60);
        assert_eq!(changes, vec![Change::Suspected(NodeId(1))]);
        assert!(!d.is_correct(NodeId(1)));
        assert_eq!(d.events(), vec![(1, 1)]);
        assert_eq!(d.next_timeout_ms(), 100, "no test out: the next round");
        assert_eq!(d.on_reply(NodeId(1), &[]), vec![Change::Trusted(NodeId(1))]);
        assert_eq!(d.events(), vec![(1, 2)]);
        // A test out, then its node suspected on other evidence: nothing times out.
        d.tick(100);
        assert!(d.next_timeout_ms() < 200);
        d.suspect(NodeId(1));
        d.suspect(NodeId(2));
        assert_eq!(d.next_timeout_ms(), 200);
        assert_eq!(d.events(), vec![(1, 3), (2, 1)]);
    }

    #[test]
    fn newer_counters_spread_from_the_tested_to_the_tester() {
        let cube = Cube::new(8).unwrap();
        let mut d = Detector::new(cube, NodeId(0), DetectorConfig::default(), 0);
        let changes = d.on_reply(NodeId(1), &[(6, 3), (0, 9), (42, 1)]);
        assert_eq!(changes, vec![Change::Suspected(NodeId(6))]);
        assert!(d.is_correct(NodeId(0)), "a node never suspects itself");
        assert_eq!(
            d.on_reply(NodeId(1), &[(6, 1)]),
            vec![],
            "older news is ignored"
        );
        assert_eq!(
            d.on_reply(NodeId(1), &[(6, 4)]),
            vec![Change::Trusted(NodeId(6))]
        );
    }
}
