//! `tagma chaos --mode eve --scenario lying-executor`: execute-verify's BFT deployment
//! facing lying executors, run in the deterministic deployment (`tagma_eve::bft::harness`:
//! the real executor core, stage and verifiers' decision in one process, in virtual time),
//! with the counts of what was injected, detected and repaired, and the checks against
//! sequential execution. u = 2, r = 2 (five executors): one executor sends wrong tokens,
//! another wrong replies and a third forges the state nodes it serves; a fourth is racy, so
//! that it fetches the committed state and meets the forger. (`racy-service` is
//! [`crate::chaos_eve_race`].)

use serde::Serialize;
use tagma_eve::Resilience;
use tagma_eve::bft::harness::{Behaviour, BftSetup, Deployment};

use crate::chaos::Scenario;

/// What a scenario did.
#[derive(Clone, Debug, Serialize)]
pub struct EveChaosReport {
    pub scenario: String,
    pub u: usize,
    pub r: usize,
    pub executors: usize,
    pub verifiers: usize,
    pub virtual_ms: u64,
    pub batches_committed: usize,
    pub requests_answered: u64,
    /// Wrong tokens, replies and state nodes the lying executors sent.
    pub lies_sent: u64,
    /// Lying replies a client accepted (r + 1 matching replies needed).
    pub lies_accepted: u64,
    /// Fetches that refused a forged state.
    pub forged_states_refused: u64,
    /// Batches a correct executor executed with another token than the committed one.
    pub divergences_manifested: u64,
    /// Of those, the ones the verifiers' decision showed the executor (all of them: it
    /// acts on the decided token).
    pub divergences_detected: u64,
    /// Of those, the ones whose executor reached the committed state again.
    pub divergences_repaired: u64,
    pub rollbacks: u64,
    /// Replies clients accepted that sequential execution of the committed batches does
    /// not give, or for requests never committed.
    pub lost_acknowledged_ops: usize,
    pub state_digests_equal: bool,
    pub problems: Vec<String>,
}

impl EveChaosReport {
    pub fn passed(&self) -> bool {
        self.lost_acknowledged_ops == 0
            && self.lies_accepted == 0
            && self.state_digests_equal
            && self.problems.is_empty()
            && self.divergences_repaired == self.divergences_manifested
            && self.requests_answered > 0
    }

    pub fn table(&self) -> String {
        let mut out = format!(
            "{} (deterministic BFT deployment, u = {}, r = {}: {} executors, {} verifiers, {} virtual ms)\n",
            self.scenario, self.u, self.r, self.executors, self.verifiers, self.virtual_ms
        );
        let rows = [
            ("batches committed", self.batches_committed.to_string()),
            ("requests answered", self.requests_answered.to_string()),
            ("lies sent", self.lies_sent.to_string()),
            ("lies accepted by clients", self.lies_accepted.to_string()),
            (
                "forged states refused",
                self.forged_states_refused.to_string(),
            ),
            (
                "divergences manifested",
                self.divergences_manifested.to_string(),
            ),
            (
                "divergences detected",
                self.divergences_detected.to_string(),
            ),
            (
                "divergences repaired",
                self.divergences_repaired.to_string(),
            ),
            ("rollbacks", self.rollbacks.to_string()),
            (
                "lost acknowledged ops",
                self.lost_acknowledged_ops.to_string(),
            ),
            ("state digests equal", self.state_digests_equal.to_string()),
        ];
        for (name, value) in rows {
            out.push_str(&format!("  {name:<26} {value}\n"));
        }
        for p in &self.problems {
            out.push_str(&format!("  problem: {p}\n"));
        }
        out.push_str(if self.passed() { "PASS" } else { "FAIL" });
        out
    }
}

/// Runs lying-executor for `load_ms` of virtual time under load, then lets it settle.
pub fn run(load_ms: u64, seed: u64) -> EveChaosReport {
    let resilience = Resilience::new(2, 2).expect("u ≥ 1");
    let mut setup = BftSetup::new(resilience);
    setup.behaviours = vec![
        Behaviour::Correct,
        Behaviour::WrongTokens,
        Behaviour::WrongReplies,
        Behaviour::WrongState,
    ];
    setup.racy = vec![4];
    let mut d = Deployment::new(BftSetup { seed, ..setup });
    d.run(load_ms);
    d.quiet = true;
    d.run(2_000);
    let problems = d.check_against_sequential();
    let lost_acknowledged_ops = problems
        .iter()
        .filter(|p| p.contains("was accepted"))
        .count();
    let n = resilience.executors() as u32;
    let correct: Vec<u32> = (0..n)
        .filter(|&e| {
            d.node(e)
                .is_some_and(|node| node.behaviour == Behaviour::Correct)
        })
        .collect();
    let roots: Vec<_> = (correct.iter())
        .map(|&e| {
            let stable = d.node(e).expect("correct").stage.executor().stable();
            (stable.seq, stable.tree.hash().root)
        })
        .collect();
    let state_digests_equal = roots.windows(2).all(|w| w[0] == w[1]);
    let forged_states_refused = (0..n)
        .filter_map(|e| d.node(e))
        .map(|node| node.core.stats().fetches_failed)
        .sum();
    EveChaosReport {
        scenario: Scenario::LyingExecutor.name().to_string(),
        u: resilience.u,
        r: resilience.r,
        executors: n as usize,
        verifiers: resilience.verifiers(),
        virtual_ms: d.now_ms,
        batches_committed: d.committed_batches(),
        requests_answered: d.answered(),
        lies_sent: d.divergences.lies_sent,
        lies_accepted: d.divergences.lies_accepted,
        forged_states_refused,
        divergences_manifested: d.divergences.manifested,
        divergences_detected: d.divergences.manifested,
        divergences_repaired: d.repaired(),
        rollbacks: d.divergences.rollbacks,
        lost_acknowledged_ops,
        state_digests_equal,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lies_are_refused_and_divergences_repaired() {
        let lying = run(2_000, 1);
        assert!(lying.passed(), "{}", lying.table());
        assert!(lying.lies_sent > 0 && lying.forged_states_refused > 0);
        assert!(lying.divergences_manifested > 0);
    }
}
