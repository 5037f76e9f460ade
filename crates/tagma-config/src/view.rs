//! Views: the replica set, and how an administrator's signed view change turns one view into
//! the next. As in BFT-SMaRt (Bessani, Sousa, Alchieri: State Machine Replication for the
//! Masses with BFT-SMaRt), a trusted administrator signs every view change.
//!
//! A view change travels as the payload of a [`RequestKind::Reconfigure`] request and is ordered
//! like any request. Only after ordering does each replica judge it — with [`judge`], a pure
//! function of the current view, the administrator's key and the payload bytes — so every
//! correct replica reaches the same verdict at the same instance. A change that is refused
//! leaves the view as it is; its client gets the reason in the reply.
//!
//! [`RequestKind::Reconfigure`]: tagma_wire::RequestKind::Reconfigure

use std::collections::BTreeSet;

use bytes::Bytes;
use tagma_wire::{
    Decode, MAX_MAC_ENTRIES, PublicKey, ReplicaId, View, ViewChange, ViewId, ViewOp,
    view_change_signing_bytes,
};

use crate::quorum::{Mode, Quorums};

/// Why a view change was refused. Each names what the administrator should change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    #[error("the view change does not decode: {0}")]
    Malformed(String),
    #[error("no administrator key is configured ([admin] public_key): view changes are refused")]
    NoAdmin,
    #[error(
        "the view change is for view {got} but view {current} is installed: fetch the current view and sign again"
    )]
    StaleView { current: ViewId, got: ViewId },
    #[error("the view change's signature does not verify with the administrator key")]
    BadSignature,
    #[error("the view change has no operations")]
    Empty,
    #[error("replica {0} is already a member")]
    AlreadyMember(ReplicaId),
    #[error("replica {0} is not a member")]
    NotMember(ReplicaId),
    #[error("address {0} is already a member's")]
    AddressTaken(String),
    #[error("replica {0}'s key is already a member's: each member needs its own key")]
    KeyTaken(ReplicaId),
    #[error("replica {0}'s key is not a valid Ed25519 public key")]
    InvalidKey(ReplicaId),
    #[error(
        "{n} members cannot tolerate f = {f} in {mode} mode (it needs {needed}): add replicas first or lower f"
    )]
    TooFewMembers {
        n: usize,
        f: usize,
        mode: Mode,
        needed: usize,
    },
    #[error("f must be at least 1 in a replicated view")]
    ZeroF,
    #[error("{n} members exceed the {max} a request authenticator can address")]
    TooManyMembers { n: usize, max: usize },
}

/// The view that `ops` make of `view`, applied in order, with the id incremented; refused if
/// any operation does not apply or the result cannot tolerate its `f` in `mode`.
pub fn apply(view: &View, ops: &[ViewOp], mode: Mode) -> Result<View, ViewError> {
    if ops.is_empty() {
        return Err(ViewError::Empty);
    }
    let mut next = view.clone();
    for op in ops {
        match op {
            ViewOp::Add(member) => {
                if next.members.iter().any(|m| m.id == member.id) {
                    return Err(ViewError::AlreadyMember(member.id));
                }
                if next.members.iter().any(|m| m.addr == member.addr) {
                    return Err(ViewError::AddressTaken(member.addr.clone()));
                }
                // ACCEPT signatures do not name their signer: a shared key would let one
                // replica's signature count twice in a decision proof.
                if next.members.iter().any(|m| m.key == member.key) {
                    return Err(ViewError::KeyTaken(member.id));
                }
                if tagma_crypto::VerifyKey::new(&member.key).is_err() {
                    return Err(ViewError::InvalidKey(member.id));
                }
                let at = next.members.partition_point(|m| m.id < member.id);
                next.members.insert(at, member.clone());
            }
            ViewOp::Remove(id) => {
                let at = next
                    .members
                    .iter()
                    .position(|m| m.id == *id)
                    .ok_or(ViewError::NotMember(*id))?;
                next.members.remove(at);
            }
            ViewOp::SetF(f) => next.f = *f,
        }
    }
    let (n, f) = (next.members.len(), next.f as usize);
    if f == 0 {
        return Err(ViewError::ZeroF);
    }
    let needed = mode.replicas_needed(f);
    if n < needed {
        return Err(ViewError::TooFewMembers { n, f, mode, needed });
    }
    if n > MAX_MAC_ENTRIES {
        return Err(ViewError::TooManyMembers {
            n,
            max: MAX_MAC_ENTRIES,
        });
    }
    debug_assert!(
        next.members.windows(2).all(|w| w[0].id < w[1].id),
        "members stay ascending"
    );
    debug_assert_eq!(
        next.members
            .iter()
            .map(|m| &m.addr)
            .collect::<BTreeSet<_>>()
            .len(),
        n,
        "addresses stay distinct"
    );
    next.id = ViewId(view.id.0 + 1);
    Ok(next)
}

