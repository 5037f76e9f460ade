//! The directed links between hosts: the faults each one applies and the decision, per
//! packet, of whether and when it arrives. Pure logic over a given time and a seeded random
//! generator, so that it is tested without any device.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a directed link does to the packets crossing it. The default is a perfect link.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkFaults {
    /// Every packet is dropped (a cut cable, a partition).
    pub blocked: bool,
    /// Probability, 0 to 1, that a packet is dropped.
    pub loss: f64,
    /// Probability, 0 to 1, that a packet arrives twice.
    pub duplicate: f64,
    /// Added one-way delay.
    pub delay: Duration,
    /// Each packet's delay is drawn uniformly from `delay ± jitter`, so that packets sent
    /// close together may arrive in the other order.
    pub jitter: Duration,
    /// Bandwidth in bits per second (`None`: unlimited). Packets queue behind each other; a
    /// packet that would wait more than [`RATE_QUEUE_MAX`] is dropped.
    pub rate_bps: Option<u64>,
}

/// The longest a packet waits behind others on a rate-limited link before it is dropped
/// instead (the queue of a router with a finite buffer).
pub const RATE_QUEUE_MAX: Duration = Duration::from_millis(500);

impl LinkFaults {
    /// A link that drops everything.
    pub fn cut() -> Self {
        LinkFaults {
            blocked: true,
            ..Self::default()
        }
    }

    /// Whether it changes nothing (packets are forwarded at once).
    pub fn is_perfect(&self) -> bool {
        *self == Self::default()
    }
}

/// Packets counted by the emulator since the network was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkStats {
    /// Packets written into a destination device (duplicates included).
    pub delivered: u64,
    /// Dropped on a blocked link.
    pub dropped_blocked: u64,
    /// Dropped at random (`loss`).
    pub dropped_lost: u64,
    /// Dropped because a rate-limited link's queue was full.
    pub dropped_queue: u64,
    /// Extra copies delivered (`duplicate`).
    pub duplicated: u64,
    /// Packets held back by a delay or a rate limit.
    pub delayed: u64,
    /// Packets addressed outside the hosts (dropped).
    pub unroutable: u64,
}

/// The counters behind [`LinkStats`], updated by the emulator's threads.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) delivered: AtomicU64,
    pub(crate) dropped_blocked: AtomicU64,
    pub(crate) dropped_lost: AtomicU64,
    pub(crate) dropped_queue: AtomicU64,
    pub(crate) duplicated: AtomicU64,
    pub(crate) delayed: AtomicU64,
    pub(crate) unroutable: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> LinkStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LinkStats {
            delivered: get(&self.delivered),
            dropped_blocked: get(&self.dropped_blocked),
            dropped_lost: get(&self.dropped_lost),
            dropped_queue: get(&self.dropped_queue),
            duplicated: get(&self.duplicated),
            delayed: get(&self.delayed),
            unroutable: get(&self.unroutable),
        }
    }
}

/// What happens to one packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    Blocked,
    Lost,
    QueueFull,
    /// Delivered at each of these times (one, or two for a duplicate); `None` is now.
    Deliver(Vec<Option<Instant>>),
}

/// Every directed link of `hosts` hosts, with the state a rate limit needs, and the
/// generator the random faults draw from.
pub(crate) struct LinkTable {
    hosts: usize,
    faults: Vec<LinkFaults>,
    /// Per link: when the last queued packet has finished crossing a rate-limited link.
    busy_until: Vec<Option<Instant>>,
    rng: fastrand::Rng,
}

