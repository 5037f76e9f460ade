//! Byzantine replicas: the honest core keeps running underneath, and its outgoing actions
//! are rewritten or withheld here ("replicas behaving arbitrarily"), one
//! [`Behaviour`] at a time. Every rewrite that actually happens is counted by name, so a run
//! reports which behaviours it exercised.
//!
//! A Byzantine replica holds its own identity key, so what it signs itself (its ACCEPTs, its
//! collects) it can re-sign after lying; other replicas' signatures it can only corrupt or
//! replay.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::{Bytes, BytesMut};
use tagma_core::transfer::LOG_RUN;
use tagma_crypto::IdentityKey;
use tagma_wire::{
    Accept, Batch, CheckpointInfo, ConsensusId, DecidedInstance, Decode, Digest, Encode,
    PeerMessage, Propose, Regency, ReplicaId, RequestEnvelope, Signature, Stop, Vote,
    accept_signing_bytes, collect_signing_bytes,
};

use crate::options::SimService;
use crate::rng::Rng;
use crate::scenario::{Behaviour, CLOCK_SKEW_MAX_MS};

/// Decided batches / instances a Byzantine replica remembers for replays.
const HISTORY_MAX: usize = 16;
/// Own past states remembered for [`Behaviour::LyingState`] (enough to offer one older than
/// the correct replicas' checkpoints, so that it gets picked as the source).
const OWN_STATES_MAX: usize = 256;
/// Sent messages remembered for [`Behaviour::Replay`].
const REPLAY_RING_MAX: usize = 64;
/// [`Behaviour::AnswerFlood`]: copies of each request sent to each peer per tick.
const FLOOD_BURST: usize = 8;

/// What [`Behaviour::AnswerFlood`] needs from the replica's honest core.
#[derive(Clone, Copy, Debug)]
pub struct FloodContext {
    /// The instance its core works on (announced so that peers there resend their votes).
    pub next: ConsensusId,
    /// The largest chunk a peer serves.
    pub chunk_bytes: u32,
}

/// One message as the Byzantine replica finally sends it.
#[derive(Clone, Debug)]
pub struct Out {
    pub to: ReplicaId,
    pub msg: PeerMessage,
    pub extra_delay_ms: u64,
    /// The receiver's MAC check fails: it drops and counts the message.
    pub bad_mac: bool,
}

/// Counts of behaviours that fired, by name.
pub type Exercised = BTreeMap<&'static str, u64>;

/// The Byzantine layer of one replica.
pub struct Byzantine {
    behaviours: BTreeSet<Behaviour>,
    key: IdentityKey,
    decided_batches: VecDeque<Batch>,
    decided_instances: VecDeque<DecidedInstance>,
    sent: VecDeque<(ReplicaId, PeerMessage)>,
    /// Highest regency this replica knows installed.
    regency: u32,
    /// Highest regency it spammed a STOP for.
    spam_regency: u32,
    /// [`Behaviour::LyingState`]: the wrong checkpoint it offers, and its bytes.
    state_lie: Option<(tagma_wire::CheckpointInfo, Bytes)>,
    /// [`Behaviour::LyingState`]: its own recent executor checkpoints, by instance.
    own_states: VecDeque<(u64, Bytes)>,
    /// [`Behaviour::AnswerFlood`]: the newest checkpoint each peer offered it.
    offered: BTreeMap<ReplicaId, CheckpointInfo>,
}

fn bump(exercised: &mut Exercised, b: Behaviour) {
    *exercised.entry(b.name()).or_default() += 1;
}

impl Byzantine {
    pub fn new(behaviours: &[Behaviour], key: IdentityKey) -> Self {
        Byzantine {
            behaviours: behaviours.iter().copied().collect(),
            key,
            decided_batches: VecDeque::new(),
            decided_instances: VecDeque::new(),
            sent: VecDeque::new(),
            regency: 0,
            spam_regency: 0,
            state_lie: None,
            own_states: VecDeque::new(),
            offered: BTreeMap::new(),
        }
    }

    /// [`Behaviour::LyingState`]: its executor's checkpoint after instance `cid`.
    pub fn remember_state(&mut self, cid: u64, state: Bytes) {
        push_bounded(&mut self.own_states, (cid, state), OWN_STATES_MAX);
    }

