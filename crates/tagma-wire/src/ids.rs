//! Identifier newtypes and fixed-size cryptographic values shared by all crates.

use std::fmt;

macro_rules! id_newtype {
    ($(#[$m:meta])* $name:ident($inner:ty)) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $inner);
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_newtype!(
    /// A replica's id in the view (`0..` as written in the configuration).
    ReplicaId(u32)
);
id_newtype!(
    /// A logical client: the high 32 bits are the *principal* (the configured client key that
    /// authenticates it), the low 32 bits an instance chosen by the proxy. Sequence numbers are
    /// kept per `ClientId`.
    ClientId(u64)
);
id_newtype!(
    /// Consensus instance id: instance `i` decides the `i`-th batch (starting at 0).
    ConsensusId(u64)
);
id_newtype!(
    /// Epoch of a consensus instance. Epoch = the regency in which it runs (Mod-SMaRt).
    Epoch(u32)
);
id_newtype!(
    /// Leader-change counter. Regency 0 has the lowest replica id as leader.
    Regency(u32)
);
id_newtype!(
    /// Id of an installed view (replica set). The initial view is 0.
    ViewId(u32)
);
id_newtype!(
    /// Per-client request sequence number; the first ordered request of a client is 1.
    RequestSeq(u64)
);

impl ClientId {
    /// The client id of instance `instance` of principal `principal`.
    pub const fn new(principal: u32, instance: u32) -> Self {
        ClientId(((principal as u64) << 32) | instance as u64)
    }
    /// The configured client key that must authenticate this client's requests.
    pub const fn principal(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The proxy-chosen instance part.
    pub const fn instance(self) -> u32 {
        self.0 as u32
    }
}

impl ConsensusId {
    pub const fn next(self) -> Self {
        ConsensusId(self.0 + 1)
    }
}

impl RequestSeq {
    pub const fn next(self) -> Self {
        RequestSeq(self.0 + 1)
    }
}

macro_rules! bytes_newtype {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub [u8; $len]);
        impl $name {
            pub const LEN: usize = $len;
            pub fn as_bytes(&self) -> &[u8; $len] {
                &self.0
            }
            pub fn to_hex(&self) -> String {
                self.0.iter().map(|b| format!("{b:02x}")).collect()
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let hex = self.to_hex();
                write!(f, "{}({}…)", stringify!($name), &hex[..12])
            }
        }
        impl Default for $name {
            fn default() -> Self {
                $name([0; $len])
            }
        }
    };
}

bytes_newtype!(
    /// A BLAKE3-256 digest (batch hashes, request digests, state digests).
    Digest,
    32
);
bytes_newtype!(
    /// A truncated keyed-BLAKE3 MAC tag.
    MacTag,
    16
);
bytes_newtype!(
    /// An Ed25519 public key.
    PublicKey,
    32
);
bytes_newtype!(
    /// An Ed25519 signature.
    Signature,
    64
);
bytes_newtype!(
    /// An X25519 public key (ephemeral, handshake only).
    KexPublic,
    32
);
