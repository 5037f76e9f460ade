//! Who this replica talks to, as views change: the replicas it knows (for the
//! handshake), the outbound links to them, the installed view (answered to joining replicas),
//! and the joining side's discovery of the view that added it.
//!
//! The configuration lists the initial members; every installed view adds its members'
//! keys. Keys are never forgotten: a removed replica still serves lagging peers for a while
//! (`NodeHandle::run_until_left`), and the installed view alone decides who takes part.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, PoisonError, RwLock},
    time::{Duration, Instant},
};

use bytes::Bytes;
use crossbeam_channel::Sender;
use tagma_core::ValidConfig;
use tagma_crypto::IdentityKey;
use tagma_net::{KeyDirectory, LocalIdentity, NetLimits};
use tagma_wire::{
    Decode, Encode, PeerMessage, PublicKey, ReplicaId, Role, View, ViewChange, ViewMember,
};
use tracing::{debug, info};

use crate::NodeError;

/// The replicas known to this node and the installed view.
pub(crate) struct Roster {
    view: View,
    keys: HashMap<ReplicaId, PublicKey>,
    /// The administrator's signed changes since the configured view, as executed.
    history: Vec<ViewChange>,
}

impl Roster {
    pub(crate) fn new(cfg: &ValidConfig, view: &View) -> Self {
        let mut roster = Roster {
            view: view.clone(),
            keys: cfg.replicas.iter().map(|r| (r.id, r.public_key)).collect(),
            history: Vec::new(),
        };
        roster.install(view);
        roster
    }

    /// `view` is installed: its members' keys become known.
    pub(crate) fn install(&mut self, view: &View) {
        for m in &view.members {
            self.keys.insert(m.id, m.key);
        }
        self.view = view.clone();
    }

    pub(crate) fn view(&self) -> &View {
        &self.view
    }

    pub(crate) fn history(&self) -> &[ViewChange] {
        &self.history
    }

    pub(crate) fn set_history(&mut self, history: Vec<ViewChange>) {
        self.history = history;
    }
}

pub(crate) type SharedRoster = Arc<RwLock<Roster>>;

/// Who may connect: replicas of any installed view (and the configured ones), and the
/// configured clients.
pub(crate) struct Directory<'a> {
    pub cfg: &'a ValidConfig,
    pub roster: &'a RwLock<Roster>,
}

impl KeyDirectory for Directory<'_> {
    fn lookup(&self, role: &Role) -> Option<PublicKey> {
        match role {
            Role::Replica(id) => self
                .roster
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .keys
                .get(id)
                .copied(),
            Role::Client(p) => self.cfg.client_key(*p),
        }
    }
}

/// The outbound queues to peers (one writer thread each), shared by the consensus, storage
/// and transfer threads; a view that adds members adds links.
#[derive(Clone, Default)]
pub(crate) struct PeerLinks(Arc<RwLock<HashMap<ReplicaId, Sender<Bytes>>>>);

impl PeerLinks {
    pub(crate) fn get(&self, to: ReplicaId) -> Option<Sender<Bytes>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&to)
            .cloned()
    }

    /// Calls `f` with every link (under the read lock: no allocation on the broadcast path).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Sender<Bytes>)) {
        for tx in self
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            f(tx);
        }
    }

    pub(crate) fn contains(&self, id: ReplicaId) -> bool {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&id)
    }

    pub(crate) fn insert(&self, id: ReplicaId, tx: Sender<Bytes>) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
    }
}

/// A member's address, parsed (views carry addresses as text).
pub(crate) fn member_addr(m: &ViewMember) -> Option<SocketAddr> {
    m.addr.parse().ok()
}