/// Judges the payload of an ordered reconfigure request against the installed `view`: it must
/// decode, name `view`, carry the administrator's signature over its canonical bytes, and
/// apply ([`apply`]). Deterministic: every correct replica judges the same bytes alike.
pub fn judge(
    view: &View,
    admin: Option<&PublicKey>,
    mode: Mode,
    payload: &Bytes,
) -> Result<View, ViewError> {
    let change = ViewChange::decode(payload).map_err(|e| ViewError::Malformed(e.to_string()))?;
    let admin = admin.ok_or(ViewError::NoAdmin)?;
    if change.view != view.id {
        return Err(ViewError::StaleView {
            current: view.id,
            got: change.view,
        });
    }
    let signed = view_change_signing_bytes(change.view, &change.ops);
    tagma_crypto::verify(admin, &signed, &change.signature).map_err(|_| ViewError::BadSignature)?;
    apply(view, &change.ops, mode)
}

/// What a replica needs to judge view changes: the installed view, the administrator's key
/// (none: every change is refused) and the fault model. The core and the executor each keep
/// one, and each judges every ordered change with [`Membership::apply_change`]: the core to
/// order the next instance in the new view, the executor for the reply and the checkpointed
/// state (it also replays logged and fetched decisions, where no core is involved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    pub view: View,
    pub admin: Option<PublicKey>,
    pub mode: Mode,
    /// The changes installed since the configured view, in order, as the administrator
    /// signed them (at most [`HISTORY_MAX`], the newest): with the configured view and the
    /// administrator's key, anyone can check that `view` is the administrator's ([`replay`]).
    pub history: Vec<ViewChange>,
}

/// Signed view changes a membership remembers (older ones are forgotten; a client that
/// replays the history from the configured view then finds it incomplete).
pub const HISTORY_MAX: usize = 1024;

/// Replays the administrator's signed `history` from the configured view `initial`: the view
/// it leads to, or the first change that does not verify or apply. A client uses it to find
/// the current members without trusting the replica that sent the history — every step
/// carries the administrator's signature for the view it changes.
pub fn replay(
    initial: &View,
    admin: &PublicKey,
    mode: Mode,
    history: &[ViewChange],
) -> Result<View, ViewError> {
    use tagma_wire::Encode;
    history.iter().try_fold(initial.clone(), |view, change| {
        judge(&view, Some(admin), mode, &change.to_bytes())
    })
}

impl Membership {
    /// The quorum sizes of the installed view.
    pub fn quorums(&self) -> Quorums {
        Quorums::new(self.mode, self.view.members.len(), self.view.f as usize)
    }

    /// Judges an ordered change against the installed view and installs the view it makes
    /// (and remembers the signed change).
    pub fn apply_change(&mut self, payload: &Bytes) -> Result<&View, ViewError> {
        let next = judge(&self.view, self.admin.as_ref(), self.mode, payload)?;
        let change = ViewChange::decode(payload).expect("judged: it decodes");
        self.history.push(change);
        if self.history.len() > HISTORY_MAX {
            self.history.remove(0);
        }
        self.view = next;
        Ok(&self.view)
    }
}

/// The administrator's side: the signed payload of a reconfigure request applying `ops` to
/// view `view`.
pub fn sign_change(
    admin: &tagma_crypto::IdentityKey,
    view: ViewId,
    ops: Vec<ViewOp>,
) -> ViewChange {
    let signature = admin.sign(&view_change_signing_bytes(view, &ops));
    ViewChange {
        view,
        ops,
        signature,
    }
}

