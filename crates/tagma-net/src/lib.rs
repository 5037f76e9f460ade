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
//! Handshake details (the initiator is the side that connects):
//! 1. both sides send `Hello { role, identity, ephemeral }` (initiator first), each with a
//!    fresh X25519 ephemeral key;
//! 2. `T = BLAKE3("tagma v1 handshake" ‖ u32 LE len ‖ initiator Hello ‖ u32 LE len ‖ responder
//!    Hello)`, over the exact bytes sent;
//! 3. the initiator sends `Proof { sign("tagma v1 initiator" ‖ T) }`, the responder checks it,
//!    then sends `Proof { sign("tagma v1 responder" ‖ T) }`, which the initiator checks
//!    against the key it expected;
//! 4. `shared = X25519(ephemerals)`, `k_i2r = derive_key("tagma v1 frame
//!    initiator->responder", shared ‖ T)`, `k_r2i` likewise; each direction counts its frames
//!    from 0.
//!
//! The responder checks the initiator's `Hello` first: a key its [`KeyDirectory`] does not
//! register for the claimed role gets `Refused { UnknownKey }` instead of a `Hello`, and the
//! connection closes, so the initiator can report [`NetError::Refused`] rather than a closed
//! connection (a client whose key the cluster does not know learns that it is its key).
//!
//! Handshake messages travel as `u32 LE length | body` (no MAC, at most
//! [`HANDSHAKE_FRAME_MAX`] bytes), all within [`NetLimits::handshake_timeout`].

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tagma_crypto::{EphemeralKey, IdentityKey, MacKey};
use tagma_wire::{Decode, Digest, Encode, Handshake, MacTag, PublicKey, Refusal, Role};

/// Largest handshake message body accepted.
pub const HANDSHAKE_FRAME_MAX: usize = 1024;
/// Bytes of a frame header (the body length).
pub const FRAME_HEADER_LEN: usize = 4;
/// Bytes of a frame trailer (the MAC tag).
pub const FRAME_TAG_LEN: usize = MacTag::LEN;

/// Bytes requested from the socket per `read` call (more while a larger frame is missing).
const READ_CHUNK: usize = 64 * 1024;
/// Maximum bytes requested per `read` call (the request is zero-filled first).
const READ_MAX: usize = 1024 * 1024;
/// A writer buffer grown beyond this is released after a flush.
const WRITE_BUF_KEEP: usize = 8 * 1024 * 1024;

const TRANSCRIPT_DOMAIN: &[u8] = b"tagma v1 handshake";
const INITIATOR_LABEL: &[u8] = b"tagma v1 initiator";
const RESPONDER_LABEL: &[u8] = b"tagma v1 responder";
const KEY_I2R: &str = "tagma v1 frame initiator->responder";
const KEY_R2I: &str = "tagma v1 frame responder->initiator";

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
    #[error("the peer refused the handshake: {}", refusal_text(.0))]
    Refused(Refusal),
    #[error("bad handshake signature")]
    BadSignature,
    #[error("peer is {found:?}, expected {expected:?}")]
    WrongPeer { expected: Role, found: Role },
    #[error("handshake timed out")]
    HandshakeTimeout,
}

impl NetError {
    /// Whether the peer simply went away (reset or aborted the connection, or closed it
    /// mid-frame): normal for a client that exits, unlike a protocol or authentication
    /// failure.
    pub fn is_disconnect(&self) -> bool {
        use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
        match self {
            NetError::Closed | NetError::Truncated => true,
            NetError::Io(e) => matches!(
                e.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
            ),
            _ => false,
        }
    }

    /// A short stable label for metrics (`bad_mac`, `unknown_key`, …).
    pub fn reason(&self) -> &'static str {
        match self {
            NetError::Io(_) => "io",
            NetError::Closed => "closed",
            NetError::Truncated => "truncated",
            NetError::FrameTooLarge { .. } => "frame_too_large",
            NetError::BadMac => "bad_mac",
            NetError::MalformedHandshake(_) => "malformed_handshake",
            NetError::UnknownKey { .. } => "unknown_key",
            NetError::Refused(Refusal::UnknownKey) => "refused_unknown_key",
            NetError::BadSignature => "bad_signature",
            NetError::WrongPeer { .. } => "wrong_peer",
            NetError::HandshakeTimeout => "handshake_timeout",
        }
    }
}

fn refusal_text(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::UnknownKey => "it does not know this key for this role",
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
    let stream = TcpStream::connect_timeout(&addr, connect_timeout)?;
    let result = stream
        .set_nodelay(true)
        .map_err(NetError::from)
        .and_then(|()| initiator_handshake(&stream, me, expected_role, expected_key, limits))
        .and_then(|keys| split(stream.try_clone()?, keys, limits));
    if result.is_err() {
        let _ = stream.shutdown(Shutdown::Both);
    }
    result
}

