//! The nodes' side of the simulation: each node's protocol state machine with its inbox,
//! uplink, timer, publishes and faults ([`Slot`]), and a run of consecutive nodes that one
//! thread takes through a window ([`Chunk`]): the mail on its way to them
//! ([`crate::calendar`]), their events in time order, node by node, what they send put in
//! mailbags by receiving chunk, what they count and check kept apart until the window ends
//! ([`crate::engine`] merges it all in a fixed order).
//!
//! Randomness is per node (the losses of its sends, the operations it publishes), drawn in
//! the node's own order of events, so neither the order in which nodes run nor their split
//! into chunks changes a run.

use tagma_vcube::{NodeId, TopicId};

use crate::calendar::Calendar;
use crate::checker::{Checker, Clocks, Findings};
use crate::inbox::{Inbox, Mail};
use crate::metrics::{Metrics, Tally};
use crate::proto::{Effect, Protocol};
use crate::workload::{Plan, Workload};

/// Builds node `id` (`joining`: it starts late, without state) at `now_ms`.
pub type Factory<'a, P> = dyn Fn(NodeId, bool, u64) -> P + Send + Sync + 'a;

/// One node's part of the simulation.
pub struct Slot<P: Protocol> {
    /// The node, while it runs.
    pub protocol: Option<P>,
    inbox: Inbox<P::Message>,
    /// When the node's uplink is free to send the next message.
    uplink_free_us: u64,
    /// When the node's timer fires (`u64::MAX`: never).
    timer_us: u64,
    /// Its next publish on each topic it publishes on (`u64::MAX`: no more).
    publishes: Vec<(u64, TopicId)>,
    crash_us: u64,
    join_us: u64,
    /// A subscription change: when, on which topic, and whether it subscribes.
    change: Option<(u64, TopicId, bool)>,
    /// Messages sent so far (numbering them).
    sent: u64,
    loss_rng: fastrand::Rng,
    /// Draws the operations, apart from the losses, so every protocol publishes the same.
    op_rng: fastrand::Rng,
    /// What the node delivered, for the checker.
    pub clocks: Clocks,
}

impl<P: Protocol> Slot<P> {
    /// Node `node`'s slot; it spends `receive_cost_us` on each message.
    pub fn new(seed: u64, node: NodeId, clocks: Clocks, receive_cost_us: u64) -> Slot<P> {
        Slot {
            protocol: None,
            inbox: Inbox::new(receive_cost_us),
            uplink_free_us: 0,
            timer_us: u64::MAX,
            publishes: Vec::new(),
            crash_us: u64::MAX,
            join_us: u64::MAX,
            change: None,
            sent: 0,
            loss_rng: fastrand::Rng::with_seed(mix(seed ^ 0x5eed, node)),
            op_rng: fastrand::Rng::with_seed(mix(seed ^ 0x0b5, node)),
            clocks,
        }
    }

    /// Publishes on `topic` from `first_us` on, once per interval.
    pub fn publish_from(&mut self, first_us: u64, topic: TopicId) {
        self.publishes.push((first_us, topic));
    }

    pub fn crash_at(&mut self, at_us: u64) {
        self.crash_us = at_us;
    }

    pub fn join_at(&mut self, at_us: u64) {
        self.join_us = at_us;
    }

    /// Subscribes to `topic` (`subscribe`), or unsubscribes from it, at `at_us`.
    pub fn change_at(&mut self, at_us: u64, topic: TopicId, subscribe: bool) {
        self.change = Some((at_us, topic, subscribe));
    }
}

/// A seed of its own for each node.
fn mix(seed: u64, node: NodeId) -> u64 {
    let mut z = seed ^ u64::from(node.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What every chunk reads while it runs a window.
pub struct Shared<'s, P: Protocol> {
    pub workload: &'s Workload,
    pub plan: &'s Plan,
    pub factory: &'s Factory<'s, P>,
    /// Nodes per chunk (the last one may hold fewer), to address mail.
    pub chunk_len: usize,
    pub end_publish_us: u64,
    pub interval_us: u64,
    /// The least delay from sending a message to its arrival.
    pub arrival_min_us: u64,
}

/// What the checks and counts of a window read: the operations published before it.
#[derive(Clone, Copy)]
pub struct Judges<'j> {
    pub checker: &'j Checker,
    pub metrics: &'j Metrics,
}

/// What a node does next; at equal times in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Next {
    Crash,
    Join,
    Message,
    /// The publish at this index of the node's `publishes`.
    Publish(usize),
    /// The node's subscription change.
    Change,
    Timer,
}

