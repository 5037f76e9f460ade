//! The canonical text form of what a replica does in a scenario: one line per action, peer
//! messages in the protocol's vocabulary, batches and hashes by name.

use bytes::Bytes;
use tagma_core::Action;
use tagma_wire::{
    Batch, Collect, Decode, Digest, Encode, PeerMessage, RequestEnvelope, RequestKind, View, Vote,
};

use super::Scenario;

impl Scenario {
    /// The replica's queued actions, one line each.
    pub(super) fn actions(&mut self) -> Vec<String> {
        let mut actions = Vec::new();
        if let Some(replica) = self.replica.as_mut() {
            while let Some(a) = replica.poll_action() {
                actions.push(a);
            }
        }
        let lines: Vec<String> = actions.iter().map(|a| self.action(a)).collect();
        if lines.is_empty() {
            vec!["(no actions)".into()]
        } else {
            lines
        }
    }

    fn action(&mut self, action: &Action) -> String {
        match action {
            Action::Broadcast(m) => format!("Broadcast {}", self.message(m)),
            Action::Send { to, msg } => format!("Send to={} {}", to.0, self.message(msg)),
            Action::Deliver(d) => {
                let batch = self.batch_named(&d.batch.to_bytes());
                format!(
                    "Deliver cid={} epoch={} batch={batch} proof={}",
                    d.cid.0,
                    d.epoch.0,
                    d.logged.proof.accepts.len()
                )
            }
            Action::ViewInstalled { cid, view, member } => {
                format!(
                    "ViewInstalled cid={} {} member={member}",
                    cid.0,
                    show_view(view)
                )
            }
            Action::ResendReply { client, seq } => {
                format!("ResendReply client={} seq={}", client.0, seq.0)
            }
            Action::SendCurrentView { client, view } => {
                format!("SendCurrentView client={} {}", client.0, show_view(view))
            }
            Action::RegencyInstalled { regency, leader } => {
                format!("RegencyInstalled regency={} leader={}", regency.0, leader.0)
            }
            Action::StateTransferNeeded {
                next_cid,
                known_decided,
            } => format!(
                "StateTransferNeeded next_cid={} known_decided={}",
                next_cid.0, known_decided.0
            ),
            Action::PersistVote { seq, votes } => {
                format!("PersistVote seq={seq} {}", self.collect(votes))
            }
            Action::WriteVotes { flush, next } => {
                format!("WriteVotes flush={flush} next={}", next.0)
            }
            Action::AwaitLogDurable { cid } => format!("AwaitLogDurable cid={}", cid.0),
            Action::DigestState { cid } => format!("DigestState cid={}", cid.0),
            Action::CheckpointNow { cid } => format!("CheckpointNow cid={}", cid.0),
            other => format!("{other:?}"),
        }
    }

    fn message(&mut self, m: &PeerMessage) -> String {
        match m {
            PeerMessage::Propose(p) => format!(
                "PROPOSE cid={} epoch={} batch={}",
                p.cid.0,
                p.epoch.0,
                self.batch_named(&p.batch)
            ),
            PeerMessage::Write(v) => format!("WRITE {}", self.vote(v)),
            PeerMessage::Accept(a) => format!("ACCEPT {}", self.vote(&a.vote)),
            PeerMessage::Forward(e) => format!("FORWARD request={}", request_id(e)),
            PeerMessage::Stop(s) => format!(
                "STOP regency={} requests=[{}]",
                s.regency.0,
                s.requests
                    .iter()
                    .map(request_id)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            PeerMessage::StopData(d) => format!(
                "STOPDATA regency={} last_decided={} collect=({})",
                d.regency.0,
                d.last_decided
                    .as_ref()
                    .map_or("-".to_string(), |d| d.cid.0.to_string()),
                self.collect(&d.collect.collect)
            ),
            PeerMessage::DecisionRequest { cid } => format!("DECISION-REQUEST cid={}", cid.0),
            PeerMessage::Position { next, reply } => {
                format!("POSITION next={} reply={reply}", next.0)
            }
            other => format!("{other:?}"),
        }
    }

    fn vote(&self, v: &Vote) -> String {
        format!(
            "cid={} epoch={} hash={}",
            v.cid.0,
            v.epoch.0,
            self.hash(&v.hash)
        )
    }

    fn collect(&self, c: &Collect) -> String {
        let quorum = c.write_quorum.map_or("-".to_string(), |(e, h)| {
            format!("{}:{}", e.0, self.hash(&h))
        });
        let writes: Vec<String> = c
            .write_set
            .iter()
            .map(|(e, v)| format!("{}:{}", e.0, self.hash(&tagma_crypto::digest(v))))
            .collect();
        format!(
            "cid={} regency={} write_quorum={quorum} writes=[{}]",
            c.cid.0,
            c.regency.0,
            writes.join(",")
        )
    }

    fn hash(&self, h: &Digest) -> String {
        self.names
            .get(h)
            .cloned()
            .unwrap_or_else(|| format!("#{}", hex::encode(&h.0[..4])))
    }

    /// The name of the batch `bytes`; a batch not named yet gets the next `P…` name, printed
    /// with its content.
    fn batch_named(&mut self, bytes: &Bytes) -> String {
        let hash = tagma_crypto::digest(bytes);
        if let Some(name) = self.names.get(&hash) {
            return name.clone();
        }
        let Ok(batch) = Batch::decode(bytes) else {
            return format!("#{} (undecodable)", hex::encode(&hash.0[..4]));
        };
        self.proposals_named += 1;
        let name = format!("P{}", self.proposals_named);
        self.name_batch(name.clone(), bytes.clone())
            .expect("a new name for a new batch");
        let requests: Vec<String> = batch.requests.iter().map(request_id).collect();
        format!(
            "{name} (ts={} seed={:#x} requests={})",
            batch.timestamp_ms,
            batch.seed,
            requests.join(",")
        )
    }
}

fn request_id(e: &RequestEnvelope) -> String {
    let kind = match e.request.kind {
        RequestKind::Ordered => "",
        RequestKind::Unordered => "(unordered)",
        RequestKind::Reconfigure => "(reconfigure)",
    };
    format!("{}.{}{kind}", e.request.client.0, e.request.seq.0)
}

fn show_view(view: &View) -> String {
    let members: Vec<String> = view.members.iter().map(|m| m.id.0.to_string()).collect();
    format!(
        "view={} f={} members={}",
        view.id.0,
        view.f,
        members.join(",")
    )
}
