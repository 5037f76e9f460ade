//! Decision proofs: every ACCEPT is signed, and a quorum of signed ACCEPTs for the same
//! (cid, epoch, hash) is a proof that any third replica can check.
//!
//! Signatures are produced once per instance per replica (never per request) and checked
//! lazily: received ACCEPTs are stored unverified, and a proof is verified only when it is
//! built (to answer a catch-up request or fill a STOPDATA) or received.

use std::collections::BTreeMap;

use bytes::Bytes;
use tagma_config::view::Membership;
use tagma_crypto::{IdentityKey, VerifyKey};
use tagma_wire::{
    ConsensusId, DecidedInstance, DecisionProof, Digest, Epoch, PublicKey, ReplicaId, Signature,
    Vote, accept_signing_bytes,
};

/// Checks ACCEPT signatures and proofs against the view's keys.
#[derive(Clone, Debug)]
pub struct ProofChecker {
    /// Decompressed once: every instance verifies signatures with them.
    keys: BTreeMap<ReplicaId, VerifyKey>,
    quorum: usize,
}

impl ProofChecker {
    /// Checks decision proofs of instances decided in `membership`'s installed view.
    pub fn for_membership(membership: &Membership) -> Self {
        let members = &membership.view.members;
        let ids: Vec<ReplicaId> = members.iter().map(|m| m.id).collect();
        let keys: Vec<PublicKey> = members.iter().map(|m| m.key).collect();
        ProofChecker::new(&ids, &keys, membership.quorums().accept_quorum())
    }

    pub fn new(members: &[ReplicaId], keys: &[PublicKey], accept_quorum: usize) -> Self {
        assert_eq!(members.len(), keys.len(), "one key per member");
        ProofChecker {
            // Configured keys were validated at load; one that is not a curve point (possible
            // only in hand-built parameters) verifies nothing.
            keys: members
                .iter()
                .copied()
                .zip(keys.iter())
                .filter_map(|(id, k)| Some((id, VerifyKey::new(k).ok()?)))
                .collect(),
            quorum: accept_quorum,
        }
    }

    /// Whether `signature` is `from`'s signature of an ACCEPT for `vote`.
    pub fn valid_accept(&self, from: ReplicaId, vote: &Vote, signature: &Signature) -> bool {
        self.valid_signature(from, &accept_signing_bytes(vote), signature)
    }

    /// Whether `signature` is member `from`'s signature of `message`.
    pub fn valid_signature(&self, from: ReplicaId, message: &[u8], signature: &Signature) -> bool {
        self.keys
            .get(&from)
            .is_some_and(|k| k.verify(message, signature).is_ok())
    }

    /// Checks a decided instance: its proof holds a quorum of distinct members' valid ACCEPT
    /// signatures for (cid, epoch, BLAKE3 of the batch). Returns the batch hash.
    pub fn check(&self, decided: &DecidedInstance) -> Option<Digest> {
        let hash = tagma_crypto::digest(&decided.batch);
        let vote = Vote {
            cid: decided.cid,
            epoch: decided.proof.epoch,
            hash,
        };
        let mut previous: Option<ReplicaId> = None;
        let mut valid = 0usize;
        for (from, sig) in &decided.proof.accepts {
            if previous.is_some_and(|p| p >= *from) {
                return None; // signers must be distinct (ascending)
            }
            previous = Some(*from);
            if self.valid_accept(*from, &vote, sig) {
                valid += 1;
            }
        }
        (valid >= self.quorum).then_some(hash)
    }
}

/// Signs this replica's ACCEPT.
pub fn sign_accept(key: &IdentityKey, vote: &Vote) -> Signature {
    key.sign(&accept_signing_bytes(vote))
}

/// One decided instance kept for forwarding.
#[derive(Clone, Debug)]
struct Logged {
    epoch: Epoch,
    hash: Digest,
    batch: Bytes,
    /// ACCEPT signatures received for (cid, epoch, hash), unverified.
    signatures: BTreeMap<ReplicaId, Signature>,
    /// The proof, once built and verified.
    proof: Option<DecisionProof>,
}

/// The most recent decided instances with their ACCEPT signatures, bounded.
#[derive(Debug)]
pub struct DecisionLog {
    kept: BTreeMap<ConsensusId, Logged>,
    kept_max: usize,
}