    /// The oldest remembered state at or after instance `cid`.
    pub fn state_at_or_after(&self, cid: u64) -> Option<(u64, Bytes)> {
        self.own_states.iter().find(|(c, _)| *c >= cid).cloned()
    }

    /// [`Behaviour::LyingState`]: the checkpoint to offer from now on.
    pub fn set_state_lie(&mut self, info: tagma_wire::CheckpointInfo, state: Bytes) {
        self.state_lie = Some((info, state));
    }

    /// A chunk of the lie, if `cid` names it and the range is inside it.
    pub fn state_lie_chunk(
        &self,
        cid: tagma_wire::ConsensusId,
        offset: u64,
        len: u32,
    ) -> Option<Bytes> {
        let (info, state) = self.state_lie.as_ref()?;
        let end = offset.checked_add(u64::from(len))?;
        (info.cid == cid && end <= info.len).then(|| state.slice(offset as usize..end as usize))
    }

    pub fn has(&self, b: Behaviour) -> bool {
        self.behaviours.contains(&b)
    }

    /// Whether this replica needs periodic [`Byzantine::tick`]s.
    pub fn wants_ticks(&self) -> bool {
        self.has(Behaviour::StopSpam)
            || self.has(Behaviour::Replay)
            || self.has(Behaviour::AnswerFlood)
    }

    /// A peer offered it a checkpoint (chunk requests for it cost that peer reads).
    pub fn note_offer(&mut self, from: ReplicaId, checkpoint: Option<CheckpointInfo>) {
        if let Some(c) = checkpoint {
            self.offered.insert(from, c);
        }
    }

    pub fn on_regency(&mut self, regency: Regency) {
        self.regency = self.regency.max(regency.0);
    }

    /// The honest core decided `batch` (remembered to re-propose its requests later).
    pub fn on_decided(&mut self, batch: &Batch) {
        push_bounded(&mut self.decided_batches, batch.clone(), HISTORY_MAX);
    }

    /// A message the replica received (decision proofs are remembered for stale replays).
    pub fn on_received(&mut self, msg: &PeerMessage) {
        let decided = match msg {
            PeerMessage::Decision(d) => Some(d),
            PeerMessage::StopData(s) => s.last_decided.as_ref(),
            PeerMessage::Sync(s) => s.last_decided.as_ref(),
            _ => None,
        };
        if let Some(d) = decided
            && !self.decided_instances.iter().any(|x| x.cid == d.cid)
        {
            push_bounded(&mut self.decided_instances, d.clone(), HISTORY_MAX);
        }
    }

    /// Rewrites one outgoing message addressed to `dests`.
    pub fn rewrite(
        &mut self,
        rng: &mut Rng,
        exercised: &mut Exercised,
        dests: &[ReplicaId],
        msg: PeerMessage,
    ) -> Vec<Out> {
        if self.has(Behaviour::Silent) {
            bump(exercised, Behaviour::Silent);
            return Vec::new();
        }
        self.on_received(&msg);
        let variants = self.mutate(rng, exercised, dests, msg);
        let mut out = Vec::new();
        for (to, msg) in variants {
            let bad_mac = self.has(Behaviour::BadMac) && rng.chance(0.25);
            if bad_mac {
                bump(exercised, Behaviour::BadMac);
            }
            let extra_delay_ms = if self.has(Behaviour::Slow) {
                bump(exercised, Behaviour::Slow);
                rng.range(150, 1_200)
            } else {
                0
            };
            if self.has(Behaviour::Replay) {
                push_bounded(&mut self.sent, (to, msg.clone()), REPLAY_RING_MAX);
            }
            out.push(Out {
                to,
                msg,
                extra_delay_ms,
                bad_mac,
            });
        }
        out
    }

