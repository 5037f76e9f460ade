//! The process's memory allocator: jemalloc, keeping the pages the program frees for a
//! moment before they go back to the kernel (in every command but the simulations, which
//! run on transparent huge pages instead), and its statistics exported as gauges in every
//! replica's metrics.

/// jemalloc: the replicas allocate on one thread and free on another all the time (requests
/// read by a connection thread, executed and dropped by the execution thread), where it
/// costs glibc's allocator a large share of the CPU.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The allocator's view of the heap, as gauges in every replica's metrics: bytes the
/// program holds against bytes the allocator keeps resident tell a leak (both grow) from
/// fragmentation or cached pages (only the second does).
pub fn heap_gauges() -> Vec<tagma_node::metrics::ProcessGauge> {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The statistics are cached; advancing the epoch refreshes them.
    if epoch::advance().is_err() {
        return Vec::new();
    }
    let read = |r: tikv_jemalloc_ctl::Result<usize>| r.map_or(0, |v| v as u64);
    vec![
        (
            "tagma_heap_allocated_bytes",
            "Bytes the program has allocated and not freed (jemalloc stats.allocated)",
            read(stats::allocated::read()),
        ),
        (
            "tagma_heap_active_bytes",
            "Bytes in the allocator's active pages (jemalloc stats.active)",
            read(stats::active::read()),
        ),
        (
            "tagma_heap_resident_bytes",
            "Bytes the allocator keeps resident, its metadata and cached pages included (jemalloc stats.resident)",
            read(stats::resident::read()),
        ),
    ]
}

/// Keeps the pages the program frees for `freed_pages_ms` before they go back to the kernel
/// (jemalloc's `dirty_decay_ms`, for the arenas that exist and those created later; why,
/// and the default: [`tagma_cli::cmd::replica::MemoryArgs`]), and turns on jemalloc's
/// background threads, which return the decayed pages off the program's threads. An
/// operator's own settings in `_RJEM_MALLOC_CONF` are left as they are.
pub fn tune(freed_pages_ms: u64) {
    use tikv_jemalloc_ctl::{Access, AsName, arenas, background_thread};
    if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
        return;
    }
    let decay = isize::try_from(freed_pages_ms).unwrap_or(isize::MAX);
    let mut results = vec![
        background_thread::write(true),
        b"arenas.dirty_decay_ms\0".name().write(decay),
    ];
    // The arenas created so far keep the decay they were born with; each is set in turn.
    // An index whose arena does not exist yet answers an error and gets the new default
    // when it is created.
    for arena in 0..arenas::narenas::read().unwrap_or(0) {
        let key = format!("arena.{arena}.dirty_decay_ms\0");
        if key.as_bytes().name().read().map(|_: isize| ()).is_ok() {
            results.push(key.as_bytes().name().write(decay));
        }
    }
    for e in results.into_iter().filter_map(Result::err) {
        tracing::warn!(error = %e, "could not tune the allocator; freed pages stay cached longer");
    }
}

/// jemalloc's settings for the simulations: every mapping of the heap, its metadata too,
/// asks the kernel for transparent huge pages (`madvise(MADV_HUGEPAGE)`).
pub const SIMULATION_MALLOC_CONF: &str = "thp:always,metadata_thp:always";

/// Runs the program again from the start with [`SIMULATION_MALLOC_CONF`], unless an
/// operator's `_RJEM_MALLOC_CONF` is set (then it is kept). jemalloc reads its settings
/// once, before `main`, so a setting for one command alone takes a new start.
///
/// A simulation of many nodes touches each node's state at random between windows of
/// simulated time: hundreds of megabytes in 4 KiB pages miss the processor's address
/// translation cache on most of those touches, 2 MiB pages far less often. A 1,024-node
/// VCube-Sync simulation on huge pages takes about 0.95 of the wall time and 0.90 of the
/// processor time (4-second runs on two cores, alternating, in both orders). Where the
/// kernel offers no huge pages (`/sys/kernel/mm/transparent_hugepage/enabled` set to
/// `never`) the setting changes nothing. Returns only if the new start fails, after a
/// warning: the simulation then runs on ordinary pages, with the same results.
pub fn restart_on_huge_pages() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
        return;
    }
    let error = match std::env::current_exe() {
        Ok(program) => std::process::Command::new(program)
            .args(std::env::args_os().skip(1))
            .env("_RJEM_MALLOC_CONF", SIMULATION_MALLOC_CONF)
            .exec(),
        Err(e) => e,
    };
    tracing::warn!(
        error = %error,
        "could not start again on huge pages; the simulation runs on ordinary pages"
    );
}

#[cfg(test)]
mod tests {
    use tikv_jemalloc_ctl::{Access, AsName, background_thread};

    #[test]
    fn tuning_turns_on_background_purging_and_the_decay_asked_for() {
        // A value that is neither jemalloc's default nor the servers' own, so that only the
        // tuning can have set it.
        super::tune(250);
        assert!(background_thread::read().unwrap());
        let default: isize = b"arenas.dirty_decay_ms\0".name().read().unwrap();
        assert_eq!(default, 250);
        // Arena 0 exists from the first allocation, before the tuning.
        let first: isize = b"arena.0.dirty_decay_ms\0".name().read().unwrap();
        assert_eq!(first, 250);
        super::tune(0);
        let first: isize = b"arena.0.dirty_decay_ms\0".name().read().unwrap();
        assert_eq!(first, 0, "pages returned at once");
        assert!(!super::heap_gauges().is_empty());
    }
}
