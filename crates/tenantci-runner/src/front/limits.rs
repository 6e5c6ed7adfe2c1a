//! Pure bounds of a public port: new connections per second (a token bucket) and open tunnels
//! per subject. Time is passed in, so the tests replay exact sequences.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// `rate` new connections a second, with a burst of as many.
#[derive(Debug)]
pub struct Rate {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Rate {
    pub fn new(per_second: u32, now: Instant) -> Self {
        Rate {
            rate: f64::from(per_second),
            tokens: f64::from(per_second),
            last: now,
        }
    }

    /// Takes one token; false when the second's budget is spent.
    pub fn admit(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Open tunnels per subject, bounded.
#[derive(Debug, Default)]
pub struct PerSubject {
    open: HashMap<String, u32>,
}

impl PerSubject {
    /// Counts one more tunnel for `subject`, unless it already has `max`.
    pub fn take(&mut self, subject: &str, max: u32) -> bool {
        let n = self.open.entry(subject.to_string()).or_insert(0);
        if *n >= max {
            return false;
        }
        *n += 1;
        true
    }

    pub fn give_back(&mut self, subject: &str) {
        if let Some(n) = self.open.get_mut(subject) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.open.remove(subject);
            }
        }
    }
}

pub const SECOND: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut r = Rate::new(3, t0);
        assert!((0..3).all(|_| r.admit(t0)));
        assert!(!r.admit(t0));
        assert!(r.admit(t0 + SECOND / 3 + Duration::from_millis(1)));
        assert!(!r.admit(t0 + SECOND / 3 + Duration::from_millis(2)));
        // Idle time refills up to the burst, not beyond.
        let later = t0 + SECOND * 60;
        assert!((0..3).all(|_| r.admit(later)));
        assert!(!r.admit(later));
    }

    #[test]
    fn a_subject_is_capped_and_released() {
        let mut p = PerSubject::default();
        assert!(p.take("a", 2) && p.take("a", 2));
        assert!(!p.take("a", 2));
        assert!(p.take("b", 2));
        p.give_back("a");
        assert!(p.take("a", 2));
    }
}
