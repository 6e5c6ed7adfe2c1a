//! Live changes while `front serve` runs: the config (allow-lists, limits), every cluster's
//! ClientCA bundle and the front's serving pair are read again when one of them changes on
//! disk, or at once on SIGHUP; each deny-list change (its own watch, `deny`) rebuilds the rules
//! around the files already read. A new [`Rules`] value is published whole; one that does not
//! build is not applied: the front keeps serving with the rules it had and says why (a log line
//! naming the file and the error, `tenantci_front_config_reload_success` 0).
//!
//! Why a poll of the files' contents every second and not a file watch (inotify): they are a
//! handful of small files; reading them costs nothing at that pace, and it sees every way a file
//! is replaced (an editor's rename, a Secret volume's symlink swap, a network filesystem, a
//! directory recreated) where a watch needs each case handled and misses some. A second is
//! the deny-list's cadence, "within seconds". SIGHUP is for whoever must know a change is
//! applied before moving on (a config manager): it does not wait for the next poll.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;

use tenantci_core::{Error, Result};

use super::config::FrontConfig;
use super::deny::DenyList;
use super::metrics::Metrics;
use super::rules::Rules;

/// How often the files are looked at.
pub const POLL: Duration = Duration::from_secs(1);

/// The last reload's outcome, as `front status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reload {
    /// Whether the rules in force are those of the files on disk.
    pub ok: bool,
    /// When it was tried (RFC 3339); the start for the first rules.
    pub at: String,
    /// What set it off: `start`, `change on disk`, `SIGHUP`, `deny-list`.
    pub trigger: String,
    /// Why it was not applied (naming the file); None when applied.
    pub error: Option<String>,
}

impl Reload {
    fn now(trigger: &str, error: Option<String>) -> Self {
        Reload {
            ok: error.is_none(),
            at: tenantci_core::pki::inspect::rfc3339(time::OffsetDateTime::now_utc()),
            trigger: trigger.into(),
            error,
        }
    }
}

/// The rules in force and the last reload, as the rest of `serve` reads them.
pub struct Live {
    /// The rules in force: the last value that built.
    pub rules: watch::Receiver<Arc<Rules>>,
    /// The last reload's outcome.
    pub reload: watch::Receiver<Reload>,
}

/// What the files looked like: each path with a hash of its bytes (None: unreadable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Vec<(PathBuf, Option<u64>)>);

impl Fingerprint {
    fn paths_are(&self, files: &[PathBuf]) -> bool {
        self.0.len() == files.len() && self.0.iter().zip(files).all(|((p, _), f)| p == f)
    }

    /// Reads `files` now. Not a security hash: it tells a change, nobody forges it.
    pub fn of(files: &[PathBuf]) -> Self {
        Fingerprint(
            files
                .iter()
                .map(|p| {
                    let hash = std::fs::read(p).ok().map(|bytes| {
                        let mut h = DefaultHasher::new();
                        bytes.hash(&mut h);
                        h.finish()
                    });
                    (p.clone(), hash)
                })
                .collect(),
        )
    }
}

/// Every file rules read from `config` depend on: the config's own path first.
pub fn files(config_path: &Path, config: &FrontConfig) -> Vec<PathBuf> {
    let mut all = vec![config_path.to_path_buf()];
    all.extend(super::rules::files_of(config));
    all
}

/// Keys a running front cannot change (its listeners, the gateway it resolves through, the
/// deny-list it follows): kept at their running values in `next`, each named in the return so
/// the log can say a restart applies it. Pure.
pub fn pin_restart_keys(running: &FrontConfig, next: &mut FrontConfig) -> Vec<&'static str> {
    let mut pinned = Vec::new();
    if next.listen != running.listen {
        next.listen = running.listen;
        pinned.push("listen");
    }
    if next.metrics_listen != running.metrics_listen {
        next.metrics_listen = running.metrics_listen;
        pinned.push("metrics_listen");
    }
    if next.state_dir != running.state_dir {
        next.state_dir = running.state_dir.clone();
        pinned.push("state_dir");
    }
    if next.deny_list_path() != running.deny_list_path() {
        next.deny_list = running.deny_list.clone();
        pinned.push("deny_list");
    }
    pinned
}

/// Starts following: `seen` is the files as they were before `initial` was read from them (a
/// change in between is seen at the first poll). Installs the SIGHUP handler before it
/// returns, so a SIGHUP after the ready line never kills the front.
pub fn follow(
    config_path: PathBuf,
    initial: Rules,
    seen: Fingerprint,
    deny: watch::Receiver<Arc<DenyList>>,
    metrics: Arc<Metrics>,
) -> Result<Live> {
    let hup = signal(SignalKind::hangup())
        .map_err(|e| Error::external("cannot install the front's SIGHUP handler").caused_by(e))?;
    metrics.set_reload(true);
    metrics.set_cert_expiry(initial.serving_cert().not_after.unix_timestamp());
    let (rules_tx, rules) = watch::channel(Arc::new(initial));
    let (reload_tx, reload) = watch::channel(Reload::now("start", None));
    let follower = Follower {
        watched: files(&config_path, rules.borrow().config()),
        config_path,
        rules: rules_tx,
        reload: reload_tx,
        deny,
        metrics,
    };
    tokio::spawn(follower.run(seen, hup));
    Ok(Live { rules, reload })
}

