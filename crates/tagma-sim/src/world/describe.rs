//! Names and one-line summaries of peer messages: the counter of each kind received, and the
//! trace's description of a message.

use tagma_wire::PeerMessage;

/// Counter name for received peer messages of `msg`'s kind.
pub(super) fn message_counter(msg: &PeerMessage) -> &'static str {
    match msg {
        PeerMessage::Propose(_) => "received_propose",
        PeerMessage::Write(_) => "received_write",
        PeerMessage::Accept(_) => "received_accept",
        PeerMessage::Forward(_) => "received_forward",
        PeerMessage::Stop(_) => "received_stop",
        PeerMessage::StopData(_) => "received_stopdata",
        PeerMessage::Sync(_) => "received_sync",
        PeerMessage::DecisionRequest { .. } => "received_decision_request",
        PeerMessage::Decision(_) => "received_decision",
        PeerMessage::Position { .. } => "received_position",
        PeerMessage::StateQuery { .. } => "received_state_query",
        PeerMessage::StateOffer { .. } => "received_state_offer",
        PeerMessage::ChunkRequest { .. } => "received_chunk_request",
        PeerMessage::Chunk { .. } => "received_chunk",
        PeerMessage::LogRequest { .. } => "received_log_request",
        PeerMessage::LogEntry(_) => "received_log_entry",
        PeerMessage::ViewQuery => "received_view_query",
        PeerMessage::ViewInfo(_) => "received_view_info",
        PeerMessage::StateVote { .. } => "received_state_vote",
    }
}

/// One-line summary of a peer message for the trace.
pub(super) fn describe(msg: &PeerMessage) -> String {
    match msg {
        PeerMessage::Propose(p) => format!(
            "PROPOSE cid {} epoch {} {:?}",
            p.cid,
            p.epoch,
            tagma_crypto::digest(&p.batch)
        ),
        PeerMessage::Write(v) => format!("WRITE cid {} epoch {} {:?}", v.cid, v.epoch, v.hash),
        PeerMessage::Accept(a) => format!(
            "ACCEPT cid {} epoch {} {:?}",
            a.vote.cid, a.vote.epoch, a.vote.hash
        ),
        PeerMessage::Forward(r) => format!("FORWARD {}/{}", r.request.client, r.request.seq),
        PeerMessage::Stop(s) => {
            format!("STOP regency {} ({} requests)", s.regency, s.requests.len())
        }
        PeerMessage::StopData(s) => format!(
            "STOPDATA regency {} last_decided {:?} collect cid {}",
            s.regency,
            s.last_decided.as_ref().map(|d| d.cid.0),
            s.collect.collect.cid
        ),
        PeerMessage::Sync(s) => format!(
            "SYNC regency {} last_decided {:?} {} collects, proposal {} bytes",
            s.regency,
            s.last_decided.as_ref().map(|d| d.cid.0),
            s.collects.len(),
            s.proposal.len()
        ),
        PeerMessage::DecisionRequest { cid } => format!("DECISION_REQUEST cid {cid}"),
        PeerMessage::Decision(d) => format!("DECISION cid {}", d.cid),
        PeerMessage::Position { next, reply } => format!("POSITION next {next} reply {reply}"),
        PeerMessage::StateQuery { next } => format!("STATE_QUERY next {next}"),
        PeerMessage::StateOffer { checkpoint, next } => format!(
            "STATE_OFFER checkpoint {:?} next {next}",
            checkpoint.map(|c| (c.cid.0, c.len, c.digest))
        ),
        PeerMessage::ChunkRequest { cid, offset, len } => {
            format!("CHUNK_REQUEST cid {cid} offset {offset} len {len}")
        }
        PeerMessage::Chunk { cid, offset, data } => {
            format!("CHUNK cid {cid} offset {offset} len {}", data.len())
        }
        PeerMessage::LogRequest { from, count } => {
            format!("LOG_REQUEST from {from} count {count}")
        }
        PeerMessage::LogEntry(d) => format!("LOG_ENTRY cid {}", d.cid),
        PeerMessage::ViewQuery => "VIEW_QUERY".into(),
        PeerMessage::ViewInfo(h) => format!("VIEW_INFO {} changes", h.len()),
        PeerMessage::StateVote { cid, digest } => format!("STATE_VOTE cid {cid} digest {digest:?}"),
    }
}
