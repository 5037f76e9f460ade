//! The consensus core through its calling contract (`Replica::new`, `Replica::handle`,
//! `Replica::poll_action`): the exact actions it takes for each input, grouped by protocol,
//! whole in-memory clusters driven in virtual time, and the scenario files of
//! `tests/scenarios/` (see `scenarios`).

mod harness;

mod answer_budget;
mod batch_fill;
mod catch_up;
mod clusters;
mod durable_log;
mod durable_votes;
mod leader_change;
mod membership;
mod normal_case;
mod scenarios;
mod startup;
mod state_check;
mod state_transfer;
mod state_vote;
mod time_batch;
