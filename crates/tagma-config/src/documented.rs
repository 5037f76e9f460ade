//! The documented `tagma.toml`: every key with a comment saying what it does and its
//! default. `tagma init` writes it, so the defaults are documented where users look.

use crate::config::{BatchSection, Config, LimitSection, TimeoutSection};

impl Config {
    /// A complete `tagma.toml` with a comment on every key (written by `tagma init`).
    pub fn documented_toml(&self) -> String {
        let c = &self.cluster;
        let b = &self.batch;
        let t = &self.timeouts;
        let l = &self.limits;
        let d = LimitSection::default();
        let dt = TimeoutSection::default();
        let mut s = String::new();
        s.push_str(
            "# tagma cluster configuration. Every key below shows its default unless noted;\n",
        );
        s.push_str(
            "# a key left out takes its default. Reference: README.md, section Configuration.\n\n",
        );
        s.push_str("[cluster]\n");
        s.push_str(&format!("# \"bft\": tolerate f Byzantine replicas (n >= 3f+1); \"cft\": f crashes (n >= 2f+1). Default \"bft\".\nmode = \"{}\"\n", c.mode));
        s.push_str(&format!(
            "# Faulty replicas tolerated. Default 1.\nf = {}\n",
            c.f
        ));
        s.push_str(&format!("# Require an Ed25519 client signature on every ordered request. Default false.\nsigned_requests = {}\n", c.signed_requests));
        s.push_str(&format!("# Accept unordered (read-only) requests; clients then wait for floor((n+f)/2)+1 matching replies. Default true.\nreadonly_requests = {}\n\n", c.readonly_requests));
        for r in &self.replicas {
            s.push_str("[[replica]]\n");
            s.push_str(&format!(
                "id = {}\naddr = \"{}\"\npublic_key = \"{}\"\n",
                r.id, r.addr, r.public_key
            ));
            if let Some(m) = &r.metrics_addr {
                s.push_str(&format!(
                    "# Prometheus endpoint (GET /metrics). Optional.\nmetrics_addr = \"{m}\"\n"
                ));
            }
            s.push('\n');
        }
        for cl in &self.clients {
            s.push_str(&format!("[[client]]\n# Client principal: its client ids are (id << 32) | instance.\nid = {}\npublic_key = \"{}\"\n\n", cl.id, cl.public_key));
        }
        if let Some(a) = &self.admin {
            s.push_str(&format!("[admin]\n# Administrator key for reconfiguration operations.\npublic_key = \"{}\"\n\n", a.public_key));
        }
        s.push_str("[batch]\n");
        let db = BatchSection::default();
        s.push_str(&format!(
            "# Most requests per consensus instance. Default {}.\nbatch_size_max = {}\n",
            db.batch_size_max, b.batch_size_max
        ));
        s.push_str(&format!(
            "# Most encoded bytes per batch. Default {}.\nbatch_bytes_max = {}\n",
            db.batch_bytes_max, b.batch_bytes_max
        ));
        s.push_str(&format!(
            "# Adaptive batching: a leader may hold its next batch this long while requests arrive, until\n# 7/8 as many wait as the last decided batch held (fewer instances for the same requests:\n# less CPU per request on busy replicas). 0 proposes at once. Default {}.\nfill_wait_ms = {}\n\n",
            db.fill_wait_ms, b.fill_wait_ms
        ));
        s.push_str("[timeouts]\n");
        s.push_str(&format!("# Replica request timer (first expiry forwards, second suspects the leader). Default {}.\nrequest_timeout_ms = {}\n", dt.request_timeout_ms, t.request_timeout_ms));
        s.push_str(&format!("# How far ahead of a replica's clock a leader's batch may be timestamped (a later one is\n# refused): bounds how early a faulty leader can make leases and waits run out. Default {}.\nclock_skew_max_ms = {}\n", dt.clock_skew_max_ms, t.clock_skew_max_ms));
        s.push_str(&format!("# Client retransmits an unanswered request to every replica after this long (an ordered request goes to the leader first, and to every replica after four smoothed latencies, at most this long or half request_timeout_ms). Default {}.\nclient_retransmit_ms = {}\n", dt.client_retransmit_ms, t.client_retransmit_ms));
        s.push_str(&format!("# Client gives up on an invocation after this long. Default {}.\nclient_invoke_timeout_ms = {}\n", dt.client_invoke_timeout_ms, t.client_invoke_timeout_ms));
        s.push_str(&format!(
            "# TCP connect timeout. Default {}.\nconnect_timeout_ms = {}\n",
            dt.connect_timeout_ms, t.connect_timeout_ms
        ));
        s.push_str(&format!(
            "# Authenticated handshake timeout. Default {}.\nhandshake_timeout_ms = {}\n",
            dt.handshake_timeout_ms, t.handshake_timeout_ms
        ));
        s.push_str(&format!(
            "# Longest delay between reconnection attempts to a peer (the first retries come\n# sooner: 2 ms, doubling up to this). Default {}.\nreconnect_delay_ms = {}\n\n",
            dt.reconnect_delay_ms, t.reconnect_delay_ms
        ));
        s.push_str("[limits]\n");
        let lim = [
            (
                "frame_bytes_max",
                "Largest frame body on any connection",
                l.frame_bytes_max,
                d.frame_bytes_max,
            ),
            (
                "request_bytes_max",
                "Largest request payload",
                l.request_bytes_max,
                d.request_bytes_max,
            ),
            (
                "client_pending_max",
                "Flow control: requests of one client waiting to be ordered",
                l.client_pending_max,
                d.client_pending_max,
            ),
            (
                "pending_requests_max",
                "Requests of all clients waiting to be ordered",
                l.pending_requests_max,
                d.pending_requests_max,
            ),
            (
                "clients_max",
                "Client sessions kept (least recently active evicted)",
                l.clients_max,
                d.clients_max,
            ),
            (
                "reply_cache_per_client",
                "Replies cached per client for retransmissions",
                l.reply_cache_per_client,
                d.reply_cache_per_client,
            ),
            (
                "future_messages_max",
                "Consensus messages for future instances kept",
                l.future_messages_max,
                d.future_messages_max,
            ),
            (
                "consensus_queue_max",
                "Events waiting for the consensus thread",
                l.consensus_queue_max,
                d.consensus_queue_max,
            ),
            (
                "execution_queue_max",
                "Batches and reads waiting for the execution thread (and decisions for the log; at least 64)",
                l.execution_queue_max,
                d.execution_queue_max,
            ),
            (
                "connection_queue_max",
                "Frames waiting to be written on one connection",
                l.connection_queue_max,
                d.connection_queue_max,
            ),
            (
                "connections_max",
                "Client connections per replica",
                l.connections_max,
                d.connections_max,
            ),
            (
                "signature_threads",
                "Threads verifying client signatures",
                l.signature_threads,
                d.signature_threads,
            ),
            (
                "decisions_kept",
                "Decided instances kept in memory for replicas that fell behind",
                l.decisions_kept,
                d.decisions_kept,
            ),
            (
                "verified_requests_bytes",
                "Bytes of requests kept after their check on the client's connection, so that a\n# PROPOSE relaying one needs no second check (0: none)",
                l.verified_requests_bytes,
                d.verified_requests_bytes,
            ),
        ];
        for (k, doc, v, def) in lim {
            s.push_str(&format!("# {doc}. Default {def}.\n{k} = {v}\n"));
        }
        s.push_str("\n[storage]\n");
        let st = &self.storage;
        s.push_str(&format!("# Data directory, relative to the cluster directory. Default \"data\".\ndata_dir = \"{}\"\n", st.data_dir));
        s.push_str(&format!("# \"none\": in memory only (the log and checkpoints too: a restarted replica gets the state\n# from the others); \"fsync\": every replica forces its votes to disk before it ACCEPTs,\n# logs decided batches and takes checkpoints (survives the crash of every replica). Default \"none\".\ndurability = \"{}\"\n", st.durability));
        s.push_str(&format!("# Instances between two checkpoints of a replica (staggered across replicas; at least n). Default 1000.\ncheckpoint_period = {}\n", st.checkpoint_period));
        s.push_str(&format!("# Bytes each log segment file is preallocated to. Default 67108864 (64 MiB).\nlog_segment_bytes = {}\n", st.log_segment_bytes));
        s.push_str(&format!("# The largest checkpoint accepted by state transfer. Default 17179869184 (16 GiB).\nstate_bytes_max = {}\n", st.state_bytes_max));
        s.push_str(&format!("# BFT with durability: a restarted replica compares its recovered state with its peers'\n# (its state hashed once per restart) and fetches theirs if f+1 contradict it. Default true.\nstate_vote = {}\n", st.state_vote));
        let te = &self.testing;
        s.push_str("\n[testing]\n");
        s.push_str(&format!("# Fault injection: while a file of this name exists in a replica's data directory, that\n# replica's flushes named in stall_flushes wait until it is gone (a stalled disk: the\n# replica falls behind and catches up once the file is removed). Default \"\" (never).\nstall_file = \"{}\"\n", te.stall_file));
        let flushes: Vec<String> = te
            .stall_flushes
            .iter()
            .map(|f| format!("\"{f}\""))
            .collect();
        s.push_str(&format!("# The flushes it holds, of \"log\", \"votes\", \"checkpoints\". Default [\"log\", \"votes\", \"checkpoints\"].\nstall_flushes = [{}]\n", flushes.join(", ")));
        s.push_str(&self.eve.documented());
        s
    }
}
