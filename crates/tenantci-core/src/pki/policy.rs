//! What a runner credential may be: the refusals of the credential contract (docs/cli.md,
//! `tenantci credential mint`).
//! Pure functions over the request, so every refusal is unit-tested without touching disk.

use std::time::Duration;

use time::OffsetDateTime;

use super::inspect::rfc3339;
use crate::input::shown;
use crate::{Error, Result};

/// Default lifetime of a minted credential (the runbook's `720h`).
pub const DEFAULT_VALID_FOR: Duration = Duration::from_secs(720 * 3600);

/// Checks the common name (the Kubernetes user).
pub fn check_common_name(cn: &str) -> Result<()> {
    if cn.trim().is_empty() {
        return Err(Error::bad_input("the common name is empty").hint(
            "pass --common-name (SOCIALWEB_TENANTCREDENTIAL_COMMON_NAME), e.g. `gitlab-runner`",
        ));
    }
    if cn.starts_with("system:") {
        return Err(Error::bad_input(format!(
            "the common name `{}` starts with `system:`, which is reserved for Kubernetes' own identities",
            shown(cn)
        ))
        .hint("use a plain user name such as `gitlab-runner`; a scoped runner must never act as a system identity"));
    }
    check_printable("common name", cn)
}

/// Checks the organizations (the Kubernetes groups). At least one is required: the RBAC
/// binding names a group, and a credential without one would authenticate into no binding.
pub fn check_organizations(orgs: &[String]) -> Result<()> {
    if orgs.is_empty() {
        return Err(Error::bad_input("no organization given; the organizations are the credential's Kubernetes groups")
            .hint("pass --organization (SOCIALWEB_TENANTCREDENTIAL_ORGANIZATIONS), e.g. `gitlab-runner`, the group your ClusterRoleBinding names"));
    }
    for org in orgs {
        if org.trim().is_empty() {
            return Err(Error::bad_input("an organization is empty")
                .hint("remove the empty entry from --organization / SOCIALWEB_TENANTCREDENTIAL_ORGANIZATIONS (e.g. a trailing comma)"));
        }
        if org == "system:masters" {
            return Err(Error::bad_input(
                "the organization `system:masters` would make this credential cluster-admin on the tenant cluster, bypassing RBAC and making every rule decorative",
            )
            .hint("use the group your ClusterRoleBinding names, e.g. `gitlab-runner`; the gateway's admin is the only system:masters identity"));
        }
        if org.starts_with("system:") {
            return Err(Error::bad_input(format!(
                "the organization `{}` starts with `system:`, which is reserved for Kubernetes' own groups",
                shown(org)
            ))
            .hint("use the group your ClusterRoleBinding names, e.g. `gitlab-runner`"));
        }
        check_printable("organization", org)?;
    }
    Ok(())
}

fn check_printable(what: &str, value: &str) -> Result<()> {
    if value.chars().any(|c| c.is_control()) || value.len() > 64 {
        return Err(Error::bad_input(format!(
            "the {what} {:?} has control characters or is longer than 64 bytes",
            shown(value)
        ))
        .hint("use a short name of letters, digits, `-`, `.` or `:`"));
    }
    Ok(())
}

/// Parses VALID_FOR: a positive Go duration.
pub fn parse_valid_for(input: &str) -> Result<Duration> {
    crate::duration::parse_positive(input).map_err(|e| {
        Error::bad_input(format!("the validity `{input}` {e}"))
            .hint("pass --valid-for (SOCIALWEB_TENANTCREDENTIAL_VALID_FOR) as a positive Go duration such as `720h`, `90m` or `1h30m`")
    })
}

/// A credential must not outlive the CA that signed it: a client would present a certificate
/// whose chain is already invalid for part of its life.
pub fn check_within_ca(
    valid_for: Duration,
    now: OffsetDateTime,
    ca_not_after: OffsetDateTime,
) -> Result<()> {
    let ends = time::Duration::try_from(valid_for)
        .ok()
        .and_then(|d| now.checked_add(d));
    match ends {
        Some(ends) if ends <= ca_not_after => Ok(()),
        _ => Err(Error::bad_input(format!(
            "the validity {} would end after the ClientCA expires at {}",
            crate::duration::format(valid_for),
            rfc3339(ca_not_after)
        ))
        .hint("pass a shorter --valid-for (SOCIALWEB_TENANTCREDENTIAL_VALID_FOR)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orgs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn refuses_reserved_and_empty_names() {
        for cn in [
            "",
            "  ",
            "system:admin",
            "system:serviceaccount:x:y",
            "a\nb",
        ] {
            let e = check_common_name(cn).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{cn:?}");
        }
        assert!(check_common_name("gitlab-runner").is_ok());
    }

    #[test]
    fn refuses_system_masters_saying_why() {
        let e = check_organizations(&orgs(&["gitlab-runner", "system:masters"])).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message().contains("cluster-admin"), "{}", e.message());
        assert!(e.message().contains("decorative"), "{}", e.message());
    }

    #[test]
    fn refuses_bad_organizations() {
        for bad in [
            vec![],
            orgs(&[""]),
            orgs(&["ok", " "]),
            orgs(&["system:nodes"]),
        ] {
            assert_eq!(
                check_organizations(&bad).unwrap_err().exit_code(),
                2,
                "{bad:?}"
            );
        }
        assert!(check_organizations(&orgs(&["gitlab-runner", "ci"])).is_ok());
    }

    #[test]
    fn validity_must_parse_be_positive_and_end_before_the_ca() {
        for bad in ["", "0", "0s", "-1h", "720", "30d", "abc", "1h30"] {
            assert_eq!(parse_valid_for(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
        assert_eq!(parse_valid_for("1h30m").unwrap(), Duration::from_secs(5400));
        let now = OffsetDateTime::now_utc();
        let ca_end = now + time::Duration::days(10);
        assert!(check_within_ca(Duration::from_secs(3600), now, ca_end).is_ok());
        let e = check_within_ca(Duration::from_secs(11 * 86400), now, ca_end).unwrap_err();
        assert!(e.message().contains("ClientCA"), "{}", e.message());
    }
}
