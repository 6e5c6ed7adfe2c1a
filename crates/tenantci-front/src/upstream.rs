//! Where a Cluster's apiserver listens, as the front dials it: the host and port of its
//! `status.url` ([`Upstream`]), and the addresses already resolved, each kept for a lifetime
//! ([`Addresses`], pure: time passed in). `serve` resolves through the gateway and dials.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Where a cluster's apiserver listens: the host and port of its `status.url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// A DNS name or an IP address (an IPv6 one without brackets).
    pub host: String,
    /// The port, always explicit in a Cluster's `status.url`.
    pub port: u16,
}

impl Upstream {
    /// The host and port of `url`; None when it does not parse or names no port.
    pub fn from_url(url: &str) -> Option<Upstream> {
        let uri: http::Uri = url.parse().ok()?;
        Some(Upstream {
            host: uri.host()?.trim_matches(['[', ']']).to_string(),
            port: uri.port_u16()?,
        })
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The Clusters' resolved addresses, each for a lifetime; pure (time passed in). Bounded by the
/// clusters the config names: only an admitted client's cluster is ever looked up.
#[derive(Debug)]
pub struct Addresses {
    ttl: Duration,
    by_cluster: HashMap<String, (Upstream, Instant)>,
}

impl Addresses {
    /// None resolved yet; each address kept for `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Addresses {
            ttl,
            by_cluster: HashMap::new(),
        }
    }

    /// The address resolved less than the lifetime ago, if any.
    pub fn get(&self, cluster: &str, now: Instant) -> Option<Upstream> {
        let (addr, at) = self.by_cluster.get(cluster)?;
        (now.saturating_duration_since(*at) < self.ttl).then(|| addr.clone())
    }

    /// Keeps `addr` for `cluster`, resolved at `now`, replacing the one before.
    pub fn put(&mut self, cluster: &str, addr: Upstream, now: Instant) {
        self.by_cluster.insert(cluster.to_string(), (addr, now));
    }

    /// Drops `addr` after a failed connect, unless another tunnel has put a newer one since.
    pub fn forget(&mut self, cluster: &str, addr: &Upstream) {
        if self.by_cluster.get(cluster).is_some_and(|(a, _)| a == addr) {
            self.by_cluster.remove(cluster);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> Upstream {
        Upstream {
            host: "127.0.0.1".into(),
            port,
        }
    }

    #[test]
    fn an_address_is_kept_for_its_lifetime_then_looked_up_again() {
        let t0 = Instant::now();
        let mut a = Addresses::new(Duration::from_secs(10));
        assert_eq!(a.get("ci", t0), None);
        a.put("ci", at(6443), t0);
        assert_eq!(
            a.get("ci", t0 + Duration::from_millis(9_999)),
            Some(at(6443))
        );
        assert_eq!(a.get("ci", t0 + Duration::from_secs(10)), None);
        assert_eq!(a.get("other", t0), None);
        // A new lookup starts a new lifetime.
        a.put("ci", at(7000), t0 + Duration::from_secs(10));
        assert_eq!(a.get("ci", t0 + Duration::from_secs(19)), Some(at(7000)));
    }

    #[test]
    fn a_failed_address_is_forgotten_but_not_a_newer_one() {
        let t0 = Instant::now();
        let mut a = Addresses::new(Duration::from_secs(10));
        a.put("ci", at(6443), t0);
        // Another tunnel already found the moved port: its address stays.
        a.put("ci", at(7000), t0);
        a.forget("ci", &at(6443));
        assert_eq!(a.get("ci", t0), Some(at(7000)));
        a.forget("ci", &at(7000));
        assert_eq!(a.get("ci", t0), None);
    }

    #[test]
    fn an_upstream_is_the_host_and_port_of_the_status_url() {
        assert_eq!(Upstream::from_url("https://127.0.0.1:6443"), Some(at(6443)));
        let v6 = Upstream::from_url("https://[::1]:6443/").unwrap();
        assert_eq!(v6.host, "::1");
        assert_eq!(v6.to_string(), "[::1]:6443");
        assert_eq!(Upstream::from_url("https://127.0.0.1"), None);
        assert_eq!(Upstream::from_url("not a url"), None);
    }
}
