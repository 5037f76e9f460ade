//! `tagma history check FILE`: judges a history in the exported JSON-lines format (written
//! by `tagma chaos --history` or `tagma demo --history`, or by any other tool) with the
//! project's linearizability checker, key by key.

use std::path::PathBuf;

use anyhow::Result;

/// `tagma history`.
#[derive(clap::Args)]
pub struct HistoryArgs {
    #[command(subcommand)]
    pub what: HistoryCmd,
}

#[derive(clap::Subcommand)]
pub enum HistoryCmd {
    /// Check that a history is linearizable (exit status 1 if it is not, or if the search
    /// gives up on a key). One JSON object per line: client, op (get, put, append, delete,
    /// cas), key, value, from and ok (cas), call and return (ns; return null when the
    /// outcome is unknown), fail (true when known not to have taken effect).
    Check {
        /// The history file.
        file: PathBuf,
        /// Print one JSON object instead of the summary.
        #[arg(long)]
        json: bool,
    },
}

/// `tagma history`.
pub fn run(args: HistoryArgs) -> Result<()> {
    let HistoryCmd::Check { file, json } = args.what;
    let records = tagma_history::read_jsonl(&file)?;
    let verdict = tagma_history::check_history(&records);
    if json {
        println!(
            "{}",
            serde_json::json!({
                "file": file.display().to_string(),
                "operations": verdict.operations,
                "unknown_outcome": records.iter().filter(|r| r.ret.is_none()).count(),
                "keys": verdict.keys,
                "linearizable": verdict.linearizable(),
                "not_linearizable": verdict.not_linearizable,
                "inconclusive": verdict.inconclusive,
            })
        );
    } else {
        println!(
            "{}: {} operations on {} keys — {}",
            file.display(),
            verdict.operations,
            verdict.keys,
            if verdict.linearizable() {
                "linearizable".to_owned()
            } else {
                format!(
                    "NOT linearizable (keys {:?}; search gave up on {:?})",
                    verdict.not_linearizable, verdict.inconclusive
                )
            }
        );
    }
    if !verdict.linearizable() {
        std::process::exit(1);
    }
    Ok(())
}
