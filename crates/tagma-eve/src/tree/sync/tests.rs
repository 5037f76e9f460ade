use proptest::prelude::*;

use super::*;

fn fetch(own: ObjectTree, donor: &ObjectTree) -> (ObjectTree, (usize, usize, usize)) {
    let mut sync = TreeSync::new(own, donor.hash().root);
    while !sync.is_done() {
        let wanted: Vec<Prefix> = sync.wanted().collect();
        for prefix in wanted {
            let summary = donor
                .summary(prefix)
                .expect("the donor has every node asked");
            sync.receive(prefix, summary).unwrap();
        }
    }
    let fetched = sync.fetched();
    (sync.finish().unwrap(), fetched)
}

fn tree_of(objects: &[(u64, u8)]) -> ObjectTree {
    let mut tree = ObjectTree::new();
    for (id, v) in objects {
        tree.insert(ObjectId(*id), Bytes::from(vec![*v; 8]));
    }
    tree
}

#[test]
fn one_changed_object_among_many_fetches_that_object_and_its_path() {
    let own = tree_of(&(0..10_000).map(|i| (i, 1)).collect::<Vec<_>>());
    let mut donor = own.clone();
    donor.insert(ObjectId(4_321), Bytes::from_static(b"changed"));
    let (fetched, (nodes, objects, bytes)) = fetch(own, &donor);
    assert_eq!(fetched, donor);
    assert_eq!((objects, bytes), (1, 7));
    assert!(nodes <= 6, "{nodes} nodes for one object");
}

#[test]
fn a_donor_that_lies_is_caught_at_the_node_it_falsifies() {
    let own = tree_of(&[(1, 1), (2, 2), (3, 3)]);
    let donor = tree_of(&[(1, 1), (2, 9), (3, 3)]);
    let mut sync = TreeSync::new(own, donor.hash().root);
    let root = donor.summary(Prefix::ROOT).unwrap();
    sync.receive(Prefix::ROOT, root).unwrap();
    let prefix = sync.wanted().next().unwrap();
    let NodeSummary::Leaf { id, .. } = donor.summary(prefix).unwrap() else {
        panic!("three objects part at the first level here");
    };
    let lie = NodeSummary::Leaf {
        id,
        value: Bytes::from_static(b"lie"),
    };
    assert_eq!(
        sync.receive(prefix, lie),
        Err(SyncError::WrongDigest(prefix))
    );
    assert_eq!(
        sync.receive(Prefix::ROOT, NodeSummary::Empty),
        Err(SyncError::NotWanted(Prefix::ROOT))
    );
    // The honest summary still completes it.
    sync.receive(prefix, donor.summary(prefix).unwrap())
        .unwrap();
    assert_eq!(sync.finish().unwrap(), donor);
}

#[test]
fn an_empty_donor_empties_the_fetcher_and_prefixes_are_checked() {
    let (fetched, _) = fetch(tree_of(&[(1, 1), (2, 2)]), &ObjectTree::new());
    assert!(fetched.is_empty());
    assert_eq!(
        Prefix::new(1, 0x3 << 60),
        Some(Prefix {
            depth: 1,
            bits: 0x3 << 60
        })
    );
    assert_eq!(Prefix::new(1, 1), None);
    assert_eq!(Prefix::new(17, 0), None);
    assert!(Prefix::new(16, u64::MAX).is_some());
}

proptest! {
    #[test]
    fn any_two_trees_sync_to_the_donors(
        own in proptest::collection::vec((0u64..300, 0u8..3), 0..120),
        donor in proptest::collection::vec((0u64..300, 0u8..3), 0..120),
    ) {
        let own = tree_of(&own);
        let donor = tree_of(&donor);
        let differing = own.differing_objects(&donor).len();
        let (fetched, (_, objects, _)) = fetch(own, &donor);
        prop_assert!(fetched == donor);
        prop_assert!(objects <= differing);
        super::super::tests::check_canonical(&fetched);
    }
}
