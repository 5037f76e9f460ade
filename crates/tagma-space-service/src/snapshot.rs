//! The service's snapshot: a canonical stream of records that one replay routine reads, in
//! the manner of DDS's checkpoints (a create per space, an out per tuple), extended with
//! what blocking operations, leases and confidentiality need — each tuple's revision, owner,
//! absolute lease end and sealed part, each waiting operation in arrival order with its
//! request and deadline, the taken sealed parts, and the counters.
//!
//! ```text
//! snapshot := version u8 (1) | now_ms u64 | revision_floor u64 | record* | 0
//! record   := 1 | name | creator u32 | next_revision u64 | next_wait_id u64 | policy   create
//!           | 5 | name | creator u32 | next_revision u64 | next_wait_id u64 | policy
//!               | protection                                       create, protected
//!           | 2 | revision u64 | owner u32 | extras u8 | [lease end u64] | tuple
//!               | [sealed]                                                          out
//!           | 3 | arrival u64 | client u64 | seq u64 | kind u8 (0 rd, 1 in)
//!               | deadline_ms u64 | template                                          wait
//!           | 4 | revision u64 | taker u32 | expires_ms u64 | sealed                 taken
//! ```
//!
//! An out's `extras` has bit 0 set when a lease end follows and bit 1 when a sealed part
//! (`len u32 | bytes`) follows the tuple, so a state without protected spaces has the bytes
//! it had before confidentiality existed. Spaces come in name order, each create followed by
//! its tuples (by revision), its waiting operations (by arrival) and its taken sealed parts
//! (by revision). Layouts of names, policies, protections, tuples and templates are the
//! protocol's (`tagma_space::codec`). Reading checks that order, so the bytes of a state
//! are unique, and rejects anything else with an error, never a panic.

use std::collections::BTreeMap;
use std::io::{self, Write};

use bytes::{BufMut, Bytes, BytesMut};
use tagma_space::codec::{Reader, put_sealed, put_space_name};
use tagma_space::{DecodeError, Policy, Protections};
use tagma_wire::{ClientId, RequestSeq};

use crate::limits::SpaceLimits;
use crate::space::Space;
use crate::store::Entry;
use crate::taken::Taken;
use crate::waits::{WaitCounts, Waiter};

const VERSION: u8 = 1;
const END: u8 = 0;
const CREATE: u8 = 1;
const OUT: u8 = 2;
const WAIT: u8 = 3;
const TAKEN: u8 = 4;
const CREATE_PROTECTED: u8 = 5;
/// An out's `extras` bit: a lease end follows.
const EXTRA_LEASE: u8 = 1;
/// An out's `extras` bit: a sealed part follows the tuple.
const EXTRA_SEALED: u8 = 2;
/// Counters above this are refused, so a restored counter never overflows.
const COUNTER_MAX: u64 = 1 << 62;
/// Records are written out in pieces of about this size.
const CHUNK_BYTES: usize = 64 << 10;

/// The state a snapshot holds.
pub(crate) struct Restored {
    pub(crate) spaces: BTreeMap<String, Space>,
    pub(crate) now_ms: u64,
    pub(crate) revision_floor: u64,
    pub(crate) counts: WaitCounts,
}