/// Responder: runs the handshake on an accepted stream; the peer's claimed role must be in
/// `directory` with the key it proved.
///
/// Fails closed: on any error the socket is shut down before returning.
pub fn accept(
    stream: TcpStream,
    me: &LocalIdentity<'_>,
    directory: &dyn KeyDirectory,
    limits: NetLimits,
) -> Result<(Role, FrameReader, FrameWriter), NetError> {
    let result = stream
        .set_nodelay(true)
        .map_err(NetError::from)
        .and_then(|()| responder_handshake(&stream, me, directory, limits))
        .and_then(|(role, keys)| {
            let (reader, writer) = split(stream.try_clone()?, keys, limits)?;
            Ok((role, reader, writer))
        });
    if result.is_err() {
        let _ = stream.shutdown(Shutdown::Both);
    }
    result
}

/// The per-direction keys a handshake produced, from our point of view.
struct SessionKeys {
    send: MacKey,
    recv: MacKey,
}

/// A write that makes no progress for this long fails, so a peer that stops reading cannot
/// block a writer thread forever (the connection is then closed and, for replica links,
/// re-established).
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Data sent and not acknowledged for this long closes the connection (`TCP_USER_TIMEOUT`).
/// TCP alone would retransmit with a backoff that reaches tens of seconds during a
/// partition, so that after the heal a link would stay silent until its next retransmission;
/// closed instead, it is re-established (replica links) or replaced (clients) as soon as the
/// peer is reachable again.
pub const UNACKNOWLEDGED_TIMEOUT: Duration = Duration::from_secs(3);

/// A connection that carries nothing is probed after this long (TCP keepalive), then every
/// [`KEEPALIVE_INTERVAL`]; [`KEEPALIVE_PROBES`] unanswered probes close it, so that a reader
/// waiting on a peer that vanished (a partition, a host that lost power) is woken up.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(2);
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
pub const KEEPALIVE_PROBES: u32 = 3;

/// Makes the kernel close `stream` when its peer stops answering (see
/// [`UNACKNOWLEDGED_TIMEOUT`] and [`KEEPALIVE_IDLE`]).
fn detect_dead_peers(stream: &TcpStream) -> Result<(), NetError> {
    let socket = socket2::SockRef::from(stream);
    socket.set_tcp_user_timeout(Some(UNACKNOWLEDGED_TIMEOUT))?;
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    socket.set_tcp_keepalive(&keepalive)?;
    Ok(())
}

/// Replaces the handshake timeouts (no read timeout; the write-stall timeout) and builds the
/// two halves on clones of `stream`.
fn split(
    stream: TcpStream,
    keys: SessionKeys,
    limits: NetLimits,
) -> Result<(FrameReader, FrameWriter), NetError> {
    stream.set_read_timeout(None)?;
    stream.set_write_timeout(Some(WRITE_STALL_TIMEOUT))?;
    detect_dead_peers(&stream)?;
    let read_stream = stream.try_clone()?;
    let reader = FrameReader {
        stream: read_stream,
        key: keys.recv,
        counter: 0,
        buf: BytesMut::new(),
        scratch: vec![0u8; READ_CHUNK].into_boxed_slice(),
        frame_bytes_max: limits.frame_bytes_max,
    };
    let writer = FrameWriter {
        stream,
        key: keys.send,
        counter: 0,
        buf: BytesMut::new(),
        frame_bytes_max: limits.frame_bytes_max,
    };
    Ok((reader, writer))
}