/// Consecutive nodes, run by one thread.
pub struct Chunk<P: Protocol> {
    /// The id of the first node.
    first: usize,
    pub slots: Vec<Slot<P>>,
    /// A lower bound of when each node has its next event, so that a window skips idle
    /// nodes without touching their state.
    next_us: Vec<u64>,
    /// Mail on its way to these nodes, not yet in their inboxes.
    calendar: Calendar<P::Message>,
    /// By node: messages in the calendar, and a lower bound of when the first arrives.
    unplaced: Vec<u32>,
    unplaced_from_us: Vec<u64>,
    /// By node: whether messages to it may still be handled (it runs, or will start: a
    /// crashed node's are dropped).
    reachable: Vec<bool>,
    /// The calendar's mail due in the window, by node (room kept between windows).
    due: Vec<Mail<P::Message>>,
    /// Mail sent in the window, by receiving chunk.
    pub outbox: Vec<Vec<Mail<P::Message>>>,
    pub tally: Tally,
    pub findings: Findings,
    effects: Vec<Effect<P::Message>>,
    now_us: u64,
}

impl<P: Protocol> Chunk<P> {
    /// Nodes `first..` in `slots`, among `chunks` chunks; messages reach them at least
    /// `arrival_min_us` after they are sent.
    pub fn new(first: usize, slots: Vec<Slot<P>>, chunks: usize, arrival_min_us: u64) -> Chunk<P> {
        let n = slots.len();
        Chunk {
            first,
            next_us: vec![0; n],
            calendar: Calendar::new(arrival_min_us),
            unplaced: vec![0; n],
            unplaced_from_us: vec![u64::MAX; n],
            reachable: vec![true; n],
            due: Vec::new(),
            slots,
            outbox: (0..chunks).map(|_| Vec::new()).collect(),
            tally: Tally::default(),
            findings: Findings::default(),
            effects: Vec::new(),
            now_us: 0,
        }
    }

    /// Starts the nodes that start with the run and finds every node's first event.
    pub fn start(&mut self, shared: &Shared<P>) {
        for i in 0..self.slots.len() {
            if self.slots[i].join_us == u64::MAX {
                self.start_node(shared, i, false);
            }
            self.next_us[i] = self.next_event(i).0;
        }
    }

    /// When the earliest event of these nodes may come.
    pub fn next_us(&self) -> u64 {
        self.next_us.iter().copied().min().unwrap_or(u64::MAX)
    }

    /// Runs these nodes' events of the window from `start_us` to `end_us`.
    pub fn run_window(&mut self, shared: &Shared<P>, judges: Judges, start_us: u64, end_us: u64) {
        // Every message arriving before the horizon is in: the rest of the window sends
        // none that arrives sooner.
        let horizon_us = start_us.saturating_add(shared.arrival_min_us);
        let mut due = std::mem::take(&mut self.due);
        self.calendar.take_before(horizon_us, &mut due);
        // By node, so that each node's messages go to its inbox just before it runs.
        due.sort_unstable_by_key(|m| m.to);
        let mut due_mail = due.drain(..).peekable();
        for i in 0..self.slots.len() {
            let to = NodeId((self.first + i) as u32);
            let mut placed = 0;
            if due_mail.peek().is_some_and(|m| m.to == to) {
                let mine = std::iter::from_fn(|| due_mail.next_if(|m| m.to == to));
                let mine = mine.inspect(|_| placed += 1);
                if self.reachable[i] {
                    self.slots[i].inbox.place(mine);
                } else {
                    mine.for_each(drop); // crashed: the messages are lost
                }
            }
            self.unplaced[i] -= placed;
            // What is left arrives from the horizon on.
            self.unplaced_from_us[i] = if self.unplaced[i] > 0 {
                self.unplaced_from_us[i].max(horizon_us)
            } else {
                u64::MAX
            };
            if self.next_us[i] < end_us {
                self.run_node(shared, judges, i, end_us);
            }
        }
        drop(due_mail);
        self.due = due;
    }

    /// Takes in mail for these nodes.
    pub fn receive(&mut self, receive_cost_us: u64, bag: &mut Vec<Mail<P::Message>>) {
        for m in bag.drain(..) {
            let i = m.to.0 as usize - self.first;
            if !self.reachable[i] {
                continue; // crashed: the message is lost
            }
            self.unplaced[i] += 1;
            self.unplaced_from_us[i] = self.unplaced_from_us[i].min(m.arrive_us);
            self.next_us[i] = self.next_us[i].min(m.arrive_us + receive_cost_us);
            self.calendar.push(m);
        }
    }

    fn start_node(&mut self, shared: &Shared<P>, i: usize, joining: bool) {
        let id = NodeId((self.first + i) as u32);
        let p = (shared.factory)(id, joining, self.now_us / 1_000);
        self.slots[i].protocol = Some(p);
        self.schedule_timer(i);
    }

    /// Sets the node's timer to its protocol's next timeout.
    fn schedule_timer(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.timer_us = match slot.protocol.as_ref() {
            Some(p) => p.next_timeout_ms().saturating_mul(1_000).max(self.now_us),
            None => u64::MAX,
        };
    }

