//! Replicas without a disk (`durability = "none"`, the default) keep their log and
//! checkpoints in memory: one that restarts empty, or that a view change adds, gets the state
//! from the others by state transfer like a durable replica with a wiped disk. Real replica
//! processes on 127.0.0.1.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use tagma_client::Proxy;
use tagma_cluster::LocalCluster;
use tagma_core::Mode;
use tagma_crypto::IdentityKey;
use tagma_kv::{KvOp, KvReply};
use tagma_wire::{ReplicaId, ViewId};

mod common;
use common::{READY, add_replica, all_in_view, assert_converged, exe};

static SERIAL: Mutex<()> = Mutex::new(());

fn put(proxy: &Proxy, key: &str, value: &str) {
    let op = KvOp::Put {
        key: Bytes::from(key.to_owned()),
        value: Bytes::from(value.to_owned()),
    };
    let reply = proxy
        .invoke_ordered(op.encode())
        .expect("the put is ordered");
    assert!(matches!(KvReply::decode(&reply), Ok(KvReply::Put { .. })));
}

/// Kills replica 3, orders `puts` instances without it, restarts it with an empty memory,
/// and waits until every replica holds the same state at the same position.
fn restart_after(c: &mut LocalCluster, puts: usize) -> Vec<tagma_wire::StateInfo> {
    let proxy = c.proxy(READY).expect("connect");
    put(&proxy, "before", "the crash");
    c.kill(3);
    for i in 0..puts {
        put(&proxy, &format!("k{i}"), &format!("v{i}"));
    }
    c.start(3).expect("restart replica 3");
    c.wait_ready(3, READY).expect("replica 3 serves metrics");
    put(&proxy, "after", "the restart");
    let all: Vec<ReplicaId> = (0..4).map(ReplicaId).collect();
    let states = assert_converged(c, &all, Duration::from_secs(60));
    assert!(
        states[3].executed_instances >= puts as u64 + 2,
        "{states:?}"
    );
    states
}

/// The default configuration: one replica is killed, the others order 800 instances (more
/// than the 256 decisions the core keeps for forwarding) and the replica restarts with an
/// empty memory. It ends at their position with their digest, served from the others'
/// in-memory logs and checkpoints (without them it stayed at instance 0 for good).
#[test]
fn a_replica_restarted_without_a_disk_catches_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = LocalCluster::launch(exe(), 4, Mode::Bft, |cfg| {
        assert_eq!(cfg.storage.durability, tagma_core::config::Durability::None);
        assert!(cfg.limits.decisions_kept < 800);
    })
    .expect("start a local cluster");
    restart_after(&mut c, 800);
}

/// With checkpoints every 40 instances and 16 decisions kept, the others' logs no longer
/// reach back to instance 0: the restarted replica fetches an in-memory checkpoint and the
/// decisions after it (state transfer), then goes on with the others.
#[test]
fn a_replica_restarted_without_a_disk_fetches_a_checkpoint_from_memory() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = LocalCluster::launch(exe(), 4, Mode::Bft, |cfg| {
        cfg.storage.checkpoint_period = 40;
        cfg.limits.decisions_kept = 16;
    })
    .expect("start a local cluster");
    restart_after(&mut c, 300);
    assert!(
        c.metric(3, "tagma_state_transfer_ms") > 0.0,
        "replica 3 caught up by state transfer"
    );
}

/// A fifth replica joins a cluster without durability: the view change is ordered, and the
/// joiner fetches the state (decided in a view it never knew) from the members' memory and
/// ends with their digest.
#[test]
fn a_replica_joins_a_cluster_without_durability() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let admin = IdentityKey::from_seed([0xad; 32]);
    let admin_key = admin.public().to_hex();
    let mut c = LocalCluster::launch(exe(), 4, Mode::Bft, move |cfg| {
        cfg.admin = Some(tagma_core::config::AdminEntry {
            public_key: admin_key.clone(),
        });
        cfg.storage.checkpoint_period = 40;
        cfg.limits.decisions_kept = 16;
    })
    .expect("start a local cluster");
    let proxy = c.proxy(READY).expect("connect");
    for i in 0..200 {
        put(&proxy, &format!("k{i}"), &format!("v{i}"));
    }
    let (_, view) = add_replica(&mut c, &admin, &proxy, 4, ViewId(0));
    assert_eq!((view.id, view.members.len()), (ViewId(1), 5));
    let proxy = c.proxy(READY).expect("connect in the new view");
    put(&proxy, "after", "the join");
    let states = all_in_view(&c, 1);
    assert!(states[0].executed_requests >= 201, "{states:?}");
}