fn initiator_handshake(
    stream: &TcpStream,
    me: &LocalIdentity<'_>,
    expected_role: Role,
    expected_key: &PublicKey,
    limits: NetLimits,
) -> Result<SessionKeys, NetError> {
    let io = HandshakeIo::new(stream, limits.handshake_timeout);
    let ephemeral = EphemeralKey::generate();
    let my_hello = io.send(&Handshake::Hello {
        role: me.role,
        identity: me.key.public(),
        ephemeral: ephemeral.public(),
    })?;
    let (their_hello, their_hello_bytes) = io.recv()?;
    let (role, identity, their_ephemeral) = match their_hello {
        Handshake::Hello {
            role,
            identity,
            ephemeral,
        } => (role, identity, ephemeral),
        Handshake::Refused { reason } => return Err(NetError::Refused(reason)),
        Handshake::Proof { .. } => return Err(malformed("expected Hello, got Proof")),
    };
    if role != expected_role {
        return Err(NetError::WrongPeer {
            expected: expected_role,
            found: role,
        });
    }
    if identity != *expected_key {
        return Err(NetError::UnknownKey { role });
    }
    let shared = ephemeral
        .agree(&their_ephemeral)
        .map_err(|_| malformed("invalid ephemeral key"))?;
    let t = transcript(&my_hello, &their_hello_bytes);
    io.send(&Handshake::Proof {
        signature: me.key.sign(&labelled(INITIATOR_LABEL, &t)),
    })?;
    let (proof, _) = io.recv()?;
    let Handshake::Proof { signature } = proof else {
        return Err(malformed("expected Proof"));
    };
    tagma_crypto::verify(&identity, &labelled(RESPONDER_LABEL, &t), &signature)
        .map_err(|_| NetError::BadSignature)?;
    Ok(SessionKeys {
        send: session_key(KEY_I2R, &shared, &t),
        recv: session_key(KEY_R2I, &shared, &t),
    })
}

fn responder_handshake(
    stream: &TcpStream,
    me: &LocalIdentity<'_>,
    directory: &dyn KeyDirectory,
    limits: NetLimits,
) -> Result<(Role, SessionKeys), NetError> {
    let io = HandshakeIo::new(stream, limits.handshake_timeout);
    let (their_hello, their_hello_bytes) = io.recv()?;
    let Handshake::Hello {
        role,
        identity,
        ephemeral: their_ephemeral,
    } = their_hello
    else {
        return Err(malformed("expected Hello"));
    };
    // Checked before doing any work for the peer: an unregistered role, or a registered role
    // claimed with another key, is refused at once, with the reason (best effort: the
    // connection closes whether or not it arrives).
    if directory.lookup(&role) != Some(identity) {
        let _ = io.send(&Handshake::Refused {
            reason: Refusal::UnknownKey,
        });
        return Err(NetError::UnknownKey { role });
    }
    let ephemeral = EphemeralKey::generate();
    let shared = ephemeral
        .agree(&their_ephemeral)
        .map_err(|_| malformed("invalid ephemeral key"))?;
    let my_hello = io.send(&Handshake::Hello {
        role: me.role,
        identity: me.key.public(),
        ephemeral: ephemeral.public(),
    })?;
    let t = transcript(&their_hello_bytes, &my_hello);
    let (proof, _) = io.recv()?;
    let Handshake::Proof { signature } = proof else {
        return Err(malformed("expected Proof"));
    };
    tagma_crypto::verify(&identity, &labelled(INITIATOR_LABEL, &t), &signature)
        .map_err(|_| NetError::BadSignature)?;
    io.send(&Handshake::Proof {
        signature: me.key.sign(&labelled(RESPONDER_LABEL, &t)),
    })?;
    Ok((
        role,
        SessionKeys {
            send: session_key(KEY_R2I, &shared, &t),
            recv: session_key(KEY_I2R, &shared, &t),
        },
    ))
}

fn malformed(what: &str) -> NetError {
    NetError::MalformedHandshake(what.to_string())
}

/// The transcript hash over both `Hello`s, exactly as sent.
fn transcript(initiator_hello: &[u8], responder_hello: &[u8]) -> Digest {
    // Both are at most HANDSHAKE_FRAME_MAX bytes, so the casts are exact.
    tagma_crypto::digest_parts(&[
        TRANSCRIPT_DOMAIN,
        &(initiator_hello.len() as u32).to_le_bytes(),
        initiator_hello,
        &(responder_hello.len() as u32).to_le_bytes(),
        responder_hello,
    ])
}

/// `label ‖ T`, the message a handshake `Proof` signs.
fn labelled(label: &[u8], t: &Digest) -> Vec<u8> {
    let mut m = Vec::with_capacity(label.len() + Digest::LEN);
    m.extend_from_slice(label);
    m.extend_from_slice(t.as_bytes());
    m
}

fn session_key(context: &str, shared: &[u8; 32], t: &Digest) -> MacKey {
    let mut material = [0u8; 64];
    material[..32].copy_from_slice(shared);
    material[32..].copy_from_slice(t.as_bytes());
    tagma_crypto::derive_key(context, &material)
}

/// Handshake message I/O under one deadline for the whole handshake.
struct HandshakeIo<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl<'a> HandshakeIo<'a> {
    fn new(stream: &'a TcpStream, timeout: Duration) -> Self {
        HandshakeIo {
            stream,
            deadline: Instant::now() + timeout,
        }
    }

