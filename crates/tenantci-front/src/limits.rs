//! Pure bounds of a public port: new connections per second (a token bucket), the same and
//! handshakes in progress per source address, and open tunnels per subject. Time is passed in,
//! so the tests replay exact sequences.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

/// `rate` new connections a second, with a burst of as many.
#[derive(Debug)]
pub struct Rate {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Rate {
    /// A full bucket of `per_second` tokens at `now`.
    pub fn new(per_second: u32, now: Instant) -> Self {
        Rate {
            rate: f64::from(per_second),
            tokens: f64::from(per_second),
            last: now,
        }
    }

    /// Takes one token; false when the second's budget is spent.
    pub fn admit(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Takes a new `per_second` (a live change of the config): the bucket keeps its tokens up
    /// to the new size.
    pub fn retune(&mut self, per_second: u32) {
        let rate = f64::from(per_second);
        if rate != self.rate {
            self.rate = rate;
            self.tokens = self.tokens.min(rate);
        }
    }

    /// Returns a token taken for a connection that was refused after all.
    fn give_back(&mut self) {
        self.tokens = (self.tokens + 1.0).min(self.rate);
    }

    /// True when the bucket is as it was new: forgetting it changes nothing.
    fn full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= self.rate
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
    }
}

/// Where a connection comes from, as the per-source bounds count it: an IPv4 address, or an
/// IPv6 /64 (one host usually owns a whole /64, so its single addresses would bound nothing).
/// An IPv4-mapped IPv6 address (a dual-stack listener's view of IPv4) is that IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// One IPv4 address.
    V4(Ipv4Addr),
    /// The /64 prefix, the host bits zero.
    V6(Ipv6Addr),
}

impl Source {
    /// The source `ip` counts as: itself (IPv4, or IPv4-mapped), or its IPv6 /64.
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(a) => Source::V4(a),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4),
                None => Source::V6(Ipv6Addr::from(u128::from(a) & !u128::from(u64::MAX))),
            },
        }
    }
}

/// The audit reason of [`Sources::admit`] when the source spent its new connections this second.
pub const SOURCE_RATE_LIMITED: &str = "source_rate_limited";
/// The audit reason of [`Sources::admit`] when the source has `max_pending` handshakes open.
pub const SOURCE_HANDSHAKES_FULL: &str = "source_handshakes_full";

/// New connections a second and handshakes in progress, per [`Source`].
///
/// A source has an entry only while it has a handshake in progress or a bucket not yet
/// refilled: a token is kept only by a connection the global bounds admitted too, so the
/// entries number at most the global handshakes plus the connections admitted in the last
/// two seconds, however many addresses knock.
#[derive(Debug)]
pub struct Sources {
    per_second: u32,
    max_pending: u32,
    by_source: HashMap<Source, Entry>,
    swept: Instant,
}

#[derive(Debug)]
struct Entry {
    rate: Rate,
    pending: u32,
}

impl Sources {
    /// No source yet; each gets `per_second` new connections a second and at most
    /// `max_pending` handshakes in progress.
    pub fn new(per_second: u32, max_pending: u32, now: Instant) -> Self {
        Sources {
            per_second,
            max_pending,
            by_source: HashMap::new(),
            swept: now,
        }
    }

    /// Takes new per-source bounds (a live change of the config), for every source already
    /// known as for the next.
    pub fn retune(&mut self, per_second: u32, max_pending: u32) {
        if (per_second, max_pending) == (self.per_second, self.max_pending) {
            return;
        }
        self.per_second = per_second;
        self.max_pending = max_pending;
        for entry in self.by_source.values_mut() {
            entry.rate.retune(per_second);
        }
    }

