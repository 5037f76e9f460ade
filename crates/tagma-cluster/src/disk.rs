//! Damage to a stopped replica's data directory, as failing disks do it: a corrupt log
//! record, a corrupt checkpoint, or a checkpoint that lies (a state nobody ordered under a
//! valid digest). The chaos scenarios and the state-transfer benchmark use it to check that
//! a replica notices and recovers from the others.

use std::path::Path;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use tagma_core::Mode;
use tagma_kv::KvOp;

/// The files of `dir` whose name ends in `ext`, sorted.
pub fn files(dir: &Path, ext: &str) -> Result<Vec<std::path::PathBuf>> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    Ok(out)
}

/// Flips one byte a third of the way into the records of the first log segment that holds
/// some: a record in the middle of the log fails its checksum, valid ones follow it.
pub fn corrupt_log(dir: &Path) -> Result<()> {
    for path in files(dir, "log")? {
        let mut bytes = std::fs::read(&path)?;
        let used = bytes.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
        if used < 4096 {
            continue;
        }
        bytes[used / 3] ^= 0xff;
        std::fs::write(&path, bytes)?;
        return Ok(());
    }
    bail!(
        "no log segment with enough records to corrupt in {} (raise --before-s)",
        dir.display()
    )
}

/// Flips one byte in the middle of the newest checkpoint.
pub fn corrupt_checkpoint(dir: &Path) -> Result<()> {
    let Some(path) = files(dir, "ckp")?.pop() else {
        bail!("no checkpoint yet in {} (raise --before-s)", dir.display());
    };
    let mut bytes = std::fs::read(&path)?;
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&path, bytes)?;
    Ok(())
}

/// The key a lying disk adds to the state it returns.
const LIE_KEY: &[u8] = b"chaos/lie";

/// Rewrites the newest checkpoint with a state that was never ordered — the key-value map
/// gains [`LIE_KEY`] — with a valid digest and checksum, as a disk that returns wrong content
/// would: recovery reads it without complaint, and only the state vote after the restart
/// (the replica's state against its peers') can tell.
pub fn lie_in_checkpoint(dir: &Path) -> Result<()> {
    use tagma_exec::Service;
    let store = tagma_storage::CheckpointStore::open(dir)?;
    let Some(checkpoint) = store.load_newest()? else {
        bail!("no checkpoint yet in {} (raise --before-s)", dir.display());
    };
    let state = checkpoint.state;
    // Only the service's snapshot is wanted: the view the checkpoint names replaces this
    // placeholder membership.
    let membership = tagma_core::view::Membership {
        view: tagma_wire::View {
            id: tagma_wire::ViewId(0),
            f: 0,
            members: Vec::new(),
        },
        admin: None,
        mode: Mode::Bft,
        history: Vec::new(),
    };
    let mut executor = tagma_exec::Executor::new(
        tagma_kv::KvService::new(),
        tagma_wire::ViewId(0),
        1 << 10,
        1 << 20,
    )
    .with_membership(membership);
    executor.restore(&state).map_err(|e| {
        anyhow::anyhow!("the checkpoint in {} does not restore: {e}", dir.display())
    })?;
    let snapshot = executor.service().snapshot();
    if !state.ends_with(&snapshot) {
        bail!(
            "the checkpoint in {} does not end with the service's snapshot",
            dir.display()
        );
    }
    let mut lie = tagma_kv::KvService::new();
    lie.install_snapshot(&snapshot)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    lie.apply(KvOp::Put {
        key: Bytes::from_static(LIE_KEY),
        value: Bytes::from_static(b"never ordered"),
    });
    // The executor's part (position, sessions, replies, view) is kept as it was.
    let head = &state[..state.len() - snapshot.len()];
    let mut lied = head.to_vec();
    lied.extend_from_slice(&lie.snapshot());
    store.write(checkpoint.cid, &lied)?;
    Ok(())
}