    /// Periodic misbehaviour that is not a rewrite: STOP spam, replays and answer floods.
    pub fn tick(
        &mut self,
        rng: &mut Rng,
        exercised: &mut Exercised,
        peers: &[ReplicaId],
        flood: FloodContext,
    ) -> Vec<Out> {
        let mut out = Vec::new();
        if self.has(Behaviour::AnswerFlood) && !peers.is_empty() {
            bump(exercised, Behaviour::AnswerFlood);
            for &to in peers {
                for msg in self.flood_requests(to, flood) {
                    out.extend((0..FLOOD_BURST).map(|_| Out {
                        to,
                        msg: msg.clone(),
                        extra_delay_ms: 0,
                        bad_mac: false,
                    }));
                }
            }
        }
        if self.has(Behaviour::StopSpam) && rng.chance(0.7) {
            bump(exercised, Behaviour::StopSpam);
            self.spam_regency = self.spam_regency.max(self.regency) + 1;
            let stop = Stop {
                regency: Regency(self.spam_regency),
                requests: Vec::new(),
            };
            out.extend(peers.iter().map(|&to| Out {
                to,
                msg: PeerMessage::Stop(stop.clone()),
                extra_delay_ms: 0,
                bad_mac: false,
            }));
        }
        if self.has(Behaviour::Replay) && !self.sent.is_empty() && !peers.is_empty() {
            bump(exercised, Behaviour::Replay);
            for _ in 0..rng.range(1, 4) {
                let (orig_to, msg) = self.sent[rng.index(self.sent.len())].clone();
                let to = if rng.chance(0.5) {
                    orig_to
                } else {
                    peers[rng.index(peers.len())]
                };
                out.push(Out {
                    to,
                    msg,
                    extra_delay_ms: 0,
                    bad_mac: false,
                });
            }
        }
        out
    }

    /// [`Behaviour::AnswerFlood`]: the requests sent to `to`, each of which costs it an
    /// answer: a position query, an announcement at this replica's instance (a peer there
    /// resends its PROPOSE, WRITE and ACCEPT), a decision request and a log request for the
    /// oldest decisions (a run of 64 each), a state query, and a chunk request for the
    /// checkpoint `to` offered last.
    fn flood_requests(&self, to: ReplicaId, flood: FloodContext) -> Vec<PeerMessage> {
        let next = flood.next;
        let mut msgs = vec![
            PeerMessage::Position { next, reply: false },
            PeerMessage::Position { next, reply: true },
            PeerMessage::DecisionRequest {
                cid: ConsensusId(0),
            },
            PeerMessage::LogRequest {
                from: ConsensusId(0),
                count: LOG_RUN,
            },
            PeerMessage::StateQuery { next },
        ];
        if let Some(c) = self.offered.get(&to).filter(|c| c.len > 0) {
            msgs.push(PeerMessage::ChunkRequest {
                cid: c.cid,
                offset: 0,
                len: c.len.min(u64::from(flood.chunk_bytes)) as u32,
            });
        }
        msgs
    }

    /// The reply this replica sends a client instead of `payload` (`None`: withheld).
    pub fn rewrite_reply(
        &self,
        rng: &mut Rng,
        exercised: &mut Exercised,
        service: SimService,
        payload: Bytes,
    ) -> Option<Bytes> {
        if self.has(Behaviour::Silent) {
            bump(exercised, Behaviour::Silent);
            return None;
        }
        if self.has(Behaviour::WrongReply) && rng.chance(0.5) {
            bump(exercised, Behaviour::WrongReply);
            return Some(match service {
                SimService::Kv => crate::kv_client::made_up_reply(rng),
                SimService::Space => crate::space_client::made_up_reply(rng),
            });
        }
        Some(payload)
    }

