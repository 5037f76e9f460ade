//! Tests of the object tree: canonical shape, snapshots, incremental and parallel hashing,
//! differences between versions.

use proptest::prelude::*;

use super::*;

fn value(n: u64) -> Bytes {
    Bytes::from(format!("value {n}"))
}

fn tree_of(ids: impl IntoIterator<Item = u64>) -> ObjectTree {
    let mut tree = ObjectTree::new();
    for id in ids {
        tree.insert(ObjectId(id), value(id));
    }
    tree
}

/// Every branch but the root holds at least two objects, and its count is right.
pub(super) fn check_canonical(tree: &ObjectTree) {
    fn count(branch: &Branch, root: bool) -> usize {
        let objects: usize = (branch.children.iter().flatten())
            .map(|c| match c {
                Node::Leaf(_) => 1,
                Node::Branch(b) => count(b, false),
            })
            .sum();
        assert_eq!(objects, branch.objects);
        assert!(
            root || objects >= 2,
            "a branch below the root with {objects} objects"
        );
        objects
    }
    count(&tree.root, true);
}

#[test]
fn objects_are_written_read_and_removed() {
    let mut tree = ObjectTree::new();
    assert!(tree.is_empty());
    assert_eq!(tree.insert(ObjectId(7), value(1)), None);
    assert_eq!(tree.insert(ObjectId(7), value(2)), Some(value(1)));
    for id in 0..1000 {
        tree.insert(ObjectId(id), value(id));
    }
    assert_eq!(tree.len(), 1000);
    assert_eq!(tree.get(ObjectId(7)), Some(&value(7)));
    assert_eq!(tree.get(ObjectId(1000)), None);
    check_canonical(&tree);
    for id in (0..1000).step_by(2) {
        assert_eq!(tree.remove(ObjectId(id)), Some(value(id)));
    }
    assert_eq!(tree.remove(ObjectId(0)), None);
    assert_eq!(tree.len(), 500);
    check_canonical(&tree);
    assert!((0..1000).all(|id| tree.get(ObjectId(id)).is_some() == (id % 2 == 1)));
    let mut ids: Vec<u64> = tree.iter().map(|(id, _)| id.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..1000).step_by(2).collect::<Vec<_>>());
}

#[test]
fn the_root_digest_depends_on_the_objects_not_on_the_order_of_writes() {
    let forward = tree_of(0..500);
    let backward = tree_of((0..500).rev());
    assert_eq!(forward.hash().root, backward.hash().root);
    // Objects written and removed again leave no trace.
    let mut detour = tree_of(0..800);
    for id in 500..800 {
        detour.remove(ObjectId(id));
    }
    check_canonical(&detour);
    assert_eq!(detour.hash().root, forward.hash().root);
    // A different value, or a missing object, changes it.
    let mut changed = forward.clone();
    changed.insert(ObjectId(3), Bytes::from_static(b"other"));
    assert_ne!(changed.hash().root, forward.hash().root);
    changed.remove(ObjectId(3));
    assert_ne!(changed.hash().root, forward.hash().root);
    assert_ne!(ObjectTree::new().hash().root, tree_of([0]).hash().root);
}

#[test]
fn a_snapshot_is_untouched_by_later_writes_and_restores_the_state() {
    let mut tree = tree_of(0..100);
    let before = tree.hash().root;
    let snapshot = tree.clone();
    tree.insert(ObjectId(5), Bytes::from_static(b"written in the batch"));
    tree.insert(ObjectId(1000), value(1000));
    tree.remove(ObjectId(6));
    assert_eq!(snapshot.get(ObjectId(5)), Some(&value(5)));
    assert_eq!(snapshot.get(ObjectId(1000)), None);
    assert_eq!(snapshot.get(ObjectId(6)), Some(&value(6)));
    assert_eq!(snapshot.hash().root, before);
    assert_ne!(tree.hash().root, before);
    // Rolling back is taking the snapshot again.
    tree = snapshot;
    assert_eq!(tree.hash().root, before);
}

