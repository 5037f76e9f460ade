//! The link emulator: one thread per host reads the packets its interface sends, decides
//! each one's fate on the link to the addressed host, and writes it into that host's
//! interface at once or hands it to the delivery thread, which holds delayed packets in a
//! time-ordered queue (bounded: past [`HELD_PACKETS_MAX`] a delayed packet is dropped).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::warn;

use crate::links::{Counters, Fate, LinkTable};

/// Packets held for later delivery, across all links, before new delayed ones are dropped.
pub(crate) const HELD_PACKETS_MAX: usize = 100_000;

/// How often a reader thread looks at the stop flag when its host sends nothing.
const POLL: Duration = Duration::from_millis(100);

/// The first three bytes of every host's address: hosts live in `10.77.0.0/24`.
pub(crate) const SUBNET: [u8; 3] = [10, 77, 0];

/// The host an IPv4 packet is addressed to, if it is one of `hosts`.
pub(crate) fn destination(packet: &[u8], hosts: usize) -> Option<usize> {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return None;
    }
    let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]).octets();
    if dst[..3] != SUBNET || dst[3] == 0 {
        return None;
    }
    let host = usize::from(dst[3]) - 1;
    (host < hosts).then_some(host)
}

/// A packet waiting for its delivery time (ordered by time, then by arrival).
type Held = Reverse<(Instant, u64, usize, Vec<u8>)>;

/// State shared by the emulator's threads.
pub(crate) struct Shared {
    pub(crate) devices: Vec<tun::Device>,
    pub(crate) links: Mutex<LinkTable>,
    pub(crate) counters: Counters,
    held: Mutex<(BinaryHeap<Held>, u64)>,
    wake: Condvar,
    stop: AtomicBool,
}

/// The running emulator; dropping it stops its threads.
pub(crate) struct Switch {
    pub(crate) shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Switch {
    /// Starts forwarding between `devices` (device `i` is host `i`).
    pub(crate) fn start(devices: Vec<tun::Device>, seed: u64) -> std::io::Result<Switch> {
        let hosts = devices.len();
        let shared = Arc::new(Shared {
            devices,
            links: Mutex::new(LinkTable::new(hosts, seed)),
            counters: Counters::default(),
            held: Mutex::new((BinaryHeap::new(), 0)),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let mut threads = Vec::new();
        for host in 0..hosts {
            let sh = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("netns-h{host}"))
                    .spawn(move || read_host(&sh, host))?,
            );
        }
        let sh = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("netns-delay".into())
                .spawn(move || deliver_held(&sh))?,
        );
        Ok(Switch { shared, threads })
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Reads what `host` sends until the switch stops.
fn read_host(sh: &Shared, host: usize) {
    let hosts = sh.devices.len();
    let mut buf = vec![0u8; 65_536];
    while !sh.stop.load(Ordering::Relaxed) {
        let n = match sh.devices[host].recv_timeout(&mut buf, POLL) {
            Ok(0) => continue,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if !sh.stop.load(Ordering::Relaxed) {
                    warn!("host {host}'s interface cannot be read: {e}");
                }
                return;
            }
        };
        let packet = &buf[..n];
        let Some(to) = destination(packet, hosts) else {
            sh.counters.unroutable.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let now = Instant::now();
        let fate = sh
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .decide(host, to, n, now);
        let c = &sh.counters;
        match fate {
            Fate::Blocked => c.dropped_blocked.fetch_add(1, Ordering::Relaxed),
            Fate::Lost => c.dropped_lost.fetch_add(1, Ordering::Relaxed),
            Fate::QueueFull => c.dropped_queue.fetch_add(1, Ordering::Relaxed),
            Fate::Deliver(times) => {
                if times.len() > 1 {
                    c.duplicated.fetch_add(1, Ordering::Relaxed);
                }
                for at in times {
                    match at {
                        None => send(sh, to, packet),
                        Some(at) => hold(sh, at, to, packet),
                    }
                }
                0
            }
        };
    }
}

/// Writes `packet` into host `to`'s interface (a full device queue drops it, as a NIC would).
fn send(sh: &Shared, to: usize, packet: &[u8]) {
    if sh.devices[to].send(packet).is_ok() {
        sh.counters.delivered.fetch_add(1, Ordering::Relaxed);
    } else {
        sh.counters.dropped_queue.fetch_add(1, Ordering::Relaxed);
    }
}

/// Queues `packet` for delivery to `to` at `at`.
fn hold(sh: &Shared, at: Instant, to: usize, packet: &[u8]) {
    let mut held = sh.held.lock().unwrap_or_else(PoisonError::into_inner);
    if held.0.len() >= HELD_PACKETS_MAX {
        sh.counters.dropped_queue.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let seq = held.1;
    held.1 += 1;
    let earliest = held.0.peek().is_none_or(|Reverse((first, ..))| at < *first);
    held.0.push(Reverse((at, seq, to, packet.to_vec())));
    sh.counters.delayed.fetch_add(1, Ordering::Relaxed);
    drop(held);
    if earliest {
        sh.wake.notify_one();
    }
}

/// Delivers held packets when their time comes, until the switch stops.
fn deliver_held(sh: &Shared) {
    let mut held = sh.held.lock().unwrap_or_else(PoisonError::into_inner);
    while !sh.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let mut due = Vec::new();
        while let Some(Reverse((at, ..))) = held.0.peek() {
            if *at > now {
                break;
            }
            let Reverse((_, _, to, packet)) = held.0.pop().expect("peeked");
            due.push((to, packet));
        }
        if !due.is_empty() {
            drop(held);
            for (to, packet) in due {
                send(sh, to, &packet);
            }
            held = sh.held.lock().unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        let wait = held
            .0
            .peek()
            .map_or(POLL, |Reverse((at, ..))| at.saturating_duration_since(now));
        held = sh
            .wake
            .wait_timeout(held, wait.min(POLL))
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_to(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn packets_are_routed_by_their_destination_address() {
        assert_eq!(destination(&ipv4_to([10, 77, 0, 1]), 4), Some(0));
        assert_eq!(destination(&ipv4_to([10, 77, 0, 4]), 4), Some(3));
        assert_eq!(destination(&ipv4_to([10, 77, 0, 5]), 4), None);
        assert_eq!(destination(&ipv4_to([10, 77, 0, 0]), 4), None);
        assert_eq!(destination(&ipv4_to([10, 78, 0, 1]), 4), None);
        // IPv6, and runts, go nowhere.
        let mut v6 = ipv4_to([10, 77, 0, 1]);
        v6[0] = 0x60;
        assert_eq!(destination(&v6, 4), None);
        assert_eq!(destination(&[0x45; 10], 4), None);
    }
}
