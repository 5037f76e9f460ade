//! The micro-benchmark service of the BFT-SMaRt paper: an "empty" service whose reply is a
//! run of zero bytes of the size the request asks for, so a run measures the replication
//! library, not the application.
//!
//! Request layout: `u32` little-endian reply size, then zero padding up to the request
//! size. A request shorter than the 4-byte header (the 0/0 configuration sends an empty
//! request) asks for an empty reply.

use bytes::Bytes;
use tagma_exec::{Context, Service, ServiceError};
use tagma_wire::Digest;

/// Largest reply the service produces; larger requested sizes are cut to it.
pub const REPLY_BYTES_MAX: usize = 1 << 20;
/// Bytes of the reply-size header at the start of a request.
pub const HEADER_BYTES: usize = 4;

/// Encodes a request of `request_bytes` bytes (at least the 4-byte header when
/// `reply_bytes > 0`) asking for a reply of `reply_bytes` bytes.
pub fn encode_request(request_bytes: usize, reply_bytes: usize) -> Bytes {
    if reply_bytes == 0 && request_bytes < HEADER_BYTES {
        return Bytes::from(vec![0u8; request_bytes]);
    }
    let mut buf = vec![0u8; request_bytes.max(HEADER_BYTES)];
    let size = u32::try_from(reply_bytes).unwrap_or(u32::MAX);
    buf[..HEADER_BYTES].copy_from_slice(&size.to_le_bytes());
    Bytes::from(buf)
}

/// The reply size a request asks for (0 for a request shorter than the header), bounded by
/// [`REPLY_BYTES_MAX`].
pub fn requested_reply_bytes(request: &[u8]) -> usize {
    match request.first_chunk::<HEADER_BYTES>() {
        Some(header) => (u32::from_le_bytes(*header) as usize).min(REPLY_BYTES_MAX),
        None => 0,
    }
}

/// The empty service. Its only state is the number of ordered requests executed, so
/// replicas that executed the same requests have the same digest.
#[derive(Debug, Default, Clone)]
pub struct EmptyService {
    executed: u64,
}

impl EmptyService {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ordered requests executed so far.
    pub fn executed(&self) -> u64 {
        self.executed
    }

    fn reply(request: &Bytes) -> Bytes {
        Bytes::from(vec![0u8; requested_reply_bytes(request)])
    }
}

impl Service for EmptyService {
    fn execute_ordered(&mut self, request: &Bytes, _ctx: &Context) -> Bytes {
        self.executed += 1;
        Self::reply(request)
    }

    fn execute_unordered(&self, request: &Bytes, _ctx: &Context) -> Bytes {
        Self::reply(request)
    }

    fn snapshot(&self) -> Bytes {
        Bytes::copy_from_slice(&self.executed.to_le_bytes())
    }

    fn install_snapshot(&mut self, snapshot: &Bytes) -> Result<(), ServiceError> {
        let bytes: [u8; 8] = snapshot.as_ref().try_into().map_err(|_| {
            ServiceError::InvalidSnapshot(format!(
                "expected 8 bytes (the executed-request count), got {}",
                snapshot.len()
            ))
        })?;
        self.executed = u64::from_le_bytes(bytes);
        Ok(())
    }

    fn state_digest(&self) -> Digest {
        Digest(*blake3::hash(&self.executed.to_le_bytes()).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_the_conformance_suite() {
        let workload: Vec<Bytes> = [(0, 0), (100, 100), (1024, 1024), (4, 4096), (10, 0)]
            .iter()
            .cycle()
            .take(40)
            .map(|&(req, rep)| encode_request(req, rep))
            .collect();
        tagma_exec::conformance::check_service(EmptyService::new, &workload).unwrap();
    }

    #[test]
    fn requests_have_the_asked_sizes() {
        for (req, rep) in [
            (0, 0),
            (100, 100),
            (1024, 1024),
            (4096, 4096),
            (4, 7),
            (2, 0),
        ] {
            let r = encode_request(req, rep);
            assert_eq!(r.len(), req, "request {req}/{rep}");
            assert_eq!(requested_reply_bytes(&r), rep, "request {req}/{rep}");
        }
        // A reply needs the header: the request grows to 4 bytes.
        assert_eq!(encode_request(0, 10).len(), HEADER_BYTES);
        assert_eq!(requested_reply_bytes(&encode_request(0, 10)), 10);
    }

    #[test]
    fn replies_are_bounded() {
        let r = encode_request(8, usize::MAX);
        assert_eq!(requested_reply_bytes(&r), REPLY_BYTES_MAX);
    }

    #[test]
    fn state_counts_ordered_requests_only() {
        let mut s = EmptyService::new();
        let ctx = Context {
            client: tagma_wire::ClientId::new(1, 1),
            seq: tagma_wire::RequestSeq(1),
            cid: None,
            timestamp_ms: 0,
            seed: 0,
        };
        let before = s.state_digest();
        assert_eq!(s.execute_unordered(&encode_request(4, 3), &ctx).len(), 3);
        assert_eq!(s.state_digest(), before);
        assert_eq!(s.execute_ordered(&encode_request(4, 5), &ctx).len(), 5);
        assert_eq!(s.executed(), 1);
        assert_ne!(s.state_digest(), before);
        let mut t = EmptyService::new();
        t.install_snapshot(&s.snapshot()).unwrap();
        assert_eq!(t.state_digest(), s.state_digest());
        assert!(t.install_snapshot(&Bytes::from_static(b"abc")).is_err());
    }
}
