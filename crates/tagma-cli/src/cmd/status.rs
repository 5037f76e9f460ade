//! `tagma status`: every replica of a cluster directory — whether it answers, the leader,
//! regency and view it has installed, how far it has executed and decided, whether it is
//! behind the others, whether its state is unconfirmed (a lone restart whose state vote was
//! inconclusive, until its peers' checkpoints settle it), and its state digest. Positions come from each replica's metrics
//! endpoint, which answers whether or not a quorum is up; digests come from the replicas'
//! answers to a client's state query when enough of them are up for a client to connect.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use tagma_client::{ClientOptions, Proxy};
use tagma_crypto::IdentityKey;
use tagma_node::cluster_dir::{self, DEFAULT_CLIENT_PRINCIPAL};
use tagma_wire::{ReplicaId, StateInfo};

/// `tagma status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// The cluster directory (written by `tagma init`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// What one replica reported (`None`: it did not say).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReplicaStatus {
    pub id: u32,
    pub addr: String,
    /// Whether it answered on its metrics endpoint or to the state query.
    pub answering: bool,
    pub leader: Option<u64>,
    pub regency: Option<u64>,
    pub view: Option<u64>,
    pub executed_instances: Option<u64>,
    pub decided_instances: Option<u64>,
    pub executed_requests: Option<u64>,
    pub state_digest: Option<String>,
    /// Instances it has executed fewer than the replica that executed most.
    pub behind_by: Option<u64>,
    /// Whether its state is unconfirmed: the state vote after its restart was inconclusive
    /// and its peers' checkpoints have not confirmed or contradicted it yet.
    pub state_unconfirmed: Option<bool>,
}

/// The whole cluster's status.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterStatus {
    pub replicas: Vec<ReplicaStatus>,
    pub answering: usize,
    /// Why no state digests are shown (no client could connect), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digests_unavailable: Option<String>,
}

/// Fills in `behind_by` from the answering replicas' executed positions.
pub fn mark_behind(replicas: &mut [ReplicaStatus]) {
    let highest = replicas.iter().filter_map(|r| r.executed_instances).max();
    for r in replicas {
        r.behind_by = match (highest, r.executed_instances) {
            (Some(h), Some(mine)) => Some(h.saturating_sub(mine)),
            _ => None,
        };
    }
}

/// The human table.
pub fn table(status: &ClusterStatus) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} of {} replicas answering",
        status.answering,
        status.replicas.len()
    );
    let num = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
    for r in &status.replicas {
        let _ = write!(s, "replica {} ({}): ", r.id, r.addr);
        if !r.answering {
            let _ = writeln!(s, "NOT ANSWERING");
            continue;
        }
        let _ = write!(
            s,
            "leader {}, regency {}, view {}; executed {} instances",
            num(r.leader),
            num(r.regency),
            num(r.view),
            num(r.executed_instances)
        );
        if let Some(requests) = r.executed_requests {
            let _ = write!(s, " / {requests} requests");
        }
        let _ = write!(s, ", decided {}", num(r.decided_instances));
        match r.behind_by {
            Some(0) | None => {}
            Some(1) => {
                let _ = write!(s, "; behind by 1 instance");
            }
            Some(n) => {
                let _ = write!(s, "; behind by {n} instances");
            }
        }
        if let Some(d) = &r.state_digest {
            let _ = write!(s, "; state digest {d}");
        }
        if r.state_unconfirmed == Some(true) {
            let _ = write!(
                s,
                "; STATE UNCONFIRMED (restarted alone: its state is checked against its peers' checkpoints as they come)"
            );
        }
        s.push('\n');
    }
    if let Some(why) = &status.digests_unavailable {
        let _ = writeln!(s, "(no state digests: {why})");
    }
    s
}

/// How long `tagma status` waits for a replica's metrics: a stopped replica (its socket
/// accepts connections, nothing answers) must not hold the others' answers up for long.
const METRICS_WAIT: Duration = Duration::from_millis(1000);

/// Reads every replica's metrics at once (`addrs`, in the order of `replicas`), each waited
/// for at most [`METRICS_WAIT`], so the whole read takes about that long at most.
fn read_all_metrics(replicas: &mut [ReplicaStatus], addrs: &[Option<std::net::SocketAddr>]) {
    std::thread::scope(|s| {
        for (r, addr) in replicas.iter_mut().zip(addrs) {
            if let Some(addr) = *addr {
                s.spawn(move || read_metrics(r, addr));
            }
        }
    });
}

/// Reads replica `id`'s metrics at `addr` into `r`.
fn read_metrics(r: &mut ReplicaStatus, addr: std::net::SocketAddr) {
    let Ok(text) = tagma_node::metrics::scrape_within(addr, METRICS_WAIT, METRICS_WAIT) else {
        return;
    };
    let value = |name| tagma_node::metrics::value(&text, name).map(|v| v as u64);
    r.answering = true;
    r.leader = value("tagma_leader");
    r.regency = value("tagma_regency");
    r.view = value("tagma_view");
    r.executed_instances = value("tagma_executed_instances");
    r.decided_instances = value("tagma_decided_instances_total");
    r.state_unconfirmed = value("tagma_state_unconfirmed").map(|v| v > 0);
}

/// Adds a state query's answer to `r`.
fn add_state(r: &mut ReplicaStatus, s: &StateInfo) {
    r.answering = true;
    r.executed_requests = Some(s.executed_requests);
    r.state_digest = Some(s.state_digest.to_hex());
    if r.executed_instances.is_none() {
        r.executed_instances = Some(s.executed_instances);
    }
}

