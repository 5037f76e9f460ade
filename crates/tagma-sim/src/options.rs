//! The options a caller fixes for a run ([`SimOptions`]): fault model, cluster size, fault
//! budget, view changes, and the service the replicas run ([`SimService`]); everything left
//! open is drawn from the seed. Options read and write as `key=value` tokens, the form of a
//! line of `regressions.txt`.

use std::fmt;

use serde::Serialize;
use tagma_core::Mode;

/// The replicated service of a run, with the workload its clients run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SimService {
    /// The key-value store (`tagma_kv`), run as a parallel service, with clients that put,
    /// get, increment, compare-and-set, delete and scan keys (checked for linearizability).
    #[default]
    Kv,
    /// The coordination service (`tagma_space_service`): clients share a work queue, a lock
    /// with a lease, and blocking reads and takes that time out in agreed time.
    Space,
}

impl SimService {
    pub fn name(self) -> &'static str {
        match self {
            SimService::Kv => "kv",
            SimService::Space => "space",
        }
    }

    /// `kv` or `space`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "kv" => Ok(SimService::Kv),
            "space" => Ok(SimService::Space),
            _ => Err(format!("service must be kv or space, got {s:?}")),
        }
    }
}

impl fmt::Display for SimService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the caller fixes; everything left `None` is drawn from the seed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimOptions {
    pub mode: Option<Mode>,
    pub f: Option<usize>,
    /// Overrides n (must be at least 3f+1 / 2f+1).
    pub replicas: Option<usize>,
    /// Caps the Byzantine replicas (default f; BFT only).
    pub byzantine_max: Option<usize>,
    /// Keep one line per event (returned in the report).
    pub trace: bool,
    /// Virtual length of the fault period (default
    /// [`FAULT_PERIOD_MS_DEFAULT`](crate::scenario::FAULT_PERIOD_MS_DEFAULT)).
    pub fault_period_ms: Option<u64>,
    /// Virtual time the liveness phase may take (default
    /// [`LIVENESS_BOUND_MS_DEFAULT`](crate::scenario::LIVENESS_BOUND_MS_DEFAULT)).
    pub liveness_bound_ms: Option<u64>,
    /// 0: no view change. 1: run with one replica more than f needs and have the
    /// administrator remove one during the fault period. 2: the same, or — in durable runs,
    /// half of the time — start with one replica dormant and have the administrator add it
    /// (it joins by state transfer). See [`ReconfigPlan`](crate::scenario::ReconfigPlan).
    pub reconfig: u8,
    /// Whether the Byzantine replicas that are not silent flood their peers with requests
    /// ([`Behaviour::AnswerFlood`](crate::scenario::Behaviour::AnswerFlood)): `None` draws it for each of them.
    pub flood: Option<bool>,
    /// The service every replica runs, and the workload its clients run.
    pub service: SimService,
    /// Adaptive batching: how long a leader may hold a proposal for its batch to fill
    /// (`[batch] fill_wait_ms`); 0, the default, proposes at once. Not drawn from the seed,
    /// so that a seed's trace does not depend on it unless asked.
    pub batch_fill_wait_ms: u64,
}

impl SimOptions {
    /// Parses the options part of a regression line or command line: `key=value` tokens
    /// (`mode=bft|cft f=N replicas=N byzantine=N fault_ms=N reconfig=0|1|2 flood=0|1
    /// service=kv|space fill=MS`).
    pub fn parse_tokens<'a>(tokens: impl Iterator<Item = &'a str>) -> Result<Self, String> {
        let mut o = SimOptions::default();
        for token in tokens {
            let (k, v) = token
                .split_once('=')
                .ok_or_else(|| format!("expected key=value, got {token:?}"))?;
            let num = || {
                v.parse::<u64>()
                    .map_err(|_| format!("{k}: not a number: {v:?}"))
            };
            match k {
                "mode" => {
                    o.mode = Some(match v {
                        "bft" => Mode::Bft,
                        "cft" => Mode::Cft,
                        _ => return Err(format!("mode must be bft or cft, got {v:?}")),
                    })
                }
                "f" => o.f = Some(num()? as usize),
                "replicas" => o.replicas = Some(num()? as usize),
                "byzantine" => o.byzantine_max = Some(num()? as usize),
                "fault_ms" => o.fault_period_ms = Some(num()?),
                "reconfig" => {
                    o.reconfig = match num()? {
                        n @ 0..=2 => n as u8,
                        n => return Err(format!("reconfig must be 0, 1 or 2, got {n}")),
                    }
                }
                "flood" => {
                    o.flood = match num()? {
                        0 => Some(false),
                        1 => Some(true),
                        n => return Err(format!("flood must be 0 or 1, got {n}")),
                    }
                }
                "service" => o.service = SimService::parse(v)?,
                "fill" => o.batch_fill_wait_ms = num()?,
                _ => return Err(format!("unknown option {k:?}")),
            }
        }
        Ok(o)
    }

    /// The options as `key=value` tokens (inverse of [`SimOptions::parse_tokens`]).
    pub fn tokens(&self) -> Vec<String> {
        let mut t = Vec::new();
        if let Some(m) = self.mode {
            t.push(format!("mode={m}"));
        }
        if let Some(f) = self.f {
            t.push(format!("f={f}"));
        }
        if let Some(n) = self.replicas {
            t.push(format!("replicas={n}"));
        }
        if let Some(b) = self.byzantine_max {
            t.push(format!("byzantine={b}"));
        }
        if let Some(ms) = self.fault_period_ms {
            t.push(format!("fault_ms={ms}"));
        }
        if self.reconfig > 0 {
            t.push(format!("reconfig={}", self.reconfig));
        }
        if let Some(flood) = self.flood {
            t.push(format!("flood={}", u8::from(flood)));
        }
        if self.service != SimService::Kv {
            t.push(format!("service={}", self.service));
        }
        if self.batch_fill_wait_ms > 0 {
            t.push(format!("fill={}", self.batch_fill_wait_ms));
        }
        t
    }
}
