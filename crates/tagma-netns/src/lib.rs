//! Simulated hosts for fault tests: each host is a Linux network namespace with one
//! interface, `eth0`, and a [`Network`] carries the packets between them through a link
//! emulator that can cut, drop, delay, reorder, duplicate and throttle them per directed
//! link.
//!
//! The interfaces are TUN devices: every IPv4 packet a host sends reaches the emulator (one
//! reader thread per host), which looks up the link from the sending host to the addressed
//! one, applies its [`LinkFaults`] with a seeded random generator, and writes the packet
//! (now, later, twice, or never) into the destination host's device. The kernel's own
//! traffic control (`tc netem`) would need the `sch_netem` module, which many kernels
//! (virtual machines' among them) do not build; the emulator needs only TUN and network
//! namespaces, and its faults are drawn from one seed.
//!
//! Hosts are `10.77.0.1`, `10.77.0.2`, … (host `i` is `10.77.0.(i+1)`); namespaces are
//! named `tagma-<pid>-<run>-h<i>` and are deleted, with every process left in them, when
//! the [`Network`] is dropped, on Ctrl-C or SIGTERM, and — for a run that was killed — by the
//! next [`Network::create`].

mod hosts;
mod links;
mod switch;

pub use hosts::{HOSTS_MAX, NetnsError, Network, host_addr};
pub use links::{LinkFaults, LinkStats};
