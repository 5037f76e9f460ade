//! Named objects in a copy-on-write Merkle tree: the state an execute-verify service runs on.
//!
//! The tree is a 16-way trie over a bijective mix of each object's 64-bit id (so that ids an
//! application hands out in sequence spread evenly). Its shape depends only on the set of ids
//! it holds, never on the order they were written in: an object sits at the shallowest level
//! where no other object shares its path, and removing an object folds a branch left with one
//! object back into its parent. So two replicas that executed the same requests in different
//! orders, and reached the same objects, compute the same root digest.
//!
//! Nodes are shared between versions (`Arc`): [`ObjectTree::clone`] is a snapshot that costs
//! a pointer copy, and a write copies only the nodes on its object's path that a snapshot
//! still shares. Every node caches its digest; a write clears the cache on its path, so
//! [`ObjectTree::hash`] recomputes only the nodes changed since the last hash, and hashes the
//! changed subtrees under the top levels on several threads (rayon). A value is hashed where
//! it lies, without being copied. [`ObjectTree::differing_objects`] compares two versions and
//! skips every subtree whose digest (or node) they share: what an incremental state transfer
//! fetches.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use rayon::prelude::*;

/// The digest of an object: the same wherever it sits in the trie.
fn leaf_digest(id: ObjectId, value: &[u8]) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(LEAF_DOMAIN);
    h.update(&id.0.to_le_bytes());
    h.update(&(value.len() as u64).to_le_bytes());
    h.update(value);
    *h.finalize().as_bytes()
}

/// The digest of a branch from its children's slots and digests, in slot order.
fn branch_digest(children: impl Iterator<Item = (u8, Digest)>) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(BRANCH_DOMAIN);
    for (slot, digest) in children {
        h.update(&[slot]);
        h.update(&digest);
    }
    *h.finalize().as_bytes()
}

fn empty_digest() -> Digest {
    *blake3::hash(EMPTY_DOMAIN).as_bytes()
}

/// An object's name in the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId(pub u64);

/// A 32-byte BLAKE3 digest of a node.
pub type Digest = [u8; 32];

/// Bits of the path each level consumes.
const LEVEL_BITS: u32 = 4;
/// Children of a branch.
const FANOUT: usize = 1 << LEVEL_BITS;
/// Levels a path has: 64 bits, 4 at a time. Two distinct paths part before the last one.
const LEVELS: u32 = u64::BITS / LEVEL_BITS;
/// Levels whose changed children are hashed on several threads (16 and 256 subtrees).
const PARALLEL_LEVELS: u32 = 2;

const LEAF_DOMAIN: &[u8] = b"tagma eve object\0";
const BRANCH_DOMAIN: &[u8] = b"tagma eve branch\0";
const EMPTY_DOMAIN: &[u8] = b"tagma eve empty tree\0";

