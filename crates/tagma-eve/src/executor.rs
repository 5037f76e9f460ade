//! An executor: runs batches (mixed into parallel batches on its thread pool, or in order),
//! computes each batch's token, keeps the states of the batches not yet verified, and
//! commits, rolls back or adopts a fetched state as verification decides.
//!
//! The executor is the compute half of an execute-verify replica and does no I/O: the
//! protocol that carries tokens between replicas decides what it does next.

use std::collections::VecDeque;

use bytes::Bytes;
use rayon::prelude::*;

use crate::batch::Batch;
use crate::context::RequestContext;
use crate::error::EveError;
use crate::mixer::{Mixer, mix};
use crate::service::EveService;
use crate::token::{Token, TokenProof, outputs_digest};
use crate::tree::{Digest, ObjectTree};
use crate::working::{Accessor, WorkingState};

/// How a batch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Execution {
    /// Mixed into parallel batches, the requests of each on the executor's threads at once.
    Parallel,
    /// One request at a time on one thread, in the order parallel execution stands for
    /// (parallel batch after parallel batch: [`Mixed::order`](crate::Mixed::order)), so
    /// that with a right mixer both give the same outcome: after a rollback.
    Sequential,
}

/// What executing one batch produced.
#[derive(Clone, Debug)]
pub struct Executed {
    pub seq: u64,
    pub token: Token,
    /// The state's root digest after the batch.
    pub root: Digest,
    /// What the token covers besides the root.
    pub proof: TokenProof,
    /// The replies, in the batch's order (released on commit).
    pub outputs: Vec<Bytes>,
    pub execution: Execution,
    /// Parallel batches the batch was mixed into (with [`Execution::Sequential`]: one per
    /// request).
    pub parallel_batches: usize,
    /// Objects the batch wrote or removed, and the bytes of the written values.
    pub objects_written: usize,
    pub bytes_written: usize,
    /// Tree nodes hashed for the token: only those the batch changed.
    pub nodes_hashed: usize,
    /// Parallel batches in which two requests touched one object, one writing: conflicts
    /// the mixer missed.
    pub missed_conflicts: usize,
    /// Parallel batches undone and run again in order for a missed conflict (with
    /// [`MissedConflicts::Rerun`]).
    pub reruns: usize,
}

/// What an executor does about a conflict the mixer missed, which it sees in the accesses
/// of a parallel batch's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissedConflicts {
    /// Undo the parallel batch and run it again in order, before the token: the outcome is
    /// then always the mixed order's, and executors agree without a rollback.
    Rerun,
    /// Leave it to verification, as in the paper: executors whose threads interleaved
    /// differently disagree, and the batch is rolled back and run again in order.
    Verify,
}

/// Hands out epochs: one per parallel batch run at once, one per request run alone.
#[derive(Default)]
struct Epochs(u32);

impl Epochs {
    fn next(&mut self, position: usize) -> Accessor {
        self.0 += 1;
        Accessor {
            epoch: self.0,
            position: position as u32,
        }
    }
}

/// The last committed batch: its number, token and state.
#[derive(Clone, Debug)]
pub struct Stable {
    pub seq: u64,
    pub token: Token,
    /// What the token covers besides the root (none for the initial state).
    pub proof: Option<TokenProof>,
    pub tree: ObjectTree,
}

struct Pending {
    executed: Executed,
    tree: ObjectTree,
}

/// Runs batches of `S`'s requests with `M`'s guesses of their conflicts.
pub struct Executor<S: EveService, M> {
    service: S,
    mixer: M,
    pool: rayon::ThreadPool,
    threads: usize,
    stable: Stable,
    pending: VecDeque<Pending>,
    pending_max: usize,
    missed_conflicts: MissedConflicts,
}

