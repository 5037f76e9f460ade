//! Observed-remove set with add-wins semantics (OR-set) of byte-string elements.
//!
//! Every add tags its element with the add's dot; an element is present while it has a tag.
//! A remove carries the tags of the element its origin had seen and deletes exactly those, so
//! an add concurrent with the remove (whose tag the remove could not have seen) keeps the
//! element: add wins. An add also carries the tags its origin had seen and replaces them with
//! its own, which keeps an element's tags down to one per concurrent adder. Causal delivery
//! applies every operation after the adds whose tags it names, so the set of tags, and thus
//! the set, is the same in every delivery order. Elements iterate in ascending byte order.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::dot::Dot;

/// A set operation. `observed` lists the element's tags the origin had seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetOp {
    /// Adds `element`, tagged with the operation's dot, in place of the `observed` tags.
    Add { element: Bytes, observed: Vec<Dot> },
    /// Deletes the `observed` tags of `element`.
    Remove { element: Bytes, observed: Vec<Dot> },
}

impl SetOp {
    /// The element the operation is about.
    pub fn element(&self) -> &Bytes {
        match self {
            SetOp::Add { element, .. } | SetOp::Remove { element, .. } => element,
        }
    }
}

/// An add-wins observed-remove set of bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    elements: BTreeMap<Bytes, BTreeSet<Dot>>,
}

impl Set {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set from elements and their (non-empty) tag sets; empty tag sets are left out.
    pub(crate) fn from_tags(elements: BTreeMap<Bytes, BTreeSet<Dot>>) -> Self {
        let mut set = Self { elements };
        set.elements.retain(|_, tags| !tags.is_empty());
        set
    }

    /// The elements with their tags, in ascending element order.
    pub fn tagged(&self) -> impl Iterator<Item = (&Bytes, &BTreeSet<Dot>)> {
        self.elements.iter()
    }

    /// Whether `element` is present.
    pub fn contains(&self, element: &[u8]) -> bool {
        self.elements.contains_key(element)
    }

    /// The elements in ascending byte order.
    pub fn iter(&self) -> impl Iterator<Item = &Bytes> {
        self.elements.keys()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.elements.len()
    }

    /// Whether the set has no element.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// The tags of `element` (empty if absent).
    pub fn tags(&self, element: &[u8]) -> Vec<Dot> {
        self.elements
            .get(element)
            .map(|tags| tags.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Every tag of every element, in ascending order.
    pub fn dots(&self) -> Vec<Dot> {
        let mut dots: Vec<Dot> = self.elements.values().flatten().copied().collect();
        dots.sort_unstable();
        dots
    }

    /// Builds the operation that adds `element`.
    pub fn add(&self, element: Bytes) -> SetOp {
        let observed = self.tags(&element);
        SetOp::Add { element, observed }
    }

    /// Builds the operation that removes `element` as this replica sees it.
    pub fn remove(&self, element: Bytes) -> SetOp {
        let observed = self.tags(&element);
        SetOp::Remove { element, observed }
    }

    /// Applies the operation with id `dot`.
    pub fn apply(&mut self, dot: Dot, op: &SetOp) {
        match op {
            SetOp::Add { element, observed } => {
                let tags = self.elements.entry(element.clone()).or_default();
                for tag in observed {
                    tags.remove(tag);
                }
                tags.insert(dot);
            }
            SetOp::Remove { element, observed } => {
                if let Some(tags) = self.elements.get_mut(element) {
                    for tag in observed {
                        tags.remove(tag);
                    }
                    if tags.is_empty() {
                        self.elements.remove(element);
                    }
                }
            }
        }
    }

    /// Deletes the tags in `dots` from every element (a map key removal).
    pub fn remove_tags(&mut self, dots: &[Dot]) {
        if dots.is_empty() {
            return;
        }
        let dots: BTreeSet<Dot> = dots.iter().copied().collect();
        self.elements.retain(|_, tags| {
            tags.retain(|tag| !dots.contains(tag));
            !tags.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{Set, SetOp};
    use crate::dot::Dot;
    use bytes::Bytes;

    fn b(text: &'static str) -> Bytes {
        Bytes::from_static(text.as_bytes())
    }

    #[test]
    fn add_wins_over_a_concurrent_remove() {
        let mut base = Set::new();
        base.apply(Dot::new(1, 1), &base.add(b("x")));
        // Node 2 removes x while node 3, concurrently, adds it again.
        let remove = base.remove(b("x"));
        let add = base.add(b("x"));
        let mut remove_first = base.clone();
        remove_first.apply(Dot::new(2, 1), &remove);
        assert!(!remove_first.contains(b"x"));
        remove_first.apply(Dot::new(3, 1), &add);
        let mut add_first = base.clone();
        add_first.apply(Dot::new(3, 1), &add);
        add_first.apply(Dot::new(2, 1), &remove);
        assert!(remove_first.contains(b"x"));
        assert_eq!(remove_first, add_first);
        assert_eq!(add_first.tags(b"x"), vec![Dot::new(3, 1)]);
    }

    #[test]
    fn remove_deletes_only_observed_tags() {
        let mut set = Set::new();
        set.apply(Dot::new(1, 1), &set.add(b("x")));
        let remove = set.remove(b("x"));
        // A concurrent add from a node that had not seen node 1's add.
        set.apply(
            Dot::new(2, 1),
            &SetOp::Add {
                element: b("x"),
                observed: Vec::new(),
            },
        );
        assert_eq!(set.tags(b"x"), vec![Dot::new(1, 1), Dot::new(2, 1)]);
        set.apply(Dot::new(3, 1), &remove);
        assert_eq!(set.tags(b"x"), vec![Dot::new(2, 1)]);
        // Removing an element with no observed tag changes nothing.
        let before = set.clone();
        set.apply(Dot::new(3, 2), &Set::new().remove(b("x")));
        assert_eq!(set, before);
    }

    #[test]
    fn an_add_replaces_the_tags_it_observed() {
        let mut set = Set::new();
        for counter in 1..=5 {
            set.apply(Dot::new(1, counter), &set.add(b("x")));
        }
        assert_eq!(set.tags(b"x"), vec![Dot::new(1, 5)]);
    }

    #[test]
    fn elements_iterate_in_byte_order() {
        let mut set = Set::new();
        for (counter, element) in ["c", "a", "b"].into_iter().enumerate() {
            set.apply(Dot::new(1, counter as u64 + 1), &set.add(b(element)));
        }
        let elements: Vec<&Bytes> = set.iter().collect();
        assert_eq!(elements, vec![&b("a"), &b("b"), &b("c")]);
        assert_eq!(set.len(), 3);
        set.remove_tags(&[Dot::new(1, 1), Dot::new(1, 2)]);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![&b("b")]);
    }
}
