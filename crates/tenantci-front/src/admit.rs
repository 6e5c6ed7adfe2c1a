//! Pure: may a client certificate that chains to a cluster's ClientCA pass to that cluster.
//! The chain itself is checked by rustls (`handshake`); this is the policy above it. The
//! subject is read as kube-apiserver reads it (tenantci-core's `pki::kube_subject`), so what
//! the front admits is the identity the apiserver would see in the same certificate (the
//! runner's inner TLS may present another: docs/runbooks/gitlab-runner.md).

use std::fmt;

use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::pki::kube_subject::{Ambiguity, KubeSubject};

use super::config::ClusterRule;
use super::deny::DenyList;

/// What the front knows of a client after its chain verified, read as kube-apiserver reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// kube-apiserver's user: the last CN.
    pub common_name: String,
    /// Every O, whatever its string type: the groups.
    pub organizations: Vec<String>,
    /// Lower-case hex, no leading zeros (as [`super::deny::normalize`] spells it).
    pub serial: String,
    /// Why the apiserver could read this subject differently, if it could.
    pub ambiguity: Option<Ambiguity>,
    /// When the certificate expires (`front status` shows the next expiry it has seen).
    pub not_after: time::OffsetDateTime,
    /// When the certificate became valid (with `not_after`, the metric of the next expiry).
    pub not_before: time::OffsetDateTime,
    /// The subject attribute by attribute, in the certificate's order.
    text: String,
}

impl Client {
    /// Reads a verified client certificate (DER): its subject as kube-apiserver reads it and
    /// its serial normalized as the deny-list spells serials. Fails only on unparseable DER.
    pub fn from_der(der: &[u8]) -> Result<Self, String> {
        let info = CertInfo::from_der(der)?;
        Ok(Client {
            ambiguity: info.identity().err(),
            not_after: info.not_after,
            common_name: info.common_name.unwrap_or_default(),
            organizations: info.organizations,
            serial: super::deny::normalize(&info.serial_hex).unwrap_or(info.serial_hex),
            not_before: info.not_before,
            text: info.subject,
        })
    }

    /// A subject read elsewhere (a renewal's request) as a client with `serial`, so that
    /// [`decide`] judges it as it judges a presented certificate (its validity: the epoch).
    pub fn from_subject(subject: &KubeSubject, serial: &str) -> Self {
        Client {
            ambiguity: subject.identity().err(),
            common_name: subject.user().unwrap_or_default().to_string(),
            organizations: subject.organizations.clone(),
            serial: serial.to_string(),
            not_before: time::OffsetDateTime::UNIX_EPOCH,
            not_after: time::OffsetDateTime::UNIX_EPOCH,
            text: subject.text.clone(),
        }
    }

    /// `CN=..., O=...`, for the audit line and the per-subject cap, each value escaped as RFC
    /// 4514 does (a CN holding `, O=x` cannot forge a group in the audit, nor share another
    /// identity's cap); an ambiguous subject is shown whole, in its own order, so the audit
    /// names every CN.
    pub fn subject(&self) -> String {
        if self.ambiguity.is_some() {
            return self.text.escape_debug().to_string();
        }
        let mut s = format!("CN={}", escape(&self.common_name));
        for o in &self.organizations {
            s.push_str(", O=");
            s.push_str(&escape(o));
        }
        s
    }
}

/// An attribute value as RFC 4514 writes it: `,+"\\<>;=` and a leading `#` or space or a
/// trailing space behind a backslash, control characters as `\\xx`.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let edge = (i == 0 && (c == '#' || c == ' ')) || (i == last && c == ' ');
        if c.is_control() {
            out.push_str(&format!("\\{:02x}", u32::from(c)));
        } else if edge || ",+\"\\<>;=".contains(c) {
            out.push('\\');
            out.push(c);
        } else {
            out.push(c);
        }
    }
    out
}

