//! Tokens: what executors compare after each batch. The token of batch `i` is a digest of
//! the state's root after `i`, the outputs of `i` (in the batch's order), the token of
//! batch `i − 1` and `i` itself: equal tokens mean equal states, equal replies and an equal
//! history before them.

use bytes::Bytes;
use tagma_wire::EveTokenProof;

use crate::tree::Digest;

const TOKEN_DOMAIN: &[u8] = b"tagma eve token\0";
const GENESIS_DOMAIN: &[u8] = b"tagma eve genesis\0";
const OUTPUTS_DOMAIN: &[u8] = b"tagma eve outputs\0";

/// The token of a batch (or, for batch 0, of the initial state).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub [u8; 32]);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token(")?;
        for byte in &self.0[..6] {
            write!(f, "{byte:02x}")?;
        }
        write!(f, "…)")
    }
}

impl Token {
    /// The token of batch 0: the initial state's root.
    pub fn genesis(root: &Digest) -> Token {
        let mut h = blake3::Hasher::new();
        h.update(GENESIS_DOMAIN);
        h.update(root);
        Token(*h.finalize().as_bytes())
    }

    /// The token of batch `seq`, which reached `root` and replied `outputs` after the batch
    /// whose token is `previous`.
    pub fn after(seq: u64, root: &Digest, outputs: &[Bytes], previous: &Token) -> Token {
        Token::of(
            seq,
            root,
            Some(&TokenProof {
                outputs: outputs_digest(outputs),
                previous: *previous,
            }),
        )
    }

    /// The token of the state after batch `seq` whose root is `root`, from what else it
    /// covers (`proof`; none for batch 0, whose token is its root's): what a server that
    /// fetched a state checks it against.
    pub fn of(seq: u64, root: &Digest, proof: Option<&TokenProof>) -> Token {
        let Some(proof) = proof else {
            return Token::genesis(root);
        };
        let mut h = blake3::Hasher::new();
        h.update(TOKEN_DOMAIN);
        h.update(&seq.to_le_bytes());
        h.update(root);
        h.update(&proof.outputs);
        h.update(&proof.previous.0);
        Token(*h.finalize().as_bytes())
    }
}

/// What a batch's token covers besides the state's root: the digest of its outputs and the
/// token before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenProof {
    pub outputs: Digest,
    pub previous: Token,
}

impl TokenProof {
    pub fn to_wire(self) -> EveTokenProof {
        EveTokenProof {
            outputs: tagma_wire::Digest(self.outputs),
            previous: tagma_wire::Digest(self.previous.0),
        }
    }

    pub fn from_wire(proof: EveTokenProof) -> TokenProof {
        TokenProof {
            outputs: proof.outputs.0,
            previous: Token(proof.previous.0),
        }
    }
}

/// A digest of a batch's outputs, in order, each framed by its length.
pub fn outputs_digest(outputs: &[Bytes]) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(OUTPUTS_DOMAIN);
    h.update(&(outputs.len() as u64).to_le_bytes());
    for output in outputs {
        h.update(&(output.len() as u64).to_le_bytes());
        h.update(output);
    }
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_changes_with_each_of_its_inputs() {
        let root = [1u8; 32];
        let previous = Token::genesis(&[0u8; 32]);
        let outputs = vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")];
        let token = Token::after(1, &root, &outputs, &previous);
        assert_eq!(token, Token::after(1, &root, &outputs, &previous));
        assert_ne!(token, Token::after(2, &root, &outputs, &previous));
        assert_ne!(token, Token::after(1, &[2u8; 32], &outputs, &previous));
        assert_ne!(token, Token::after(1, &root, &outputs[..1], &previous));
        assert_ne!(token, Token::after(1, &root, &outputs, &token));
        // Framing: "ab" as one output is not "a" then "b".
        assert_ne!(
            token,
            Token::after(1, &root, &[Bytes::from_static(b"ab")], &previous)
        );
    }
}
