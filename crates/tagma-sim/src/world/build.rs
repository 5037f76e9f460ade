//! The world a scenario starts from: the replicas' keys, parameters, cores, executors and
//! disks (a join plan's replica dormant, outside the initial view), the clients with their
//! workload, and everything the checks keep, empty.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use tagma_client::ViewFollower;
use tagma_core::{Quorums, Replica, ReplicaParams, Start};
use tagma_crypto::IdentityKey;
use tagma_wire::{ReplicaId, ViewId};

use crate::{
    byzantine::{Byzantine, Exercised},
    client::{SimClient, Workload, client_id},
    kv_client::KvWorkload,
    options::SimService,
    rng::Rng,
    scenario::{CLOCK_SKEW_MAX_MS, REQUEST_TIMEOUT_MS, Scenario},
    space_client::SpaceWorkload,
    world::{
        Node, Phase, World, answers,
        disk::{CHECKPOINT_PERIOD_PER_REPLICA, DURABLE_DECISIONS_KEPT, Disk, SIM_CHUNK_BYTES},
        executor::new_executor,
        order_seed,
        reconfig::joiner_member,
        service_due::DueReport,
        space_checks::SpaceRecord,
    },
};

impl World {
    pub fn new(sc: Scenario, tracing: bool) -> World {
        let mut rng = Rng::new(sc.seed);
        let mut key_rng = rng.fork();
        let n = sc.n;
        let f = sc.f;
        let keys: Vec<IdentityKey> = (0..n)
            .map(|_| IdentityKey::from_seed(key_rng.bytes32()))
            .collect();
        let admin = IdentityKey::from_seed(key_rng.bytes32());
        // A join plan's replica is outside the initial view.
        let joiner = sc.reconfig.as_ref().and_then(|p| p.join);
        let initial: Vec<usize> = (0..n).filter(|i| Some(*i as u32) != joiner).collect();
        let quorums = Quorums::new(sc.mode, initial.len(), f);
        let members: Vec<ReplicaId> = initial.iter().map(|i| ReplicaId(*i as u32)).collect();
        let member_keys = initial
            .iter()
            .map(|i| keys[*i].public())
            .collect::<Vec<_>>();
        let nodes: Vec<Node> = (0..n)
            .map(|i| {
                let params = ReplicaParams {
                    me: ReplicaId(i as u32),
                    members: members.clone(),
                    quorums,
                    view: ViewId(0),
                    batch_size_max: 8,
                    batch_bytes_max: 64 * 1024,
                    batch_fill_wait_ms: sc.batch_fill_wait_ms,
                    request_bytes_max: 1024,
                    client_pending_max: 8,
                    pending_requests_max: 1024,
                    clients_max: 64,
                    future_messages_max: 256,
                    request_timeout_ms: REQUEST_TIMEOUT_MS,
                    clock_skew_max_ms: CLOCK_SKEW_MAX_MS,
                    seed: sc.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    member_keys: member_keys.clone(),
                    // Durable runs keep few decisions in memory, so replicas that fall behind
                    // (or restart empty) need state transfer; other runs have no checkpoints
                    // and catch up by decision forwarding alone.
                    decisions_kept: if sc.durable {
                        DURABLE_DECISIONS_KEPT
                    } else {
                        100_000
                    },
                    durable: sc.durable && !sc.byzantine.iter().any(|(r, _)| *r == i as u32),
                    state_vote: true,
                    checkpoint_period: CHECKPOINT_PERIOD_PER_REPLICA * n as u64,
                    chunk_bytes: SIM_CHUNK_BYTES,
                    state_bytes_max: 1 << 30,
                    member_addrs: initial.iter().map(|i| format!("sim:{i}")).collect(),
                    admin_key: Some(admin.public()),
                    answer_budget: answers::sim_answer_budget(),
                };
                let genesis = params.membership();
                let mut params = params;
                let is_joiner = joiner == Some(i as u32);
                if is_joiner {
                    // It starts in the view that adds it (as `tagma replica --join` does).
                    let view = tagma_core::view::apply(
                        &genesis.view,
                        &[tagma_wire::ViewOp::Add(joiner_member(i, &keys[i]))],
                        sc.mode,
                    )
                    .expect("the join applies");
                    params.set_view(&view);
                }
                let byz = sc
                    .byzantine
                    .iter()
                    .find(|(r, _)| *r == i as u32)
                    .map(|(_, b)| Byzantine::new(b, keys[i].clone()));
                let disk = (sc.durable && byz.is_none()).then(Disk::default);
                Node {
                    core: Replica::new(params.clone(), keys[i].clone(), Start::Fresh, 0),
                    params,
                    key: keys[i].clone(),
                    disk,
                    // Every executor starts in the initial view (a joiner's replays history).
                    exec: new_executor(sc.service, &genesis, order_seed(sc.seed, i)),
                    due: DueReport::fresh(),
                    replied: BTreeMap::new(),
                    crashed: is_joiner,
                    timer_at: None,
                    byz,
                    regency: 0,
                    delivered: 0,
                    executed: BTreeMap::new(),
                    incoming: Vec::new(),
                    last_vote_seq: 0,
                    incarnation: 0,
                    byz_decided: BTreeMap::new(),
                    joiner: is_joiner,
                    dormant: is_joiner,
                    lying_disk: false,
                    crash_point_armed: false,
                }
            })
            .collect();
        let mut clients = Vec::new();
        for i in 0..sc.correct_clients {
            let workload = match sc.service {
                SimService::Kv => {
                    let group = i / sc.client_group;
                    let keys = (0..sc.keys_per_group)
                        .map(|k| Bytes::from(format!("g{group}/k{k}")))
                        .collect();
                    Workload::Kv(KvWorkload::new(i, keys, Bytes::from(format!("g{group}/"))))
                }
                SimService::Space => {
                    Workload::Space(SpaceWorkload::new(i, client_id(i).principal()))
                }
            };
            clients.push(SimClient::new(i, None, workload));
        }
        for (j, fault) in sc.faulty_clients.iter().enumerate() {
            let i = sc.correct_clients + j;
            let workload = match sc.service {
                SimService::Kv => {
                    let keys = vec![Bytes::from(format!("faulty{j}/k"))];
                    Workload::Kv(KvWorkload::new(i, keys, Bytes::from("faulty")))
                }
                SimService::Space => {
                    Workload::Space(SpaceWorkload::new(i, client_id(i).principal()))
                }
            };
            clients.push(SimClient::new(i, Some(*fault), workload));
        }
        let membership = nodes[initial[0]].params.membership();
        let client_views = (0..clients.len())
            .map(|_| ViewFollower::new(sc.mode, &membership.view))
            .collect();
        World {
            admin,
            membership,
            client_views,
            views: BTreeMap::new(),
            reconfig_sends: 0,
            net: sc.net,
            tracing,
            now_ms: 0,
            step: 0,
            next_event_seq: 0,
            queue: BTreeMap::new(),
            rng,
            partitions_active: BTreeSet::new(),
            nodes,
            clients,
            disk_damage_count: 0,
            issued: BTreeSet::new(),
            decided: Vec::new(),
            histories: BTreeMap::new(),
            space: SpaceRecord::default(),
            phase: Phase::Faults,
            violations: Vec::new(),
            liveness_failure: None,
            exercised: Exercised::new(),
            counters: BTreeMap::new(),
            maxima: BTreeMap::new(),
            answers: BTreeMap::new(),
            trace: Vec::new(),
            hasher: blake3::Hasher::new(),
            sc,
        }
    }
}
