//! The warm pools' demand as the leader's actors report it: the webhook's announcements and
//! the scheduler's claims; read by the pod backend's pause-Deployment applier
//! (`backend::pod::pause`), which sizes each pool by [`super::warm`]'s plan and records the
//! slots it applied, and by the worker, which asks whether a warm slot was there for its hit
//! and miss counts. Lives as long as the process, across leadership terms.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::class::ExecutorClass;
use super::warm::{Arrivals, Demand};

#[derive(Debug)]
struct ClassDemand {
    announced: u32,
    arrivals: Arrivals,
    /// The slots last applied.
    warm: u32,
}

/// Each class's demand as the leader's actors see it (only classes with a warm pool); it lives
/// as long as the process, across leader terms.
pub struct WarmDemand {
    origin: Instant,
    classes: Mutex<BTreeMap<String, ClassDemand>>,
}

impl WarmDemand {
    /// No demand yet for each class of `classes` with a warm pool; other classes are not tracked.
    pub fn new(classes: &[ExecutorClass]) -> Self {
        let classes = classes
            .iter()
            .filter_map(|c| {
                let w = c.warm.as_ref()?;
                let d = ClassDemand {
                    announced: 0,
                    arrivals: Arrivals::new(w.window.get()),
                    warm: 0,
                };
                Some((c.name.clone(), d))
            })
            .collect();
        WarmDemand {
            origin: Instant::now(),
            classes: Mutex::new(classes),
        }
    }

    fn with<T>(&self, class: &str, f: impl FnOnce(&mut ClassDemand, Duration) -> T) -> Option<T> {
        let now = self.origin.elapsed();
        let mut g = self.classes.lock().unwrap_or_else(|p| p.into_inner());
        g.get_mut(class).map(|d| f(d, now))
    }

    /// The webhook announced a queued job of `class`.
    pub fn announced(&self, class: &str) {
        self.with(class, |d, now| {
            d.announced += 1;
            d.arrivals.record(now);
        });
    }

    /// The scheduler claimed a task of `class`: one announcement fewer in sight, or, when
    /// none was announced (no webhook, a lost delivery), an arrival of its own.
    pub fn claimed(&self, class: &str) {
        self.with(class, |d, now| {
            if d.announced > 0 {
                d.announced -= 1;
            } else {
                d.arrivals.record(now);
            }
        });
    }

    /// Whether `class` has a pool, and a warm slot now (for the hit and miss counts).
    pub fn has_warm_slot(&self, class: &str) -> Option<bool> {
        self.with(class, |d, _| d.warm > 0)
    }

    /// `class`'s demand now, with `running` executors.
    pub(crate) fn demand(&self, class: &str, running: u32) -> Option<Demand> {
        self.with(class, |d, now| Demand {
            announced: d.announced,
            queued: 0,
            running,
            recent_arrivals: d.arrivals.recent(now),
            warm: d.warm,
            since_demand: d.arrivals.since_last(now),
        })
    }

    pub(crate) fn applied(&self, class: &str, slots: u32) {
        self.with(class, |d, _| d.warm = slots);
    }
}
