//! The links between host processes: each process listens for its peers and keeps one
//! outgoing connection to each peer it sends to, both authenticated by `tagma-net`'s
//! handshake (each process proves its Ed25519 key; frames carry MACs). A frame is
//! `to node (u32 LE) | from node (u32 LE) | message`. Reader threads hand frames to the
//! host's loop through a bounded channel; the loop writes frames itself, connecting on
//! first use and dropping a connection that fails (the nodes' reliable channel retransmits).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use crossbeam_channel::Sender;
use tagma_crypto::IdentityKey;
use tagma_net::{FrameWriter, KeyDirectory, LocalIdentity, NetLimits};
use tagma_vcube::NodeId;
use tagma_wire::{PublicKey, ReplicaId, Role};

use crate::error::HostError;

/// A frame from a peer process, for one of this process's nodes.
pub struct Inbound {
    pub to: NodeId,
    pub from: NodeId,
    pub message: Bytes,
}

/// The processes' public keys, by process index.
pub struct Directory(pub Vec<PublicKey>);

impl KeyDirectory for Directory {
    fn lookup(&self, role: &Role) -> Option<PublicKey> {
        match role {
            Role::Replica(ReplicaId(p)) => self.0.get(*p as usize).copied(),
            Role::Client(_) => None,
        }
    }
}

fn limits() -> NetLimits {
    NetLimits {
        frame_bytes_max: 1 << 20,
        handshake_timeout: Duration::from_secs(5),
    }
}

/// Listens on `addr`; every authenticated peer's frames go to `inbound`.
pub fn listen(
    addr: SocketAddr,
    me: usize,
    key: Arc<IdentityKey>,
    directory: Arc<Directory>,
    inbound: Sender<Inbound>,
) -> Result<(), HostError> {
    let listener = TcpListener::bind(addr).map_err(|e| HostError::Listen {
        addr: addr.to_string(),
        error: e.to_string(),
    })?;
    std::thread::Builder::new()
        .name("vcube-accept".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let (key, directory, inbound) = (key.clone(), directory.clone(), inbound.clone());
                let _ = std::thread::Builder::new()
                    .name("vcube-read".into())
                    .spawn(move || {
                        let identity = LocalIdentity {
                            role: Role::Replica(ReplicaId(me as u32)),
                            key: &key,
                        };
                        let Ok((_, mut reader, _writer)) =
                            tagma_net::accept(stream, &identity, directory.as_ref(), limits())
                        else {
                            return;
                        };
                        while let Ok(frame) = reader.read_frame() {
                            if frame.len() < 8 {
                                continue;
                            }
                            let word = |at: usize| {
                                u32::from_le_bytes(frame[at..at + 4].try_into().expect("4 bytes"))
                            };
                            let to = NodeId(word(0));
                            let from = NodeId(word(4));
                            let message = frame.slice(8..);
                            if inbound.send(Inbound { to, from, message }).is_err() {
                                return;
                            }
                        }
                    });
            }
        })
        .map_err(|e| HostError::Listen {
            addr: addr.to_string(),
            error: e.to_string(),
        })?;
    Ok(())
}

/// This process's outgoing connections.
pub struct Links {
    me: usize,
    key: Arc<IdentityKey>,
    addrs: Vec<SocketAddr>,
    keys: Vec<PublicKey>,
    writers: BTreeMap<usize, FrameWriter>,
    pub bytes_sent: u64,
    pub frames_sent: u64,
    pub frames_dropped: u64,
}

impl Links {
    pub fn new(
        me: usize,
        key: Arc<IdentityKey>,
        addrs: Vec<SocketAddr>,
        keys: Vec<PublicKey>,
    ) -> Links {
        Links {
            me,
            key,
            addrs,
            keys,
            writers: BTreeMap::new(),
            bytes_sent: 0,
            frames_sent: 0,
            frames_dropped: 0,
        }
    }

    /// Queues a frame to a node of process `host` (connecting first if needed).
    pub fn push(&mut self, host: usize, to: NodeId, from: NodeId, message: &[u8]) {
        if !self.writers.contains_key(&host) {
            let identity = LocalIdentity {
                role: Role::Replica(ReplicaId(self.me as u32)),
                key: &self.key,
            };
            let expected = Role::Replica(ReplicaId(host as u32));
            match tagma_net::connect(
                self.addrs[host],
                &identity,
                expected,
                &self.keys[host],
                limits(),
                Duration::from_millis(500),
            ) {
                Ok((_reader, writer)) => {
                    self.writers.insert(host, writer);
                }
                Err(e) => {
                    tracing::debug!(host, error = %e, "cannot connect; the frame is dropped");
                    self.frames_dropped += 1;
                    return;
                }
            }
        }
        let mut frame = Vec::with_capacity(8 + message.len());
        frame.extend_from_slice(&to.0.to_le_bytes());
        frame.extend_from_slice(&from.0.to_le_bytes());
        frame.extend_from_slice(message);
        let writer = self.writers.get_mut(&host).expect("connected above");
        if writer.push(&frame).is_err() {
            self.writers.remove(&host);
            self.frames_dropped += 1;
            return;
        }
        self.bytes_sent += message.len() as u64;
        self.frames_sent += 1;
    }

    /// Writes every queued frame; a connection that fails is dropped.
    pub fn flush(&mut self) {
        let failed: Vec<usize> = (self.writers.iter_mut())
            .filter_map(|(host, w)| w.flush().is_err().then_some(*host))
            .collect();
        for host in failed {
            self.writers.remove(&host);
        }
    }
}