    /// Admits a new connection from `source`: its own rate, then its own handshake slot, and
    /// only then `global` (the port's rate and handshake bounds), so a source refused by its
    /// own bound spends nothing of the port's. A global refusal gives the source's token back.
    /// Ok holds a handshake slot of `source` until [`Sources::release`].
    pub fn admit<T>(
        &mut self,
        source: Source,
        now: Instant,
        global: impl FnOnce() -> Result<T, &'static str>,
    ) -> Result<T, &'static str> {
        self.sweep(now);
        let per_second = self.per_second;
        let entry = self.by_source.entry(source).or_insert_with(|| Entry {
            rate: Rate::new(per_second, now),
            pending: 0,
        });
        if !entry.rate.admit(now) {
            return Err(SOURCE_RATE_LIMITED);
        }
        // The token stays spent: a source knocking at its full slots is still knocking.
        if entry.pending >= self.max_pending {
            return Err(SOURCE_HANDSHAKES_FULL);
        }
        match global() {
            Ok(v) => {
                entry.pending += 1;
                Ok(v)
            }
            Err(reason) => {
                entry.rate.give_back();
                self.forget_if_idle(source, now);
                Err(reason)
            }
        }
    }

    /// The handshake of a connection admitted from `source` has ended (either way).
    pub fn release(&mut self, source: Source, now: Instant) {
        if let Some(e) = self.by_source.get_mut(&source) {
            e.pending = e.pending.saturating_sub(1);
        }
        self.forget_if_idle(source, now);
    }

    fn forget_if_idle(&mut self, source: Source, now: Instant) {
        if let Some(e) = self.by_source.get_mut(&source)
            && e.pending == 0
            && e.rate.full(now)
        {
            self.by_source.remove(&source);
        }
    }

    /// Once a second: drops the sources a new entry would equal (no handshake, full bucket).
    fn sweep(&mut self, now: Instant) {
        if now.saturating_duration_since(self.swept) < SECOND {
            return;
        }
        self.swept = now;
        self.by_source
            .retain(|_, e| e.pending > 0 || !e.rate.full(now));
    }

    /// Sources with an entry (the memory the bounds hold).
    pub fn len(&self) -> usize {
        self.by_source.len()
    }

    /// Whether no source has an entry.
    pub fn is_empty(&self) -> bool {
        self.by_source.is_empty()
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

    /// One tunnel of `subject` has closed.
    pub fn give_back(&mut self, subject: &str) {
        if let Some(n) = self.open.get_mut(subject) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.open.remove(subject);
            }
        }
    }
}

/// Places held under a bound that may change while they are held: a lower bound closes
/// nothing already open, new places are refused until the count is under it.
#[derive(Debug, Default)]
pub struct Slots(std::sync::atomic::AtomicU32);

