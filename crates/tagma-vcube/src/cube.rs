//! The VCube overlay (Duarte, Bona, Ruoso: "VCube: A Provably Scalable Distributed Diagnosis
//! Algorithm"): node ids `0..n` in a hypercube of dimension `d` (the bit length of `n − 1`);
//! node `i` splits the other ids into `d` clusters, cluster `s` being the ordered list
//! `c(i, s) = i ⊕ 2^(s−1), c(i ⊕ 2^(s−1), 1), …, c(i ⊕ 2^(s−1), s − 1)` of `2^(s−1)` ids.
//!
//! The recursion has a closed form: the k-th id of `c(i, s)` is `i ⊕ (2^(s−1) + k)`, so a
//! cluster is `i` XOR the ids `2^(s−1)..2^s` in increasing order, and the cluster of `j` in
//! `i`'s view is the bit length of `i ⊕ j`. When `n` is not a power of two, the ids from `n`
//! to `2^d` are absent: they are skipped wherever a cluster is walked.

use crate::error::VcubeError;

/// A node's id in the cube.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

/// The largest cube: 2^20 ids.
pub const DIMENSION_MAX: u32 = 20;

/// A cube of `n` nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cube {
    n: u32,
    dimension: u32,
}

impl Cube {
    /// A cube of `n` ids (1 ≤ n ≤ 2^20).
    pub fn new(n: u32) -> Result<Cube, VcubeError> {
        if n == 0 || n > 1 << DIMENSION_MAX {
            return Err(VcubeError::CubeSize { n });
        }
        Ok(Cube {
            n,
            dimension: u32::BITS - (n - 1).leading_zeros(),
        })
    }

    /// The number of ids.
    pub fn len(&self) -> u32 {
        self.n
    }

    /// A cube always holds at least one id.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// `d`: the number of clusters of each node.
    pub fn dimension(&self) -> u32 {
        self.dimension
    }

    /// Whether `id` is a node of the cube.
    pub fn contains(&self, id: NodeId) -> bool {
        id.0 < self.n
    }

    /// Checks that `id` is a node of the cube.
    pub fn check(&self, id: NodeId) -> Result<(), VcubeError> {
        if self.contains(id) {
            Ok(())
        } else {
            Err(VcubeError::NodeOutsideCube {
                id: id.0,
                n: self.n,
            })
        }
    }

    /// `c(i, s)` in order, without absent ids (`1 ≤ s ≤ d`; other `s`: empty).
    pub fn cluster(&self, i: NodeId, s: u32) -> impl Iterator<Item = NodeId> + '_ {
        let range = if s == 0 || s > self.dimension {
            0..0
        } else {
            (1u32 << (s - 1))..(1u32 << s)
        };
        let n = self.n;
        range
            .map(move |offset| i.0 ^ offset)
            .filter(move |&id| id < n)
            .map(NodeId)
    }

    /// The cluster `s` of `j` in `i`'s view (`j ∈ c(i, s)`); 0 when `i = j`.
    pub fn cluster_of(i: NodeId, j: NodeId) -> u32 {
        u32::BITS - (i.0 ^ j.0).leading_zeros()
    }

    /// The first id of `c(i, s)` that `eligible` accepts.
    pub fn first_in(
        &self,
        i: NodeId,
        s: u32,
        mut eligible: impl FnMut(NodeId) -> bool,
    ) -> Option<NodeId> {
        self.cluster(i, s).find(|&j| eligible(j))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `c(i, s)` by the recursive definition.
    fn recursive(i: u32, s: u32) -> Vec<u32> {
        let head = i ^ (1 << (s - 1));
        let mut out = vec![head];
        for t in 1..s {
            out.extend(recursive(head, t));
        }
        out
    }

    #[test]
    fn the_closed_form_is_the_recursive_definition() {
        let cube = Cube::new(1 << 8).unwrap();
        for i in 0..256 {
            for s in 1..=8 {
                let closed: Vec<u32> = cube.cluster(NodeId(i), s).map(|j| j.0).collect();
                assert_eq!(closed, recursive(i, s), "c({i}, {s})");
                for &j in &closed {
                    assert_eq!(Cube::cluster_of(NodeId(i), NodeId(j)), s);
                }
            }
        }
    }

    #[test]
    fn eight_nodes_split_as_the_vcube_paper_shows() {
        let cube = Cube::new(8).unwrap();
        let c = |i, s| -> Vec<u32> { cube.cluster(NodeId(i), s).map(|j| j.0).collect() };
        assert_eq!(
            (c(0, 1), c(0, 2), c(0, 3)),
            (vec![1], vec![2, 3], vec![4, 5, 6, 7])
        );
        assert_eq!(
            (c(5, 1), c(5, 2), c(5, 3)),
            (vec![4], vec![7, 6], vec![1, 0, 3, 2])
        );
    }

    #[test]
    fn absent_ids_are_skipped_and_sizes_are_checked() {
        let cube = Cube::new(6).unwrap();
        assert_eq!(cube.dimension(), 3);
        assert_eq!(cube.cluster(NodeId(5), 2).count(), 0, "7 and 6 are absent");
        let c3: Vec<u32> = cube.cluster(NodeId(5), 3).map(|j| j.0).collect();
        assert_eq!(c3, vec![1, 0, 3, 2]);
        assert!(Cube::new(0).is_err());
        assert!(Cube::new((1 << 20) + 1).is_err());
        assert_eq!(Cube::new(1).unwrap().dimension(), 0);
        assert!(cube.check(NodeId(6)).is_err());
    }
}