/// Writes the snapshot of a state to `out`, a piece at a time.
pub(crate) fn write(
    spaces: &BTreeMap<String, Space>,
    now_ms: u64,
    revision_floor: u64,
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut buf = BytesMut::with_capacity(CHUNK_BYTES);
    buf.put_u8(VERSION);
    buf.put_u64_le(now_ms);
    buf.put_u64_le(revision_floor);
    let mut flush = |buf: &mut BytesMut, force: bool| -> io::Result<()> {
        if force || buf.len() >= CHUNK_BYTES {
            out.write_all(buf)?;
            buf.clear();
        }
        Ok(())
    };
    for space in spaces.values() {
        buf.put_u8(match space.protection {
            None => CREATE,
            Some(_) => CREATE_PROTECTED,
        });
        put_space_name(&mut buf, &space.name);
        buf.put_u32_le(space.creator);
        buf.put_u64_le(space.next_revision);
        buf.put_u64_le(space.next_wait_id);
        space.policy.encode_into(&mut buf);
        if let Some(protection) = &space.protection {
            protection.encode_into(&mut buf);
        }
        flush(&mut buf, false)?;
        for (revision, entry) in space.store.iter() {
            buf.put_u8(OUT);
            buf.put_u64_le(revision);
            buf.put_u32_le(entry.owner);
            let mut extras = 0;
            if entry.lease_expires_ms.is_some() {
                extras |= EXTRA_LEASE;
            }
            if entry.sealed.is_some() {
                extras |= EXTRA_SEALED;
            }
            buf.put_u8(extras);
            if let Some(end) = entry.lease_expires_ms {
                buf.put_u64_le(end);
            }
            entry.tuple.encode_into(&mut buf);
            if let Some(sealed) = &entry.sealed {
                put_sealed(&mut buf, sealed);
            }
            flush(&mut buf, false)?;
        }
        for (arrival, waiter) in space.waits.iter() {
            buf.put_u8(WAIT);
            buf.put_u64_le(arrival);
            buf.put_u64_le(waiter.client.0);
            buf.put_u64_le(waiter.seq.0);
            buf.put_u8(u8::from(waiter.take));
            buf.put_u64_le(waiter.deadline_ms);
            waiter.template.encode_into(&mut buf);
            flush(&mut buf, false)?;
        }
        for (revision, taken) in space.taken.iter() {
            buf.put_u8(TAKEN);
            buf.put_u64_le(revision);
            buf.put_u32_le(taken.taker);
            buf.put_u64_le(taken.expires_ms);
            put_sealed(&mut buf, &taken.sealed);
            flush(&mut buf, false)?;
        }
    }
    buf.put_u8(END);
    flush(&mut buf, true)
}

fn bad(what: impl std::fmt::Display) -> String {
    format!("space service snapshot: {what}")
}

fn counter(r: &mut Reader, what: &'static str) -> Result<u64, String> {
    let value = r.u64(what).map_err(bad)?;
    if value > COUNTER_MAX {
        return Err(bad(format!("{what} {value} is beyond {COUNTER_MAX}")));
    }
    Ok(value)
}

