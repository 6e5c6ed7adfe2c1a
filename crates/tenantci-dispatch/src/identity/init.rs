//! `dispatch init`'s part for executor identity, pure: the `--spiffe-*` flags checked and the
//! `[identity]` section they give. Without `--spiffe-trust-domain` identity is off, and the
//! other `--spiffe-*` flags are refused rather than ignored.

use crate::identity::settings::{Identity, defaults};
use tenantci_core::{Error, Result};

/// The flags as typed.
#[derive(Debug, Clone, Default)]
pub struct IdentityInputs {
    /// `--spiffe-trust-domain`; None: identity off, and every other flag here refused.
    pub trust_domain: Option<String>,
    /// `--spiffe-id-template`; None: the default.
    pub id_template: Option<String>,
    /// `--spiffe-parent-template`; None: the default.
    pub parent_template: Option<String>,
    /// SPIRE's name for the cluster; None: the tenant cluster's name.
    pub cluster: Option<String>,
    /// `--spiffe-facade-id`; None: the dispatcher ServiceAccount's ID in the namespace.
    pub facade_id: Option<String>,
    /// `--spiffe-source` (`workload-api`, `files:DIR`); None: `workload-api`.
    pub source: Option<String>,
    /// The SPIRE Server API (HOST:PORT) for VM executors' SVIDs.
    pub server_address: Option<String>,
    /// `--spiffe-server-id`: the SPIRE server's SPIFFE ID; None:
    /// `spiffe://<trust domain>/spire/server`.
    pub server_id: Option<String>,
    /// The entries' className; None: the hardened chart's default.
    pub class_name: Option<String>,
}

/// The `[identity]` section (None: off), checked. `namespace` gives the default facade ID,
/// `tenant_cluster` the default SPIRE cluster name; with `vm_on` (the VM backend) the SPIRE
/// Server API is required: the dispatcher mints the sandboxes' SVIDs there.
pub fn section(
    i: &IdentityInputs,
    namespace: &str,
    tenant_cluster: &str,
    vm_on: bool,
) -> Result<Option<Identity>> {
    let Some(td) = &i.trust_domain else {
        let stray = [
            ("--spiffe-id-template", i.id_template.is_some()),
            ("--spiffe-parent-template", i.parent_template.is_some()),
            ("--spiffe-cluster", i.cluster.is_some()),
            ("--spiffe-facade-id", i.facade_id.is_some()),
            ("--spiffe-source", i.source.is_some()),
            ("--spiffe-server", i.server_address.is_some()),
            ("--spiffe-server-id", i.server_id.is_some()),
            ("--spiffe-class-name", i.class_name.is_some()),
        ];
        if let Some((flag, _)) = stray.iter().find(|(_, given)| *given) {
            return Err(Error::bad_input(format!("{flag} is given without --spiffe-trust-domain"))
                .hint("pass --spiffe-trust-domain DOMAIN to turn executor identity on, or leave the --spiffe-* flags out"));
        }
        return Ok(None);
    };
    if vm_on && i.server_address.is_none() {
        return Err(Error::bad_input("--spiffe-trust-domain is given with --opensandbox-url but without --spiffe-server; VM executors run no SPIRE agent, so the dispatcher mints their SVIDs at the SPIRE Server API")
            .hint("pass --spiffe-server HOST:PORT (e.g. spire-server.spire:8081) and list the dispatcher's SPIFFE ID in the server's admin_ids (docs/runbooks/gitea-dispatcher.md, executor identity)"));
    }
    let identity = Identity {
        trust_domain: td.clone(),
        id_template: i.id_template.clone().unwrap_or_else(defaults::id_template),
        parent_template: i
            .parent_template
            .clone()
            .unwrap_or_else(defaults::parent_template),
        cluster: Some(
            i.cluster
                .clone()
                .unwrap_or_else(|| tenant_cluster.to_string()),
        ),
        facade_id: i
            .facade_id
            .clone()
            .unwrap_or_else(|| defaults::facade_id(td, namespace)),
        source: i.source.clone().unwrap_or_else(defaults::source),
        server_address: i.server_address.clone(),
        server_id: i.server_id.clone(),
        class_name: i.class_name.clone().unwrap_or_else(defaults::class_name),
    };
    identity.validate().map_err(|e| {
        Error::bad_input(format!("the executor identity settings {e}"))
            .hint("fix --spiffe-trust-domain, --spiffe-id-template, --spiffe-parent-template, --spiffe-cluster, --spiffe-facade-id --spiffe-source, --spiffe-server, --spiffe-server-id or --spiffe-class-name (docs/cli.md)")
    })?;
    Ok(Some(identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on() -> IdentityInputs {
        IdentityInputs {
            trust_domain: Some("example.org".into()),
            ..Default::default()
        }
    }

    #[test]
    fn without_a_trust_domain_identity_is_off_and_stray_flags_are_refused() {
        assert_eq!(
            section(&IdentityInputs::default(), "ns", "ci", false).unwrap(),
            None
        );
        let stray = IdentityInputs {
            source: Some("workload-api".into()),
            ..Default::default()
        };
        let e = section(&stray, "ns", "ci", false).unwrap_err();
        assert!(e.message().contains("--spiffe-source"), "{}", e.message());
    }

    #[test]
    fn a_trust_domain_gives_the_defaults() {
        let i = section(&on(), "dynamic-runner", "ci", false)
            .unwrap()
            .unwrap();
        assert_eq!(i.id_template, defaults::id_template());
        assert_eq!(
            i.facade_id,
            "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher"
        );
        assert_eq!(i.source, "workload-api");
    }

    #[test]
    fn bad_flags_and_the_vm_backend_without_the_spire_server_are_refused() {
        let mut i = on();
        i.source = Some("files:".into());
        assert!(
            section(&i, "ns", "ci", false)
                .unwrap_err()
                .message()
                .contains("identity.source")
        );
        let mut i = on();
        i.id_template = Some("spiffe://{trust_domain}/{repository}/{nope}".into());
        assert!(
            section(&i, "ns", "ci", false)
                .unwrap_err()
                .message()
                .contains("identity.id_template")
        );
        assert!(
            section(&on(), "ns", "ci", true)
                .unwrap_err()
                .message()
                .contains("--spiffe-server")
        );
        let mut i = on();
        i.server_address = Some("spire-server.spire:8081".into());
        let s = section(&i, "ns", "ci", true).unwrap().unwrap();
        assert_eq!(s.server_address.as_deref(), Some("spire-server.spire:8081"));
        i.server_address = Some("spire-server".into());
        let e = section(&i, "ns", "ci", true).unwrap_err();
        assert!(
            e.message().contains("identity.server_address"),
            "{}",
            e.message()
        );
    }
}
