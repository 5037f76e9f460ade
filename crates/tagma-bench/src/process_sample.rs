//! What `/proc` says about a running process: resident memory, threads, open descriptors.

/// One look at a process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessSample {
    /// Resident set size (`VmRSS`), MiB.
    pub rss_mb: f64,
    pub threads: u64,
    /// Entries of `/proc/<pid>/fd`.
    pub fds: u64,
}

impl ProcessSample {
    /// Reads process `pid` (`None` if it is gone).
    pub fn read(pid: u32) -> Option<ProcessSample> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
        Some(ProcessSample {
            rss_mb: status_field(&status, "VmRSS")? as f64 / 1024.0,
            threads: status_field(&status, "Threads")?,
            fds,
        })
    }
}

/// The number of a `/proc/<pid>/status` line `NAME:  value [kB]`.
pub(crate) fn status_field(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(':'))
    })?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_by_name() {
        let status = "Name:\ttagma\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\nThreads:\t17\n";
        assert_eq!(status_field(status, "VmRSS"), Some(1024));
        assert_eq!(status_field(status, "Threads"), Some(17));
        assert_eq!(status_field(status, "Vm"), None);
        assert_eq!(status_field(status, "Missing"), None);
    }

    #[test]
    fn this_process_can_be_read() {
        let me = ProcessSample::read(std::process::id()).expect("our own /proc entry");
        assert!(me.rss_mb > 0.0 && me.threads >= 1 && me.fds >= 3, "{me:?}");
    }
}
