//! The dispatcher's JSON log (`--log-format json`), read as it grows: the lines per task the
//! latency is measured with, and the lease. Shared with `bench_vm` (`#[path]`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::DEADLINE;
use crate::report::parse_time;

/// The dispatcher's JSON log, read as it grows.
pub struct LogTail {
    pub file: std::fs::File,
    pub partial: String,
    /// task id -> time of `claimed and queued` / `executor started`.
    pub queued: BTreeMap<i64, DateTime<Utc>>,
    pub started: BTreeMap<i64, DateTime<Utc>>,
    /// VM backend: task id -> time of `sandbox created` (the Lifecycle API create returned).
    pub sandboxes: BTreeMap<i64, DateTime<Utc>>,
    pub leading: bool,
    pub errors: Vec<String>,
}

impl LogTail {
    pub fn open(path: &Path) -> LogTail {
        LogTail {
            file: std::fs::File::open(path).unwrap(),
            partial: String::new(),
            queued: BTreeMap::new(),
            started: BTreeMap::new(),
            sandboxes: BTreeMap::new(),
            leading: false,
            errors: Vec::new(),
        }
    }

    pub fn poll(&mut self) {
        let mut buf = String::new();
        self.file.read_to_string(&mut buf).unwrap();
        self.partial.push_str(&buf);
        let Some(end) = self.partial.rfind('\n') else {
            return;
        };
        let complete: String = self.partial.drain(..=end).collect();
        for line in complete.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let at = || parse_time(v["timestamp"].as_str().unwrap());
            let task = v["task"].as_i64();
            match (v["message"].as_str().unwrap_or(""), task) {
                ("claimed and queued", Some(t)) => {
                    self.queued.insert(t, at());
                }
                ("executor started", Some(t)) => {
                    self.started.insert(t, at());
                }
                ("sandbox created", Some(t)) => {
                    self.sandboxes.insert(t, at());
                }
                (m, _) if m.starts_with("acquired the scheduler lease") => self.leading = true,
                _ => {}
            }
            if matches!(v["level"].as_str(), Some("ERROR" | "WARN")) {
                self.errors.push(line.to_string());
            }
        }
    }

    /// Reads until `done(self)`, calling `each` every 20 ms.
    pub async fn until(
        &mut self,
        what: &str,
        done: impl Fn(&Self) -> bool,
        mut each: impl FnMut(),
    ) {
        let until = Instant::now() + DEADLINE;
        loop {
            self.poll();
            each();
            if done(self) {
                return;
            }
            assert!(Instant::now() < until, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