    fn remaining(&self) -> Result<Duration, NetError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(NetError::HandshakeTimeout)
        } else {
            Ok(left)
        }
    }

    /// Sends one handshake message; returns its encoded body (for the transcript).
    fn send(&self, message: &Handshake) -> Result<Bytes, NetError> {
        let body = message.to_bytes();
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(&body);
        self.stream.set_write_timeout(Some(self.remaining()?))?;
        let mut stream = self.stream;
        stream.write_all(&frame).map_err(handshake_io)?;
        Ok(body)
    }

    /// Receives one handshake message and its body bytes.
    fn recv(&self) -> Result<(Handshake, Bytes), NetError> {
        let mut header = [0u8; 4];
        self.read_exact(&mut header, true)?;
        let len = u32::from_le_bytes(header) as usize;
        if len > HANDSHAKE_FRAME_MAX {
            return Err(NetError::MalformedHandshake(format!(
                "handshake message of {len} bytes exceeds {HANDSHAKE_FRAME_MAX}"
            )));
        }
        let mut body = vec![0u8; len];
        self.read_exact(&mut body, false)?;
        let body = Bytes::from(body);
        let message =
            Handshake::decode(&body).map_err(|e| NetError::MalformedHandshake(e.to_string()))?;
        Ok((message, body))
    }

    /// `read_exact` with the remaining handshake time as the read timeout. EOF before the
    /// first byte of a message is `Closed`, within one `Truncated`.
    fn read_exact(&self, buf: &mut [u8], message_start: bool) -> Result<(), NetError> {
        let mut filled = 0;
        let mut stream = self.stream;
        while filled < buf.len() {
            self.stream.set_read_timeout(Some(self.remaining()?))?;
            match stream.read(&mut buf[filled..]) {
                Ok(0) if message_start && filled == 0 => return Err(NetError::Closed),
                Ok(0) => return Err(NetError::Truncated),
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(handshake_io(e)),
            }
        }
        Ok(())
    }
}

/// I/O errors during the handshake: a socket timeout is the handshake timing out.
fn handshake_io(e: std::io::Error) -> NetError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => NetError::HandshakeTimeout,
        _ => NetError::Io(e),
    }
}

/// Appends one frame (`u32 LE body length | body | tag`) to `out`, the tag being
/// `key.tag_parts(&[counter LE, body])`.
///
/// # Panics
/// If `body` is longer than `u32::MAX` bytes (callers check their frame limit first).
pub fn seal_frame(out: &mut BytesMut, key: &MacKey, counter: u64, body: &[u8]) {
    let len = u32::try_from(body.len()).expect("frame body longer than u32::MAX");
    let tag = key.tag_parts(&[&counter.to_le_bytes(), body]);
    out.reserve(FRAME_HEADER_LEN + body.len() + FRAME_TAG_LEN);
    out.put_u32_le(len);
    out.put_slice(body);
    out.put_slice(&tag.0);
}

/// If `buf` starts with a whole frame, removes it from `buf`, checks its MAC for `counter` and
/// returns its body (a zero-copy slice of the buffer). `Ok(None)` if the frame is still
/// incomplete (nothing is consumed). A length above `frame_bytes_max` is refused from the
/// header alone. Never panics, whatever the bytes.
pub fn open_frame(
    buf: &mut BytesMut,
    key: &MacKey,
    counter: u64,
    frame_bytes_max: usize,
) -> Result<Option<Bytes>, NetError> {
    let Some(header) = buf.first_chunk::<FRAME_HEADER_LEN>() else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(*header) as usize;
    if len > frame_bytes_max {
        return Err(NetError::FrameTooLarge {
            len,
            max: frame_bytes_max,
        });
    }
    let Some(total) = len.checked_add(FRAME_HEADER_LEN + FRAME_TAG_LEN) else {
        return Err(NetError::FrameTooLarge {
            len,
            max: frame_bytes_max,
        });
    };
    if buf.len() < total {
        return Ok(None);
    }
    let frame = buf.split_to(total).freeze();
    let body_end = FRAME_HEADER_LEN + len;
    let mut tag = [0u8; FRAME_TAG_LEN];
    tag.copy_from_slice(&frame[body_end..]);
    if !key.verify_parts(
        &[&counter.to_le_bytes(), &frame[FRAME_HEADER_LEN..body_end]],
        &MacTag(tag),
    ) {
        return Err(NetError::BadMac);
    }
    Ok(Some(frame.slice(FRAME_HEADER_LEN..body_end)))
}

/// Bytes still missing for the frame at the start of `buf`, when its header is there.
fn frame_missing(buf: &[u8]) -> Option<usize> {
    let header = buf.first_chunk::<FRAME_HEADER_LEN>()?;
    let len = u32::from_le_bytes(*header) as usize;
    let total = len.checked_add(FRAME_HEADER_LEN + FRAME_TAG_LEN)?;
    Some(total.saturating_sub(buf.len()))
}