impl DecisionLog {
    pub fn new(kept_max: usize) -> Self {
        DecisionLog {
            kept: BTreeMap::new(),
            kept_max: kept_max.max(1),
        }
    }

    /// Records a decision (the newest one); drops the oldest beyond the bound.
    pub fn record(
        &mut self,
        cid: ConsensusId,
        epoch: Epoch,
        hash: Digest,
        batch: Bytes,
        signatures: BTreeMap<ReplicaId, Signature>,
        proof: Option<DecisionProof>,
    ) {
        debug_assert!(
            self.kept.last_key_value().is_none_or(|(c, _)| *c < cid),
            "decisions logged out of order"
        );
        // Kept as it came, without a copy: a leader's batch is its own encoding, and a
        // follower's a slice of the PROPOSE's frame body, which the connection reader hands
        // over in a buffer of its own (a copy for frames up to 64 KiB, a buffer about the
        // frame's size for larger ones), so a kept batch holds little beyond its own bytes.
        self.kept.insert(
            cid,
            Logged {
                epoch,
                hash,
                batch,
                signatures,
                proof,
            },
        );
        while self.kept.len() > self.kept_max {
            self.kept.pop_first();
        }
    }

    /// A late ACCEPT for a decided instance: keep its signature (more chances to build a
    /// proof when some signatures turn out invalid).
    pub fn add_signature(&mut self, from: ReplicaId, vote: &Vote, signature: Signature) {
        if let Some(l) = self.kept.get_mut(&vote.cid)
            && l.epoch == vote.epoch
            && l.hash == vote.hash
            && l.proof.is_none()
        {
            l.signatures.entry(from).or_insert(signature);
        }
    }

    /// The hash of the batch decided in `cid`, if kept.
    pub fn hash_of(&self, cid: ConsensusId) -> Option<Digest> {
        self.kept.get(&cid).map(|l| l.hash)
    }

    /// The epoch in which `cid` was decided, if kept.
    pub fn epoch_of(&self, cid: ConsensusId) -> Option<Epoch> {
        self.kept.get(&cid).map(|l| l.epoch)
    }

    /// The newest decided instance id.
    pub fn last_cid(&self) -> Option<ConsensusId> {
        self.kept.last_key_value().map(|(c, _)| *c)
    }

    /// The oldest decided instance still kept.
    pub fn first_cid(&self) -> Option<ConsensusId> {
        self.kept.first_key_value().map(|(c, _)| *c)
    }

    /// `cid` as decided, with the ACCEPT signatures recorded with the decision (in BFT,
    /// those the decision rested on were verified before deciding) — what a replica logs.
    pub fn as_decided(&self, cid: ConsensusId) -> Option<DecidedInstance> {
        let l = self.kept.get(&cid)?;
        let proof = l.proof.clone().unwrap_or_else(|| DecisionProof {
            epoch: l.epoch,
            accepts: l.signatures.iter().map(|(f, s)| (*f, *s)).collect(),
        });
        Some(DecidedInstance {
            cid,
            batch: l.batch.clone(),
            proof,
        })
    }

    /// Before a view change: builds, with the ending view's `checker`, the proof of every kept
    /// decision that has none yet. A proof is judged against the view its instance was decided
    /// in; after the change only the new view's checker is at hand.
    pub fn seal_proofs(&mut self, checker: &ProofChecker) {
        let unsealed: Vec<ConsensusId> = self
            .kept
            .iter()
            .filter(|(_, l)| l.proof.is_none())
            .map(|(c, _)| *c)
            .collect();
        for cid in unsealed {
            if self.proven(cid, checker).is_none() {
                // Never to be proven under a later view's checker: forgotten.
                tracing::warn!(%cid, "a kept decision has too few valid signatures to prove it: no longer forwarded");
                self.kept.remove(&cid);
            }
        }
    }

