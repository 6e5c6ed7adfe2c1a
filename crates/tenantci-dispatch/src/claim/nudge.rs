//! How often webhook nudges may make the scheduler send a FetchTask: a burst budget refilled
//! at one nudge per `spacing` (a token bucket in its GCRA form: one instant kept, no timer).
//!
//! Why: a delivery carries no task, so a flood of them (2000 in 10 s in the held-out campaign,
//! or replays by whoever has one signed body) must not drive FetchTask at the rate Gitea
//! answers. Nudges that arrive while a FetchTask is in flight, or while the scheduler waits
//! for the budget, are coalesced into one by the scheduler's `Notify` (one stored permit);
//! this module only says how long the next nudged FetchTask waits. Isolated nudges (the
//! common case: a push every few seconds) never wait.
//!
//! Bound: over any window of length `t`, nudged FetchTasks <= `burst` + `t` / `spacing`.

use std::time::Duration;

/// The nudge budget: `burst` FetchTasks at once, then one per `spacing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NudgeBudget {
    /// One nudged FetchTask per this, once the burst is spent.
    pub spacing: Duration,
    /// At least 1.
    pub burst: u32,
}

impl NudgeBudget {
    /// Nudged FetchTasks at most in a window of `window`: the bound above.
    pub fn most_in(&self, window: Duration) -> u64 {
        let refills = if self.spacing.is_zero() {
            u64::MAX / 2
        } else {
            (window.as_nanos() / self.spacing.as_nanos()) as u64
        };
        u64::from(self.burst.max(1)).saturating_add(refills)
    }
}

/// When the nudged FetchTask asked for at `now` may go (pure): after `wait`, with `next` the
/// budget's new state. `due`: the state before (the instant the budget is back to full,
/// offsets from any fixed origin); a nudge's FetchTask is granted, so its slot is taken even
/// while it waits, and the next nudge's wait counts from it.
pub fn pace(budget: NudgeBudget, due: Duration, now: Duration) -> Paced {
    let tolerance = budget.spacing * budget.burst.max(1).saturating_sub(1);
    let due = due.max(now);
    let earliest = due.saturating_sub(tolerance);
    Paced {
        wait: earliest.saturating_sub(now),
        next: due + budget.spacing,
    }
}

/// What [`pace`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paced {
    /// How long the nudged FetchTask waits.
    pub wait: Duration,
    /// The budget's state after it.
    pub next: Duration,
}

/// The budget's state in the scheduler, on tokio's clock.
pub struct Pacer {
    budget: NudgeBudget,
    origin: tokio::time::Instant,
    due: Duration,
}

impl Pacer {
    /// A full budget, from now.
    pub fn new(budget: NudgeBudget) -> Self {
        Pacer {
            budget,
            origin: tokio::time::Instant::now(),
            due: Duration::ZERO,
        }
    }

    /// How long the FetchTask of a nudge arriving now waits (its slot taken).
    pub fn next_wait(&mut self) -> Duration {
        let paced = pace(self.budget, self.due, self.origin.elapsed());
        self.due = paced.next;
        paced.wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Feeds nudges at the given instants (ms), each waiting as told before the next may
    /// arrive (the scheduler is sequential); returns each one's wait in ms.
    fn run(budget: NudgeBudget, arrivals: &[u64]) -> Vec<u64> {
        let mut due = Duration::ZERO;
        let mut free_at = Duration::ZERO;
        let mut waits = Vec::new();
        for &at in arrivals {
            let now = MS(at).max(free_at);
            let p = pace(budget, due, now);
            due = p.next;
            free_at = now + p.wait;
            waits.push(p.wait.as_millis() as u64);
        }
        waits
    }

    #[test]
    fn the_burst_goes_at_once_then_one_per_spacing() {
        let b = NudgeBudget {
            spacing: MS(200),
            burst: 3,
        };
        // A flood at t=1000: three at once, then spaced.
        let table: &[(&[u64], &[u64])] = &[
            (&[1000, 1000, 1000, 1000, 1000], &[0, 0, 0, 200, 200]),
            // Isolated nudges never wait.
            (&[1000, 2000, 3000, 4000], &[0, 0, 0, 0]),
            // The budget refills with time: after a burst and 400 ms, two more at once.
            (&[1000, 1000, 1000, 1400, 1400, 1400], &[0, 0, 0, 0, 0, 200]),
            // A nudge every 100 ms against a 200 ms spacing: the burst drains at half a nudge
            // per 100 ms, then each waits for the next refill.
            (
                &[0, 100, 200, 300, 400, 500, 600],
                &[0, 0, 0, 0, 0, 100, 200],
            ),
        ];
        for (arrivals, waits) in table {
            assert_eq!(run(b, arrivals), *waits, "arrivals {arrivals:?}");
        }
    }

    #[test]
    fn a_burst_of_one_is_a_minimum_spacing() {
        let b = NudgeBudget {
            spacing: MS(500),
            burst: 1,
        };
        assert_eq!(run(b, &[10, 10, 10]), [0, 500, 500]);
        // Zero is taken as one: never a FetchTask without a budget.
        let zero = NudgeBudget { burst: 0, ..b };
        assert_eq!(run(zero, &[10, 10]), [0, 500]);
    }

    #[test]
    fn a_flood_stays_within_the_bound() {
        let b = NudgeBudget {
            spacing: MS(250),
            burst: 5,
        };
        // 2000 nudges in 10 s: how many FetchTasks go out within the 10 s?
        let arrivals: Vec<u64> = (0..2000).map(|i| i * 5).collect();
        let mut t = Duration::ZERO;
        let mut due = Duration::ZERO;
        let mut sent = 0;
        for at in arrivals {
            let now = MS(at).max(t);
            if now > MS(10_000) {
                break;
            }
            let p = pace(b, due, now);
            due = p.next;
            t = now + p.wait;
            if t <= MS(10_000) {
                sent += 1;
            }
        }
        assert!(sent <= b.most_in(MS(10_000)), "{sent}");
        assert_eq!(b.most_in(MS(10_000)), 45);
        assert!(sent >= 40, "the budget is used, not starved: {sent}");
    }
}