/// The receiving half: reads in large chunks, returns MAC-verified frame bodies.
///
/// A body of up to [`READ_CHUNK`] bytes is copied out of the read buffer: a slice of it would
/// keep the whole 64 KiB chunk alive for as long as the body lives (a request in a batch, a
/// reply in a cache), and the next read would have to allocate a fresh chunk — at thousands of
/// reads a second, hundreds of MiB a second through the allocator. Copied out, the chunk is
/// free again when the next read comes, and one chunk serves the connection. A larger body,
/// read into a buffer the size of its frame, is returned as a slice of that buffer, without a
/// copy.
pub struct FrameReader {
    stream: TcpStream,
    key: MacKey,
    counter: u64,
    buf: BytesMut,
    /// Landing area for reads while no large frame is in progress.
    scratch: Box<[u8]>,
    frame_bytes_max: usize,
}

impl FrameReader {
    /// Blocks until a whole frame arrived; verifies its MAC.
    pub fn read_frame(&mut self) -> Result<Bytes, NetError> {
        loop {
            if let Some(body) =
                open_frame(&mut self.buf, &self.key, self.counter, self.frame_bytes_max)?
            {
                self.counter += 1;
                return Ok(if body.len() <= READ_CHUNK {
                    Bytes::copy_from_slice(&body)
                } else {
                    body
                });
            }
            // Incomplete: reserve room for the whole frame at once, then read.
            let missing = frame_missing(&self.buf).unwrap_or(0);
            self.buf.reserve(missing.max(READ_CHUNK));
            let n = if missing > READ_CHUNK {
                // A large frame: read straight into the buffer (zero-filled first, as safe
                // code cannot read into uninitialized memory), up to READ_MAX per call.
                let start = self.buf.len();
                self.buf.resize(start + missing.min(READ_MAX), 0);
                let result = self.stream.read(&mut self.buf[start..]);
                self.buf.truncate(start + *result.as_ref().unwrap_or(&0));
                result
            } else {
                // Small frames: read a chunk into the scratch buffer and append what came,
                // so only the bytes received are copied (no zero-filling per read).
                let result = self.stream.read(&mut self.scratch[..]);
                if let Ok(n) = result {
                    self.buf.extend_from_slice(&self.scratch[..n]);
                }
                result
            };
            match n {
                Ok(0) if self.buf.is_empty() => return Err(NetError::Closed),
                Ok(0) => return Err(NetError::Truncated),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(NetError::Io(e)),
            }
        }
    }

    /// Frames received so far on this connection.
    pub fn frames_read(&self) -> u64 {
        self.counter
    }
}

/// The sending half: frames are appended to a buffer and written with one syscall per
/// `flush`, so a writer thread coalesces everything queued since the last write.
pub struct FrameWriter {
    stream: TcpStream,
    key: MacKey,
    counter: u64,
    buf: BytesMut,
    frame_bytes_max: usize,
}

impl FrameWriter {
    /// Appends one frame (length, body, MAC). Errors if the body exceeds the limit.
    pub fn push(&mut self, body: &[u8]) -> Result<(), NetError> {
        if body.len() > self.frame_bytes_max || u32::try_from(body.len()).is_err() {
            return Err(NetError::FrameTooLarge {
                len: body.len(),
                max: self.frame_bytes_max,
            });
        }
        seal_frame(&mut self.buf, &self.key, self.counter, body);
        self.counter += 1;
        Ok(())
    }
    /// Writes all pushed frames. After an error the connection is unusable (frames may have
    /// been partly written).
    pub fn flush(&mut self) -> Result<(), NetError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.stream.write_all(&self.buf)?;
        if self.buf.capacity() > WRITE_BUF_KEEP {
            self.buf = BytesMut::new();
        } else {
            self.buf.clear();
        }
        Ok(())
    }
    /// Bytes pushed and not yet flushed.
    pub fn pending_bytes(&self) -> usize {
        self.buf.len()
    }
    /// Writes `bytes` as they are — no length, no MAC — on the authenticated connection.
    /// Only for robustness tests that must put malformed frames (truncated, oversized,
    /// badly MAC'd) behind a valid handshake; a correct peer never calls it.
    pub fn write_unframed(&mut self, bytes: &[u8]) -> Result<(), NetError> {
        self.stream.write_all(bytes)?;
        Ok(())
    }
    /// Closes both directions of the socket.
    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

#[cfg(test)]
mod tests;
