//! [`SpaceLimits`]: everything the coordination service bounds, with defaults, so a client —
//! Byzantine ones included — can make it hold only so much.
//!
//! The whole state is bounded: at most `spaces_max` spaces of at most `space_bytes_max`
//! bytes each (tuples with their sealed parts and waiting templates, each counted with a
//! fixed overhead) and `taken_bytes_max` of recently taken sealed tuples each, so with the
//! defaults at most 256 × (16 + 4) MiB. A reply is bounded by `reply_bytes_max`.

use tagma_space::Limits;

/// The bounds of a [`crate::SpaceService`]. Every replica of a service must use the same
/// limits: they decide replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceLimits {
    /// Arity and sizes of tuples and templates (default: [`Limits::default`]: 16 fields,
    /// 64 KiB a field, 256 KiB a tuple).
    pub typed: Limits,
    /// The most spaces (default 256).
    pub spaces_max: usize,
    /// The most tuples one space holds (default 65,536).
    pub tuples_per_space_max: usize,
    /// The most bytes one space holds: its tuples and its waiting templates, each counted as
    /// its encoded size plus a fixed overhead (default 16 MiB).
    pub space_bytes_max: usize,
    /// The most operations waiting in one space (default 1,024).
    pub waits_per_space_max: usize,
    /// The most operations waiting for one client principal, over all spaces (default 64).
    /// Operations of one batch in different spaces run side by side and each sees the count
    /// as it was before them, so within one batch a principal can pass the cap once per
    /// space it waits in; the next batch sees the total.
    pub waits_per_client_max: usize,
    /// The longest wait of an `rd` or `in` (default 1 hour).
    pub wait_ms_max: u64,
    /// The longest lease of a tuple (default 24 hours).
    pub lease_ms_max: u64,
    /// The most tuples an `rdAll` or `inAll` returns (default 1,024).
    pub all_max: u32,
    /// The most bytes of the tuples an `rdAll` or `inAll` returns: it stops before the
    /// tuple that would pass this (default 512 KiB, so a reply fits a frame).
    pub reply_bytes_max: usize,
    /// How long the sealed part of a taken tuple stays for its taker to open (agreed time;
    /// default 60 s).
    pub taken_keep_ms: u64,
    /// The most taken sealed tuples one space keeps (default 1,024).
    pub taken_per_space_max: usize,
    /// The most bytes of taken sealed tuples one space keeps (default 4 MiB).
    pub taken_bytes_max: usize,
}

impl Default for SpaceLimits {
    fn default() -> Self {
        SpaceLimits {
            typed: Limits::default(),
            spaces_max: 256,
            tuples_per_space_max: 65_536,
            space_bytes_max: 16 << 20,
            waits_per_space_max: 1024,
            waits_per_client_max: 64,
            wait_ms_max: 3_600_000,
            lease_ms_max: 86_400_000,
            all_max: 1024,
            reply_bytes_max: 512 << 10,
            taken_keep_ms: 60_000,
            taken_per_space_max: 1024,
            taken_bytes_max: 4 << 20,
        }
    }
}

/// Bytes a stored tuple counts beyond its encoding (its index entries and bookkeeping).
pub(crate) const TUPLE_OVERHEAD_BYTES: usize = 64;
/// Bytes a taken tuple's sealed part counts beyond its length in its space's taken buffer.
pub(crate) const TAKEN_OVERHEAD_BYTES: usize = 48;
/// Bytes a waiting operation counts beyond its template's encoding.
pub(crate) const WAIT_OVERHEAD_BYTES: usize = 96;
/// The bytes of a stored tuple's reply beyond its tuple and sealed part (which together
/// keep `tuple_bytes_max`): revision, extras, lease end and the sealed part's length.
const STORED_REPLY_EXTRA_BYTES: usize = 21;

/// Limits that cannot work together.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    #[error("{0} is 0: give it at least 1")]
    Zero(&'static str),
    #[error("arity_max is {0}: give 1 to 255 (the encoding counts fields in a byte)")]
    Arity(usize),
    #[error(
        "{name} is {value}, less than one largest tuple needs ({needed}): raise it or lower \
         tuple_bytes_max"
    )]
    TooSmall {
        name: &'static str,
        value: usize,
        needed: usize,
    },
}

impl SpaceLimits {
    /// Checks that the limits work together: none is zero, and one largest tuple fits a
    /// space and a reply.
    pub fn check(&self) -> Result<(), LimitsError> {
        let counts = [
            ("spaces_max", self.spaces_max),
            ("tuples_per_space_max", self.tuples_per_space_max),
            ("waits_per_space_max", self.waits_per_space_max),
            ("waits_per_client_max", self.waits_per_client_max),
            ("wait_ms_max", self.wait_ms_max as usize),
            ("lease_ms_max", self.lease_ms_max as usize),
            ("all_max", self.all_max as usize),
            ("tuple_bytes_max", self.typed.tuple_bytes_max),
            ("taken_keep_ms", self.taken_keep_ms as usize),
            ("taken_per_space_max", self.taken_per_space_max),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, v)| *v == 0) {
            return Err(LimitsError::Zero(name));
        }
        if !(1..=255).contains(&self.typed.arity_max) {
            return Err(LimitsError::Arity(self.typed.arity_max));
        }
        let tuple = self.typed.tuple_bytes_max;
        for (name, value, needed) in [
            (
                "space_bytes_max",
                self.space_bytes_max,
                tuple + TUPLE_OVERHEAD_BYTES,
            ),
            (
                "reply_bytes_max",
                self.reply_bytes_max,
                tuple + STORED_REPLY_EXTRA_BYTES,
            ),
            (
                "taken_bytes_max",
                self.taken_bytes_max,
                tuple + TAKEN_OVERHEAD_BYTES,
            ),
        ] {
            if value < needed {
                return Err(LimitsError::TooSmall {
                    name,
                    value,
                    needed,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_work_and_bad_limits_name_the_key() {
        assert_eq!(SpaceLimits::default().check(), Ok(()));
        let zero = SpaceLimits {
            waits_per_client_max: 0,
            ..SpaceLimits::default()
        };
        assert_eq!(zero.check(), Err(LimitsError::Zero("waits_per_client_max")));
        let small = SpaceLimits {
            reply_bytes_max: 1000,
            ..SpaceLimits::default()
        };
        let e = small.check().unwrap_err();
        assert!(e.to_string().contains("reply_bytes_max"), "{e}");
        let wide = SpaceLimits {
            typed: Limits {
                arity_max: 300,
                ..Limits::default()
            },
            ..SpaceLimits::default()
        };
        assert_eq!(wide.check(), Err(LimitsError::Arity(300)));
    }
}