struct Follower {
    config_path: PathBuf,
    /// The files of the config last read, applied or not: a ClientCA a new config names is
    /// followed even while that config waits for it.
    watched: Vec<PathBuf>,
    rules: watch::Sender<Arc<Rules>>,
    reload: watch::Sender<Reload>,
    deny: watch::Receiver<Arc<DenyList>>,
    metrics: Arc<Metrics>,
}

impl Follower {
    async fn run(mut self, mut seen: Fingerprint, mut hup: Signal) {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let now = Fingerprint::of(&self.watched);
                    if now != seen {
                        seen = self.reread(now, "change on disk");
                    }
                }
                Some(()) = hup.recv() => {
                    let now = Fingerprint::of(&self.watched);
                    seen = self.reread(now, "SIGHUP");
                }
                changed = self.deny.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.deny_changed();
                }
            }
            if self.rules.is_closed() {
                return;
            }
        }
    }

    /// Reads the config and every file it names (`seen`: how they looked just before);
    /// applies the result, or keeps the rules in force and says why. Returns the fingerprint
    /// to compare the next poll with.
    fn reread(&mut self, seen: Fingerprint, trigger: &str) -> Fingerprint {
        let deny = self.deny.borrow().clone();
        let running = self.rules.borrow().config().clone();
        let next = FrontConfig::load(&self.config_path).and_then(|mut config| {
            let pinned = pin_restart_keys(&running, &mut config);
            let watched = files(&self.config_path, &config);
            if watched != self.watched {
                self.watched = watched;
            }
            Rules::read(config, deny).map(|r| (r, pinned))
        });
        self.apply(next, trigger);
        if seen.paths_are(&self.watched) {
            seen
        } else {
            Fingerprint::of(&self.watched)
        }
    }

    fn apply(&self, next: Result<(Rules, Vec<&'static str>)>, trigger: &str) {
        match next {
            Ok((rules, pinned)) => {
                for key in pinned {
                    tracing::warn!(
                        "front: `{key}` changed in {}; a running front keeps its old value, a restart applies it (the rest of the change is applied now)",
                        self.config_path.display()
                    );
                }
                for said in rules.config().limits.clamped() {
                    tracing::warn!("front: {said}");
                }
                let allowed: usize = rules.config().clusters.iter().map(|c| c.allow.len()).sum();
                tracing::info!(
                    trigger,
                    clusters = rules.config().clusters.len(),
                    allowed,
                    "front: applied {} and the files it names; open tunnels are checked against the new rules",
                    self.config_path.display()
                );
                self.metrics
                    .set_cert_expiry(rules.serving_cert().not_after.unix_timestamp());
                self.metrics.set_reload(true);
                let _ = self.rules.send(Arc::new(rules));
                let _ = self.reload.send(Reload::now(trigger, None));
            }
            Err(e) => {
                // One line: a TOML error quotes the offending line over several.
                let why = format!("{e:#}")
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                tracing::warn!(
                    trigger,
                    "front: a change is not applied: {why}{}; the front keeps serving with the rules it had",
                    e.hint_text().map(|h| format!(" ({h})")).unwrap_or_default()
                );
                self.metrics.set_reload(false);
                let _ = self.reload.send(Reload::now(trigger, Some(why)));
            }
        }
    }

    fn deny_changed(&mut self) {
        let deny = self.deny.borrow_and_update().clone();
        let rebuilt = self.rules.borrow().with_deny(deny);
        match rebuilt {
            Ok(rules) => {
                let _ = self.rules.send(Arc::new(rules));
            }
            // Only a verifier that no longer builds from roots that built before: not seen,
            // but never a reason to drop the deny-list's change silently.
            Err(e) => tracing::error!(
                "front: the deny-list's change cannot be applied: {e:#}; restart the front"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_a_running_front_cannot_change_are_kept_and_named() {
        let text = r#"
listen = "127.0.0.1:7443"
state_dir = "/s"
serving_cert = "/f/tls.crt"
serving_key = "/f/tls.key"
deny_list = "/f/denied-serials"
[[cluster]]
name = "ci"
[[cluster.allow]]
common_name = "gitlab-runner"
organization = "gitlab-runner"
"#;
        let running: FrontConfig = toml_edit::de::from_str(text).unwrap();
        let mut same = running.clone();
        assert!(pin_restart_keys(&running, &mut same).is_empty());
        let mut next: FrontConfig = toml_edit::de::from_str(
            &text
                .replace("7443", "8443")
                .replace("/s", "/t")
                .replace("/f/denied", "/g/denied"),
        )
        .unwrap();
        next.clusters[0].allow.clear();
        let pinned = pin_restart_keys(&running, &mut next);
        assert_eq!(pinned, ["listen", "state_dir", "deny_list"]);
        assert_eq!(next.listen, running.listen);
        assert_eq!(next.state_dir, running.state_dir);
        assert_eq!(next.deny_list_path(), running.deny_list_path());
        assert!(next.clusters[0].allow.is_empty(), "the rest is applied");
    }

    #[test]
    fn a_fingerprint_changes_with_the_bytes_and_with_a_file_gone() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a");
        std::fs::write(&f, "one").unwrap();
        let files = vec![f.clone()];
        let first = Fingerprint::of(&files);
        assert_eq!(first, Fingerprint::of(&files));
        std::fs::write(&f, "two").unwrap();
        let second = Fingerprint::of(&files);
        assert_ne!(first, second);
        std::fs::remove_file(&f).unwrap();
        assert_ne!(second, Fingerprint::of(&files));
    }
}
