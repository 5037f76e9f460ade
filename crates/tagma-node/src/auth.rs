//! Request authentication at a replica, done by network threads (never by the consensus
//! thread).
//!
//! A request proves its origin either with an *authenticator* (one MAC tag per member of the
//! view the request names, ascending by id; this replica checks only its own entry, keyed
//! with the static key it shares with the client principal) or, when `signed_requests = true`, with an Ed25519 signature. Signature checks
//! run on a pool of `signature_threads` threads so they scale with cores.

use std::{
    collections::BTreeMap,
    sync::{PoisonError, RwLock},
    thread,
};

use crossbeam_channel::{Receiver, Sender, bounded};
use tagma_core::ValidConfig;
use tagma_crypto::{IdentityKey, MacKey};
use tagma_wire::{PublicKey, ReplicaId, Request, RequestAuth, RequestEnvelope, View, ViewId};

use crate::verified::VerifiedRequests;

/// Views whose authenticator position a replica remembers (requests of older views are
/// answered with the installed view before they are authenticated).
const VIEWS_KEPT: usize = 8;

/// Why a request's authentication failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("request from a client principal that is not configured")]
    UnknownClient,
    #[error("authenticator has no entry for this replica")]
    MissingMac,
    #[error("bad request MAC")]
    BadMac,
    #[error("bad request signature")]
    BadSignature,
    #[error("this cluster requires signed requests")]
    SignatureRequired,
}

impl AuthError {
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::UnknownClient => "unknown_client",
            AuthError::MissingMac => "missing_request_mac",
            AuthError::BadMac => "bad_request_mac",
            AuthError::BadSignature => "bad_request_signature",
            AuthError::SignatureRequired => "signature_required",
        }
    }
}

struct ClientKeys {
    public: PublicKey,
    mac: MacKey,
}

/// Verifies requests' authentication for one replica.
pub struct RequestVerifier {
    me: ReplicaId,
    /// This replica's entry in the authenticators of each view it was a member of (MAC tags
    /// follow the members of the view the request names, ascending by id); the newest
    /// [`VIEWS_KEPT`].
    my_index: RwLock<BTreeMap<ViewId, usize>>,
    signed_requests: bool,
    clients: BTreeMap<u32, ClientKeys>,
    /// Requests authenticated on their clients' connections, recognised again in PROPOSEs.
    verified: VerifiedRequests,
}

impl RequestVerifier {
    pub fn new(
        cfg: &ValidConfig,
        me: ReplicaId,
        key: &IdentityKey,
    ) -> Result<Self, tagma_crypto::CryptoError> {
        // View 0: the configured replicas (sorted by id).
        let my_index = cfg
            .replicas
            .iter()
            .position(|r| r.id == me)
            .map(|i| (ViewId(0), i));
        let mut clients = BTreeMap::new();
        for (principal, public) in &cfg.clients {
            clients.insert(
                *principal,
                ClientKeys {
                    public: *public,
                    mac: key.request_mac_key(public)?,
                },
            );
        }
        Ok(RequestVerifier {
            me,
            my_index: RwLock::new(my_index.into_iter().collect()),
            signed_requests: cfg.raw.cluster.signed_requests,
            clients,
            verified: VerifiedRequests::new(cfg.raw.limits.verified_requests_bytes),
        })
    }

    /// `view` is installed: requests naming it carry this replica's MAC at its position
    /// among the members (none if it is not one).
    pub fn note_view(&self, view: &View) {
        let Some(i) = view.members.iter().position(|m| m.id == self.me) else {
            return;
        };
        let mut map = self
            .my_index
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        map.insert(view.id, i);
        while map.len() > VIEWS_KEPT {
            map.pop_first();
        }
    }

    pub fn signed_requests(&self) -> bool {
        self.signed_requests
    }

    /// Checks one request's authentication.
    pub fn verify(&self, env: &RequestEnvelope) -> Result<(), AuthError> {
        let keys = self
            .clients
            .get(&env.request.client.principal())
            .ok_or(AuthError::UnknownClient)?;
        let digest = tagma_crypto::request_digest(&env.request);
        match &env.auth {
            RequestAuth::Macs(_) if self.signed_requests => Err(AuthError::SignatureRequired),
            RequestAuth::Macs(tags) => {
                let index = self
                    .my_index
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&env.request.view)
                    .copied();
                // A view this replica does not know (it is behind) or was no member of.
                let tag = index
                    .and_then(|i| tags.get(i))
                    .ok_or(AuthError::MissingMac)?;
                if keys.mac.verify_parts(&[digest.as_bytes()], tag) {
                    Ok(())
                } else {
                    Err(AuthError::BadMac)
                }
            }
            RequestAuth::Signature(sig) => {
                tagma_crypto::verify(&keys.public, digest.as_bytes(), sig)
                    .map_err(|_| AuthError::BadSignature)
            }
        }
    }

    /// `request` passed [`RequestVerifier::verify`] on its client's own connection: kept
    /// for a while, so that a PROPOSE relaying it need not check it again.
    pub fn keep(&self, request: &Request) {
        self.verified.insert(request);
    }

    /// Checks every request of a batch relayed by a replica: those equal to a request kept
    /// after its check on the client's connection pass at once, the others are checked;
    /// signatures of large batches are checked on several threads. Returns the first failure.
    pub fn verify_all(
        &self,
        requests: &[RequestEnvelope],
        threads: usize,
    ) -> Result<(), AuthError> {
        const PARALLEL_FROM: usize = 64;
        let mut unknown = (requests.iter()).filter(|r| !self.verified.take_equal(&r.request));
        if !self.signed_requests || requests.len() < PARALLEL_FROM || threads <= 1 {
            // MACs: checked in place, with no list of the unknown requests built per batch.
            return unknown.try_for_each(|r| self.verify(r));
        }
        let unknown: Vec<&RequestEnvelope> = unknown.collect();
        let requests = &unknown[..];
        let chunk = requests.len().div_ceil(threads);
        thread::scope(|s| {
            let handles: Vec<_> = requests
                .chunks(chunk)
                .map(|part| s.spawn(move || part.iter().try_for_each(|r| self.verify(r))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(AuthError::BadSignature)))
                .collect::<Result<Vec<()>, _>>()
                .map(|_| ())
        })
    }
}

