//! The shared actions cache, isolated per repository: what `@actions/cache` (and the `setup-*`
//! actions' caching) in every executor saves to and restores from, served by the dispatcher
//! beside the facade and reached through the executor-proxy.
//!
//! - `grant`: the per-task token in `ACTIONS_CACHE_URL` that names the task's repository;
//! - `index`: entries, lookups and range checks (pure);
//! - `storage`: the object store (a directory or an S3 bucket), laid out per repository;
//! - `eviction`: which entries go (pure); `protocol`: the HTTP routes;
//! - `settings`: `[cache]` of the config; `init`: the section `dispatch init`'s flags give.
//!
//! Why here: the dispatcher already holds the capability key that makes the grants, and is
//! already reached by every executor, whatever its backend, through its proxy; a separate
//! service would need its own key, certificate and reachability for the same callers.

pub mod eviction;
pub mod grant;
pub mod index;
pub mod init;
pub mod protocol;
pub mod settings;
pub mod storage;

use std::sync::Arc;
use std::time::Duration;

use crate::capability::CapabilityKey;
use crate::metrics::Metrics;
use storage::Storage;

/// Reservations never committed are dropped after this (a job killed mid-upload).
const STALE_UPLOAD: Duration = Duration::from_secs(24 * 3600);

/// Unix milliseconds now: fine enough that entries saved one after the other are ordered for
/// eviction.
pub fn now() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

/// The shared actions cache of one dispatcher: its store, the key its grants are checked
/// with, its limits, and the background sweep that keeps it within them ([`Cache::open`]).
pub struct Cache {
    /// Where entries live.
    pub storage: Storage,
    /// The dispatcher's capability key: grants and download tickets are MACs under it.
    pub capability_key: CapabilityKey,
    /// Where hits, misses, refusals and evictions are counted.
    pub metrics: Arc<Metrics>,
    /// All entries together at most, in bytes (`cache.max_size_mib`); past it a sweep evicts the
    /// least recently used.
    pub max_size: u64,
    /// One entry at most, in bytes (`cache.max_entry_size_mib`); a larger one is refused.
    pub max_entry_size: u64,
    /// An entry not restored for this long is evicted (`cache.max_age`).
    pub max_age: Duration,
    /// Whether a sweep runs, and whether one more was asked for while it ran: a burst of
    /// commits costs one sweep after the running one, not one each.
    sweeps: std::sync::Mutex<Sweeps>,
    /// Written by a sweep while it lists and deletes; a lookup reads it from its read of the
    /// entries to its touch of the one it found.
    evicting: tokio::sync::RwLock<()>,
}

impl Cache {
    /// The cache `settings` describe, its storage opened (the directory created).
    pub fn open(
        settings: &settings::CacheSettings,
        capability_key: CapabilityKey,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Cache>, String> {
        Ok(Arc::new(Cache {
            storage: Storage::open(settings)?,
            capability_key,
            metrics,
            max_size: settings.max_size(),
            max_entry_size: settings.max_entry_size(),
            max_age: settings.max_age.get(),
            sweeps: std::sync::Mutex::new(Sweeps::default()),
            evicting: tokio::sync::RwLock::new(()),
        }))
    }

    /// Sweeps in the background (at start, and after a commit added bytes): at once when no
    /// sweep runs, else once more after the running one.
    pub fn sweep_soon(self: &Arc<Self>) {
        {
            let mut s = self.sweeps.lock().expect("the sweep state lock");
            if s.running {
                s.again = true;
                return;
            }
            s.running = true;
        }
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                me.sweep().await;
                let mut s = me.sweeps.lock().expect("the sweep state lock");
                if !std::mem::take(&mut s.again) {
                    s.running = false;
                    return;
                }
            }
        });
    }

    /// Deletes what [`eviction::plan`] picks and the stale uploads; records the bytes kept.
    /// One at a time: only [`Self::sweep_soon`]'s task calls it.
    async fn sweep(&self) {
        let _evicting = self.evicting.write().await;
        let storage::Inventory {
            entries: all,
            uploads,
        } = match self.storage.inventory().await {
            Ok(inventory) => inventory,
            Err(e) => {
                tracing::warn!(error = %e, "cache: cannot list the entries to evict");
                return;
            }
        };
        let total = eviction::total_size(&all);
        let gone = eviction::plan(all, now(), self.max_age.as_millis() as i64, self.max_size);
        let mut evicted = 0u64;
        for s in &gone {
            match self.storage.delete_entry(&s.repository, &s.entry).await {
                Ok(()) => {
                    evicted = evicted.saturating_add(s.entry.size);
                    self.metrics.cache_evicted(s.entry.size);
                }
                Err(e) => tracing::warn!(error = %e, "cache: cannot evict an entry"),
            }
        }
        self.metrics.cache_stored(total.saturating_sub(evicted));
        if !gone.is_empty() {
            tracing::info!(entries = gone.len(), bytes = evicted, "cache: evicted");
        }
        let before = now() - STALE_UPLOAD.as_millis() as i64;
        if let Err(e) = self.storage.drop_stale_uploads(&uploads, before).await {
            tracing::warn!(error = %e, "cache: cannot drop stale uploads");
        }
    }
}

#[derive(Default)]
struct Sweeps {
    running: bool,
    again: bool,
}
