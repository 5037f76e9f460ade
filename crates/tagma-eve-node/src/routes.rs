//! Where replies go: each client's connection and the request it waits for.

use std::collections::HashMap;

use bytes::Bytes;
use crossbeam_channel::Sender;
use tagma_wire::{
    ClientId, Encode, EveRequest, ReplicaMessage, Reply, RequestKind, RequestSeq, ViewId,
};

/// The connection of each client with a request waiting, and that request's number and kind.
/// Routes live as long as a request waits: bounded by the clients.
#[derive(Default)]
pub(crate) struct Routes(HashMap<ClientId, (Sender<Bytes>, RequestSeq, RequestKind)>);

impl Routes {
    /// `request` came in on `conn`.
    pub(crate) fn note(&mut self, request: &EveRequest, kind: RequestKind, conn: Sender<Bytes>) {
        self.0.insert(request.client, (conn, request.seq, kind));
    }

    /// Sends a reply to its client's connection, if the client is connected.
    pub(crate) fn reply(&mut self, client: ClientId, seq: RequestSeq, reply: Bytes) {
        let Some((conn, waiting, kind)) = self.0.get(&client) else {
            return;
        };
        let done = *waiting == seq;
        let frame = ReplicaMessage::Reply(Reply {
            client,
            seq,
            kind: *kind,
            view: ViewId(0),
            payload: reply,
        })
        .to_bytes();
        // A full connection queue drops the reply: the client retransmits and gets the
        // session's reply again.
        let _ = conn.try_send(frame);
        if done {
            self.0.remove(&client);
        }
    }
}
