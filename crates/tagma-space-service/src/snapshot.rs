//! The service's snapshot: a canonical stream of records that one replay routine reads, in
//! the manner of DDS's checkpoints (a create per space, an out per tuple), extended with
//! what blocking operations and leases need — each tuple's revision, owner and absolute lease
//! end, each waiting operation in arrival order with its request and deadline, and the
//! counters.
//!
//! ```text
//! snapshot := version u8 (1) | now_ms u64 | revision_floor u64 | record* | 0
//! record   := 1 | name | creator u32 | next_revision u64 | next_wait_id u64 | policy   create
//!           | 2 | revision u64 | owner u32 | lease end (0, or 1 | u64) | tuple         out
//!           | 3 | arrival u64 | client u64 | seq u64 | kind u8 (0 rd, 1 in)
//!               | deadline_ms u64 | template                                          wait
//! ```
//!
//! Spaces come in name order, each create followed by its tuples (by revision) and then its
//! waiting operations (by arrival). Layouts of names, policies, tuples and templates are the
//! protocol's (`tagma_space::codec`). Reading checks that order, so the bytes of a state
//! are unique, and rejects anything else with an error, never a panic.

use std::collections::BTreeMap;
use std::io::{self, Write};

use bytes::{BufMut, Bytes, BytesMut};
use tagma_space::codec::{Reader, put_opt_u64, put_space_name};
use tagma_space::{DecodeError, Policy};
use tagma_wire::{ClientId, RequestSeq};

use crate::limits::SpaceLimits;
use crate::space::Space;
use crate::store::Entry;
use crate::waits::{WaitCounts, Waiter};

const VERSION: u8 = 1;
const END: u8 = 0;
const CREATE: u8 = 1;
const OUT: u8 = 2;
const WAIT: u8 = 3;
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
        buf.put_u8(CREATE);
        put_space_name(&mut buf, &space.name);
        buf.put_u32_le(space.creator);
        buf.put_u64_le(space.next_revision);
        buf.put_u64_le(space.next_wait_id);
        space.policy.encode_into(&mut buf);
        flush(&mut buf, false)?;
        for (revision, entry) in space.store.iter() {
            buf.put_u8(OUT);
            buf.put_u64_le(revision);
            buf.put_u32_le(entry.owner);
            put_opt_u64(&mut buf, entry.lease_expires_ms);
            entry.tuple.encode_into(&mut buf);
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
    // The space being read, and whether its waiting operations have begun.
    let mut current: Option<Space> = None;
    let mut in_waits = false;
    loop {
        let tag = r.u8("a record").map_err(bad)?;
        match tag {
            END | CREATE => {
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
                let mut space = Space::new(name, policy, creator, next_revision);
                space.next_wait_id = next_wait_id;
                current = Some(space);
                in_waits = false;
            }
            OUT => {
                let Some(space) = current.as_mut() else {
                    return Err(bad("a tuple before any space"));
                };
                if in_waits {
                    return Err(bad("a tuple after waiting operations"));
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
                let lease_expires_ms = r.opt_u64("a lease end").map_err(bad)?;
                let tuple = r.tuple(typed).map_err(bad)?;
                space.store.insert(
                    revision,
                    Entry {
                        tuple,
                        owner,
                        lease_expires_ms,
                    },
                );
            }
            WAIT => {
                let Some(space) = current.as_mut() else {
                    return Err(bad("a waiting operation before any space"));
                };
                in_waits = true;
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
