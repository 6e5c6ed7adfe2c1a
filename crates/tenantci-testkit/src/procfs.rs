//! What /proc says about a process's memory and CPU time, for the benchmarks (Linux only).

use std::time::Duration;

/// A process's memory from `/proc/<pid>/status`, in KiB (0 where unreadable).
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    /// Resident set size now (`VmRSS`).
    pub rss: u64,
    /// Peak RSS.
    pub hwm: u64,
    /// Heap, stacks: what the process allocated.
    pub anon: u64,
    /// Mapped files, mostly the binary's own code pages (shared with every other process
    /// running the same binary).
    pub file: u64,
}

/// The memory of process `pid` now; every field 0 when the process is gone.
pub fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Memory {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    }
}

/// User + system CPU time of a process.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start at field 3; utime is 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    // USER_HZ is 100 on every Linux architecture.
    Duration::from_secs_f64(f.iter().sum::<u64>() as f64 / 100.0)
}