/// Asks replica `id` (key `key`, at `addr`) for the administrator's signed history of view
/// changes over a connection of our own. `None` if it cannot be reached, refuses us (it has
/// not installed a view that includes us), or does not answer within `timeout`.
fn ask_view(
    me: ReplicaId,
    identity: &Arc<IdentityKey>,
    (id, addr, key): (ReplicaId, SocketAddr, PublicKey),
    limits: NetLimits,
    timeout: Duration,
) -> Option<Vec<ViewChange>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let identity = identity.clone();
    // The answer is read on a thread of its own: a member that accepts and then says
    // nothing must not hold the joining replica up.
    std::thread::Builder::new()
        .name("view-query".into())
        .spawn(move || {
            let local = LocalIdentity {
                role: Role::Replica(me),
                key: &identity,
            };
            let answer = (|| {
                let (mut reader, mut writer) =
                    tagma_net::connect(addr, &local, Role::Replica(id), &key, limits, timeout)
                        .map_err(|e| e.to_string())?;
                writer
                    .push(&PeerMessage::ViewQuery.to_bytes())
                    .and_then(|()| writer.flush())
                    .map_err(|e| e.to_string())?;
                let frame = reader.read_frame().map_err(|e| e.to_string())?;
                writer.shutdown();
                match PeerMessage::decode(&frame) {
                    Ok(PeerMessage::ViewInfo(history)) => Ok(history),
                    Ok(_) => Err("answered something else".to_string()),
                    Err(e) => Err(e.to_string()),
                }
            })();
            let _ = tx.send(answer);
        })
        .ok()?;
    match rx.recv_timeout(timeout) {
        Ok(Ok(history)) => Some(history),
        Ok(Err(e)) => {
            debug!(replica = id.0, %addr, "no view from replica {id}: {e}");
            None
        }
        Err(_) => None,
    }
}

/// The joining side: finds the installed view that includes replica `me`, starting from
/// `contact`, the address of a replica of the configuration. Members accept `me`'s
/// connection only once they installed a view with its key, so this waits (up to `wait`)
/// for the administrator's `tagma view add` to be ordered. Members answer with the
/// administrator's signed history of view changes, which is replayed here from the
/// configured view ([`tagma_core::view::replay`]): a faulty member can only send a shorter
/// (older) history, never a view the administrator did not sign. Once a view includes `me`,
/// its other members are asked too, and the newest verified view is taken.
pub fn discover_view(
    cfg: &ValidConfig,
    me: ReplicaId,
    key: &IdentityKey,
    contact: SocketAddr,
    wait: Duration,
) -> Result<View, NodeError> {
    let first = cfg
        .replicas
        .iter()
        .find(|r| r.addr == contact)
        .ok_or(NodeError::UnknownContact(contact))?;
    let admin = cfg.admin.ok_or(NodeError::JoinNeedsAdmin)?;
    let limits = NetLimits {
        frame_bytes_max: cfg.raw.limits.frame_bytes_max,
        handshake_timeout: Duration::from_millis(cfg.raw.timeouts.handshake_timeout_ms),
    };
    let timeout = Duration::from_millis(cfg.raw.timeouts.connect_timeout_ms.max(500));
    let identity = Arc::new(key.clone());
    let initial = cfg.initial_view();
    let verified = |history: Vec<ViewChange>| {
        tagma_core::view::replay(&initial, &admin, cfg.mode, &history)
            .map_err(|e| debug!("a view history that does not replay: {e}"))
            .ok()
    };
    let deadline = Instant::now() + wait;
    let mut announced = false;
    loop {
        if let Some(candidate) = ask_view(
            me,
            &identity,
            (first.id, first.addr, first.public_key),
            limits,
            timeout,
        )
        .and_then(verified)
            && candidate.members.iter().any(|m| m.id == me)
        {
            // A newer view may be known to the other members.
            let mut best = candidate.clone();
            for m in candidate
                .members
                .iter()
                .filter(|m| m.id != me && m.id != first.id)
            {
                if let Some(addr) = member_addr(m)
                    && let Some(view) =
                        ask_view(me, &identity, (m.id, addr, m.key), limits, timeout)
                            .and_then(verified)
                    && view.id > best.id
                    && view.members.iter().any(|m| m.id == me)
                {
                    best = view;
                }
            }
            info!(
                view = best.id.0,
                n = best.members.len(),
                f = best.f,
                "joining: found the view that includes this replica (the administrator's signed history)"
            );
            return Ok(best);
        }
        if !announced {
            info!(%contact, "joining: waiting for a view that includes replica {me} (run `tagma view add` for it)");
            announced = true;
        }
        if Instant::now() >= deadline {
            return Err(NodeError::NotAdded {
                me,
                waited_s: wait.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
