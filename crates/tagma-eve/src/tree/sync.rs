//! Incremental state transfer of an object tree: a replica whose state differs from an
//! agreed root digest fetches only the subtrees that differ.
//!
//! The donor describes any node of its tree by a [`NodeSummary`] (an object, or a branch's
//! children as slots and digests). The fetcher ([`TreeSync`]) starts from its own tree and
//! the agreed root, asks for the root's summary, and descends only into children whose digest
//! differs from its own subtree's at the same [`Prefix`]; an object or an empty slot in the
//! donor's summary replaces whatever the fetcher held there. Every summary is checked
//! against the digest its parent named, so a lying donor is caught at the first node it
//! falsifies ([`SyncError::WrongDigest`]) and the fetch can go on with another donor. A
//! subtree's digest does not depend on where its objects sit above it (an object's digest
//! is the same at any depth), which lets the fetcher compare subtrees its own patching
//! reshaped.

use std::sync::atomic::AtomicUsize;

use bytes::Bytes;
use thiserror::Error;

use super::{
    Branch, Digest, LEVEL_BITS, LEVELS, Node, ObjectId, ObjectTree, branch_digest, empty_digest,
    leaf_digest, path_of, slot,
};

/// A position in the trie: the first `depth` slots of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    depth: u8,
    /// The path's first `depth` slots in the top bits; the rest zero.
    bits: u64,
}

impl Prefix {
    /// The root.
    pub const ROOT: Prefix = Prefix { depth: 0, bits: 0 };

    /// A prefix of `depth` slots (at most 16) held in the top bits of `bits`, the rest
    /// zero; `None` otherwise.
    pub fn new(depth: u8, bits: u64) -> Option<Prefix> {
        let depth_bits = u32::from(depth) * LEVEL_BITS;
        if u32::from(depth) > LEVELS || (depth_bits < u64::BITS && bits << depth_bits != 0) {
            return None;
        }
        Some(Prefix { depth, bits })
    }

    pub fn depth(self) -> u8 {
        self.depth
    }

    pub fn bits(self) -> u64 {
        self.bits
    }

    fn child(self, slot: usize) -> Option<Prefix> {
        let depth = u32::from(self.depth);
        (depth < LEVELS).then(|| Prefix {
            depth: self.depth + 1,
            bits: self.bits | ((slot as u64) << (u64::BITS - LEVEL_BITS * (depth + 1))),
        })
    }

    /// Whether `path` starts with this prefix.
    fn covers(self, path: u64) -> bool {
        let depth_bits = u32::from(self.depth) * LEVEL_BITS;
        depth_bits == 0 || (path ^ self.bits) >> (u64::BITS - depth_bits) == 0
    }
}

/// A node of a donor's tree, as it describes it to a fetcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeSummary {
    /// The root of an empty tree.
    Empty,
    /// One object.
    Leaf { id: ObjectId, value: Bytes },
    /// A branch: its children's slots (ascending) and digests.
    Branch { children: Vec<(u8, Digest)> },
}

impl NodeSummary {
    /// The digest of the node described.
    pub fn digest(&self) -> Digest {
        match self {
            NodeSummary::Empty => empty_digest(),
            NodeSummary::Leaf { id, value } => leaf_digest(*id, value),
            NodeSummary::Branch { children } => branch_digest(children.iter().copied()),
        }
    }
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SyncError {
    #[error("a summary of {0:?}, which was not asked for")]
    NotWanted(Prefix),
    #[error("the summary of {0:?} does not have the digest its parent named: the donor lies")]
    WrongDigest(Prefix),
    #[error("the summary of {0:?} is malformed: the donor lies")]
    Malformed(Prefix),
    #[error("{0} subtrees are still to fetch")]
    Incomplete(usize),
}

fn child_digests(branch: &Branch, level: u32) -> Vec<(u8, Digest)> {
    let hashed = AtomicUsize::new(0);
    (branch.children.iter().enumerate())
        .filter_map(|(i, c)| Some((i as u8, c.as_ref()?.digest(level, &hashed))))
        .collect()
}

impl ObjectTree {
    /// The node at `prefix`, described for a fetcher: `None` if no node sits exactly there.
    pub fn summary(&self, prefix: Prefix) -> Option<NodeSummary> {
        if prefix.depth == 0 {
            return Some(if self.is_empty() {
                NodeSummary::Empty
            } else {
                NodeSummary::Branch {
                    children: child_digests(&self.root, 1),
                }
            });
        }
        let depth = u32::from(prefix.depth);
        let mut branch = &*self.root;
        for level in 0..depth {
            let child = branch.children[slot(prefix.bits, level)].as_ref()?;
            match child {
                Node::Leaf(leaf) if level + 1 == depth => {
                    return Some(NodeSummary::Leaf {
                        id: leaf.id,
                        value: leaf.value.clone(),
                    });
                }
                Node::Leaf(_) => return None,
                Node::Branch(below) if level + 1 == depth => {
                    return Some(NodeSummary::Branch {
                        children: child_digests(below, depth + 1),
                    });
                }
                Node::Branch(below) => branch = below,
            }
        }
        None
    }