#[test]
fn hashing_again_computes_only_the_nodes_a_batch_changed() {
    let mut tree = tree_of(0..10_000);
    let first = tree.hash();
    assert!(
        first.nodes_hashed > 10_000,
        "every object and branch: {first:?}"
    );
    assert_eq!(tree.hash().nodes_hashed, 0, "nothing changed");
    // One object written: its leaf and the branches on its path, a handful.
    tree.insert(ObjectId(42), Bytes::from_static(b"new"));
    let one = tree.hash();
    assert!((2..=8).contains(&one.nodes_hashed), "{one:?}");
    // A snapshot taken before shares the unchanged subtrees and keeps its digest.
    let snapshot = tree.clone();
    for id in 0..10 {
        tree.insert(ObjectId(id * 1000), value(id));
    }
    let ten = tree.hash();
    assert!(ten.nodes_hashed <= 10 * 8, "{ten:?}");
    assert_eq!(snapshot.hash().nodes_hashed, 0);
    // Hashed incrementally or from scratch, the digest is the same.
    let fresh: ObjectTree = {
        let mut t = ObjectTree::new();
        for (id, v) in tree.iter() {
            t.insert(id, v.clone());
        }
        t
    };
    assert_eq!(fresh.hash().root, ten.root);
}

#[test]
fn a_value_is_kept_and_hashed_without_a_copy() {
    let big = Bytes::from(vec![5u8; 10 << 10]);
    let mut tree = ObjectTree::new();
    tree.insert(ObjectId(1), big.clone());
    tree.hash();
    // The value in the tree is the caller's buffer, not a copy.
    assert_eq!(tree.get(ObjectId(1)).unwrap().as_ptr(), big.as_ptr());
}

#[test]
fn two_versions_name_the_objects_they_differ_in() {
    let base = tree_of(0..2000);
    base.hash();
    let mut next = base.clone();
    next.insert(ObjectId(10), Bytes::from_static(b"changed"));
    next.insert(ObjectId(5000), value(5000));
    next.remove(ObjectId(20));
    next.hash();
    let mut diff = next.differing_objects(&base);
    diff.sort_unstable();
    assert_eq!(diff, [ObjectId(10), ObjectId(20), ObjectId(5000)]);
    assert!(base.differing_objects(&base.clone()).is_empty());
    assert_eq!(next, next.clone());
    assert_ne!(next, base);
    // Built independently (no shared nodes), equal trees still compare equal.
    assert_eq!(tree_of(0..2000), base);
}

proptest! {
    #[test]
    fn any_writes_give_the_digest_and_differences_of_the_final_objects(
        writes in proptest::collection::vec((0u64..64, proptest::option::of(0u8..4)), 0..200),
        other in proptest::collection::btree_map(0u64..64, 0u8..4, 0..40),
    ) {
        // Apply the writes (None: remove) to a tree, and to a plain map as the model.
        let mut tree = ObjectTree::new();
        let mut model = std::collections::BTreeMap::new();
        for (i, (id, v)) in writes.iter().enumerate() {
            match v {
                Some(v) => {
                    tree.insert(ObjectId(*id), Bytes::from(vec![*v]));
                    model.insert(*id, *v);
                }
                None => {
                    tree.remove(ObjectId(*id));
                    model.remove(id);
                }
            }
            if i % 17 == 0 {
                tree.hash();
            }
        }
        check_canonical(&tree);
        let rebuilt = {
            let mut t = ObjectTree::new();
            for (id, v) in &model {
                t.insert(ObjectId(*id), Bytes::from(vec![*v]));
            }
            t
        };
        prop_assert_eq!(tree.len(), model.len());
        prop_assert_eq!(tree.hash().root, rebuilt.hash().root);
        let mut b = ObjectTree::new();
        for (id, v) in &other {
            b.insert(ObjectId(*id), Bytes::from(vec![*v]));
        }
        let mut diff: Vec<u64> = tree.differing_objects(&b).iter().map(|id| id.0).collect();
        diff.sort_unstable();
        let expected: Vec<u64> = (0..64)
            .filter(|id| model.get(id) != other.get(id))
            .collect();
        prop_assert_eq!(diff, expected);
    }
}