impl Slots {
    /// Takes a place unless `max` are taken.
    pub fn try_take(&self, max: u32) -> bool {
        use std::sync::atomic::Ordering;
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives a place back.
    pub fn give_back(&self) {
        use std::sync::atomic::Ordering;
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// The period of the rate bounds and of the sources' sweep.
pub const SECOND: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lowered_bound_closes_nothing_and_admits_under_it_again() {
        let slots = Slots::default();
        assert!(slots.try_take(2) && slots.try_take(2));
        assert!(!slots.try_take(2));
        // Lowered to 1 while two are held: both stay, none is admitted until one is left.
        assert!(!slots.try_take(1));
        slots.give_back();
        assert!(!slots.try_take(1));
        slots.give_back();
        assert!(slots.try_take(1));
        let mut r = Rate::new(10, Instant::now());
        r.retune(2);
        let t = Instant::now();
        assert!(r.admit(t) && r.admit(t) && !r.admit(t));
    }

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

    fn v4(s: &str) -> Source {
        Source::of(s.parse().unwrap())
    }

    fn open() -> Result<(), &'static str> {
        Ok(())
    }

    #[test]
    fn sources_are_ipv4_addresses_and_ipv6_slash_64s() {
        assert_eq!(v4("10.0.0.1"), Source::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_ne!(v4("10.0.0.1"), v4("10.0.0.2"));
        // One host's /64 is one source, whichever of its addresses it dials from.
        assert_eq!(
            v4("2001:db8:1:2::1"),
            v4("2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_eq!(
            v4("2001:db8:1:2:abcd::9"),
            Source::V6("2001:db8:1:2::".parse().unwrap())
        );
        assert_ne!(v4("2001:db8:1:2::1"), v4("2001:db8:1:3::1"));
        // A dual-stack listener sees IPv4 clients as mapped addresses: still the IPv4 source.
        assert_eq!(v4("::ffff:10.0.0.1"), v4("10.0.0.1"));
    }

    #[test]
    fn a_source_is_held_to_its_own_handshakes_and_rate() {
        let t0 = Instant::now();
        let mut s = Sources::new(3, 2, t0);
        let (a, b) = (v4("192.0.2.1"), v4("192.0.2.2"));
        assert_eq!(s.admit(a, t0, open), Ok(()));
        assert_eq!(s.admit(a, t0, open), Ok(()));
        // Both slots held: refused, and the attempt spends a token.
        assert_eq!(s.admit(a, t0, open), Err(SOURCE_HANDSHAKES_FULL));
        assert_eq!(s.admit(a, t0, open), Err(SOURCE_RATE_LIMITED));
        // Another source is not touched by a's.
        assert_eq!(s.admit(b, t0, open), Ok(()));
        // A finished handshake gives its slot back; the rate refills a token in a third.
        s.release(a, t0);
        assert_eq!(s.admit(a, t0, open), Err(SOURCE_RATE_LIMITED));
        let t1 = t0 + SECOND / 3 + Duration::from_millis(1);
        assert_eq!(s.admit(a, t1, open), Ok(()));
        assert_eq!(s.admit(a, t1, open), Err(SOURCE_RATE_LIMITED));
    }

    #[test]
    fn a_source_refused_by_its_own_bound_spends_nothing_of_the_ports() {
        let t0 = Instant::now();
        let mut s = Sources::new(2, 1, t0);
        let mut port = Rate::new(100, t0);
        let asked = std::cell::Cell::new(0);
        let mut global = || {
            asked.set(asked.get() + 1);
            if port.admit(t0) {
                Ok(())
            } else {
                Err("rate_limited")
            }
        };
        let a = v4("192.0.2.1");
        assert_eq!(s.admit(a, t0, &mut global), Ok(()));
        for _ in 0..300 {
            assert!(s.admit(a, t0, &mut global).is_err());
        }
        assert_eq!(
            asked.get(),
            1,
            "the port's bounds were asked for a refused source"
        );
        // The port's budget is whole for everyone else: its 99 other tokens.
        for i in 0..99 {
            let other = v4(&format!("198.51.100.{i}"));
            assert_eq!(s.admit(other, t0, &mut global), Ok(()));
        }
        assert_eq!(
            s.admit(v4("198.51.100.99"), t0, &mut global),
            Err("rate_limited")
        );
    }

    #[test]
    fn a_global_refusal_gives_the_source_its_token_and_slot_back() {
        let t0 = Instant::now();
        let mut s = Sources::new(1, 1, t0);
        let a = v4("192.0.2.1");
        let full = || Err::<(), _>("handshakes_full");
        assert_eq!(s.admit(a, t0, full), Err("handshakes_full"));
        assert!(s.is_empty(), "a refused newcomer left an entry");
        // Its one token and one slot are still there.
        assert_eq!(s.admit(a, t0, open), Ok(()));
    }

    #[test]
    fn memory_holds_only_sources_with_a_handshake_or_a_bucket_refilling() {
        let t0 = Instant::now();
        let mut s = Sources::new(20, 16, t0);
        let held = v4("192.0.2.1");
        assert_eq!(s.admit(held, t0, open), Ok(()));
        // Ten thousand addresses, each one connection whose handshake ended at once.
        for i in 0..10_000u32 {
            let src = Source::V4(Ipv4Addr::from(0x0a00_0000 + i));
            assert_eq!(s.admit(src, t0, open), Ok(()));
            s.release(src, t0);
        }
        assert_eq!(s.len(), 10_001, "buckets still refilling are kept");
        // A second on, the next connection sweeps every full bucket without a handshake.
        let t1 = t0 + SECOND;
        let next = v4("198.51.100.1");
        assert_eq!(s.admit(next, t1, open), Ok(()));
        assert_eq!(s.len(), 2, "kept: the held handshake and the newcomer");
        // Released once its bucket is full again, a source's entry goes at once.
        s.release(held, t1);
        assert_eq!(s.len(), 1);
        s.release(next, t1 + SECOND);
        assert!(s.is_empty());
    }

    #[test]
    fn a_refusal_by_the_port_leaves_no_entry_behind() {
        let t0 = Instant::now();
        let mut s = Sources::new(20, 16, t0);
        for i in 0..10_000u32 {
            let src = Source::V4(Ipv4Addr::from(0x0a00_0000 + i));
            assert_eq!(
                s.admit(src, t0, || Err::<(), _>("rate_limited")),
                Err("rate_limited")
            );
        }
        assert!(s.is_empty());
    }
}