    /// The node's next event among those in order: when, and what.
    fn next_event(&self, i: usize) -> (u64, Next) {
        let slot = &self.slots[i];
        let mut next = (u64::MAX, Next::Timer);
        let mut consider = |at: u64, what: Next| {
            if at != u64::MAX && (at, what) < next {
                next = (at, what);
            }
        };
        if slot.protocol.is_some() {
            consider(slot.crash_us, Next::Crash);
            consider(slot.timer_us, Next::Timer);
            if let Some((at, _, _)) = slot.change {
                consider(at, Next::Change);
            }
        } else {
            consider(slot.join_us, Next::Join);
        }
        if let Some(handle_us) = slot.inbox.next_handle_us() {
            consider(handle_us, Next::Message);
        }
        for (k, &(at, _)) in slot.publishes.iter().enumerate() {
            consider(at, Next::Publish(k));
        }
        next
    }

    /// Runs node `i`'s events of the window, up to `end_us`.
    fn run_node(&mut self, shared: &Shared<P>, judges: Judges, i: usize, end_us: u64) {
        let receive_cost_us = shared.workload.link.receive_cost_us;
        let me = NodeId((self.first + i) as u32);
        loop {
            let (at_us, next) = self.next_event(i);
            if at_us >= end_us {
                let incoming_us = self.unplaced_from_us[i].saturating_add(receive_cost_us);
                self.next_us[i] = at_us.min(incoming_us);
                return;
            }
            self.now_us = at_us;
            let now_ms = at_us / 1_000;
            let slot = &mut self.slots[i];
            match next {
                Next::Message => {
                    if let Some(after) = slot.inbox.second() {
                        P::warm(after);
                    }
                    let (_, from, message) = slot.inbox.pop().expect("a message");
                    if let Some(p) = slot.protocol.as_mut() {
                        p.handle(now_ms, from, message, &mut self.effects);
                    }
                }
                Next::Timer => {
                    slot.timer_us = u64::MAX;
                    if let Some(p) = slot.protocol.as_mut()
                        && p.next_timeout_ms() <= now_ms
                    {
                        p.tick(now_ms, &mut self.effects);
                    }
                }
                Next::Publish(k) => {
                    let topic = slot.publishes[k].1;
                    slot.publishes[k].0 = if at_us < shared.end_publish_us {
                        at_us + shared.interval_us
                    } else {
                        u64::MAX
                    };
                    if let Some(p) = slot.protocol.as_mut() {
                        let draw = slot.op_rng.u64(..);
                        match p.publish(now_ms, topic, draw, &mut self.effects) {
                            Some((id, bytes)) => {
                                let members = &shared.plan.subscriptions[&topic];
                                let receivers = members.len().saturating_sub(1) as u32;
                                let found = &mut self.findings;
                                (judges.checker).published(&mut slot.clocks, topic, id, found);
                                let vector_clock =
                                    judges.checker.vector_clock_len(&slot.clocks, topic);
                                (self.tally).published(
                                    topic,
                                    id,
                                    at_us,
                                    receivers,
                                    bytes,
                                    vector_clock,
                                );
                            }
                            None => self.tally.refused += 1,
                        }
                    }
                }
                Next::Change => {
                    let (_, topic, subscribe) = slot.change.take().expect("a change");
                    if let Some(p) = slot.protocol.as_mut() {
                        if p.change_subscription(now_ms, topic, subscribe, &mut self.effects) {
                            self.tally.changes += 1;
                        } else {
                            self.tally.changes_refused += 1;
                        }
                    }
                }
                Next::Crash => {
                    slot.protocol = None;
                    slot.crash_us = u64::MAX;
                    slot.inbox.clear();
                    self.reachable[i] = false;
                }
                Next::Join => {
                    slot.join_us = u64::MAX;
                    self.start_node(shared, i, true);
                    continue;
                }
            }
            self.apply_effects(shared, judges, i, me);
        }
    }

    /// Carries out what node `me` (the `i`-th here) did.
    fn apply_effects(&mut self, shared: &Shared<P>, judges: Judges, i: usize, me: NodeId) {
        let link = &shared.workload.link;
        let slot = &mut self.slots[i];
        for effect in self.effects.drain(..) {
            match effect {
                Effect::Send { to, message } => {
                    let sizes = P::sizes(&message);
                    self.tally.sent(&sizes);
                    let depart =
                        slot.uplink_free_us.max(self.now_us) + link.transmit_us(sizes.total());
                    slot.uplink_free_us = depart;
                    if link.loss > 0.0 && slot.loss_rng.f64() < link.loss {
                        continue;
                    }
                    slot.sent += 1;
                    let arrive_us = depart + link.latency_us(shared.workload.seed, me, to);
                    self.outbox[to.0 as usize / shared.chunk_len].push(Mail {
                        to,
                        seq: slot.sent,
                        from: me,
                        arrive_us,
                        message,
                    });
                }
                Effect::Deliver { topic, id, hops } => {
                    let found = &mut self.findings;
                    (judges.checker).delivered(me, &mut slot.clocks, topic, id, found);
                    (self.tally).delivered(judges.metrics, me, topic, id, hops, self.now_us);
                }
                Effect::Installed { topic, delivered } => {
                    let found = &mut self.findings;
                    (judges.checker).installed(&mut slot.clocks, topic, &delivered, found);
                    self.tally.snapshots += 1;
                }
            }
        }
        self.schedule_timer(i);
    }
}