    /// The digest the objects under `prefix` would have as a subtree of their own at that
    /// depth (`None` if there are none), wherever they sit in this tree.
    fn subtree_digest(&self, prefix: Prefix) -> Option<Digest> {
        let hashed = AtomicUsize::new(0);
        let depth = u32::from(prefix.depth);
        let mut branch = &*self.root;
        for level in 0..depth {
            match branch.children[slot(prefix.bits, level)].as_ref()? {
                Node::Leaf(leaf) => {
                    return prefix
                        .covers(leaf.path)
                        .then(|| leaf_digest(leaf.id, &leaf.value));
                }
                node @ Node::Branch(_) if level + 1 == depth => {
                    return Some(node.digest(depth, &hashed));
                }
                Node::Branch(below) => branch = below,
            }
        }
        (!self.is_empty()).then(|| self.hash().root)
    }

    /// The ids of the objects under `prefix`.
    fn ids_under(&self, prefix: Prefix) -> Vec<ObjectId> {
        let depth = u32::from(prefix.depth);
        let mut branch = &*self.root;
        for level in 0..depth {
            match branch.children[slot(prefix.bits, level)].as_ref() {
                None => return Vec::new(),
                Some(Node::Leaf(leaf)) => {
                    return if prefix.covers(leaf.path) {
                        vec![leaf.id]
                    } else {
                        Vec::new()
                    };
                }
                Some(Node::Branch(below)) => branch = below,
            }
        }
        let mut leaves = Vec::new();
        super::leaves_below(branch, &mut leaves);
        leaves.iter().map(|l| l.id).collect()
    }

    fn remove_under(&mut self, prefix: Prefix, keep: Option<ObjectId>) {
        for id in self.ids_under(prefix) {
            if Some(id) != keep {
                self.remove(id);
            }
        }
    }
}

/// The fetching side of an incremental state transfer (see the module's documentation).
#[derive(Debug)]
pub struct TreeSync {
    tree: ObjectTree,
    target: Digest,
    /// Subtrees to fetch, with the digest each must have.
    wanted: Vec<(Prefix, Digest)>,
    nodes_fetched: usize,
    objects_fetched: usize,
    bytes_fetched: usize,
}

impl TreeSync {
    /// Starts from `own` towards the state whose root digest is `target`.
    pub fn new(own: ObjectTree, target: Digest) -> TreeSync {
        let wanted = if own.hash().root == target {
            Vec::new()
        } else {
            vec![(Prefix::ROOT, target)]
        };
        TreeSync {
            tree: own,
            target,
            wanted,
            nodes_fetched: 0,
            objects_fetched: 0,
            bytes_fetched: 0,
        }
    }

    /// The subtrees to ask a donor for now.
    pub fn wanted(&self) -> impl Iterator<Item = Prefix> + '_ {
        self.wanted.iter().map(|(p, _)| *p)
    }

    pub fn is_done(&self) -> bool {
        self.wanted.is_empty()
    }

    /// Node summaries, objects and value bytes received so far.
    pub fn fetched(&self) -> (usize, usize, usize) {
        (self.nodes_fetched, self.objects_fetched, self.bytes_fetched)
    }

    /// Takes a donor's summary of a wanted subtree.
    pub fn receive(&mut self, prefix: Prefix, summary: NodeSummary) -> Result<(), SyncError> {
        let index = (self.wanted.iter().position(|(p, _)| *p == prefix))
            .ok_or(SyncError::NotWanted(prefix))?;
        if summary.digest() != self.wanted[index].1 {
            return Err(SyncError::WrongDigest(prefix));
        }
        match &summary {
            NodeSummary::Empty if prefix.depth == 0 => self.tree = ObjectTree::new(),
            NodeSummary::Leaf { id, .. } if prefix.depth > 0 && prefix.covers(path_of(*id)) => {}
            NodeSummary::Branch { children }
                if u32::from(prefix.depth) < LEVELS
                    && children.windows(2).all(|w| w[0].0 < w[1].0)
                    && children
                        .iter()
                        .all(|(s, _)| usize::from(*s) < super::FANOUT) => {}
            _ => return Err(SyncError::Malformed(prefix)),
        }
        self.wanted.swap_remove(index);
        self.nodes_fetched += 1;
        match summary {
            NodeSummary::Empty => {}
            NodeSummary::Leaf { id, value } => {
                self.tree.remove_under(prefix, Some(id));
                if self.tree.get(id) != Some(&value) {
                    self.objects_fetched += 1;
                    self.bytes_fetched += value.len();
                    self.tree.insert(id, value);
                }
            }
            NodeSummary::Branch { children } => {
                for slot in 0..super::FANOUT {
                    let child = prefix.child(slot).expect("checked: not at the last level");
                    match children.iter().find(|(s, _)| usize::from(*s) == slot) {
                        None => self.tree.remove_under(child, None),
                        Some((_, digest)) => {
                            if self.tree.subtree_digest(child) != Some(*digest) {
                                self.wanted.push((child, *digest));
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The fetched state, once nothing is wanted.
    pub fn finish(self) -> Result<ObjectTree, SyncError> {
        if !self.wanted.is_empty() {
            return Err(SyncError::Incomplete(self.wanted.len()));
        }
        if self.tree.hash().root != self.target {
            return Err(SyncError::WrongDigest(Prefix::ROOT));
        }
        Ok(self.tree)
    }
}

#[cfg(test)]
mod tests;