impl<S, M> Executor<S, M>
where
    S: EveService,
    M: Mixer<S::Request> + Sync,
{
    /// An executor with `threads` execution threads, starting from `initial` (batch 0),
    /// keeping at most `pending_max` executed batches awaiting verification.
    pub fn new(
        service: S,
        mixer: M,
        threads: usize,
        initial: ObjectTree,
        pending_max: usize,
    ) -> Result<Self, EveError> {
        if threads == 0 {
            return Err(EveError::NoThreads);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("eve-exec-{i}"))
            .build()
            .map_err(|e| EveError::Pool(e.to_string()))?;
        let root = pool.install(|| initial.hash()).root;
        Ok(Executor {
            service,
            mixer,
            pool,
            threads,
            stable: Stable {
                seq: 0,
                token: Token::genesis(&root),
                proof: None,
                tree: initial,
            },
            pending: VecDeque::new(),
            pending_max: pending_max.max(1),
            missed_conflicts: MissedConflicts::Rerun,
        })
    }

    /// Sets what the executor does about conflicts the mixer missed (by default
    /// [`MissedConflicts::Rerun`]).
    pub fn with_missed_conflicts(mut self, policy: MissedConflicts) -> Self {
        self.missed_conflicts = policy;
        self
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn service(&self) -> &S {
        &self.service
    }

    /// The last committed batch.
    pub fn stable(&self) -> &Stable {
        &self.stable
    }

    /// The number of the next batch to execute.
    pub fn next_seq(&self) -> u64 {
        self.pending
            .back()
            .map_or(self.stable.seq, |p| p.executed.seq)
            + 1
    }

    /// The state after the last executed batch (committed or not).
    pub fn state(&self) -> &ObjectTree {
        self.pending.back().map_or(&self.stable.tree, |p| &p.tree)
    }

    /// The token of the last executed batch (committed or not).
    pub fn last_token(&self) -> Token {
        self.pending
            .back()
            .map_or(self.stable.token, |p| p.executed.token)
    }

    /// Executed batches awaiting verification, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = &Executed> {
        self.pending.iter().map(|p| &p.executed)
    }

    /// Executes the next batch.
    pub fn execute(
        &mut self,
        batch: &Batch<S::Request>,
        execution: Execution,
    ) -> Result<&Executed, EveError> {
        let expected = self.next_seq();
        if batch.seq != expected {
            return Err(EveError::OutOfOrder {
                expected,
                got: batch.seq,
            });
        }
        if self.pending.len() >= self.pending_max {
            return Err(EveError::PipelineFull {
                pending: self.pending.len(),
            });
        }
        let base = self.state().clone();
        let previous = self.last_token();
        let working = WorkingState::new(&base);
        let mut epochs = Epochs::default();
        let mut outputs = vec![Bytes::new(); batch.requests.len()];
        let (mut missed_conflicts, mut reruns) = (0, 0);
        let parallel_batches = match execution {
            Execution::Sequential => {
                for position in mix(&self.mixer, &batch.requests).order() {
                    let by = epochs.next(position);
                    outputs[position] = run_one(&self.service, &working, batch, by);
                }
                batch.requests.len()
            }
            Execution::Parallel => {
                let mixed = mix(&self.mixer, &batch.requests);
                for parallel in &mixed.parallel_batches {
                    if parallel.len() == 1 {
                        let by = epochs.next(parallel[0]);
                        outputs[parallel[0]] = run_one(&self.service, &working, batch, by);
                        continue;
                    }
                    let epoch = epochs.next(0).epoch;
                    let done: Vec<(usize, Bytes)> = self.pool.install(|| {
                        parallel
                            .par_iter()
                            .with_max_len(1)
                            .map(|&position| {
                                let by = Accessor {
                                    epoch,
                                    position: position as u32,
                                };
                                (position, run_one(&self.service, &working, batch, by))
                            })
                            .collect()
                    });
                    if working.take_conflict() {
                        missed_conflicts += 1;
                        if self.missed_conflicts == MissedConflicts::Rerun {
                            // The threads' interleaving may show in the outcome: run the
                            // parallel batch again, in order, from where it started.
                            reruns += 1;
                            working.undo(epoch);
                            for &position in parallel {
                                let by = epochs.next(position);
                                outputs[position] = run_one(&self.service, &working, batch, by);
                            }
                            continue;
                        }
                    }
                    for (position, output) in done {
                        outputs[position] = output;
                    }
                }
                mixed.parallel_batches.len()
            }
        };
        let mut tree = base.clone();
        let (objects_written, bytes_written) = working.apply_to(&mut tree);
        let report = self.pool.install(|| tree.hash());
        let proof = TokenProof {
            outputs: outputs_digest(&outputs),
            previous,
        };
        let executed = Executed {
            seq: batch.seq,
            token: Token::of(batch.seq, &report.root, Some(&proof)),
            proof,
            root: report.root,
            outputs,
            execution,
            parallel_batches,
            objects_written,
            bytes_written,
            nodes_hashed: report.nodes_hashed,
            missed_conflicts,
            reruns,
        };
        self.pending.push_back(Pending { executed, tree });
        Ok(&self.pending.back().expect("just pushed").executed)
    }

    /// Batch `seq` (the oldest awaiting verification) committed with `token`: if it is this
    /// executor's token, its state becomes stable and its replies are released (returned).
    /// Otherwise [`EveError::TokenMismatch`]: this executor diverged and must fetch the
    /// committed state ([`Executor::adopt`]).
    pub fn commit(&mut self, seq: u64, token: Token) -> Result<Vec<Bytes>, EveError> {
        match self.pending.front() {
            Some(p) if p.executed.seq == seq => {
                if p.executed.token != token {
                    return Err(EveError::TokenMismatch { seq });
                }
            }
            _ => return Err(EveError::NotPending { seq }),
        }
        let p = self.pending.pop_front().expect("checked above");
        self.stable = Stable {
            seq,
            token,
            proof: Some(p.executed.proof),
            tree: p.tree,
        };
        Ok(p.executed.outputs)
    }

    /// Discards every executed batch not committed: the state goes back to the last
    /// committed one. Returns the number of the next batch to execute.
    pub fn rollback(&mut self) -> u64 {
        self.pending.clear();
        self.stable.seq + 1
    }

    /// Takes `stable` (fetched from executors that agree on it) as the committed state,
    /// discarding everything executed after the previous one.
    pub fn adopt(&mut self, stable: Stable) {
        self.pending.clear();
        self.stable = stable;
    }
}

fn run_one<S: EveService>(
    service: &S,
    working: &WorkingState<'_>,
    batch: &Batch<S::Request>,
    by: Accessor,
) -> Bytes {
    let mut ctx = RequestContext::new(working, batch.nd, batch.seq, by);
    service.execute(&batch.requests[by.position as usize], &mut ctx)
}

fn run_sequentially<S: EveService>(
    service: &S,
    working: &WorkingState<'_>,
    batch: &Batch<S::Request>,
    epochs: &mut Epochs,
) -> Vec<Bytes> {
    (0..batch.requests.len())
        .map(|position| run_one(service, working, batch, epochs.next(position)))
        .collect()
}

/// Runs `batch` in its order on one thread, as an unreplicated sequential server would: no
/// mixing, no hashing, no token. The baseline execute-verify is measured against (a right
/// mixer reorders only requests that do not conflict, so the outcome is the same).
pub fn run_in_order<S: EveService>(
    service: &S,
    tree: &mut ObjectTree,
    batch: &Batch<S::Request>,
) -> Vec<Bytes> {
    let base = tree.clone();
    let working = WorkingState::new(&base);
    let outputs = run_sequentially(service, &working, batch, &mut Epochs::default());
    working.apply_to(tree);
    outputs
}

#[cfg(test)]
mod tests;
