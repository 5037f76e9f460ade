//! `tagma-net`: authenticated, MAC-protected framed connections over TCP.
//!
//! Every connection starts with a handshake (initiator `Hello` → responder `Hello` → initiator
//! `Proof` → responder `Proof`): X25519 ephemeral keys give a shared secret; each side signs
//! the transcript hash with its Ed25519 identity, so an unknown or impersonating peer is
//! refused. Per-direction MAC keys are derived from the shared secret and the transcript.
//!
//! After the handshake every frame is `u32 LE body length | body | 16-byte MAC tag`, where the
//! tag is keyed BLAKE3 over (the frame's counter in this direction, little-endian u64) ‖ body.
//! The implicit counter makes replayed, reordered or dropped frames fail the MAC.
//!
//! TO BE COMPLETED (helper): every `todo!()` below, plus tests.

use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tagma_crypto::IdentityKey;
use tagma_wire::{PublicKey, Role};

/// Hard limits applied to every connection.
#[derive(Clone, Copy, Debug)]
pub struct NetLimits {
    /// Largest frame body accepted or sent.
    pub frame_bytes_max: usize,
    /// Time allowed for the whole handshake.
    pub handshake_timeout: Duration,
}

/// Why a connection was refused or closed. Each is logged once and counted by the runtime.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed by peer")]
    Closed,
    #[error("truncated frame")]
    Truncated,
    #[error("frame of {len} bytes exceeds limit {max}")]
    FrameTooLarge { len: usize, max: usize },
    #[error("bad MAC on frame")]
    BadMac,
    #[error("malformed handshake: {0}")]
    MalformedHandshake(String),
    #[error("unknown peer key for {role:?}")]
    UnknownKey { role: Role },
    #[error("bad handshake signature")]
    BadSignature,
    #[error("peer is {found:?}, expected {expected:?}")]
    WrongPeer { expected: Role, found: Role },
    #[error("handshake timed out")]
    HandshakeTimeout,
}

impl NetError {
    /// A short stable label for metrics (`bad_mac`, `unknown_key`, …).
    pub fn reason(&self) -> &'static str {
        todo!()
    }
}

/// Who may connect: the responder asks it for the registered key of the claimed role.
pub trait KeyDirectory {
    fn lookup(&self, role: &Role) -> Option<PublicKey>;
}

/// Our side of a handshake.
pub struct LocalIdentity<'a> {
    pub role: Role,
    pub key: &'a IdentityKey,
}

/// Initiator: connects to `addr`, runs the handshake, and checks that the responder is
/// `expected_role` with key `expected_key`.
pub fn connect(
    addr: std::net::SocketAddr,
    me: &LocalIdentity<'_>,
    expected_role: Role,
    expected_key: &PublicKey,
    limits: NetLimits,
    connect_timeout: Duration,
) -> Result<(FrameReader, FrameWriter), NetError> {
    todo!()
}

/// Responder: runs the handshake on an accepted stream; the peer's claimed role must be in
/// `directory` with the key it proved.
pub fn accept(
    stream: TcpStream,
    me: &LocalIdentity<'_>,
    directory: &dyn KeyDirectory,
    limits: NetLimits,
) -> Result<(Role, FrameReader, FrameWriter), NetError> {
    todo!()
}

/// The receiving half: reads in large chunks, returns MAC-verified frame bodies as zero-copy
/// `Bytes`.
pub struct FrameReader {
    // stream, key, counter, buffer, limits
}

impl FrameReader {
    /// Blocks until a whole frame arrived; verifies its MAC.
    pub fn read_frame(&mut self) -> Result<Bytes, NetError> {
        todo!()
    }
}

/// The sending half: frames are appended to a buffer and written with one syscall per
/// `flush`, so a writer thread coalesces everything queued since the last write.
pub struct FrameWriter {
    // stream, key, counter, buffer, limits
}

impl FrameWriter {
    /// Appends one frame (length, body, MAC). Errors if the body exceeds the limit.
    pub fn push(&mut self, body: &[u8]) -> Result<(), NetError> {
        todo!()
    }
    /// Writes all pushed frames.
    pub fn flush(&mut self) -> Result<(), NetError> {
        todo!()
    }
    /// Bytes pushed and not yet flushed.
    pub fn pending_bytes(&self) -> usize {
        todo!()
    }
    /// Closes both directions of the socket.
    pub fn shutdown(&self) {
        todo!()
    }
}

#[allow(dead_code)]
fn _uses(_: BytesMut) {}
