//! Pure: may a client certificate that chains to a cluster's ClientCA pass to that cluster.
//! The chain itself is checked by rustls (`handshake`); this is the policy above it.

use std::fmt;

use super::config::ClusterRule;
use super::deny::DenyList;

/// What the front knows of a client after its chain verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    pub common_name: String,
    pub organizations: Vec<String>,
    /// Lower-case hex, no leading zeros (as [`super::deny::normalize`] spells it).
    pub serial: String,
}

impl Client {
    pub fn from_der(der: &[u8]) -> Result<Self, String> {
        let info = tenantci_core::pki::inspect::CertInfo::from_der(der)?;
        Ok(Client {
            common_name: info.common_name.unwrap_or_default(),
            organizations: info.organizations,
            serial: super::deny::normalize(&info.serial_hex).unwrap_or(info.serial_hex),
        })
    }

    /// `CN=..., O=...`, for the audit line and the per-subject cap.
    pub fn subject(&self) -> String {
        let mut s = format!("CN={}", self.common_name);
        for o in &self.organizations {
            s.push_str(", O=");
            s.push_str(o);
        }
        s
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `system:masters` is cluster-admin: never through the front, whatever the config says.
    SystemMasters,
    NotAllowed,
    Revoked,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::SystemMasters => "system:masters is never allowed through the front",
            Refusal::NotAllowed => "subject not in the cluster's allow-list",
            Refusal::Revoked => "serial on the deny-list",
        })
    }
}

impl Refusal {
    /// The audit line's and the metric's `reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::SystemMasters => "system_masters",
            Refusal::NotAllowed => "not_allowed",
            Refusal::Revoked => "revoked",
        }
    }
}

/// The decision, in this order: cluster-admin, revoked, allowed.
pub fn decide(rule: &ClusterRule, client: &Client, deny: &DenyList) -> Result<(), Refusal> {
    if client.organizations.iter().any(|o| o == "system:masters") {
        return Err(Refusal::SystemMasters);
    }
    if deny.contains(&client.serial) {
        return Err(Refusal::Revoked);
    }
    let allowed = rule.allow.iter().any(|s| {
        s.common_name == client.common_name && client.organizations.contains(&s.organization)
    });
    if allowed {
        Ok(())
    } else {
        Err(Refusal::NotAllowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::config::Subject;

    fn rule() -> ClusterRule {
        ClusterRule {
            name: "ci".into(),
            allow: vec![Subject {
                common_name: "gitlab-runner".into(),
                organization: "gitlab-runner".into(),
            }],
        }
    }

    fn client(cn: &str, orgs: &[&str], serial: &str) -> Client {
        Client {
            common_name: cn.into(),
            organizations: orgs.iter().map(|s| s.to_string()).collect(),
            serial: serial.into(),
        }
    }

    #[test]
    fn only_an_allowed_unrevoked_subject_passes() {
        let deny = DenyList::parse("# none\n").unwrap();
        let ok = client("gitlab-runner", &["gitlab-runner"], "1a");
        assert_eq!(decide(&rule(), &ok, &deny), Ok(()));
        let other_cn = client("someone", &["gitlab-runner"], "1a");
        assert_eq!(decide(&rule(), &other_cn, &deny), Err(Refusal::NotAllowed));
        let other_o = client("gitlab-runner", &["dev"], "1a");
        assert_eq!(decide(&rule(), &other_o, &deny), Err(Refusal::NotAllowed));
        let revoked = DenyList::parse("1A\n").unwrap();
        assert_eq!(decide(&rule(), &ok, &revoked), Err(Refusal::Revoked));
    }

    #[test]
    fn system_masters_is_refused_even_when_the_rest_matches() {
        let deny = DenyList::default();
        let c = client("gitlab-runner", &["gitlab-runner", "system:masters"], "2");
        assert_eq!(decide(&rule(), &c, &deny), Err(Refusal::SystemMasters));
        let empty = ClusterRule {
            name: "ci".into(),
            allow: vec![],
        };
        let ok = client("gitlab-runner", &["gitlab-runner"], "2");
        assert_eq!(decide(&empty, &ok, &deny), Err(Refusal::NotAllowed));
    }
}
