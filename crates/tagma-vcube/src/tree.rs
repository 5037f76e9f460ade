//! Topic trees (VCube-PS: de Araujo, Arantes, Duarte, Rodrigues, Sens, "VCube-PS: A Causal
//! Broadcast Topic-based Publish/Subscribe System"): a message on a topic travels down a
//! tree rooted at its publisher over the topic's subscribers only. The root sends to the
//! first eligible node (subscribed, not suspected) of each of its clusters; a node that got
//! the message from its cluster `s` sends it to the first eligible node of each of its
//! clusters `1..s`. The node picked in `c(j, s)` covers the whole of `c(j, s)` this way, so
//! every eligible node gets the message once and the depth is at most `d`. Trees are never
//! stored: each node computes its relays from its own view, so a suspected relay is replaced
//! by the next eligible node of its cluster.

use std::ops::Range;

use crate::cube::{Cube, NodeId};

/// The clusters a node relays a message to: all of them at the root, `1..s` when it came
/// from cluster `s`.
pub fn clusters_below(cube: &Cube, me: NodeId, from: Option<NodeId>) -> Range<u32> {
    match from {
        None => 1..cube.dimension() + 1,
        Some(from) => 1..Cube::cluster_of(me, from),
    }
}

/// The relays of `me` for `clusters`: the first eligible node of each, with its cluster.
pub fn relays<'a>(
    cube: &'a Cube,
    me: NodeId,
    clusters: Range<u32>,
    mut eligible: impl FnMut(NodeId) -> bool + 'a,
) -> impl Iterator<Item = (u32, NodeId)> + 'a {
    clusters.filter_map(move |s| cube.first_in(me, s, &mut eligible).map(|j| (s, j)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// Spreads a message from `root` over `members`; returns how often each got it and the
    /// deepest hop.
    fn spread(cube: &Cube, root: NodeId, members: &[bool]) -> (BTreeMap<u32, u32>, u32) {
        let mut got = BTreeMap::new();
        let mut depth = 0;
        let mut frontier = vec![(root, None, 0u32)];
        while let Some((node, from, hops)) = frontier.pop() {
            depth = depth.max(hops);
            let clusters = clusters_below(cube, node, from);
            for (_, child) in relays(cube, node, clusters, |j| members[j.0 as usize]) {
                *got.entry(child.0).or_insert(0) += 1;
                frontier.push((child, Some(node), hops + 1));
            }
        }
        (got, depth)
    }

    #[test]
    fn sixteen_nodes_form_the_binomial_tree() {
        let cube = Cube::new(16).unwrap();
        let all = vec![true; 16];
        let (got, depth) = spread(&cube, NodeId(0), &all);
        assert_eq!(got.len(), 15);
        assert!(got.values().all(|&c| c == 1));
        assert_eq!(depth, 4);
        let mut subscribers = [false; 16];
        for i in [0, 3, 6, 9, 12, 15] {
            subscribers[i] = true;
        }
        let relays_of_root: Vec<(u32, NodeId)> =
            relays(&cube, NodeId(0), 1..5, |j| subscribers[j.0 as usize]).collect();
        assert_eq!(
            relays_of_root,
            vec![(2, NodeId(3)), (3, NodeId(6)), (4, NodeId(9))]
        );
    }

    proptest! {
        #[test]
        fn every_subscriber_gets_a_message_once_within_d_hops(
            n in 1u32..300,
            picks in proptest::collection::vec(any::<bool>(), 300),
            root in 0u32..300,
        ) {
            let cube = Cube::new(n).unwrap();
            let root = root % n;
            let mut members: Vec<bool> = picks[..n as usize].to_vec();
            members[root as usize] = true;
            let (got, depth) = spread(&cube, NodeId(root), &members);
            for j in 0..n {
                let expected = u32::from(members[j as usize] && j != root);
                prop_assert_eq!(got.get(&j).copied().unwrap_or(0), expected, "node {}", j);
            }
            prop_assert!(depth <= cube.dimension());
        }
    }
}
