//! Simulated clients: closed-loop, one request outstanding, each request sent to every
//! replica, replies voted with [`tagma_client::Voter`], retransmission on timeout (a reply the
//! service defers is waited for the same way), unordered reads that fall back to ordered ones.
//! What a client asks comes from the run's workload: the key-value one
//! ([`crate::kv_client`]) or the coordination service's ([`crate::space_client`]). Faulty
//! clients misbehave on the first send of each request.

use std::fmt;

use bytes::Bytes;
use tagma_client::Voter;
use tagma_kv::KvOp;
use tagma_wire::{ClientId, RequestSeq};

use crate::kv_client::KvWorkload;
use crate::scenario::ClientFault;
use crate::space_client::{SpaceCall, SpaceWorkload};

/// Resend an ordered request to every replica after this long without a reply quorum.
pub const RETRANSMIT_MS: u64 = 600;
/// Give up on an unordered read (and order it) after this long.
pub const UNORDERED_TIMEOUT_MS: u64 = 300;
/// Pause between two operations of a client.
pub const THINK_MS_MAX: u64 = 30;

/// Which attempt of the current operation is in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    Ordered(RequestSeq),
    Unordered(RequestSeq),
}

/// One operation of a workload.
#[derive(Clone)]
pub enum Call {
    Kv(KvOp),
    Space(SpaceCall),
}

impl fmt::Debug for Call {
    /// The operation itself, as the trace shows it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Kv(op) => op.fmt(f),
            Call::Space(call) => call.fmt(f),
        }
    }
}

impl Call {
    /// The request's payload.
    pub fn encode(&self) -> Bytes {
        match self {
            Call::Kv(op) => op.encode(),
            Call::Space(call) => call.payload.clone(),
        }
    }
}

/// The operation a client is waiting for.
#[derive(Debug)]
pub struct Outstanding {
    pub call: Call,
    /// (key, index in that key's history): key-value operations of correct clients only.
    pub history: Option<(Bytes, usize)>,
    pub attempt: Attempt,
    pub voter: Voter,
    pub started_ms: u64,
}

/// What a client works on.
#[derive(Debug)]
pub enum Workload {
    Kv(KvWorkload),
    Space(SpaceWorkload),
}

#[derive(Debug)]
pub struct SimClient {
    pub id: ClientId,
    pub index: usize,
    pub fault: Option<ClientFault>,
    pub workload: Workload,
    /// Last ordered / unordered sequence number used.
    pub last_seq: u64,
    pub last_useq: u64,
    pub out: Option<Outstanding>,
    /// Timer generation: a wake-up with an older token is stale.
    pub token: u64,
    /// In the liveness phase: operations still to complete (`None` before it).
    pub liveness_left: Option<u64>,
    pub completed: u64,
}

/// The client id of simulated client `index`.
pub fn client_id(index: usize) -> ClientId {
    ClientId::new(100 + index as u32, 1)
}

impl SimClient {
    pub fn new(index: usize, fault: Option<ClientFault>, workload: Workload) -> Self {
        SimClient {
            id: client_id(index),
            index,
            fault,
            workload,
            last_seq: 0,
            last_useq: 0,
            out: None,
            token: 0,
            liveness_left: None,
            completed: 0,
        }
    }

    pub fn is_correct(&self) -> bool {
        self.fault.is_none()
    }
}
