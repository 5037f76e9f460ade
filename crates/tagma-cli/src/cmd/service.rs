//! The replicated service a server process runs and how it executes decided batches:
//! arguments shared by `tagma replica`, `tagma unreplicated` and `tagma bench`.

/// The service a replica or unreplicated server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServiceKind {
    /// The key-value store.
    Kv,
    /// The micro-benchmark's empty service: each reply has the size its request asks for.
    Micro,
    /// A linked list of integers, executed in parallel (--exec-threads, --exec-policy).
    List,
    /// The tuple space, where out/inp conflict with every other operation.
    TuplespaceTs1,
    /// The tuple space, one conflict class per tuple size.
    TuplespaceTs2,
    /// The coordination service: named tuple spaces with blocking operations, leases and
    /// access policies (`tagma space`); --exec-threads runs different spaces at once.
    Space,
    /// The verifiers of execute-verify's BFT deployment: they decide on the tokens the
    /// executors send (the `[eve]` section names u, r, the timeout and the executors).
    EveVerifier,
}

impl ServiceKind {
    /// The benchmark workload of this service (the verifiers have none).
    pub fn workload(self) -> Option<tagma_bench::requests::Workload> {
        use tagma_bench::requests::Workload;
        Some(match self {
            ServiceKind::Kv => Workload::Kv,
            ServiceKind::Micro => Workload::Micro,
            ServiceKind::List => Workload::List,
            ServiceKind::TuplespaceTs1 => Workload::TuplespaceTs1,
            ServiceKind::TuplespaceTs2 => Workload::TuplespaceTs2,
            ServiceKind::Space => Workload::Space,
            ServiceKind::EveVerifier => return None,
        })
    }
}

/// How a replica executes decided batches (the list and tuple-space services run in
/// parallel).
#[derive(clap::Args, Clone, Debug)]
pub struct ExecArgs {
    /// Worker threads executing each decided batch (list and tuple-space services).
    #[arg(long, default_value_t = 1)]
    pub exec_threads: usize,
    /// How those workers are scheduled: one request after another, in groups separated
    /// by barriers, or following a graph of which request depends on which.
    #[arg(long, value_enum, default_value_t = PolicyArg::Graph)]
    pub exec_policy: PolicyArg,
    /// Entries of the list's initial state, or tuples of the tuple space's (the same
    /// pseudo-random tuples on every replica).
    #[arg(long, default_value_t = 100_000)]
    pub state_size: usize,
    /// Spaces the coordination service starts with (comma-separated names), each with the
    /// default policy (everyone reads, inserts and takes) and administered by the cluster's
    /// client principal. Every replica must be given the same list.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub spaces: Vec<String>,
    /// The coordination service: the most bytes one space holds (tuples and waiting
    /// templates). Every replica must be given the same value.
    #[arg(long, default_value_t = tagma_space_service::SpaceLimits::default().space_bytes_max)]
    pub space_bytes_max: usize,
    /// The coordination service: the most tuples one space holds. Every replica must be
    /// given the same value.
    #[arg(long, default_value_t = tagma_space_service::SpaceLimits::default().tuples_per_space_max)]
    pub space_tuples_max: usize,
    /// What decides which requests conflict: the service itself, or the group each
    /// client names with its request.
    #[arg(long, value_enum, default_value_t = ClassifyArg::Service)]
    pub exec_classify: ClassifyArg,
}

/// `--exec-classify`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClassifyArg {
    Service,
    Groups,
}

/// `--exec-policy` and `tagma bench exec --policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    Sequential,
    Barrier,
    Graph,
}

impl PolicyArg {
    pub fn policy(self) -> tagma_parallel::Policy {
        match self {
            PolicyArg::Sequential => tagma_parallel::Policy::Sequential,
            PolicyArg::Barrier => tagma_parallel::Policy::Barrier,
            PolicyArg::Graph => tagma_parallel::Policy::Graph,
        }
    }

    pub fn name(self) -> &'static str {
        self.policy().name()
    }
}

impl ExecArgs {
    /// The same settings as replica arguments.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--space-bytes-max".into(),
            self.space_bytes_max.to_string(),
            "--space-tuples-max".into(),
            self.space_tuples_max.to_string(),
            "--exec-threads".into(),
            self.exec_threads.to_string(),
            "--exec-policy".into(),
            self.exec_policy.name().into(),
            "--state-size".into(),
            self.state_size.to_string(),
            "--exec-classify".into(),
            match self.exec_classify {
                ClassifyArg::Service => "service",
                ClassifyArg::Groups => "groups",
            }
            .into(),
        ]
    }

    /// `state` executed in parallel with these settings.
    pub fn parallel<P: tagma_parallel::ParallelState>(
        &self,
        state: P,
    ) -> tagma_parallel::ParallelReplica<P> {
        tagma_parallel::ParallelReplica::new(
            state,
            tagma_parallel::Scheduler::new(
                self.exec_policy.policy(),
                self.exec_threads.max(1),
                tagma_parallel::Groups::default(),
            ),
            match self.exec_classify {
                ClassifyArg::Service => tagma_parallel::Classify::Service,
                ClassifyArg::Groups => tagma_parallel::Classify::Groups,
            },
        )
    }

    /// The coordination service with these settings: `--exec-threads` threads, the spaces
    /// of `--spaces`, answering `share` (protected spaces) with this replica's `key` among
    /// `replicas` (the cluster configuration's replicas in member order, as clients seal for
    /// them).
    pub fn space_service(
        &self,
        key: &tagma_crypto::IdentityKey,
        replicas: Vec<tagma_wire::PublicKey>,
    ) -> anyhow::Result<tagma_space_service::SpaceService> {
        let limits = tagma_space_service::SpaceLimits {
            space_bytes_max: self.space_bytes_max,
            tuples_per_space_max: self.space_tuples_max,
            ..Default::default()
        };
        let mut service = tagma_space_service::SpaceService::new(limits)
            .map_err(|e| anyhow::anyhow!("--space-bytes-max / --space-tuples-max: {e}"))?
            .with_threads(self.exec_threads.max(1))
            .map_err(|e| anyhow::anyhow!("--exec-threads: cannot start the workers: {e}"))?
            .with_replica_key(key.clone(), replicas);
        for name in &self.spaces {
            service = service
                .with_space(
                    name,
                    tagma_space::Policy::default(),
                    tagma_node::cluster_dir::DEFAULT_CLIENT_PRINCIPAL,
                )
                .map_err(|e| anyhow::anyhow!("--spaces {name}: {e}"))?;
        }
        Ok(service)
    }
}