type Job = Box<dyn FnOnce(&RequestVerifier) + Send>;

/// A pool of threads that verify request signatures and then run a continuation (which
/// forwards the request to the consensus queue).
#[derive(Clone)]
pub struct SignaturePool {
    tx: Sender<Job>,
}

impl SignaturePool {
    pub fn start(
        verifier: std::sync::Arc<RequestVerifier>,
        threads: usize,
        queue_max: usize,
    ) -> Self {
        let (tx, rx): (Sender<Job>, Receiver<Job>) = bounded(queue_max);
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            let verifier = verifier.clone();
            thread::Builder::new()
                .name(format!("sigverify-{i}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job(&verifier);
                    }
                })
                .expect("spawn signature thread");
        }
        SignaturePool { tx }
    }

    /// Queues a verification job (blocks when the pool is saturated: back-pressure on the
    /// connection that sent it).
    pub fn submit(&self, job: impl FnOnce(&RequestVerifier) + Send + 'static) {
        let _ = self.tx.send(Box::new(job));
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tagma_wire::{ClientId, MacTag, RequestKind, RequestSeq};

    use super::*;

    /// A BFT configuration of four replicas and one client principal (0); the verifier of
    /// replica 0, and the MAC keys the client shares with each replica.
    fn setup() -> (RequestVerifier, Vec<MacKey>) {
        let replicas: Vec<IdentityKey> = (0..4).map(|_| IdentityKey::generate()).collect();
        let client = IdentityKey::generate();
        let mut toml = String::from("[cluster]\nf = 1\n");
        for (i, r) in replicas.iter().enumerate() {
            toml += &format!(
                "[[replica]]\nid = {i}\naddr = \"127.0.0.1:{}\"\npublic_key = \"{}\"\n",
                7000 + i,
                r.public().to_hex()
            );
        }
        toml += &format!(
            "[[client]]\nid = 0\npublic_key = \"{}\"\n",
            client.public().to_hex()
        );
        let cfg = tagma_core::Config::from_toml(&toml).expect("valid configuration");
        let verifier = RequestVerifier::new(&cfg, ReplicaId(0), &replicas[0]).expect("keys");
        let macs = (replicas.iter())
            .map(|r| client.request_mac_key(&r.public()).expect("key"))
            .collect();
        (verifier, macs)
    }

    fn envelope(macs: &[MacKey], seq: u64, payload: &'static [u8]) -> RequestEnvelope {
        let request = Request {
            client: ClientId::new(0, 1),
            seq: RequestSeq(seq),
            kind: RequestKind::Ordered,
            view: ViewId(0),
            payload: Bytes::from_static(payload),
        };
        let digest = tagma_crypto::request_digest(&request);
        let tags = (macs.iter())
            .map(|k| k.tag_parts(&[digest.as_bytes()]))
            .collect();
        RequestEnvelope {
            request,
            auth: RequestAuth::Macs(tags),
        }
    }

    #[test]
    fn a_relayed_request_equal_to_a_kept_one_passes_and_any_other_is_checked() {
        let (verifier, macs) = setup();
        let genuine = envelope(&macs, 1, b"put x 1");
        assert_eq!(verifier.verify(&genuine), Ok(()));
        verifier.keep(&genuine.request);
        // A leader relays it with a broken authenticator: the kept copy vouches for it.
        let mut relayed = genuine.clone();
        relayed.auth = RequestAuth::Macs(vec![MacTag([0; 16]); 4]);
        assert_eq!(verifier.verify_all(&[relayed.clone()], 1), Ok(()));
        // Once only: a second relay of it is checked, and its authenticator is broken.
        assert_eq!(verifier.verify_all(&[relayed], 1), Err(AuthError::BadMac));
        // An altered payload under the genuine authenticator is not the kept request.
        verifier.keep(&genuine.request);
        let mut altered = genuine.clone();
        altered.request.payload = Bytes::from_static(b"put x 2");
        assert_eq!(verifier.verify_all(&[altered], 1), Err(AuthError::BadMac));
        // A request never kept is checked, and passes with a good authenticator.
        let other = envelope(&macs, 2, b"put y 1");
        assert_eq!(verifier.verify_all(&[genuine, other], 1), Ok(()));
    }
}