impl LinkTable {
    pub(crate) fn new(hosts: usize, seed: u64) -> Self {
        LinkTable {
            hosts,
            faults: vec![LinkFaults::default(); hosts * hosts],
            busy_until: vec![None; hosts * hosts],
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    fn index(&self, from: usize, to: usize) -> usize {
        debug_assert!(from < self.hosts && to < self.hosts);
        from * self.hosts + to
    }

    pub(crate) fn set(&mut self, from: usize, to: usize, faults: LinkFaults) {
        let i = self.index(from, to);
        self.faults[i] = faults;
        if faults.rate_bps.is_none() {
            self.busy_until[i] = None;
        }
    }

    pub(crate) fn get(&self, from: usize, to: usize) -> LinkFaults {
        self.faults[self.index(from, to)]
    }

    /// Decides the fate of a packet of `bytes` sent from `from` to `to` at `now`.
    pub(crate) fn decide(&mut self, from: usize, to: usize, bytes: usize, now: Instant) -> Fate {
        let i = self.index(from, to);
        let f = self.faults[i];
        if f.blocked {
            return Fate::Blocked;
        }
        if f.is_perfect() {
            return Fate::Deliver(vec![None]);
        }
        if f.loss > 0.0 && self.rng.f64() < f.loss {
            return Fate::Lost;
        }
        // A rate limit: the packet starts crossing when the previous one has finished.
        let mut sent = now;
        if let Some(bps) = f.rate_bps {
            let start = self.busy_until[i].map_or(now, |b| b.max(now));
            if start.duration_since(now) > RATE_QUEUE_MAX {
                return Fate::QueueFull;
            }
            let crossing =
                Duration::from_nanos((bytes as u64 * 8).saturating_mul(1_000_000_000) / bps.max(1));
            sent = start + crossing;
            self.busy_until[i] = Some(sent);
        }
        let copies = if f.duplicate > 0.0 && self.rng.f64() < f.duplicate {
            2
        } else {
            1
        };
        let times = (0..copies)
            .map(|_| {
                let at = sent + self.one_delay(f);
                (at > now).then_some(at)
            })
            .collect();
        Fate::Deliver(times)
    }

    /// A delay drawn uniformly from `delay ± jitter` (never below zero).
    fn one_delay(&mut self, f: LinkFaults) -> Duration {
        if f.jitter.is_zero() {
            return f.delay;
        }
        let jitter = f.jitter.as_nanos() as i128;
        let offset = self.rng.i128(-jitter..=jitter);
        let nanos = (f.delay.as_nanos() as i128 + offset).max(0);
        Duration::from_nanos(nanos as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_perfect_link_delivers_at_once_and_a_cut_one_never() {
        let mut t = LinkTable::new(3, 1);
        let now = Instant::now();
        assert_eq!(t.decide(0, 1, 100, now), Fate::Deliver(vec![None]));
        t.set(0, 1, LinkFaults::cut());
        assert_eq!(t.decide(0, 1, 100, now), Fate::Blocked);
        // Directed: the reverse link still works.
        assert_eq!(t.decide(1, 0, 100, now), Fate::Deliver(vec![None]));
    }

    #[test]
    fn loss_and_duplication_follow_their_probabilities() {
        let mut t = LinkTable::new(2, 7);
        t.set(
            0,
            1,
            LinkFaults {
                loss: 0.05,
                duplicate: 0.01,
                ..LinkFaults::default()
            },
        );
        let now = Instant::now();
        let (mut lost, mut dup) = (0, 0);
        for _ in 0..100_000 {
            match t.decide(0, 1, 100, now) {
                Fate::Lost => lost += 1,
                Fate::Deliver(times) if times.len() == 2 => dup += 1,
                Fate::Deliver(_) => {}
                other => panic!("{other:?}"),
            }
        }
        assert!((4_500..5_500).contains(&lost), "{lost} lost of 100,000");
        assert!((800..1_200).contains(&dup), "{dup} duplicated of 100,000");
    }

    #[test]
    fn jittered_delays_stay_in_their_range_and_reorder_packets() {
        let mut t = LinkTable::new(2, 3);
        t.set(
            0,
            1,
            LinkFaults {
                delay: Duration::from_millis(30),
                jitter: Duration::from_millis(20),
                ..LinkFaults::default()
            },
        );
        let now = Instant::now();
        let times: Vec<Instant> = (0..1_000)
            .map(|_| match t.decide(0, 1, 100, now) {
                Fate::Deliver(times) => times[0].expect("delayed"),
                other => panic!("{other:?}"),
            })
            .collect();
        for at in &times {
            let d = at.duration_since(now);
            assert!(
                d >= Duration::from_millis(10) && d <= Duration::from_millis(50),
                "{d:?}"
            );
        }
        assert!(
            times.windows(2).any(|w| w[1] < w[0]),
            "no packet overtook another"
        );
    }

    #[test]
    fn a_rate_limit_spaces_packets_and_drops_past_its_queue() {
        let mut t = LinkTable::new(2, 3);
        t.set(
            0,
            1,
            LinkFaults {
                rate_bps: Some(1_000_000),
                ..LinkFaults::default()
            },
        );
        let now = Instant::now();
        // 1,250 bytes = 10,000 bits = 10 ms at 1 Mbit/s.
        let first = t.decide(0, 1, 1_250, now);
        let second = t.decide(0, 1, 1_250, now);
        assert_eq!(
            first,
            Fate::Deliver(vec![Some(now + Duration::from_millis(10))])
        );
        assert_eq!(
            second,
            Fate::Deliver(vec![Some(now + Duration::from_millis(20))])
        );
        let fates: Vec<Fate> = (0..100).map(|_| t.decide(0, 1, 1_250, now)).collect();
        assert!(fates.contains(&Fate::QueueFull));
        // Lifting the limit forgets the queue.
        t.set(0, 1, LinkFaults::default());
        assert_eq!(t.decide(0, 1, 1_250, now), Fate::Deliver(vec![None]));
    }
}
