//! The synchronization phase's value choice: Cachin's predicates
//! over the collects a new leader gathered, as pure functions.
//!
//! A collect says, for the instance in progress, the highest epoch in which its author saw a
//! WRITE quorum (`write_quorum`, `None` if never) and the values it wrote (`write_set`).
//! - `quorum_highest(e, v)`: some collect has `write_quorum = (e, v)`, and a Byzantine quorum
//!   of collects saw nothing higher (`None`, an earlier epoch, or `(e, v)` itself);
//! - `certified(e, v)`: f+1 collects (one in CFT) wrote `v` in an epoch ≥ e, so a correct
//!   replica vouches for it and its full value is at hand;
//! - `binds(e, v)`: at least n−f collects, `quorum_highest` and `certified`;
//! - `unbound`: at least n−f collects and a Byzantine quorum with `write_quorum = None`.
//!
//! A value `v` decided in epoch `e` had ACCEPTs from a Byzantine quorum q, so at least q−f
//! correct replicas saw a WRITE quorum for `v` in `e`; every later WRITE quorum is for `v`
//! too. Any n−f collects therefore include at least q−2f ≥ 1 correct one with
//! `write_quorum = (e' ≥ e, v)`, so fewer than q say `None`: `unbound` is false and only `v`
//! can bind. This needs every correct collect to be for the instance being synchronised:
//! a replica that decided it reports a proven `last_decided` (ACCEPT signatures are checked
//! before deciding), and a SYNC that contains a collect for a later instance is rejected. Using `None` rather than epoch 0 for "never" is what keeps a value
//! decided in the first epoch from being overridden (BFT-SMaRt's `unbound` pitfall).

use bytes::Bytes;
use tagma_wire::{Digest, Epoch, ReplicaId};

use crate::quorum::Quorums;

/// A collect for the instance being synchronised, with its write set hashed. Collects for
/// another instance are represented as empty (`write_quorum: None`, no writes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Normalized {
    pub replica: ReplicaId,
    pub write_quorum: Option<(Epoch, Digest)>,
    /// (epoch, hash, encoded batch)
    pub write_set: Vec<(Epoch, Digest, Bytes)>,
}

impl Normalized {
    pub fn empty(replica: ReplicaId) -> Self {
        Normalized {
            replica,
            write_quorum: None,
            write_set: Vec::new(),
        }
    }
}

/// The outcome of the value choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// A value that may have been decided: it must be re-proposed.
    Bound {
        epoch: Epoch,
        hash: Digest,
        value: Bytes,
    },
    /// No value can have been decided: the new leader's fresh proposal may be used.
    Unbound,
    /// Neither (not enough information yet): the synchronization cannot complete.
    Unsound,
}

fn quorum_highest(q: &Quorums, collects: &[Normalized], epoch: Epoch, hash: Digest) -> bool {
    let seen = collects
        .iter()
        .any(|c| c.write_quorum == Some((epoch, hash)));
    let not_higher = collects
        .iter()
        .filter(|c| match c.write_quorum {
            None => true,
            Some((e, h)) => e < epoch || (e == epoch && h == hash),
        })
        .count();
    seen && not_higher >= q.accept_quorum()
}

fn certified(q: &Quorums, collects: &[Normalized], epoch: Epoch, hash: Digest) -> Option<Bytes> {
    let needed = q.one_correct();
    let mut vouching = 0;
    let mut value = None;
    for c in collects {
        if let Some((_, _, v)) = c
            .write_set
            .iter()
            .find(|(e, h, _)| *h == hash && *e >= epoch)
        {
            vouching += 1;
            value.get_or_insert_with(|| v.clone());
        }
    }
    if vouching >= needed { value } else { None }
}

/// Whether no value can have been decided.
pub fn unbound(q: &Quorums, collects: &[Normalized]) -> bool {
    collects.len() >= q.stop_install()
        && collects.iter().filter(|c| c.write_quorum.is_none()).count() >= q.accept_quorum()
}

