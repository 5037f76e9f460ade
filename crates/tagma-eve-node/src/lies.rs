//! A Byzantine executor, for testing the BFT deployment across processes: the lies an
//! executor started with `tagma eve serve --lie` tells. It executes like any other and keeps a
//! correct state; what it sends is what lies.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tagma_eve::Token;
use tagma_wire::{EveMessage, TreeNode};
use tracing::warn;

/// The lies an executor tells (none by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lies {
    /// A wrong token in every VERIFY.
    pub tokens: bool,
    /// A wrong reply to every client.
    pub replies: bool,
    /// Forged values in every state node it serves to an executor that fetches.
    pub state: bool,
}

/// The lies told so far, logged now and then.
static TOLD: AtomicU64 = AtomicU64::new(0);

fn told() {
    let n = TOLD.fetch_add(1, Ordering::Relaxed) + 1;
    if n == 1 || n.is_multiple_of(1_000) {
        warn!(lies = n, "this executor lies (tagma eve serve --lie)");
    }
}

impl Lies {
    pub fn any(self) -> bool {
        self.tokens || self.replies || self.state
    }

    pub(crate) fn token(self, token: Token) -> Token {
        if !self.tokens {
            return token;
        }
        told();
        let mut t = token.0;
        t[0] ^= 0xff;
        Token(t)
    }

    pub(crate) fn reply(self, reply: Bytes) -> Bytes {
        if !self.replies {
            return reply;
        }
        told();
        Bytes::from_static(b"a lie")
    }

    pub(crate) fn nodes(self, mut message: EveMessage) -> EveMessage {
        if let (true, EveMessage::TreeNodes { nodes, .. }) = (self.state, &mut message) {
            for (_, node) in nodes.iter_mut() {
                if let TreeNode::Leaf { value, .. } = node {
                    *value = Bytes::from_static(b"a forged value");
                    told();
                }
            }
        }
        message
    }
}
