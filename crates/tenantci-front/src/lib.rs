//! tenantci-front, `tenantci front`: a GitLab Runner on another host reaching a tenant apiserver
//! that binds loopback on the gateway host (docs/architecture.md, "The front"; runbook "GitLab
//! on its own VM"). Over `tenantci-core` only (scripts/check-layering.sh); no CLI: the binary's
//! `cli/front.rs` parses flags and calls in here.
//!
//! `serve` (gateway side) terminates an outer mutual-TLS session on one public port, checks the
//! runner's own ClientCA-signed certificate against the cluster's allow-list and the deny-list,
//! and only then relays the raw bytes of the runner's inner TLS session to the cluster's
//! loopback apiserver. `connect` (runner side) listens on loopback and wraps each connection in
//! that outer session. The front reads no request and holds no key of the runner's.
//!
//! - [`config`]: `front.toml`, what `serve` starts from (clusters, allowed subjects, limits).
//! - [`admit`]: pure: may this certificate pass to this cluster.
//! - [`deny`]: the deny-list (cluster and serial), re-read while `serve` runs; fails closed.
//! - [`rules`]: the rules in force as one value (config, ClientCAs, serving pair, deny-list),
//!   read per connection; [`reload`]: the next value, on a change on disk or SIGHUP.
//! - [`revoke`]: what `front revoke` puts on it (the issuing cluster found from the ClientCAs).
//! - [`limits`]: pure: new connections per second and handshakes in progress, per source
//!   address and per port; connections per subject.
//! - [`handshake`]: the outer TLS: the cluster named by ALPN, its ClientCA, the refusals as
//!   TLS alerts.
//! - [`relay`]: bytes both ways, counted, cut when idle, revoked or shut down.
//! - [`serve`], [`metrics`], [`audit`]: the listener, Prometheus metrics, one audit line per
//!   tunnel and per refusal until refusals pass a rate, then a summary per interval.
//! - [`upstream`]: a Cluster's apiserver address, and the resolved ones kept for seconds.
//! - [`bundle`], [`connect`]: the runner host's one file and its side of the tunnel.
//! - [`init`]: the front's own certificate and config.
//! - [`live`], [`status`]: the running front's tunnels and credentials, served on a local
//!   socket; `front status` reading them.
//! - [`renew`]: the renewal's messages (runner to front to signer) and the signer's rules, pure.
//! - [`forward`]: the front's part of a renewal: the signer asked, the old serial superseded.
//! - [`signer`]: `front signer`, the one process that reads the ClientCA key, on a Unix socket.
//! - [`renewal`]: `connect`'s side: a new key and request before expiry, the files swapped.

#![warn(missing_docs)]

pub mod admit;
pub mod audit;
pub mod bundle;
pub mod config;
pub mod connect;
pub mod deny;
pub mod forward;
pub mod handshake;
pub mod init;
pub mod limits;
pub mod live;
pub mod metrics;
pub mod relay;
pub mod reload;
pub mod renew;
pub mod renewal;
pub mod revoke;
pub mod rules;
pub mod serve;
pub mod signer;
pub mod status;
pub mod upstream;

/// The ALPN protocol that names `cluster` in the outer handshake. ALPN rather than SNI, so the
/// front's certificate is checked against the front's own name.
pub fn alpn_for(cluster: &str) -> Vec<u8> {
    format!("{ALPN_PREFIX}{cluster}").into_bytes()
}

/// The ALPN protocol of a renewal of the client's own certificate for `cluster` (`renew`):
/// the same handshake and admission as a tunnel, then one request instead of a relay.
pub fn renew_alpn_for(cluster: &str) -> Vec<u8> {
    format!("{RENEW_ALPN_PREFIX}{cluster}").into_bytes()
}

/// The cluster an ALPN protocol names, if it is one of ours (a tunnel's or a renewal's).
pub fn cluster_from_alpn(protocol: &[u8]) -> Option<&str> {
    let p = std::str::from_utf8(protocol).ok()?;
    p.strip_prefix(ALPN_PREFIX)
        .or_else(|| p.strip_prefix(RENEW_ALPN_PREFIX))
}

/// Whether the negotiated protocol asks for a renewal rather than a tunnel.
pub fn is_renewal(protocol: Option<&[u8]>) -> bool {
    protocol.is_some_and(|p| p.starts_with(RENEW_ALPN_PREFIX.as_bytes()))
}

/// What every ALPN protocol of the front starts with; the version (`1`) changes only with an
/// incompatible outer protocol.
pub const ALPN_PREFIX: &str = "tenantci-front/1/";
/// What a renewal's ALPN protocol starts with; a front of an earlier release does not offer
/// it, so the handshake fails there with `no_application_protocol` and `connect` says so.
pub const RENEW_ALPN_PREFIX: &str = "tenantci-front-renew/1/";

#[cfg(test)]
mod tests {
    #[test]
    fn alpn_names_the_cluster_and_nothing_else() {
        let p = super::alpn_for("ci");
        assert_eq!(super::cluster_from_alpn(&p), Some("ci"));
        assert_eq!(super::cluster_from_alpn(b"h2"), None);
        assert_eq!(super::cluster_from_alpn(b"tenantci-front/2/ci"), None);
        let r = super::renew_alpn_for("ci");
        assert_eq!(super::cluster_from_alpn(&r), Some("ci"));
        assert!(super::is_renewal(Some(&r)));
        assert!(!super::is_renewal(Some(&p)));
    }
}
