//! `tagma-resp`: the Redis serialization protocol as a server speaks it (RESP2, and RESP3's
//! replies for clients that ask for them).
//!
//! - [`request`]: commands from a client's byte stream — arrays of bulk strings, or inline
//!   commands typed by hand — parsed without copying their arguments, every length checked
//!   against [`Limits`] before anything is allocated; a broken stream is a
//!   [`ProtocolError`] whose text is Redis's own.
//! - [`reply`]: the reply values ([`Reply`]), their encoding in RESP2 or RESP3, and a parser
//!   of encoded replies (for clients, tests and the gateway's own use of a reply).
//!
//! No IO: callers feed bytes in and take bytes out.

pub mod reply;
pub mod request;

pub use reply::{Protocol, Reply, ReplyError, parse_reply};
pub use request::{Limits, ProtocolError, parse_command};