/// Collects the status of every replica of the directory's configuration (and of the
/// installed view's members, when a client can learn it).
fn collect(args: &StatusArgs) -> Result<ClusterStatus> {
    let cfg = cluster_dir::load_config(&args.dir)?;
    let key = IdentityKey::read_file(&cluster_dir::client_key_path(&args.dir))?;
    let mut replicas: Vec<ReplicaStatus> = cfg
        .replicas
        .iter()
        .map(|info| ReplicaStatus {
            id: info.id.0,
            addr: info.addr.to_string(),
            ..Default::default()
        })
        .collect();
    let metrics: Vec<_> = cfg.replicas.iter().map(|info| info.metrics_addr).collect();
    read_all_metrics(&mut replicas, &metrics);
    let options = || ClientOptions::new(DEFAULT_CLIENT_PRINCIPAL);
    let mut digests_unavailable = None;
    match Proxy::connect(&cfg, key.clone(), options()) {
        Err(e) => digests_unavailable = Some(e.to_string()),
        Ok(proxy) => {
            // The installed view's members, added ones included.
            let proxy = match proxy.current_view(Duration::from_secs(2)) {
                Ok(view) if view.id.0 > 0 => {
                    drop(proxy);
                    for m in &view.members {
                        if !replicas.iter().any(|r| r.id == m.id.0) {
                            replicas.push(ReplicaStatus {
                                id: m.id.0,
                                addr: m.addr.clone(),
                                ..Default::default()
                            });
                        }
                    }
                    Proxy::connect(&cfg.with_view(&view), key, options()).ok()
                }
                _ => Some(proxy),
            };
            for (id, state) in proxy
                .map(|p| p.query_states(Duration::from_secs(2)))
                .unwrap_or_default()
            {
                let (ReplicaId(id), Some(state)) = (id, state) else {
                    continue;
                };
                if let Some(r) = replicas.iter_mut().find(|r| r.id == id) {
                    add_state(r, &state);
                }
            }
        }
    }
    mark_behind(&mut replicas);
    let answering = replicas.iter().filter(|r| r.answering).count();
    Ok(ClusterStatus {
        replicas,
        answering,
        digests_unavailable,
    })
}

/// `tagma status`.
pub fn run(args: StatusArgs) -> Result<()> {
    let status = collect(&args)?;
    if args.json {
        println!("{}", serde_json::to_string(&status)?);
    } else {
        print!("{}", table(&status));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(id: u32, executed: u64) -> ReplicaStatus {
        ReplicaStatus {
            id,
            addr: format!("127.0.0.1:{}", 7100 + id),
            answering: true,
            leader: Some(1),
            regency: Some(1),
            view: Some(0),
            executed_instances: Some(executed),
            decided_instances: Some(executed),
            ..Default::default()
        }
    }

    /// Four replicas whose metrics sockets accept connections and never answer (stopped
    /// processes): their metrics are read at once, so the wait is one bounded wait, not four.
    #[test]
    fn stopped_replicas_hold_the_status_up_for_one_bounded_wait() {
        let listeners: Vec<std::net::TcpListener> = (0..4)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs: Vec<_> = listeners
            .iter()
            .map(|l| Some(l.local_addr().unwrap()))
            .collect();
        let mut replicas: Vec<ReplicaStatus> = (0..4)
            .map(|id| ReplicaStatus {
                id,
                ..Default::default()
            })
            .collect();
        let started = std::time::Instant::now();
        read_all_metrics(&mut replicas, &addrs);
        let waited = started.elapsed();
        assert!(replicas.iter().all(|r| !r.answering));
        assert!(
            waited < 2 * METRICS_WAIT + Duration::from_millis(500),
            "waited {waited:?} for four stopped replicas"
        );
    }

    #[test]
    fn a_replica_behind_and_one_down_are_shown() {
        let mut replicas = vec![
            up(0, 40),
            up(1, 40),
            up(2, 33),
            ReplicaStatus {
                id: 3,
                addr: "127.0.0.1:7103".into(),
                ..Default::default()
            },
        ];
        mark_behind(&mut replicas);
        assert_eq!(
            replicas.iter().map(|r| r.behind_by).collect::<Vec<_>>(),
            [Some(0), Some(0), Some(7), None]
        );
        let status = ClusterStatus {
            replicas,
            answering: 3,
            digests_unavailable: None,
        };
        let text = table(&status);
        assert!(text.starts_with("3 of 4 replicas answering\n"), "{text}");
        assert!(
            text.contains("replica 2 (127.0.0.1:7102): leader 1, regency 1, view 0; executed 33 instances, decided 33; behind by 7 instances"),
            "{text}"
        );
        assert!(
            text.contains("replica 3 (127.0.0.1:7103): NOT ANSWERING"),
            "{text}"
        );
        assert!(!text.lines().nth(1).unwrap().contains("behind"), "{text}");
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["replicas"][2]["behind_by"], 7);
        assert_eq!(json["replicas"][3]["answering"], false);
        assert!(json["replicas"][3]["leader"].is_null());
    }

    #[test]
    fn a_replica_whose_state_is_unconfirmed_says_so() {
        let mut replicas = vec![up(0, 40), up(1, 40)];
        replicas[1].state_unconfirmed = Some(true);
        replicas[0].state_unconfirmed = Some(false);
        mark_behind(&mut replicas);
        let status = ClusterStatus {
            replicas,
            answering: 2,
            digests_unavailable: None,
        };
        let text = table(&status);
        let lines: Vec<&str> = text.lines().collect();
        assert!(!lines[1].contains("UNCONFIRMED"), "{text}");
        assert!(lines[2].contains("; STATE UNCONFIRMED ("), "{text}");
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["replicas"][1]["state_unconfirmed"], true);
        assert_eq!(json["replicas"][0]["state_unconfirmed"], false);
    }
}
