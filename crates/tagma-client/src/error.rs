//! What a failed invocation tells its caller: each error names the fix.

/// Why an invocation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cluster unreachable: connected to {connected} of {needed} replicas needed ({details}) — fix: start the replicas (`tagma replica --dir DIR --id N`) and check the addresses in tagma.toml"
    )]
    Unreachable {
        connected: usize,
        needed: usize,
        details: String,
    },
    #[error(
        "no reply quorum after {after_ms} ms ({replies} replies, {quorum} matching needed) — fix: check that enough replicas are running and connected to each other"
    )]
    Timeout {
        after_ms: u64,
        replies: usize,
        quorum: usize,
    },
    #[error("replies disagree: no {quorum} matching replies among {replies}")]
    NoQuorum { replies: usize, quorum: usize },
    #[error("request of {bytes} bytes exceeds request_bytes_max = {max}")]
    TooLarge { bytes: usize, max: usize },
    #[error(
        "the replicas do not know this client's key (principal {principal}, public key {key}; replicas that refused it: {refused_by}) — fix: add it to tagma.toml's clients on the replicas ([[client]] id = {principal}, public_key = \"{key}\") and restart them, or use the cluster's client key (keys/client.key in the cluster directory) with its principal"
    )]
    UnknownKey {
        principal: u32,
        /// The client's public key, hex.
        key: String,
        /// The replicas that refused it, comma-separated.
        refused_by: String,
    },
    #[error("invalid client key: {0}")]
    Key(String),
    #[error("the proxy was closed")]
    Closed,
    #[error("a reply quorum agreed on a reply that does not decode: {0}")]
    BadReply(String),
    #[error(
        "replica {replica} did not answer: {reason} — fix: check that it runs and is \
         reachable (`tagma status`)"
    )]
    NoAnswer { replica: u32, reason: String },
}
