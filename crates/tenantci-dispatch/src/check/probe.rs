//! Which grants of `queue nats-config` a check can try as the user, and how (pure): each
//! allow-list entry of [`user_permissions`] becomes one request that changes nothing, or none
//! where every request would (a pull, an ack).
//!
//! A read (stream or consumer info, a direct get of a key no one writes) answers if allowed.
//! A write (an entry of a bucket, an assignment) is sent with an expected last sequence no
//! subject ever has, so JetStream refuses to store it: its refusal proves the grant and the
//! conditional put the ledger's compare-and-set relies on at once. A denied subject gets no
//! answer; nats-server says `Permissions Violation for Publish to "<subject>"` instead.

use crate::backend_kind::BackendKind;
use crate::queue::permissions::user_permissions;

/// The key probed: no release writes it.
pub const PROBE_KEY: &str = "tenantci-check";

/// An expected last sequence no subject reaches (2^53 - 1: safe as JSON and Go's uint64).
pub const NEVER_SEQUENCE: u64 = 9_007_199_254_740_991;

/// How a grant is tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Try {
    /// A request whose answer, whatever it says, shows the publish was allowed.
    Read {
        /// The body (a direct get's JSON, or empty).
        body: String,
    },
    /// A JetStream publish with an expected last subject sequence of [`NEVER_SEQUENCE`]:
    /// allowed and conditional when JetStream refuses it.
    ConditionalWrite,
}

/// One grant to try as `user`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The NATS user.
    pub user: &'static str,
    /// The allow-list entry as `queue nats-config` renders it.
    pub grant: String,
    /// The concrete subject sent to.
    pub subject: String,
    /// How.
    pub try_: Try,
}

/// Every grant of every user over `backends` that a check can try without a change, in the
/// fragment's order.
pub fn probes(backends: &[BackendKind]) -> Vec<Probe> {
    user_permissions(backends)
        .into_iter()
        .flat_map(|p| {
            p.publish
                .into_iter()
                .filter_map(move |grant| probe(p.user, grant))
        })
        .collect()
}

fn probe(user: &'static str, grant: String) -> Option<Probe> {
    let read = |subject: String, body: &str| {
        Try::Read {
            body: body.to_string(),
        }
        .with(user, &grant, subject)
    };
    if grant == "$JS.API.>" {
        return Some(read("$JS.API.INFO".to_string(), ""));
    }
    if let Some(base) = grant.strip_suffix(".>") {
        if base.starts_with("$JS.API.DIRECT.GET.") {
            return Some(read(format!("{base}.{PROBE_KEY}"), ""));
        }
        if base.starts_with("$KV.") {
            let subject = format!("{base}.{PROBE_KEY}");
            return Some(Try::ConditionalWrite.with(user, &grant, subject));
        }
        return None;
    }
    if grant.starts_with("$JS.API.DIRECT.GET.") {
        let body = format!(r#"{{"last_by_subj":"{PROBE_KEY}"}}"#);
        return Some(read(grant.clone(), &body));
    }
    if grant.starts_with("$JS.API.STREAM.INFO.") || grant.starts_with("$JS.API.CONSUMER.INFO.") {
        return Some(read(grant.clone(), ""));
    }
    if grant.starts_with("ci.runner.") {
        return Some(Try::ConditionalWrite.with(user, &grant, grant.clone()));
    }
    // A pull (MSG.NEXT) or an ack would take or settle an assignment.
    None
}

impl Try {
    fn with(self, user: &'static str, grant: &str, subject: String) -> Probe {
        Probe {
            user,
            grant: grant.to_string(),
            subject,
            try_: self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_grant_but_pulls_and_acks_is_tried_without_a_change() {
        let all = probes(&[BackendKind::new("pod")]);
        let find = |s: &str| all.iter().find(|p| p.grant == s).cloned();
        let direct = find("$JS.API.DIRECT.GET.KV_CI_CLAIMS").unwrap();
        assert_eq!(direct.user, "ci-worker");
        assert!(matches!(direct.try_, Try::Read { ref body } if body.contains("tenantci-check")));
        let keyed = find("$JS.API.DIRECT.GET.KV_CI_CLAIMS.>").unwrap();
        assert_eq!(
            keyed.subject,
            "$JS.API.DIRECT.GET.KV_CI_CLAIMS.tenantci-check"
        );
        let write = find("$KV.CI_CLAIMS.>").unwrap();
        assert_eq!(
            (write.subject.as_str(), &write.try_),
            ("$KV.CI_CLAIMS.tenantci-check", &Try::ConditionalWrite)
        );
        let produce = find("ci.runner.pod").unwrap();
        assert_eq!(produce.user, "ci-producer");
        assert_eq!(produce.try_, Try::ConditionalWrite);
        assert_eq!(find("$JS.API.>").unwrap().subject, "$JS.API.INFO");
        for untried in [
            "$JS.API.CONSUMER.MSG.NEXT.CI_RUNNER.pod",
            "$JS.ACK.CI_RUNNER.pod.>",
        ] {
            assert!(find(untried).is_none(), "{untried}");
        }
    }
}
