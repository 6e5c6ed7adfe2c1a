//! The front's audit (target `tenantci::front::audit`): one line per tunnel, whatever its end,
//! and one per refused connection until refusals pass a rate; beyond it, refusals are counted
//! per reason and peer address and summarised in one line each per interval, so a flood of
//! refused handshakes cannot flood the log (every one is still counted in
//! `tenantci_front_connections_total`). [`Quiet`] is the pure part: time is passed in.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::admit::Client;
use super::metrics::Metrics;
use super::relay::Counts;

/// Refused connections with a line each per interval; the rest of the interval's are summed.
pub const LOUD: u32 = 10;
/// The summaries' interval.
pub const EVERY: Duration = Duration::from_secs(10);
/// Distinct (reason, peer) pairs summed per interval; beyond, the peer is summed as `0.0.0.0`
/// ("other peers"), so a spread of addresses cannot grow memory or the summary itself.
const MAX_KEYS: usize = 64;

/// Which refusals get a line of their own, and the counts of those that do not.
#[derive(Debug)]
pub struct Quiet {
    loud: u32,
    logged: u32,
    counted: BTreeMap<(&'static str, IpAddr), u64>,
}

/// One summary line: `count` refusals for `reason` from `peer` in the interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The refusal's reason, as an audit line names it.
    pub reason: &'static str,
    /// The peer address (`0.0.0.0`: peers beyond the summary's bound).
    pub peer: IpAddr,
    /// How many were refused.
    pub count: u64,
}

impl Quiet {
    /// `loud` lines of their own per interval.
    pub fn new(loud: u32) -> Self {
        Quiet {
            loud,
            logged: 0,
            counted: BTreeMap::new(),
        }
    }

    /// True: this refusal gets its own line; false: it is counted into the interval's summary.
    pub fn note(&mut self, reason: &'static str, peer: IpAddr) -> bool {
        if self.logged < self.loud {
            self.logged += 1;
            return true;
        }
        let mut key = (reason, peer);
        if self.counted.len() >= MAX_KEYS && !self.counted.contains_key(&key) {
            key.1 = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        }
        let n = self.counted.entry(key).or_default();
        *n = n.saturating_add(1);
        false
    }

    /// Ends the interval: its summaries, and the next interval's lines of their own.
    pub fn flush(&mut self) -> Vec<Summary> {
        self.logged = 0;
        std::mem::take(&mut self.counted)
            .into_iter()
            .map(|((reason, peer), count)| Summary {
                reason,
                peer,
                count,
            })
            .collect()
    }
}

/// The audit of one front: its metrics and its quiet.
pub struct Auditor {
    metrics: Arc<Metrics>,
    quiet: Mutex<Quiet>,
}

impl Auditor {
    /// Writes to the log and counts in `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Auditor {
            metrics,
            quiet: Mutex::new(Quiet::new(LOUD)),
        })
    }

    /// Writes the summaries every [`EVERY`] (spawn it once).
    pub async fn summarise(self: Arc<Self>) {
        let mut tick = tokio::time::interval_at((Instant::now() + EVERY).into(), EVERY);
        loop {
            tick.tick().await;
            let summaries = self.quiet.lock().unwrap_or_else(|p| p.into_inner()).flush();
            for s in summaries {
                tracing::info!(
                    target: "tenantci::front::audit",
                    reason = s.reason,
                    peer = %s.peer,
                    count = s.count,
                    interval_s = EVERY.as_secs(),
                    "front refusals summarised"
                );
            }
        }
    }

    /// A refused connection: counted; a line of its own, or its place in the next summary.
    pub fn refused(
        &self,
        peer: SocketAddr,
        cluster: &str,
        client: Option<&Client>,
        reason: &'static str,
    ) {
        self.metrics.connection(cluster, reason);
        let own_line = self
            .quiet
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .note(reason, peer.ip());
        if own_line {
            line(peer, cluster, client, (0, 0, 0), reason);
        } else {
            self.metrics.refusal_summarised();
        }
    }

    /// A tunnel's end, with what it relayed: always a line of its own.
    pub fn tunnel(
        &self,
        peer: SocketAddr,
        cluster: &str,
        client: &Client,
        counts: &Counts,
        end: &str,
    ) {
        let up = counts.up.load(Ordering::Relaxed);
        let down = counts.down.load(Ordering::Relaxed);
        let ms = u64::try_from(counts.duration().as_millis()).unwrap_or(u64::MAX);
        line(peer, cluster, Some(client), (up, down, ms), end);
    }
}

impl Auditor {
    /// A renewal asked on an admitted session (`renewed`, or `renewal_` and the signer's
    /// reason): a line of its own, as a tunnel's.
    pub fn renewal(&self, peer: SocketAddr, cluster: &str, client: &Client, ms: u64, end: &str) {
        line(peer, cluster, Some(client), (0, 0, ms), end);
    }
}

fn line(
    peer: SocketAddr,
    cluster: &str,
    client: Option<&Client>,
    (up, down, ms): (u64, u64, u64),
    end: &str,
) {
    let subject = client.map(Client::subject).unwrap_or_default();
    let serial = client.map(|c| c.serial.as_str()).unwrap_or("");
    tracing::info!(
        target: "tenantci::front::audit",
        cluster,
        subject = subject.as_str(),
        serial,
        peer = %peer,
        bytes_up = up,
        bytes_down = down,
        duration_ms = ms,
        end,
        "front connection"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn past_the_rate_refusals_are_summed_per_reason_and_peer() {
        let mut q = Quiet::new(3);
        let a = ip("192.0.2.1");
        let own: usize = (0..5_000).filter(|_| q.note("no_certificate", a)).count();
        assert_eq!(own, 3);
        assert!(!q.note("rate_limited", a));
        assert!(!q.note("rate_limited", ip("192.0.2.2")));
        let s = q.flush();
        assert_eq!(
            s,
            vec![
                Summary {
                    reason: "no_certificate",
                    peer: a,
                    count: 4_997
                },
                Summary {
                    reason: "rate_limited",
                    peer: a,
                    count: 1
                },
                Summary {
                    reason: "rate_limited",
                    peer: ip("192.0.2.2"),
                    count: 1
                },
            ]
        );
        // A new interval: lines of their own again, nothing left to sum.
        assert!(q.note("no_certificate", a));
        assert!(q.flush().is_empty());
    }

    #[test]
    fn a_spread_of_peers_is_summed_under_one_line_past_the_bound() {
        let mut q = Quiet::new(0);
        for i in 0..10_000u32 {
            q.note(
                "handshake_failed",
                IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)),
            );
        }
        let s = q.flush();
        assert_eq!(s.len(), MAX_KEYS + 1);
        assert_eq!(s.iter().map(|x| x.count).sum::<u64>(), 10_000);
        assert!(
            s.iter()
                .any(|x| x.peer == IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        );
    }
}