/// Cachin's value choice over distinct replicas' collects (the caller deduplicates).
pub fn choose(q: &Quorums, collects: &[Normalized]) -> Choice {
    debug_assert!(
        collects.windows(2).all(|w| w[0].replica < w[1].replica),
        "collects sorted and distinct"
    );
    if collects.len() < q.stop_install() {
        return Choice::Unsound;
    }
    let mut candidates: Vec<(Epoch, Digest)> =
        collects.iter().filter_map(|c| c.write_quorum).collect();
    candidates.sort_unstable_by(|a, b| b.cmp(a));
    candidates.dedup();
    for (epoch, hash) in candidates {
        if quorum_highest(q, collects, epoch, hash)
            && let Some(value) = certified(q, collects, epoch, hash)
        {
            return Choice::Bound { epoch, hash, value };
        }
    }
    if unbound(q, collects) {
        Choice::Unbound
    } else {
        Choice::Unsound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(b: u8) -> Digest {
        Digest([b; 32])
    }

    fn wrote(replica: u32, wq: Option<(u32, u8)>, writes: &[(u32, u8)]) -> Normalized {
        Normalized {
            replica: ReplicaId(replica),
            write_quorum: wq.map(|(e, v)| (Epoch(e), h(v))),
            write_set: writes
                .iter()
                .map(|&(e, v)| (Epoch(e), h(v), Bytes::from(vec![v])))
                .collect(),
        }
    }

    use crate::quorum::Mode;

    const BFT4: Quorums = Quorums {
        mode: Mode::Bft,
        n: 4,
        f: 1,
    };

    #[test]
    fn nothing_written_is_unbound() {
        let s: Vec<_> = (0..3).map(|r| Normalized::empty(ReplicaId(r))).collect();
        assert_eq!(choose(&BFT4, &s), Choice::Unbound);
    }

    #[test]
    fn too_few_collects_are_unsound() {
        let s: Vec<_> = (0..2).map(|r| Normalized::empty(ReplicaId(r))).collect();
        assert_eq!(choose(&BFT4, &s), Choice::Unsound);
    }

    #[test]
    fn a_value_with_a_write_quorum_in_epoch_zero_binds() {
        // The pitfall: value 7 reached a WRITE quorum in epoch 0 (it may have been decided).
        // Two correct replicas report it; one replica saw nothing.
        let s = vec![
            wrote(0, Some((0, 7)), &[(0, 7)]),
            wrote(1, Some((0, 7)), &[(0, 7)]),
            wrote(2, None, &[]),
        ];
        assert_eq!(
            choose(&BFT4, &s),
            Choice::Bound {
                epoch: Epoch(0),
                hash: h(7),
                value: Bytes::from(vec![7])
            }
        );
        assert!(!unbound(&BFT4, &s), "epoch 0 must not look like 'never'");
    }

    #[test]
    fn a_lone_byzantine_claim_does_not_bind() {
        // Replica 3 (faulty) claims a WRITE quorum for 9 that nobody else wrote.
        // With only n−f collects the claim cannot be dismissed yet (the leader waits)…
        let mut s = vec![
            wrote(0, None, &[]),
            wrote(1, None, &[]),
            wrote(3, Some((1, 9)), &[(1, 9)]),
        ];
        assert_eq!(choose(&BFT4, &s), Choice::Unsound);
        // …and once the last correct replica's collect arrives, it binds nothing.
        s.insert(2, wrote(2, None, &[]));
        assert_eq!(choose(&BFT4, &s), Choice::Unbound);
    }

    #[test]
    fn the_highest_epoch_wins() {
        // 5 had a quorum in epoch 1, then 6 in epoch 2 (so 5 was never decided).
        let s = vec![
            wrote(0, Some((2, 6)), &[(1, 5), (2, 6)]),
            wrote(1, Some((2, 6)), &[(2, 6)]),
            wrote(2, Some((1, 5)), &[(1, 5)]),
        ];
        assert!(matches!(choose(&BFT4, &s), Choice::Bound { hash, .. } if hash == h(6)));
    }

    #[test]
    fn uncertified_values_are_unsound_not_overridden() {
        // One replica saw a quorum for 4 but only it wrote it: not certified, and not
        // unbound either (only 2 of 3 say None) — the leader must not pick a fresh value.
        let s = vec![
            wrote(0, Some((0, 4)), &[(0, 4)]),
            wrote(1, None, &[]),
            wrote(2, None, &[]),
        ];
        assert_eq!(choose(&BFT4, &s), Choice::Unsound);
    }

    #[test]
    fn cft_needs_one_voucher_and_majorities() {
        let q = Quorums {
            mode: Mode::Cft,
            n: 3,
            f: 1,
        };
        let s = vec![wrote(0, Some((0, 3)), &[(0, 3)]), wrote(2, None, &[])];
        assert!(matches!(choose(&q, &s), Choice::Bound { hash, .. } if hash == h(3)));
        let s = vec![wrote(0, None, &[]), wrote(1, None, &[])];
        assert_eq!(choose(&q, &s), Choice::Unbound);
    }
}