/// Replays a snapshot into a fresh state; the error says what is wrong with it.
pub(crate) fn read(bytes: &Bytes, limits: &SpaceLimits) -> Result<Restored, String> {
    let typed = &limits.typed;
    let mut r = Reader::new(bytes);
    let version = r.u8("the version").map_err(bad)?;
    if version != VERSION {
        return Err(bad(format!("unknown version {version}")));
    }
    let now_ms = r.u64("the agreed time").map_err(bad)?;
    let revision_floor = counter(&mut r, "the revision floor")?;
    let mut spaces: BTreeMap<String, Space> = BTreeMap::new();
    let mut counts = WaitCounts::default();
    // The space being read, and the part of it being read: 0 tuples, 1 waiting operations,
    // 2 taken sealed parts.
    let mut current: Option<Space> = None;
    let mut part = 0;
    loop {
        let tag = r.u8("a record").map_err(bad)?;
        match tag {
            END | CREATE | CREATE_PROTECTED => {
                if let Some(space) = current.take() {
                    spaces.insert(space.name.clone(), space);
                }
                if tag == END {
                    break;
                }
                let name = r.space_name().map_err(bad)?;
                if spaces
                    .last_key_value()
                    .is_some_and(|(last, _)| *last >= name)
                {
                    return Err(bad(format!("space `{name}` is out of name order")));
                }
                let creator = r.u32("a creator").map_err(bad)?;
                let next_revision = counter(&mut r, "a space's next revision")?;
                let next_wait_id = counter(&mut r, "a space's next arrival")?;
                let policy = Policy::decode_from(&mut r, typed).map_err(bad)?;
                policy.check(typed).map_err(bad)?;
                let protection = match tag {
                    CREATE_PROTECTED => {
                        let protection = Protections::decode_from(&mut r, typed).map_err(bad)?;
                        protection.check_policy(&policy).map_err(bad)?;
                        Some(protection)
                    }
                    _ => None,
                };
                let mut space = Space::new(name, policy, protection, creator, next_revision);
                space.next_wait_id = next_wait_id;
                current = Some(space);
                part = 0;
            }
            OUT => {
                let Some(space) = current.as_mut() else {
                    return Err(bad("a tuple before any space"));
                };
                if part > 0 {
                    return Err(bad("a tuple after waiting operations or taken tuples"));
                }
                let revision = r.u64("a revision").map_err(bad)?;
                let last = space.store.iter().next_back().map(|(r, _)| r);
                if last.is_some_and(|last| last >= revision) || revision >= space.next_revision {
                    return Err(bad(format!(
                        "revision {revision} in space `{}` is out of order",
                        space.name
                    )));
                }
                let owner = r.u32("an owner").map_err(bad)?;
                let extras = r.u8("a tuple's extras").map_err(bad)?;
                if extras > (EXTRA_LEASE | EXTRA_SEALED) {
                    return Err(bad(format!("unknown tuple extras {extras}")));
                }
                let lease_expires_ms = match extras & EXTRA_LEASE {
                    0 => None,
                    _ => Some(r.u64("a lease end").map_err(bad)?),
                };
                let tuple = r.tuple(typed).map_err(bad)?;
                let sealed = match extras & EXTRA_SEALED {
                    0 => None,
                    _ => Some(r.sealed(typed.tuple_bytes_max).map_err(bad)?),
                };
                space.store.insert(
                    revision,
                    Entry {
                        tuple,
                        owner,
                        lease_expires_ms,
                        sealed,
                    },
                );
            }
            WAIT => {
                let Some(space) = current.as_mut() else {
                    return Err(bad("a waiting operation before any space"));
                };
                if part > 1 {
                    return Err(bad("a waiting operation after taken tuples"));
                }
                part = 1;
                let arrival = r.u64("an arrival").map_err(bad)?;
                let last = space.waits.iter().next_back().map(|(id, _)| id);
                if last.is_some_and(|last| last >= arrival) || arrival >= space.next_wait_id {
                    return Err(bad(format!(
                        "waiting operation {arrival} in space `{}` is out of order",
                        space.name
                    )));
                }
                let client = ClientId(r.u64("a client").map_err(bad)?);
                let seq = RequestSeq(r.u64("a sequence number").map_err(bad)?);
                let take = r.flag("a wait's kind").map_err(bad)?;
                let deadline_ms = r.u64("a deadline").map_err(bad)?;
                let template = r.template(typed).map_err(bad)?;
                counts.add(client.principal());
                space.waits.push(
                    arrival,
                    Waiter {
                        client,
                        seq,
                        take,
                        template,
                        deadline_ms,
                    },
                );
            }
            TAKEN => {
                let Some(space) = current.as_mut() else {
                    return Err(bad("a taken tuple before any space"));
                };
                part = 2;
                let revision = r.u64("a revision").map_err(bad)?;
                let last = space.taken.iter().last().map(|(r, _)| r);
                if last.is_some_and(|last| last >= revision) || revision >= space.next_revision {
                    return Err(bad(format!(
                        "taken revision {revision} in space `{}` is out of order",
                        space.name
                    )));
                }
                let taken = Taken {
                    taker: r.u32("a taker").map_err(bad)?,
                    expires_ms: r.u64("an end").map_err(bad)?,
                    sealed: r.sealed(typed.tuple_bytes_max).map_err(bad)?,
                };
                if !space.taken.restore(revision, taken, limits) {
                    return Err(bad(format!(
                        "space `{}` keeps more taken tuples than taken_per_space_max or \
                         taken_bytes_max allow",
                        space.name
                    )));
                }
            }
            other => {
                return Err(bad(DecodeError::UnknownTag {
                    what: "record",
                    tag: other,
                }));
            }
        }
    }
    r.finish().map_err(bad)?;
    Ok(Restored {
        spaces,
        now_ms,
        revision_floor,
        counts,
    })
}