    /// `cid` with a verified proof, if it is kept and enough valid signatures are known.
    /// Verifies the stored signatures the first time and caches the result.
    pub fn proven(&mut self, cid: ConsensusId, checker: &ProofChecker) -> Option<DecidedInstance> {
        let l = self.kept.get_mut(&cid)?;
        if l.proof.is_none() {
            let vote = Vote {
                cid,
                epoch: l.epoch,
                hash: l.hash,
            };
            let accepts: Vec<(ReplicaId, Signature)> = l
                .signatures
                .iter()
                .filter(|(from, sig)| checker.valid_accept(**from, &vote, sig))
                .take(checker.quorum)
                .map(|(f, s)| (*f, *s))
                .collect();
            if accepts.len() < checker.quorum {
                return None;
            }
            l.proof = Some(DecisionProof {
                epoch: l.epoch,
                accepts,
            });
        }
        Some(DecidedInstance {
            cid,
            batch: l.batch.clone(),
            proof: l.proof.clone().expect("just built"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: u32) -> (Vec<ReplicaId>, Vec<IdentityKey>) {
        let ids: Vec<_> = (0..n).map(ReplicaId).collect();
        let keys = (0..n)
            .map(|i| IdentityKey::from_seed([i as u8 + 1; 32]))
            .collect();
        (ids, keys)
    }

    #[test]
    fn a_kept_decision_shares_the_batch_it_was_given() {
        // The connection readers hand batches over in buffers of their own (tagma-net's
        // `small_frames_arrive_as_copies_that_free_the_read_buffer`): no second copy here.
        let batch = Bytes::from(vec![7u8; 500]);
        let hash = tagma_crypto::digest(&batch);
        let mut log = DecisionLog::new(4);
        log.record(
            ConsensusId(1),
            Epoch(0),
            hash,
            batch.clone(),
            BTreeMap::new(),
            None,
        );
        let kept = log.as_decided(ConsensusId(1)).expect("kept").batch;
        assert_eq!(kept.as_ptr(), batch.as_ptr());
    }

    #[test]
    fn a_quorum_of_signed_accepts_proves_a_decision() {
        let (ids, sk) = keys(4);
        let pks: Vec<_> = sk.iter().map(|k| k.public()).collect();
        let checker = ProofChecker::new(&ids, &pks, 3);
        let batch = Bytes::from_static(b"batch");
        let vote = Vote {
            cid: ConsensusId(7),
            epoch: Epoch(2),
            hash: tagma_crypto::digest(&batch),
        };
        let mut log = DecisionLog::new(4);
        let sigs: BTreeMap<_, _> = (0..2)
            .map(|i| (ids[i], sign_accept(&sk[i], &vote)))
            .collect();
        log.record(vote.cid, vote.epoch, vote.hash, batch.clone(), sigs, None);
        assert!(
            log.proven(vote.cid, &checker).is_none(),
            "two signatures are not a quorum"
        );
        // A forged signature does not count; a real late one does.
        log.add_signature(ids[2], &vote, sign_accept(&sk[3], &vote));
        assert!(log.proven(vote.cid, &checker).is_none());
        let mut log2 = DecisionLog::new(4);
        let sigs: BTreeMap<_, _> = (0..3)
            .map(|i| (ids[i], sign_accept(&sk[i], &vote)))
            .collect();
        log2.record(vote.cid, vote.epoch, vote.hash, batch.clone(), sigs, None);
        let proven = log2.proven(vote.cid, &checker).expect("quorum");
        assert_eq!(checker.check(&proven), Some(vote.hash));
        // Tampering with the batch, the epoch or the signer order breaks the proof.
        let mut bad = proven.clone();
        bad.batch = Bytes::from_static(b"other");
        assert_eq!(checker.check(&bad), None);
        let mut bad = proven.clone();
        bad.proof.epoch = Epoch(3);
        assert_eq!(checker.check(&bad), None);
        let mut bad = proven.clone();
        bad.proof.accepts.swap(0, 1);
        assert_eq!(checker.check(&bad), None);
        let mut bad = proven;
        bad.proof.accepts[1] = bad.proof.accepts[0];
        assert_eq!(checker.check(&bad), None, "a duplicated signer counts once");
    }

    #[test]
    fn the_log_is_bounded() {
        let mut log = DecisionLog::new(2);
        for c in 0..5 {
            log.record(
                ConsensusId(c),
                Epoch(0),
                Digest::default(),
                Bytes::new(),
                BTreeMap::new(),
                None,
            );
        }
        assert_eq!(
            (log.first_cid(), log.last_cid()),
            (Some(ConsensusId(3)), Some(ConsensusId(4)))
        );
    }
}