/// Why [`decide`] refused a client; [`Refusal::reason`] names it in the audit and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `system:masters` is cluster-admin: never through the front, whatever the config says.
    SystemMasters,
    /// Another `system:` group (`system:nodes`, ...): Kubernetes' own, never a runner's.
    SystemGroup,
    /// A subject the apiserver could read as another identity than the front does.
    Ambiguous(Ambiguity),
    /// The cluster's allow-list does not name this CN with each of its groups.
    NotAllowed,
    /// The serial is on the deny-list for this cluster.
    Revoked,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::SystemMasters => {
                f.write_str("system:masters is never allowed through the front")
            }
            Refusal::SystemGroup => {
                f.write_str("a system: group is never allowed through the front")
            }
            Refusal::Ambiguous(a) => a.fmt(f),
            Refusal::NotAllowed => f.write_str("subject not in the cluster's allow-list"),
            Refusal::Revoked => f.write_str("certificate on the deny-list"),
        }
    }
}

impl Refusal {
    /// The audit line's and the metric's `reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::SystemMasters => "system_masters",
            Refusal::SystemGroup => "system_group",
            Refusal::Ambiguous(a) => a.reason(),
            Refusal::NotAllowed => "not_allowed",
            Refusal::Revoked => "revoked",
        }
    }
}

/// The decision, in this order: cluster-admin, another system group, a subject read two ways,
/// revoked, allowed. Allowed means every group the certificate carries is allowed with its CN:
/// a group beyond them could be bound to more than the runner's role.
pub fn decide(rule: &ClusterRule, client: &Client, deny: &DenyList) -> Result<(), Refusal> {
    if client.organizations.iter().any(|o| o == "system:masters") {
        return Err(Refusal::SystemMasters);
    }
    if client
        .organizations
        .iter()
        .any(|o| o.starts_with("system:"))
    {
        return Err(Refusal::SystemGroup);
    }
    if let Some(a) = &client.ambiguity {
        return Err(Refusal::Ambiguous(a.clone()));
    }
    if deny.contains(&rule.name, &client.serial) {
        return Err(Refusal::Revoked);
    }
    let allowed_with = |o: &String| {
        rule.allow
            .iter()
            .any(|s| s.common_name == client.common_name && s.organization == *o)
    };
    if !client.organizations.is_empty() && client.organizations.iter().all(allowed_with) {
        Ok(())
    } else {
        Err(Refusal::NotAllowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Subject;

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
            ambiguity: None,
            not_after: time::OffsetDateTime::UNIX_EPOCH,
            not_before: time::OffsetDateTime::UNIX_EPOCH,
            text: String::new(),
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
        // A group beyond the allowed ones, even beside an allowed one.
        let extra = client("gitlab-runner", &["gitlab-runner", "developers"], "1a");
        assert_eq!(decide(&rule(), &extra, &deny), Err(Refusal::NotAllowed));
        let nodes = client("gitlab-runner", &["gitlab-runner", "system:nodes"], "1a");
        assert_eq!(decide(&rule(), &nodes, &deny), Err(Refusal::SystemGroup));
        let revoked = DenyList::parse("1A\n").unwrap();
        assert_eq!(decide(&rule(), &ok, &revoked), Err(Refusal::Revoked));
        let elsewhere = DenyList::parse("other 1A\n").unwrap();
        assert_eq!(
            decide(&rule(), &ok, &elsewhere),
            Ok(()),
            "another cluster's serial"
        );
        let here = DenyList::parse("ci 1A\n").unwrap();
        assert_eq!(decide(&rule(), &ok, &here), Err(Refusal::Revoked));
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

    #[test]
    fn an_ambiguous_subject_is_refused_even_when_allowed() {
        let deny = DenyList::default();
        let mut c = client("gitlab-runner", &["gitlab-runner"], "3");
        c.ambiguity = Some(Ambiguity::SeveralCommonNames(vec![
            "tenant-admin".into(),
            "gitlab-runner".into(),
        ]));
        c.text = "O=gitlab-runner, CN=tenant-admin, CN=gitlab-runner".into();
        let e = decide(&rule(), &c, &deny).unwrap_err();
        assert_eq!(e.reason(), "subject_several_cn");
        assert!(
            c.subject().contains("CN=tenant-admin"),
            "the audit shows every CN"
        );
    }

    #[test]
    fn the_audit_subject_escapes_what_could_forge_a_group() {
        let c = client("a, O=system:masters", &["g\nx"], "1");
        assert_eq!(c.subject(), "CN=a\\, O\\=system:masters, O=g\\0ax");
        assert_ne!(
            c.subject(),
            client("a", &["system:masters", "g"], "1").subject()
        );
    }
}