#[cfg(test)]
mod tests {
    use tagma_crypto::IdentityKey;
    use tagma_wire::{Encode, ViewMember};

    use super::*;

    fn member(id: u32) -> ViewMember {
        ViewMember {
            id: ReplicaId(id),
            addr: format!("127.0.0.1:{}", 7000 + id),
            key: IdentityKey::from_seed([id as u8 + 1; 32]).public(),
        }
    }

    fn view(ids: &[u32], f: u32) -> View {
        View {
            id: ViewId(3),
            f,
            members: ids.iter().map(|i| member(*i)).collect(),
        }
    }

    fn ids(v: &View) -> Vec<u32> {
        v.members.iter().map(|m| m.id.0).collect()
    }

    #[test]
    fn operations_apply_in_order_and_keep_members_ascending() {
        let v = view(&[0, 1, 2, 3], 1);
        let next = apply(
            &v,
            &[ViewOp::Add(member(7)), ViewOp::Add(member(5))],
            Mode::Bft,
        )
        .unwrap();
        assert_eq!(ids(&next), vec![0, 1, 2, 3, 5, 7]);
        assert_eq!(next.id, ViewId(4));
        // f = 2 needs 7 replicas in BFT: add them first, in the same change.
        assert_eq!(
            apply(&v, &[ViewOp::SetF(2)], Mode::Bft),
            Err(ViewError::TooFewMembers {
                n: 4,
                f: 2,
                mode: Mode::Bft,
                needed: 7
            })
        );
        let grown = apply(
            &v,
            &[
                ViewOp::Add(member(4)),
                ViewOp::Add(member(5)),
                ViewOp::Add(member(6)),
                ViewOp::SetF(2),
            ],
            Mode::Bft,
        )
        .unwrap();
        assert_eq!((grown.members.len(), grown.f), (7, 2));
        // CFT needs only 2f+1.
        assert!(apply(&view(&[0, 1, 2, 3, 4], 1), &[ViewOp::SetF(2)], Mode::Cft).is_ok());
        // Removing the leader (the lowest id) is an ordinary removal.
        let removed = apply(
            &view(&[0, 1, 2, 3, 4], 1),
            &[ViewOp::Remove(ReplicaId(0))],
            Mode::Bft,
        )
        .unwrap();
        assert_eq!(ids(&removed), vec![1, 2, 3, 4]);
    }

    #[test]
    fn operations_that_do_not_apply_are_refused_with_the_reason() {
        let v = view(&[0, 1, 2, 3], 1);
        assert_eq!(apply(&v, &[], Mode::Bft), Err(ViewError::Empty));
        assert_eq!(
            apply(&v, &[ViewOp::Add(member(2))], Mode::Bft),
            Err(ViewError::AlreadyMember(ReplicaId(2)))
        );
        let mut same_addr = member(9);
        same_addr.addr = member(1).addr;
        assert!(matches!(
            apply(&v, &[ViewOp::Add(same_addr)], Mode::Bft),
            Err(ViewError::AddressTaken(_))
        ));
        assert_eq!(
            apply(&v, &[ViewOp::Remove(ReplicaId(8))], Mode::Bft),
            Err(ViewError::NotMember(ReplicaId(8)))
        );
        assert!(matches!(
            apply(&v, &[ViewOp::Remove(ReplicaId(3))], Mode::Bft),
            Err(ViewError::TooFewMembers { n: 3, .. })
        ));
        assert_eq!(
            apply(&v, &[ViewOp::SetF(0)], Mode::Bft),
            Err(ViewError::ZeroF)
        );
        let mut same_key = member(9);
        same_key.key = member(2).key;
        assert_eq!(
            apply(&v, &[ViewOp::Add(same_key)], Mode::Bft),
            Err(ViewError::KeyTaken(ReplicaId(9)))
        );
        let mut bad_key = member(9);
        // Bytes that are no point of the curve (about half of all byte strings).
        bad_key.key = (0..=255u8)
            .map(|b| PublicKey([b; 32]))
            .find(|k| tagma_crypto::VerifyKey::new(k).is_err())
            .expect("some repeated byte is no curve point");
        assert_eq!(
            apply(&v, &[ViewOp::Add(bad_key)], Mode::Bft),
            Err(ViewError::InvalidKey(ReplicaId(9)))
        );
    }