/// Where an object's id leads in the trie: a bijection on 64-bit values (the finaliser of
/// SplitMix64), so distinct ids always have distinct paths.
fn path_of(id: ObjectId) -> u64 {
    let mut z = id.0;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The child slot a path takes at `level` (0: the root's children).
fn slot(path: u64, level: u32) -> usize {
    debug_assert!(level < LEVELS);
    ((path >> (u64::BITS - LEVEL_BITS * (level + 1))) & (FANOUT as u64 - 1)) as usize
}

#[derive(Clone, Debug)]
struct Leaf {
    id: ObjectId,
    path: u64,
    value: Bytes,
    digest: OnceLock<Digest>,
}

#[derive(Clone, Debug, Default)]
struct Branch {
    /// By slot; a branch other than the root holds at least two objects below it.
    children: [Option<Node>; FANOUT],
    /// Objects below this branch.
    objects: usize,
    digest: OnceLock<Digest>,
}

#[derive(Clone, Debug)]
enum Node {
    Leaf(Arc<Leaf>),
    Branch(Arc<Branch>),
}

impl Node {
    fn cached(&self) -> Option<&Digest> {
        match self {
            Node::Leaf(l) => l.digest.get(),
            Node::Branch(b) => b.digest.get(),
        }
    }

    fn same(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::Leaf(a), Node::Leaf(b)) => Arc::ptr_eq(a, b),
            (Node::Branch(a), Node::Branch(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// This node's digest, computing what is not cached; `hashed` counts the nodes hashed.
    /// Nothing is computed while a cache is being filled, so concurrent hashes of versions
    /// that share nodes never wait on each other (at worst both compute a node).
    fn digest(&self, level: u32, hashed: &AtomicUsize) -> Digest {
        let (cache, computed) = match self {
            Node::Leaf(leaf) => {
                if let Some(digest) = leaf.digest.get() {
                    return *digest;
                }
                (&leaf.digest, leaf_digest(leaf.id, &leaf.value))
            }
            Node::Branch(branch) => {
                if let Some(digest) = branch.digest.get() {
                    return *digest;
                }
                let stale: Vec<&Node> = (branch.children.iter().flatten())
                    .filter(|c| c.cached().is_none())
                    .collect();
                if level < PARALLEL_LEVELS && stale.len() > 1 {
                    stale.par_iter().for_each(|child| {
                        child.digest(level + 1, hashed);
                    });
                }
                let children = (branch.children.iter().enumerate())
                    .filter_map(|(i, c)| Some((i as u8, c.as_ref()?.digest(level + 1, hashed))));
                (&branch.digest, branch_digest(children))
            }
        };
        if cache.set(computed).is_ok() {
            hashed.fetch_add(1, Ordering::Relaxed);
        }
        computed
    }
}

/// What [`ObjectTree::hash`] computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashReport {
    /// The digest of every object in the tree (the state's digest).
    pub root: Digest,
    /// Nodes (objects and branches) hashed now: those changed since the last hash.
    pub nodes_hashed: usize,
}

/// Named objects in a copy-on-write Merkle tree (see the module's documentation). `Clone` is
/// a snapshot: the two versions share every node until one of them writes.
#[derive(Clone, Debug, Default)]
pub struct ObjectTree {
    root: Arc<Branch>,
}

/// The branch behind `node` for writing: copied if a snapshot shares it, its digest cleared.
fn branch_mut(branch: &mut Arc<Branch>) -> &mut Branch {
    let branch = Arc::make_mut(branch);
    branch.digest = OnceLock::new();
    branch
}

fn leaf(id: ObjectId, path: u64, value: Bytes) -> Node {
    Node::Leaf(Arc::new(Leaf {
        id,
        path,
        value,
        digest: OnceLock::new(),
    }))
}

/// A branch at `level` holding two leaves whose paths agree on every level before it.
fn split(level: u32, a: Node, a_path: u64, b: Node, b_path: u64) -> Node {
    let mut branch = Branch {
        objects: 2,
        ..Branch::default()
    };
    let (sa, sb) = (slot(a_path, level), slot(b_path, level));
    if sa == sb {
        branch.children[sa] = Some(split(level + 1, a, a_path, b, b_path));
    } else {
        branch.children[sa] = Some(a);
        branch.children[sb] = Some(b);
    }
    Node::Branch(Arc::new(branch))
}

/// Inserts into `branch` (at `level`); returns the value replaced.
fn insert(branch: &mut Branch, level: u32, id: ObjectId, path: u64, value: Bytes) -> Option<Bytes> {
    let child = &mut branch.children[slot(path, level)];
    let replaced = match child {
        None => {
            *child = Some(leaf(id, path, value));
            None
        }
        Some(Node::Leaf(old)) if old.id == id => {
            let previous = old.value.clone();
            *child = Some(leaf(id, path, value));
            Some(previous)
        }
        Some(Node::Leaf(old)) => {
            let old_path = old.path;
            let old = child.take().expect("the slot holds a leaf");
            *child = Some(split(level + 1, old, old_path, leaf(id, path, value), path));
            None
        }
        Some(Node::Branch(below)) => insert(branch_mut(below), level + 1, id, path, value),
    };
    if replaced.is_none() {
        branch.objects += 1;
    }
    replaced
}

/// Removes from `branch` (at `level`) an object it holds (the caller checked: a write
/// clears the digests on its path); returns its value. A branch below left with one object
/// is replaced by that object's leaf.
fn remove(branch: &mut Branch, level: u32, id: ObjectId, path: u64) -> Option<Bytes> {
    let child = &mut branch.children[slot(path, level)];
    let removed = match child {
        None => None,
        Some(Node::Leaf(old)) if old.id == id => {
            let value = old.value.clone();
            *child = None;
            Some(value)
        }
        Some(Node::Leaf(_)) => None,
        Some(Node::Branch(below)) => {
            let below = branch_mut(below);
            let value = remove(below, level + 1, id, path);
            if below.objects == 1 {
                let only = below.children.iter_mut().flatten().next();
                let only = only.expect("a branch with one object has a child").clone();
                debug_assert!(matches!(only, Node::Leaf(_)));
                *child = Some(only);
            }
            value
        }
    };
    if removed.is_some() {
        branch.objects -= 1;
    }
    removed
}

fn contains(branch: &Branch, level: u32, id: ObjectId, path: u64) -> bool {
    match &branch.children[slot(path, level)] {
        None => false,
        Some(Node::Leaf(leaf)) => leaf.id == id,
        Some(Node::Branch(below)) => contains(below, level + 1, id, path),
    }
}

impl ObjectTree {
    pub fn new() -> Self {
        ObjectTree::default()
    }

    /// Objects in the tree.
    pub fn len(&self) -> usize {
        self.root.objects
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of object `id`.
    pub fn get(&self, id: ObjectId) -> Option<&Bytes> {
        let path = path_of(id);
        let mut branch = &*self.root;
        for level in 0..LEVELS {
            match branch.children[slot(path, level)].as_ref()? {
                Node::Leaf(leaf) => return (leaf.id == id).then_some(&leaf.value),
                Node::Branch(below) => branch = below,
            }
        }
        None
    }

    /// Writes object `id` (creating it if needed); returns its previous value.
    pub fn insert(&mut self, id: ObjectId, value: Bytes) -> Option<Bytes> {
        insert(branch_mut(&mut self.root), 0, id, path_of(id), value)
    }

    /// Removes object `id`; returns its value.
    pub fn remove(&mut self, id: ObjectId) -> Option<Bytes> {
        let path = path_of(id);
        if !contains(&self.root, 0, id, path) {
            return None;
        }
        remove(branch_mut(&mut self.root), 0, id, path)
    }

    /// Every object, in the tree's order (the same on every replica holding the same
    /// objects; not the order of the ids).
    pub fn iter(&self) -> impl Iterator<Item = (ObjectId, &Bytes)> {
        let mut stack: Vec<&Node> = self.root.children.iter().rev().flatten().collect();
        std::iter::from_fn(move || {
            while let Some(node) = stack.pop() {
                match node {
                    Node::Leaf(leaf) => return Some((leaf.id, &leaf.value)),
                    Node::Branch(b) => stack.extend(b.children.iter().rev().flatten()),
                }
            }
            None
        })
    }

    /// The root digest, hashing only the nodes changed since the last call (the changed
    /// subtrees under the top levels on several threads).
    pub fn hash(&self) -> HashReport {
        let hashed = AtomicUsize::new(0);
        let root = if self.is_empty() {
            empty_digest()
        } else {
            Node::Branch(self.root.clone()).digest(0, &hashed)
        };
        HashReport {
            root,
            nodes_hashed: hashed.into_inner(),
        }
    }

    /// The objects whose values differ between `self` and `other` (present in one only, or
    /// with different values), in the tree's order. Subtrees the two share (the same node,
    /// or equal cached digests) are not visited. Hash both first for the digests to help.
    pub fn differing_objects(&self, other: &ObjectTree) -> Vec<ObjectId> {
        let mut out = Vec::new();
        diff_branches(&self.root, &other.root, &mut out);
        out
    }
}

impl PartialEq for ObjectTree {
    /// The same objects with the same values.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.differing_objects(other).is_empty()
    }
}

impl Eq for ObjectTree {}

/// Whether two nodes are known equal without looking inside.
fn known_equal(a: &Node, b: &Node) -> bool {
    a.same(b) || matches!((a.cached(), b.cached()), (Some(x), Some(y)) if x == y)
}

fn diff_branches(a: &Branch, b: &Branch, out: &mut Vec<ObjectId>) {
    for (x, y) in a.children.iter().zip(&b.children) {
        match (x, y) {
            (None, None) => {}
            (Some(n), None) | (None, Some(n)) => every_object(n, out),
            (Some(x), Some(y)) if known_equal(x, y) => {}
            (Some(Node::Branch(x)), Some(Node::Branch(y))) => diff_branches(x, y, out),
            (Some(Node::Leaf(x)), Some(Node::Leaf(y))) => {
                if x.id != y.id {
                    out.push(x.id);
                    out.push(y.id);
                } else if x.value != y.value {
                    out.push(x.id);
                }
            }
            (Some(Node::Leaf(leaf)), Some(Node::Branch(branch)))
            | (Some(Node::Branch(branch)), Some(Node::Leaf(leaf))) => {
                // One object with this prefix on one side, several on the other: every one
                // of them differs but the leaf's own object if its value is the same.
                let mut below = Vec::new();
                leaves_below(branch, &mut below);
                let same = below
                    .iter()
                    .any(|other| other.id == leaf.id && other.value == leaf.value);
                if !below.iter().any(|other| other.id == leaf.id) {
                    out.push(leaf.id);
                }
                out.extend(
                    below
                        .iter()
                        .map(|l| l.id)
                        .filter(|id| !same || *id != leaf.id),
                );
            }
        }
    }
}

fn leaves_below<'a>(branch: &'a Branch, out: &mut Vec<&'a Leaf>) {
    for child in branch.children.iter().flatten() {
        match child {
            Node::Leaf(leaf) => out.push(leaf),
            Node::Branch(below) => leaves_below(below, out),
        }
    }
}

fn every_object(node: &Node, out: &mut Vec<ObjectId>) {
    match node {
        Node::Leaf(leaf) => out.push(leaf.id),
        Node::Branch(b) => {
            let mut leaves = Vec::new();
            leaves_below(b, &mut leaves);
            out.extend(leaves.iter().map(|l| l.id));
        }
    }
}

mod sync;
pub use sync::{NodeSummary, Prefix, SyncError, TreeSync};

#[cfg(test)]
mod tests;
