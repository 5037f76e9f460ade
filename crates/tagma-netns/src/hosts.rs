//! Creating and deleting the hosts: a network namespace per host, its TUN interface, and
//! the clean-up that runs on every way out (drop, Ctrl-C, SIGTERM, and a sweep of the
//! namespaces of runs that were killed).

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once, PoisonError};

use tracing::debug;

use crate::links::{LinkFaults, LinkStats};
use crate::switch::{SUBNET, Switch};

/// The most hosts a network has (addresses `10.77.0.1` to `10.77.0.250`).
pub const HOSTS_MAX: usize = 250;

/// Where `ip netns` keeps the namespaces it names.
const NETNS_DIR: &str = "/run/netns";

/// What went wrong building or driving the hosts.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error(
        "network namespaces need root — fix: run as root (for example with sudo), or leave out --netns"
    )]
    NotRoot,
    #[error("`ip` (iproute2) is not installed — fix: apt-get install iproute2")]
    NoIpTool,
    #[error("{hosts} hosts asked for; a network has 1 to {HOSTS_MAX}")]
    Hosts { hosts: usize },
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error(
        "cannot create the interface of host {host} (a TUN device): {why} — fix: load the tun \
         module (modprobe tun) or create its device node (mkdir -p /dev/net && mknod \
         /dev/net/tun c 10 200)"
    )]
    Tun { host: usize, why: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The address of host `i`.
pub fn host_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(SUBNET[0], SUBNET[1], SUBNET[2], (i + 1) as u8)
}

/// Namespaces alive in this process, deleted by the Ctrl-C / SIGTERM handler.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Networks created by this process so far (part of their names).
static RUNS: AtomicU32 = AtomicU32::new(0);

/// Hosts in network namespaces joined by the link emulator. Dropping it kills every process
/// left in the namespaces and deletes them.
pub struct Network {
    names: Vec<String>,
    switch: Option<Switch>,
}

impl Network {
    /// Creates `hosts` hosts (host `i` at [`host_addr`]`(i)`), every link perfect; `seed`
    /// drives the random faults.
    pub fn create(hosts: usize, seed: u64) -> Result<Network, NetnsError> {
        if !(1..=HOSTS_MAX).contains(&hosts) {
            return Err(NetnsError::Hosts { hosts });
        }
        if !rustix::process::geteuid().is_root() {
            return Err(NetnsError::NotRoot);
        }
        match Command::new("ip").arg("-V").stdout(Stdio::null()).status() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(NetnsError::NoIpTool),
            _ => {}
        }
        install_signal_handler();
        sweep_dead_runs();
        let pid = std::process::id();
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let mut network = Network {
            names: Vec::new(),
            switch: None,
        };
        let mut devices = Vec::with_capacity(hosts);
        for i in 0..hosts {
            let name = format!("tagma-{pid}-{run}-h{i}");
            ip(&["netns", "add", &name])?;
            LIVE.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(name.clone());
            network.names.push(name.clone());
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
            // Created here, moved into the namespace with its descriptor still open, renamed.
            let dev_name = format!("tg{pid:x}r{run}h{i}");
            let mut config = tun::Configuration::default();
            config.tun_name(&dev_name).layer(tun::Layer::L3);
            config.platform_config(|p| {
                p.ensure_root_privileges(false);
            });
            let device = tun::create(&config).map_err(|e| NetnsError::Tun {
                host: i,
                why: e.to_string(),
            })?;
            devices.push(device);
            ip(&["link", "set", &dev_name, "netns", &name])?;
            ip(&["-n", &name, "link", "set", &dev_name, "name", "eth0"])?;
            let addr = format!("{}/24", host_addr(i));
            ip(&["-n", &name, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &name, "link", "set", "eth0", "mtu", "1500", "up"])?;
        }
        network.switch = Some(Switch::start(devices, seed)?);
        debug!(hosts, "network namespaces up");
        Ok(network)
    }

    /// How many hosts there are.
    pub fn hosts(&self) -> usize {
        self.names.len()
    }

    /// The namespace of host `i` (for `ip netns exec`).
    pub fn netns(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// A command that runs `program` on host `i`.
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.names[i]]).arg(program);
        cmd
    }

    /// Moves the calling thread onto host `i`: the sockets it opens from now on, and those
    /// of the threads it starts, are that host's.
    pub fn enter(&self, i: usize) -> Result<(), NetnsError> {
        let file = std::fs::File::open(format!("{NETNS_DIR}/{}", self.names[i]))?;
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(std::io::Error::from)?;
        Ok(())
    }

    /// Sets what the link from host `from` to host `to` does.
    pub fn set_link(&self, from: usize, to: usize, faults: LinkFaults) {
        self.table().set(from, to, faults);
    }

    /// What the link from `from` to `to` does now.
    pub fn link(&self, from: usize, to: usize) -> LinkFaults {
        self.table().get(from, to)
    }

    /// Sets both directions between every host of `a` and every host of `b`.
    pub fn set_between(&self, a: &[usize], b: &[usize], faults: LinkFaults) {
        let mut table = self.table();
        for &x in a {
            for &y in b {
                if x != y {
                    table.set(x, y, faults);
                    table.set(y, x, faults);
                }
            }
        }
    }

    /// Sets every link.
    pub fn set_all(&self, faults: LinkFaults) {
        let all: Vec<usize> = (0..self.hosts()).collect();
        self.set_between(&all, &all, faults);
    }

    /// Makes every link perfect again.
    pub fn heal(&self) {
        self.set_all(LinkFaults::default());
    }

    /// Packets counted so far.
    pub fn stats(&self) -> LinkStats {
        self.switch
            .as_ref()
            .map(|s| s.shared.counters.snapshot())
            .unwrap_or_default()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, crate::links::LinkTable> {
        self.switch
            .as_ref()
            .expect("a created network has its switch")
            .shared
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // The switch stops first (its devices close), then the namespaces go.
        self.switch = None;
        for name in &self.names {
            delete_namespace(name);
        }
        LIVE.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|n| !self.names.contains(n));
    }
}

/// Runs `ip ARGS`, failing with its error output.
fn ip(args: &[&str]) -> Result<(), NetnsError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(NetnsError::Command {
        command: format!("ip {}", args.join(" ")),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Kills every process in namespace `name` but this one (whose threads may have entered
/// it) and deletes it (errors ignored: this is clean-up).
fn delete_namespace(name: &str) {
    let me = std::process::id();
    if let Ok(out) = Command::new("ip").args(["netns", "pids", name]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let pid = pid.parse::<u32>().ok().filter(|&p| p != me);
            if let Some(pid) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
    let _ = Command::new("ip")
        .args(["netns", "del", name])
        .stderr(Stdio::null())
        .status();
}

/// Deletes the namespaces left by runs whose process no longer exists (killed before they
/// could clean up).
fn sweep_dead_runs() {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(pid) = name
            .strip_prefix("tagma-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            debug!(namespace = name, "deleting a namespace a killed run left");
            delete_namespace(&name);
        }
    }
}

/// On Ctrl-C or SIGTERM: delete this process's namespaces (killing what runs in them), then
/// exit with 130.
fn install_signal_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            let names = LIVE.lock().unwrap_or_else(PoisonError::into_inner).clone();
            for name in &names {
                delete_namespace(name);
            }
            eprintln!("interrupted: deleted {} network namespaces", names.len());
            std::process::exit(130);
        });
        if let Err(e) = installed {
            tracing::warn!("no clean-up on Ctrl-C: {e}");
        }
    });
}
