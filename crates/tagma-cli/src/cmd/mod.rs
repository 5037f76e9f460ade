//! The `tagma` subcommands: each module holds one command's arguments (clap) and the code
//! that runs it. The demo and the benchmarks themselves live in `tagma-bench`, local
//! clusters in `tagma-cluster`; these modules translate arguments and print.

pub mod bench;
pub mod bench_eve;
pub mod chaos;
pub mod crdt;
pub mod crdt_figures;
pub mod demo;
pub mod errors;
pub mod eve;
pub mod gateway;
pub mod history;
pub mod init;
pub mod kv;
pub mod replica;
pub mod service;
pub mod sim;
pub mod space;
pub mod status;
pub mod view;

use std::path::PathBuf;

use anyhow::{Context, Result};

/// The `tagma` binary itself: local clusters run their replicas with it.
pub fn tagma_exe() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find the tagma executable")
}