    #[test]
    fn only_the_administrators_signature_for_the_installed_view_is_accepted() {
        let admin = IdentityKey::from_seed([42; 32]);
        let v = view(&[0, 1, 2, 3], 1);
        let change = sign_change(&admin, v.id, vec![ViewOp::Add(member(4))]);
        let payload = change.to_bytes();
        let next = judge(&v, Some(&admin.public()), Mode::Bft, &payload).unwrap();
        assert_eq!(ids(&next), vec![0, 1, 2, 3, 4]);
        // No administrator configured.
        assert_eq!(
            judge(&v, None, Mode::Bft, &payload),
            Err(ViewError::NoAdmin)
        );
        // Another key.
        let other = IdentityKey::from_seed([43; 32]);
        assert_eq!(
            judge(&v, Some(&other.public()), Mode::Bft, &payload),
            Err(ViewError::BadSignature)
        );
        // Operations changed after signing.
        let mut tampered = change.clone();
        tampered.ops.push(ViewOp::SetF(2));
        assert_eq!(
            judge(&v, Some(&admin.public()), Mode::Bft, &tampered.to_bytes()),
            Err(ViewError::BadSignature)
        );
        // Signed for another view (a replay of an old change).
        let old = sign_change(&admin, ViewId(2), vec![ViewOp::Add(member(4))]);
        assert_eq!(
            judge(&v, Some(&admin.public()), Mode::Bft, &old.to_bytes()),
            Err(ViewError::StaleView {
                current: ViewId(3),
                got: ViewId(2)
            })
        );
        // Not a view change at all.
        assert!(matches!(
            judge(
                &v,
                Some(&admin.public()),
                Mode::Bft,
                &Bytes::from_static(b"put x 1")
            ),
            Err(ViewError::Malformed(_))
        ));
    }

    #[test]
    fn a_membership_remembers_the_signed_history_and_anyone_can_replay_it() {
        let admin = IdentityKey::from_seed([42; 32]);
        let initial = view(&[0, 1, 2, 3], 1);
        let mut m = Membership {
            view: initial.clone(),
            admin: Some(admin.public()),
            mode: Mode::Bft,
            history: Vec::new(),
        };
        let add = sign_change(&admin, ViewId(3), vec![ViewOp::Add(member(4))]);
        let remove = sign_change(&admin, ViewId(4), vec![ViewOp::Remove(ReplicaId(0))]);
        let forged = sign_change(&admin, ViewId(5), vec![ViewOp::SetF(2)]);
        m.apply_change(&add.to_bytes()).unwrap();
        m.apply_change(&remove.to_bytes()).unwrap();
        // A refused change leaves no trace.
        assert!(m.apply_change(&forged.to_bytes()).is_err());
        assert_eq!(m.history, vec![add.clone(), remove.clone()]);
        let replayed = replay(&initial, &admin.public(), Mode::Bft, &m.history).unwrap();
        assert_eq!(replayed, m.view);
        assert_eq!(ids(&replayed), vec![1, 2, 3, 4]);
        // A prefix replays to an older view; a reordered, tampered or foreign history fails.
        let older = replay(&initial, &admin.public(), Mode::Bft, &m.history[..1]).unwrap();
        assert_eq!(older.id, ViewId(4));
        assert!(
            replay(
                &initial,
                &admin.public(),
                Mode::Bft,
                &[remove.clone(), add.clone()]
            )
            .is_err()
        );
        let mut tampered = remove.clone();
        tampered.ops = vec![ViewOp::Remove(ReplicaId(1))];
        assert_eq!(
            replay(
                &initial,
                &admin.public(),
                Mode::Bft,
                &[add.clone(), tampered]
            ),
            Err(ViewError::BadSignature)
        );
        let stranger = IdentityKey::from_seed([7; 32]);
        assert_eq!(
            replay(&initial, &stranger.public(), Mode::Bft, &m.history),
            Err(ViewError::BadSignature)
        );
    }
}