    /// The message-specific lies; returns (receiver, message) pairs.
    fn mutate(
        &mut self,
        rng: &mut Rng,
        exercised: &mut Exercised,
        dests: &[ReplicaId],
        msg: PeerMessage,
    ) -> Vec<(ReplicaId, PeerMessage)> {
        let all = |m: PeerMessage| dests.iter().map(|&d| (d, m.clone())).collect::<Vec<_>>();
        match msg {
            PeerMessage::StateOffer { checkpoint, next } if self.has(Behaviour::LyingState) => {
                bump(exercised, Behaviour::LyingState);
                let checkpoint = self
                    .state_lie
                    .as_ref()
                    .map_or(checkpoint, |(info, _)| Some(*info));
                // And a state vote for a state nobody holds, at the instance a peer restarted
                // beside it votes on (at most f such votes: never a verdict). Its own core
                // never votes (a Byzantine replica keeps no disk, so it never runs the vote).
                let vote = next.0.checked_sub(1).map(|cid| PeerMessage::StateVote {
                    cid: tagma_wire::ConsensusId(cid),
                    digest: tagma_wire::Digest([0x1e; 32]),
                });
                vote.into_iter()
                    .chain([PeerMessage::StateOffer { checkpoint, next }])
                    .flat_map(all)
                    .collect()
            }
            PeerMessage::Propose(p)
                if self.has(Behaviour::Equivocate) && dests.len() >= 2 && rng.chance(0.7) =>
            {
                let Some(alt) = equivocal_batch(rng, &p.batch) else {
                    return all(PeerMessage::Propose(p));
                };
                bump(exercised, Behaviour::Equivocate);
                let mut shuffled = dests.to_vec();
                rng.shuffle(&mut shuffled);
                let half = shuffled.len() / 2;
                let alt = PeerMessage::Propose(Propose {
                    batch: alt,
                    ..p.clone()
                });
                let orig = PeerMessage::Propose(p);
                shuffled
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| (d, if i < half { alt.clone() } else { orig.clone() }))
                    .collect()
            }
            PeerMessage::Propose(p) if self.has(Behaviour::SkewedClock) => {
                let Some(batch) = skewed_batch(p.cid.0, &p.batch) else {
                    return all(PeerMessage::Propose(p));
                };
                bump(exercised, Behaviour::SkewedClock);
                all(PeerMessage::Propose(Propose { batch, ..p }))
            }
            PeerMessage::Propose(p) if self.has(Behaviour::InvalidPropose) && rng.chance(0.5) => {
                bump(exercised, Behaviour::InvalidPropose);
                let batch = self.invalid_batch(rng, &p.batch);
                all(PeerMessage::Propose(Propose { batch, ..p }))
            }
            PeerMessage::Write(v) if self.has(Behaviour::WrongHash) && rng.chance(0.5) => {
                bump(exercised, Behaviour::WrongHash);
                let lie = PeerMessage::Write(Vote {
                    hash: random_digest(rng),
                    ..v
                });
                split_some(rng, dests, lie, PeerMessage::Write(v))
            }
            PeerMessage::Accept(a) if self.has(Behaviour::WrongHash) && rng.chance(0.5) => {
                bump(exercised, Behaviour::WrongHash);
                let vote = Vote {
                    hash: random_digest(rng),
                    ..a.vote
                };
                // Half the time properly re-signed (a replica can sign any lie of its own).
                let signature = if rng.chance(0.5) {
                    self.key.sign(&accept_signing_bytes(&vote))
                } else {
                    a.signature
                };
                let lie = PeerMessage::Accept(Accept { vote, signature });
                split_some(rng, dests, lie, PeerMessage::Accept(a))
            }
            PeerMessage::StopData(mut sd)
                if self.has(Behaviour::ForgedProof) && rng.chance(0.7) =>
            {
                bump(exercised, Behaviour::ForgedProof);
                match rng.below(4) {
                    0 if sd.last_decided.is_some() => {
                        if let Some(d) = sd.last_decided.as_mut() {
                            corrupt_proof(rng, d);
                        }
                    }
                    1 if !self.decided_instances.is_empty() => {
                        sd.last_decided = Some(
                            self.decided_instances[rng.index(self.decided_instances.len())].clone(),
                        );
                    }
                    2 => {
                        // A lying collect, properly signed with its own key.
                        let epoch =
                            tagma_wire::Epoch(rng.below(u64::from(self.regency) + 1) as u32);
                        sd.collect.collect.write_quorum = Some((epoch, random_digest(rng)));
                        sd.collect.signature =
                            self.key.sign(&collect_signing_bytes(&sd.collect.collect));
                    }
                    _ => flip_signature(rng, &mut sd.collect.signature),
                }
                all(PeerMessage::StopData(sd))
            }
            PeerMessage::Sync(mut sync) if self.has(Behaviour::ForgedProof) && rng.chance(0.7) => {
                bump(exercised, Behaviour::ForgedProof);
                match rng.below(4) {
                    0 if !sync.collects.is_empty() => {
                        let i = rng.index(sync.collects.len());
                        flip_signature(rng, &mut sync.collects[i].signature);
                    }
                    1 if !self.decided_instances.is_empty() => {
                        sync.last_decided = Some(
                            self.decided_instances[rng.index(self.decided_instances.len())].clone(),
                        );
                    }
                    2 if sync.collects.len() > 1 => sync.collects.truncate(1),
                    _ => {
                        if let Some(d) = sync.last_decided.as_mut() {
                            corrupt_proof(rng, d);
                        } else if !sync.proposal.is_empty() {
                            sync.proposal = self.invalid_batch(rng, &sync.proposal);
                        }
                    }
                }
                all(PeerMessage::Sync(sync))
            }
            other => all(other),
        }
    }

    /// A batch a correct replica must refuse: with an already-decided request, an
    /// unauthentic (altered) request, an empty request list, or bytes that do not decode.
    fn invalid_batch(&self, rng: &mut Rng, bytes: &Bytes) -> Bytes {
        let Ok(mut batch) = Batch::decode(bytes) else {
            return Bytes::from_static(b"\x01garbage");
        };
        match rng.below(4) {
            0 if !self.decided_batches.is_empty() => {
                let old = &self.decided_batches[rng.index(self.decided_batches.len())];
                if let Some(r) = old.requests.first() {
                    batch.requests.insert(0, r.clone());
                }
                batch.to_bytes()
            }
            1 if !batch.requests.is_empty() => {
                let r: &mut RequestEnvelope = &mut batch.requests[0];
                let mut payload = BytesMut::from(&r.request.payload[..]);
                payload.extend_from_slice(b"!");
                r.request.payload = payload.freeze();
                batch.to_bytes()
            }
            2 => {
                batch.requests.clear();
                batch.to_bytes()
            }
            _ => bytes.slice(..bytes.len() / 2),
        }
    }
}

