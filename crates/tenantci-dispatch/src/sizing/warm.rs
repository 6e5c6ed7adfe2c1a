//! How many warm slots (pause Pods sized like a class's executors, each holding one rented
//! node's worth of room) a resource class should have now: a pure decision over what the
//! dispatcher sees of demand. The leader applies it (`backend::pod::pause`); the warm-pool
//! benchmark (`bench_warm_pool` in `tenantci-bench`) drives pause Pods with it against the
//! simulator.
//!
//! The rule, and why:
//! - **Grow at once to the demand in sight**: jobs announced by the `workflow_job` webhook and
//!   not claimed yet, tasks claimed and waiting for an executor, and the arrivals of the last
//!   window (the best guess of the next window's). An announced job needs a node within
//!   seconds; a node booted for it now is a node that is warm when its executor comes, and
//!   the next job of a burst finds the slot the preempted pause Pod rented in the background.
//! - **Shrink only after the idle time**: a warm slot is kept while demand was seen within
//!   `idle`, so a pause between two waves of a burst costs nodes, not a cold start; after
//!   `idle` without any arrival or announcement the pool falls to what is still in sight, and
//!   never below `min`.
//! - **Never beyond what the class may start**: `max`, and the class's capacity less its
//!   running executors (a warm node its class cannot use is pure cost).

use std::time::Duration;

/// A class's warm-pool limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Warm slots kept however quiet it is (0: the pool empties when idle).
    pub min: u32,
    /// Warm slots at most.
    pub max: u32,
    /// How long after the last demand the pool keeps its size before it shrinks.
    pub idle: Duration,
    /// The class's capacity (executors at once).
    pub capacity: u32,
}

/// What the dispatcher sees of one class's demand at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    /// Jobs the webhook announced that are not claimed yet.
    pub announced: u32,
    /// Tasks claimed and waiting for their executor (in the queue, or its class full).
    pub queued: u32,
    /// Executors of the class that exist.
    pub running: u32,
    /// Jobs that arrived (announced or claimed) within the last window.
    pub recent_arrivals: u32,
    /// Warm slots now.
    pub warm: u32,
    /// Since the last arrival or announcement (None: none seen yet).
    pub since_demand: Option<Duration>,
}

/// The warm slots the class should have.
pub fn decide(d: &Demand, l: &Limits) -> u32 {
    let in_sight = d
        .announced
        .saturating_add(d.queued)
        .saturating_add(d.recent_arrivals);
    let idle = d.since_demand.is_none_or(|s| s >= l.idle);
    let wanted = if in_sight >= d.warm || idle {
        in_sight
    } else {
        d.warm
    };
    let usable = l.capacity.saturating_sub(d.running);
    wanted.max(l.min).min(l.max).min(usable)
}

/// Arrival times within a sliding window, for [`Demand::recent_arrivals`] and
/// [`Demand::since_demand`]. Times are offsets from any fixed origin (the caller's clock).
#[derive(Debug, Clone, Default)]
pub struct Arrivals {
    window: Duration,
    times: std::collections::VecDeque<Duration>,
    last: Option<Duration>,
}

impl Arrivals {
    /// No arrivals yet; [`Self::recent`] counts those less than `window` old.
    pub fn new(window: Duration) -> Self {
        Arrivals {
            window,
            ..Default::default()
        }
    }

    /// A job arrived (or was announced) at `at`.
    pub fn record(&mut self, at: Duration) {
        self.times.push_back(at);
        self.last = Some(self.last.map_or(at, |l| l.max(at)));
    }

    /// Arrivals less than the window before `now` (older ones are forgotten).
    pub fn recent(&mut self, now: Duration) -> u32 {
        while self
            .times
            .front()
            .is_some_and(|t| now.saturating_sub(*t) >= self.window)
        {
            self.times.pop_front();
        }
        self.times.len() as u32
    }

    /// Since the last arrival, at `now`.
    pub fn since_last(&self, now: Duration) -> Option<Duration> {
        self.last.map(|l| now.saturating_sub(l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn limits() -> Limits {
        Limits {
            min: 1,
            max: 8,
            idle: S(60),
            capacity: 10,
        }
    }

    #[test]
    fn decisions() {
        let d = |announced, queued, running, recent_arrivals, warm, since: Option<u64>| Demand {
            announced,
            queued,
            running,
            recent_arrivals,
            warm,
            since_demand: since.map(S),
        };
        #[rustfmt::skip]
        let table: &[(&str, Demand, Limits, u32)] = &[
            ("never any demand: the minimum", d(0, 0, 0, 0, 0, None), limits(), 1),
            ("a burst announced: grow to it at once", d(6, 0, 0, 1, 1, Some(0)), limits(), 7),
            ("queued tasks count as demand", d(0, 3, 0, 0, 1, Some(5)), limits(), 3),
            ("recent arrivals predict the next window", d(0, 0, 2, 4, 1, Some(5)), limits(), 4),
            ("more in sight than max: max", d(20, 0, 0, 0, 2, Some(0)), limits(), 8),
            ("demand fell, not idle yet: keep the size", d(0, 0, 3, 1, 6, Some(30)), limits(), 6),
            ("idle long enough: down to what is in sight", d(0, 0, 3, 2, 6, Some(60)), limits(), 2),
            ("idle and nothing in sight: the minimum", d(0, 0, 0, 0, 6, Some(600)), limits(), 1),
            ("min 0 empties the pool when idle", d(0, 0, 0, 0, 3, Some(600)), Limits { min: 0, ..limits() }, 0),
            ("a full class gets no warm slot", d(5, 2, 10, 5, 4, Some(0)), limits(), 0),
            ("nearly full: what it can still start", d(5, 0, 8, 0, 1, Some(0)), limits(), 2),
            ("min never beyond the usable room", d(0, 0, 10, 0, 1, None), limits(), 0),
        ];
        for (why, demand, l, want) in table {
            assert_eq!(decide(demand, l), *want, "{why}: {demand:?}");
        }
    }

    #[test]
    fn arrivals_slide_with_the_window() {
        let mut a = Arrivals::new(S(10));
        assert_eq!((a.recent(S(0)), a.since_last(S(0))), (0, None));
        for t in [1, 2, 9] {
            a.record(S(t));
        }
        assert_eq!(a.recent(S(10)), 3);
        assert_eq!(
            a.recent(S(12)),
            1,
            "1 s and 2 s are older than 10 s at 12 s"
        );
        assert_eq!(a.since_last(S(12)), Some(S(3)));
    }
}