/// [`Behaviour::SkewedClock`]: the batch of instance `cid` timestamped ahead: even instances
/// beyond the followers' clock-skew bound, odd ones within it (the same batch for every
/// receiver). `None` if the batch does not decode.
fn skewed_batch(cid: u64, bytes: &Bytes) -> Option<Bytes> {
    let mut batch = Batch::decode(bytes).ok()?;
    let spread = cid.wrapping_mul(7919) % 1_000;
    let ahead = if cid.is_multiple_of(2) {
        CLOCK_SKEW_MAX_MS + 1_000 + spread * 50
    } else {
        1 + spread * (CLOCK_SKEW_MAX_MS / 2) / 1_000
    };
    batch.timestamp_ms = batch.timestamp_ms.saturating_add(ahead);
    Some(batch.to_bytes())
}

/// A different but valid-looking batch for the same slot: requests reordered or truncated,
/// or another seed.
fn equivocal_batch(rng: &mut Rng, bytes: &Bytes) -> Option<Bytes> {
    let mut batch = Batch::decode(bytes).ok()?;
    if batch.requests.len() >= 2 && rng.chance(0.7) {
        if rng.chance(0.5) {
            batch.requests.reverse();
        } else {
            batch.requests.truncate(1);
        }
    } else {
        batch.seed ^= 1 + rng.below(1 << 20);
    }
    Some(batch.to_bytes())
}

/// `lie` to a random non-empty subset of `dests`, `honest` to the rest.
fn split_some(
    rng: &mut Rng,
    dests: &[ReplicaId],
    lie: PeerMessage,
    honest: PeerMessage,
) -> Vec<(ReplicaId, PeerMessage)> {
    let liar_all = rng.chance(0.5);
    dests
        .iter()
        .map(|&d| {
            let m = if liar_all || rng.chance(0.5) {
                lie.clone()
            } else {
                honest.clone()
            };
            (d, m)
        })
        .collect()
}

fn random_digest(rng: &mut Rng) -> Digest {
    Digest(rng.bytes32())
}

fn flip_signature(rng: &mut Rng, sig: &mut Signature) {
    let i = rng.index(Signature::LEN);
    sig.0[i] ^= 1 << rng.below(8);
}

fn corrupt_proof(rng: &mut Rng, d: &mut DecidedInstance) {
    if d.proof.accepts.is_empty() {
        return;
    }
    let i = rng.index(d.proof.accepts.len());
    flip_signature(rng, &mut d.proof.accepts[i].1);
}

fn push_bounded<T>(q: &mut VecDeque<T>, item: T, max: usize) {
    if q.len() == max {
        q.pop_front();
    }
    q.push_back(item);
}
